// Multiply-add FLOPs of the heavy ops (convolutions, linear, matmuls, attention, RNNs) at the sizes observed on
// the example inputs: what "fraction of FLOPs in low precision" in the report is measured in. Other ops count
// 0: their cost is memory traffic, not arithmetic. An op whose operand sizes were not observed counts 0. Which
// formula an op takes is its row in core/op_facts.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>

#include "jit/ir/observed_values.h"

namespace torch_mp::jit {

int64_t estimateFlops(const torch::jit::Node* node, const ObservedValues& observed);

} // namespace torch_mp::jit
