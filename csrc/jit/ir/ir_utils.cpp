#include "jit/ir/ir_utils.h"

#include <c10/util/Exception.h>
#include <c10/util/hash.h>
#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kNodeIdAttribute = c10::Symbol::attr("torch_mp_node");

int depthOf(Block* block) {
  int depth = 0;
  for (Block* b = parentBlock(block); b; b = parentBlock(b)) {
    ++depth;
  }
  return depth;
}

bool isNumbered(const Node* node) {
  return node->kind() != c10::prim::Constant && node->kind() != c10::prim::Param &&
      node->kind() != c10::prim::Return;
}

void hashBlock(const Block* block, size_t& hash) {
  for (const Value* input : block->inputs()) {
    hash = c10::hash_combine(hash, input->unique());
  }
  for (const Node* node : block->nodes()) {
    if (node->kind() == c10::prim::Constant) {
      continue;  // where constants stand says nothing (ConstantPooling reorders them); readers name them by identity
    }
    hash = c10::hash_combine(hash, static_cast<size_t>(node->kind()));
    for (const Value* input : node->inputs()) {
      hash = c10::hash_combine(hash, input->unique());
    }
    for (const Value* output : node->outputs()) {
      hash = c10::hash_combine(hash, output->unique());
    }
    for (const Block* sub : node->blocks()) {
      hashBlock(sub, hash);
    }
  }
  for (const Value* output : block->outputs()) {
    hash = c10::hash_combine(hash, output->unique());
  }
}

void pairValues(
    at::ArrayRef<Value*> original,
    at::ArrayRef<Value*> copy,
    std::unordered_map<const Value*, Value*>& map) {
  TORCH_INTERNAL_ASSERT(original.size() == copy.size(), "torch_mp: a graph copy differs from its original");
  for (size_t i = 0; i < original.size(); ++i) {
    map.emplace(original[i], copy[i]);
  }
}

void pairBlocks(const Block* original, Block* copy, std::unordered_map<const Value*, Value*>& map) {
  pairValues(const_cast<Block*>(original)->inputs(), copy->inputs(), map);
  auto copied = copy->nodes().begin();
  for (const Node* node : original->nodes()) {
    TORCH_INTERNAL_ASSERT(
        copied != copy->nodes().end() && (*copied)->kind() == node->kind(),
        "torch_mp: a graph copy differs from its original");
    pairValues(const_cast<Node*>(node)->outputs(), (*copied)->outputs(), map);
    TORCH_INTERNAL_ASSERT(node->blocks().size() == (*copied)->blocks().size());
    for (size_t b = 0; b < node->blocks().size(); ++b) {
      pairBlocks(node->blocks()[b], (*copied)->blocks()[b], map);
    }
    ++copied;
  }
}

} // namespace

std::optional<c10::ScalarType> recordedDtype(const Value* value) {
  if (const auto* tensorType = value->type()->castRaw<c10::TensorType>()) {  // no reference count to touch
    return tensorType->scalarType();
  }
  return std::nullopt;
}

void setRecordedDtype(Value* value, c10::ScalarType dtype) {
  if (auto tensorType = value->type()->cast<c10::TensorType>()) {
    value->setType(tensorType->withScalarType(dtype));
  }
}

Block* parentBlock(Block* block) {
  Node* owner = block->owningNode();
  return owner ? owner->owningBlock() : nullptr;
}

Block* commonBlock(Block* a, Block* b) {
  int depthA = depthOf(a);
  int depthB = depthOf(b);
  for (; depthA > depthB; --depthA) {
    a = parentBlock(a);
  }
  for (; depthB > depthA; --depthB) {
    b = parentBlock(b);
  }
  while (a != b) {
    a = parentBlock(a);
    b = parentBlock(b);
  }
  return a;
}

const void* constantStorage(const Value* value) {
  if (value->node()->kind() != c10::prim::Constant || value->type()->kind() != c10::TypeKind::TensorType) {
    return nullptr;
  }
  const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
  if (!constant || !constant->isTensor() || !constant->toTensor().defined()) {
    return nullptr;
  }
  return constant->toTensor().storage().unsafeGetStorageImpl();
}

std::unordered_map<const void*, ConstantStorage> constantStorages(torch::jit::Graph& graph) {
  std::unordered_map<const void*, ConstantStorage> storages;
  forEachNode(graph.block(), [&](Node* node) {
    const void* storage = node->kind() == c10::prim::Constant ? constantStorage(node->output()) : nullptr;
    if (!storage) {
      return;
    }
    const at::Tensor tensor = torch::jit::toIValue(node->output())->toTensor();
    ConstantStorage& held = storages[storage];
    held.bytes = static_cast<int64_t>(tensor.storage().nbytes());
    held.fp32 = tensor.scalar_type() == c10::ScalarType::Float;
    for (const torch::jit::Use& use : node->output()->uses()) {
      if (std::find(held.readers.begin(), held.readers.end(), use.user) == held.readers.end()) {
        held.readers.push_back(use.user);
      }
    }
  });
  return storages;
}

bool definedInLoopBody(const Value* value) {
  for (const Block* block = value->node()->owningBlock(); block->owningNode();
       block = block->owningNode()->owningBlock()) {
    if (block->owningNode()->kind() == c10::prim::Loop) {
      return true;
    }
  }
  return false;
}

bool containsTensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) {
    return true;
  }
  for (const c10::TypePtr& contained : type->containedTypes()) {
    if (containsTensor(contained)) {
      return true;
    }
  }
  return false;
}

bool mayHoldTensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) {
    return true;
  }
  if (auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::TensorType;
  }
  return false;
}

bool isTensorContainer(const c10::TypePtr& type) {
  return type->kind() != c10::TypeKind::TensorType && !mayHoldTensor(type) && containsTensor(type);
}

bool isModule(const Value* value) {
  const auto* type = value->type()->castRaw<c10::ClassType>();
  return type && type->is_module();
}

std::optional<NodeId> nodeIdOf(const Node* node) {
  if (!node->hasAttribute(kNodeIdAttribute)) {
    return std::nullopt;
  }
  return node->i(kNodeIdAttribute);
}

void assignNodeIds(torch::jit::Graph& graph) {
  NodeId next = 0;
  forEachNode(graph.block(), [&](Node* node) {
    if (isNumbered(node)) {
      node->i_(kNodeIdAttribute, next++);
    }
  });
}

void copyNodeId(const Node* original, Node* replacement) {
  if (std::optional<NodeId> id = nodeIdOf(original)) {
    replacement->i_(kNodeIdAttribute, *id);
  }
}

std::optional<NodeId> takeNodeId(Node* node) {
  std::optional<NodeId> id = nodeIdOf(node);
  if (id) {
    node->removeAttribute(kNodeIdAttribute);
  }
  return id;
}

void restoreNodeIds(torch::jit::Graph& graph, const NodeIds& ids) {
  forEachNode(graph.block(), [&](Node* node) {
    if (auto it = ids.find(node); it != ids.end()) {
      node->i_(kNodeIdAttribute, it->second);
    }
  });
}

size_t structureHash(const torch::jit::Graph& graph) {
  size_t hash = 0;
  hashBlock(graph.block(), hash);
  return hash;
}

std::unordered_map<const Value*, Value*> correspondingValues(
    const torch::jit::Graph& original, torch::jit::Graph& copy) {
  std::unordered_map<const Value*, Value*> map;
  pairBlocks(original.block(), copy.block(), map);
  return map;
}

void lintWhereCheap(const torch::jit::Graph& graph) {
  constexpr int64_t kLintBlocks = 8;  // the count stops once past them
  int64_t blocks = 1;
  std::vector<const torch::jit::Block*> pending{graph.block()};
  while (!pending.empty()) {
    const torch::jit::Block* block = pending.back();
    pending.pop_back();
    for (const torch::jit::Node* node : block->nodes()) {
      for (const torch::jit::Block* sub : node->blocks()) {
        pending.push_back(sub);
        if (++blocks > kLintBlocks) {
          return;
        }
      }
    }
  }
  graph.lint();
}


} // namespace torch_mp::jit
