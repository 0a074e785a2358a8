#include "jit/ir/norm_arguments.h"

#include <torch/csrc/jit/ir/constants.h>

namespace torch_mp::jit {
namespace {

constexpr const char* kInstanceNorm =
    "aten::instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, "
    "bool use_input_stats, float momentum, float eps, bool cudnn_enabled) -> Tensor";
constexpr const char* kGroupNorm =
    "aten::group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, "
    "float eps=1.0000000000000001e-05, bool cudnn_enabled=True) -> Tensor";

bool isConstantNone(const torch::jit::Value* value) {
  const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
  return constant && constant->isNone();
}

} // namespace

std::optional<at::Tensor> constantTensorOrNone(const torch::jit::Value* value) {
  const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
  if (!constant || !(constant->isNone() || constant->isTensor())) {
    return std::nullopt;
  }
  return constant->isNone() ? at::Tensor() : constant->toTensor();
}

std::optional<SpatialNormArguments> spatialNormArguments(const torch::jit::Node* node) {
  SpatialNormArguments arguments;
  if (node->kind() == c10::aten::instance_norm && node->matches(kInstanceNorm)) {
    if (torch::jit::constant_as<bool>(node->namedInput("use_input_stats")) != true ||
        !isConstantNone(node->namedInput("running_mean")) || !isConstantNone(node->namedInput("running_var"))) {
      return std::nullopt;
    }
    arguments.groups = kGroupPerChannel;
  } else if (node->kind() == c10::aten::group_norm && node->matches(kGroupNorm)) {
    const std::optional<int64_t> groups = torch::jit::constant_as<int64_t>(node->namedInput("num_groups"));
    if (!groups || *groups <= 0) {
      return std::nullopt;
    }
    arguments.groups = *groups;
  } else {
    return std::nullopt;
  }
  const std::optional<at::Tensor> weight = constantTensorOrNone(node->namedInput("weight"));
  const std::optional<at::Tensor> bias = constantTensorOrNone(node->namedInput("bias"));
  const std::optional<double> eps = torch::jit::constant_as<double>(node->namedInput("eps"));
  if (!weight || !bias || !eps) {
    return std::nullopt;
  }
  arguments.input = node->namedInput("input");
  arguments.weight = *weight;
  arguments.bias = *bias;
  arguments.eps = *eps;
  return arguments;
}

} // namespace torch_mp::jit
