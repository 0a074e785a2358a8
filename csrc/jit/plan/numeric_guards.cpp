#include "jit/plan/numeric_guards.h"

#include <torch/csrc/jit/ir/constants.h>

#include <cmath>
#include <functional>
#include <map>
#include <utility>

#include "core/numeric_limits.h"
#include "core/op_facts.h"
#include "core/range_guards.h"
#include "core/underflow_to_zero.h"

namespace torch_mp::jit {
namespace {

using core::GuardKind;
using core::GuardVerdict;
using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// pow's exponent, where the node is pow: whether it may be negative (a constant that is not, or not known).
bool mayBeNegative(const Value* exponent) {
  const std::optional<c10::IValue> constant = torch::jit::toIValue(exponent);
  if (!constant) {
    return true;
  }
  if (constant->isDouble() || constant->isInt()) {
    return constant->toScalar().toDouble() < 0.0;
  }
  if (constant->isTensor()) {
    const at::Tensor& tensor = constant->toTensor();
    return tensor.numel() > 0 && tensor.min().item<double>() < 0.0;
  }
  return true;
}

} // namespace

core::LowDtype toLowDtype(c10::ScalarType lowDtype) {
  return lowDtype == c10::ScalarType::Half ? core::LowDtype::kFloat16 : core::LowDtype::kBFloat16;
}

double largestFinite(c10::ScalarType lowDtype) {
  return core::largestFinite(toLowDtype(lowDtype));
}

double smallestNonZero(c10::ScalarType lowDtype) {
  return core::smallestNonZero(toLowDtype(lowDtype));
}

std::optional<GuardVerdict> NumericGuards::observedOutOfRange(
    const Node* node,
    const std::vector<Node*>& boundaries) const {
  std::vector<core::ObservedNumber> values;
  auto add = [&](const Value* value) {
    auto it = observed_.find(value);
    // constants are checked by constantOutOfRange: a tiny bias is harmless, it is added to larger values
    if (value->node()->kind() != c10::prim::Constant && it != observed_.end() &&
        it->second.dtype == c10::ScalarType::Float) {
      values.push_back({value->debugName(), {it->second.largestMagnitude, it->second.onlyIntegers}});
    }
  };
  auto addNode = [&](const Node* member) {
    for (const Value* input : member->inputs()) {
      add(input);
      if (input->node()->kind() == c10::prim::ListConstruct) {  // einsum, cat, stack read tensors in a list
        for (const Value* element : input->node()->inputs()) {
          add(element);
        }
      }
    }
    for (const Value* output : member->outputs()) {
      add(output);
    }
  };
  addNode(node);
  for (const Node* member : boundaries) {
    addNode(member);
  }
  return core::observedRangeGuard(values, lowDtype_);
}

std::optional<GuardVerdict> NumericGuards::constantOutOfRange(const Node* node) {
  std::vector<core::NamedNumber> largest;
  for (const Value* input : node->inputs()) {
    if (input->node()->kind() != c10::prim::Constant) {
      continue;
    }
    auto cached = largestConstantMagnitude_.find(input);
    if (cached == largestConstantMagnitude_.end()) {
      double magnitude = 0.0;
      const c10::IValue value = torch::jit::toIValue(input).value();
      if (value.isDouble() && std::isfinite(value.toDouble())) {
        magnitude = std::abs(value.toDouble());
      } else if (value.isTensor() && value.toTensor().scalar_type() == c10::ScalarType::Float) {
        magnitude = largestFiniteMagnitude(value.toTensor());
      }
      cached = largestConstantMagnitude_.emplace(input, magnitude).first;
    }
    largest.push_back({input->debugName(), cached->second});
  }
  return core::constantRangeGuard(largest, lowDtype_);
}

std::optional<GuardVerdict> NumericGuards::scalarLostInLowDtype(const Node* node) const {
  std::vector<core::NamedNumber> scalars;
  for (const Value* input : node->inputs()) {
    if (input->node()->kind() == c10::prim::Constant && input->type()->kind() == c10::TypeKind::FloatType) {
      scalars.push_back({input->debugName(), torch::jit::constant_as<double>(input).value()});
    }
  }
  return core::lostScalarGuard(scalars, lowDtype_);
}

std::optional<GuardVerdict> NumericGuards::underflowToZero(const Node* node) {
  if (!underflowToZero_) {
    underflowToZero_.emplace();
    findUnderflowToZero(node->owningGraph()->block());
  }
  auto it = underflowToZero_->find(node);
  return it == underflowToZero_->end() ? std::nullopt : std::make_optional(it->second);
}

double NumericGuards::smallestMagnitude(const Value* value) const {
  if (value->node()->kind() == c10::prim::Constant) {  // a weight: cast to the low dtype once, while converting
    const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
    return constant && constant->isTensor() && constant->toTensor().scalar_type() == c10::ScalarType::Float
        ? finiteMagnitudes(constant->toTensor()).smallest
        : std::numeric_limits<double>::infinity();
  }
  auto it = observed_.find(value);
  return it != observed_.end() && it->second.isTensor && it->second.dtype == c10::ScalarType::Float
      ? it->second.smallestMagnitude
      : std::numeric_limits<double>::infinity();
}

// The graph as core::underflowToZero sees it: every node but constants and the graph's inputs, each tensor value they
// read (constants and graph inputs have no producer).
void NumericGuards::findUnderflowToZero(const Block* block) {
  std::vector<const Node*> members;
  std::unordered_map<const Node*, int> nodeIndex;
  std::function<void(const Block*)> collect = [&](const Block* inner) {
    for (const Node* node : inner->nodes()) {
      if (node->kind() != c10::prim::Constant) {
        nodeIndex.emplace(node, static_cast<int>(members.size()));
        members.push_back(node);
      }
      for (const Block* sub : node->blocks()) {
        collect(sub);
      }
    }
  };
  collect(block);
  std::vector<core::GraphViewNode> nodes(members.size());
  std::vector<core::GraphViewValue> values;
  std::vector<const Value*> valueOf;
  std::unordered_map<const Value*, int> valueIndex;
  auto indexOf = [&](const Value* value) {
    auto [it, added] = valueIndex.emplace(value, static_cast<int>(values.size()));
    if (added) {
      auto producer = nodeIndex.find(value->node());
      values.push_back({value->debugName(), producer == nodeIndex.end() ? -1 : producer->second});
      valueOf.push_back(value);
    }
    return it->second;
  };
  for (size_t n = 0; n < members.size(); ++n) {
    const Node* node = members[n];
    core::GraphViewNode& view = nodes[n];
    view.op = node->kind().toQualString();
    for (const Value* input : node->inputs()) {
      view.inputs.push_back(input->type()->kind() == c10::TypeKind::TensorType ? indexOf(input) : -1);
      if (input->node()->kind() == c10::prim::Constant && input->type()->kind() == c10::TypeKind::FloatType) {
        const double scalar = std::abs(torch::jit::constant_as<double>(input).value());
        if (scalar > 0.0) {
          view.floatScalars.push_back(scalar);
        }
      }
    }
    if (core::factsOf(view.op).zeroSensitivity == core::ZeroSensitivity::kNegativeExponent) {
      view.exponentMayBeNegative = node->inputs().size() >= 2 && mayBeNegative(node->input(1));
    }
  }
  const std::map<int, GuardVerdict> verdicts = core::underflowToZero(
      nodes, values, [&](int value) { return smallestMagnitude(valueOf[value]); }, lowDtype_);
  for (const auto& [node, verdict] : verdicts) {
    underflowToZero_->emplace(members[node], verdict);
  }
}

} // namespace torch_mp::jit
