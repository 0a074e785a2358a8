#include "jit/ir/writers.h"

#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include "jit/ir/overload_facts.h"
#include "jit/upstream/dead_code.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Node;

// Unschematized nodes AliasDb analyses without a write: they create, pack, unpack or read values.
bool isNonWritingSpecialCase(c10::Symbol kind) {
  switch (kind) {
    case c10::prim::Constant:
    case c10::prim::ListConstruct:
    case c10::prim::TupleConstruct:
    case c10::prim::DictConstruct:
    case c10::prim::ListUnpack:
    case c10::prim::TupleUnpack:
    case c10::prim::TupleIndex:
    case c10::prim::GetAttr:
    case c10::prim::unchecked_cast:
    case c10::prim::Uninitialized:
    case c10::prim::If:    // its blocks' nodes are checked themselves
    case c10::prim::Loop:
      return true;
    default:
      return false;
  }
}

bool isConstantNone(const torch::jit::Value* value) {
  const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
  return constant && constant->isNone();
}

// batch_norm and instance_norm update their running statistics unless their mode input is a constant false or they
// have none (InstanceNorm2d without track_running_stats normalises with its input's statistics and keeps nothing).
bool mayUpdateRunningStats(const Node* node) {
  if (node->kind() != c10::aten::batch_norm && node->kind() != c10::aten::instance_norm) {
    return false;
  }
  constexpr size_t kModeInput = 5;  // batch_norm's `training`, instance_norm's `use_input_stats`
  constexpr size_t kRunningMean = 3;
  constexpr size_t kRunningVar = 4;
  if (node->inputs().size() <= kModeInput) {
    return true;
  }
  if (isConstantNone(node->input(kRunningMean)) && isConstantNone(node->input(kRunningVar))) {
    return false;
  }
  const std::optional<c10::IValue> mode = torch::jit::toIValue(node->input(kModeInput));
  return !mode || !mode->isBool() || mode->toBool();
}

// mayWrite over a whole graph, matching a node's overload only where some overload it could match writes.
class GraphWriteScan {
 public:
  bool blockMayWrite(const torch::jit::Block* block) {
    for (const Node* node : block->nodes()) {
      if (nodeMayWrite(node)) {
        return true;
      }
      for (const torch::jit::Block* sub : node->blocks()) {
        if (blockMayWrite(sub)) {
          return true;
        }
      }
    }
    return false;
  }

 private:
  // mayWrite, asked only where the node's overload could matter: a norm that may update its statistics, or a node
  // some of whose candidate overloads write.
  bool nodeMayWrite(const Node* node) {
    const bool overloadMatters = mayUpdateRunningStats(node) || !overloads_.noneWrites(node);
    return overloadMatters && mayWrite(node);
  }

  OverloadFacts overloads_;
};

// The graph a WriteFreeGraph of this thread promises holds no writing node, if any.
thread_local const torch::jit::Graph* writeFreeGraph = nullptr;

} // namespace

bool mayWrite(const Node* node) {
  if (isNonWritingSpecialCase(node->kind())) {
    return false;
  }
  if (mayUpdateRunningStats(node)) {
    return true;
  }
  const torch::jit::Operator* op = node->maybeOperator();
  return !op || operatorMayWrite(*op);
}

bool graphMayWrite(const torch::jit::Graph& graph) {
  return &graph != writeFreeGraph && GraphWriteScan().blockMayWrite(graph.block());
}

WriteFreeGraph::WriteFreeGraph(const std::shared_ptr<torch::jit::Graph>& graph) : outer_(writeFreeGraph) {
  if (!GraphWriteScan().blockMayWrite(graph->block())) {
    graph_ = graph;
    writeFreeGraph = graph_.get();
  }
}

WriteFreeGraph::~WriteFreeGraph() {
  writeFreeGraph = outer_;
}

void WriteFreeGraph::check() const {
  TORCH_INTERNAL_ASSERT(
      !graph_ || !GraphWriteScan().blockMayWrite(graph_->block()),
      "torch_mp: a conversion stage added a node that may write to a graph promised to hold none");
}

WriterQuery::WriterQuery(const std::shared_ptr<torch::jit::Graph>& graph, bool isFrozen) {
  if (graphMayWrite(*graph)) {
    aliasDb_ = std::make_unique<torch::jit::AliasDb>(graph, isFrozen);
  }
}

bool WriterQuery::hasWriters(const torch::jit::Value* value) const {
  return aliasDb_ && aliasDb_->hasWriters(value);
}

void eliminateDeadCode(const std::shared_ptr<torch::jit::Graph>& graph) {
  if (graphMayWrite(*graph)) {
    torch::jit::EliminateDeadCode(graph);
  } else {
    eliminateDeadCodeWithoutAliases(graph->block());
  }
}

} // namespace torch_mp::jit
