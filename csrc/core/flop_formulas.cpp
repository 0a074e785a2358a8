#include "core/flop_formulas.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
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

// Every 2-D weight is applied once per time step and batch row (the input's rows: all dims but its last).
int64_t recurrent(const FlopOperands& operands) {
  const auto& data = input(operands, 0);
  if (!data || data->empty()) {
    return 0;
  }
  const int64_t rows = elementCount(*data) / std::max<int64_t>(data->back(), 1);
  int64_t weights = 0;
  for (const Sizes& sizes : operands.recurrentWeights) {
    weights += sizes.size() == 2 ? elementCount(sizes) : 0;
  }
  return 2 * rows * weights;
}

// PyTorch's fused transformer ops (nn.MultiheadAttention's and nn.TransformerEncoderLayer's fast paths): every
// token goes through each 2-D weight once, plus q k^T and (softmax) v per sequence. A nested input (rows of
// different lengths, padding removed) has a token count but no sequence length: its attention term is left out.
int64_t fusedTransformer(const FlopOperands& operands, size_t widthInput, std::initializer_list<size_t> weights) {
  const std::optional<int64_t> width =
      widthInput < operands.integers.size() ? operands.integers[widthInput] : std::nullopt;
  if (!operands.firstInputElements || !width || *width <= 0) {  // a node the example inputs did not reach ran none
    return 0;
  }
  const int64_t tokens = *operands.firstInputElements / *width;
  int64_t flops = 0;
  for (size_t index : weights) {
    if (const auto& sizes = input(operands, index); sizes && sizes->size() == 2) {
      flops += 2 * tokens * elementCount(*sizes);
    }
  }
  if (const auto& sizes = input(operands, 0); sizes && sizes->size() >= 2) {
    flops += 4 * tokens * (*sizes)[sizes->size() - 2] * *width;
  }
  return flops;
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
    case FlopFormula::kMultiHeadAttention:
      // (query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, ...)
      return fusedTransformer(operands, 3, {5, 7});
    case FlopFormula::kTransformerEncoderLayer:
      // (src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps, 4 norm
      // tensors, ffn_weight_1, ffn_bias_1, ffn_weight_2, ...)
      return fusedTransformer(operands, 1, {3, 5, 14, 16});
    case FlopFormula::kRecurrent:
      return recurrent(operands);
    case FlopFormula::kNone:
      return 0;
  }
  return 0;
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
