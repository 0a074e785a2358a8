#include "core/policy_vocabulary.h"

namespace torch_mp::core {

const char* toString(OpCategory category) {
  switch (category) {
    case OpCategory::kLowPrecision:
      return "low";
    case OpCategory::kLowFp32Output:
      return "low_fp32_output";
    case OpCategory::kFollow:
      return "follow";
    case OpCategory::kWidest:
      return "widest";
    case OpCategory::kFp32:
      return "fp32";
  }
  return "?";
}

std::optional<OpCategory> categoryFromString(const std::string& name) {
  for (OpCategory category : kAllCategories) {
    if (name == toString(category)) {
      return category;
    }
  }
  return std::nullopt;
}

const char* toString(RuleKind kind) {
  for (const RuleKindName& entry : kRuleKindNames) {
    if (entry.kind == kind) {
      return entry.name;
    }
  }
  return "?";
}

const char* toString(GuardKind kind) {
  for (const GuardKindName& entry : kGuardKindNames) {
    if (entry.kind == kind) {
      return entry.name;
    }
  }
  return "?";
}

Target targetFor(bool cuda, bool float16) {
  if (cuda) {
    return float16 ? Target::kCudaFloat16 : Target::kCudaBFloat16;
  }
  return float16 ? Target::kCpuFloat16 : Target::kCpuBFloat16;
}

const char* toString(Target target) {
  switch (target) {
    case Target::kCudaFloat16:
      return "cuda_fp16";
    case Target::kCudaBFloat16:
      return "cuda_bf16";
    case Target::kCpuBFloat16:
      return "cpu_bf16";
    case Target::kCpuFloat16:
      return "cpu_fp16";
  }
  return "?";
}

std::optional<Target> targetFromString(const std::string& name) {
  for (Target target : kAllTargets) {
    if (name == toString(target)) {
      return target;
    }
  }
  return std::nullopt;
}

const char* toString(Int8Reason reason) {
  switch (reason) {
    case Int8Reason::kInt8:
      return "int8";
    case Int8Reason::kNoInt8Form:
      return "no_int8_form";
    case Int8Reason::kNoKernel:
      return "no_kernel";
    case Int8Reason::kWeightComputed:
      return "weight_computed";
    case Int8Reason::kRangeGuard:
      return "range_guard";
    case Int8Reason::kKeptByFallback:
      return "kept_by_fallback";
    case Int8Reason::kCostsMore:
      return "costs_more";
  }
  return "?";
}

} // namespace torch_mp::core
