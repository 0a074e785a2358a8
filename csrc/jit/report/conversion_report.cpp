#include "jit/report/conversion_report.h"

#include <torch/csrc/jit/ir/constants.h>

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
