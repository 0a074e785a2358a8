// The report's records (contract/conversion_report.h) as TorchScript's stages name them, and what the report reads off
// a TorchScript graph: the bytes of its constant tensors.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <functional>

#include "contract/conversion_report.h"

namespace torch_mp::jit {

using contract::CastRecord;
using contract::ConversionReport;
using contract::GraphItem;
using contract::KeptFp32Weight;
using contract::kKeptFp32ListedBytes;
using contract::NodeDecision;
using contract::NonFiniteValue;

int64_t constantBytes(const torch::jit::Graph& graph);

// Calls visit(constant node, tensor) for every tensor held by a constant of the block or its sub-blocks.
void forEachConstantTensor(
    const torch::jit::Block* block,
    const std::function<void(const torch::jit::Node*, const at::Tensor&)>& visit);

} // namespace torch_mp::jit
