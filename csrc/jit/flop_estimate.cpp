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
  if (it == observed.end() || !it->second.isTensor) {
    return std::nullopt;
  }
  return it->second.sizes;
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

// Every 2-D weight of the flat parameter list is applied once per time step and batch row.
int64_t recurrent(const Node* node, const ObservedValues& observed) {
  auto input = sizesOf(node->input(0), observed);
  const Node* params = node->input(node->kind() == c10::aten::lstm ? 2 : 1)->node();
  if (!input || input->empty() || params->kind() != c10::prim::ListConstruct) {
    return 0;
  }
  const int64_t rows = product(*input) / std::max<int64_t>(input->back(), 1);
  int64_t weights = 0;
  for (const Value* param : params->inputs()) {
    if (auto sizes = sizesOf(param, observed); sizes && sizes->size() == 2) {
      weights += product(*sizes);
    }
  }
  return 2 * rows * weights;
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
