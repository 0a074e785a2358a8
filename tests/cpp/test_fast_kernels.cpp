// The fast-kernel rule: a CPU target's heavy ops stay fp32 in the default policy where the CPU has no fast kernels
// for the low dtype, with the reason; CUDA targets and CPUs with the instruction sets keep them low.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "core/fast_kernels.h"
#include "core/op_policy.h"

namespace torch_mp::core {
namespace {

CpuFeatures featuresOf(const std::string& names) {
  std::optional<CpuFeatures> features = CpuFeatures::parse(names);
  EXPECT_TRUE(features) << names;
  return features.value_or(CpuFeatures::none());
}

TEST(FastKernels, ParsesFeatureNames) {
  const CpuFeatures features = featuresOf("avx512_bf16, amx_bf16");
  EXPECT_TRUE(features.has(CpuFeature::kAvx512Bf16));
  EXPECT_TRUE(features.has(CpuFeature::kAmxBf16));
  EXPECT_FALSE(features.has(CpuFeature::kAvx512Fp16));
  EXPECT_EQ(featuresOf("none"), CpuFeatures::none());
  EXPECT_EQ(featuresOf(""), CpuFeatures::none());
  EXPECT_EQ(featuresOf("all"), CpuFeatures::all());
  EXPECT_FALSE(CpuFeatures::parse("avx512_bf16,sse9"));
}

TEST(FastKernels, Fp16WithoutFp16ArithmeticKeepsHeavyOpsFp32) {
  const OpPolicy policy = OpPolicy::defaults(Target::kCpuFloat16, featuresOf("avx512_bf16,amx_bf16"));
  for (const char* op : {"aten::conv2d", "aten::linear", "aten::lstm", "aten::scaled_dot_product_attention"}) {
    const PolicyEntry* entry = policy.find(op);
    ASSERT_NE(entry, nullptr) << op;
    EXPECT_EQ(entry->category, OpCategory::kFp32) << op;
    EXPECT_NE(entry->reason.find("kept fp32: this CPU has none of avx512_fp16, amx_fp16, asimdhp"),
              std::string::npos)
        << entry->reason;
  }
  // precision-neutral and fp32 entries are the same as on any target
  const OpPolicy cuda = OpPolicy::defaults(Target::kCudaFloat16, CpuFeatures::none());
  for (const char* op : {"aten::relu", "aten::cat", "aten::softmax", "aten::add"}) {
    EXPECT_EQ(policy.find(op)->category, cuda.find(op)->category) << op;
    EXPECT_EQ(policy.find(op)->reason, cuda.find(op)->reason) << op;
  }
}

TEST(FastKernels, InstructionSetsOrCudaKeepHeavyOpsLow) {
  EXPECT_EQ(OpPolicy::defaults(Target::kCpuFloat16, featuresOf("avx512_fp16")).categoryOf("aten::conv2d"),
            OpCategory::kLowPrecision);
  EXPECT_EQ(OpPolicy::defaults(Target::kCpuFloat16, featuresOf("asimdhp")).categoryOf("aten::mm"),
            OpCategory::kLowPrecision);
  EXPECT_EQ(OpPolicy::defaults(Target::kCpuBFloat16, featuresOf("avx512_bf16")).categoryOf("aten::conv2d"),
            OpCategory::kLowPrecision);
  EXPECT_EQ(OpPolicy::defaults(Target::kCpuBFloat16, featuresOf("avx512_fp16")).categoryOf("aten::conv2d"),
            OpCategory::kFp32);
  // a CUDA target ignores the CPU; an unknown GPU is taken as fast, as are an A100 (8.0) and an H100 (9.0)
  for (Target cuda : {Target::kCudaFloat16, Target::kCudaBFloat16}) {
    for (std::optional<CudaCapability> gpu :
         {std::optional<CudaCapability>(), std::make_optional(CudaCapability{8, 0}),
          std::make_optional(CudaCapability{9, 0})}) {
      EXPECT_FALSE(slowLowPrecisionKernels(cuda, CpuFeatures::none(), gpu));
      EXPECT_EQ(OpPolicy::defaults(cuda, CpuFeatures::none(), gpu).categoryOf("aten::conv2d"),
                OpCategory::kLowPrecision);
    }
  }
}

// A T4 (7.5) has fp16 tensor cores but none for bf16; a GeForce GTX 1080 (6.1) has neither.
TEST(FastKernels, GpuWithoutTensorCoresForTheLowDtypeKeepsHeavyOpsFp32) {
  const CudaCapability t4{7, 5};
  const CudaCapability pascal{6, 1};
  EXPECT_EQ(OpPolicy::defaults(Target::kCudaFloat16, CpuFeatures::none(), t4).categoryOf("aten::conv2d"),
            OpCategory::kLowPrecision);
  const OpPolicy bf16OnT4 = OpPolicy::defaults(Target::kCudaBFloat16, CpuFeatures::all(), t4);
  for (const char* op : {"aten::conv2d", "aten::linear", "aten::lstm", "aten::scaled_dot_product_attention"}) {
    EXPECT_EQ(bf16OnT4.categoryOf(op), OpCategory::kFp32) << op;
    EXPECT_NE(bf16OnT4.find(op)->reason.find("kept fp32: this GPU's compute capability 7.5 is below 8.0"),
              std::string::npos)
        << bf16OnT4.find(op)->reason;
  }
  EXPECT_EQ(bf16OnT4.categoryOf("aten::softmax"), OpCategory::kFp32);
  EXPECT_EQ(bf16OnT4.categoryOf("aten::relu"), OpCategory::kFollow);
  EXPECT_EQ(OpPolicy::defaults(Target::kCudaFloat16, CpuFeatures::all(), pascal).categoryOf("aten::mm"),
            OpCategory::kFp32);
  EXPECT_TRUE(slowLowPrecisionKernels(Target::kCudaBFloat16, CpuFeatures::all(), CudaCapability{7, 5}));
  EXPECT_FALSE(slowLowPrecisionKernels(Target::kCudaBFloat16, CpuFeatures::all(), CudaCapability{8, 6}));
  // a CPU target ignores the GPU
  EXPECT_FALSE(slowLowPrecisionKernels(Target::kCpuBFloat16, CpuFeatures::all(), pascal));
}

TEST(FastKernels, EnvironmentNamesTheCpuPlannedFor) {
  setenv("TORCH_MP_CPU_FEATURES", "amx_fp16", 1);
  EXPECT_EQ(CpuFeatures::host(), featuresOf("amx_fp16"));
  setenv("TORCH_MP_CPU_FEATURES", "avx512_fp61", 1);
  EXPECT_THROW(CpuFeatures::host(), std::invalid_argument);
  setenv("TORCH_MP_CPU_FEATURES", "", 1);
  const CpuFeatures undeclared = CpuFeatures::host();
  unsetenv("TORCH_MP_CPU_FEATURES");
  EXPECT_EQ(CpuFeatures::host(), CpuFeatures::host());  // detected once, the same on every call
  EXPECT_EQ(undeclared, CpuFeatures::host());            // an empty value declares nothing, not "none"
}

} // namespace
} // namespace torch_mp::core
