// Runs CUDA 2-d convolutions in channels_last (NHWC) order, cuDNN's fast layout for tensor cores, with no transposes
// between the convolutions of a chain.
//
//   %y = aten::conv2d(%x, %w, %b, ...)     %w: a constant 4-d floating tensor, %y observed on a CUDA device
//                                          (or a traced aten::_convolution that is not transposed)
//     =>  %w becomes a channels_last copy of itself (same values, stored once in the saved model)
//
// A convolution whose weight is channels_last writes NHWC. Every tensor output of an op that keeps the layout
// (core/op_facts: elementwise ops, pooling, cat, casts, convolutions, and views that keep channels innermost: split,
// chunk, unbind, slice, narrow and the list reads after them) reading such a value is NHWC too, and so is an If's
// output where a branch returns one (the If's readers decide; a branch returning NCHW is read correctly by them).
// Any other reader — an op outside the table, a loop's or the graph's return — reads `aten::contiguous(%v)`
// instead, inserted once per value right after its definition, so it sees the layout the fp32 model had
// (contiguous() returns the tensor itself when it already is, as an [N, C, 1, 1] one is). A list is passed on NHWC
// only when every reader of the list keeps the layout. Besides:
//   - a model's own `aten::contiguous(%v)` of an NHWC value goes when every reader takes NHWC and nothing in the graph
//     may write (a copy can be what keeps a write from the original); its readers read %v, a strided NHWC view;
//   - aten::instance_norm / aten::group_norm on an NHWC value of observed rank 4 is written in stock ops that keep
//     NHWC (channels_last_norms) instead of reading a contiguous copy;
//   - a plain cast of an NCHW value (the model's input cast to the low dtype) that only re-laid convolutions read
//     writes channels_last itself (`memory_format`): one copy where the cast and cuDNN's own conversion made two;
//     a cast of an NHWC value that no reader takes NHWC (the output cast back to fp32) writes contiguous itself.
// CPU graphs are left alone: oneDNN picks its own blocked layouts.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

#include "jit/ir/observed_values.h"

namespace torch_mp::jit {

// Returns the number of convolutions whose weights it stored channels_last.
int ConvertConvolutionsToChannelsLast(const std::shared_ptr<torch::jit::Graph>& graph,
                                      const ObservedValues& observed);

} // namespace torch_mp::jit
