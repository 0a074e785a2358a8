// Reads intermediate values of a module by node: its forward graph, copied, returns the first output of each node
// asked for as well.
//
// The accuracy fallback compares a low-precision conversion with the prepared fp32 graph value by value. Both come
// from one preparation, whose node ids (jit/ir/ir_utils) they keep (the conversion with ConvertOptions::keepNodeIds), so
// an id names the same node in both. Nodes inside prim::If / prim::Loop blocks cannot return their values and come
// back undefined, as do ids not in the graph and outputs that are not tensors.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <vector>

#include "jit/ir/ir_utils.h"

namespace torch_mp::jit {

// `inputs`: the forward's inputs without the module. One tensor per id, in order.
std::vector<at::Tensor> probeNodeOutputs(
    const torch::jit::Module& module,
    const std::vector<c10::IValue>& inputs,
    const std::vector<NodeId>& ids);

} // namespace torch_mp::jit
