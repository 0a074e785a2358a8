// The module path a node came from, e.g. "layer1.0.conv1" ("" for code in the top module's own forward).
//
// Freezing inlines every submodule's forward and records, per inlined node, the chain of module instances it was
// called through (its InlinedCallStack); tracing records the same path as a scope name
// ("__module.layer1/__module.layer1.0/__module.layer1.0.conv1"). Both survive PyTorch's frozen-graph passes, which
// copy a node's metadata onto its replacement. Exclusions by module path (`"head.*"`) match against this path.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <string>

namespace torch_mp::jit {

std::string moduleScope(const torch::jit::Node* node);

} // namespace torch_mp::jit
