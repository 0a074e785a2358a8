// The op policy: which precision each op runs in, as data.
//
// Every entry names a qualified op ("aten::conv2d", all overloads), its category and the reason it is there.
// Ops in no list are fp32: an op we know nothing about is never run in low precision. The defaults start from
// torch.autocast's lists (aten/src/ATen/autocast_mode.h) and what TVM, TensorFlow and MXNet learned; users edit a
// copy (set/remove) before converting. This file knows nothing about TorchScript, so other fronts can reuse it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

class CpuFeatures;

struct PolicyEntry {
  OpCategory category;
  std::string reason;
  // a heavy op defaults() keeps fp32 because the device has no fast kernels for the low dtype (slowKernels says why)
  bool noFastKernel = false;
};

// Whether `text` matches a shell-style glob, as Python's fnmatch.fnmatchcase: `*` any run of characters (dots
// included), `?` one character, `[abc]` / `[a-z]` one of a set, `[!abc]` one not in it.
bool globMatches(std::string_view pattern, std::string_view text);

// The user's rule for the nodes inside a module whose path ("blocks.0.attn.proj", as nn.Module.named_modules() names
// it) or an enclosing module's path ("blocks.0.attn", "blocks.0", "blocks") matches `pattern` ("*" also matches the
// top module's own nodes); with `ops`, only nodes of those ops. An exclusion keeps them fp32; a forced-low rule runs
// them low whatever the range guards say.
struct ModuleRule {
  std::string pattern;
  std::optional<std::vector<std::string>> ops;
  std::string reason;

  bool matches(const std::string& op, const std::string& scope) const;
};

class OpPolicy {
 public:
  // The default table for a target. Where the target's low dtype has no fast kernels (core/fast_kernels) on a CPU
  // with `cpu`, or for a CUDA target on a GPU of capability `gpu` (nullopt: not known, taken as fast), the low and
  // low_fp32_output ops are fp32 instead, their reasons saying why.
  static OpPolicy defaults(Target target, const CpuFeatures& cpu, std::optional<CudaCapability> gpu = std::nullopt);

  // The entry for a qualified op name, or nullptr when the op is in no list (and therefore fp32).
  const PolicyEntry* find(const std::string& op) const;
  // The entry that decides an op: its own, or for an in-place op in no list ("aten::add_") its out-of-place form's
  // ("aten::add") when that one is follow, widest or fp32: computing in place changes none of those rules (the
  // planner ties the readers of a written tensor). `via` names the form whose entry it is.
  struct Match {
    const PolicyEntry* entry = nullptr;
    std::string via;
  };
  Match match(const std::string& op) const;
  OpCategory categoryOf(const std::string& op) const;

  void set(const std::string& op, OpCategory category, std::string reason);
  // Returns whether the op was listed.
  bool remove(const std::string& op);

  void exclude(ModuleRule exclusion);
  // The first exclusion that matches a node of `op` in the module at `scope`, or nullptr.
  const ModuleRule* exclusionFor(const std::string& op, const std::string& scope) const;
  const std::vector<ModuleRule>& exclusions() const {
    return exclusions_;
  }
  // The nodes a rule forces low run low over the range guards (the user knows their values are safe); the
  // verification's repair and the accuracy fallback still keep a node fp32 where they measured that they must.
  void forceLow(ModuleRule rule);
  const ModuleRule* forcedLowFor(const std::string& op, const std::string& scope) const;
  const std::vector<ModuleRule>& forcedLow() const {
    return forcedLow_;
  }
  // A node forced low as forceLow forces a module's, by the id the report gives it (a TorchScript node's number, an
  // FX node's name): one model's nodes that a guard keeps fp32 where the user knows their values are safe.
  void forceLowNode(std::string id, std::string reason);
  // The reason the node with this id is forced low, or nullptr.
  const std::string* forcedLowNode(const std::string& id) const;
  const std::map<std::string, std::string>& forcedLowNodes() const {
    return forcedLowNodes_;
  }

  // A reader of a constant table (an embedding's weight): its op, and whether it reads the table as its first input
  // (where a lookup reads its table).
  struct TableReader {
    std::string op;
    bool readsFirst = false;
  };
  // Whether a constant table is stored once, in the low dtype, its lookups running low: every reader is a lookup of it
  // (core/op_facts' tableLookup, reading it first) or an op this policy runs low. A table an fp32 op also reads (a tied
  // output layer on a device without fast kernels) is not: the lookup follows, so that the min-cut can keep it fp32
  // beside that reader instead of casting the whole table at run time.
  bool storesTableLow(const std::vector<TableReader>& readers) const;

  // The name the report gives the policy: the target's for a default one.
  const std::string& name() const {
    return name_;
  }
  void setName(std::string name) {
    name_ = std::move(name);
  }

  const std::map<std::string, PolicyEntry>& entries() const {
    return entries_;
  }
  // Why defaults() kept the heavy ops fp32 (the device has no fast kernels for the low dtype), or nullopt.
  const std::optional<std::string>& slowKernels() const {
    return slowKernels_;
  }

 private:
  std::map<std::string, PolicyEntry> entries_;
  std::vector<ModuleRule> exclusions_;
  std::vector<ModuleRule> forcedLow_;
  std::map<std::string, std::string> forcedLowNodes_;  // node id -> reason
  std::optional<std::string> slowKernels_;
  std::string name_ = "custom";
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

// The default target for a model that runs on CUDA (else the CPU) in float16 (else bfloat16).
Target targetFor(bool cuda, bool float16);

const char* toString(OpCategory category);
std::optional<OpCategory> categoryFromString(const std::string& name);
const char* toString(Target target);
std::optional<Target> targetFromString(const std::string& name);

} // namespace torch_mp::core
