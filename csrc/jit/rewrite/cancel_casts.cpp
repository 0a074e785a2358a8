#include "jit/rewrite/cancel_casts.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include <memory>

#include "jit/ir/casts.h"
#include "jit/ir/ir_utils.h"
#include "jit/ir/writers.h"

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
  explicit CastCanceller(const std::shared_ptr<torch::jit::Graph>& graph) : graph_(graph) {}

  bool run(Block* block) {
    bool changed = false;
    for (auto it = block->nodes().begin(); it != block->nodes().end();) {
      Node* node = *it++;
      for (Block* sub : node->blocks()) {
        changed |= run(sub);
      }
      if (Value* replacement = sameValue(node)) {
        CastLedger::cancel(node, replacement);
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
    if (recordedDtype(original) != *target || writers().hasWriters(source) || writers().hasWriters(original)) {
      return nullptr;
    }
    return original;
  }

  // Built on the first round trip: most graphs have none, and building it walks the whole graph. The graph changes
  // only where casts go, which aliases nothing, so one analysis serves the whole pass.
  const WriterQuery& writers() const {
    if (!writers_) {
      writers_ = std::make_unique<WriterQuery>(graph_);
    }
    return *writers_;
  }

  const std::shared_ptr<torch::jit::Graph>& graph_;
  mutable std::unique_ptr<WriterQuery> writers_;
};

} // namespace

bool CancelCasts(const std::shared_ptr<torch::jit::Graph>& graph) {
  GRAPH_DUMP("Before CancelCasts", graph);
  const bool changed = CastCanceller(graph).run(graph->block());
  GRAPH_DUMP("After CancelCasts", graph);
  return changed;
}

} // namespace torch_mp::jit
