#include "jit/prepare/value_observer.h"

#include <ATen/Functions.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>
#include <vector>

#include "jit/ir/tensor_statistics.h"
#include "torch_mp/convert.h"
#include "jit/upstream/graph_runner.h"

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
    const TensorStatistics seen = tensorStatistics(dense, slot.onlyIntegers);
    slot.largestMagnitude = std::max(slot.largestMagnitude, seen.magnitudes.largest);
    slot.smallestMagnitude = std::min(slot.smallestMagnitude, seen.magnitudes.smallest);
    slot.nonFinite = slot.nonFinite || !seen.magnitudes.allFinite;
    slot.onlyIntegers = slot.onlyIntegers && seen.onlyIntegers;
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

} // namespace

int inferUnreachedDtypes(const std::shared_ptr<Graph>& graph, ObservedValues& observed) {
  int added = 0;
  inferBlock(graph->block(), observed, added);
  return added;
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
  std::vector<char> constant(slots, 0);
  for (const Value* value : values) {
    mayHoldTensor[value->unique()] = containsTensor(value->type());
    constant[value->unique()] = value->node()->kind() == c10::prim::Constant;
  }
  std::vector<ObservedValue> recorded(slots);
  std::vector<char> seen(slots, 0);
  // A constant (every weight) holds the same tensor on every run and at every loop iteration: recorded once, so the
  // calibration runs pass over the activations only.
  const GraphRunner::Visitor visit = [&](const Value* value, const c10::IValue& held) {
    const size_t slot = value->unique();
    if (mayHoldTensor[slot] && !(constant[slot] && seen[slot])) {
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
  const auto failed = [](const std::string& what) {
    return ModelRunError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                         "torch_mp: running the model on the example inputs failed: " + what);
  };
  try {
    return GraphRunner::canRun(*graph) ? observeRunningNodes(graph, inputs, calibration)
                                       : observeInstrumentedCopy(graph, inputs, calibration);
  } catch (const c10::Error& error) {
    throw failed(error.what_without_backtrace());
  } catch (const std::exception& error) {
    throw failed(error.what());
  }
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
