// Where a low dtype has fast kernels, as data: the CPU instruction sets, and the CUDA compute capability, that give
// a target's heavy ops (the policy's low and low_fp32_output ops) kernels at least as fast as fp32. Without them
// ATen still computes those ops in the low dtype, only slower than in fp32 (on a CPU fp16 convolutions through
// reference loops, bf16 through oneDNN's emulation; on a GPU without the dtype's tensor cores, through fp32 units),
// so the default policy keeps them fp32 and says why (OpPolicy::defaults).
// Knows nothing about TorchScript.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/policy_vocabulary.h"

namespace torch_mp::core {

enum class CpuFeature : uint8_t {
  kAvx512Fp16,  // x86 AVX512-FP16 (Sapphire Rapids and later)
  kAmxFp16,     // x86 AMX-FP16 (Granite Rapids)
  kAvx512Bf16,  // x86 AVX512-BF16 (Cooper Lake, Sapphire Rapids, AMD Zen 4)
  kAmxBf16,     // x86 AMX-BF16 (Sapphire Rapids)
  kArmFp16,     // Arm half-precision SIMD arithmetic (FEAT_FP16, asimdhp)
  kArmBf16,     // Arm BFloat16 instructions (FEAT_BF16)
  kAvx512Vnni,  // x86 AVX512-VNNI: u8 x s8 dot products with 32-bit sums (Cascade Lake, Zen 4): full-range int8
  kAvxVnni,     // x86 AVX-VNNI: the same on 256-bit registers (Alder Lake, Sapphire Rapids)
  kAmxInt8,     // x86 AMX-INT8 tiles (Sapphire Rapids)
};

// A set of CPU features.
class CpuFeatures {
 public:
  // Those of the CPU this process runs on, unless the environment variable TORCH_MP_CPU_FEATURES names others (to
  // plan for a deployment CPU other than this one): "all", "none", or feature names separated by commas
  // ("avx512_bf16,amx_bf16"); std::invalid_argument names a malformed one. Read on every call; the detection itself
  // runs once.
  static CpuFeatures host();
  static CpuFeatures all();
  static CpuFeatures none() {
    return CpuFeatures();
  }
  // "all", "none", "" (none) or comma-separated names; nullopt when a name is unknown.
  static std::optional<CpuFeatures> parse(const std::string& text);

  bool has(CpuFeature feature) const {
    return bits_ & bit(feature);
  }
  void add(CpuFeature feature) {
    bits_ |= bit(feature);
  }
  std::vector<CpuFeature> list() const;
  bool operator==(const CpuFeatures& other) const {
    return bits_ == other.bits_;
  }

 private:
  static uint32_t bit(CpuFeature feature) {
    return 1u << static_cast<unsigned>(feature);
  }
  uint32_t bits_ = 0;
};

const char* toString(CpuFeature feature);  // "avx512_fp16", as /proc/cpuinfo spells it
// How a set of features is written: "'all', 'none' or names from avx512_fp16, ..., separated by commas".
std::string cpuFeaturesSyntax();
std::optional<CpuFeature> cpuFeatureFromString(const std::string& name);

// Why the target's heavy ops would run slower in its low dtype than in fp32: a CPU target on a CPU with these
// features, a CUDA target on a GPU of this capability (nullopt: not known, taken as fast). Nullopt where the device
// has fast kernels for them.
std::optional<std::string> slowLowPrecisionKernels(
    Target target,
    const CpuFeatures& features,
    std::optional<CudaCapability> gpu = std::nullopt);

} // namespace torch_mp::core
