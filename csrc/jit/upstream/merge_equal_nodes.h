// PyTorch's ConstantPooling and EliminateCommonSubexpression, with the same merges, without building alias analysis
// for graphs where no node may write unless a merge needs it.
//
// Both passes build an AliasDb of the whole graph (about 7 us a node) before looking at a node: CSE asks it whether
// each node's values have writers, and both ask before merging two equal nodes whether that would make values alias
// that must not (both may alias the graph's inputs or outputs). Where no node may write (graphMayWrite), no value has
// writers, and values of types alias analysis does not track (ints, floats, bools, strings, None, devices) alias
// nothing, so merging them is always safe: the two equal int constants a conversion's casts leave, or two equal
// size queries. The AliasDb is built only when two equal nodes of tracked types (tensors, lists, tuples of them)
// meet, and answers as it does in PyTorch's pass: until then the passes have merged only untracked values and moved
// constants, which alias analysis does not see. Where a node may write, PyTorch's pass runs as it is.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace torch_mp::jit {

// The hash both passes give a tensor constant's value, beside PyTorch's node hash (which puts every tensor constant
// in one bucket, so each would be compared with at::equal to every one kept): its sizes and, for dense CPU tensors of
// the common dtypes, 16 evenly spaced values read as doubles. Tensors equal as EqualNode compares them (same dtype,
// device and layout, at::equal) hash alike: -0.0 and 0.0, negative views, bools as at::equal reads them; NaN, equal
// to nothing, hashes as 0; CUDA, quantized, complex and other unread tensors hash by their sizes alone.
size_t tensorValueHash(const at::Tensor& tensor);

// torch::jit::ConstantPooling: equal constants merged, each kept one moved to the front of the graph.
void poolConstants(const std::shared_ptr<torch::jit::Graph>& graph);

// torch::jit::EliminateCommonSubexpression: a node equal to one before it (in its block or a block around it) gives
// way to it. Returns whether it changed the graph.
bool eliminateCommonSubexpressions(const std::shared_ptr<torch::jit::Graph>& graph);

} // namespace torch_mp::jit
