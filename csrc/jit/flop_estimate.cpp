#include "jit/flop_estimate.h"

#include <torch/csrc/jit/ir/constants.h>

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

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

using Estimator = std::function<int64_t(const Node*, const ObservedValues&)>;

const std::unordered_map<std::string, Estimator>& estimators() {
  static const auto* table = [] {
    auto* t = new std::unordered_map<std::string, Estimator>;
    for (const char* op : {"aten::conv1d", "aten::conv2d", "aten::conv3d"}) {
      (*t)[op] = [](const Node* n, const ObservedValues& o) { return convolution(n, o, false); };
    }
    for (const char* op : {"aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"}) {
      (*t)[op] = [](const Node* n, const ObservedValues& o) { return convolution(n, o, true); };
    }
    (*t)["aten::_convolution"] = genericConvolution;
    (*t)["aten::convolution"] = genericConvolution;
    for (const char* op : {"aten::linear", "aten::matmul", "aten::mm", "aten::bmm"}) {
      (*t)[op] = [](const Node* n, const ObservedValues& o) { return contraction(n, 0, o); };
    }
    for (const char* op : {"aten::addmm", "aten::baddbmm", "aten::addbmm"}) {
      (*t)[op] = [](const Node* n, const ObservedValues& o) { return contraction(n, 1, o); };
    }
    (*t)["aten::scaled_dot_product_attention"] = attention;
    // (query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, ...)
    (*t)["aten::_native_multi_head_attention"] = [](const Node* n, const ObservedValues& o) {
      return fusedTransformer(n, o, {5, 7});
    };
    // (src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps, 4 norm
    // tensors, ffn_weight_1, ffn_bias_1, ffn_weight_2, ...)
    (*t)["aten::_transformer_encoder_layer_fwd"] = [](const Node* n, const ObservedValues& o) {
      return fusedTransformer(n, o, {3, 5, 14, 16});
    };
    for (const char* op : {"aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu"}) {
      (*t)[op] = recurrent;
    }
    return t;
  }();
  return *table;
}

} // namespace

int64_t estimateFlops(const Node* node, const ObservedValues& observed) {
  auto it = estimators().find(node->kind().toQualString());
  return it == estimators().end() ? 0 : it->second(node, observed);
}

} // namespace torch_mp::jit
