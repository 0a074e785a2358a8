// core::clippedRange on hand-made histograms: an outlier over millions of elements is clipped at the edge of least
// expected error, where the rounding it forces on every other element costs more than moving it onto the bound; the
// same outlier over few elements, an evenly filled range and a value of zeros only are not; the error figures are
// the formula's.
#include <gtest/gtest.h>

#include "core/activation_clipping.h"

namespace torch_mp::core {
namespace {

// `bins` bins of width 1 from `low`, each holding `perBin[k]` elements at its centre
ValueHistogram centred(double low, const std::vector<double>& perBin, int64_t zeros = 0) {
  ValueHistogram histogram{low, low + static_cast<double>(perBin.size()), zeros, {}, {}, {}};
  for (size_t k = 0; k < perBin.size(); ++k) {
    const double centre = low + static_cast<double>(k) + 0.5;
    histogram.count.push_back(perBin[k]);
    histogram.sum.push_back(perBin[k] * centre);
    histogram.sumOfSquares.push_back(perBin[k] * centre * centre);
  }
  return histogram;
}

double roundingError(double range, double elements, double levels) {
  const double scale = range / levels;
  return elements * scale * scale / 12.0;
}

// A relu's output on [0, 100]: `bulk` elements at 0.5 (and `zeros` at 0) in the first bin, one at 100 in the last
ValueHistogram bulkAndOneOutlier(double bulk, int64_t zeros = 0) {
  std::vector<double> perBin(100, 0.0);
  perBin[0] = bulk;
  ValueHistogram histogram = centred(0.0, perBin, zeros);
  histogram.count[0] += static_cast<double>(zeros);
  histogram.count[99] = 1.0;
  histogram.sum[99] = 100.0;
  histogram.sumOfSquares[99] = 100.0 * 100.0;
  return histogram;
}

TEST(ActivationClippingTest, AnOutlierOverMillionsOfElementsIsClippedWhereTheErrorIsLeast) {
  const ActivationRange range = clippedRange(bulkAndOneOutlier(1e7), false);
  // error(b) = (100 - b)^2 + 10^7 (b / 255)^2 / 12 over the edges b: least at b = 7 (9277.0; b = 8: 9284.2)
  EXPECT_TRUE(range.clipped);
  EXPECT_DOUBLE_EQ(range.min, 0.0);
  EXPECT_DOUBLE_EQ(range.max, 7.0);
  EXPECT_NEAR(range.squaredError, 93.0 * 93.0 + roundingError(7.0, 1e7, 255.0), 1e-6);
  EXPECT_NEAR(range.minMaxSquaredError, roundingError(100.0, 1e7 + 1, 255.0), 1e-6);
}

TEST(ActivationClippingTest, TheSameOutlierOverFewElementsIsKept) {
  // 1,000 elements: rounding them at 100 / 255 (12.83) costs less than the least clip (to 99: 1 + 12.56)
  const ActivationRange range = clippedRange(bulkAndOneOutlier(1e3), false);
  EXPECT_FALSE(range.clipped);
  EXPECT_DOUBLE_EQ(range.min, 0.0);
  EXPECT_DOUBLE_EQ(range.max, 100.0);
  EXPECT_DOUBLE_EQ(range.squaredError, range.minMaxSquaredError);
  EXPECT_NEAR(range.minMaxSquaredError, roundingError(100.0, 1e3 + 1, 255.0), 1e-9);
}

TEST(ActivationClippingTest, AnEvenlyFilledRangeIsNotClipped) {
  // clipping a bin off each end moves 2 x 10^4 elements by 0.5 (5,000) to save 1,240 of the rounding's 26,876
  const ActivationRange range = clippedRange(centred(-64.0, std::vector<double>(128, 1e4)), false);
  EXPECT_FALSE(range.clipped);
  EXPECT_DOUBLE_EQ(range.min, -64.0);
  EXPECT_DOUBLE_EQ(range.max, 64.0);
  EXPECT_NEAR(range.squaredError, roundingError(128.0, 1.28e6, 255.0), 1e-6);
}

TEST(ActivationClippingTest, ZerosCostNothingAndTheReducedRangeRoundsCoarser) {
  // the first case with as many exact zeros again (in bin 0) and 127 levels: only the non-zero elements round
  const ActivationRange range = clippedRange(bulkAndOneOutlier(1e7, 10'000'000), true);
  // error(b) = (100 - b)^2 + 10^7 (b / 127)^2 / 12: least at b = 2 (9810.7; b = 1: 9852.7, b = 3: 9874.0)
  EXPECT_TRUE(range.clipped);
  EXPECT_DOUBLE_EQ(range.min, 0.0);
  EXPECT_DOUBLE_EQ(range.max, 2.0);
  EXPECT_NEAR(range.squaredError, 98.0 * 98.0 + roundingError(2.0, 1e7, 127.0), 1e-6);
  EXPECT_NEAR(range.minMaxSquaredError, roundingError(100.0, 1e7 + 1, 127.0), 1e-6);
}

TEST(ActivationClippingTest, ZerosOnlyHaveNoBinsAndTheirRangeIsZero) {
  const ActivationRange range = clippedRange(ValueHistogram{0.0, 0.0, 1000, {}, {}, {}}, false);
  EXPECT_FALSE(range.clipped);
  EXPECT_DOUBLE_EQ(range.min, 0.0);
  EXPECT_DOUBLE_EQ(range.max, 0.0);
  EXPECT_DOUBLE_EQ(range.squaredError, 0.0);
}

} // namespace
} // namespace torch_mp::core
