#include "jit/rewrite/fold_constant_casts.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <vector>

#include "jit/ir/casts.h"
#include "jit/ir/writers.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Node;

// The model's casts of tensor constants to a floating dtype no wider than the constant's.
void collectConstantCasts(Block* block, std::vector<Node*>& casts) {
  for (Node* node : block->nodes()) {
    for (Block* sub : node->blocks()) {
      collectConstantCasts(sub, casts);
    }
    const std::optional<c10::ScalarType> target = plainCastTarget(node);
    if (!target || !c10::isFloatingType(*target) || CastLedger::created(node) ||
        node->input(0)->node()->kind() != c10::prim::Constant ||
        node->input(0)->type()->kind() != c10::TypeKind::TensorType) {
      continue;
    }
    const at::Tensor weight = torch::jit::toIValue(node->input(0))->toTensor();
    if (c10::elementSize(*target) <= weight.element_size()) {
      casts.push_back(node);
    }
  }
}

} // namespace

int FoldConstantCasts(const std::shared_ptr<torch::jit::Graph>& graph) {
  std::vector<Node*> casts;
  collectConstantCasts(graph->block(), casts);
  if (casts.empty()) {
    return 0;  // nothing to fold: no alias analysis of the whole graph
  }
  // A cast whose result something writes in place stays: folded, the write would change the constant for every
  // later call.
  {
    const WriterQuery writers(graph);
    auto written = [&](const Node* cast) { return writers.hasWriters(cast->output()); };
    casts.erase(std::remove_if(casts.begin(), casts.end(), written), casts.end());
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
