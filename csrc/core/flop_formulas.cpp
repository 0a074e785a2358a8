#include "core/flop_formulas.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace torch_mp::core {
namespace {

const std::optional<Sizes>& input(const FlopOperands& operands, size_t index) {
  static const std::optional<Sizes> kNone;
  return index < operands.inputs.size() ? operands.inputs[index] : kNone;
}

// 2 * (elements of the result) * (length of the reduced dimension).
int64_t contraction(const FlopOperands& operands, size_t left) {
  const auto& a = input(operands, left);
  if (!a || !operands.output || a->empty()) {
    return 0;
  }
  return 2 * elementCount(*operands.output) * a->back();
}

// Convolution: each output element reads (input channels / groups) * kernel elements, which is the weight's size
// over its first dimension; a transposed convolution does that per input element.
int64_t convolution(const FlopOperands& operands, bool transposed) {
  const auto& weight = input(operands, 1);
  const auto& data = transposed ? input(operands, 0) : operands.output;
  if (!weight || !data || weight->empty() || (*weight)[0] == 0) {
    return 0;
  }
  return 2 * elementCount(*data) * (elementCount(*weight) / (*weight)[0]);
}

// q [.., L, E], k [.., S, E], v [.., S, Ev]: q k^T and (softmax) v.
int64_t attention(const FlopOperands& operands) {
  const auto& q = input(operands, 0);
  const auto& k = input(operands, 1);
  if (!q || !k || !operands.output || k->size() < 2) {
    return 0;
  }
  const int64_t keys = (*k)[k->size() - 2];
  return 2 * elementCount(*q) * keys + 2 * elementCount(*operands.output) * keys;
}

} // namespace

int64_t elementCount(const Sizes& sizes) {
  int64_t result = 1;
  for (int64_t size : sizes) {
    result *= size;
  }
  return result;
}

int64_t flopsOf(FlopFormula formula, const FlopOperands& operands) {
  switch (formula) {
    case FlopFormula::kConvolution:
      return convolution(operands, /*transposed=*/false);
    case FlopFormula::kTransposedConvolution:
      return convolution(operands, /*transposed=*/true);
    case FlopFormula::kGenericConvolution:
      return operands.transposed ? convolution(operands, *operands.transposed) : 0;
    case FlopFormula::kContraction:
      return contraction(operands, 0);
    case FlopFormula::kBiasedContraction:
      return contraction(operands, 1);
    case FlopFormula::kAttention:
      return attention(operands);
    default:
      return 0;
  }
}

namespace {

bool einsumSumsNothing(const std::string& equation) {
  const size_t arrow = equation.find("->");
  const std::string inputs = equation.substr(0, arrow);
  std::string output;
  if (arrow != std::string::npos) {
    output = equation.substr(arrow + 2);
  } else {  // implicit output: the letters that occur once
    for (char letter : inputs) {
      if (std::isalpha(static_cast<unsigned char>(letter)) && std::count(inputs.begin(), inputs.end(), letter) == 1) {
        output += letter;
      }
    }
  }
  for (char letter : inputs) {
    if (std::isalpha(static_cast<unsigned char>(letter)) && output.find(letter) == std::string::npos) {
      return false;  // summed over
    }
  }
  return true;
}

} // namespace

bool sumsNothing(
    const std::string& op,
    const std::optional<std::string>& einsumEquation,
    const std::optional<Sizes>& firstInputSizes) {
  if (op == "aten::einsum") {
    return einsumEquation && einsumSumsNothing(*einsumEquation);
  }
  if (op != "aten::matmul" && op != "aten::mm" && op != "aten::bmm" && op != "aten::linear") {
    return false;
  }
  return firstInputSizes && firstInputSizes->size() >= 2 && firstInputSizes->back() == 1;
}

} // namespace torch_mp::core
