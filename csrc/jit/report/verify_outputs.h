// Verification: the converted graph, run on the example inputs, returns the dtypes the fp32 graph returned, and
// nowhere NaN or inf where the fp32 graph's outputs are finite (on the calibration inputs too).
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <optional>
#include <vector>

#include "jit/ir/observed_values.h"
#include "jit/report/conversion_report.h"

namespace torch_mp::jit {

// Runs the graph on deep copies of `inputs` (the caller's values stay as they are) and throws c10::Error unless
// every output, nested ones included, has the dtype it has in `expected`. With `lowPrecisionIO`, an
// output in that dtype counts as fp32 (the lowered graph returns fp32 outputs in it). Returns what the graph returned.
torch::jit::Stack verifyOutputDtypes(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const torch::jit::Stack& inputs,
    const torch::jit::Stack& expected,
    std::optional<c10::ScalarType> lowPrecisionIO = std::nullopt);

// Verification of a converted graph: `runs` are its input stacks (the example inputs first, then the calibration
// inputs) and `expected` what the fp32 graph returned on each; `observed` the fp32 graph's observation, keyed by the
// values the converted graph still has. The first run's outputs must have the expected dtypes (verifyOutputDtypes);
// the result is the first run with an output tensor holding NaN or inf where the fp32 graph's is finite, or else
// (where GraphRunner runs the graph) with an intermediate value that does where fp32's was finite on every run (the
// runs after it are not made); nothing when there is none.
std::optional<NonFiniteValue> verifyConvertedOutputs(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const std::vector<torch::jit::Stack>& runs,
    const std::vector<torch::jit::Stack>& expected,
    const ObservedValues& observed,
    std::optional<c10::ScalarType> lowPrecisionIO);

// verifyConvertedOutputs on the runs the fp32 graph was observed on: the example inputs (`inputs`, returning
// `outputs`) and each calibration input, a method's module input a deep copy (the converted model's state stays as the
// conversion found it), with `lowPrecisionIO` fp32 inputs lowered where the graph takes them in that dtype.
std::optional<NonFiniteValue> verifyConversion(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const torch::jit::Stack& inputs,
    const torch::jit::Stack& outputs,
    const std::vector<torch::jit::Stack>& calibration,
    const std::vector<torch::jit::Stack>& calibrationOutputs,
    const ObservedValues& observed,
    std::optional<c10::ScalarType> lowPrecisionIO);

// The index of the first floating tensor of `actual` (its outputs' tensors in order, nested ones included) holding
// NaN or inf where the same element of the same tensor in `expected` is finite; nothing when there is none.
std::optional<size_t> firstNonFiniteTensor(const torch::jit::Stack& expected, const torch::jit::Stack& actual);

} // namespace torch_mp::jit
