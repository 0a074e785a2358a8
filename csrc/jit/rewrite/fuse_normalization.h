// Fuses instance and group norms, and a concatenation along channels of them with inference batch norms, into one
// torch_mp::fused_channel_norm call each (kernels/fused_channel_norm.h): statistics in fp32 or wider, then one pass
// that writes the low dtype. A fused mode step; the portable mode never runs it.
//
//   %f = aten::to(%x, 6, false, false, None)                    %x : Half
//   %i = aten::instance_norm(%f, %w, %b, None, None, true, 0.1, 1e-5, true)
//   %h = aten::to(%i, 5, false, false, None)
//   %n = aten::batch_norm(%y, %w2, %b2, %m2, %v2, false, 0.1, 1e-5, true)
//   %l = prim::ListConstruct(%h, %n)
//   %c = aten::cat(%l, 1)
//   %r = aten::relu(%c)    =>   %r = torch_mp::fused_channel_norm([%x, %y], [-1, 0], [%w, %s2], [%b, %t2], 1e-5,
//                                                                  true, 5)
//
// A root is an `aten::cat(list, 1)` of a list only it reads, of tensors of its recorded dtype, at least one of which
// is a fusable norm, or else an instance / group norm outside such a cat. A cat's element is
//   - a fusable norm: aten::instance_norm with use_input_stats a constant true (running stats unused; groups -1, one
//     per channel, so no channel count is taken from the example inputs) or aten::group_norm with a constant group
//     count, with constant eps (one eps per call) and constant weight and bias or None;
//   - an eval batch norm: aten::batch_norm with training a constant false and constant statistics and affine
//     parameters, becoming a groups-0 part with scale w / sqrt(var + eps) and shift b - mean * scale, computed here
//     in fp32 as ATen's CPU kernel does;
//   - anything else, read as it is (a copy part);
// each optionally through a plain cast that only the list reads (folded into the write: the kernel rounds once to
// the cat's dtype, which is what the cast does to an fp32 norm; a norm writing a low dtype itself is then not
// folded, as that would skip its rounding). A norm's input may be a plain cast to fp32 that only the norm reads
// (folded into the read: widening is exact). The norm or cat may be followed by a plain cast of its fp32 result that
// it alone feeds (folded into out_dtype) and then by an aten::relu that alone reads it (folded: relu commutes with
// rounding). Every folded node is in the root's block and nothing writes what they read. Only values the example
// inputs showed on a device the op has a kernel for in this build (asked of the dispatcher) are fused, as
// FusePointwise does.
//
// A norm inside a branch (nn.InstanceNorm2d's `if input.dim() == 3` puts the batched call in block 1 of a prim::If)
// fuses there with its fp32 output; the If's output, cast to the low dtype after the If and concatenated, becomes a
// copy part of the cat's call, so that cast folds into the cat's write.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

#include "jit/ir/casts.h"
#include "jit/ir/observed_values.h"

namespace torch_mp::jit {

// Returns how many fused calls it made. Each cast that disappears into a call goes to `casts.fuse`; a call takes
// over its root's node id.
int FuseNormalization(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const ObservedValues& observed,
    CastLedger& casts);

} // namespace torch_mp::jit
