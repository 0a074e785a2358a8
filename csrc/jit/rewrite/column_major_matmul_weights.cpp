#include "jit/rewrite/column_major_matmul_weights.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "core/op_facts.h"
#include "jit/ir/ir_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Node;
using torch::jit::Use;
using torch::jit::Value;

bool readAsRightHandMatrix(const Use& use) {
  return core::factsOf(use.user->kind().toQualString()).rightHandMatrix == static_cast<int>(use.offset);
}

// A low-precision CPU matrix, row-major and the only view of its storage (no other constant views it: a weight that
// freezing also folded into a view, `w.unsqueeze(0)` for a bmm, would otherwise be stored twice), that only matmuls
// read as their right-hand matrix.
bool worthColumnMajor(const Value* constant, const std::unordered_map<const void*, int>& constantsPerStorage) {
  if (constant->type()->kind() != c10::TypeKind::TensorType || constant->uses().empty() ||
      !std::all_of(constant->uses().begin(), constant->uses().end(), readAsRightHandMatrix)) {
    return false;
  }
  const at::Tensor tensor = torch::jit::toIValue(constant)->toTensor();
  const c10::ScalarType dtype = tensor.scalar_type();
  return (dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16) && tensor.device().is_cpu() &&
         tensor.dim() == 2 && tensor.size(0) > 1 && tensor.size(1) > 1 && tensor.is_contiguous() &&
         tensor.storage_offset() == 0 && tensor.storage().nbytes() == tensor.nbytes() &&
         constantsPerStorage.at(constantStorage(constant)) == 1;
}

} // namespace

int StoreMatmulWeightsColumnMajor(const std::shared_ptr<torch::jit::Graph>& graph) {
  std::unordered_map<const void*, int> constantsPerStorage;
  std::vector<Value*> constants;
  forEachNode(graph->block(), [&](Node* node) {
    if (const void* storage = node->kind() == c10::prim::Constant ? constantStorage(node->output()) : nullptr) {
      ++constantsPerStorage[storage];
      constants.push_back(node->output());
    }
  });
  std::vector<Value*> weights;
  for (Value* constant : constants) {
    if (worthColumnMajor(constant, constantsPerStorage)) {
      weights.push_back(constant);
    }
  }
  for (Value* weight : weights) {
    const at::Tensor rowMajor = torch::jit::toIValue(weight)->toTensor();
    torch::jit::WithInsertPoint guard(weight->node());
    Value* columnMajor = graph->insertConstant(rowMajor.t().contiguous().t());
    columnMajor->setType(c10::TensorType::create(torch::jit::toIValue(columnMajor)->toTensor()));
    const std::string name = weight->hasDebugName() ? weight->debugName() : "";
    weight->replaceAllUsesWith(columnMajor);
    weight->node()->destroy();
    if (!name.empty()) {
      columnMajor->setDebugName(name);  // after the row-major one has gone, so that the name stays as it was
    }
    GRAPH_UPDATE("Stored ", name, " column-major");
  }
  return static_cast<int>(weights.size());
}

} // namespace torch_mp::jit
