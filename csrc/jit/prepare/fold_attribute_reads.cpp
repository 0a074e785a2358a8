#include "jit/prepare/fold_attribute_reads.h"

#include <torch/csrc/jit/jit_log.h>

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "jit/ir/writers.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

bool assignsAttributes(const Block* block) {
  for (const Node* node : block->nodes()) {
    if (node->kind() == c10::prim::SetAttr) {
      return true;
    }
    for (const Block* sub : node->blocks()) {
      if (assignsAttributes(sub)) {
        return true;
      }
    }
  }
  return false;
}

void foldBlock(Block* block, torch::jit::Graph& graph, const c10::IValue& self, const WriterQuery& writers,
               int& folded) {
  for (Node* node : block->nodes()) {
    for (Block* sub : node->blocks()) {
      foldBlock(sub, graph, self, writers, folded);
    }
    // a tensor the graph writes in place (a running total in a buffer) is state, not a weight
    if (node->kind() != c10::prim::GetAttr || node->output()->type()->kind() != c10::TypeKind::TensorType ||
        writers.hasWriters(node->output())) {
      continue;
    }
    std::optional<c10::IValue> value = attributeValue(node->output(), graph.inputs()[0], self);
    if (!value || !value->isTensor() || !value->toTensor().defined()) {
      continue;
    }
    torch::jit::WithInsertPoint guard(graph.block()->nodes().front());
    // detached like freezing's own constants; the data is shared, so a write through either would reach both
    Value* constant = graph.insertConstant(value->toTensor().detach());
    constant->setDebugName(node->output()->debugName());
    node->output()->replaceAllUsesWith(constant);
    GRAPH_UPDATE("Folded attribute read ", node->output()->debugName(), " into a constant");
    ++folded;
  }
}

void collectSelfReads(const Block* block, const Value* selfInput, std::unordered_set<std::string>& names) {
  for (const Node* node : block->nodes()) {
    if (node->kind() == c10::prim::GetAttr && node->input() == selfInput) {
      names.insert(node->s(c10::attr::name));
    }
    for (const Block* sub : node->blocks()) {
      collectSelfReads(sub, selfInput, names);
    }
  }
}

// Gives the object, and the objects it holds, their own copy of every slot `select` picks; slots that shared a
// value share its copy.
template <typename Select>
void copySlots(
    const c10::intrusive_ptr<c10::ivalue::Object>& object,
    const Select& select,
    c10::IValue::HashIdentityIValueMap& copies) {
  for (size_t i = 0; i < object->slots().size(); ++i) {
    const c10::IValue value = object->getSlot(i);
    if (value.isObject()) {
      copySlots(value.toObject(), select, copies);
    } else if (select(value)) {
      object->setSlot(i, value.deepcopy(copies));
    }
  }
}

template <typename Select>
void copySlots(torch::jit::Module& module, const Select& select) {
  c10::IValue::HashIdentityIValueMap copies;
  copySlots(module._ivalue(), select, copies);
}

} // namespace

std::optional<c10::IValue> attributeValue(const Value* value, const Value* selfInput, const c10::IValue& self) {
  if (value == selfInput) {
    return self;
  }
  const Node* node = value->node();
  if (node->kind() != c10::prim::GetAttr) {
    return std::nullopt;
  }
  std::optional<c10::IValue> owner = attributeValue(node->input(), selfInput, self);
  if (!owner || !owner->isObject()) {
    return std::nullopt;
  }
  return owner->toObjectRef().getAttr(node->s(c10::attr::name));
}

int FoldAttributeReads(const std::shared_ptr<torch::jit::Graph>& graph, const c10::IValue& self) {
  if (graph->inputs().empty() || !self.isObject() || assignsAttributes(graph->block())) {
    return 0;
  }
  int folded = 0;
  const WriterQuery writers(graph);
  foldBlock(graph->block(), *graph, self, writers, folded);
  return folded;
}

void ownAttributeTensors(torch::jit::Module& module) {
  copySlots(module, [](const c10::IValue& value) { return value.isTensor() && value.toTensor().defined(); });
}

void ownAttributeContainers(torch::jit::Module& module) {
  copySlots(module, [](const c10::IValue& value) { return value.isGenericDict() || value.isList(); });
}

void dropUnreadAttributes(torch::jit::Module& module) {
  const std::shared_ptr<torch::jit::Graph> graph = module.get_method("forward").graph();
  std::unordered_set<std::string> read;
  collectSelfReads(graph->block(), graph->inputs()[0], read);
  const c10::ClassTypePtr type = module.type();
  std::vector<std::string> unread;
  for (size_t i = 0; i < type->numAttributes(); ++i) {
    const c10::IValue value = module._ivalue()->getSlot(i);
    if (!read.count(type->getAttributeName(i)) && (value.isObject() || value.isTensor())) {
      unread.push_back(type->getAttributeName(i));
    }
  }
  for (const std::string& name : unread) {
    module._ivalue()->unsafeRemoveAttr(name);
    type->unsafeRemoveAttribute(name);
  }
}

} // namespace torch_mp::jit
