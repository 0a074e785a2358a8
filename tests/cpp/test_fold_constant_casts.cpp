// FoldConstantCasts: a plain cast of a tensor constant becomes a constant of the target dtype; casts of values, and
// casts whose result is written in place, stay.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "jit/ir/casts.h"
#include "jit/rewrite/fold_constant_casts.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

TEST(FoldConstantCastsTest, CastOfAWeightBecomesALowConstant) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %w : Tensor):
      %bf16 : int = prim::Constant[value=15]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %xl : Tensor = aten::to(%x, %bf16, %false, %false, %none)
      %wl : Tensor = aten::to(%w, %bf16, %false, %false, %none)
      %y : Tensor = aten::linear(%xl, %wl, %none)
      return (%y))IR");
  const at::Tensor weight = torch::randn({5, 4});
  inlineInputAsConstant(*graph, 1, weight);
  const at::Tensor x = torch::randn({3, 4});
  const auto before = runGraph(graph, {x});
  EXPECT_EQ(FoldConstantCasts(graph), 1);
  torch::jit::EliminateDeadCode(graph);
  graph->lint();
  FileCheck()
      .check_count("aten::to", 1, /*exactly=*/true)  // the input's cast stays
      ->run(*graph);
  FileCheck().check("BFloat16(5, 4")->check("prim::Constant")->check_not("Float(5, 4")->run(*graph);
  expectSameOutputs(before, runGraph(graph, {x}));  // the same rounding, done once
}

TEST(FoldConstantCastsTest, CastWrittenInPlaceStays) {
  auto graph = parseGraph(R"IR(
    graph(%w : Tensor):
      %bf16 : int = prim::Constant[value=15]()
      %two : int = prim::Constant[value=2]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %wl : Tensor = aten::to(%w, %bf16, %false, %false, %none)
      %doubled : Tensor = aten::mul_(%wl, %two)
      return (%wl))IR");
  inlineInputAsConstant(*graph, 0, torch::randn({5, 4}));
  EXPECT_EQ(FoldConstantCasts(graph), 0);
  FileCheck().check("aten::to")->check("aten::mul_")->run(*graph);
}

TEST(FoldConstantCastsTest, InsertedCastsAndWideningCastsStay) {
  auto graph = parseGraph(R"IR(
    graph(%w : Tensor, %v : Tensor):
      %fp32 : int = prim::Constant[value=6]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %ours : Tensor = aten::to(%w, %fp32, %false, %false, %none)
      %wider : Tensor = aten::to(%v, %fp32, %false, %false, %none)
      return (%ours, %wider))IR");
  inlineInputAsConstant(*graph, 1, torch::randn({5, 4}).to(at::kBFloat16));
  inlineInputAsConstant(*graph, 0, torch::randn({5, 4}).to(at::kBFloat16));
  {  // the first becomes the conversion's own cast
    torch::jit::Node* modelCast = graph->outputs()[0]->node();
    const ObservedValues observed;
    CastLedger ledger(observed);
    CastArguments arguments(*graph);
    torch::jit::WithInsertPoint guard(modelCast);
    modelCast->output()->replaceAllUsesWith(ledger.create(arguments, modelCast->input(0), at::kFloat));
    modelCast->destroy();
  }
  EXPECT_EQ(FoldConstantCasts(graph), 0);  // one is the conversion's, the other would store more bytes
  FileCheck().check_count("aten::to", 2, /*exactly=*/true)->run(*graph);
}

TEST(FoldConstantCastsTest, CopyingCastStays) {
  auto graph = parseGraph(R"IR(
    graph(%w : Tensor):
      %bf16 : int = prim::Constant[value=15]()
      %false : bool = prim::Constant[value=0]()
      %true : bool = prim::Constant[value=1]()
      %none : NoneType = prim::Constant()
      %wl : Tensor = aten::to(%w, %bf16, %false, %true, %none)
      return (%wl))IR");
  inlineInputAsConstant(*graph, 0, torch::randn({5, 4}));
  EXPECT_EQ(FoldConstantCasts(graph), 0);
}

} // namespace
} // namespace torch_mp::jit
