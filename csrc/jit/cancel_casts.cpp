#include "jit/cancel_casts.h"

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include "jit/apply_precision_plan.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

bool fp32HoldsExactly(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16 || dtype == c10::ScalarType::Float;
}

class CastCanceller {
 public:
  explicit CastCanceller(const std::shared_ptr<torch::jit::Graph>& graph) : aliasDb_(graph) {}

  bool run(Block* block) {
    bool changed = false;
    for (auto it = block->nodes().begin(); it != block->nodes().end();) {
      Node* node = *it++;
      for (Block* sub : node->blocks()) {
        changed |= run(sub);
      }
      if (Value* replacement = sameValue(node)) {
        GRAPH_UPDATE("Cancelled cast ", node->output()->debugName());
        node->output()->replaceAllUsesWith(replacement);
        if (!node->output()->hasUses()) {
          node->destroy();
        }
        changed = true;
      }
    }
    return changed;
  }

 private:
  // The value this cast's output always equals, or nullptr. A round trip through a copy that is written in place
  // (or from a tensor written after the copy) is not the original.
  Value* sameValue(Node* cast) const {
    auto target = plainCastTarget(cast);
    if (!target) {
      return nullptr;
    }
    Value* source = cast->input(0);
    if (recordedDtype(source) == *target) {
      return source;
    }
    Node* previous = source->node();
    if (plainCastTarget(previous) != c10::ScalarType::Float || !fp32HoldsExactly(*target)) {
      return nullptr;
    }
    Value* original = previous->input(0);
    if (recordedDtype(original) != *target || aliasDb_.hasWriters(source) || aliasDb_.hasWriters(original)) {
      return nullptr;
    }
    return original;
  }

  torch::jit::AliasDb aliasDb_;
};

} // namespace

std::optional<c10::ScalarType> plainCastTarget(const Node* node) {
  if (node->kind() != c10::aten::to || node->inputs().size() != 5 ||
      node->input(1)->type()->kind() != c10::TypeKind::IntType) {  // not aten::to.other(Tensor, Tensor, ...)
    return std::nullopt;
  }
  auto dtype = torch::jit::constant_as<int64_t>(node->input(1));
  auto nonBlocking = torch::jit::constant_as<bool>(node->input(2));
  auto copy = torch::jit::constant_as<bool>(node->input(3));
  auto memoryFormat = torch::jit::toIValue(node->input(4));
  if (!dtype || !nonBlocking || *nonBlocking || !copy || *copy || !memoryFormat || !memoryFormat->isNone()) {
    return std::nullopt;
  }
  return static_cast<c10::ScalarType>(*dtype);
}

bool CancelCasts(const std::shared_ptr<torch::jit::Graph>& graph) {
  GRAPH_DUMP("Before CancelCasts", graph);
  const bool changed = CastCanceller(graph).run(graph->block());
  GRAPH_DUMP("After CancelCasts", graph);
  return changed;
}

} // namespace torch_mp::jit
