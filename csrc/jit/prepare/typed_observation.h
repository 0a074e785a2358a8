// Dtype knowledge from types: what the graph executor profiled. When TorchScript's profiling executor optimizes a
// graph it has run, it writes the dtype, device and sizes each tensor had into that value's type
// (RemoveProfileNodesAndSpecializeTypes). This reads them as an observation, so the load-time pass (jit_pass) plans
// with the same stages as convert(), without running the graph itself.
//
// A tensor is observed when its type has a dtype, a device and concrete sizes; constants from their values. What
// types cannot say stays unknown: magnitudes (largestMagnitude 0 and rangeObserved false, so the observed range
// guard never fires: it needs convert() with example or calibration inputs; constants are still checked), and the
// sizes of values profiled at several sizes (loops, more than one profiled run), which stay unobserved and are left
// as they are. A container is observed when its block ran, that is, when a tensor in that block was observed; an
// output nothing reads (never profiled) takes the dtype and device of a profiled output of the same node.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

#include "jit/ir/observed_values.h"

namespace torch_mp::jit {

ObservedValues observeTypes(const std::shared_ptr<torch::jit::Graph>& graph);

} // namespace torch_mp::jit
