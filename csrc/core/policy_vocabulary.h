// The op policy's vocabulary, apart from the table: the categories an op can have, the targets a default policy is
// named for, the kinds of rule and numeric guard a decision names, a rule's verdict, the precisions and plan methods
// (core/precision_planner) and the int8 planner's verdict (core/int8_planner), and how the report spells each. Apart
// so that what only names these (fast_kernels, the contract's report, the public headers) does not take the policy or
// the planners with it. Knows nothing about TorchScript.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace torch_mp::core {

enum class OpCategory {
  kLowPrecision,  // always runs in the low-precision dtype: the ops tensor cores / AMX / AVX512-BF16 speed up
  kLowFp32Output, // runs in the low dtype (accumulating in fp32, as every kernel we pick does) and writes fp32:
                  // for an op whose result feeds a norm or softmax; one kernel where aten has the form (fuse_casts)
  kFollow,        // precision-neutral: runs in whichever precision the planner finds cheaper in casts
  kWidest,        // type-promoting: runs in fp32 whenever any floating input arrives in fp32
  kFp32,          // numerically sensitive (or unknown): always fp32
};

// Whether an op of the category computes in the low dtype (low and low_fp32_output: the heavy ops).
inline bool computesLow(OpCategory category) {
  return category == OpCategory::kLowPrecision || category == OpCategory::kLowFp32Output;
}

// The hardware and dtype a default policy is named for. All four share one table of categories (cuda_fp16 lets the
// layer and group norms follow their inputs); a CPU or GPU without fast kernels for the low dtype keeps the heavy ops
// fp32 (core/fast_kernels).
enum class Target { kCudaFloat16, kCudaBFloat16, kCpuBFloat16, kCpuFloat16 };

// A GPU, by its CUDA compute capability (an H100 is 9.0, a T4 7.5).
struct CudaCapability {
  int major = 0;
  int minor = 0;
  bool operator<(const CudaCapability& other) const {
    return major != other.major ? major < other.major : minor < other.minor;
  }
};

inline constexpr OpCategory kAllCategories[] = {
    OpCategory::kLowPrecision, OpCategory::kLowFp32Output, OpCategory::kFollow, OpCategory::kWidest,
    OpCategory::kFp32};
inline constexpr Target kAllTargets[] = {
    Target::kCudaFloat16, Target::kCudaBFloat16, Target::kCpuBFloat16, Target::kCpuFloat16};

// Which kind of rule decided a node's category.
enum class RuleKind : uint8_t {
  kIo,           // a graph input or output: keeps its dtype
  kUnobserved,   // not reached by the example inputs: left as it is
  kNotFp32,      // has a floating tensor that is not fp32: left as it is
  kRangeGuard,   // a number would not survive the low dtype (jit/plan/numeric_guards)
  kControlFlow,  // prim::If / prim::Loop, planned with its blocks' boundaries
  kExclusion,    // the user's module-path exclusion
  kCallable,     // the user's per-node callable
  kFallback,     // the accuracy fallback keeps it fp32
  kNonFinite,    // verification: low, its output was NaN or inf where fp32's was finite
  kPolicy,       // the op policy's entry
  kUnknownOp,    // in no policy list: fp32
  kForcedLow,    // the user's forced-low rule, over the range guards
  kNoFastKernel,  // the op policy's entry for a heavy op kept fp32: the device has no fast kernels for the low dtype
  kWritesTensorList,  // low_fp32_output, but it writes a tensor list, which one cast cannot make fp32: fp32
  kSumsNothing,       // low, but a product that sums nothing (core::sumsNothing): follows
  kInt8,              // an int8 conversion runs it as an int8 kernel or on uint8 (core/int8_planner)
};
struct RuleKindName {
  RuleKind kind;
  const char* name;  // as the report writes it
};
inline constexpr RuleKindName kRuleKindNames[] = {
    {RuleKind::kIo, "io"},
    {RuleKind::kUnobserved, "unobserved"},
    {RuleKind::kNotFp32, "not fp32"},
    {RuleKind::kRangeGuard, "range guard"},
    {RuleKind::kControlFlow, "control flow"},
    {RuleKind::kExclusion, "exclusion"},
    {RuleKind::kCallable, "callable"},
    {RuleKind::kFallback, "fallback"},
    {RuleKind::kNonFinite, "non-finite"},
    {RuleKind::kPolicy, "policy"},
    {RuleKind::kUnknownOp, "unknown op"},
    {RuleKind::kForcedLow, "forced low"},
    {RuleKind::kNoFastKernel, "no fast kernel"},
    {RuleKind::kWritesTensorList, "writes a tensor list"},
    {RuleKind::kSumsNothing, "sums nothing"},
    {RuleKind::kInt8, "int8"},
};
const char* toString(RuleKind kind);

// Which numeric guard kept a node fp32 (jit/plan/numeric_guards), with RuleKind::kRangeGuard.
enum class GuardKind : uint8_t {
  kObservedOverflow,  // a value observed above half the low dtype's max
  kObservedIntegers,  // a value holding integers the low dtype skips (positions, indices)
  kObservedTiny,      // fp16: a value observed only below the smallest normal
  kConstantRange,     // a constant beyond the low dtype's max
  kLostScalar,        // a scalar more than 1/16 off in the low dtype
  kUnderflowToZero,   // a value that can underflow to 0 in the low dtype reaches an op a 0 changes (a divisor,
                      // rsqrt, log, a negative power): the op and the path to it keep fp32
};
struct GuardKindName {
  GuardKind kind;
  const char* name;  // as the report writes it
};
inline constexpr GuardKindName kGuardKindNames[] = {
    {GuardKind::kObservedOverflow, "observed overflow"},
    {GuardKind::kObservedIntegers, "observed integers"},
    {GuardKind::kObservedTiny, "observed tiny"},
    {GuardKind::kConstantRange, "constant range"},
    {GuardKind::kLostScalar, "lost scalar"},
    {GuardKind::kUnderflowToZero, "underflow to zero"},
};
const char* toString(GuardKind kind);

// A numeric guard's verdict: which guard, the value that crossed its limit, what was seen of it (its largest
// magnitude, its smallest non-zero magnitude for kUnderflowToZero, a scalar's value) and the limit crossed (for a
// lost scalar: what it becomes in the low dtype).
struct GuardVerdict {
  GuardKind kind;
  std::string value;  // the value's name (TorchScript debug name, FX node name)
  double seen;
  double limit;
};

// A rule's verdict on one node (the user's node rule's, the fallback's, an exclusion's): its category and why.
struct NodeOverride {
  OpCategory category;
  RuleKind kind;
  std::string reason;
};

// What a planned node runs in.
enum class Precision : uint8_t { kLow, kFp32 };

// How the precision planner chooses (core/precision_planner).
enum class PlanMethod {
  kMinCut,  // exact minimum of bytes cast
  kGreedy,  // painting as TVM/TF/MXNet do: a follow op is low iff all its inputs arrive low (for comparison)
};

// Why the int8 planner (core/int8_planner) runs a node int8 or not.
enum class Int8Reason : uint8_t {
  kInt8,            // int8: the saving beats the quantize passes it needs
  kNoInt8Form,      // no int8 role (core/int8_kernels)
  kNoKernel,        // heavy, but the lowering has no int8 kernel (the table's reason)
  kWeightComputed,  // its weight is computed, not stored: no per-channel scales to fix
  kRangeGuard,      // a value it would read quantized has no usable range (not finite, or a single value)
  kKeptByFallback,  // the accuracy fallback keeps it float
  kCostsMore,       // the quantize passes it needs cost more than it saves
};
const char* toString(Int8Reason reason);  // "int8", "no_int8_form", ...

// The int8 planner's verdict on one node.
struct Int8NodePlan {
  bool int8 = false;
  Int8Reason reason = Int8Reason::kNoInt8Form;
  double savedSeconds = 0.0;     // what running it int8 saves (kernels)
  double quantizeSeconds = 0.0;  // the quantize passes of the values it reads quantized whose producer is float
};

// The default target for a model that runs on CUDA (else the CPU) in float16 (else bfloat16).
Target targetFor(bool cuda, bool float16);

const char* toString(OpCategory category);
std::optional<OpCategory> categoryFromString(const std::string& name);
const char* toString(Target target);
std::optional<Target> targetFromString(const std::string& name);

} // namespace torch_mp::core
