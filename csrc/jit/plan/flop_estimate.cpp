#include "jit/plan/flop_estimate.h"

#include <torch/csrc/jit/ir/constants.h>

#include <optional>
#include <vector>

#include "core/flop_formulas.h"
#include "core/op_facts.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Node;
using torch::jit::Value;
using core::Sizes;

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

// The sizes of a node's inputs and first output; aten::_convolution / aten::convolution carry the transposed flag as
// their seventh input.
core::FlopOperands operandsOf(const Node* node, const ObservedValues& observed) {
  core::FlopOperands operands;
  for (const Value* input : node->inputs()) {
    operands.inputs.push_back(sizesOf(input, observed));
  }
  operands.output = node->outputs().empty() ? std::nullopt : sizesOf(node->output(0), observed);
  if (core::factsOf(node->kind().toQualString()).flops == core::FlopFormula::kGenericConvolution) {
    operands.transposed = torch::jit::constant_as<bool>(node->input(6));
  }
  return operands;
}

// Every 2-D weight of the flat parameter list (built by a prim::ListConstruct, or one constant list where the
// weights stay as frozen) is applied once per time step and batch row.
int64_t recurrent(const Node* node, const ObservedValues& observed) {
  auto input = sizesOf(node->input(0), observed);
  const Value* params = node->input(node->kind() == c10::aten::lstm ? 2 : 1);
  if (!input || input->empty()) {
    return 0;
  }
  const int64_t rows = core::elementCount(*input) / std::max<int64_t>(input->back(), 1);
  int64_t weights = 0;
  if (params->node()->kind() == c10::prim::ListConstruct) {
    for (const Value* param : params->node()->inputs()) {
      if (auto sizes = sizesOf(param, observed); sizes && sizes->size() == 2) {
        weights += core::elementCount(*sizes);
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
      flops += 2 * tokens * core::elementCount(*sizes);
    }
  }
  if (auto sizes = knownSizes(input->second); sizes && sizes->size() >= 2) {
    flops += 4 * tokens * (*sizes)[sizes->size() - 2] * *width;
  }
  return flops;
}

} // namespace

int64_t estimateFlops(const Node* node, const ObservedValues& observed) {
  const core::FlopFormula formula = core::factsOf(node->kind().toQualString()).flops;
  switch (formula) {
    case core::FlopFormula::kNone:
      return 0;
    case core::FlopFormula::kConvolution:
    case core::FlopFormula::kTransposedConvolution:
    case core::FlopFormula::kGenericConvolution:
    case core::FlopFormula::kContraction:
    case core::FlopFormula::kBiasedContraction:
    case core::FlopFormula::kAttention:
      return core::flopsOf(formula, operandsOf(node, observed));
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
