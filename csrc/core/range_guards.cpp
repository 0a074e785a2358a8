#include "core/range_guards.h"

#include <cmath>
#include <limits>
#include <utility>

namespace torch_mp::core {

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

std::optional<GuardVerdict> observedRangeGuard(const std::vector<ObservedNumber>& values, LowDtype dtype) {
  for (const ObservedNumber& value : values) {
    if (std::optional<GuardVerdict> verdict = observedRangeVerdict(value.range, dtype, value.name)) {
      return verdict;
    }
  }
  return std::nullopt;
}

std::optional<GuardVerdict> constantRangeGuard(const std::vector<NamedNumber>& largestMagnitudes, LowDtype dtype) {
  const double limit = largestFinite(dtype);
  for (const NamedNumber& constant : largestMagnitudes) {
    if (constant.value > limit) {
      return GuardVerdict{GuardKind::kConstantRange, constant.name, constant.value, limit};
    }
  }
  return std::nullopt;
}

std::optional<GuardVerdict> lostScalarGuard(const std::vector<NamedNumber>& scalars, LowDtype dtype) {
  for (const NamedNumber& scalar : scalars) {
    if (scalar.value == 0.0 || !std::isfinite(scalar.value)) {
      continue;
    }
    const double rounded = roundedTo(scalar.value, dtype);
    if (std::abs(rounded - scalar.value) > std::abs(scalar.value) / 16) {
      return GuardVerdict{GuardKind::kLostScalar, scalar.name, scalar.value, rounded};
    }
  }
  return std::nullopt;
}

RangeGuardVerdicts judgeRanges(const RangeGuardNumbers& numbers, LowDtype dtype) {
  return {observedRangeGuard(numbers.observed, dtype), constantRangeGuard(numbers.constants, dtype),
          lostScalarGuard(numbers.scalars, dtype)};
}

double roundedTo(double value, LowDtype dtype) {
  const float single = static_cast<float>(value);  // c10 rounds the fp32 number
  if (!std::isfinite(single) || single == 0.0f) {
    return single;
  }
  // significand bits, and the exponent (std::frexp's: |x| = m 2^e, 0.5 <= m < 1) of the smallest normal number
  const int digits = dtype == LowDtype::kFloat16 ? 11 : 8;
  const int smallestNormalExponent = dtype == LowDtype::kFloat16 ? -13 : -125;
  int exponent = 0;
  std::frexp(single, &exponent);
  const double spacing = std::ldexp(1.0, std::max(exponent, smallestNormalExponent) - digits);
  const double rounded = std::nearbyint(static_cast<double>(single) / spacing) * spacing;  // ties to even
  // beyond the largest finite number by half a spacing or more rounds to infinity
  const double overflow = largestFinite(dtype) + std::ldexp(1.0, (dtype == LowDtype::kFloat16 ? 16 : 128) - digits - 1);
  return std::abs(rounded) >= overflow ? std::copysign(std::numeric_limits<double>::infinity(), value) : rounded;
}

} // namespace torch_mp::core
