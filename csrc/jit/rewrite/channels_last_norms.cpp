#include "jit/rewrite/channels_last_norms.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include <optional>
#include <vector>

#include "jit/ir/ir_utils.h"
#include "jit/ir/norm_arguments.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Graph;
using torch::jit::NamedValue;
using torch::jit::Node;
using torch::jit::Value;

// What the rewrite needs of a norm: its arguments with the group count resolved (instance norm: `channels`).
struct SpatialNorm {
  Value* input = nullptr;
  int64_t groups = 0;
  at::Tensor weight;  // undefined where the norm has none
  at::Tensor bias;
  double eps = 0.0;
};

// An absent parameter, or a 1-d floating one of `channels` elements.
bool isPerChannel(const at::Tensor& parameter, int64_t channels) {
  return !parameter.defined() || (parameter.dim() == 1 && parameter.size(0) == channels &&
                                  at::isFloatingType(parameter.scalar_type()));
}

bool isFloatingDtype(std::optional<c10::ScalarType> dtype) {
  return dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16;
}

std::optional<SpatialNorm> spatialNorm(const Node* node, int64_t channels) {
  if (!isFloatingDtype(recordedDtype(node->output())) || !isFloatingDtype(recordedDtype(node->input(0)))) {
    return std::nullopt;
  }
  const std::optional<SpatialNormArguments> arguments = spatialNormArguments(node);
  if (!arguments || !isPerChannel(arguments->weight, channels) || !isPerChannel(arguments->bias, channels)) {
    return std::nullopt;
  }
  const int64_t groups = arguments->groups == kGroupPerChannel ? channels : arguments->groups;
  if (channels % groups != 0) {
    return std::nullopt;
  }
  return SpatialNorm{arguments->input, groups, arguments->weight, arguments->bias, arguments->eps};
}

// The fp32 per-channel parameter in the statistics' shape: [1, C, 1, 1] for an instance norm, [1, G, C/G, 1, 1] for
// a group norm; `fill` where the norm has none.
at::Tensor parameterInStatisticsShape(const at::Tensor& parameter, const SpatialNorm& norm, int64_t channels,
                                      double fill) {
  const std::vector<int64_t> shape = norm.groups == channels
      ? std::vector<int64_t>{1, channels, 1, 1}
      : std::vector<int64_t>{1, norm.groups, channels / norm.groups, 1, 1};
  if (!parameter.defined()) {
    return at::full(shape, fill, at::TensorOptions().dtype(at::kFloat));
  }
  return parameter.to(at::kFloat).reshape(shape).contiguous();
}

Value* insertFloat(Graph& graph, Value* value) {
  Value* result = graph.insert(
      c10::aten::to, {value, static_cast<int64_t>(c10::ScalarType::Float), false, false, c10::IValue()});
  setRecordedDtype(result, c10::ScalarType::Float);
  return result;
}

// A tensor-valued op whose result is fp32.
Value* insertFp32(Graph& graph, c10::Symbol op, std::vector<NamedValue> arguments,
                  std::vector<NamedValue> keywords = {}) {
  Value* result = graph.insert(op, arguments, keywords);
  result->setType(c10::TensorType::get()->withScalarType(c10::ScalarType::Float));
  return result;
}

} // namespace

bool isChannelsLastNormRewritable(const Node* node, int64_t channels) {
  return spatialNorm(node, channels).has_value();
}

Value* writeNormForChannelsLast(Graph& graph, Node* node, int64_t channels) {
  const SpatialNorm norm = *spatialNorm(node, channels);
  const bool instance = norm.groups == channels;
  torch::jit::WithInsertPoint point(node);
  Node* first = node->prev();
  Value* x = norm.input;
  Value* statistics = recordedDtype(x) == c10::ScalarType::Float ? x : insertFloat(graph, x);
  std::vector<int64_t> reduced{2, 3};
  if (!instance) {
    statistics = insertFp32(graph, c10::aten::unflatten, {statistics, 1, std::vector<int64_t>{norm.groups, -1}});
    reduced.push_back(4);
  }
  Node* varMean = graph.create(
      c10::aten::var_mean,
      {statistics, graph.insertConstant(reduced), graph.insertConstant(0), graph.insertConstant(true)}, 2);
  graph.insertNode(varMean);
  for (Value* output : varMean->outputs()) {
    output->setType(c10::TensorType::get()->withScalarType(c10::ScalarType::Float));
  }
  Value* variance = varMean->output(0);
  Value* mean = varMean->output(1);
  Value* rstd = insertFp32(
      graph, c10::aten::rsqrt, {insertFp32(graph, c10::aten::add, {variance, norm.eps})});
  Value* scale = rstd;
  if (!instance || norm.weight.defined()) {
    scale = insertFp32(graph, c10::aten::mul,
                       {rstd, graph.insertConstant(parameterInStatisticsShape(norm.weight, norm, channels, 1.0))});
  }
  Value* shift = insertFp32(
      graph, c10::aten::addcmul,
      {graph.insertConstant(parameterInStatisticsShape(norm.bias, norm, channels, 0.0)), mean, scale},
      {NamedValue("value", -1)});
  if (!instance) {
    scale = insertFp32(graph, c10::aten::flatten, {scale, 1, 2});
    shift = insertFp32(graph, c10::aten::flatten, {shift, 1, 2});
  }
  Value* y = insertFp32(graph, c10::aten::addcmul, {shift, x, scale}, {NamedValue("value", 1)});
  const c10::ScalarType written = *recordedDtype(node->output());
  if (written != c10::ScalarType::Float) {
    y = graph.insert(c10::aten::to, {y, static_cast<int64_t>(written), false, false, c10::IValue()});
  }
  y->setType(node->output()->type());
  for (Node* created = first->next(); created != node; created = created->next()) {
    created->copyMetadata(node);
  }
  copyNodeId(node, y->node());
  node->output()->replaceAllUsesWith(y);
  GRAPH_UPDATE("Wrote ", node->kind().toQualString(), " ", node->output()->debugName(), " for NHWC as ",
               y->debugName());
  node->destroy();
  return y;
}

} // namespace torch_mp::jit
