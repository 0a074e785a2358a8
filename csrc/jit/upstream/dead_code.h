// Dead-code elimination without alias information: what torch::jit::EliminateDeadCode(block, /*recurse=*/true)
// does, the same nodes, branch outputs, loop-carried values and fork inputs removed, with its bookkeeping (live
// nodes, live values, side effects) in open-addressing sets instead of node-based hash sets, which allocate once per
// node and value: PyTorch's took 0.3-0.7 s of a 100k-node conversion's clean-up
// (benchmarks/results/CONVERSION_SCALING.md).
// Sound only where no node may write to a value another node reads (writers.h's graphMayWrite is false): a node with
// a mutable schema is then kept as a side effect, as PyTorch's does without alias information.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

namespace torch_mp::jit {

void eliminateDeadCodeWithoutAliases(torch::jit::Block* block);

} // namespace torch_mp::jit
