// ConvertOptions (torch_mp/convert.h, the public API) as the stages read it: the tensor dtype of its low dtype.
#pragma once

#include <c10/core/ScalarType.h>

#include "core/numeric_limits.h"
#include "torch_mp/convert.h"

namespace torch_mp::jit {

// The tensor dtype of a low dtype, for the passes that cast.
c10::ScalarType scalarTypeOf(core::LowDtype lowDtype);

} // namespace torch_mp::jit
