#include "jit/report/verify_outputs.h"

#include <ATen/Functions.h>

#include <sstream>
#include <string>

#include "jit/ir/ir_utils.h"
#include "jit/ir/observed_values.h"
#include "jit/rewrite/low_precision_io.h"
#include "jit/upstream/graph_runner.h"

namespace torch_mp::jit {
namespace {

// The dtypes of every tensor in a (nested) output, e.g. "(Float, [Long, Float])". `sameAsFloat`, when given, is
// written as Float: with low-precision IO an output may be either.
std::string dtypeSignature(const c10::IValue& value, std::optional<c10::ScalarType> sameAsFloat) {
  std::ostringstream out;
  if (value.isTensor()) {
    const c10::ScalarType dtype = value.toTensor().scalar_type();
    out << (dtype == sameAsFloat ? c10::ScalarType::Float : dtype);
  } else if (value.isTuple()) {
    out << '(';
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      out << dtypeSignature(element, sameAsFloat) << ',';
    }
    out << ')';
  } else if (value.isList()) {
    out << '[';
    for (const c10::IValue& element : value.toListRef()) {
      out << dtypeSignature(element, sameAsFloat) << ',';
    }
    out << ']';
  } else if (value.isGenericDict()) {
    out << '{';
    for (const auto& entry : value.toGenericDict()) {
      out << dtypeSignature(entry.key(), sameAsFloat) << ':' << dtypeSignature(entry.value(), sameAsFloat) << ',';
    }
    out << '}';
  } else {
    out << value.tagKind();
  }
  return out.str();
}

std::string signatureOf(const torch::jit::Stack& outputs, std::optional<c10::ScalarType> sameAsFloat) {
  std::string signature;
  for (const c10::IValue& output : outputs) {
    signature += dtypeSignature(output, sameAsFloat) + ";";
  }
  return signature;
}

// Every tensor a (nested) value holds, in order.
void collectTensors(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) {
    out.push_back(value.toTensor());
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      collectTensors(element, out);
    }
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      collectTensors(element, out);
    }
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      collectTensors(entry.value(), out);
    }
  }
}

void checkOutputDtypes(
    const torch::jit::Stack& returned,
    const torch::jit::Stack& expected,
    std::optional<c10::ScalarType> lowPrecisionIO) {
  const std::string wanted = signatureOf(expected, std::nullopt);
  const std::string actual = signatureOf(returned, lowPrecisionIO);
  TORCH_CHECK(
      wanted == actual, "torch_mp internal error: converted outputs have dtypes ", actual, " instead of ", wanted);
}

// A run of the converted graph: what it returned, and the first value the fp32 graph held finite on every run (per
// the observation) that holds NaN or inf here; GraphRunner shows the values, where it runs the graph.
struct VerifyingRun {
  torch::jit::Stack outputs;
  const torch::jit::Value* nonFinite = nullptr;
};

VerifyingRun runVerifying(
    const std::shared_ptr<torch::jit::Graph>& graph, const torch::jit::Stack& inputs, const ObservedValues& observed) {
  if (!GraphRunner::canRun(*graph)) {
    return {runGraphOnce(graph, deepCopies(inputs)), nullptr};
  }
  VerifyingRun run;
  const GraphRunner::Visitor visit = [&](const torch::jit::Value* value, const c10::IValue& held) {
    if (run.nonFinite || !held.isTensor()) {
      return;
    }
    auto seen = observed.find(value);
    if (seen == observed.end() || seen->second.dtype != c10::ScalarType::Float || !seen->second.rangeObserved ||
        seen->second.nonFinite) {
      return;
    }
    const at::Tensor& tensor = held.toTensor();
    if (tensor.defined() && tensor.is_floating_point() && !tensor.is_nested() && !allFinite(tensor)) {
      run.nonFinite = value;
    }
  };
  run.outputs = GraphRunner(*graph).run(deepCopies(inputs), visit);
  return run;
}

std::vector<at::Tensor> tensorsOf(const torch::jit::Stack& outputs) {
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& output : outputs) {
    collectTensors(output, tensors);
  }
  return tensors;
}

} // namespace

torch::jit::Stack verifyOutputDtypes(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const torch::jit::Stack& inputs,
    const torch::jit::Stack& expected,
    std::optional<c10::ScalarType> lowPrecisionIO) {
  torch::jit::Stack stack = runGraphOnce(graph, deepCopies(inputs));
  checkOutputDtypes(stack, expected, lowPrecisionIO);
  return stack;
}

std::optional<size_t> firstNonFiniteTensor(const torch::jit::Stack& expected, const torch::jit::Stack& actual) {
  const std::vector<at::Tensor> wanted = tensorsOf(expected);
  const std::vector<at::Tensor> got = tensorsOf(actual);
  for (size_t i = 0; i < got.size() && i < wanted.size(); ++i) {
    const at::Tensor& tensor = got[i];
    if (!tensor.defined() || !tensor.is_floating_point() || tensor.is_nested() || !wanted[i].defined() ||
        !wanted[i].is_floating_point() || wanted[i].is_nested() || tensor.sizes() != wanted[i].sizes() ||
        allFinite(tensor)) {
      continue;
    }
    if (at::logical_and(at::isfinite(tensor).logical_not(), at::isfinite(wanted[i].to(tensor.device())))
            .any()
            .item<bool>()) {
      return i;
    }
  }
  return std::nullopt;
}

std::optional<NonFiniteValue> verifyConvertedOutputs(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const std::vector<torch::jit::Stack>& runs,
    const std::vector<torch::jit::Stack>& expected,
    const ObservedValues& observed,
    std::optional<c10::ScalarType> lowPrecisionIO) {
  TORCH_INTERNAL_ASSERT(!runs.empty() && runs.size() == expected.size());
  for (size_t run = 0; run < runs.size(); ++run) {
    const VerifyingRun verified = runVerifying(graph, runs[run], observed);
    if (run == 0) {
      checkOutputDtypes(verified.outputs, expected[0], lowPrecisionIO);
    }
    if (std::optional<size_t> tensor = firstNonFiniteTensor(expected[run], verified.outputs)) {
      return NonFiniteValue{run, tensor, ""};
    }
    if (verified.nonFinite) {
      return NonFiniteValue{run, std::nullopt, verified.nonFinite->debugName()};
    }
  }
  return std::nullopt;
}

namespace {

torch::jit::Stack verificationInputs(torch::jit::Stack inputs, const torch::jit::Graph& graph, std::optional<c10::ScalarType> lowPrecisionIO) {
  if (!inputs.empty() && inputs[0].isObject()) {
    inputs[0] = inputs[0].deepcopy();
  }
  if (lowPrecisionIO) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (recordedDtype(graph.inputs()[i]) == lowPrecisionIO) {
        inputs[i] = lowerInputValue(inputs[i], *lowPrecisionIO);
      }
    }
  }
  return inputs;
}

} // namespace

std::optional<NonFiniteValue> verifyConversion(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const torch::jit::Stack& inputs,
    const torch::jit::Stack& outputs,
    const std::vector<torch::jit::Stack>& calibration,
    const std::vector<torch::jit::Stack>& calibrationOutputs,
    const ObservedValues& observed,
    std::optional<c10::ScalarType> lowPrecisionIO) {
  std::vector<torch::jit::Stack> runs{verificationInputs(inputs, *graph, lowPrecisionIO)};
  std::vector<torch::jit::Stack> expected{outputs};
  for (size_t c = 0; c < calibration.size() && c < calibrationOutputs.size(); ++c) {
    runs.push_back(verificationInputs(calibration[c], *graph, lowPrecisionIO));
    expected.push_back(calibrationOutputs[c]);
  }
  return verifyConvertedOutputs(graph, runs, expected, observed, lowPrecisionIO);
}

} // namespace torch_mp::jit
