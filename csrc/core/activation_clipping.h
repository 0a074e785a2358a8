// The range an int8 activation is quantized over: its observed min/max, or narrower where clipping the few values in
// its tails costs less squared error than the coarser rounding of every other value that keeping them forces (a
// value whose rare outliers would otherwise spend most of the 255 steps on nothing). Knows numbers only: the front
// gives each value's extreme elements as observed.
#pragma once

#include <cstdint>
#include <vector>

namespace torch_mp::core {

// What observation kept of a value for clipping: its element count, how many are exactly 0 (quantized without
// error: 0 is always a quantization level), and its largest and smallest elements (at most a few hundred each, the
// largest descending, the smallest ascending; over all calibration runs).
struct ValueTails {
  int64_t numel = 0;
  int64_t zeros = 0;
  std::vector<double> largest;
  std::vector<double> smallest;
};

struct ActivationRange {
  double min = 0.0;
  double max = 0.0;
  bool clipped = false;  // narrower than the observed min/max
  // the expected squared error summed over the value's elements: of this range, and of the observed min/max
  double squaredError = 0.0;
  double minMaxSquaredError = 0.0;
};

// The range, among the observed min/max and clipping points at each kept extreme element, of least expected squared
// error over the value: the clipped elements' exact (value - bound)^2, plus a uniform rounding error scale^2 / 12 for
// every other non-zero element, scale = range / (qmax - qmin) as activationQuantization makes it (qmax 127 with the
// reduced range, else 255), where it at least halves the observed min/max's (else that). Only ranges holding 0 are
// candidates (activationQuantization widens to hold it).
ActivationRange clippedRange(const ValueTails& tails, bool reducedRange);

} // namespace torch_mp::core
