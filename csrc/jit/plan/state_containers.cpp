#include "jit/plan/state_containers.h"

#include <torch/csrc/jit/jit_log.h>

#include <algorithm>

#include "jit/ir/ir_utils.h"
#include "jit/ir/observed_values.h"
#include "jit/prepare/fold_attribute_reads.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// Whether the container is one whose tensors can be cast one by one, and every tensor it holds is fp32.
bool holdsOnlyFp32Tensors(const c10::IValue& container) {
  c10::TypePtr elementType;
  std::vector<c10::IValue> elements;
  if (container.isGenericDict()) {
    elementType = container.toGenericDict().valueType();
    for (const auto& entry : container.toGenericDict()) {
      elements.push_back(entry.value());
    }
  } else if (container.isList()) {
    elementType = container.toList().elementType();
    elements = container.toList().vec();
  } else {
    return false;
  }
  return elementType->kind() == c10::TypeKind::TensorType &&
      std::all_of(elements.begin(), elements.end(), [](const c10::IValue& element) {
        return element.isTensor() && element.toTensor().defined() &&
            element.toTensor().scalar_type() == c10::ScalarType::Float;
      });
}

class StateFinder {
 public:
  StateFinder(const torch::jit::Graph& graph, const c10::IValue& module)
      : selfInput_(graph.inputs().empty() ? nullptr : graph.inputs()[0]), module_(module) {}

  std::optional<StateContainers> find(const Block* block) {
    if (!selfInput_ || !isModule(selfInput_) || !module_.isObject() || !onlyReadByGetAttr(selfInput_) ||
        !visit(block)) {
      return std::nullopt;
    }
    return std::move(state_);
  }

 private:
  static bool onlyReadByGetAttr(const Value* module) {
    for (const torch::jit::Use& use : module->uses()) {
      if (use.user->kind() != c10::prim::GetAttr) {
        return false;
      }
    }
    return true;
  }

  // Whether every module and attribute read in the block is one the state may hold.
  bool visit(const Block* block) {
    for (const Node* node : block->nodes()) {
      for (const Block* sub : node->blocks()) {
        if (!visit(sub)) {
          return false;
        }
      }
      if (node->kind() == c10::prim::SetAttr) {
        return false;
      }
      for (const Value* output : node->outputs()) {
        if (isModule(output) && (node->kind() != c10::prim::GetAttr || !onlyReadByGetAttr(output))) {
          return false;  // a module passed around (a branch's result, a method call): its state is not seen whole
        }
      }
      if (node->kind() == c10::prim::GetAttr && !isModule(node->output()) && !addRead(node)) {
        return false;
      }
    }
    return true;
  }

  bool addRead(const Node* read) {
    std::optional<c10::IValue> container = attributeValue(read->output(), selfInput_, module_);
    if (!container || read->output()->type()->cast<c10::InterfaceType>()) {
      return false;  // an interface's methods, called elsewhere, may read the containers unseen
    }
    if (!containsTensor(read->output()->type())) {
      return true;  // a number or a string: nothing to plan
    }
    if (!holdsOnlyFp32Tensors(*container)) {
      return false;
    }
    size_t index = 0;
    while (index < state_.containers.size() && !state_.containers[index].is(*container)) {
      ++index;
    }
    if (index == state_.containers.size()) {
      state_.containers.push_back(*container);
    }
    state_.reads.push_back(read);
    state_.containerOf.push_back(index);
    return true;
  }

  const Value* selfInput_;
  const c10::IValue& module_;
  StateContainers state_;
};

} // namespace

std::optional<StateContainers> findStateContainers(const torch::jit::Graph& graph, const c10::IValue& module) {
  return StateFinder(graph, module).find(graph.block());
}

void castStateContainers(
    const StateContainers& state,
    const DataflowMapping& mapping,
    const core::PrecisionPlan& plan,
    c10::ScalarType lowDtype) {
  for (size_t c = 0; c < state.containers.size(); ++c) {
    const int planned = mapping.stateContainerNodes[c];
    if (planned < 0 || plan.precision[planned] != core::Precision::kLow) {
      continue;
    }
    const c10::IValue& container = state.containers[c];
    if (container.isGenericDict()) {
      for (const auto& entry : container.toGenericDict()) {
        entry.setValue(entry.value().toTensor().to(lowDtype));
      }
    } else {
      c10::List<c10::IValue> list = container.toList();
      for (size_t i = 0; i < list.size(); ++i) {
        list.set(i, list.get(i).toTensor().to(lowDtype));
      }
    }
    GRAPH_UPDATE("Cast the tensors of module state container ", c, " to ", c10::toString(lowDtype));
  }
}

} // namespace torch_mp::jit
