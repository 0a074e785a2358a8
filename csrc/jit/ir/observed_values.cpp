#include "jit/ir/observed_values.h"

#include <ATen/Functions.h>
#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/op_facts.h"
#include "jit/ir/casts.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// Whether the example inputs ran this block itself: it defines a value they were seen producing, or nothing but
// casts and constants (say, a branch that returns an outer value). torch_mp's own casts were never observed.
bool ranItself(const Block* block, const ObservedValues& observed) {
  bool definesValues = false;
  for (const Node* node : block->nodes()) {
    if (plainCastTarget(node)) {
      continue;
    }
    for (const Value* output : node->outputs()) {
      definesValues = definesValues || node->kind() != c10::prim::Constant;
      auto seen = observed.find(output);
      if (seen != observed.end() && !seen->second.inferred) {
        return true;
      }
    }
  }
  return !definesValues;
}
} // namespace

bool preservesDtype(const Node* node) {
  return core::factsOf(node->kind().toQualString()).preservesDtype && node->outputs().size() == 1 &&
      !node->inputs().empty();
}

bool blockRan(const Block* block, const ObservedValues& observed) {
  return outermostUntakenBlock(block, nullptr, observed) == nullptr;
}

const Block* outermostUntakenBlock(const Block* block, const Block* stop, const ObservedValues& observed) {
  const Block* untaken = nullptr;
  for (; block != stop && block->owningNode(); block = block->owningNode()->owningBlock()) {
    if (!ranItself(block, observed)) {
      untaken = block;
    }
  }
  return untaken;
}

namespace {

void collectInputDependentRank(
    const torch::jit::Block* block,
    const ObservedValues& observed,
    std::unordered_set<const torch::jit::Value*>& varying) {
  for (const torch::jit::Node* node : block->nodes()) {
    std::vector<const torch::jit::Block*> ran;
    for (const torch::jit::Block* sub : node->blocks()) {
      if (blockRan(sub, observed)) {
        ran.push_back(sub);
        collectInputDependentRank(sub, observed, varying);
      }
    }
    bool varies = node->kind() == c10::aten::squeeze || node->kind() == c10::aten::squeeze_;
    for (const torch::jit::Value* input : node->inputs()) {
      varies = varies || varying.count(input);
    }
    for (const torch::jit::Block* sub : ran) {
      for (const torch::jit::Value* output : sub->outputs()) {
        varies = varies || varying.count(output);
      }
    }
    if (varies) {
      varying.insert(node->outputs().begin(), node->outputs().end());
    }
  }
}

} // namespace

std::unordered_set<const torch::jit::Value*> valuesOfInputDependentRank(
    const torch::jit::Block* block, const ObservedValues& observed) {
  std::unordered_set<const torch::jit::Value*> varying;
  collectInputDependentRank(block, observed, varying);
  return varying;
}

std::optional<std::vector<int64_t>> knownSizes(const ObservedValue& seen) {
  if (seen.nested) {
    return std::nullopt;
  }
  return seen.sizes;
}

const ObservedValue* observedThroughCasts(const ObservedValues& observed, const Value* value) {
  return askThroughPlainCasts(value, [&](const Value* step) -> std::optional<const ObservedValue*> {
           auto it = observed.find(step);
           return it != observed.end() && it->second.isTensor ? std::make_optional(&it->second) : std::nullopt;
         }).value_or(nullptr);
}

std::optional<std::vector<int64_t>> sizesOf(const ObservedValues& observed, const Value* value) {
  if (value->node()->kind() == c10::prim::Constant) {
    const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
    if (constant && constant->isTensor()) {
      return constant->toTensor().sizes().vec();
    }
  }
  const ObservedValue* seen = observedThroughCasts(observed, value);
  return seen ? knownSizes(*seen) : std::nullopt;
}

FiniteMagnitudes finiteMagnitudes(const at::Tensor& tensor) {
  constexpr double kNone = std::numeric_limits<double>::infinity();
  if (tensor.numel() == 0) {
    return {};
  }
  // Small contiguous fp32 CPU tensors (most values of a large graph run on small inputs): one pass over the data
  // instead of reductions and item() calls, which cost microseconds per observed value. Only all-finite data
  // takes this path; infinities and NaN take the general path below.
  constexpr int64_t kDirectScanLimit = 4096;
  if (tensor.numel() <= kDirectScanLimit && tensor.scalar_type() == c10::ScalarType::Float && tensor.is_cpu() &&
      tensor.is_contiguous() && !tensor.is_conj() && !tensor.is_neg() && tensor.layout() == c10::kStrided) {
    const float* data = tensor.const_data_ptr<float>();
    float largest = 0.0f;
    float smallest = std::numeric_limits<float>::infinity();
    bool finite = true;
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      const float magnitude = std::abs(data[i]);
      finite = finite && std::isfinite(magnitude);
      largest = std::max(largest, magnitude);
      smallest = magnitude > 0.0f ? std::min(smallest, magnitude) : smallest;
    }
    if (finite) {
      return {largest, std::isfinite(smallest) ? smallest : kNone, true};
    }
  }
  // aminmax of |x| in one pass; only a tensor holding zeros, infinities or NaN (which aminmax propagates) pays for a
  // masked copy
  const at::Tensor absolute = tensor.abs();
  auto [low, high] = absolute.aminmax();
  double largest = high.item<double>();
  double smallest = low.item<double>();
  const bool finite = std::isfinite(largest);
  if (!finite) {
    largest = absolute.masked_fill(absolute.isfinite().logical_not(), 0).max().item<double>();
  }
  if (!finite || smallest == 0.0) {
    const at::Tensor ignored = absolute.isfinite().logical_not().logical_or_(absolute.eq(0));
    smallest = absolute.masked_fill(ignored, kNone).min().item<double>();
  }
  return {largest, smallest, finite};
}

double largestFiniteMagnitude(const at::Tensor& tensor) {
  return finiteMagnitudes(tensor).largest;
}

ObservedValues observationOfCopy(
    const ObservedValues& observed, const torch::jit::Graph& original, torch::jit::Graph& copy) {
  const std::unordered_map<const Value*, Value*> valueOf = correspondingValues(original, copy);
  ObservedValues carried;
  carried.reserve(observed.size());
  for (const auto& [value, seen] : observed) {
    carried.emplace(valueOf.at(value), seen);
  }
  return carried;
}

} // namespace torch_mp::jit
