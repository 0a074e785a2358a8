// IR helpers the passes share: dtypes recorded in value types, blocks, types that hold tensors, node ids.
//
// Node ids: preparation (jit/pipeline) numbers every node of the prepared graph but constants, in graph order, as an
// attribute (`torch_mp_node`). Copies of the graph keep them (Graph::copy and Module::clone copy attributes), so a
// node has one id in every plan made from one preparation: the report, the picture and the accuracy fallback name
// nodes by it. A pass that replaces a node by a new one hands the id over (copyNodeId); nodes a pass creates have
// none. The converted graph handed to a user carries no ids (takeNodeId).
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/flat_hash_map.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "contract/node_id.h"

namespace torch_mp::jit {

// The dtype a value's type records, if any.
std::optional<c10::ScalarType> recordedDtype(const torch::jit::Value* value);
// Records `dtype` in a tensor value's type (other types are left as they are).
void setRecordedDtype(torch::jit::Value* value, c10::ScalarType dtype);

// The block around the node that owns `block`, or nullptr for the graph's own block.
torch::jit::Block* parentBlock(torch::jit::Block* block);
// The innermost block that holds both blocks (each block holds itself).
torch::jit::Block* commonBlock(torch::jit::Block* a, torch::jit::Block* b);
// Whether any node of `block`, through the blocks of its nodes, satisfies `holds` (stops at the first that does).
template <typename Predicate>
bool anyNode(const torch::jit::Block* block, const Predicate& holds) {
  for (const torch::jit::Node* node : block->nodes()) {
    if (holds(node)) {
      return true;
    }
    for (const torch::jit::Block* sub : node->blocks()) {
      if (anyNode(sub, holds)) {
        return true;
      }
    }
  }
  return false;
}

// Calls `visit` on every node of `block`, through the blocks of its nodes, in graph order (a node before its blocks').
template <typename Visit>
void forEachNode(torch::jit::Block* block, const Visit& visit) {
  for (torch::jit::Node* node : block->nodes()) {
    visit(node);
    for (torch::jit::Block* sub : node->blocks()) {
      forEachNode(sub, visit);
    }
  }
}

// The storage a tensor constant's data lives in (freezing's constants may view one storage: tied weights, the slices
// of a packed projection), or nullptr where the value is no tensor constant.
const void* constantStorage(const torch::jit::Value* value);
// A storage of the graph's tensor constants: its bytes and the nodes reading a constant held in it (each once).
struct ConstantStorage {
  int64_t bytes = 0;
  bool fp32 = false;  // holds fp32 tensors
  std::vector<torch::jit::Node*> readers;
};
std::unordered_map<const void*, ConstantStorage> constantStorages(torch::jit::Graph& graph);

// Whether the value is defined inside a loop body (at any depth), where its sizes may change between iterations.
bool definedInLoopBody(const torch::jit::Value* value);

// Whether a static type is or contains a tensor type (a list, tuple, dict or optional of tensors).
bool containsTensor(const c10::TypePtr& type);
// Whether a static type may hold a tensor at run time (Tensor or Optional[Tensor]).
bool mayHoldTensor(const c10::TypePtr& type);
// Whether the static type holds tensors inside a list, tuple, dict or optional container.
bool isTensorContainer(const c10::TypePtr& type);
// Whether the value is a module object (a method's self, or a submodule read from it).
bool isModule(const torch::jit::Value* value);

using contract::NodeId;
// The node's id, or nothing for a node created after preparation (casts, fused kernels) or never numbered.
std::optional<NodeId> nodeIdOf(const torch::jit::Node* node);
// Numbers the nodes of the graph (blocks included, constants, params and returns excepted) in graph order.
void assignNodeIds(torch::jit::Graph& graph);
// `replacement` takes over `original`'s id, if it has one.
void copyNodeId(const torch::jit::Node* original, torch::jit::Node* replacement);
// Removes the node's id and returns it (nothing where it has none), so that passes comparing nodes
// (common-subexpression elimination) merge equal nodes whatever their ids.
std::optional<NodeId> takeNodeId(torch::jit::Node* node);
// Taken ids by node. Valid for nodes still in the graph as long as no pass creates nodes (a new node may take a
// destroyed one's address). An open-addressing map: one of a whole graph's size is filled and read per conversion,
// and a node-per-entry map spends most of that in the allocator.
using NodeIds = ska::flat_hash_map<const torch::jit::Node*, NodeId>;
// Gives the graph's nodes in `ids` their ids again.
void restoreNodeIds(torch::jit::Graph& graph, const NodeIds& ids);

// A hash of the graph's structure: per node but constants, in order and through blocks, its kind and the identities of
// the values it reads and writes. A pass that adds, removes or rewires a node changes it (in all but hash
// collisions); one that changes nothing, or only moves constants, leaves it as it was.
size_t structureHash(const torch::jit::Graph& graph);

// Each value of `original` -> the value at the same place in `copy`, a graph of the same structure (a Graph::copy or
// a cloned module's method): graph inputs, then per node its outputs and, per block, its inputs, in order.
std::unordered_map<const torch::jit::Value*, torch::jit::Value*> correspondingValues(
    const torch::jit::Graph& original, torch::jit::Graph& copy);

// Graph::lint, where it is cheap: it walks a std::set of all the graph's nodes once per block (std::includes), so it
// costs nodes x blocks, 0.1-0.4 us each: 8 s for 48k nodes in 457 blocks, 4.5 ms for 2k nodes in 18 blocks, where a
// whole conversion takes about 100 ms (benchmarks/results/CONVERSION_SCALING.md). It is a self-check (the tests lint
// every converted graph themselves), so it runs only on graphs of at most 8 blocks, where it costs 1-3 us per node, a
// few percent of a conversion (36-130 us per node there).
void lintWhereCheap(const torch::jit::Graph& graph);

} // namespace torch_mp::jit
