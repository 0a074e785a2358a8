// Instance and group norm on an NHWC activation in stock aten ops, without the NCHW copies ATen's kernels make
// (instance_norm runs batch_norm on a (1, N*C, H, W) view of a contiguous input; group_norm's kernels read NCHW).
// channels_last_convolutions calls it for the norms it keeps inside an NHWC chain.
//
//   %y = aten::instance_norm(%x, %w, %b, None, None, true, %momentum, %eps, %cudnn)   (or aten::group_norm(%x, G,
//                                                                                       %w, %b, %eps, %cudnn))
//     =>  %xf = aten::to(%x, Float)                       (only where %x is fp16 / bf16)
//         %g = aten::unflatten(%xf, 1, [G, -1])           (group norm: [N, G, C/G, H, W], a view of NHWC memory)
//         %var, %mean = aten::var_mean(%g, [2, 3(, 4)], correction=0, keepdim=True)       fp32 statistics
//         %scale = aten::mul(aten::rsqrt(aten::add(%var, %eps)), %w')   %w': w as [1, C, 1, 1] / [1, G, C/G, 1, 1]
//         %shift = aten::addcmul(%b', %mean, %scale, -1)                  b - mean * scale, per (n, c)
//         (group norm: both flattened to [N, C, 1, 1])
//         %y = aten::addcmul(%shift, %x, %scale, 1)       one pass over %x, in fp32 (type promotion), output NHWC
//         (then aten::to(%y, <the norm's dtype>) where the norm wrote fp16 / bf16: a low input it read directly)
//
// The same values as ATen's kernels within fp32 rounding: both compute the biased variance in fp32 and apply
// (x - mean) * rstd * w + b in fp32. Only for instance_norm with use_input_stats true and no running statistics
// (nothing to update), group_norm with a constant group count dividing C, constant (or absent) 1-d affine
// parameters of C elements, a constant eps, and a recorded floating output dtype.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>

namespace torch_mp::jit {

// Whether writeNormForChannelsLast can rewrite `node` for an input of `channels` channels.
bool isChannelsLastNormRewritable(const torch::jit::Node* node, int64_t channels);

// Replaces `norm` (isChannelsLastNormRewritable) with the stock ops above; its readers read their result. Returns
// the new output.
torch::jit::Value* writeNormForChannelsLast(torch::jit::Graph& graph, torch::jit::Node* norm, int64_t channels);

} // namespace torch_mp::jit
