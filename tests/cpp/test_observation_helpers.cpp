// Helpers that read the observation, on their own: SpecializeDtypeQueries (a dtype query of an observed tensor
// becomes the constant it returned, firing and non-firing), estimateFlops (the heavy ops' FLOPs at the
// observed sizes; other ops and unobserved operands count 0) and correspondingValues (each value of a graph to its
// place in a copy).
#include <gtest/gtest.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <map>
#include <string>
#include <vector>

#include "jit/ir/ir_utils.h"
#include "jit/plan/flop_estimate.h"
#include "jit/prepare/specialize_dtype_queries.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

ObservedValues observe(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<c10::IValue>& inputs) {
  return observeValues(graph, inputs).values;
}

TEST(SpecializeDtypeQueriesTest, AQueryOfAnObservedTensorReadsTheObservedDtype) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      %none : NoneType = prim::Constant()
      %false : bool = prim::Constant[value=0]()
      %d : int = prim::dtype(%x)
      %y : Tensor = aten::to(%x, %d, %false, %false, %none)
      return (%y))IR");
  const std::vector<c10::IValue> inputs{torch::randn({2, 3})};
  const auto before = runGraph(graph, inputs);
  EXPECT_TRUE(SpecializeDtypeQueries(graph, observe(graph, inputs)));
  graph->lint();
  FileCheck().check_not("prim::dtype")->check("int = prim::Constant[value=6]")->run(*graph);
  expectSameOutputs(before, runGraph(graph, inputs));
}

TEST(SpecializeDtypeQueriesTest, AQueryOfAValueNeverObservedStays) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %flag : bool):
      %r : int = prim::If(%flag)
        block0():
          %t : Tensor = aten::relu(%x)
          %d : int = prim::dtype(%t)
          -> (%d)
        block1():
          %z : int = prim::Constant[value=0]()
          -> (%z)
      return (%r))IR");
  auto copy = graph->copy();
  // the queried value is computed in the branch the inputs did not take: it was never observed
  EXPECT_FALSE(SpecializeDtypeQueries(graph, observe(graph, {torch::randn({2}), false})));
  EXPECT_EQ(graph->toString(), copy->toString());
}

TEST(EstimateFlopsTest, HeavyOpsCountMultiplyAddsAtTheObservedSizes) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor, %w : Tensor):
      %m : Tensor = aten::mm(%a, %b)
      %r : Tensor = aten::relu(%m)
      %none : NoneType = prim::Constant()
      %l : Tensor = aten::linear(%r, %w, %none)
      return (%l))IR");
  const ObservedValues observed =
      observe(graph, {torch::randn({4, 6}), torch::randn({6, 5}), torch::randn({7, 5})});
  std::vector<int64_t> flops;
  for (const torch::jit::Node* node : graph->nodes()) {
    if (node->kind() != c10::prim::Constant) {
      flops.push_back(estimateFlops(node, observed));
    }
  }
  // two FLOPs per multiply-add: mm, relu (memory-bound), linear
  EXPECT_EQ(flops, (std::vector<int64_t>{2 * 4 * 6 * 5, 0, 2 * 4 * 5 * 7}));
}

TEST(EstimateFlopsTest, AnUnobservedOperandCountsZero) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor):
      %m : Tensor = aten::mm(%a, %b)
      return (%m))IR");
  EXPECT_EQ(estimateFlops(graph->nodes().front(), ObservedValues{}), 0);
}

// Every 2-D weight of the params list once per step and batch row: for an LSTM (hx a list of states, then params)
// and a GRU (hx one tensor, then params), whose weights list is the same third input.
TEST(EstimateFlopsTest, RecurrentOpsCountTheirWeightsListOncePerStepAndRow) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %h : Tensor, %c : Tensor, %wi : Tensor, %wh : Tensor, %bi : Tensor, %bh : Tensor,
          %gwi : Tensor, %gwh : Tensor, %gbi : Tensor, %gbh : Tensor):
      %true : bool = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %zero : float = prim::Constant[value=0.]()
      %states : Tensor[] = prim::ListConstruct(%h, %c)
      %params : Tensor[] = prim::ListConstruct(%wi, %wh, %bi, %bh)
      %y : Tensor, %hn : Tensor, %cn : Tensor = aten::lstm(%x, %states, %params, %true, %one, %zero, %false, %false, %true)
      %gparams : Tensor[] = prim::ListConstruct(%gwi, %gwh, %gbi, %gbh)
      %g : Tensor, %gn : Tensor = aten::gru(%x, %h, %gparams, %true, %one, %zero, %false, %false, %true)
      return (%y, %g))IR");
  const int64_t batch = 2, steps = 5, width = 3, hidden = 4;
  auto weights = [&](int64_t gates) {
    return std::vector<c10::IValue>{torch::randn({gates * hidden, width}), torch::randn({gates * hidden, hidden}),
                                    torch::randn({gates * hidden}), torch::randn({gates * hidden})};
  };
  std::vector<c10::IValue> inputs{torch::randn({batch, steps, width}), torch::zeros({1, batch, hidden}),
                                  torch::zeros({1, batch, hidden})};
  for (const std::vector<c10::IValue>& list : {weights(4), weights(3)}) {
    inputs.insert(inputs.end(), list.begin(), list.end());
  }
  const ObservedValues observed = observe(graph, inputs);
  // the biases are 1-D: not counted
  const std::map<std::string, int64_t> perRow{{"aten::lstm", 2 * (4 * hidden * width + 4 * hidden * hidden)},
                                              {"aten::gru", 2 * (3 * hidden * width + 3 * hidden * hidden)}};
  int counted = 0;
  for (const torch::jit::Node* node : graph->nodes()) {
    if (auto it = perRow.find(node->kind().toQualString()); it != perRow.end()) {
      EXPECT_EQ(estimateFlops(node, observed), batch * steps * it->second) << it->first;
      ++counted;
    }
  }
  EXPECT_EQ(counted, 2);
}

TEST(CorrespondingValuesTest, EveryValueMapsToItsPlaceInACopy) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %flag : bool):
      %r : Tensor = prim::If(%flag)
        block0():
          %x : Tensor = aten::relu(%a)
          -> (%x)
        block1():
          %y : Tensor = aten::neg(%a)
          -> (%y)
      %s : Tensor = aten::exp(%r)
      return (%s))IR");
  auto copy = graph->copy();
  const auto corresponding = correspondingValues(*graph, *copy);
  size_t values = graph->inputs().size();
  forEachNode(graph->block(), [&](torch::jit::Node* node) { values += node->outputs().size(); });
  EXPECT_EQ(corresponding.size(), values);
  for (const auto& [original, copied] : corresponding) {
    EXPECT_EQ(copied->owningGraph(), copy.get());
    EXPECT_EQ(original->debugName(), copied->debugName());
    EXPECT_EQ(original->node()->kind(), copied->node()->kind());
  }
}

} // namespace
} // namespace torch_mp::jit
