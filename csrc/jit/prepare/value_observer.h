// Dtype knowledge by observation: runs the graph once on example inputs and records which values holding tensors
// (containers included) it produced, and for every value that may be a tensor, the dtype, device, element count and
// sizes it had, and for fp32 tensors the largest finite magnitude (what the range guard compares with the low
// dtype's range). The graph runs node by node with GraphRunner, which shows each value as it is computed; a graph
// GraphRunner leaves to the interpreter runs as a copy instrumented with an observer op after each value.
//
// Frozen graphs type most values as plain `Tensor`; static propagation would need a dtype rule for every op.
// Running the graph gives exact answers for every value the inputs reach, nested blocks and loop iterations
// included (the largest element count across iterations is kept). Values in branches the inputs never take stay
// unobserved: the converter leaves their nodes as they are and reports them. The graph itself is not modified.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <vector>

#include "jit/ir/observed_values.h"

namespace torch_mp::jit {

struct Observation {
  ObservedValues values;
  torch::jit::Stack outputs;  // what the graph returned
  std::vector<torch::jit::Stack> calibrationOutputs;  // what it returned on each calibration input
};

// `inputs` are the graph's inputs in order (the module itself first for a method graph). They are deep-copied, so
// a graph that mutates its inputs leaves the caller's tensors alone. Each stack of `calibration` (inputs in the
// same form) runs too: sizes and magnitudes are the largest over all runs; `outputs` are the example inputs' run's.
// Throws ModelRunError (torch_mp/convert.h) when the graph fails on them.
Observation observeValues(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const torch::jit::Stack& inputs,
    const std::vector<torch::jit::Stack>& calibration = {});

// Completes the observation statically where it is safe, for values the example inputs did not reach: one produced
// by an op that never changes dtype (views, reshapes, copies) from a tensor whose dtype is known gets that dtype
// (the common untaken branch `if x.dim() == 2: x = x.unsqueeze(0)`); one an untaken branch of a prim::If returns
// gets what the If's output held (from the branch taken), so the If can carry low precision with a cast in the
// untaken branch rather than two around the If. Inferred values are marked `inferred` and have no elements.
// Returns how many values it added.
int inferUnreachedDtypes(const std::shared_ptr<torch::jit::Graph>& graph, ObservedValues& observed);

// Writes each observed dtype into its value's TensorType where the type has none, so later passes can read dtypes
// off the graph.
void recordObservedDtypes(const ObservedValues& observed);

} // namespace torch_mp::jit
