// A converted graph behind a check of its inputs: `prim::TypeCheck` of the tensor inputs' dtype and device (and no
// gradient) decides between the graph's own body and a `prim::FallbackGraph` holding another graph with the same
// inputs and outputs, the form TorchScript's executor gives its fusion groups and turns into a function it profiles
// and optimizes on its own.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <vector>

namespace torch_mp::jit {

// What each input must be for the graph's body to apply: its dtype and device as typed, no gradient; nullptr for an
// input that is not a tensor with both known, which is not checked.
std::vector<c10::TensorTypePtr> inputGuards(const torch::jit::Graph& graph);

// Moves the body behind the check of the inputs `guards` names (none: the graph stays as it is).
void guardWithFallback(
    torch::jit::Graph& graph,
    const std::vector<c10::TensorTypePtr>& guards,
    std::shared_ptr<torch::jit::Graph> fallback);

} // namespace torch_mp::jit
