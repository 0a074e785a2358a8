#include "jit/fold_constant_casts.h"

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include <vector>

#include "jit/cancel_casts.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Node;

// A cast whose result something writes in place stays: folded, the write would change the constant for every
// later call.
void collectConstantCasts(
    Block* block,
    const torch::jit::AliasDb& aliasDb,
    const std::unordered_set<const Node*>& inserted,
    std::vector<Node*>& casts) {
  for (Node* node : block->nodes()) {
    for (Block* sub : node->blocks()) {
      collectConstantCasts(sub, aliasDb, inserted, casts);
    }
    const std::optional<c10::ScalarType> target = plainCastTarget(node);
    if (!target || !c10::isFloatingType(*target) || inserted.count(node) ||
        node->input(0)->node()->kind() != c10::prim::Constant ||
        node->input(0)->type()->kind() != c10::TypeKind::TensorType || aliasDb.hasWriters(node->output())) {
      continue;
    }
    const at::Tensor weight = torch::jit::toIValue(node->input(0))->toTensor();
    if (c10::elementSize(*target) <= weight.element_size()) {
      casts.push_back(node);
    }
  }
}

} // namespace

int FoldConstantCasts(
    const std::shared_ptr<torch::jit::Graph>& graph, const std::unordered_set<const Node*>& inserted) {
  std::vector<Node*> casts;
  {
    const torch::jit::AliasDb aliasDb(graph);
    collectConstantCasts(graph->block(), aliasDb, inserted, casts);
  }
  for (Node* cast : casts) {
    torch::jit::Value* source = cast->input(0);
    const at::Tensor folded = torch::jit::toIValue(source)->toTensor().to(*plainCastTarget(cast));
    torch::jit::WithInsertPoint guard(cast);
    torch::jit::Value* constant = graph->insertConstant(folded);
    if (source->hasDebugName()) {
      constant->setDebugName(source->debugName() + "_" + c10::toString(folded.scalar_type()));
    }
    constant->setType(c10::TensorType::create(folded));
    cast->output()->replaceAllUsesWith(constant);
    GRAPH_UPDATE("Folded the cast of constant ", source->debugName(), " to ", c10::toString(folded.scalar_type()));
    cast->destroy();
  }
  return static_cast<int>(casts.size());
}

} // namespace torch_mp::jit
