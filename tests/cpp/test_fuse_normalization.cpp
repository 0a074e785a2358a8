// FuseNormalization and the torch_mp::fused_channel_norm CPU kernel: norms (and channel cats of them with eval batch
// norms, and a relu) that fuse and ones that must not, with lint, FileCheck and numerics against ATen.
#include <gtest/gtest.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <memory>

#include "jit/ir/casts.h"
#include "jit/ir/ir_utils.h"
#include "jit/rewrite/fuse_normalization.h"
#include "kernels/fused_channel_norm.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

// Runs FuseNormalization, lints, and compares outputs with the unfused graph within `tolerance` of the largest
// expected magnitude.
Fused fuse(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<c10::IValue>& inputs,
           double tolerance, c10::Device device = c10::Device(c10::kCPU)) {
  return fuseAndCompare(graph, inputs, observeAllTensors(*graph, {2, 8, 6, 5}, {}, device), tolerance,
                        FuseNormalization);
}

// The IBN unit's norm half after conversion to fp16: an fp32 instance norm between casts, an fp16 eval batch norm,
// their channel cat and a relu. Inputs 2.. become constants.
std::string ibnUnit(const std::string& mode, const std::string& catDim) {
  return R"IR(
    graph(%x : Half(2, 8, 6, 5), %y : Half(2, 8, 6, 5), %w : Float(8), %b : Float(8),
          %w2 : Float(8), %b2 : Float(8), %m2 : Float(8), %v2 : Float(8)):
      %fp32 : int = prim::Constant[value=6]()
      %fp16 : int = prim::Constant[value=5]()
      %dim : int = prim::Constant[value=)IR" + catDim + R"IR(]()
      %false : bool = prim::Constant[value=0]()
      %true : bool = prim::Constant[value=1]()
      %mode : bool = prim::Constant[value=)IR" + mode + R"IR(]()
      %momentum : float = prim::Constant[value=0.1]()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %none : NoneType = prim::Constant()
      %f : Float(2, 8, 6, 5) = aten::to(%x, %fp32, %false, %false, %none)
      %i : Float(2, 8, 6, 5) = aten::instance_norm(%f, %w, %b, %none, %none, %true, %momentum, %eps, %true)
      %h : Half(2, 8, 6, 5) = aten::to(%i, %fp16, %false, %false, %none)
      %n : Half(2, 8, 6, 5) = aten::batch_norm(%y, %w2, %b2, %m2, %v2, %mode, %momentum, %eps, %true)
      %l : Tensor[] = prim::ListConstruct(%h, %n)
      %c : Half(2, 16, 6, 5) = aten::cat(%l, %dim)
      %r : Half(2, 16, 6, 5) = aten::relu(%c)
      return (%r))IR";
}

// Parses an ibnUnit graph with its parameters as constants, and its two inputs (%x NHWC, %y a channel slice of an
// NHWC tensor, as split gives).
std::pair<std::shared_ptr<torch::jit::Graph>, std::vector<c10::IValue>> ibnGraph(
    const std::string& mode, const std::string& catDim = "1") {
  auto graph = parseGraph(ibnUnit(mode, catDim));
  const std::vector<at::Tensor> parameters = {at::randn({8}), at::randn({8}), at::randn({8}), at::randn({8}),
                                              at::randn({8}), at::rand({8}) + 0.5};
  for (size_t i = parameters.size(); i-- > 0;) {
    inlineInputAsConstant(*graph, 2 + i, parameters[i]);
  }
  const at::Tensor x = (at::randn({2, 8, 6, 5}) * 3 + 1).to(at::kHalf).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor y = (at::randn({2, 16, 6, 5}) * 2).to(at::kHalf).contiguous(at::MemoryFormat::ChannelsLast);
  return {graph, {x, y.narrow(1, 8, 8)}};
}

// Outputs one fp16 spacing apart at most, relative to the largest magnitude (2^-10 of it).
constexpr double kOneHalfRounding = 1.0 / 1024;

TEST(FuseNormalizationTest, IbnUnitBecomesOneCallWithCastsCatAndRelu) {
  auto [graph, inputs] = ibnGraph("0");
  const Fused fused = fuse(graph, inputs, kOneHalfRounding);
  EXPECT_EQ(fused.calls, 1);
  EXPECT_EQ(fused.castsRemoved, 2);
  FileCheck().check_not("aten::")->check("prim::ListConstruct(%x, %y)")
      ->check_count("torch_mp::fused_channel_norm", 1, /*exactly=*/true)->run(*graph);
  EXPECT_EQ(recordedDtype(graph->outputs()[0]), at::kHalf);
}

// A batch norm in training mode is not folded: the call reads its output as a copy part.
TEST(FuseNormalizationTest, TrainingBatchNormIsReadAsItIs) {
  auto [graph, inputs] = ibnGraph("1");
  const Fused fused = fuse(graph, inputs, kOneHalfRounding);
  EXPECT_EQ(fused.calls, 1);
  FileCheck().check("aten::batch_norm")->check_not("aten::cat")->check_not("aten::relu")
      ->check("torch_mp::fused_channel_norm")->run(*graph);
}

TEST(FuseNormalizationTest, CatOnAnotherDimIsNotFolded) {
  auto [graph, inputs] = ibnGraph("0", "0");
  const Fused fused = fuse(graph, inputs, kOneHalfRounding);
  EXPECT_EQ(fused.calls, 1);  // the instance norm with both casts
  EXPECT_EQ(fused.castsRemoved, 2);
  FileCheck().check("torch_mp::fused_channel_norm")->check("aten::batch_norm")->check("aten::cat")->run(*graph);
}

TEST(FuseNormalizationTest, GroupNormsWithAndWithoutAffine) {
  auto graph = parseGraph(R"IR(
    graph(%x : Float(2, 8, 6, 5), %w : Float(8), %b : Float(8)):
      %two : int = prim::Constant[value=2]()
      %eight : int = prim::Constant[value=8]()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %true : bool = prim::Constant[value=1]()
      %none : NoneType = prim::Constant()
      %g : Float(2, 8, 6, 5) = aten::group_norm(%x, %two, %w, %b, %eps, %true)
      %a : Float(2, 8, 6, 5) = aten::group_norm(%g, %eight, %none, %none, %eps, %true)
      return (%a))IR");
  inlineInputAsConstant(*graph, 2, at::randn({8}));
  inlineInputAsConstant(*graph, 1, at::randn({8}));
  const Fused fused = fuse(graph, {at::randn({2, 8, 6, 5}) * 4 + 2}, 1e-5);
  EXPECT_EQ(fused.calls, 2);
  FileCheck().check_not("aten::group_norm")->check_count("torch_mp::fused_channel_norm", 2, true)->run(*graph);
}

constexpr const char* kInstanceNorm = R"IR(
    graph(%x : Float(2, 8, 6, 5), %w : Float(8)):
      %stats : bool = prim::Constant[value=STATS]()
      %momentum : float = prim::Constant[value=0.1]()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %true : bool = prim::Constant[value=1]()
      %none : NoneType = prim::Constant()
      %i : Float(2, 8, 6, 5) = aten::instance_norm(%x, %w, %none, %none, %none, %stats, %momentum, %eps, %true)
      %r : Float(2, 8, 6, 5) = aten::relu(%i)
      return (%r))IR";

std::string instanceNorm(const std::string& stats) {
  std::string ir = kInstanceNorm;
  return ir.replace(ir.find("STATS"), 5, stats);
}

TEST(FuseNormalizationTest, InstanceNormWithReluFuses) {
  auto graph = parseGraph(instanceNorm("1"));
  inlineInputAsConstant(*graph, 1, at::randn({8}));
  const Fused fused = fuse(graph, {at::randn({2, 8, 6, 5})}, 1e-5);
  EXPECT_EQ(fused.calls, 1);
  FileCheck().check_not("aten::")->check("torch_mp::fused_channel_norm")->run(*graph);
}

TEST(FuseNormalizationTest, NonConstantWeightDoesNotFuse) {
  auto graph = parseGraph(instanceNorm("1"));
  const Fused fused = fuse(graph, {at::randn({2, 8, 6, 5}), at::randn({8})}, 0.0);
  EXPECT_EQ(fused.calls, 0);
}

TEST(FuseNormalizationTest, RunningStatisticsDoNotFuse) {
  auto graph = parseGraph(R"IR(
    graph(%x : Float(2, 8, 6, 5), %m : Float(8), %v : Float(8)):
      %false : bool = prim::Constant[value=0]()
      %momentum : float = prim::Constant[value=0.1]()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %none : NoneType = prim::Constant()
      %i : Float(2, 8, 6, 5) = aten::instance_norm(%x, %none, %none, %m, %v, %false, %momentum, %eps, %false)
      return (%i))IR");
  inlineInputAsConstant(*graph, 2, at::rand({8}) + 0.5);
  inlineInputAsConstant(*graph, 1, at::randn({8}));
  const Fused fused = fuse(graph, {at::randn({2, 8, 6, 5})}, 0.0);
  EXPECT_EQ(fused.calls, 0);
}

TEST(FuseNormalizationTest, NothingOnADeviceWithoutKernel) {
  if (kernels::hasFusedChannelNormKernel(c10::DeviceType::CUDA)) {
    GTEST_SKIP() << "this build has the CUDA kernel";
  }
  auto graph = parseGraph(instanceNorm("1"));
  inlineInputAsConstant(*graph, 1, at::randn({8}));
  const ObservedValues observed = observeAllTensors(*graph, {2, 8, 6, 5}, {}, c10::Device(c10::kCUDA, 0));
  CastLedger ledger(observed);
  EXPECT_EQ(FuseNormalization(graph, observed, ledger), 0);
}

// The op through the dispatcher, eps 1e-5.
at::Tensor fusedChannelNorm(const std::vector<at::Tensor>& parts, const std::vector<int64_t>& groups,
                            const std::vector<std::optional<at::Tensor>>& scales,
                            const std::vector<std::optional<at::Tensor>>& shifts, bool relu, at::ScalarType out) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(kernels::kFusedChannelNormOp, "")
                             .typed<at::Tensor(at::TensorList, c10::IntArrayRef,
                                               const c10::List<std::optional<at::Tensor>>&,
                                               const c10::List<std::optional<at::Tensor>>&, double, bool,
                                               c10::ScalarType)>();
  c10::List<std::optional<at::Tensor>> scaleList(scales);
  c10::List<std::optional<at::Tensor>> shiftList(shifts);
  return op.call(parts, groups, scaleList, shiftList, 1e-5, relu, out);
}

// The largest gap of `actual` from `expected` beyond 1e-5 (fp32 statistics' rounding near zero), in units of the
// spacing of `dtype` at |expected| (fp16: 2^-10 of the binade, bf16 2^-7); for fp32 the gap itself.
double errorInRoundings(const at::Tensor& actual, const at::Tensor& expected, at::ScalarType dtype) {
  const at::Tensor gap = (actual.to(at::kDouble) - expected.to(at::kDouble)).abs();
  if (dtype == at::kFloat) {
    return gap.max().item<double>();
  }
  const double mantissa = dtype == at::kHalf ? 1024.0 : 128.0;
  const at::Tensor spacing = at::exp2(at::floor(at::log2(expected.to(at::kDouble).abs().clamp_min(1e-4)))) / mantissa;
  return ((gap - 1e-5).clamp_min(0.0) / spacing).max().item<double>();
}

// The kernel against ATen's group_norm in fp32 on the same values: fp32 within 4e-6 (outputs of magnitude <= ~10);
// fp16 / bf16 within one spacing of the low dtype of ATen's fp32 result.
TEST(FusedChannelNormKernelTest, MatchesAtenForLayoutsGroupsAndDtypes) {
  at::manual_seed(0);
  for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (int layout = 0; layout < 3; ++layout) {  // contiguous, channels_last, a channel slice of channels_last
      for (int64_t groups : {1, 2, -1}) {
        const at::Tensor whole = (at::randn({2, 24, 7, 9}) * 3 + 1).to(dtype);
        const at::Tensor x = layout == 0 ? whole.narrow(1, 0, 16).contiguous()
            : layout == 1                ? whole.narrow(1, 0, 16).contiguous(at::MemoryFormat::ChannelsLast)
                                         : whole.contiguous(at::MemoryFormat::ChannelsLast).narrow(1, 4, 16);
        const at::Tensor y = (at::randn({2, 8, 7, 9}) * 2).to(dtype);
        const at::Tensor w = at::randn({16});
        const at::Tensor b = at::randn({16});
        const at::Tensor scale = at::rand({8}) + 0.5;
        const at::Tensor shift = at::randn({8});
        const at::Tensor out = fusedChannelNorm({x, y}, {groups, 0}, {w, scale}, {b, shift}, true, dtype);
        const at::Tensor expected = at::relu(at::cat(
            {at::group_norm(x.to(at::kFloat), groups == -1 ? 16 : groups, w, b, 1e-5),
             y.to(at::kFloat) * scale.view({1, 8, 1, 1}) + shift.view({1, 8, 1, 1})},
            1));
        SCOPED_TRACE(::testing::Message() << dtype << " layout " << layout << " groups " << groups);
        EXPECT_EQ(out.scalar_type(), dtype);
        EXPECT_EQ(out.is_contiguous(at::MemoryFormat::ChannelsLast), layout != 0);
        EXPECT_LE(errorInRoundings(out, expected, dtype), dtype == at::kFloat ? 4e-6 : 1.0);
      }
    }
  }
}

TEST(FusedChannelNormKernelTest, RefusesMismatchedParts) {
  const at::Tensor x = at::randn({2, 8, 6, 5});
  EXPECT_THROW(fusedChannelNorm({x, at::randn({2, 8, 6, 4})}, {-1, 0}, {std::nullopt, std::nullopt},
                                {std::nullopt, std::nullopt}, false, at::kFloat),
               c10::Error);
  EXPECT_THROW(fusedChannelNorm({x}, {3}, {std::nullopt}, {std::nullopt}, false, at::kFloat), c10::Error);
}

} // namespace
} // namespace torch_mp::jit
