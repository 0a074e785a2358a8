// PyTorch's ConstantPropagation(graph, /*ignore_custom_classes=*/true), run only where it could change the graph.
//
// ConstantPropagation builds an AliasDb of the whole graph (about 7 us a node) as soon as it meets a node whose
// inputs are all constant, prim::Constant itself included, so on every graph, and usually finds nothing to fold:
// freezing ends with it and the fp32 clean-up reaches its fixed point. Here one walk first looks for what it could
// change (a superset of what it changes, read off PyTorch's sources): a node outside its skip list, without blocks,
// side effects or nondeterminism, whose inputs are all constants; a prim::If on a constant condition, or with an
// output both branches give alike (the same value, or equal constants); a prim::Loop that never runs, or carries a
// value its body leaves unchanged. Where there is none, PyTorch's pass would return false and leave the graph as it
// is, and it is not run.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace torch_mp::jit {

// Returns whether it changed the graph; the dead code it leaves goes, as in PyTorch's pass.
bool propagateConstants(std::shared_ptr<torch::jit::Graph>& graph);

} // namespace torch_mp::jit
