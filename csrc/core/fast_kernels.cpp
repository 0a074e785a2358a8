#include "core/fast_kernels.h"

#include <cstdlib>
#include <initializer_list>
#include <sstream>
#include <stdexcept>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace torch_mp::core {
namespace {

constexpr CpuFeature kAllFeatures[] = {
    CpuFeature::kAvx512Fp16, CpuFeature::kAmxFp16, CpuFeature::kAvx512Bf16,
    CpuFeature::kAmxBf16,    CpuFeature::kArmFp16, CpuFeature::kArmBf16,
    CpuFeature::kAvx512Vnni, CpuFeature::kAvxVnni, CpuFeature::kAmxInt8,
};

// The instruction sets that give a CPU target's heavy ops fast kernels in its low dtype; any one suffices.
struct FastKernelRequirement {
  Target target;
  std::initializer_list<CpuFeature> anyOf;
  const char* without;  // what happens without them
};

// clang-format off
const FastKernelRequirement kFastKernelRequirements[] = {
    {Target::kCpuFloat16, {CpuFeature::kAvx512Fp16, CpuFeature::kAmxFp16, CpuFeature::kArmFp16},
     "ATen computes float16 convolutions, matrix products and RNNs through reference loops (measured on an AMD "
     "EPYC, torch 2.13: conv2d 20x, bmm 50x, linear 5x, LSTM 5x slower than fp32)"},
    {Target::kCpuBFloat16, {CpuFeature::kAvx512Bf16, CpuFeature::kAmxBf16, CpuFeature::kArmBf16},
     "oneDNN emulates bfloat16 arithmetic in fp32 registers (measured on an Intel Xeon without AMX: matrix products "
     "at 0.56x the speed of fp32)"},
};

// The compute capability from which a CUDA target's heavy ops have tensor-core kernels in its low dtype.
struct GpuKernelRequirement {
  Target target;
  CudaCapability since;
  const char* without;  // what happens on older GPUs
};

const GpuKernelRequirement kGpuKernelRequirements[] = {
    {Target::kCudaFloat16, {7, 0},
     "float16 tensor cores came with Volta (sm_70): cuBLAS and cuDNN compute float16 on older GPUs without them "
     "(Pascal's GeForce cards at 1/64 of their fp32 rate)"},
    {Target::kCudaBFloat16, {8, 0},
     "bfloat16 tensor cores came with Ampere (sm_80): on older GPUs (a T4 is 7.5) PyTorch emulates bfloat16 matrix "
     "products and convolutions in fp32 units, no faster than fp32 and less precise"},
};
// clang-format on

#if defined(__x86_64__) || defined(__i386__)
// Whether the OS saves the register state the features need (XCR0): AVX512's opmask and ZMM registers, AMX's
// tile configuration and data.
uint64_t enabledStateComponents() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) {  // OSXSAVE
    return 0;
  }
  unsigned low = 0, high = 0;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (static_cast<uint64_t>(high) << 32) | low;
}

CpuFeatures detect() {
  CpuFeatures features;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    return features;
  }
  const unsigned leaf7Edx = edx;
  const unsigned leaf7Ecx = ecx;
  const unsigned maxSubleaf = eax;
  unsigned leaf7Sub1Eax = 0;
  if (maxSubleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    leaf7Sub1Eax = eax;
  }
  const uint64_t state = enabledStateComponents();
  const bool avx512State = (state & 0xe6) == 0xe6;      // SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM
  const bool amxState = (state & 0x60000) == 0x60000;  // XTILECFG, XTILEDATA
  if (avx512State && (leaf7Edx & (1u << 23))) {
    features.add(CpuFeature::kAvx512Fp16);
  }
  if (avx512State && (leaf7Sub1Eax & (1u << 5))) {
    features.add(CpuFeature::kAvx512Bf16);
  }
  if (amxState && (leaf7Edx & (1u << 22))) {
    features.add(CpuFeature::kAmxBf16);
  }
  if (amxState && (leaf7Sub1Eax & (1u << 21))) {
    features.add(CpuFeature::kAmxFp16);
  }
  if (avx512State && (leaf7Ecx & (1u << 11))) {
    features.add(CpuFeature::kAvx512Vnni);
  }
  if ((state & 0x6) == 0x6 && (leaf7Sub1Eax & (1u << 4))) {  // SSE and AVX state
    features.add(CpuFeature::kAvxVnni);
  }
  if (amxState && (leaf7Edx & (1u << 25))) {
    features.add(CpuFeature::kAmxInt8);
  }
  return features;
}
#elif defined(__aarch64__) && defined(__linux__)
CpuFeatures detect() {
  CpuFeatures features;
  if (getauxval(AT_HWCAP) & (1ul << 10)) {  // HWCAP_ASIMDHP
    features.add(CpuFeature::kArmFp16);
  }
  if (getauxval(AT_HWCAP2) & (1ul << 14)) {  // HWCAP2_BF16
    features.add(CpuFeature::kArmBf16);
  }
  return features;
}
#elif defined(__aarch64__) && defined(__APPLE__)
bool sysctlFlag(const char* name) {
  int value = 0;
  size_t size = sizeof(value);
  return sysctlbyname(name, &value, &size, nullptr, 0) == 0 && value != 0;
}

CpuFeatures detect() {
  CpuFeatures features;
  if (sysctlFlag("hw.optional.arm.FEAT_FP16")) {
    features.add(CpuFeature::kArmFp16);
  }
  if (sysctlFlag("hw.optional.arm.FEAT_BF16")) {
    features.add(CpuFeature::kArmBf16);
  }
  return features;
}
#else
CpuFeatures detect() {
  return CpuFeatures();
}
#endif

} // namespace

CpuFeatures CpuFeatures::host() {
  // an empty value declares nothing (`TORCH_MP_CPU_FEATURES= command` clears a declaration): the host's are detected
  const char* declared = std::getenv("TORCH_MP_CPU_FEATURES");
  if (declared != nullptr && *declared != '\0') {
    if (std::optional<CpuFeatures> features = parse(declared)) {
      return *features;
    }
    throw std::invalid_argument(std::string("torch_mp: TORCH_MP_CPU_FEATURES='") + declared +
                                "' names an unknown CPU feature; use " + cpuFeaturesSyntax());
  }
  static const CpuFeatures detected = detect();
  return detected;
}

CpuFeatures CpuFeatures::all() {
  CpuFeatures features;
  for (CpuFeature feature : kAllFeatures) {
    features.add(feature);
  }
  return features;
}

std::optional<CpuFeatures> CpuFeatures::parse(const std::string& text) {
  if (text == "all") {
    return all();
  }
  CpuFeatures features;
  if (text == "none") {
    return features;
  }
  std::stringstream stream(text);
  std::string name;
  while (std::getline(stream, name, ',')) {
    const size_t begin = name.find_first_not_of(' ');
    if (begin == std::string::npos) {
      continue;
    }
    const std::optional<CpuFeature> feature =
        cpuFeatureFromString(name.substr(begin, name.find_last_not_of(' ') - begin + 1));
    if (!feature) {
      return std::nullopt;
    }
    features.add(*feature);
  }
  return features;
}

std::vector<CpuFeature> CpuFeatures::list() const {
  std::vector<CpuFeature> features;
  for (CpuFeature feature : kAllFeatures) {
    if (has(feature)) {
      features.push_back(feature);
    }
  }
  return features;
}

const char* toString(CpuFeature feature) {
  switch (feature) {
    case CpuFeature::kAvx512Fp16:
      return "avx512_fp16";
    case CpuFeature::kAmxFp16:
      return "amx_fp16";
    case CpuFeature::kAvx512Bf16:
      return "avx512_bf16";
    case CpuFeature::kAmxBf16:
      return "amx_bf16";
    case CpuFeature::kArmFp16:
      return "asimdhp";
    case CpuFeature::kArmBf16:
      return "bf16";
    case CpuFeature::kAvx512Vnni:
      return "avx512_vnni";
    case CpuFeature::kAvxVnni:
      return "avx_vnni";
    case CpuFeature::kAmxInt8:
      return "amx_int8";
  }
  return "?";
}

std::string cpuFeaturesSyntax() {
  std::string names;
  for (CpuFeature feature : kAllFeatures) {
    names += names.empty() ? "" : ", ";
    names += toString(feature);
  }
  return "'all', 'none' or names from " + names + " separated by commas";
}

std::optional<CpuFeature> cpuFeatureFromString(const std::string& name) {
  for (CpuFeature feature : kAllFeatures) {
    if (name == toString(feature)) {
      return feature;
    }
  }
  return std::nullopt;
}

std::optional<std::string> slowLowPrecisionKernels(
    Target target,
    const CpuFeatures& features,
    std::optional<CudaCapability> gpu) {
  for (const GpuKernelRequirement& requirement : kGpuKernelRequirements) {
    if (requirement.target != target || !gpu || !(*gpu < requirement.since)) {
      continue;
    }
    return "kept fp32: this GPU's compute capability " + std::to_string(gpu->major) + "." +
        std::to_string(gpu->minor) + " is below " + std::to_string(requirement.since.major) + "." +
        std::to_string(requirement.since.minor) + ", and " + requirement.without +
        "; set the op 'low' in the policy to force it";
  }
  for (const FastKernelRequirement& requirement : kFastKernelRequirements) {
    if (requirement.target != target) {
      continue;
    }
    std::string names;
    for (CpuFeature feature : requirement.anyOf) {
      if (features.has(feature)) {
        return std::nullopt;
      }
      names += names.empty() ? "" : ", ";
      names += toString(feature);
    }
    return std::string("kept fp32: this CPU has none of ") + names + ", so " + requirement.without +
        "; set the op 'low' in the policy to force it, or TORCH_MP_CPU_FEATURES to plan for another CPU";
  }
  return std::nullopt;
}

} // namespace torch_mp::core
