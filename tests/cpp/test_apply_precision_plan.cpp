// applyPrecisionPlan (jit/rewrite/apply_precision_plan) on its own, with plans written by hand: casts where a reader wants
// another precision than its producer wrote, one per value and dtype, all from the ledger; constants stored low
// once; a low_fp32_output node's one cast after it; an all-fp32 plan changes nothing. The ledger's casts carry
// its mark (`torch_mp_cast`), which the pipeline takes off at the end. A weight also read in fp32 is never stored
// twice: its low readers cast it at run time.
#include <gtest/gtest.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <set>

#include "jit/rewrite/apply_precision_plan.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

struct Applied {
  std::shared_ptr<torch::jit::Graph> graph;
  std::vector<c10::IValue> before;
  std::vector<c10::IValue> after;
  int ledgerCasts = 0;  // casts the ledger made
};

// Runs the graph, plans `lowOps` low and everything else fp32, applies the plan, lints, runs it again.
Applied apply(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<c10::IValue>& inputs,
              const std::set<std::string>& lowOps, const core::OpPolicy& policy = core::OpPolicy::defaults(
                  core::Target::kCudaFloat16, core::CpuFeatures::all())) {
  Applied applied;
  applied.graph = graph;
  applied.before = runGraph(graph, inputs);
  const ObservedValues observed = observeValues(graph, inputs).values;
  recordObservedDtypes(observed);
  const DataflowMapping mapping = buildDataflow(graph, observed, policy, at::kHalf);
  core::PrecisionPlan plan;
  for (const PlannedNode& planned : mapping.planned) {
    plan.precision.push_back(lowOps.count(planned.node->kind().toQualString()) ? core::Precision::kLow
                                                                                : core::Precision::kFp32);
  }
  plan.forcedToFp32.assign(mapping.planned.size(), false);
  CastLedger ledger(observed);
  applyPrecisionPlan(graph, mapping, plan, observed, at::kHalf, ledger);
  graph->lint();
  for (const torch::jit::Node* node : graph->nodes()) {
    applied.ledgerCasts += CastLedger::created(node);
  }
  applied.after = runGraph(graph, inputs);
  return applied;
}

TEST(ApplyPrecisionPlanTest, ALowNodeReadsCastsOfItsInputsAndItsWeightStoredLow) {
  auto graph = parseGraph(kConvReluSoftmax);
  inlineInputAsConstant(*graph, 1, torch::randn({4, 3, 3, 3}));
  const Applied applied = apply(graph, {torch::randn({2, 3, 8, 8})}, {"aten::conv2d"});
  FileCheck().check_count("Half(4, 3, 3, 3", 1, /*exactly=*/true)->run(*graph);  // the weight, stored in fp16
  FileCheck()
      .check("HalfTensor = aten::to[torch_mp_cast=1](%x, ")->check("aten::conv2d")
      ->check("FloatTensor = aten::to[torch_mp_cast=1](")->check("aten::relu")->check("aten::softmax")
      ->check_not("aten::to")
      ->run(*graph);
  EXPECT_EQ(applied.ledgerCasts, 2);
  expectCloseOutputs(applied.before, applied.after, 1e-2);
}

TEST(ApplyPrecisionPlanTest, OneCastPerValueAndDtypeServesAllItsReaders) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor):
      %m : Tensor = aten::mm(%a, %b)
      %r : Tensor = aten::relu(%m)
      %e : Tensor = aten::exp(%m)
      return (%r, %e))IR");
  const Applied applied = apply(graph, {torch::randn({4, 6}), torch::randn({6, 5})}, {"aten::mm"});
  // %a and %b cast to fp16 once each; the product cast back to fp32 once, read by relu and exp
  FileCheck()
      .check_count("HalfTensor = aten::to[torch_mp_cast=1](", 2, /*exactly=*/true)->check("aten::mm")
      ->check_count("FloatTensor = aten::to[torch_mp_cast=1](", 1, /*exactly=*/true)->check("aten::relu")
      ->check("aten::exp")
      ->run(*graph);
  EXPECT_EQ(applied.ledgerCasts, 3);
  expectCloseOutputs(applied.before, applied.after, 1e-2);
}

TEST(ApplyPrecisionPlanTest, ALowNodeWithFp32OutputWritesOneFp32CastRightAfterIt) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor):
      %m : Tensor = aten::mm(%a, %b)
      %r : Tensor = aten::relu(%m)
      return (%r))IR");
  core::OpPolicy policy = core::OpPolicy::defaults(core::Target::kCudaFloat16, core::CpuFeatures::all());
  policy.set("aten::mm", core::OpCategory::kLowFp32Output, "test");
  const Applied applied =
      apply(graph, {torch::randn({4, 6}), torch::randn({6, 5})}, {"aten::mm", "aten::relu"}, policy);
  // the relu planned low reads the fp32 result through a cast back down (CancelCasts takes that round trip back)
  FileCheck()
      .check("aten::mm")->check("FloatTensor = aten::to[torch_mp_cast=1](%")
      ->check("HalfTensor = aten::to[torch_mp_cast=1](%")->check("aten::relu")->run(*graph);
  expectCloseOutputs(applied.before, applied.after, 1e-2);
}

constexpr const char* kOneWeightTwoReaders = R"IR(
    graph(%x : Tensor, %w : Tensor):
      %a : Tensor = aten::mm(%x, %w)
      %b : Tensor = aten::matmul(%x, %w)
      return (%a, %b))IR";

TEST(ApplyPrecisionPlanTest, AWeightAlsoReadInFp32IsStoredOnceAndCastAtRunTimeForItsLowReader) {
  auto graph = parseGraph(kOneWeightTwoReaders);
  inlineInputAsConstant(*graph, 1, torch::randn({6, 5}));
  const Applied applied = apply(graph, {torch::randn({4, 6})}, {"aten::mm"});  // the matmul stays fp32
  // one tensor constant, fp32; the mm reads a cast of it made at run time
  FileCheck().check_count("prim::Constant[value=<Tensor>]", 1, /*exactly=*/true)->run(*graph);
  FileCheck()
      .check("Float(6, 5, strides=[5, 1], requires_grad=0, device=cpu) = prim::Constant[value=<Tensor>]")
      ->check("Half(6, 5, strides=[5, 1], requires_grad=0, device=cpu) = aten::to[torch_mp_cast=1](")
      ->check("aten::mm")->check("aten::matmul")->run(*graph);
  EXPECT_EQ(applied.ledgerCasts, 3);  // %x and the weight to fp16 for the mm, its product back to fp32
  expectCloseOutputs(applied.before, applied.after, 1e-2);
}

TEST(ApplyPrecisionPlanTest, AWeightReadInBothPrecisionsIsStoredTwiceWhereTheWeightsStillShrink) {
  // Beside a larger weight stored low, a low copy of the shared one leaves the weights below the fp32 model's: it
  // saves the mm a cast per inference.
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %w : Tensor, %big : Tensor):
      %a : Tensor = aten::mm(%x, %w)
      %b : Tensor = aten::matmul(%x, %w)
      %c : Tensor = aten::mm(%x, %big)
      return (%a, %b, %c))IR");
  inlineInputAsConstant(*graph, 2, torch::randn({6, 64}));
  inlineInputAsConstant(*graph, 1, torch::randn({6, 5}));
  const Applied applied = apply(graph, {torch::randn({4, 6})}, {"aten::mm"});
  torch::jit::EliminateDeadCode(graph);
  FileCheck().check_count("prim::Constant[value=<Tensor>]", 3, /*exactly=*/true)->run(*graph);
  FileCheck().check("Float(6, 5, strides=[5, 1], requires_grad=0, device=cpu) = prim::Constant[value=<Tensor>]")
      ->run(*graph);
  FileCheck().check("Half(6, 5, strides=[5, 1], requires_grad=0, device=cpu) = prim::Constant[value=<Tensor>]")
      ->run(*graph);
  EXPECT_EQ(applied.ledgerCasts, 3);  // %x to fp16 once, both mm products back to fp32; none of a weight
  expectCloseOutputs(applied.before, applied.after, 1e-2);
}

TEST(ApplyPrecisionPlanTest, AWeightOnlyLowNodesReadIsStoredLowOnce) {
  auto graph = parseGraph(kOneWeightTwoReaders);
  inlineInputAsConstant(*graph, 1, torch::randn({6, 5}));
  const Applied applied = apply(graph, {torch::randn({4, 6})}, {"aten::mm", "aten::matmul"});
  torch::jit::EliminateDeadCode(graph);  // the fp32 constant, read by nothing now
  FileCheck().check_count("prim::Constant[value=<Tensor>]", 1, /*exactly=*/true)->run(*graph);
  FileCheck().check("Half(6, 5, strides=[5, 1], requires_grad=0, device=cpu) = prim::Constant[value=<Tensor>]")
      ->run(*graph);
  EXPECT_EQ(applied.ledgerCasts, 3);  // %x to fp16 once, both products back to fp32; none of the weight
  expectCloseOutputs(applied.before, applied.after, 1e-2);
}

TEST(ApplyPrecisionPlanTest, AnAllFp32PlanChangesNothing) {
  auto graph = parseGraph(kConvReluSoftmax);
  inlineInputAsConstant(*graph, 1, torch::randn({4, 3, 3, 3}));
  const Applied applied = apply(graph, {torch::randn({2, 3, 8, 8})}, {});
  EXPECT_EQ(applied.ledgerCasts, 0);
  FileCheck().check_not("aten::to")->check_not("Half")->run(*graph);
  expectSameOutputs(applied.before, applied.after);
}

} // namespace
} // namespace torch_mp::jit
