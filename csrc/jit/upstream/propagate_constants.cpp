#include "jit/upstream/propagate_constants.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/node_hashing.h>
#include <torch/csrc/jit/passes/constant_propagation.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "jit/ir/ir_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Node;
using torch::jit::Value;

bool isConstant(const Value* value) {
  return value->node()->kind() == c10::prim::Constant;
}

bool allInputsConstant(const Node* node) {
  return std::all_of(node->inputs().begin(), node->inputs().end(), isConstant);
}

// ConstantPropagation's skip list: kinds it never folds, whatever their inputs.
bool neverFolded(c10::Symbol kind) {
  switch (kind) {
    case c10::prim::If:
    case c10::prim::Loop:
    case c10::prim::Closure:
    case c10::prim::Constant:
    case c10::prim::AutogradZero:
    case c10::prim::Uninitialized:
    case c10::prim::Guard:
    case c10::prim::profile:
    case c10::prim::profile_ivalue:
    case c10::prim::unchecked_unwrap_optional:
    case c10::aten::dequantize:
      return true;
    default:
      return false;
  }
}

// A node ConstantPropagation would try to run (whether nothing writes to it, its last condition, is not asked).
bool couldFold(const Node* node) {
  return !neverFolded(node->kind()) && node->blocks().empty() && !node->kind().is_onnx() && allInputsConstant(node) &&
      !node->hasSideEffects() && !node->isNondeterministic();
}

// removeExtraIfOutputs: an output both branches give as the same value, or as equal constants.
bool ifHasAlikeOutput(const Node* node) {
  const auto thenOutputs = node->blocks()[0]->outputs();
  const auto elseOutputs = node->blocks()[1]->outputs();
  for (size_t i = 0; i < thenOutputs.size(); ++i) {
    if (thenOutputs[i] == elseOutputs[i] ||
        (isConstant(thenOutputs[i]) && torch::jit::EqualNode()(thenOutputs[i]->node(), elseOutputs[i]->node()))) {
      return true;
    }
  }
  return false;
}

// A loop that never runs (a constant trip count <= 0 or a constant false start condition), or that carries a value
// its body passes on unchanged (removeExtraLoopOutputs).
bool loopCouldSimplify(const Node* node) {
  const std::optional<int64_t> trips = torch::jit::constant_as<int64_t>(node->input(0));
  const std::optional<bool> starts = torch::jit::constant_as<bool>(node->input(1));
  if (trips.value_or(1) <= 0 || !starts.value_or(true)) {
    return true;
  }
  const torch::jit::Block* body = node->blocks()[0];
  for (size_t i = 1; i < body->inputs().size(); ++i) {
    if (body->inputs()[i] == body->outputs()[i]) {
      return true;
    }
  }
  return false;
}

bool couldChange(const Node* node) {
  switch (node->kind()) {
    case c10::prim::If:
      return allInputsConstant(node) || ifHasAlikeOutput(node);
    case c10::prim::Loop:
      return loopCouldSimplify(node);
    default:
      return couldFold(node);
  }
}

} // namespace

bool propagateConstants(std::shared_ptr<torch::jit::Graph>& graph) {
  if (!anyNode(graph->block(), couldChange)) {
    return false;
  }
  return torch::jit::ConstantPropagation(graph, /*ignore_custom_classes=*/true);
}

} // namespace torch_mp::jit
