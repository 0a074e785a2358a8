// The numeric guards: a node keeps fp32 because a number it reads or writes would not survive the low dtype.
//
//   observed range     a computed fp32 tensor it reads or writes was observed above half the low dtype's max (one
//                      binade in reserve: the example inputs need not show the largest value), holding integers the
//                      low dtype skips (positions, indices), or, in fp16, only below the smallest normal number
//   constant range     a floating constant it reads (tensor or scalar) beyond the low dtype's max
//   lost scalar        a non-zero float scalar it reads more than 1/16 off after rounding to the low dtype (clamp
//                      converts its bounds to the tensor's dtype: fp16 turns 1e-8 into 0, and log gives -inf)
//   underflow to zero  a value reaching an input a 0 changes (core/op_facts: a divisor, rsqrt's or log's argument, the
//                      base of a negative power) can be smaller than the low dtype's smallest number (observed so, or
//                      computed from a scalar that small: clamp_min(norm, 1e-12) in F.normalize); the reader, the
//                      views between it and the value, and the value's producer keep fp32, so the value is never
//                      low on its way there (fp16 turns 1e-12 into 0, and x / 0 is inf or NaN)
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

class NumericGuards {
 public:
  NumericGuards(const ObservedValues& observed, c10::ScalarType lowDtype) : observed_(observed), lowDtype_(lowDtype) {}

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
  c10::ScalarType lowDtype_;
  std::unordered_map<const torch::jit::Value*, double> largestConstantMagnitude_;  // constants read so far
  std::optional<std::unordered_map<const torch::jit::Node*, core::GuardVerdict>> underflowToZero_;
};

core::LowDtype toLowDtype(c10::ScalarType lowDtype);
// core/numeric_limits' limits, for a c10 dtype
double largestFinite(c10::ScalarType lowDtype);
double smallestNonZero(c10::ScalarType lowDtype);

// A float scalar kernels convert to the tensor's dtype (clamp's bounds), more than 1/16 off after rounding to the low
// dtype (for fp16 below 2^-20, about 9.5e-7): the lost-scalar verdict, else nothing.
std::optional<core::GuardVerdict> lostScalarVerdict(double scalar, c10::ScalarType lowDtype, std::string name);

} // namespace torch_mp::jit
