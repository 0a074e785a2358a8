#include "jit/prepare/typed_observation.h"

#include <torch/csrc/jit/ir/constants.h>

#include <vector>

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

std::optional<ObservedValue> observedFromType(const Value* value) {
  ObservedValue seen;
  seen.rangeObserved = false;
  if (value->node()->kind() == c10::prim::Constant) {
    const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
    if (!constant || !constant->isTensor() || !constant->toTensor().defined()) {
      return std::nullopt;
    }
    const at::Tensor& tensor = constant->toTensor();
    seen.isTensor = true;
    seen.dtype = tensor.scalar_type();
    seen.device = tensor.device();
    seen.numel = tensor.numel();
    seen.sizes = tensor.sizes().vec();
    return seen;
  }
  auto type = value->type()->cast<c10::TensorType>();
  if (!type || !type->scalarType() || !type->device()) {
    return std::nullopt;
  }
  std::optional<std::vector<int64_t>> sizes = type->sizes().concrete_sizes();
  if (!sizes) {
    return std::nullopt;
  }
  seen.isTensor = true;
  seen.dtype = *type->scalarType();
  seen.device = *type->device();
  seen.sizes = *sizes;
  seen.numel = 1;
  for (int64_t size : *sizes) {
    seen.numel *= size;
  }
  return seen;
}

// Observes the tensors of `block` and, when one of them was observed (the block ran), its containers; returns
// whether the block ran. Nested blocks are visited first and do not count for the block around them.
bool observeBlock(Block* block, ObservedValues& observed) {
  bool ran = false;
  std::vector<const Value*> containers;
  auto visit = [&](const Value* value) {
    if (!containsTensor(value->type())) {
      return;
    }
    if (std::optional<ObservedValue> seen = observedFromType(value)) {
      observed.emplace(value, *seen);
      ran = ran || value->node()->kind() != c10::prim::Constant;
    } else if (value->type()->kind() != c10::TypeKind::TensorType) {
      containers.push_back(value);
    }
  };
  for (const Value* input : block->inputs()) {
    visit(input);
  }
  for (Node* node : block->nodes()) {
    for (Block* sub : node->blocks()) {
      observeBlock(sub, observed);
    }
    const ObservedValue* sibling = nullptr;
    for (const Value* output : node->outputs()) {
      visit(output);
      auto seen = observed.find(output);
      sibling = sibling ? sibling : (seen != observed.end() && seen->second.isTensor ? &seen->second : nullptr);
    }
    // An output nothing reads has no profile (the executor profiles values where they are read): the unused hidden
    // state of nn.GRU / LSTM. It takes the dtype and device of an output of the same node that was profiled, with no
    // elements, as no cast will ever read it.
    for (const Value* output : node->outputs()) {
      if (sibling && output->uses().empty() && output->type()->kind() == c10::TypeKind::TensorType &&
          !observed.count(output)) {
        ObservedValue unread = *sibling;
        unread.numel = 0;
        unread.sizes.clear();
        observed.emplace(output, unread);
      }
    }
  }
  ran = ran || !block->owningNode();  // the graph's own block always runs
  if (ran) {
    for (const Value* container : containers) {
      ObservedValue seen;
      seen.rangeObserved = false;
      observed.emplace(container, seen);
    }
  }
  return ran;
}

} // namespace

ObservedValues observeTypes(const std::shared_ptr<torch::jit::Graph>& graph) {
  ObservedValues observed;
  observeBlock(graph->block(), observed);
  return observed;
}

} // namespace torch_mp::jit
