// What an instance or group norm normalises with, for the passes that rewrite one (channels_last_norms,
// fuse_normalization): aten::instance_norm with use_input_stats a constant true and no running statistics (it
// normalises with its input's statistics and updates nothing), or aten::group_norm with a constant positive group
// count; either with constant (or absent) affine parameters and a constant eps. Nothing for any other node.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <optional>

namespace torch_mp::jit {

// The group count of an instance norm: one group per channel (no channel count needed to say so).
constexpr int64_t kGroupPerChannel = -1;

struct SpatialNormArguments {
  torch::jit::Value* input = nullptr;
  int64_t groups = 0;  // kGroupPerChannel, or group_norm's positive count
  at::Tensor weight;   // undefined where the norm has none
  at::Tensor bias;     // likewise
  double eps = 0.0;
};

std::optional<SpatialNormArguments> spatialNormArguments(const torch::jit::Node* node);

// A norm's tensor argument as a constant (undefined for None); nothing for a value that is neither, e.g. computed.
std::optional<at::Tensor> constantTensorOrNone(const torch::jit::Value* value);

} // namespace torch_mp::jit
