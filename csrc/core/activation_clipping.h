// The range an int8 activation is quantized over: its observed min/max, or narrower where clipping the elements
// beyond costs less squared error than the coarser rounding of every other element that keeping them forces (rare
// outliers spending most of the 255 steps on nothing, or a long thin tail of a trained network's activations).
// Knows numbers only: the front gives each value's histogram as observed.
#pragma once

#include <cstdint>
#include <vector>

namespace torch_mp::core {

// What observation kept of a value for clipping, over all calibration runs: equal bins spanning [low, high] (the
// observed min/max widened to hold 0), each with its elements' count, sum and sum of squares (moving a bin's elements
// onto a bound then costs exactly sum (x - bound)^2), and how many elements are exactly 0 (quantized without error:
// 0 is always a quantization level). No bins: nothing but zeros observed.
struct ValueHistogram {
  double low = 0.0;
  double high = 0.0;
  int64_t zeros = 0;
  std::vector<double> count;
  std::vector<double> sum;
  std::vector<double> sumOfSquares;
};

struct ActivationRange {
  double min = 0.0;
  double max = 0.0;
  bool clipped = false;  // narrower than the observed min/max
  // the expected squared error summed over the value's elements: of this range, and of the observed min/max
  double squaredError = 0.0;
  double minMaxSquaredError = 0.0;
};

// The range, among the observed min/max and those bounded by bin edges (holding 0), of least expected squared error
// over the value: the elements beyond a bound moved onto it (exact), plus a uniform rounding error scale^2 / 12 for
// every other non-zero element, scale = range / (qmax - qmin) as activationQuantization makes it (qmax 127 with the
// reduced range, else 255). No margin over min/max is asked of a clip: on trained MobileNetV2 and EfficientNet-Lite0
// the least-error range is the most accurate on held-out photos too (benchmarks/results/INT8_TRAINED.md, where
// asking 1.2x or 2x less error of a clip lost most of the gain).
ActivationRange clippedRange(const ValueHistogram& histogram, bool reducedRange);

} // namespace torch_mp::core
