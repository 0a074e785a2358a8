// Magnitudes for the load-time pass (jit_pass): the inputs of a graph's first optimized runs, recorded so that the
// pass can observe the graph on them as convert() observes it on example inputs (the observed range guard).
//
// The executor calls its passes with no input in sight, so the pass converts in two steps. When it first optimizes a
// graph it hands back a recording graph: it stores a copy of its inputs (up to kMaxCalibrationRuns, under a key)
// and runs the fp32 graph, marked with that key, as a prim::FallbackGraph, which the executor profiles and
// optimizes on its own a run later. The pass finds the marker there, takes the recorded inputs and converts.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace torch_mp::jit {

// Beyond this many runs a key records nothing more (the executor's defaults take two before converting).
inline constexpr size_t kMaxCalibrationRuns = 8;

// The recording graph for `fp32` (unprofiled, with the same inputs and outputs), under a new key.
std::shared_ptr<torch::jit::Graph> recordingGraph(std::shared_ptr<torch::jit::Graph> fp32);

// The key of a graph recordingGraph marked, with the marker removed; nothing for any other graph.
std::optional<int64_t> takeCalibrationMarker(torch::jit::Graph& graph);

// The inputs recorded under `key` (the graph's inputs in order, one stack per run); the key is closed, so its
// recording graph stores nothing more.
std::vector<torch::jit::Stack> takeCalibrationInputs(int64_t key);

// Closes every key, dropping what they recorded: for a pass disabled before it could take them.
void dropCalibrationInputs();

} // namespace torch_mp::jit
