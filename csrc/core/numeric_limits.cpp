#include "core/numeric_limits.h"

#include <cmath>
#include <utility>

namespace torch_mp::core {

const char* lowDtypeName(LowDtype dtype) {
  return dtype == LowDtype::kFloat16 ? "float16" : "bfloat16";
}

double largestFinite(LowDtype dtype) {
  return dtype == LowDtype::kFloat16 ? 65504.0 : 3.3895313892515355e38;
}

double smallestNonZero(LowDtype dtype) {
  return dtype == LowDtype::kFloat16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -126);
}

std::optional<GuardVerdict> observedRangeVerdict(const ObservedRange& observed, LowDtype dtype, std::string name) {
  const double overflowLimit = largestFinite(dtype) / 2;
  const double smallestNormal = std::ldexp(1.0, -14);  // fp16's
  // 2^(significand bits): the first integer the low dtype skips is one past it
  const double exactIntegerLimit = dtype == LowDtype::kFloat16 ? 2048.0 : 256.0;
  // from 2^24 on every fp32 value is an integer: holding only integers says nothing there
  constexpr double kFp32ExactIntegerLimit = 16777216.0;
  const double largest = observed.largestMagnitude;
  if (largest > overflowLimit) {
    return GuardVerdict{GuardKind::kObservedOverflow, std::move(name), largest, overflowLimit};
  }
  if (observed.onlyIntegers && largest > exactIntegerLimit && largest < kFp32ExactIntegerLimit) {
    return GuardVerdict{GuardKind::kObservedIntegers, std::move(name), largest, exactIntegerLimit};
  }
  if (dtype == LowDtype::kFloat16 && largest > 0.0 && largest < smallestNormal) {
    return GuardVerdict{GuardKind::kObservedTiny, std::move(name), largest, smallestNormal};
  }
  return std::nullopt;
}

} // namespace torch_mp::core
