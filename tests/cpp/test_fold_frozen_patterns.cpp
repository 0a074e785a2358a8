// FoldFrozenPatterns: PyTorch's OptimizeFrozenGraph, each pass run only where the graph holds what it rewrites. The
// result is OptimizeFrozenGraph's, graph text for graph text, where a pass fires and where none can.
#include <gtest/gtest.h>
#include <torch/csrc/jit/passes/frozen_graph_optimizations.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "jit/upstream/fold_frozen_patterns.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

// Runs FoldFrozenPatterns on `graph` and OptimizeFrozenGraph on a copy made first, expects the same graph text,
// and returns what FoldFrozenPatterns returned.
bool foldLikeOptimizeFrozenGraph(std::shared_ptr<torch::jit::Graph>& graph) {
  std::shared_ptr<torch::jit::Graph> reference = graph->copy();
  std::shared_ptr<torch::jit::Graph> ours = graph->copy();
  torch::jit::OptimizeFrozenGraph(reference, /*optimize_numerics=*/true);
  const bool changed = FoldFrozenPatterns(ours);
  EXPECT_EQ(ours->toString(), reference->toString());
  ours->lint();
  graph = ours;
  return changed;
}

constexpr const char* kConvBatchNormAdd = R"IR(
    graph(%x : Tensor, %w : Tensor, %gamma : Tensor, %beta : Tensor, %mean : Tensor, %var : Tensor, %shift : Tensor):
      %none : NoneType = prim::Constant()
      %false : bool = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %zero : int = prim::Constant[value=0]()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %momentum : float = prim::Constant[value=0.10000000000000001]()
      %ones : int[] = prim::Constant[value=[1, 1]]()
      %zeros : int[] = prim::Constant[value=[0, 0]]()
      %c : Tensor = aten::conv2d(%x, %w, %none, %ones, %zeros, %ones, %one)
      %n : Tensor = aten::batch_norm(%c, %gamma, %beta, %mean, %var, %false, %momentum, %eps, %false)
      %a : Tensor = aten::add(%n, %shift, %one)
      %r : Tensor = aten::relu(%a)
      return (%r))IR";

TEST(FoldFrozenPatternsTest, FoldsABatchNormAndAnAddIntoTheConvolutionLikeOptimizeFrozenGraph) {
  auto graph = parseGraph(kConvBatchNormAdd);
  // Inputs 1-6 become constants; each removal shifts the next one to index 1.
  inlineInputAsConstant(*graph, 1, torch::randn({4, 3, 3, 3}));
  inlineInputAsConstant(*graph, 1, torch::rand({4}) + 0.5);
  inlineInputAsConstant(*graph, 1, torch::randn({4}));
  inlineInputAsConstant(*graph, 1, torch::randn({4}));
  inlineInputAsConstant(*graph, 1, torch::rand({4}) + 0.5);
  inlineInputAsConstant(*graph, 1, torch::randn({1, 4, 1, 1}));
  const at::Tensor x = torch::randn({2, 3, 8, 8});
  const auto before = runGraph(graph, {x});
  EXPECT_TRUE(foldLikeOptimizeFrozenGraph(graph));
  FileCheck()
      .check("aten::conv2d")
      ->check_not("aten::batch_norm")
      ->check_not("aten::add")
      ->check("aten::relu")
      ->run(*graph);
  EXPECT_TRUE(torch::allclose(before[0].toTensor(), runGraph(graph, {x})[0].toTensor(), 1e-4, 1e-5));
}

// FrozenConcatLinear runs (two linears read one input) but concatenates CUDA weights only.
TEST(FoldFrozenPatternsTest, DropsInferenceDropoutAndKeepsCpuLinearsOfOneInputLikeOptimizeFrozenGraph) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %w1 : Tensor, %w2 : Tensor):
      %none : NoneType = prim::Constant()
      %false : bool = prim::Constant[value=0]()
      %p : float = prim::Constant[value=0.10000000000000001]()
      %d : Tensor = aten::dropout(%x, %p, %false)
      %a : Tensor = aten::linear(%d, %w1, %none)
      %b : Tensor = aten::linear(%d, %w2, %none)
      %s : Tensor = aten::mul(%a, %b)
      return (%s))IR");
  inlineInputAsConstant(*graph, 1, torch::randn({5, 4}));
  inlineInputAsConstant(*graph, 1, torch::randn({5, 4}));
  const at::Tensor x = torch::randn({3, 4});
  const auto before = runGraph(graph, {x});
  EXPECT_TRUE(foldLikeOptimizeFrozenGraph(graph));
  FileCheck().check_not("aten::dropout")->check_count("aten::linear", 2, /*exactly=*/true)->run(*graph);
  EXPECT_TRUE(torch::allclose(before[0].toTensor(), runGraph(graph, {x})[0].toTensor(), 1e-5, 1e-6));
}

TEST(FoldFrozenPatternsTest, GraphWithNothingToFoldOnlyLosesItsDeadCode) {
  // A linear feeding an add and a batch norm fed by no convolution or linear: nothing any pass folds; the dead
  // softmax goes, as OptimizeFrozenGraph's sweeps remove it.
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %w : Tensor, %gamma : Tensor, %beta : Tensor, %mean : Tensor, %var : Tensor):
      %none : NoneType = prim::Constant()
      %false : bool = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %momentum : float = prim::Constant[value=0.10000000000000001]()
      %n : Tensor = aten::batch_norm(%x, %gamma, %beta, %mean, %var, %false, %momentum, %eps, %false)
      %y : Tensor = aten::linear(%n, %w, %none)
      %a : Tensor = aten::add(%y, %x, %one)
      %dead : Tensor = aten::softmax(%a, %one, %none)
      return (%a))IR");
  EXPECT_FALSE(foldLikeOptimizeFrozenGraph(graph));
  FileCheck()
      .check("aten::batch_norm")
      ->check("aten::linear")
      ->check("aten::add")
      ->check_not("aten::softmax")
      ->run(*graph);
}

TEST(FoldFrozenPatternsTest, TrainingModeDropoutStaysAndCountsAsNoChange) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %training : bool):
      %p : float = prim::Constant[value=0.10000000000000001]()
      %d : Tensor = aten::dropout(%x, %p, %training)
      return (%d))IR");
  EXPECT_FALSE(foldLikeOptimizeFrozenGraph(graph));
  FileCheck().check("aten::dropout")->run(*graph);
}

} // namespace
} // namespace torch_mp::jit
