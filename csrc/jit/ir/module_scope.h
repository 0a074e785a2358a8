// The module path a node came from, e.g. "layer1.0.conv1" ("" for code in the top module's own forward).
//
// Freezing inlines every submodule's forward and records, per inlined node, the chain of module instances it was
// called through (its InlinedCallStack); tracing records the same path as a scope name
// ("__module.layer1/__module.layer1.0/__module.layer1.0.conv1"). Both survive PyTorch's frozen-graph passes, which
// copy a node's metadata onto its replacement. Exclusions by module path (`"head.*"`) match against this path.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <string>
#include <unordered_map>

namespace torch_mp::jit {

std::string moduleScope(const torch::jit::Node* node);

// moduleScope, worked out once per call stack and scope: the nodes inlined from one call share both, so a graph of
// 100k nodes has a few thousand paths to build, not one per node.
class ModuleScopes {
 public:
  const std::string& of(const torch::jit::Node* node);

 private:
  struct Key {
    const void* callstack;
    const void* scope;
    bool operator==(const Key& other) const {
      return callstack == other.callstack && scope == other.scope;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  std::unordered_map<Key, std::string, KeyHash> paths_;
};

} // namespace torch_mp::jit
