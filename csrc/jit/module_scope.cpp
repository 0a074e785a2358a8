#include "jit/module_scope.h"

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

} // namespace torch_mp::jit
