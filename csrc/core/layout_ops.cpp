#include "core/layout_ops.h"

#include <unordered_map>

namespace torch_mp::core {
namespace {

constexpr LayoutRole kKeeps = LayoutRole::kKeepsChannelsLast;
constexpr LayoutRole kMetadata = LayoutRole::kReadsMetadataOnly;

// TensorIterator gives an elementwise op's output the layout of its inputs (the first input's when they differ).
constexpr const char* kElementwise = "elementwise (TensorIterator): the output takes the inputs' layout";
constexpr const char* kPerChannel = "per-channel kernel with an NHWC path in cuDNN / ATen";
constexpr const char* kMetadataReason = "reads sizes, dtype or device only";

const std::unordered_map<std::string, LayoutEntry>& table() {
  static const std::unordered_map<std::string, LayoutEntry> entries = {
      {"aten::conv2d", {kKeeps, "cuDNN convolves NHWC natively and writes NHWC when its weight is channels_last"}},
      {"aten::_convolution", {kKeeps, "traced convolution: same layout rule as aten::conv2d"}},
      {"aten::cudnn_convolution_relu", {kKeeps, "cuDNN fused convolution: same layout rule as aten::conv2d"}},
      {"aten::cudnn_convolution_add_relu", {kKeeps, "cuDNN fused convolution: same layout rule as aten::conv2d"}},
      {"aten::batch_norm", {kKeeps, kPerChannel}},
      {"aten::max_pool2d", {kKeeps, "NHWC pooling kernel; output keeps the input's layout"}},
      {"aten::avg_pool2d", {kKeeps, "NHWC pooling kernel; output keeps the input's layout"}},
      {"aten::adaptive_avg_pool2d", {kKeeps, "NHWC pooling kernel; output keeps the input's layout"}},
      {"aten::upsample_nearest2d", {kKeeps, "NHWC upsampling kernel; output keeps the input's layout"}},
      {"aten::upsample_bilinear2d", {kKeeps, "NHWC upsampling kernel; output keeps the input's layout"}},
      {"aten::cat", {kKeeps, "concatenating inputs of one layout writes that layout (the list is read here)"}},
      {"prim::ListConstruct", {kKeeps, "a list of tensors is only passed on; its readers decide (cat keeps NHWC)"}},
      {"aten::to", {kKeeps, "a dtype cast keeps the memory format (preserve_format)"}},
      {"aten::type_as", {kKeeps, "a dtype cast keeps the memory format (preserve_format)"}},
      {"aten::dropout", {kKeeps, "identity at inference"}},
      {"torch_mp::fused_pointwise", {kKeeps, "inputs of one dense layout are read in memory order; out is empty_like"}},
      {"aten::add", {kKeeps, kElementwise}},
      {"aten::sub", {kKeeps, kElementwise}},
      {"aten::mul", {kKeeps, kElementwise}},
      {"aten::div", {kKeeps, kElementwise}},
      {"aten::neg", {kKeeps, kElementwise}},
      {"aten::relu", {kKeeps, kElementwise}},
      {"aten::relu6", {kKeeps, kElementwise}},
      {"aten::leaky_relu", {kKeeps, kElementwise}},
      {"aten::hardtanh", {kKeeps, kElementwise}},
      {"aten::hardswish", {kKeeps, kElementwise}},
      {"aten::hardsigmoid", {kKeeps, kElementwise}},
      {"aten::sigmoid", {kKeeps, kElementwise}},
      {"aten::tanh", {kKeeps, kElementwise}},
      {"aten::silu", {kKeeps, kElementwise}},
      {"aten::gelu", {kKeeps, kElementwise}},
      {"aten::elu", {kKeeps, kElementwise}},
      {"aten::mish", {kKeeps, kElementwise}},
      {"aten::clamp", {kKeeps, kElementwise}},
      {"aten::clamp_min", {kKeeps, kElementwise}},
      {"aten::clamp_max", {kKeeps, kElementwise}},
      {"aten::size", {kMetadata, kMetadataReason}},
      {"aten::dim", {kMetadata, kMetadataReason}},
      {"aten::numel", {kMetadata, kMetadataReason}},
      {"aten::len", {kMetadata, kMetadataReason}},
      {"prim::dtype", {kMetadata, kMetadataReason}},
      {"prim::device", {kMetadata, kMetadataReason}},
      {"prim::shape", {kMetadata, kMetadataReason}},
      {"prim::is_cuda", {kMetadata, kMetadataReason}},
      {"aten::__is__", {kMetadata, "compares identity, reads no element"}},
      {"aten::__isnot__", {kMetadata, "compares identity, reads no element"}},
  };
  return entries;
}

} // namespace

const LayoutEntry* findLayoutEntry(const std::string& op) {
  auto it = table().find(op);
  return it == table().end() ? nullptr : &it->second;
}

LayoutRole layoutRoleOf(const std::string& op) {
  const LayoutEntry* entry = findLayoutEntry(op);
  return entry ? entry->role : LayoutRole::kNeedsContiguous;
}

} // namespace torch_mp::core
