// The FLOP formulas of core/op_facts over operand sizes: what both fronts count a heavy op's multiply-add FLOPs with
// (jit/plan/flop_estimate for TorchScript nodes, torch_mp/_export.py for FX nodes). The fused transformer and recurrent
// formulas also need weights lists and widths; jit/plan/flop_estimate keeps those.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/op_facts.h"

namespace torch_mp::core {

using Sizes = std::vector<int64_t>;

struct FlopOperands {
  std::vector<std::optional<Sizes>> inputs;  // per input: its sizes, or nothing (not a tensor, or not observed)
  std::optional<Sizes> output;               // the first output's
  std::optional<bool> transposed;            // kGenericConvolution: its transposed flag, where known
};

int64_t elementCount(const Sizes& sizes);

// 0 where an operand's sizes are missing, or for a formula this file does not cover.
int64_t flopsOf(FlopFormula formula, const FlopOperands& operands);

// A product that sums nothing: einsum whose every input index reaches the output ("i,j->ij", `einsumEquation`), or
// matmul / mm / bmm / linear whose contracted dim has size 1 (`firstInputSizes`, where observed). Elementwise work,
// not a matrix product: low precision would only round its inputs (positions, timesteps).
bool sumsNothing(
    const std::string& op,
    const std::optional<std::string>& einsumEquation,
    const std::optional<Sizes>& firstInputSizes);

} // namespace torch_mp::core
