#include "jit/ir/convolution_arguments.h"

#include <torch/csrc/jit/ir/constants.h>

namespace torch_mp::jit {

std::optional<ConvolutionArguments> convolution2dArguments(const torch::jit::Node* node) {
  static const char* const kConv2d =
      "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, SymInt[2] padding=0, "
      "SymInt[2] dilation=1, SymInt groups=1) -> Tensor";
  static const char* const kConvolution =
      "aten::_convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, "
      "SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool benchmark, "
      "bool deterministic, bool cudnn_enabled, bool allow_tf32) -> Tensor";
  if (node->matches(kConv2d)) {
    return ConvolutionArguments{3, 4, 5, 6};
  }
  if (!node->matches(kConvolution)) {
    return std::nullopt;
  }
  const std::optional<bool> transposed = torch::jit::constant_as<bool>(node->input(6));
  const std::optional<c10::IValue> weight = torch::jit::toIValue(node->input(1));
  if (transposed != false || !weight || !weight->isTensor() || weight->toTensor().dim() != 4) {
    return std::nullopt;
  }
  return ConvolutionArguments{3, 4, 5, 8};
}

} // namespace torch_mp::jit
