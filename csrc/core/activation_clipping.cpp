#include "core/activation_clipping.h"

#include <algorithm>

namespace torch_mp::core {
namespace {

// What the bins on one side of each edge hold: entry k sums the bins below edge k (from the low end) or at and above
// it (from the high end); k runs over the bins + 1 edges.
struct Side {
  std::vector<double> count;
  std::vector<double> sum;
  std::vector<double> sumOfSquares;
};

Side below(const ValueHistogram& h) {
  const size_t bins = h.count.size();
  Side side{std::vector<double>(bins + 1, 0.0), std::vector<double>(bins + 1, 0.0), std::vector<double>(bins + 1, 0.0)};
  for (size_t k = 0; k < bins; ++k) {
    side.count[k + 1] = side.count[k] + h.count[k];
    side.sum[k + 1] = side.sum[k] + h.sum[k];
    side.sumOfSquares[k + 1] = side.sumOfSquares[k] + h.sumOfSquares[k];
  }
  return side;
}

Side above(const ValueHistogram& h) {  // summed from the top, so a small tail's figures carry no cancellation
  const size_t bins = h.count.size();
  Side side{std::vector<double>(bins + 1, 0.0), std::vector<double>(bins + 1, 0.0), std::vector<double>(bins + 1, 0.0)};
  for (size_t k = bins; k-- > 0;) {
    side.count[k] = side.count[k + 1] + h.count[k];
    side.sum[k] = side.sum[k + 1] + h.sum[k];
    side.sumOfSquares[k] = side.sumOfSquares[k + 1] + h.sumOfSquares[k];
  }
  return side;
}

// sum (x - bound)^2 over the elements a side holds at edge k
double movedError(const Side& side, size_t k, double bound) {
  return side.sumOfSquares[k] - 2.0 * bound * side.sum[k] + side.count[k] * bound * bound;
}

} // namespace

ActivationRange clippedRange(const ValueHistogram& histogram, bool reducedRange) {
  ActivationRange best;
  best.min = histogram.low;
  best.max = histogram.high;
  const size_t bins = histogram.count.size();
  if (bins == 0 || !(histogram.high > histogram.low)) {  // nothing but zeros observed
    return best;
  }
  const double levels = reducedRange ? 127.0 : 255.0;
  const double width = (histogram.high - histogram.low) / static_cast<double>(bins);
  const auto edge = [&](size_t k) {
    return k == bins ? histogram.high : histogram.low + width * static_cast<double>(k);
  };
  const Side low = below(histogram);
  const Side high = above(histogram);
  const double total = low.count[bins];
  const auto error = [&](size_t lowEdge, size_t highEdge) {
    const double scale = (edge(highEdge) - edge(lowEdge)) / levels;
    const double rounded = std::max(total - low.count[lowEdge] - high.count[highEdge] -
                                        static_cast<double>(histogram.zeros), 0.0);
    return movedError(low, lowEdge, edge(lowEdge)) + movedError(high, highEdge, edge(highEdge)) +
        rounded * scale * scale / 12.0;
  };
  best.minMaxSquaredError = error(0, bins);
  best.squaredError = best.minMaxSquaredError;
  size_t bestLow = 0;
  size_t bestHigh = bins;
  for (size_t i = 0; i < bins && edge(i) <= 0.0; ++i) {
    for (size_t j = bins; j > i && edge(j) >= 0.0; --j) {
      const double candidate = error(i, j);
      if (candidate < best.squaredError) {  // strictly: on a tie the wider range (min/max first) stays
        best.squaredError = candidate;
        bestLow = i;
        bestHigh = j;
      }
    }
  }
  best.min = edge(bestLow);
  best.max = edge(bestHigh);
  best.clipped = bestLow > 0 || bestHigh < bins;
  return best;
}

} // namespace torch_mp::core
