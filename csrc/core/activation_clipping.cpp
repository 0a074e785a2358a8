#include "core/activation_clipping.h"

#include <algorithm>
#include <limits>

namespace torch_mp::core {
namespace {

// A clipped range must at least halve the expected squared error of the observed min/max: the kept extremes are a
// sample of the calibration inputs, later inputs reach past a clip, and a clip of about one step (what the uniform
// rounding model finds optimal for a dense tail) gains a few percent at that risk.
constexpr double kClipGain = 2.0;

// The bounds one side of a range may be clipped to, from the outermost inwards, each with the squared error of moving
// the elements beyond it onto it: entry i bounds at extremes[i] (entry 0, the observed extreme, clips nothing), a last
// entry at 0 where every element on this side of 0 is among the extremes (else elements not kept would lie beyond 0
// unaccounted). `extremes` runs from the outermost element inwards; `sign` is +1 for the largest, -1 for the smallest.
struct ClipCandidates {
  std::vector<double> bound;
  std::vector<double> squaredError;
};

ClipCandidates clipCandidates(const std::vector<double>& extremes, double sign, int64_t numel) {
  ClipCandidates candidates;
  double sum = 0.0;
  double sumOfSquares = 0.0;
  int64_t beyond = 0;
  auto add = [&](double bound) {
    candidates.bound.push_back(bound);
    candidates.squaredError.push_back(sumOfSquares - 2.0 * bound * sum + static_cast<double>(beyond) * bound * bound);
  };
  for (double value : extremes) {
    if (sign * value <= 0.0) {
      break;
    }
    add(value);
    sum += value;
    sumOfSquares += value * value;
    ++beyond;
  }
  const bool allOnThisSideKept = beyond < static_cast<int64_t>(extremes.size()) ||
      static_cast<int64_t>(extremes.size()) == numel;
  if (allOnThisSideKept) {
    add(0.0);
  }
  return candidates;
}

} // namespace

ActivationRange clippedRange(const ValueTails& tails, bool reducedRange) {
  const double levels = reducedRange ? 127.0 : 255.0;
  const ClipCandidates high = clipCandidates(tails.largest, 1.0, tails.numel);
  const ClipCandidates low = clipCandidates(tails.smallest, -1.0, tails.numel);
  const double rounded = static_cast<double>(std::max<int64_t>(tails.numel - tails.zeros, 0));
  const auto error = [&](size_t lowIndex, size_t highIndex) {
    const double scale = (high.bound[highIndex] - low.bound[lowIndex]) / levels;
    return high.squaredError[highIndex] + low.squaredError[lowIndex] + rounded * scale * scale / 12.0;
  };
  ActivationRange best;
  if (high.bound.empty() || low.bound.empty()) {  // nothing kept of a side: no element observed
    return best;
  }
  best.minMaxSquaredError = error(0, 0);
  best.squaredError = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < low.bound.size(); ++i) {
    for (size_t j = 0; j < high.bound.size(); ++j) {
      const double candidate = error(i, j);
      if (candidate < best.squaredError) {  // strictly: on a tie the wider range (min/max first) stays
        best.squaredError = candidate;
        best.min = low.bound[i];
        best.max = high.bound[j];
        best.clipped = i > 0 || j > 0;
      }
    }
  }
  if (best.clipped && best.squaredError * kClipGain > best.minMaxSquaredError) {
    best.min = low.bound[0];
    best.max = high.bound[0];
    best.squaredError = best.minMaxSquaredError;
    best.clipped = false;
  }
  return best;
}

} // namespace torch_mp::core
