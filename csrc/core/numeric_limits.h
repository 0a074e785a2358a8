// The low dtypes' limits and the verdict on an observed value: the part of the numeric guards that needs no graph,
// asked by both fronts (jit/plan/numeric_guards for TorchScript, torch_mp/_export.py for torch.export programs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/op_policy.h"

namespace torch_mp::core {

enum class LowDtype : uint8_t { kFloat16, kBFloat16 };

// Its name as torch spells the dtype (torch.float16): "float16" or "bfloat16", in reports and messages.
const char* lowDtypeName(LowDtype dtype);

// The largest finite value (fp16: 65504; bf16: 3.39e38, a little below fp32's 3.40e38).
double largestFinite(LowDtype dtype);

// Below this magnitude a value may become 0: fp16's smallest subnormal 2^-24 (5.96e-8); bf16's smallest normal
// 2^-126 (1.18e-38), since CPUs convert to bf16 flushing subnormals (AVX512-BF16's vcvtneps2bf16).
double smallestNonZero(LowDtype dtype);

// What was observed of one computed fp32 tensor over the example and calibration runs.
struct ObservedRange {
  double largestMagnitude = 0.0;
  bool onlyIntegers = false;
};

// Whether the low dtype would lose the value `name`: observed above half its max (one binade in reserve: the example
// inputs need not show the largest value), holding integers it skips (positions, indices), or, in fp16, only below
// the smallest normal number. The first that applies, or nothing.
std::optional<GuardVerdict> observedRangeVerdict(const ObservedRange& observed, LowDtype dtype, std::string name);

} // namespace torch_mp::core
