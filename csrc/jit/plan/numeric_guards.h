// The numeric guards over a TorchScript graph: each lists the numbers of its kind a node reads and writes (observed
// fp32 tensors, constants' largest magnitudes, float scalars) for core/range_guards, which says whether the low dtype
// would lose one and is the same for both fronts; and the underflow-to-zero guard, which builds the graph's view for
// core/underflow_to_zero (a value reaching an input a 0 changes, a divisor, rsqrt's or log's argument, the base of a
// negative power, that can be smaller than the low dtype's smallest number: the reader, the views between, and the
// value's producer keep fp32).
//
// Each returns the guard that fired (core::GuardVerdict: which, the value, what was seen, the limit) or nothing;
// core::describeGuard says it for people. The order in which they count among the other rules is written once, in
// core/classify_node.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/numeric_limits.h"
#include "core/op_policy.h"
#include "jit/ir/observed_values.h"

namespace torch_mp::jit {

core::LowDtype toLowDtype(c10::ScalarType lowDtype);

class NumericGuards {
 public:
  NumericGuards(const ObservedValues& observed, c10::ScalarType lowDtype)
      : observed_(observed), lowDtype_(toLowDtype(lowDtype)) {}

  // `boundaries`: the block input and output nodes planned with the node (a prim::If's or prim::Loop's).
  std::optional<core::GuardVerdict> observedOutOfRange(
      const torch::jit::Node* node,
      const std::vector<torch::jit::Node*>& boundaries) const;
  std::optional<core::GuardVerdict> constantOutOfRange(const torch::jit::Node* node);
  std::optional<core::GuardVerdict> scalarLostInLowDtype(const torch::jit::Node* node) const;
  // The first call builds the node's graph's view for core/underflow_to_zero, which walks it once per zero-sensitive
  // read.
  std::optional<core::GuardVerdict> underflowToZero(const torch::jit::Node* node);

 private:
  void findUnderflowToZero(const torch::jit::Block* block);
  // The smallest non-zero magnitude `value` holds: observed, or a constant's own.
  double smallestMagnitude(const torch::jit::Value* value) const;

  const ObservedValues& observed_;
  core::LowDtype lowDtype_;
  std::unordered_map<const torch::jit::Value*, double> largestConstantMagnitude_;  // constants read so far
  std::optional<std::unordered_map<const torch::jit::Node*, core::GuardVerdict>> underflowToZero_;
};

// core/numeric_limits' limits, for a c10 dtype
double largestFinite(c10::ScalarType lowDtype);
double smallestNonZero(c10::ScalarType lowDtype);

} // namespace torch_mp::jit
