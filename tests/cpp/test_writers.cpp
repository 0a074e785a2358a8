// Writers: which nodes may write, WriterQuery's answers against AliasDb's own, and dead-code elimination with and
// without writes.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "jit/ir/overload_facts.h"
#include "jit/ir/writers.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Node;
using torch::jit::testing::FileCheck;

// Pure tensor ops, views, containers, a branch and a batch norm in inference mode: nothing writes.
constexpr const char* kNoWrites = R"IR(
    graph(%x : Tensor, %w : Tensor, %c : bool):
      %none : NoneType = prim::Constant()
      %false : bool = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %shape : int[] = prim::ListConstruct(%one)
      %y : Tensor = aten::linear(%x, %w, %none)
      %v : Tensor = aten::view(%y, %shape)
      %l : Tensor[] = prim::ListConstruct(%y, %x)
      %cat : Tensor = aten::cat(%l, %one)
      %b : Tensor = aten::batch_norm(%y, %none, %none, %none, %none, %false, %eps, %eps, %false)
      %r : Tensor = prim::If(%c)
        block0():
          %t : Tensor = aten::relu(%cat)
          -> (%t)
        block1():
          -> (%v)
      return (%r, %b))IR";

// The same ops, with an in-place write to a view inside the branch.
constexpr const char* kWriteInABranch = R"IR(
    graph(%x : Tensor, %w : Tensor, %c : bool):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %shape : int[] = prim::ListConstruct(%one)
      %y : Tensor = aten::linear(%x, %w, %none)
      %v : Tensor = aten::view(%y, %shape)
      %z : Tensor = aten::relu(%x)
      %r : Tensor = prim::If(%c)
        block0():
          %t : Tensor = aten::relu_(%v)
          -> (%t)
        block1():
          -> (%z)
      return (%r, %y))IR";

std::vector<const torch::jit::Value*> allValues(torch::jit::Block* block) {
  std::vector<const torch::jit::Value*> values(block->inputs().begin(), block->inputs().end());
  for (Node* node : block->nodes()) {
    for (torch::jit::Block* sub : node->blocks()) {
      const std::vector<const torch::jit::Value*> inner = allValues(sub);
      values.insert(values.end(), inner.begin(), inner.end());
    }
    values.insert(values.end(), node->outputs().begin(), node->outputs().end());
  }
  return values;
}

Node* firstOfKind(torch::jit::Block* block, c10::Symbol kind) {
  for (Node* node : block->nodes()) {
    if (node->kind() == kind) {
      return node;
    }
    for (torch::jit::Block* sub : node->blocks()) {
      if (Node* found = firstOfKind(sub, kind)) {
        return found;
      }
    }
  }
  return nullptr;
}

TEST(WritersTest, PureOpsViewsContainersBranchesAndInferenceBatchNormDoNotWrite) {
  auto graph = parseGraph(kNoWrites);
  EXPECT_FALSE(graphMayWrite(*graph));
  for (const char* kind : {"aten::linear", "aten::view", "prim::ListConstruct", "aten::batch_norm", "prim::If"}) {
    Node* node = firstOfKind(graph->block(), c10::Symbol::fromQualString(kind));
    ASSERT_NE(node, nullptr) << kind;
    EXPECT_FALSE(mayWrite(node)) << kind;
  }
}

TEST(WritersTest, InPlaceOpsAttributeWritesAndTrainingBatchNormMayWrite) {
  auto graph = parseGraph(kWriteInABranch);
  EXPECT_TRUE(graphMayWrite(*graph));  // found inside the branch
  EXPECT_TRUE(mayWrite(firstOfKind(graph->block(), c10::aten::relu_)));
  EXPECT_FALSE(mayWrite(firstOfKind(graph->block(), c10::aten::relu)));

  auto training = parseGraph(R"IR(
    graph(%x : Tensor, %mean : Tensor, %var : Tensor, %training : bool):
      %none : NoneType = prim::Constant()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %b : Tensor = aten::batch_norm(%x, %none, %none, %mean, %var, %training, %eps, %eps, %training)
      return (%b))IR");
  EXPECT_TRUE(mayWrite(firstOfKind(training->block(), c10::aten::batch_norm)));  // the mode is not known

  auto module = torch::jit::Module("M");
  module.register_attribute("count", c10::IntType::get(), 0);
  module.define(R"JIT(
    def forward(self, x: int) -> int:
        self.count = x
        return x
  )JIT");
  auto method = module.get_method("forward").graph();
  EXPECT_TRUE(mayWrite(firstOfKind(method->block(), c10::prim::SetAttr)));
  EXPECT_TRUE(graphMayWrite(*method));
}

TEST(WritersTest, WriterQueryAnswersAsAliasDbDoes) {
  for (const char* ir : {kNoWrites, kWriteInABranch}) {
    auto graph = parseGraph(ir);
    const torch::jit::AliasDb aliasDb(graph);
    const WriterQuery writers(graph);
    int written = 0;
    for (const torch::jit::Value* value : allValues(graph->block())) {
      EXPECT_EQ(writers.hasWriters(value), aliasDb.hasWriters(value)) << value->debugName();
      written += aliasDb.hasWriters(value) ? 1 : 0;
    }
    EXPECT_EQ(written > 0, graphMayWrite(*graph));  // the second graph's view, its base and the write's result
  }
}

TEST(WritersTest, DeadCodeGoesAsPyTorchsEliminationRemovesIt) {
  // Without writes: the dead chain goes, the branch's dead output with it.
  const std::string pure = R"IR(
    graph(%x : Tensor, %c : bool):
      %dead : Tensor = aten::relu(%x)
      %dead2 : Tensor = aten::sigmoid(%dead)
      %r : Tensor, %unused : Tensor = prim::If(%c)
        block0():
          %t : Tensor = aten::tanh(%x)
          -> (%t, %t)
        block1():
          %e : Tensor = aten::exp(%x)
          -> (%x, %e)
      return (%r))IR";
  // With a write: an in-place write to a value nothing reads goes only with alias information, which ours builds.
  const std::string written = R"IR(
    graph(%x : Tensor):
      %y : Tensor = aten::relu(%x)
      %z : Tensor = aten::sigmoid_(%y)
      %w : Tensor = aten::tanh(%x)
      return (%w))IR";
  for (const std::string& ir : {pure, written}) {
    auto ours = parseGraph(ir);
    auto theirs = parseGraph(ir);
    eliminateDeadCode(ours);
    torch::jit::EliminateDeadCode(theirs);
    ours->lint();
    EXPECT_EQ(ours->toString(), theirs->toString());
  }
  auto graph = parseGraph(pure);
  eliminateDeadCode(graph);
  FileCheck().check_not("aten::relu")->check_not("aten::sigmoid")->check_not("aten::exp")->run(*graph);
  graph = parseGraph(written);
  eliminateDeadCode(graph);
  FileCheck().check_not("aten::sigmoid_")->check("aten::tanh")->run(*graph);
}

// Each node against the overloads it could match: those of its kind taking as many arguments as it has inputs.
TEST(OverloadFactsTest, AnswersOnlyWhatEveryCandidateOverloadAgreesOn) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %y : Tensor):
      %half : int = prim::Constant[value=5]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %shape : int[] = prim::ListConstruct(%one)
      %cast : Tensor = aten::to(%x, %half, %false, %false, %none)
      %sum : Tensor = aten::add(%x, %y, %one)
      %into : Tensor = aten::add(%x, %y, %one, %cast)
      %inplace : Tensor = aten::add_(%x, %y, %one)
      %view : Tensor = aten::view(%x, %shape)
      %other : Tensor = torch_mp_test::unregistered(%x)
      return (%sum, %into, %inplace, %view, %other))IR");
  std::map<std::string, const Node*> byName;  // the parser renumbers values: nodes in order
  const char* const names[] = {"shape", "cast", "sum", "into", "inplace", "view", "other"};
  size_t next = 0;
  for (const Node* each : graph->nodes()) {
    if (each->kind() != c10::prim::Constant) {
      byName[names[next++]] = each;
    }
  }
  ASSERT_EQ(next, std::size(names));
  auto node = [&](const std::string& name) { return byName.at(name); };
  OverloadFacts facts;
  EXPECT_TRUE(facts.noneWrites(node("cast")));   // seven overloads, none mutable
  EXPECT_TRUE(facts.noneWrites(node("sum")));    // add.Tensor, add.Scalar; not add.out, of four arguments
  EXPECT_FALSE(facts.noneWrites(node("into")));  // add.out writes `out`
  EXPECT_FALSE(facts.noneWrites(node("inplace")));
  EXPECT_FALSE(facts.noneWrites(node("other")));  // no overload: unknown
  EXPECT_TRUE(facts.noneAliasesArgument(node("sum"), 0));
  EXPECT_TRUE(facts.noneAliasesArgument(node("sum"), 1));
  EXPECT_FALSE(facts.noneAliasesArgument(node("sum"), 3));   // no such argument
  EXPECT_FALSE(facts.noneAliasesArgument(node("into"), 3));  // add.out's `out`
  EXPECT_FALSE(facts.noneAliasesArgument(node("cast"), 0));  // Tensor(a) self
  EXPECT_FALSE(facts.noneAliasesArgument(node("view"), 0));
  EXPECT_FALSE(facts.noneAliasesArgument(node("other"), 0));
  EXPECT_FALSE(facts.noneAliasesArgument(node("shape"), 0));
  // the same answers mayWrite gives after matching each node's own overload
  EXPECT_FALSE(mayWrite(node("cast")));
  EXPECT_FALSE(mayWrite(node("sum")));
  EXPECT_TRUE(mayWrite(node("inplace")));
}

// A graph of casts, which the passes add by the thousand: no write, found without matching their overloads, and the
// same answer mayWrite gives node by node after matching them.
TEST(WritersTest, AWriteFreePromiseAnswersForItsGraphUntilItEndsAndItsCheckFindsAnAddedWriter) {
  auto graph = parseGraph(kNoWrites);
  auto other = parseGraph(kWriteInABranch);
  {
    const WriteFreeGraph promise(graph);
    ASSERT_TRUE(promise.holds());
    EXPECT_NO_THROW(promise.check());
    EXPECT_TRUE(graphMayWrite(*other));  // only its own graph
    // A writer added meanwhile breaks the promise: the answer is the promise's, and check() finds the writer.
    Node* linear = firstOfKind(graph->block(), c10::aten::linear);
    Node* write = graph->create(c10::aten::relu_, {linear->output()});
    write->insertAfter(linear);
    EXPECT_FALSE(graphMayWrite(*graph));
    EXPECT_FALSE(WriterQuery(graph).hasWriters(linear->output()));
    EXPECT_THROW(promise.check(), c10::Error);
  }
  EXPECT_TRUE(graphMayWrite(*graph));  // walked again once the promise ended
  EXPECT_TRUE(WriterQuery(graph).hasWriters(firstOfKind(graph->block(), c10::aten::linear)->output()));

  const WriteFreeGraph none(other);  // a graph that may write gets no promise: its answers are walked
  EXPECT_FALSE(none.holds());
  EXPECT_TRUE(graphMayWrite(*other));
  EXPECT_NO_THROW(none.check());
}

TEST(WritersTest, APromiseMadeInsideAnotherReplacesItUntilItEnds) {
  auto outer = parseGraph(kNoWrites);
  auto inner = parseGraph(R"IR(
    graph(%x : Tensor):
      %y : Tensor = aten::relu(%x)
      return (%y))IR");
  const WriteFreeGraph outerPromise(outer);
  auto addWriter = [](const std::shared_ptr<torch::jit::Graph>& graph) {
    Node* relu = graph->create(c10::aten::relu_, {graph->inputs()[0]});
    relu->insertBefore(graph->return_node());
  };
  addWriter(outer);  // visible only where no promise answers for `outer`
  {
    const WriteFreeGraph innerPromise(inner);
    ASSERT_TRUE(innerPromise.holds());
    EXPECT_TRUE(graphMayWrite(*outer));
    EXPECT_FALSE(graphMayWrite(*inner));
  }
  EXPECT_FALSE(graphMayWrite(*outer));  // the outer promise answers again
  EXPECT_THROW(outerPromise.check(), c10::Error);
}

TEST(WritersTest, CastsNeverWrite) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      %half : int = prim::Constant[value=5]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %y : Tensor = aten::to(%x, %half, %false, %false, %none)
      %z : Tensor = aten::relu(%y)
      return (%z))IR");
  EXPECT_FALSE(graphMayWrite(*graph));
  EXPECT_FALSE(mayWrite(firstOfKind(graph->block(), c10::aten::to)));
}

} // namespace
} // namespace torch_mp::jit
