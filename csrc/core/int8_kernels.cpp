#include "core/int8_kernels.h"

#include <unordered_map>

namespace torch_mp::core {
namespace {

constexpr Int8Role kKernel = Int8Role::kKernel;
constexpr Int8Role kFollow = Int8Role::kFollow;
constexpr Int8Role kNoKernel = Int8Role::kNoKernel;
constexpr Int8Role kEpilogue = Int8Role::kEpilogue;

constexpr const char* kExactOnGrid = "exact on a quantized tensor: uint8 in and out with the input's scale";
constexpr const char* kPostOp = "a oneDNN post-op of the int8 convolution or matrix product before it";
constexpr const char* kTwoActivations =
    "a product of two computed tensors: the oneDNN int8 lowering (Inductor, torch 2.13-2.15) has no kernel for it";

// clang-format off
const Int8OpFacts kInt8OpFacts[] = {
    {"aten::conv2d", kKernel,
     "oneDNN int8 convolution (onednn.qconv_pointwise): uint8 x per-channel int8, int32 sums; its bias, a residual "
     "add and relu / relu6 / hardswish / silu fuse into it", 1},
    {"aten::linear", kKernel,
     "oneDNN int8 matrix product (onednn.qlinear_pointwise): uint8 x per-channel int8, int32 sums; its bias and "
     "relu / gelu fuse into it", 1},
    {"aten::conv1d", kNoKernel, "the int8 lowering's convolution patterns match 2-d convolutions only", -1},
    {"aten::conv3d", kNoKernel, "the int8 lowering's convolution patterns match 2-d convolutions only", -1},
    {"aten::conv_transpose2d", kNoKernel, "the int8 lowering has no transposed-convolution pattern", -1},
    {"aten::matmul", kNoKernel, kTwoActivations, -1},
    {"aten::bmm", kNoKernel, kTwoActivations, -1},
    {"aten::mm", kNoKernel, kTwoActivations, -1},
    {"aten::scaled_dot_product_attention", kNoKernel, kTwoActivations, -1},
    {"aten::max_pool2d", kFollow, "the largest of uint8 values is the largest value: qmaxpool2d on uint8", -1},
    {"aten::relu", kEpilogue, kPostOp, -1},
    {"aten::hardtanh", kEpilogue, kPostOp, -1},
    {"aten::hardswish", kEpilogue, kPostOp, -1},
    {"aten::silu", kEpilogue, kPostOp, -1},
    {"aten::gelu", kEpilogue, kPostOp, -1},
    {"aten::add", kEpilogue, "a residual add: oneDNN's sum post-op of the int8 convolution before it", -1},
    {"aten::flatten", kFollow, kExactOnGrid, -1},
    {"aten::view", kFollow, kExactOnGrid, -1},
    {"aten::reshape", kFollow, kExactOnGrid, -1},
};
// clang-format on

} // namespace

const Int8OpFacts* int8FactsOf(const std::string& op) {
  static const std::unordered_map<std::string, const Int8OpFacts*> byName = [] {
    std::unordered_map<std::string, const Int8OpFacts*> table;
    for (const Int8OpFacts& facts : kInt8OpFacts) {
      table.emplace(facts.op, &facts);
    }
    return table;
  }();
  const auto found = byName.find(op);
  return found == byName.end() ? nullptr : found->second;
}

const char* toString(Int8Role role) {
  switch (role) {
    case Int8Role::kNone:
      return "none";
    case Int8Role::kKernel:
      return "kernel";
    case Int8Role::kFollow:
      return "follow";
    case Int8Role::kNoKernel:
      return "no_kernel";
    case Int8Role::kEpilogue:
      return "epilogue";
  }
  return "?";
}

} // namespace torch_mp::core
