// Verification: the converted graph, run once on the example inputs, returns the dtypes the fp32 graph returned.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <optional>

namespace torch_mp::jit {

// Runs the graph on deep copies of `inputs` (the caller's values stay as they are) and throws c10::Error unless
// every tensor of every output, nested ones included, has the dtype it has in `expected`. With `lowPrecisionIO`, an
// output in that dtype counts as fp32 (the lowered graph returns fp32 outputs in it).
void verifyOutputDtypes(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const torch::jit::Stack& inputs,
    const torch::jit::Stack& expected,
    std::optional<c10::ScalarType> lowPrecisionIO = std::nullopt);

} // namespace torch_mp::jit
