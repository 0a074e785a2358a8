// Which values a graph writes to, answered without building an AliasDb where no node of the graph can write.
//
// Building an AliasDb costs about 7 us per node (benchmarks/CONVERSION_SCALING.md), more than most of torch_mp's own
// passes. After freezing and mutation removal most graphs hold no node that writes, and then AliasDb::hasWriters is
// false for every value and dead-code elimination needs no alias information. `mayWrite` says, conservatively, whether
// AliasDb would register a write for a node; where any node may write, the AliasDb is built as before, so every answer
// is AliasDb's own.
#pragma once

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace torch_mp::jit {

// Whether AliasDb may register a write for the node (its own, not its blocks' nodes): a schema with a write
// annotation, an op analysed conservatively, an attribute write, a call, a fork, a subgraph, a batch or instance norm
// that is not known to run in inference mode, anything unknown.
bool mayWrite(const torch::jit::Node* node);
// Whether any node of the graph, through its blocks, may write.
bool graphMayWrite(const torch::jit::Graph& graph);

// AliasDb::hasWriters for the graph as it is at construction.
class WriterQuery {
 public:
  explicit WriterQuery(const std::shared_ptr<torch::jit::Graph>& graph, bool isFrozen = false);
  bool hasWriters(const torch::jit::Value* value) const;

 private:
  std::unique_ptr<torch::jit::AliasDb> aliasDb_;  // none where no node may write
};

// torch::jit::EliminateDeadCode(graph), without its AliasDb where no node may write: the AliasDb only lets it remove
// writes to values nothing reads, and lacking it, it keeps a node only for a mutable schema, which no node has here.
void eliminateDeadCode(const std::shared_ptr<torch::jit::Graph>& graph);

} // namespace torch_mp::jit
