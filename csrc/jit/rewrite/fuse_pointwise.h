// Fuses chains of elementwise ops, and the casts between them, into one torch_mp::fused_pointwise call per chain
// (kernels/fused_pointwise.h): one pass over memory instead of one per op. The fused mode's last step; the
// portable mode never runs it.
//
//   %c = aten::to(%x, 6, false, false, None)      %x : BFloat16
//   %s = aten::add(%c, %r, 1)                     %r : Float, same sizes
//   %y = aten::relu(%s)                            =>   %y = torch_mp::fused_pointwise([%x, %r], program, [], 6)
//
// Fused: relu, neg, add / sub (alpha 1) / mul / div with a tensor or a constant number, and plain casts
// (`aten::to(%x, dtype, false, false, None)`), on fp32 / fp16 / bf16 tensors the example inputs showed on a device the
// op has a kernel for in this build of the library, asked of the dispatcher when the pass runs (CPU always; CUDA only
// in a build with the CUDA kernel: a CPU-only build never emits a fused call on CUDA tensors, which could not run). A
// chain is a tree: a root and, recursively, the producers of its tensor inputs in the same block that nothing else
// reads, none of whose inputs is written in place (they are read at the root's position instead of their own). Every
// tensor in it has the root's observed sizes and device (no broadcasting, no mixed devices; values in loop bodies,
// whose sizes may change, are never fused), and it has at least two ops. Each op's result is rounded to its recorded
// dtype, as the op would; the kernel computes each op as ATen does on that device.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

#include "jit/ir/casts.h"
#include "jit/ir/observed_values.h"

namespace torch_mp::jit {

// Returns how many fused calls it made. Each cast that disappears into a fused call goes to `casts.fuse`; a fused call
// takes over its root's node id.
int FusePointwise(const std::shared_ptr<torch::jit::Graph>& graph, const ObservedValues& observed, CastLedger& casts);

} // namespace torch_mp::jit
