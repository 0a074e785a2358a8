#include "jit/ir/module_scope.h"

#include <c10/util/hash.h>
#include <torch/csrc/jit/ir/scope.h>

#include <optional>
#include <tuple>

namespace torch_mp::jit {
namespace {

constexpr const char* kTracedPrefix = "__module.";
constexpr const char* kSelf = "SELF";

// A traced scope lists every enclosing module by its full path; the innermost one is the last component.
std::string fromTracedScope(const std::string& scope) {
  const size_t last = scope.rfind('/');
  std::string innermost = last == std::string::npos ? scope : scope.substr(last + 1);
  const std::string prefix = kTracedPrefix;
  if (innermost.compare(0, prefix.size(), prefix) == 0) {
    return innermost.substr(prefix.size());
  }
  return innermost == "__module" ? "" : innermost;
}

} // namespace

std::string moduleScope(const torch::jit::Node* node) {
  if (std::optional<torch::jit::InlinedCallStackPtr> callstack = node->callstack()) {
    std::string path;
    for (const auto& entry : (*callstack)->vec()) {
      const std::optional<torch::jit::ModuleInstanceInfo>& instance = std::get<2>(entry);
      // a free function, or a module calling its own method (recorded as "SELF"): no step down the module tree
      if (!instance || instance->instance_name().empty() || instance->instance_name() == kSelf) {
        continue;
      }
      path += (path.empty() ? "" : ".") + instance->instance_name();
    }
    if (!path.empty()) {
      return path;
    }
  }
  if (std::string traced = node->scopeName(); !traced.empty()) {
    return fromTracedScope(traced);
  }
  return "";
}

size_t ModuleScopes::KeyHash::operator()(const Key& key) const {
  return c10::hash_combine(std::hash<const void*>()(key.callstack), std::hash<const void*>()(key.scope));
}

const std::string& ModuleScopes::of(const torch::jit::Node* node) {
  const std::optional<torch::jit::InlinedCallStackPtr> callstack = node->callstack();
  const Key key{callstack ? callstack->get() : nullptr, const_cast<torch::jit::Node*>(node)->scope().get()};  // a read
  auto [it, added] = paths_.try_emplace(key);
  if (added) {
    it->second = moduleScope(node);
  }
  return it->second;
}

} // namespace torch_mp::jit
