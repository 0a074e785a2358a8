// The FLOP formulas of core/op_facts over operand sizes: what both fronts count a heavy op's multiply-add FLOPs with
// (jit/plan/flop_estimate for TorchScript nodes, torch_mp/_export/facts.py for FX nodes), every formula written here once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/op_facts.h"

namespace torch_mp::core {

using Sizes = std::vector<int64_t>;

// The schema argument of a kRecurrent op (lstm, gru, rnn_tanh, rnn_relu, either overload) holding its weights.
inline constexpr const char* kRecurrentWeightsArgument = "params";

struct FlopOperands {
  std::vector<std::optional<Sizes>> inputs;  // per input: its sizes, or nothing (not a tensor, or not observed)
  std::optional<Sizes> output;               // the first output's
  std::optional<bool> transposed;            // kGenericConvolution: its transposed flag, where known
  // kRecurrent: the sizes of the tensors in its kRecurrentWeightsArgument list
  std::vector<Sizes> recurrentWeights;
  // per input: its value where it is an int (the fused transformer ops' embedding width)
  std::vector<std::optional<int64_t>> integers;
  // the fused transformer ops: the first input's element count, where the node ran (a nested tensor, rows of
  // different lengths, has one but no sizes)
  std::optional<int64_t> firstInputElements;
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
