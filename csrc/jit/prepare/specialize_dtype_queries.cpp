#include "jit/prepare/specialize_dtype_queries.h"

#include <torch/csrc/jit/jit_log.h>

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Node;

bool specializeBlock(Block* block, torch::jit::Graph& graph, const ObservedValues& observed) {
  bool changed = false;
  for (auto it = block->nodes().begin(); it != block->nodes().end(); ++it) {
    Node* node = *it;
    for (Block* sub : node->blocks()) {
      changed |= specializeBlock(sub, graph, observed);
    }
    if (node->kind() != c10::prim::dtype) {
      continue;
    }
    auto seen = observed.find(node->input());
    if (seen == observed.end() || !seen->second.isTensor) {
      continue;
    }
    torch::jit::WithInsertPoint guard(node);
    node->output()->replaceAllUsesWith(graph.insertConstant(static_cast<int64_t>(seen->second.dtype)));
    GRAPH_UPDATE("Answered prim::dtype of ", node->input()->debugName(), " with ", seen->second.dtype);
    it.destroyCurrent();  // left in place, the dead query would read its input in fp32 for the planner
    changed = true;
  }
  return changed;
}

} // namespace

bool SpecializeDtypeQueries(const std::shared_ptr<torch::jit::Graph>& graph, const ObservedValues& observed) {
  return specializeBlock(graph->block(), *graph, observed);
}

} // namespace torch_mp::jit
