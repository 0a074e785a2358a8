// The numeric guards: a node keeps fp32 because a number it reads or writes would not survive the low dtype.
//
//   observed range   a computed fp32 tensor it reads or writes was observed above half the low dtype's max (one
//                    binade in reserve: the example inputs need not show the largest value), holding integers the
//                    low dtype skips (positions, indices), or, in fp16, only below the smallest normal number
//   constant range   a floating constant it reads (tensor or scalar) beyond the low dtype's max
//   lost scalar      a non-zero float scalar it reads more than 1/16 off after rounding to the low dtype (clamp
//                    converts its bounds to the tensor's dtype: fp16 turns 1e-8 into 0, and log gives -inf)
//
// Each returns the guard that fired (the value, what was seen, the limit it crossed) or nothing. The order in which
// they are asked among the other rules is written once, in graph_to_dataflow's classification.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "jit/value_observer.h"

namespace torch_mp::jit {

struct GuardVerdict {
  const torch::jit::Value* value;  // what crossed the limit
  double seen;                     // its largest magnitude (observed range, constant range) or its value (scalar)
  double limit;                    // the limit it crossed (for a lost scalar: what it becomes in the low dtype)
  std::string reason;              // "range guard: %x observed up to ..., so the node keeps fp32"
};

class NumericGuards {
 public:
  NumericGuards(const ObservedValues& observed, c10::ScalarType lowDtype) : observed_(observed), lowDtype_(lowDtype) {}

  // `boundaries`: the block input and output nodes planned with the node (a prim::If's or prim::Loop's).
  std::optional<GuardVerdict> observedOutOfRange(
      const torch::jit::Node* node,
      const std::vector<torch::jit::Node*>& boundaries) const;
  std::optional<GuardVerdict> constantOutOfRange(const torch::jit::Node* node);
  std::optional<GuardVerdict> scalarLostInLowDtype(const torch::jit::Node* node) const;

 private:
  const ObservedValues& observed_;
  c10::ScalarType lowDtype_;
  std::unordered_map<const torch::jit::Value*, double> largestConstantMagnitude_;  // constants read so far
};

// The largest finite value of the low dtype (fp16: 65504; bf16: 3.39e38, a little below fp32's 3.40e38).
double largestFinite(c10::ScalarType lowDtype);

} // namespace torch_mp::jit
