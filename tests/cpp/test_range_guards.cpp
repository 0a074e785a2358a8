// core/range_guards, the numbers-only half of the numeric guards both fronts share: each guard names the first number
// the low dtype loses and stays quiet where every number fits; the rounding it judges scalars by is c10's.
#include <gtest/gtest.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/range_guards.h"

namespace torch_mp::core {
namespace {

TEST(RangeGuardsTest, RoundingIsC10sForEveryMagnitude) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> exponent(-140.0, 130.0);
  std::vector<double> values = {1e-8, 1e-12, 0.1, 1.0 / 3, 65504.0, 65519.0, 65520.0, 70000.0, 2.5e-8, 3e-8,
                                std::ldexp(1.0, -24), std::ldexp(1.0, -25), std::ldexp(1.0, -126), 3.3895e38,
                                3.3896e38, std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min()};
  for (int i = 0; i < 20000; ++i) {
    values.push_back((i % 2 ? -1.0 : 1.0) * std::pow(2.0, exponent(random)));
  }
  for (double value : values) {
    const float single = static_cast<float>(value);
    EXPECT_EQ(roundedTo(value, LowDtype::kFloat16), static_cast<double>(static_cast<float>(c10::Half(single))))
        << value;
    EXPECT_EQ(roundedTo(value, LowDtype::kBFloat16), static_cast<double>(static_cast<float>(c10::BFloat16(single))))
        << value;
  }
}

TEST(RangeGuardsTest, EachGuardNamesTheFirstNumberTheLowDtypeLoses) {
  const std::optional<GuardVerdict> observed = observedRangeGuard(
      {{"small", {1.0, false}}, {"big", {40000.0, false}}, {"bigger", {60000.0, false}}}, LowDtype::kFloat16);
  ASSERT_TRUE(observed);
  EXPECT_EQ(observed->kind, GuardKind::kObservedOverflow);
  EXPECT_EQ(observed->value, "big");
  EXPECT_FALSE(observedRangeGuard({{"big", {40000.0, false}}}, LowDtype::kBFloat16));

  const std::optional<GuardVerdict> constant =
      constantRangeGuard({{"bias", 3.0}, {"mask", 1e9}}, LowDtype::kFloat16);
  ASSERT_TRUE(constant);
  EXPECT_EQ(constant->kind, GuardKind::kConstantRange);
  EXPECT_EQ(constant->value, "mask");
  EXPECT_EQ(constant->seen, 1e9);
  EXPECT_EQ(constant->limit, 65504.0);
  EXPECT_FALSE(constantRangeGuard({{"mask", 1e9}}, LowDtype::kBFloat16));
  EXPECT_TRUE(constantRangeGuard({{"lowest", 3.4028234663852886e38}}, LowDtype::kBFloat16));  // finfo(fp32).min

  const std::optional<GuardVerdict> scalar =
      lostScalarGuard({{"zero", 0.0}, {"half", 0.5}, {"eps", 1e-8}}, LowDtype::kFloat16);
  ASSERT_TRUE(scalar);
  EXPECT_EQ(scalar->kind, GuardKind::kLostScalar);
  EXPECT_EQ(scalar->value, "eps");
  EXPECT_EQ(scalar->limit, 0.0);  // what 1e-8 becomes in fp16
  EXPECT_FALSE(lostScalarGuard({{"eps", 1e-8}}, LowDtype::kBFloat16));
  EXPECT_FALSE(lostScalarGuard({{"inf", std::numeric_limits<double>::infinity()}}, LowDtype::kFloat16));
  const std::optional<GuardVerdict> huge = lostScalarGuard({{"big", 1e6}}, LowDtype::kFloat16);
  ASSERT_TRUE(huge);
  EXPECT_TRUE(std::isinf(huge->limit));
}

} // namespace
} // namespace torch_mp::core

namespace torch_mp::core {
namespace {

TEST(RangeGuardsTest, JudgeRangesGivesEachGuardsVerdictOnItsNumbers) {
  const RangeGuardNumbers numbers{.observed = {{"x", {40000.0, false}}},
                                  .constants = {{"mask", 1e9}},
                                  .scalars = {{"clamp[1]", 1e-8}}};
  const RangeGuardVerdicts fp16 = judgeRanges(numbers, LowDtype::kFloat16);
  ASSERT_TRUE(fp16.observedRange && fp16.constantRange && fp16.lostScalar);
  EXPECT_EQ(fp16.observedRange->value, "x");
  EXPECT_EQ(fp16.constantRange->kind, GuardKind::kConstantRange);
  EXPECT_EQ(fp16.lostScalar->kind, GuardKind::kLostScalar);
  const RangeGuardVerdicts bf16 = judgeRanges(numbers, LowDtype::kBFloat16);  // every number fits bf16
  EXPECT_FALSE(bf16.observedRange || bf16.constantRange || bf16.lostScalar);
}

} // namespace
} // namespace torch_mp::core
