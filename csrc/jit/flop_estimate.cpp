#include "jit/flop_estimate.h"

#include <torch/csrc/jit/ir/constants.h>

#include <optional>
#include <vector>

#include "core/op_facts.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Node;
using torch::jit::Value;
using Sizes = std::vector<int64_t>;

std::optional<Sizes> sizesOf(const Value* value, const ObservedValues& observed) {
  if (auto constant = torch::jit::toIValue(value); constant && constant->isTensor()) {
    return constant->toTensor().sizes().vec();
  }
  auto it = observed.find(value);
  if (it == observed.end() || !it->second.isTensor || it->second.inferred) {  // inferred: never ran
    return std::nullopt;
  }
  return knownSizes(it->second);
}

int64_t product(const Sizes& sizes, size_t from = 0) {
  int64_t result = 1;
  for (size_t i = from; i < sizes.size(); ++i) {
    result *= sizes[i];
  }
  return result;
}

// 2 * (elements of the result) * (length of the reduced dimension).
int64_t contraction(const Node* node, size_t left, const ObservedValues& observed) {
  auto a = sizesOf(node->input(left), observed);
  auto out = sizesOf(node->output(0), observed);
  if (!a || !out || a->empty()) {
    return 0;
  }
  return 2 * product(*out) * a->back();
}

// Convolution: each output element reads (input channels / groups) * kernel elements, which is the weight's size
// over its first dimension; a transposed convolution does that per input element.
int64_t convolution(const Node* node, const ObservedValues& observed, bool transposed) {
  auto weight = sizesOf(node->input(1), observed);
  auto data = sizesOf(transposed ? node->input(0) : node->output(0), observed);
  if (!weight || !data || weight->empty() || (*weight)[0] == 0) {
    return 0;
  }
  return 2 * product(*data) * (product(*weight) / (*weight)[0]);
}

// aten::_convolution / aten::convolution carry the transposed flag as their seventh input.
int64_t genericConvolution(const Node* node, const ObservedValues& observed) {
  auto transposed = torch::jit::constant_as<bool>(node->input(6));
  return transposed ? convolution(node, observed, *transposed) : 0;
}

// q [.., L, E], k [.., S, E], v [.., S, Ev]: q k^T and (softmax) v.
int64_t attention(const Node* node, const ObservedValues& observed) {
  auto q = sizesOf(node->input(0), observed);
  auto k = sizesOf(node->input(1), observed);
  auto out = sizesOf(node->output(0), observed);
  if (!q || !k || !out || k->size() < 2) {
    return 0;
  }
  const int64_t keys = (*k)[k->size() - 2];
  return 2 * product(*q) * keys + 2 * product(*out) * keys;
}

// Every 2-D weight of the flat parameter list (built by a prim::ListConstruct, or one constant list where the
// weights stay as frozen) is applied once per time step and batch row.
int64_t recurrent(const Node* node, const ObservedValues& observed) {
  auto input = sizesOf(node->input(0), observed);
  const Value* params = node->input(node->kind() == c10::aten::lstm ? 2 : 1);
  if (!input || input->empty()) {
    return 0;
  }
  const int64_t rows = product(*input) / std::max<int64_t>(input->back(), 1);
  int64_t weights = 0;
  if (params->node()->kind() == c10::prim::ListConstruct) {
    for (const Value* param : params->node()->inputs()) {
      if (auto sizes = sizesOf(param, observed); sizes && sizes->size() == 2) {
        weights += product(*sizes);
      }
    }
  } else if (auto constant = torch::jit::toIValue(params); constant && constant->isTensorList()) {
    for (const at::Tensor& param : constant->toTensorVector()) {
      weights += param.dim() == 2 ? param.numel() : 0;
    }
  }
  return 2 * rows * weights;
}

// PyTorch's fused transformer ops (nn.MultiheadAttention's and nn.TransformerEncoderLayer's fast paths): every
// token goes through each 2-D weight once, plus q k^T and (softmax) v per sequence. A nested input (rows of
// different lengths, padding removed) has a token count but no sequence length: its attention term is left out.
int64_t fusedTransformer(const Node* node, const ObservedValues& observed, std::vector<size_t> weights) {
  auto input = observed.find(node->input(0));
  const size_t widthIndex = node->kind() == c10::aten::_native_multi_head_attention ? 3 : 1;
  auto width = torch::jit::constant_as<int64_t>(node->input(widthIndex));
  auto output = observed.find(node->output(0));
  if (input == observed.end() || !input->second.isTensor || output == observed.end() || output->second.inferred ||
      !width || *width <= 0) {  // a node the example inputs did not reach ran no FLOPs
    return 0;
  }
  const int64_t tokens = input->second.numel / *width;
  int64_t flops = 0;
  for (size_t index : weights) {
    if (auto sizes = sizesOf(node->input(index), observed); sizes && sizes->size() == 2) {
      flops += 2 * tokens * product(*sizes);
    }
  }
  if (auto sizes = knownSizes(input->second); sizes && sizes->size() >= 2) {
    flops += 4 * tokens * (*sizes)[sizes->size() - 2] * *width;
  }
  return flops;
}

} // namespace

int64_t estimateFlops(const Node* node, const ObservedValues& observed) {
  switch (core::factsOf(node->kind().toQualString()).flops) {
    case core::FlopFormula::kNone:
      return 0;
    case core::FlopFormula::kConvolution:
      return convolution(node, observed, /*transposed=*/false);
    case core::FlopFormula::kTransposedConvolution:
      return convolution(node, observed, /*transposed=*/true);
    case core::FlopFormula::kGenericConvolution:
      return genericConvolution(node, observed);
    case core::FlopFormula::kContraction:
      return contraction(node, 0, observed);
    case core::FlopFormula::kBiasedContraction:
      return contraction(node, 1, observed);
    case core::FlopFormula::kAttention:
      return attention(node, observed);
    case core::FlopFormula::kMultiHeadAttention:
      // (query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, ...)
      return fusedTransformer(node, observed, {5, 7});
    case core::FlopFormula::kTransformerEncoderLayer:
      // (src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps, 4 norm
      // tensors, ffn_weight_1, ffn_bias_1, ffn_weight_2, ...)
      return fusedTransformer(node, observed, {3, 5, 14, 16});
    case core::FlopFormula::kRecurrent:
      return recurrent(node, observed);
  }
  return 0;
}

} // namespace torch_mp::jit
