// core::clippedRange on hand-made tails: a rare outlier is clipped where the rounding it forces on every other element
// costs more than clipping it; a dense tail, an outlier among few elements and a one-signed value are not; the error
// figures are the formula's.
#include <gtest/gtest.h>

#include "core/activation_clipping.h"

namespace torch_mp::core {
namespace {

// `count` elements 1e-5 x `outer` apart from `outer` towards 0, outermost first: the extremes of a dense tail.
std::vector<double> dense(double outer, int count) {
  std::vector<double> values;
  for (int i = 0; i < count; ++i) {
    values.push_back(outer * (1.0 - static_cast<double>(i) / 100000.0));
  }
  return values;
}

double roundingError(double range, int64_t elements, double levels) {
  const double scale = range / levels;
  return static_cast<double>(elements) * scale * scale / 12.0;
}

TEST(ActivationClippingTest, ARareOutlierIsClippedToTheNextElement) {
  std::vector<double> largest = dense(3.0, 256);
  largest.insert(largest.begin(), 1000.0);
  largest.pop_back();
  const ValueTails tails{10'000'000, 0, largest, dense(-3.0, 256)};
  const ActivationRange range = clippedRange(tails, false);
  EXPECT_TRUE(range.clipped);
  // clipped at the dense tails, at most a few steps (6 / 255) into them: both sides, as the error is joint
  EXPECT_LE(range.max, 3.0);
  EXPECT_GE(range.max, 3.0 - 3 * 6.0 / 255);
  EXPECT_GE(range.min, -3.0);
  EXPECT_LE(range.min, -3.0 + 3 * 6.0 / 255);
  EXPECT_DOUBLE_EQ(range.minMaxSquaredError, roundingError(1003.0, 10'000'000, 255.0));
  EXPECT_LE(range.squaredError, 997.0 * 997.0 + roundingError(6.0, 10'000'000, 255.0));
  EXPECT_GE(range.squaredError, 990.0 * 990.0);
}

TEST(ActivationClippingTest, TheSameOutlierAmongFewElementsIsKept) {
  // 10,000 elements: rounding them at 1003/255 costs less than moving the outlier 997 (the fallback test's spike)
  std::vector<double> largest = dense(3.0, 256);
  largest.insert(largest.begin(), 1000.0);
  largest.pop_back();
  const ActivationRange range = clippedRange(ValueTails{10'000, 0, largest, dense(-3.0, 256)}, false);
  EXPECT_FALSE(range.clipped);
  EXPECT_DOUBLE_EQ(range.max, 1000.0);
  EXPECT_DOUBLE_EQ(range.min, -3.0);
  EXPECT_DOUBLE_EQ(range.squaredError, range.minMaxSquaredError);
}

TEST(ActivationClippingTest, ADenseTailIsNotClipped) {
  // clipping about a step into an evenly filled tail gains a few percent: under kClipGain
  const ActivationRange range = clippedRange(ValueTails{1'000'000, 0, dense(3.0, 256), dense(-3.0, 256)}, false);
  EXPECT_FALSE(range.clipped);
  EXPECT_DOUBLE_EQ(range.max, 3.0);
  EXPECT_DOUBLE_EQ(range.min, -3.0);
}

TEST(ActivationClippingTest, ANonNegativeValueKeepsZeroAsItsMinimumAndItsZerosCostNothing) {
  // a relu's output: half zeros, its smallest elements all 0
  std::vector<double> largest = dense(6.0, 256);
  largest.insert(largest.begin(), 600.0);
  largest.pop_back();
  const ValueTails tails{4'000'000, 2'000'000, largest, std::vector<double>(256, 0.0)};
  const ActivationRange range = clippedRange(tails, true);
  EXPECT_DOUBLE_EQ(range.min, 0.0);
  EXPECT_DOUBLE_EQ(range.minMaxSquaredError, roundingError(600.0, 2'000'000, 127.0));
  EXPECT_TRUE(range.clipped);
  EXPECT_LE(range.max, 6.0);
  EXPECT_GE(range.max, 6.0 - 3 * 6.0 / 127);
}

TEST(ActivationClippingTest, ANonPositiveValueKeepsZeroAsItsMaximum) {
  // every element <= 0, all kept: the only upper bound is 0, which clips nothing
  const ValueTails tails{4, 1, {0.0, -1.0, -2.0, -4.0}, {-4.0, -2.0, -1.0, 0.0}};
  const ActivationRange range = clippedRange(tails, false);
  EXPECT_FALSE(range.clipped);
  EXPECT_DOUBLE_EQ(range.max, 0.0);
  EXPECT_DOUBLE_EQ(range.min, -4.0);
  EXPECT_DOUBLE_EQ(range.squaredError, roundingError(4.0, 3, 255.0));
}

} // namespace
} // namespace torch_mp::core
