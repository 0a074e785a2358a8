// poolConstants and eliminateCommonSubexpressions: PyTorch's ConstantPooling and EliminateCommonSubexpression
// without alias analysis where nothing writes. The result is PyTorch's, graph text for graph text: equal scalars
// merge, equal tensors merge unless both may alias the graph's outputs, nested blocks reuse what encloses them, and a
// graph that writes gets PyTorch's pass itself.
#include <gtest/gtest.h>
#include <torch/csrc/jit/passes/common_subexpression_elimination.h>
#include <torch/csrc/jit/passes/constant_pooling.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "jit/upstream/merge_equal_nodes.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

// Pools and eliminates with ours on `graph` and with PyTorch's on a copy made first; expects the same text.
void mergeLikePyTorch(std::shared_ptr<torch::jit::Graph>& graph) {
  std::shared_ptr<torch::jit::Graph> reference = graph->copy();
  std::shared_ptr<torch::jit::Graph> ours = graph->copy();
  torch::jit::ConstantPooling(reference);
  const bool referenceChanged = torch::jit::EliminateCommonSubexpression(reference);
  poolConstants(ours);
  EXPECT_EQ(eliminateCommonSubexpressions(ours), referenceChanged);
  EXPECT_EQ(ours->toString(), reference->toString());
  ours->lint();
  graph = ours;
}

TEST(MergeEqualNodesTest, EqualScalarsAndEqualCastsMergeAndConstantsMoveToTheFront) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %flag : bool):
      %half : int = prim::Constant[value=5]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %a : Tensor = aten::to(%x, %half, %false, %false, %none)
      %half2 : int = prim::Constant[value=5]()
      %false2 : bool = prim::Constant[value=0]()
      %b : Tensor = aten::to(%x, %half2, %false2, %false2, %none)
      %y : Tensor = prim::If(%flag)
        block0():
          %half3 : int = prim::Constant[value=5]()
          %c : Tensor = aten::to(%x, %half3, %false, %false, %none)
          %d : Tensor = aten::relu(%c)
          -> (%d)
        block1():
          -> (%b)
      %s : Tensor = aten::mul(%a, %y)
      %t : Tensor = aten::mul(%b, %y)
      %u : Tensor = aten::add(%s, %t, %half)
      return (%u))IR");
  mergeLikePyTorch(graph);
  // The branch's cast stays: a cast may return %x itself, a graph input, as may the cast outside, and merging across
  // blocks needs one of the two not to alias the graph's inputs or outputs (alias analysis, built on demand).
  FileCheck()
      .check_count("prim::Constant[value=5]", 1, /*exactly=*/true)
      ->check_count("aten::to", 1, /*exactly=*/true)
      ->check("prim::If")
      ->check("aten::to")
      ->check("aten::relu")
      ->check_count("aten::mul", 1, /*exactly=*/true)
      ->run(*graph);
}

// A graph returning `returned` of `count` equal tensor constants (other objects each), the rest multiplied.
std::shared_ptr<torch::jit::Graph> equalTensorConstants(int count, int returned) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      return (%x))IR");
  const at::Tensor weight = torch::randn({4});
  torch::jit::WithInsertPoint guard(graph->return_node());
  torch::jit::Value* product = graph->inputs()[0];
  for (int i = 0; i < count; ++i) {
    torch::jit::Value* constant = graph->insertConstant(weight.clone());
    if (i < returned) {
      graph->registerOutput(constant);
    } else {
      product = graph->insert(c10::aten::mul, {product, constant});
    }
  }
  graph->registerOutput(product);
  return graph;
}

TEST(MergeEqualNodesTest, EqualTensorConstantsMergeUnlessBothAreReturned) {
  auto merged = equalTensorConstants(/*count=*/3, /*returned=*/1);
  mergeLikePyTorch(merged);
  FileCheck().check_count("prim::Constant[value=", 1, /*exactly=*/true)->run(*merged);
  auto kept = equalTensorConstants(/*count=*/2, /*returned=*/2);
  mergeLikePyTorch(kept);
  FileCheck().check_count("prim::Constant[value=", 2, /*exactly=*/true)->run(*kept);
}

// The tensor constants' hash samples their values: tensors equal to each other (clones, -0.0 and 0.0, every dtype the
// hash reads and one it does not) still meet and merge, same-shaped different ones do not, as in PyTorch's pass.
TEST(MergeEqualNodesTest, TensorConstantsMergeExactlyWhenEqual) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      return (%x))IR");
  const at::Tensor weight = torch::randn({3, 5});
  const at::Tensor transposed = torch::randn({5, 3}).t();
  const std::vector<at::Tensor> constants{
      weight,
      weight.clone(),
      weight + 1e-3,  // same shape, other values
      torch::randn({3, 5}),
      torch::zeros({3, 5}),
      torch::zeros({3, 5}).neg(),  // -0.0 == 0.0
      transposed,
      transposed.clone(),  // same strides, a copy
      torch::arange(7),
      torch::arange(7).clone(),
      torch::arange(7) * 2,
      torch::ones({2}, torch::kBool),
      torch::ones({2}, torch::kBool).clone(),
      torch::randn({2}, torch::kComplexFloat),  // not sampled: hashed by its sizes
      torch::full({6}, 2.5, torch::kHalf),
      torch::full({6}, 2.5, torch::kHalf).clone(),
      torch::full({6}, 2.5, torch::kBFloat16),  // equal values, another dtype
  };
  torch::jit::WithInsertPoint guard(graph->return_node());
  for (const at::Tensor& constant : constants) {
    graph->registerOutput(graph->insert(c10::aten::clone, {graph->insertConstant(constant)}));
  }
  mergeLikePyTorch(graph);
  // Merged: the weight's clone, -0.0 into 0.0, the transposed copy, arange's clone, the bool clone, the half clone.
  FileCheck().check_count("prim::Constant[value=", constants.size() - 6, /*exactly=*/true)->run(*graph);
}

// What makes the merges fast: same-shaped different weights hash apart. What keeps them PyTorch's: tensors at::equal
// calls equal hash alike, however their values are stored.
TEST(MergeEqualNodesTest, TensorValueHashSeparatesDifferentWeightsAndJoinsEqualOnes) {
  const at::Tensor weight = torch::randn({64, 32});
  EXPECT_NE(tensorValueHash(weight), tensorValueHash(weight + 1e-3));
  EXPECT_NE(tensorValueHash(weight), tensorValueHash(torch::randn({64, 32})));
  EXPECT_NE(tensorValueHash(torch::zeros({4})), tensorValueHash(torch::zeros({2, 2})));
  const std::vector<std::pair<at::Tensor, at::Tensor>> equalPairs{
      {weight, weight.clone()},
      {weight.t(), weight.t().contiguous()},
      {torch::zeros({5}), torch::zeros({5}).neg()},
      {torch::_neg_view(weight), weight.neg()},
      {torch::tensor({2, 1}, torch::kByte).view(torch::kBool), torch::ones({2}, torch::kBool)},
      {at::_efficientzerotensor({3}), torch::zeros({3})},
      {weight.expand({2, 64, 32}), weight.unsqueeze(0).repeat({2, 1, 1})},
  };
  for (const auto& [a, b] : equalPairs) {
    ASSERT_TRUE(at::equal(a, b));
    EXPECT_EQ(tensorValueHash(a), tensorValueHash(b)) << a.sizes() << " " << a.strides();
  }
}

TEST(MergeEqualNodesTest, EqualNodesThatBothReachTheOutputsStay) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      %zero : int = prim::Constant[value=0]()
      %a : Tensor = aten::select(%x, %zero, %zero)
      %b : Tensor = aten::select(%x, %zero, %zero)
      %c : Tensor = aten::relu(%x)
      %d : Tensor = aten::relu(%x)
      return (%a, %b, %c, %d))IR");
  mergeLikePyTorch(graph);
  FileCheck().check_count("aten::select", 2, /*exactly=*/true)->run(*graph);
}

TEST(MergeEqualNodesTest, AGraphThatWritesGetsPyTorchsPasses) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      %one : int = prim::Constant[value=1]()
      %one2 : int = prim::Constant[value=1]()
      %a : Tensor = aten::relu(%x)
      %b : Tensor = aten::relu(%x)
      %w : Tensor = aten::add_(%a, %one2, %one)
      %s : Tensor = aten::mul(%b, %w)
      return (%s))IR");
  mergeLikePyTorch(graph);
  FileCheck().check_count("aten::relu", 2, /*exactly=*/true)->check("aten::add_")->run(*graph);
}

} // namespace
} // namespace torch_mp::jit
