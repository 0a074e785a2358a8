#include "jit/plan/flop_estimate.h"

#include <torch/csrc/jit/ir/constants.h>

#include <optional>
#include <vector>

#include "core/flop_formulas.h"
#include "core/op_facts.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Node;
using torch::jit::Value;
using core::Sizes;

// A constant's sizes, or those a run observed (not through casts: flopsOf counts the op's own operands).
std::optional<Sizes> sizesWhereRan(const Value* value, const ObservedValues& observed) {
  if (auto constant = torch::jit::toIValue(value); constant && constant->isTensor()) {
    return constant->toTensor().sizes().vec();
  }
  auto it = observed.find(value);
  if (it == observed.end() || !it->second.isTensor || it->second.inferred) {  // inferred: never ran
    return std::nullopt;
  }
  return knownSizes(it->second);
}

// The sizes of the tensors of a list input: built by a prim::ListConstruct, or one constant list where the weights
// stay as frozen.
std::vector<Sizes> listedSizes(const Value* list, const ObservedValues& observed) {
  std::vector<Sizes> listed;
  if (list->node()->kind() == c10::prim::ListConstruct) {
    for (const Value* element : list->node()->inputs()) {
      if (auto sizes = sizesWhereRan(element, observed)) {
        listed.push_back(std::move(*sizes));
      }
    }
  } else if (auto constant = torch::jit::toIValue(list); constant && constant->isTensorList()) {
    for (const at::Tensor& tensor : constant->toTensorVector()) {
      listed.push_back(tensor.sizes().vec());
    }
  }
  return listed;
}

// What core::flopsOf reads of a node: the sizes of its inputs and first output, its int constants; a convolution's
// transposed flag (aten::_convolution / aten::convolution's seventh input), a recurrent op's weights, the first
// input's element count where the node ran.
core::FlopOperands operandsOf(const Node* node, core::FlopFormula formula, const ObservedValues& observed) {
  core::FlopOperands operands;
  for (const Value* input : node->inputs()) {
    operands.inputs.push_back(sizesWhereRan(input, observed));
    operands.integers.push_back(input->type()->kind() == c10::TypeKind::IntType
                                    ? torch::jit::constant_as<int64_t>(input)
                                    : std::nullopt);
  }
  operands.output = node->outputs().empty() ? std::nullopt : sizesWhereRan(node->output(0), observed);
  if (formula == core::FlopFormula::kGenericConvolution) {
    operands.transposed = torch::jit::constant_as<bool>(node->input(6));
  }
  if (formula == core::FlopFormula::kRecurrent) {
    if (std::optional<int> index = node->schema().argumentIndexWithName(core::kRecurrentWeightsArgument)) {
      operands.recurrentWeights = listedSizes(node->input(*index), observed);
    }
  }
  auto first = node->inputs().empty() ? observed.end() : observed.find(node->input(0));
  auto output = node->outputs().empty() ? observed.end() : observed.find(node->output(0));
  if (first != observed.end() && first->second.isTensor && output != observed.end() && !output->second.inferred) {
    operands.firstInputElements = first->second.numel;
  }
  return operands;
}

} // namespace

int64_t estimateFlops(const Node* node, const ObservedValues& observed) {
  const core::FlopFormula formula = core::factsOf(node->kind().toQualString()).flops;
  return formula == core::FlopFormula::kNone ? 0 : core::flopsOf(formula, operandsOf(node, formula, observed));
}

} // namespace torch_mp::jit
