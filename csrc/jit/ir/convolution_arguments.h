// Where a 2-d convolution's arguments sit, for the two ways a frozen graph spells one: aten::conv2d (scripted
// models) and aten::_convolution (traced ones). Both read the input, weight and bias at 0, 1 and 2.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <optional>

namespace torch_mp::jit {

struct ConvolutionArguments {
  size_t stride;
  size_t padding;
  size_t dilation;
  size_t groups;
};

// The argument positions of a 2-d, non-transposed convolution (aten::conv2d with int[] padding, or
// aten::_convolution whose `transposed` is the constant false and whose weight is 4-d); nothing for any other node.
std::optional<ConvolutionArguments> convolution2dArguments(const torch::jit::Node* node);

} // namespace torch_mp::jit
