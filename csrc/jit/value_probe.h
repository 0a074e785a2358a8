// Reads intermediate values of a converted module: its forward graph, copied, returns the named values as well.
//
// The accuracy fallback compares a low-precision conversion with an all-fp32 one value by value; conversions of
// one model keep the names of their op outputs (only casts and constants differ), so names identify nodes across
// them. Values inside prim::If / prim::Loop blocks cannot be returned and come back undefined, as do names that
// are not in the graph or do not hold a tensor.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <string>
#include <vector>

namespace torch_mp::jit {

// `inputs`: the forward's inputs without the module. One tensor per name, in order.
std::vector<at::Tensor> probeValues(
    const torch::jit::Module& module,
    const std::vector<c10::IValue>& inputs,
    const std::vector<std::string>& names);

} // namespace torch_mp::jit
