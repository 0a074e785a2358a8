// Which values a graph writes to, answered without building an AliasDb where no node of the graph can write.
//
// Building an AliasDb costs ~7 us per node (benchmarks/results/CONVERSION_SCALING.md), more than most of torch_mp's own
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

// A promise that no node of a graph may write, made where a walk finds none and kept for the promise's lifetime:
// meanwhile graphMayWrite(graph), and with it WriterQuery and eliminateDeadCode, answer without walking the graph
// (a walk costs about 0.2 us per node at 100k nodes, and a conversion's stages and the clean-up between them ask
// about ten times). Its maker adds no node that may write while it lives (torch_mp's passes create casts,
// constants and fused kernels, PyTorch's clean-up passes remove and merge nodes: none writes) and calls check() at
// the end, which walks once more and fails if a node that may write was added. A promise made while another lives
// on the thread (a conversion inside a conversion's callback) replaces it until it ends.
class WriteFreeGraph {
 public:
  explicit WriteFreeGraph(const std::shared_ptr<torch::jit::Graph>& graph);
  ~WriteFreeGraph();
  WriteFreeGraph(const WriteFreeGraph&) = delete;
  WriteFreeGraph& operator=(const WriteFreeGraph&) = delete;

  // Whether the promise was made (no node of the graph could write at construction).
  bool holds() const {
    return graph_ != nullptr;
  }
  // Throws an internal error where the promise was made and a node of the graph may write now.
  void check() const;

 private:
  std::shared_ptr<torch::jit::Graph> graph_;  // kept alive, so that no other graph takes its address meanwhile
  const torch::jit::Graph* outer_;            // the thread's promise before this one
};

// AliasDb::hasWriters for the graph as it is at construction.
class WriterQuery {
 public:
  explicit WriterQuery(const std::shared_ptr<torch::jit::Graph>& graph, bool isFrozen = false);
  bool hasWriters(const torch::jit::Value* value) const;

 private:
  std::unique_ptr<torch::jit::AliasDb> aliasDb_;  // none where no node may write
};

// torch::jit::EliminateDeadCode(graph), without its AliasDb where no node may write (dead_code.h): the AliasDb only
// lets it remove writes to values nothing reads, and lacking it, it keeps a node only for a mutable schema, which no
// node has here.
void eliminateDeadCode(const std::shared_ptr<torch::jit::Graph>& graph);

} // namespace torch_mp::jit
