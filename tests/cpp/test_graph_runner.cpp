// GraphRunner: runs a graph node by node as the interpreter does, shows each value to a visitor (a loop body's once
// per iteration), frees each value after its last reader, and says which graphs it leaves to the interpreter;
// runGraphOnce runs those with Code.
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>

#include <map>
#include <string>

#include <torch/csrc/jit/ir/irparser.h>

#include "jit/upstream/graph_runner.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Value;

// A graph from IR and its values by their names in the IR (the parser keeps only some names on the values).
std::pair<std::shared_ptr<torch::jit::Graph>, std::unordered_map<std::string, Value*>> parseNamed(
    const std::string& ir) {
  auto graph = std::make_shared<torch::jit::Graph>();
  std::unordered_map<std::string, Value*> named;
  torch::jit::parseIR(ir, graph.get(), named);
  return {graph, named};
}

// Branches, a loop with an early exit and carried values, lists, tuples and dicts built and taken apart.
constexpr const char* kControlFlowAndContainers = R"IR(
    graph(%x : Tensor, %flag : bool, %limit : int):
      %zero : int = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %ten : int = prim::Constant[value=10]()
      %true : bool = prim::Constant[value=1]()
      %key : str = prim::Constant[value="sum"]()
      %b : Tensor = prim::If(%flag)
        block0():
          %r : Tensor = aten::relu(%x)
          -> (%r)
        block1():
          %n : Tensor = aten::neg(%x)
          -> (%n)
      %total : Tensor, %steps : int = prim::Loop(%ten, %true, %b, %zero)
        block0(%i : int, %acc : Tensor, %count : int):
          %next : Tensor = aten::add(%acc, %x, %one)
          %more : int = aten::add(%count, %one)
          %go : bool = aten::lt(%more, %limit)
          -> (%go, %next, %more)
      %pair : Tensor[] = prim::ListConstruct(%total, %b)
      %first : Tensor, %second : Tensor = prim::ListUnpack(%pair)
      %stacked : Tensor = aten::stack(%pair, %zero)
      %named : Dict(str, Tensor) = prim::DictConstruct(%key, %first)
      %summed : Tensor = aten::__getitem__(%named, %key)
      %out : (Tensor, Tensor, int) = prim::TupleConstruct(%summed, %stacked, %steps)
      return (%out, %second))IR";

TEST(GraphRunnerTest, RunsBranchesLoopsAndContainersLikeTheInterpreterAndShowsEachIteration) {
  auto [graph, named] = parseNamed(kControlFlowAndContainers);
  ASSERT_TRUE(GraphRunner::canRun(*graph));
  const at::Tensor x = torch::randn({3});
  for (const bool flag : {true, false}) {
    SCOPED_TRACE(flag);
    std::map<const Value*, int> visits;
    const GraphRunner runner(*graph);
    const torch::jit::Stack outputs = runner.run(
        {x, flag, int64_t{4}},
        [&](const Value* value, const c10::IValue&) { ++visits[value]; });
    const auto expected = runGraph(graph, {x, flag, int64_t{4}});
    ASSERT_EQ(outputs.size(), expected.size());
    const auto& tuple = outputs[0].toTupleRef().elements();
    const auto& expectedTuple = expected[0].toTupleRef().elements();
    EXPECT_TRUE(torch::equal(tuple[0].toTensor(), expectedTuple[0].toTensor()));
    EXPECT_TRUE(torch::equal(tuple[1].toTensor(), expectedTuple[1].toTensor()));
    EXPECT_EQ(tuple[2].toInt(), 4);  // the loop stopped when its count reached the limit, not after 10
    EXPECT_TRUE(torch::equal(outputs[1].toTensor(), expected[1].toTensor()));
    EXPECT_EQ(visits[named.at("next")], 4);
    EXPECT_EQ(visits[named.at("acc")], 4);
    EXPECT_EQ(visits[named.at(flag ? "r" : "n")], 1);
    EXPECT_EQ(visits.count(named.at(flag ? "n" : "r")), 0u);  // the branch not taken
    EXPECT_EQ(visits[named.at("x")], 1);
  }
}

TEST(GraphRunnerTest, GivesAVarargOperationItsInputCountAsTheInterpreterDoes) {
  auto graph = parseGraph(R"IR(
    graph(%a : int, %b : float):
      %pattern : str = prim::Constant[value="{} and {}"]()
      %text : str = aten::format(%pattern, %a, %b)
      return (%text))IR");
  ASSERT_TRUE(GraphRunner::canRun(*graph));
  const torch::jit::Stack outputs =
      GraphRunner(*graph).run({int64_t{3}, 0.5}, [](const Value*, const c10::IValue&) {});
  EXPECT_EQ(outputs[0].toStringRef(), runGraph(graph, {int64_t{3}, 0.5})[0].toStringRef());
  EXPECT_EQ(outputs[0].toStringRef(), "3 and 0.5");
}

TEST(GraphRunnerTest, ReadsModuleAttributes) {
  torch::jit::Module module("Net");
  module.register_parameter("w", torch::randn({4, 4}), /*is_buffer=*/false);
  module.define(R"(
    def forward(self, x):
        return torch.matmul(x, self.w)
  )");
  const auto graph = module.get_method("forward").graph();
  ASSERT_TRUE(GraphRunner::canRun(*graph));
  const at::Tensor x = torch::randn({2, 4});
  const torch::jit::Stack outputs =
      GraphRunner(*graph).run({module._ivalue(), x}, [](const Value*, const c10::IValue&) {});
  EXPECT_TRUE(torch::equal(outputs[0].toTensor(), torch::matmul(x, module.attr("w").toTensor())));
}

TEST(GraphRunnerTest, AValueGoesOnceItsLastReaderHasRun) {
  auto [graph, named] = parseNamed(R"IR(
    graph(%x : Tensor):
      %a : Tensor = aten::relu(%x)
      %b : Tensor = aten::neg(%a)
      %c : Tensor = aten::neg(%b)
      %d : Tensor = aten::neg(%c)
      return (%d))IR");
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> first(
      c10::make_intrusive<c10::TensorImpl, c10::UndefinedTensorImpl>(
          c10::DispatchKeySet(), caffe2::TypeMeta(), std::nullopt));
  bool firstAliveAtLast = true;
  GraphRunner(*graph).run({torch::randn({8})}, [&](const Value* value, const c10::IValue& held) {
    if (value == named.at("a")) {
      first = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(held.toTensor().getIntrusivePtr());
    } else if (value == named.at("d")) {
      firstAliveAtLast = !first.expired();
    }
  });
  EXPECT_FALSE(firstAliveAtLast);  // %a's last reader, %b's neg, ran two steps earlier
}

TEST(GraphRunnerTest, LeavesTheInterpretersSpecialCasesToItAndRunGraphOnceRunsThemThere) {
  auto uninitialized = parseGraph(R"IR(
    graph(%x : Tensor):
      %u : Tensor = prim::Uninitialized()
      %y : Tensor = aten::relu(%x)
      return (%y, %u))IR");
  EXPECT_FALSE(GraphRunner::canRun(*uninitialized));
  const at::Tensor x = torch::randn({5});
  EXPECT_TRUE(torch::equal(runGraphOnce(uninitialized, {x})[0].toTensor(), torch::relu(x)));
  auto calls = parseGraph(R"IR(
    graph(%x : Tensor, %self : Tensor):
      %y : Tensor = prim::CallMethod[name="forward"](%self, %x)
      return (%y))IR");
  EXPECT_FALSE(GraphRunner::canRun(*calls));
}

} // namespace
} // namespace torch_mp::jit
