// core::planInt8 on facts alone: the cost model's choice (an int8 kernel where its saving beats the quantize passes,
// float where it does not), one quantize shared by its readers and fused after an int8 producer, follow ops int8 only
// where they spare a quantize, and every rule that rules a node out; activationQuantization's parameters.
#include <gtest/gtest.h>

#include "core/int8_planner.h"

namespace torch_mp::core {
namespace {

Int8CostModel avx2() {
  return Int8CostModel::forCpu(CpuFeatures::none());
}

Int8NodeFacts conv(int64_t flops) {
  return Int8NodeFacts{"aten::conv2d", flops, false, true, false};
}

Int8ValueFacts read(int producer, std::vector<int> readers, int64_t numel) {
  return Int8ValueFacts{producer, std::move(readers), numel, -1.0, 3.0, true};
}

TEST(Int8PlannerTest, AHeavyConvolutionRunsInt8) {
  // ResNet's 3x3, 64 -> 64 channels at 56x56: 116M multiply-adds, 200k input elements
  const auto plan = planInt8({conv(115'605'504)}, {read(-1, {0}, 200'704)}, avx2());
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_TRUE(plan[0].int8);
  EXPECT_EQ(plan[0].reason, Int8Reason::kInt8);
  const Int8CostModel model = avx2();
  EXPECT_DOUBLE_EQ(plan[0].savedSeconds, 115'605'504 / model.fp32MultiplyAddsPerSecond * (1.0 - 1.0 / 2.0));
  EXPECT_DOUBLE_EQ(plan[0].quantizeSeconds, 200'704 * 5.0 / model.bytesPerSecond + model.secondsPerPass);
}

TEST(Int8PlannerTest, AnIsolatedSmallLinearStaysFloat) {
  // Linear(16, 16) on one row between fp32 neighbours: 256 multiply-adds cannot pay a quantize pass
  Int8NodeFacts linear{"aten::linear", 256, false, true, false};
  const auto plan = planInt8({linear}, {read(-1, {0}, 16)}, avx2());
  EXPECT_FALSE(plan[0].int8);
  EXPECT_EQ(plan[0].reason, Int8Reason::kCostsMore);
  EXPECT_LT(plan[0].savedSeconds, plan[0].quantizeSeconds);
}

TEST(Int8PlannerTest, AQuantizeAfterAnInt8ProducerIsFused) {
  // conv0 (heavy) -> conv1 (light): alone conv1 would not pay its quantize; after an int8 conv0 it costs nothing
  const int64_t light = 20'000;  // saves 0.2 us, a quantize of 10k elements costs 8 us
  const auto alone = planInt8({conv(light)}, {read(-1, {0}, 10'000)}, avx2());
  EXPECT_FALSE(alone[0].int8);
  const auto chained =
      planInt8({conv(100'000'000), conv(light)}, {read(-1, {0}, 10'000), read(0, {1}, 10'000)}, avx2());
  EXPECT_TRUE(chained[0].int8);
  EXPECT_TRUE(chained[1].int8);
  EXPECT_DOUBLE_EQ(chained[1].quantizeSeconds, 0.0);
}

TEST(Int8PlannerTest, OneQuantizeServesEveryReader) {
  // two light convolutions read one value: each saves 60% of a quantize, together they pay it
  const Int8CostModel model = avx2();
  const double pass = 100'000 * 5.0 / model.bytesPerSecond + model.secondsPerPass;
  const auto flops = static_cast<int64_t>(0.6 * pass * model.fp32MultiplyAddsPerSecond * 2.0);
  EXPECT_FALSE(planInt8({conv(flops)}, {read(-1, {0}, 100'000)}, model)[0].int8);
  const auto both = planInt8({conv(flops), conv(flops)}, {read(-1, {0, 1}, 100'000)}, model);
  EXPECT_TRUE(both[0].int8);
  EXPECT_TRUE(both[1].int8);
}

TEST(Int8PlannerTest, AFollowOpIsInt8OnlyWhereItSparesAQuantize) {
  Int8NodeFacts pool{"aten::max_pool2d", 0, false, true, false};
  // conv0 -> max_pool -> conv2: the pool int8 spares the quantize of its output
  const auto between = planInt8({conv(100'000'000), pool, conv(100'000'000)},
                                {read(-1, {0}, 1000), read(0, {1}, 4000), read(1, {2}, 1000)}, avx2());
  EXPECT_TRUE(between[1].int8);
  EXPECT_DOUBLE_EQ(between[2].quantizeSeconds, 0.0);
  // conv0 -> max_pool -> (a float reader): nothing to spare, the pool stays float and exact
  const auto last = planInt8({conv(100'000'000), pool}, {read(-1, {0}, 1000), read(0, {1}, 4000)}, avx2());
  EXPECT_TRUE(last[0].int8);
  EXPECT_FALSE(last[1].int8);
  EXPECT_EQ(last[1].reason, Int8Reason::kCostsMore);
}

TEST(Int8PlannerTest, RulesOutWhatTheFactsForbid) {
  Int8NodeFacts matmul{"aten::matmul", 100'000'000, false, true, false};
  Int8NodeFacts computedWeight = conv(100'000'000);
  computedWeight.weightStored = false;
  Int8NodeFacts kept = conv(100'000'000);
  kept.keptByFallback = true;
  Int8NodeFacts softmax{"aten::softmax", 0, false, true, false};
  Int8ValueFacts single = read(-1, {4}, 1000);
  single.min = single.max = 2.0;
  Int8ValueFacts infinite = read(-1, {5}, 1000);
  infinite.finite = false;
  Int8ValueFacts vanishing = read(-1, {6}, 1000);
  vanishing.min = -1e-9;
  vanishing.max = 3e-9;
  const auto plan =
      planInt8({matmul, computedWeight, kept, softmax, conv(100'000'000), conv(100'000'000), conv(100'000'000)},
               {read(-1, {0, 1, 2}, 1000), single, infinite, vanishing}, avx2());
  EXPECT_EQ(plan[0].reason, Int8Reason::kNoKernel);
  EXPECT_EQ(plan[1].reason, Int8Reason::kWeightComputed);
  EXPECT_EQ(plan[2].reason, Int8Reason::kKeptByFallback);
  EXPECT_EQ(plan[3].reason, Int8Reason::kNoInt8Form);
  EXPECT_EQ(plan[4].reason, Int8Reason::kRangeGuard);
  EXPECT_EQ(plan[5].reason, Int8Reason::kRangeGuard);
  EXPECT_EQ(plan[6].reason, Int8Reason::kRangeGuard);
  EXPECT_TRUE(int8RangeUsable(read(-1, {}, 1)));
  for (const Int8NodePlan& node : plan) {
    EXPECT_FALSE(node.int8);
  }
}

TEST(Int8PlannerTest, TheCpuDecidesSpeedupsAndTheRange) {
  EXPECT_TRUE(Int8CostModel::reducedRange(CpuFeatures::none()));
  CpuFeatures vnni;
  vnni.add(CpuFeature::kAvx512Vnni);
  EXPECT_FALSE(Int8CostModel::reducedRange(vnni));
  EXPECT_DOUBLE_EQ(Int8CostModel::forCpu(vnni).int8Speedup, 3.0);
  EXPECT_DOUBLE_EQ(Int8CostModel::forCpu(CpuFeatures::all()).int8Speedup, 6.0);
  EXPECT_DOUBLE_EQ(Int8CostModel::forCpu(CpuFeatures::all()).lowFloatSpeedup, 3.0);
  // against a low float kernel that is already fast, int8 saves less
  Int8NodeFacts low = conv(1'000'000);
  low.runsLowFloat = true;
  const Int8CostModel amx = Int8CostModel::forCpu(CpuFeatures::all());
  const auto plan = planInt8({conv(1'000'000), low}, {}, amx);
  EXPECT_NEAR(plan[0].savedSeconds / plan[1].savedSeconds, (1.0 - 1.0 / 6.0) / (1.0 / 3.0 - 1.0 / 6.0), 1e-9);
}

TEST(Int8PlannerTest, ActivationQuantizationAsMinMaxObserverMakesIt) {
  const ActivationQuantization relu = activationQuantization(0.0, 5.1, false);
  EXPECT_DOUBLE_EQ(relu.scale, 5.1 / 255.0);
  EXPECT_EQ(relu.zeroPoint, 0);
  EXPECT_EQ(relu.qmax, 255);
  const ActivationQuantization signedRange = activationQuantization(-1.0, 3.0, false);
  EXPECT_DOUBLE_EQ(signedRange.scale, 4.0 / 255.0);
  EXPECT_EQ(signedRange.zeroPoint, 64);  // round(1 / (4 / 255)) = round(63.75)
  const ActivationQuantization reduced = activationQuantization(-1.0, 3.0, true);
  EXPECT_EQ(reduced.qmax, 127);
  EXPECT_DOUBLE_EQ(reduced.scale, 4.0 / 127.0);
  EXPECT_EQ(reduced.zeroPoint, 32);  // round(31.75)
  const ActivationQuantization positive = activationQuantization(2.0, 3.0, false);  // widened to hold 0
  EXPECT_DOUBLE_EQ(positive.scale, 3.0 / 255.0);
  EXPECT_EQ(positive.zeroPoint, 0);
}

} // namespace
} // namespace torch_mp::core
