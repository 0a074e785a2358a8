#include "jit/report/conversion_report.h"

#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace torch_mp::jit {
namespace {

void collectTensors(const c10::IValue& value, const std::function<void(const at::Tensor&)>& visit) {
  if (value.isTensor()) {
    visit(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorVector()) {
      visit(tensor);
    }
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      collectTensors(element, visit);
    }
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      collectTensors(element, visit);
    }
  }
}

} // namespace

const char* toString(GraphItem::Kind kind) {
  switch (kind) {
    case GraphItem::Kind::kInput:
      return "input";
    case GraphItem::Kind::kNode:
      return "node";
    case GraphItem::Kind::kCast:
      return "cast";
    case GraphItem::Kind::kOther:
      return "other";
    case GraphItem::Kind::kOutput:
      return "output";
  }
  return "?";
}

int ConversionReport::lowPrecisionNodes() const {
  int count = 0;
  for (const NodeDecision& node : nodes) {
    count += node.precision == core::Precision::kLow && !node.runsInt8();
  }
  return count;
}

void ConversionReport::setKeptFp32Weights(std::vector<KeptFp32Weight> kept) {
  std::unordered_map<NodeId, const NodeDecision*> decisionOf;
  for (const NodeDecision& node : nodes) {
    decisionOf.emplace(node.id, &node);
  }
  weightBytesKeptFp32 = 0;
  weightsKeptFp32.clear();
  for (KeptFp32Weight& weight : kept) {
    weightBytesKeptFp32 += weight.bytes;
    if (weight.bytes <= kKeptFp32ListedBytes) {
      continue;
    }
    auto decided = weight.decidedBy ? decisionOf.find(*weight.decidedBy) : decisionOf.end();
    if (decided != decisionOf.end()) {
      weight.rule = decided->second->rule;
      weight.ruleKind = decided->second->ruleKind;
    }
    weightsKeptFp32.push_back(std::move(weight));
  }
  std::stable_sort(weightsKeptFp32.begin(), weightsKeptFp32.end(),
                   [](const KeptFp32Weight& a, const KeptFp32Weight& b) { return a.bytes > b.bytes; });
}

double ConversionReport::lowPrecisionFlopFraction() const {
  int64_t total = 0;
  int64_t low = 0;
  for (const NodeDecision& node : nodes) {
    total += node.flops;
    low += node.precision == core::Precision::kLow || node.runsInt8() ? node.flops : 0;
  }
  return total ? static_cast<double>(low) / static_cast<double>(total) : 1.0;
}

void forEachConstantTensor(
    const torch::jit::Block* block, const std::function<void(const torch::jit::Node*, const at::Tensor&)>& visit) {
  for (const torch::jit::Node* node : block->nodes()) {
    for (const torch::jit::Block* sub : node->blocks()) {
      forEachConstantTensor(sub, visit);
    }
    if (node->kind() != c10::prim::Constant || node->outputs().size() != 1) {
      continue;
    }
    if (auto value = torch::jit::toIValue(node->output())) {
      collectTensors(*value, [&](const at::Tensor& tensor) { visit(node, tensor); });
    }
  }
}

int64_t constantBytes(const torch::jit::Graph& graph) {
  std::unordered_set<const void*> seen;
  int64_t total = 0;
  forEachConstantTensor(graph.block(), [&](const torch::jit::Node* /*constant*/, const at::Tensor& tensor) {
    if (tensor.has_storage() && seen.insert(tensor.storage().unsafeGetStorageImpl()).second) {
      total += static_cast<int64_t>(tensor.storage().nbytes());
    }
  });
  return total;
}

} // namespace torch_mp::jit
