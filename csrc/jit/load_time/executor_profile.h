// What TorchScript's profiling executor recorded of a graph it ran, as the load-time pass (jit_pass) reads it. The
// executor hands its passes the graph with prim::profile nodes where nodes read tensors (the inputs of ops its
// TensorExpr fuser knows, of shape queries, and block returns), each holding the type it saw, or none if it never
// ran.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

#include "torch_mp/jit_pass.h"

namespace torch_mp::jit {

// Why the pass must leave the graph as it is (kNoProfile, kNeedsGradient, kNotFrozen), or kNone.
SkipReason whyNotConvertible(const torch::jit::Graph& graph);

// A copy without profile nodes and with the profiled types cleared: the graph as the executor had it before
// profiling, for a fallback it profiles again on its own.
std::shared_ptr<torch::jit::Graph> unprofiledCopy(torch::jit::Graph& graph);

// Writes the profile into the values' types and removes the profile nodes. Beyond PyTorch's
// RemoveProfileNodesAndSpecializeTypes: profiles that never ran are dropped first (an unrun profile in the branch not
// taken would otherwise mark the value's profiles as conflicting and leave it untyped), and a tensor the branch taken
// returns unprofiled gets the type its If's output was profiled with; the result of an in-place op gets its first
// argument's type.
void specializeProfiledTypes(std::shared_ptr<torch::jit::Graph>& graph);

} // namespace torch_mp::jit
