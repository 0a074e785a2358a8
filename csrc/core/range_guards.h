// The range guards on the numbers one node reads and writes, written once for both fronts: a front lists the numbers
// of its IR (jit/plan/numeric_guards for TorchScript, _C.judge_ranges for torch.export programs) and each
// guard gives the first the low dtype would lose, or nothing.
//
//   observed range  a computed fp32 tensor observed above half the low dtype's max (one binade in reserve: the
//                   example inputs need not show the largest value), holding integers it skips (positions, indices),
//                   or, in fp16, only below the smallest normal number
//   constant range  a floating constant (a tensor's largest finite magnitude, a finite scalar's) beyond its max: bf16's
//                   max, 3.39e38, is below fp32's, so masks of torch.finfo(torch.float32).min do not fit either
//   lost scalar     a non-zero float scalar more than 1/16 off after rounding to it (kernels convert a scalar to the
//                   tensor's dtype, as clamp its bounds: fp16 turns 1e-8 into 0, and log gives -inf)
//
// The underflow-to-zero guard walks a graph (core/underflow_to_zero); core/classify_node orders the guards among the
// other rules.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/numeric_limits.h"
#include "core/op_policy.h"

namespace torch_mp::core {

// What was observed of one computed fp32 tensor over the example and calibration runs.
struct ObservedRange {
  double largestMagnitude = 0.0;
  bool onlyIntegers = false;
};

struct ObservedNumber {
  std::string name;  // the value's (TorchScript debug name, FX node name)
  ObservedRange range;
};

struct NamedNumber {
  std::string name;
  double value;
};

std::optional<GuardVerdict> observedRangeVerdict(const ObservedRange& observed, LowDtype dtype, std::string name);

std::optional<GuardVerdict> observedRangeGuard(const std::vector<ObservedNumber>& values, LowDtype dtype);
// `largestMagnitudes`: per constant the node reads, its largest finite magnitude (0 where it has none).
std::optional<GuardVerdict> constantRangeGuard(const std::vector<NamedNumber>& largestMagnitudes, LowDtype dtype);
std::optional<GuardVerdict> lostScalarGuard(const std::vector<NamedNumber>& scalars, LowDtype dtype);

// The numbers of one node the three guards judge, for a front that lists them rather than judging them itself (the
// torch.export front's, through _C.judge_ranges), and the guards' verdicts on them.
struct RangeGuardNumbers {
  std::vector<ObservedNumber> observed;  // the computed fp32 tensors it reads and writes
  std::vector<NamedNumber> constants;    // per stored tensor and finite float scalar it reads, its largest magnitude
  std::vector<NamedNumber> scalars;      // the float scalars it reads
};

struct RangeGuardVerdicts {
  std::optional<GuardVerdict> observedRange;
  std::optional<GuardVerdict> constantRange;
  std::optional<GuardVerdict> lostScalar;
};

RangeGuardVerdicts judgeRanges(const RangeGuardNumbers& numbers, LowDtype dtype);

// The low dtype's value nearest `value` (ties to even, subnormals kept, beyond its range infinite), as c10::Half and
// c10::BFloat16 round an fp32 number.
double roundedTo(double value, LowDtype dtype);

} // namespace torch_mp::core
