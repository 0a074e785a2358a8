#include "jit/value_observer.h"

#include <ATen/Functions.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>
#include <vector>

#include "core/op_facts.h"
#include "jit/casts.h"
#include "jit/graph_runner.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Stack;
using torch::jit::Value;

constexpr const char* kObserveOp = "torch_mp::_observe";

// Where the observer op running on this thread writes; one recorder per conversion, so threads never share one.
thread_local std::vector<ObservedValue>* activeRecorder = nullptr;
thread_local std::vector<bool>* activeSeen = nullptr;

// Records what `value` holds into `slot`: dtype, device, the largest sizes, and for fp32 the largest magnitude and
// whether it held integers only.
void record(ObservedValue& slot, const c10::IValue& value) {
  if (!value.isTensor() || !value.toTensor().defined()) {
    return;  // None, or an undefined tensor (e.g. attention weights not asked for): holds no dtype
  }
  const at::Tensor& tensor = value.toTensor();
  slot.isTensor = true;
  slot.dtype = tensor.scalar_type();
  slot.device = tensor.device();
  slot.nested = slot.nested || tensor.is_nested();
  if (tensor.numel() >= slot.numel) {
    slot.numel = tensor.numel();
    slot.sizes = tensor.is_nested() ? std::vector<int64_t>{} : tensor.sizes().vec();
  }
  if (slot.dtype == c10::ScalarType::Float) {
    // a nested tensor's rows padded with zeros have its magnitudes and integrality
    const at::Tensor dense = tensor.is_nested() ? tensor.to_padded_tensor(0.0) : tensor;
    const FiniteMagnitudes magnitudes = finiteMagnitudes(dense);
    const double largest = magnitudes.largest;
    slot.largestMagnitude = std::max(slot.largestMagnitude, largest);
    slot.smallestMagnitude = std::min(slot.smallestMagnitude, magnitudes.smallest);
    slot.nonFinite = slot.nonFinite || !magnitudes.allFinite;
    if (slot.onlyIntegers && largest > kIntegerCheckAbove) {
      slot.onlyIntegers = at::equal(dense, dense.round());  // NaN never equals itself: not integers
    }
  }
}

void observe(Stack& stack) {
  const int64_t id = stack.back().toInt();
  stack.pop_back();
  const c10::IValue value = std::move(stack.back());
  stack.pop_back();
  if (!activeRecorder) {
    return;
  }
  (*activeSeen)[id] = true;
  record((*activeRecorder)[id], value);
}

const torch::jit::RegisterOperators registerObserve({torch::jit::Operator(
    std::string(kObserveOp) + "(Any value, int id) -> ()",
    observe,
    c10::AliasAnalysisKind::CONSERVATIVE)});

// Values in a fixed order (block inputs, then per node its blocks and outputs), identical for a graph and its copy.
void collectValues(Block* block, std::vector<Value*>& out) {
  for (Value* input : block->inputs()) {
    out.push_back(input);
  }
  for (Node* node : block->nodes()) {
    for (Block* sub : node->blocks()) {
      collectValues(sub, out);
    }
    for (Value* output : node->outputs()) {
      out.push_back(output);
    }
  }
}

struct ScopedRecorder {
  ScopedRecorder(std::vector<ObservedValue>* recorder, std::vector<bool>* seen) {
    activeRecorder = recorder;
    activeSeen = seen;
  }
  ~ScopedRecorder() {
    activeRecorder = nullptr;
    activeSeen = nullptr;
  }
};

// Ops whose tensor output always has the dtype of their first tensor input.
// `value`, never seen running, has what `source` was seen holding: same dtype, device and sizes, but no elements
// moved (a cast of it costs nothing on the example inputs' path).
void inferFrom(const Value* value, const ObservedValue& source, ObservedValues& observed, int& added) {
  ObservedValue inferred = source;
  inferred.numel = 0;
  inferred.inferred = true;
  observed.emplace(value, std::move(inferred));
  ++added;
}

void inferBlock(Block* block, ObservedValues& observed, int& added) {
  for (Node* node : block->nodes()) {
    for (Block* sub : node->blocks()) {
      inferBlock(sub, observed, added);
    }
    if (node->kind() == c10::prim::If) {
      // a branch not taken returns what the taken one did: the If's output was seen, so its dtype is known
      for (const Block* branch : node->blocks()) {
        for (size_t i = 0; i < node->outputs().size(); ++i) {
          auto output = observed.find(node->output(i));
          const Value* returned = branch->outputs()[i];
          if (output != observed.end() && output->second.isTensor && !output->second.inferred &&
              !observed.count(returned) && mayHoldTensor(returned->type())) {
            inferFrom(returned, output->second, observed, added);
          }
        }
      }
      continue;
    }
    if (!preservesDtype(node)) {
      continue;
    }
    Value* output = node->output();
    auto source = observed.find(node->input(0));
    if (observed.count(output) || source == observed.end() || !source->second.isTensor ||
        !mayHoldTensor(output->type())) {
      continue;
    }
    inferFrom(output, source->second, observed, added);
  }
}

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

int inferUnreachedDtypes(const std::shared_ptr<Graph>& graph, ObservedValues& observed) {
  int added = 0;
  inferBlock(graph->block(), observed, added);
  return added;
}

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

namespace {

// Runs the graph as it stands with GraphRunner, recording each value that may hold a tensor as it is computed.
Observation observeRunningNodes(
    const std::shared_ptr<Graph>& graph, const Stack& inputs, const std::vector<Stack>& calibration) {
  const GraphRunner runner(*graph);
  const size_t slots = runner.slotCount();
  std::vector<Value*> values;
  collectValues(graph->block(), values);
  std::vector<char> mayHoldTensor(slots, 0);
  for (const Value* value : values) {
    mayHoldTensor[value->unique()] = containsTensor(value->type());
  }
  std::vector<ObservedValue> recorded(slots);
  std::vector<char> seen(slots, 0);
  const GraphRunner::Visitor visit = [&](const Value* value, const c10::IValue& held) {
    const size_t slot = value->unique();
    if (mayHoldTensor[slot]) {
      seen[slot] = 1;
      record(recorded[slot], held);
    }
  };
  Observation observation;
  observation.outputs = runner.run(deepCopies(inputs), visit);
  for (const Stack& extra : calibration) {
    observation.calibrationOutputs.push_back(runner.run(deepCopies(extra), visit));
  }
  observation.values.reserve(values.size());
  for (const Value* value : values) {
    if (seen[value->unique()]) {
      observation.values.emplace(value, recorded[value->unique()]);
    }
  }
  return observation;
}

// Runs an instrumented copy of the graph in the interpreter: an observer op after each value that may hold a
// tensor, for graphs GraphRunner leaves to the interpreter.
Observation observeInstrumentedCopy(
    const std::shared_ptr<Graph>& graph, const Stack& inputs, const std::vector<Stack>& calibration) {
  std::shared_ptr<Graph> instrumented = graph->copy();
  std::vector<Value*> originals;
  std::vector<Value*> copies;
  collectValues(graph->block(), originals);
  collectValues(instrumented->block(), copies);
  TORCH_INTERNAL_ASSERT(originals.size() == copies.size());

  const auto observeSymbol = c10::Symbol::fromQualString(kObserveOp);
  for (size_t id = 0; id < copies.size(); ++id) {
    Value* value = copies[id];
    if (!containsTensor(value->type())) {
      continue;
    }
    torch::jit::WithInsertPoint guard(value->node()->next());
    Value* idConstant = instrumented->insertConstant(static_cast<int64_t>(id));
    instrumented->insertNode(instrumented->create(observeSymbol, {value, idConstant}, 0));
  }

  Stack stack = deepCopies(inputs);
  std::vector<ObservedValue> recorded(copies.size());
  std::vector<bool> seen(copies.size(), false);
  Observation observation;
  {
    ScopedRecorder scope(&recorded, &seen);
    torch::jit::Code code(instrumented, "torch_mp_observe");
    torch::jit::InterpreterState(code).run(stack);
    for (const Stack& extra : calibration) {
      Stack calibrationStack = deepCopies(extra);
      torch::jit::InterpreterState(code).run(calibrationStack);
      observation.calibrationOutputs.push_back(std::move(calibrationStack));
    }
  }

  observation.values.reserve(originals.size());
  for (size_t id = 0; id < originals.size(); ++id) {
    if (seen[id]) {
      observation.values.emplace(originals[id], recorded[id]);
    }
  }
  observation.outputs = std::move(stack);
  return observation;
}

} // namespace

Observation observeValues(
    const std::shared_ptr<Graph>& graph,
    const Stack& inputs,
    const std::vector<Stack>& calibration) {
  return GraphRunner::canRun(*graph) ? observeRunningNodes(graph, inputs, calibration)
                                     : observeInstrumentedCopy(graph, inputs, calibration);
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

void recordObservedDtypes(const ObservedValues& observed) {
  for (const auto& [constValue, seen] : observed) {
    auto tensorType = constValue->type()->cast<c10::TensorType>();
    if (!seen.isTensor || !tensorType || tensorType->scalarType()) {
      continue;
    }
    Value* value = const_cast<Value*>(constValue);
    if (value->node()->kind() == c10::prim::Constant) {
      value->setType(c10::TensorType::create(torch::jit::toIValue(value)->toTensor()));
    } else {
      value->setType(tensorType->withScalarType(seen.dtype));
    }
  }
}

} // namespace torch_mp::jit
