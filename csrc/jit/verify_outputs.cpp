#include "jit/verify_outputs.h"

#include <sstream>
#include <string>

#include "jit/graph_runner.h"

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

} // namespace

void verifyOutputDtypes(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const torch::jit::Stack& inputs,
    const torch::jit::Stack& expected,
    std::optional<c10::ScalarType> lowPrecisionIO) {
  const torch::jit::Stack stack = runGraphOnce(graph, deepCopies(inputs));
  const std::string wanted = signatureOf(expected, std::nullopt);
  const std::string actual = signatureOf(stack, lowPrecisionIO);
  TORCH_CHECK(
      wanted == actual, "torch_mp internal error: converted outputs have dtypes ", actual, " instead of ", wanted);
}

} // namespace torch_mp::jit
