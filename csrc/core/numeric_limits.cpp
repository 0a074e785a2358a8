#include "core/numeric_limits.h"

#include <cmath>

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

} // namespace torch_mp::core
