// PyTorch's PeepholeOptimize(graph, /*disable_shape_peepholes=*/true), with the same rewrites, running each of its
// alias-analysis passes only where the graph holds what it rewrites.
//
// PeepholeOptimize runs its own node rewrites, then five passes (list idioms, dict idioms, alias-sensitive
// identities, non-tensor rewrites, nested concatenations), and four of them each build an AliasDb of the whole graph
// (about 7 us a node) whether or not there is anything to rewrite: most of the fp32 clean-up's time on a graph
// without built dicts, nested concatenations or integer identities. Here the list, dict and concatenation passes
// and the alias-sensitive one run only where a node they could rewrite exists (a superset of what they rewrite, read
// off PyTorch's sources; for the list idioms, a length, index, unpacking, slice or sum of a list built by
// prim::ListConstruct, where nearly every graph builds lists only for ops such as aten::cat to read); the
// non-tensor pass (no alias analysis) always runs. Where the graph holds a node PeepholeOptimize's own rewrites
// could change (a transpose of a transpose, a number read back from a tensor made of it, a gradient reduction),
// PyTorch's pass runs as it is.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace torch_mp::jit {

// Returns whether it changed the graph; the dead code it leaves goes, as in PyTorch's pass.
bool peepholeOptimize(const std::shared_ptr<torch::jit::Graph>& graph);

} // namespace torch_mp::jit
