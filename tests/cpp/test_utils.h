// Shared helpers for the C++ tests: graphs from IR strings, running them, comparing outputs.
#pragma once

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <c10/util/accumulate.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jit/ir/casts.h"
#include "jit/pipeline.h"
#include "jit/prepare/value_observer.h"

namespace torch_mp::jit {

// conv2d (weight %w) -> relu -> softmax: a low op, a follow op and an fp32 op in a row.
constexpr const char* kConvReluSoftmax = R"IR(
    graph(%x : Tensor, %w : Tensor):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %zero : int = prim::Constant[value=0]()
      %ones : int[] = prim::ListConstruct(%one, %one)
      %zeros : int[] = prim::ListConstruct(%zero, %zero)
      %c : Tensor = aten::conv2d(%x, %w, %none, %ones, %zeros, %ones, %one)
      %r : Tensor = aten::relu(%c)
      %s : Tensor = aten::softmax(%r, %one, %none)
      return (%s))IR";

// What an observed run records of a tensor (the observer itself is not run).
inline ObservedValue observedTensor(std::vector<int64_t> sizes, c10::ScalarType dtype = at::kFloat,
                                   c10::Device device = c10::Device(c10::kCPU)) {
  ObservedValue seen;
  seen.isTensor = true;
  seen.dtype = dtype;
  seen.device = device;
  seen.numel = c10::multiply_integers(sizes);
  seen.sizes = std::move(sizes);
  return seen;
}

// Prepares a frozen graph (stages 1-2) and converts it (stages 3-7), in place.
inline ConversionReport convertGraphInPlace(
    std::shared_ptr<torch::jit::Graph>& graph,
    const std::vector<c10::IValue>& inputs,
    const ConvertOptions& options,
    const std::vector<std::vector<c10::IValue>>& calibration = {}) {
  PreparedGraph prepared = prepareGraph(graph, inputs, calibration);
  ConversionReport report = convertPrepared(prepared, options);
  graph = prepared.graph;
  return report;
}

// Observes every non-constant tensor value of the graph as a tensor of the given sizes on `device` (the CPU by
// default), except those named in `otherSizes` / `otherDevices`.
inline ObservedValues observeAllTensors(const torch::jit::Graph& graph, const std::vector<int64_t>& sizes,
                                        const std::map<std::string, std::vector<int64_t>>& otherSizes = {},
                                        c10::Device device = c10::Device(c10::kCPU),
                                        const std::map<std::string, c10::Device>& otherDevices = {}) {
  ObservedValues observed;
  auto note = [&](const torch::jit::Value* value) {
    if (value->type()->kind() != c10::TypeKind::TensorType) {
      return;
    }
    auto other = otherSizes.find(value->debugName());
    auto elsewhere = otherDevices.find(value->debugName());
    observed.emplace(value, observedTensor(other == otherSizes.end() ? sizes : other->second, at::kFloat,
                                           elsewhere == otherDevices.end() ? device : elsewhere->second));
  };
  for (const torch::jit::Value* input : graph.inputs()) {
    note(input);
  }
  for (const torch::jit::Node* node : graph.nodes()) {
    if (node->kind() != c10::prim::Constant) {
      for (const torch::jit::Value* output : node->outputs()) {
        note(output);
      }
    }
  }
  return observed;
}

inline std::shared_ptr<torch::jit::Graph> parseGraph(const std::string& ir) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  return graph;
}

// Replaces graph input `index` by a constant holding `value` (IR strings cannot spell tensor constants).
inline void inlineInputAsConstant(torch::jit::Graph& graph, size_t index, const at::Tensor& value) {
  torch::jit::WithInsertPoint guard(graph.block()->nodes().front());
  graph.inputs()[index]->replaceAllUsesWith(graph.insertConstant(value));
  graph.eraseInput(index);
}

// Runs a copy of the graph on copies of the inputs.
inline std::vector<c10::IValue> runGraph(const std::shared_ptr<torch::jit::Graph>& graph,
                                         const std::vector<c10::IValue>& inputs) {
  torch::jit::Stack stack;
  for (const c10::IValue& input : inputs) {
    stack.push_back(input.deepcopy());
  }
  torch::jit::Code code(graph->copy(), "test");
  torch::jit::InterpreterState(code).run(stack);
  return stack;
}

// Same dtypes and values within a tolerance relative to the largest magnitude of the expected tensor.
inline void expectCloseOutputs(const std::vector<c10::IValue>& expected, const std::vector<c10::IValue>& actual,
                               double relativeTolerance) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_TRUE(expected[i].isTensor() && actual[i].isTensor()) << "output " << i;
    const at::Tensor e = expected[i].toTensor();
    const at::Tensor a = actual[i].toTensor();
    EXPECT_EQ(e.scalar_type(), a.scalar_type()) << "output " << i;
    const double scale = std::max(e.abs().max().item<double>(), 1e-6);
    const double error = (e.to(at::kDouble) - a.to(at::kDouble)).abs().max().item<double>();
    EXPECT_LE(error, relativeTolerance * scale) << "output " << i;
  }
}

// Nodes of one kind in the graph, nested blocks included.
inline int countNodes(const torch::jit::Block* block, c10::Symbol kind) {
  int count = 0;
  for (const torch::jit::Node* node : block->nodes()) {
    count += node->kind() == kind;
    for (const torch::jit::Block* sub : node->blocks()) {
      count += countNodes(sub, kind);
    }
  }
  return count;
}

inline int countNodes(const torch::jit::Graph& graph, c10::Symbol kind) {
  return countNodes(graph.block(), kind);
}

inline void expectSameOutputs(const std::vector<c10::IValue>& expected, const std::vector<c10::IValue>& actual) {
  expectCloseOutputs(expected, actual, 0.0);
}

// What a kernel-fusing pass (FusePointwise, FuseNormalization) did: the calls it made, the casts it took in.
struct Fused {
  int calls = 0;
  int castsRemoved = 0;
};

// Runs `pass(graph, observed, ledger)` with a ledger of its own, lints, and compares the outputs with the graph's
// before within `tolerance` of the largest expected magnitude (0: bit for bit).
template <typename Pass>
Fused fuseAndCompare(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<c10::IValue>& inputs,
                     const ObservedValues& observed, double tolerance, const Pass& pass) {
  const auto before = runGraph(graph, inputs);
  Fused result;
  const int castsBefore = countNodes(*graph, c10::aten::to);
  CastLedger ledger(observed);
  result.calls = pass(graph, observed, ledger);
  result.castsRemoved = castsBefore - countNodes(*graph, c10::aten::to);
  graph->lint();
  expectCloseOutputs(before, runGraph(graph, inputs), tolerance);
  return result;
}

} // namespace torch_mp::jit
