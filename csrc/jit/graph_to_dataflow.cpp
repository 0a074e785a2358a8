#include "jit/graph_to_dataflow.h"

#include <torch/csrc/jit/ir/alias_analysis.h>

#include <algorithm>

namespace torch_mp::jit {
namespace {

using core::OpCategory;
using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

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

// What a value means to the planner.
enum class ValueKind {
  kIrrelevant,      // no floating fp32 tensor in it (ints, bools, non-tensors)
  kFp32Tensor,      // an fp32 tensor: a cast candidate
  kOtherFloating,   // a floating tensor of another dtype: its node stays untouched
  kUnknown,         // may hold a tensor, but was never observed
  kContainer,       // a list/tuple/dict holding tensors
};

class DataflowBuilder {
 public:
  DataflowBuilder(
      const std::shared_ptr<Graph>& graph,
      const ObservedValues& observed,
      const core::OpPolicy& policy,
      c10::ScalarType lowDtype)
      : graph_(graph), observed_(observed), policy_(policy), aliasDb_(graph), lowDtype_(lowDtype) {}

  DataflowMapping run() {
    visitBlock(graph_->block());
    return std::move(mapping_);
  }

 private:
  ValueKind kindOf(const Value* value) const {
    const c10::TypePtr& type = value->type();
    if (mayHoldTensor(type)) {
      auto it = observed_.find(value);
      if (it == observed_.end()) {
        return ValueKind::kUnknown;
      }
      const ObservedValue& seen = it->second;
      if (!seen.isTensor || !c10::isFloatingType(seen.dtype)) {
        return ValueKind::kIrrelevant;
      }
      return seen.dtype == c10::ScalarType::Float ? ValueKind::kFp32Tensor : ValueKind::kOtherFloating;
    }
    return isTensorContainer(type) ? ValueKind::kContainer : ValueKind::kIrrelevant;
  }

  // The node's category and the rule behind it, or nothing when the node does not touch the plan.
  bool classify(Node* node, OpCategory& category, std::string& rule) {
    bool relevant = false;
    bool unknown = false;
    bool otherFloating = false;
    auto inspect = [&](const Value* value) {
      switch (kindOf(value)) {
        case ValueKind::kIrrelevant:
          return;
        case ValueKind::kUnknown:
          unknown = true;
          break;
        case ValueKind::kOtherFloating:
          otherFloating = true;
          break;
        case ValueKind::kFp32Tensor:
        case ValueKind::kContainer:
          break;
      }
      relevant = true;
    };
    for (const Value* input : node->inputs()) {
      inspect(input);
    }
    for (const Value* output : node->outputs()) {
      inspect(output);
    }
    if (!relevant) {
      return false;
    }
    category = OpCategory::kFp32;
    switch (node->kind()) {
      case c10::prim::Param:
        rule = "input: keeps its dtype";
        return true;
      case c10::prim::Return:
        rule = "output: keeps its dtype";
        return true;
      case c10::prim::If:
      case c10::prim::Loop:
        rule = "control flow: values cross block boundaries in their original dtype";
        return true;
      default:
        break;
    }
    if (unknown) {
      rule = "dtype unknown: not reached by the example inputs";
      ++mapping_.unobservedNodes;
      return true;
    }
    if (otherFloating) {
      rule = "has a floating tensor that is not fp32: left as it is";
      return true;
    }
    const std::string op = node->kind().toQualString();
    if (const core::PolicyEntry* entry = policy_.find(op)) {
      category = entry->category;
      rule = std::string(core::toString(category)) + ": " + entry->reason;
      return true;
    }
    rule = "fp32: in no list (unknown op)";
    if (std::find(mapping_.unknownOps.begin(), mapping_.unknownOps.end(), op) == mapping_.unknownOps.end()) {
      mapping_.unknownOps.push_back(op);
    }
    return true;
  }

  void addNode(Node* node) {
    OpCategory category;
    std::string rule;
    if (!classify(node, category, rule)) {
      return;
    }
    const int index = mapping_.dataflow.addNode(category);
    mapping_.nodes.push_back(node);
    mapping_.rules.push_back(std::move(rule));
    const bool isParam = node->kind() == c10::prim::Param;
    if (!isParam) {
      for (const Value* input : node->inputs()) {
        auto it = mapping_.values.find(input);
        if (it != mapping_.values.end()) {
          mapping_.dataflow.addUse(it->second, index);
        }
      }
    }
    for (const Value* output : node->outputs()) {
      const ValueKind kind = kindOf(output);
      if (kind != ValueKind::kFp32Tensor && kind != ValueKind::kContainer) {
        continue;
      }
      const bool castable = kind == ValueKind::kFp32Tensor &&
          output->type()->kind() == c10::TypeKind::TensorType && !aliasDb_.hasWriters(output);
      int64_t castBytes = 0;
      if (kind == ValueKind::kFp32Tensor) {
        const int64_t numel = std::max<int64_t>(observed_.at(output).numel, 1);
        castBytes = numel * static_cast<int64_t>(sizeof(float) + c10::elementSize(lowDtype_));
      }
      mapping_.values.emplace(output, mapping_.dataflow.addValue(index, castBytes, castable));
    }
  }

  void visitBlock(Block* block) {
    addNode(block->param_node());
    for (Node* node : block->nodes()) {
      if (node->kind() == c10::prim::Constant) {
        continue;
      }
      // Block inputs and outputs of an If/Loop are planned after the node consumes its inputs and before its
      // outputs are read, which is the order their values flow in.
      addNode(node);
      for (Block* sub : node->blocks()) {
        visitBlock(sub);
      }
    }
    addNode(block->return_node());
  }

  const std::shared_ptr<Graph>& graph_;
  const ObservedValues& observed_;
  const core::OpPolicy& policy_;
  torch::jit::AliasDb aliasDb_;
  c10::ScalarType lowDtype_;
  DataflowMapping mapping_;
};

} // namespace

bool isObservedFp32(const ObservedValues& observed, const Value* value) {
  auto it = observed.find(value);
  return it != observed.end() && it->second.isTensor && it->second.dtype == c10::ScalarType::Float;
}

bool isTensorContainer(const c10::TypePtr& type) {
  return type->kind() != c10::TypeKind::TensorType && !mayHoldTensor(type) && containsTensor(type);
}

DataflowMapping buildDataflow(
    const std::shared_ptr<Graph>& graph,
    const ObservedValues& observed,
    const core::OpPolicy& policy,
    c10::ScalarType lowDtype) {
  return DataflowBuilder(graph, observed, policy, lowDtype).run();
}

} // namespace torch_mp::jit
