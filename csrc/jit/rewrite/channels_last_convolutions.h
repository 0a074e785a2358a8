// Runs CUDA 2-d convolutions in channels_last (NHWC) order, cuDNN's fast layout for tensor cores, with no transposes
// between the convolutions of a chain.
//
//   %y = aten::conv2d(%x, %w, %b, ...)     %w: a constant 4-d floating tensor, %y observed on a CUDA device
//                                          (or a traced aten::_convolution that is not transposed)
//     =>  %w becomes a channels_last copy of itself (same values, stored once in the saved model)
//
// A convolution whose weight is channels_last writes NHWC, and converts an NCHW input once inside cuDNN (where a chain
// starts). Every tensor output of an op that keeps the layout (core/op_facts: elementwise ops, pooling, cat, casts,
// convolutions) reading such a value is NHWC too. Any other reader — a view, an unknown op, a block's or the graph's
// return — reads `aten::contiguous(%v)` instead, inserted once per value right after its definition, so it sees the
// layout the fp32 model had (contiguous() returns the tensor itself when it already is, as an [N, C, 1, 1] one is).
// A list is passed on NHWC only when every reader of the list keeps the layout. CPU graphs are left alone: oneDNN
// picks its own blocked layouts.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

#include "jit/ir/observed_values.h"

namespace torch_mp::jit {

// Returns the number of convolutions whose weights it stored channels_last.
int ConvertConvolutionsToChannelsLast(const std::shared_ptr<torch::jit::Graph>& graph,
                                      const ObservedValues& observed);

} // namespace torch_mp::jit
