// PyTorch's OptimizeFrozenGraph, each of its passes run only where the graph holds what that pass rewrites.
//
// OptimizeFrozenGraph removes inference-mode dropout, concatenates linears that read one input, and folds into a
// convolution the batch norm, add, sub, mul or div that reads it, and into a linear the batch norm that reads it,
// repeating the folds until none changes the graph. Each of those passes ends by sweeping dead code with alias
// analysis of the whole graph (about 7 us a node) whether or not it rewrote anything: five sweeps a round, where most
// graphs hold nothing for most of them (a transformer has no convolution, a ResNet no linear that feeds a batch
// norm). Same passes, same order, same repetition; a pass whose ops are absent could not change the graph, so
// skipping it only moves when the dead code goes, and one sweep at the end (without alias analysis where nothing
// writes) takes it. What every pass looks for is found in one walk, repeated only after a pass ran. Returns whether
// any pass rewrote the graph.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace torch_mp::jit {

bool FoldFrozenPatterns(std::shared_ptr<torch::jit::Graph>& graph);

} // namespace torch_mp::jit
