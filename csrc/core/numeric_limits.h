// The low dtypes and their limits (core/range_guards applies them).
#pragma once

#include <cstdint>

namespace torch_mp::core {

enum class LowDtype : uint8_t { kFloat16, kBFloat16 };

// Its name as torch spells the dtype (torch.float16): "float16" or "bfloat16", in reports and messages.
const char* lowDtypeName(LowDtype dtype);

// The largest finite value (fp16: 65504; bf16: 3.39e38, a little below fp32's 3.40e38).
double largestFinite(LowDtype dtype);

// Below this magnitude a value may become 0: fp16's smallest subnormal 2^-24 (5.96e-8); bf16's smallest normal
// 2^-126 (1.18e-38), since CPUs convert to bf16 flushing subnormals (AVX512-BF16's vcvtneps2bf16).
double smallestNonZero(LowDtype dtype);

} // namespace torch_mp::core
