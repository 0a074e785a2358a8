// StoreMatmulWeightsColumnMajor: a low-precision CPU constant that matmuls read only as their right-hand matrix is
// stored column-major (same values and sizes); constants read otherwise, fp32 ones and views stay as they were.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "jit/rewrite/column_major_matmul_weights.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

constexpr const char* kLinearAndMatmul = R"IR(
    graph(%x : Tensor, %w : Tensor, %v : Tensor, %b : Tensor):
      %one : int = prim::Constant[value=1]()
      %y : Tensor = aten::addmm(%b, %x, %w, %one, %one)
      %z : Tensor = aten::matmul(%y, %v)
      return (%z))IR";

TEST(ColumnMajorMatmulWeightsTest, LowMatmulWeightsBecomeColumnMajorWithTheSameValues) {
  auto graph = parseGraph(kLinearAndMatmul);
  const at::Tensor w = torch::randn({8, 6}).to(at::kBFloat16);
  const at::Tensor v = torch::randn({6, 5}).to(at::kBFloat16);
  inlineInputAsConstant(*graph, 3, torch::randn({6}).to(at::kBFloat16));
  inlineInputAsConstant(*graph, 2, v);
  inlineInputAsConstant(*graph, 1, w);
  const at::Tensor x = torch::randn({4, 8}).to(at::kBFloat16);
  const auto before = runGraph(graph, {x});
  EXPECT_EQ(StoreMatmulWeightsColumnMajor(graph), 2);
  graph->lint();
  FileCheck()
      .check("BFloat16(8, 6, strides=[1, 8]")
      ->check("BFloat16(6, 5, strides=[1, 6]")
      ->check_not("strides=[6, 1]")
      ->check("aten::addmm")
      ->check("aten::matmul")
      ->run(*graph);
  for (torch::jit::Node* node : graph->nodes()) {
    if (node->kind() == c10::aten::addmm) {
      EXPECT_TRUE(torch::equal(torch::jit::toIValue(node->input(2))->toTensor(), w));
    }
  }
  const auto after = runGraph(graph, {x});
  ASSERT_EQ(after.size(), 1u);
  EXPECT_TRUE(torch::allclose(after[0].toTensor().to(at::kFloat), before[0].toTensor().to(at::kFloat), 2e-2, 2e-2));
}

TEST(ColumnMajorMatmulWeightsTest, Fp32WeightsOtherReadersAndViewsStay) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %w : Tensor, %t : Tensor, %ids : Tensor, %s : Tensor):
      %y : Tensor = aten::mm(%x, %w)
      %z : Tensor = aten::mm(%x, %t)
      %e : Tensor = aten::embedding(%t, %ids, %ids, %ids, %ids)
      %u : Tensor = aten::mm(%x, %s)
      return (%y, %z, %e, %u))IR");
  inlineInputAsConstant(*graph, 4, torch::randn({16, 6}).to(at::kHalf).narrow(0, 2, 8));  // a view of a larger table
  inlineInputAsConstant(*graph, 2, torch::randn({8, 6}).to(at::kHalf));  // also an embedding's table
  inlineInputAsConstant(*graph, 1, torch::randn({8, 6}));                // fp32: CPU GEMMs are fast either way
  EXPECT_EQ(StoreMatmulWeightsColumnMajor(graph), 0);
  FileCheck().check_not("strides=[1,")->run(*graph);
}

// A weight freezing also folded into a view (`w.unsqueeze(0)` for a bmm) shares its storage with that view: a
// column-major copy would store it twice.
TEST(ColumnMajorMatmulWeightsTest, AWeightAnotherConstantViewsStays) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %b : Tensor, %w : Tensor, %w3 : Tensor):
      %y : Tensor = aten::mm(%x, %w)
      %z : Tensor = aten::bmm(%b, %w3)
      return (%y, %z))IR");
  const at::Tensor w = torch::randn({8, 8}).to(at::kBFloat16);
  inlineInputAsConstant(*graph, 3, w.unsqueeze(0));
  inlineInputAsConstant(*graph, 2, w);
  EXPECT_EQ(StoreMatmulWeightsColumnMajor(graph), 0);
  FileCheck().check_not("strides=[1,")->run(*graph);
  // alone, it is stored column-major
  auto alone = parseGraph(R"IR(
    graph(%x : Tensor, %w : Tensor):
      %y : Tensor = aten::mm(%x, %w)
      return (%y))IR");
  inlineInputAsConstant(*alone, 1, torch::randn({8, 8}).to(at::kBFloat16));
  EXPECT_EQ(StoreMatmulWeightsColumnMajor(alone), 1);
}

} // namespace
} // namespace torch_mp::jit
