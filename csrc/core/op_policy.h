// The op policy: which precision each op runs in, as data.
//
// Every entry names a qualified op ("aten::conv2d", all overloads), its category and the reason it is there.
// Ops in no list are fp32: an op we know nothing about is never run in low precision. The defaults start from
// torch.autocast's lists (aten/src/ATen/autocast_mode.h) and what TVM, TensorFlow and MXNet learned; users edit a
// copy (set/remove) before converting. This file knows nothing about TorchScript, so other fronts can reuse it.
// The names it decides with (categories, targets, rule and guard kinds) are core/policy_vocabulary.h; its module
// rules match paths as core/glob.h does.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/fast_kernels.h"
#include "core/policy_vocabulary.h"

namespace torch_mp::core {

struct PolicyEntry {
  OpCategory category;
  std::string reason;
  // a heavy op defaults() keeps fp32 because the device has no fast kernels for the low dtype (slowKernels says why)
  bool noFastKernel = false;
};

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

} // namespace torch_mp::core
