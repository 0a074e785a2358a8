// Mixed precision at load time: torch_mp's pipeline as a pass of TorchScript's graph executor.
//
//   using torch_mp::core::LowDtype;
//   torch_mp::jit::enableMixedPrecisionPass({.conversion = {.request = {.lowDtype = LowDtype::kFloat16}}});
//   auto model = torch::jit::load("model_fp32_frozen.pt");   // any frozen fp32 TorchScript file
//   model.forward({x});  // the first two calls profile and calibrate (fp32); from the third on it runs mixed
//
// The executor optimizes a graph after its profiling run. With `calibrate` (the default) the pass first hands back
// a graph that records its inputs and runs fp32 (calibration_inputs), and converts when the executor optimizes
// again, a run later: observing the graph on the recorded inputs as convert() observes it on example inputs, so the
// observed range guard keeps values beyond fp16's range in fp32. Without `calibrate` it converts at once, reading
// dtypes, devices and sizes from the profile, without magnitudes. Either way it converts that graph with the stages
// convert() runs and guards the result: inputs of another dtype or device (or needing gradients) run the unconverted
// graph, which the executor profiles and optimizes (and the pass converts) on its own. Graphs optimized before the
// pass was enabled keep their plan; a disabled pass changes no graph.
#pragma once

#include <c10/core/ScalarType.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "torch_mp/convert.h"

namespace torch_mp::jit {

// The pass's options: a conversion's, and `calibrate`.
struct JitPassOptions {
  // As convert() takes them. Inputs and outputs keep their dtypes (the executor's callers pass fp32); the
  // verification runs on the recorded inputs where there are some; the policy is used with `policyPerGraph` off.
  ConvertOptions conversion;
  // Each graph is planned with the default policy for its device (from its profile) and the dtype.
  bool policyPerGraph = true;
  // Observe the inputs of the runs before converting (one more fp32 run), for the observed range guard.
  bool calibrate = true;
};

// Why the pass left a graph as it was.
enum class SkipReason {
  kNone,            // converted
  kNoProfile,       // no profiled types: the legacy executor, or a graph without tensors
  kNeedsGradient,   // a tensor was profiled requiring grad: training, not inference
  kNotFrozen,       // every tensor read from module attributes (prim::GetAttr), none constant: freeze first
  kNothingToLower,  // the plan put no node in low precision
  kFailed,          // the conversion threw; the message is in PassActivity::lastError
  kNonFinite,       // on the recorded inputs its values turned NaN or inf where fp32's are finite (the report says
                    // where: nonFinite)
  kCalibrating,     // not yet: the graph records its inputs and runs fp32 until the executor optimizes it again
};
const char* toString(SkipReason reason);

// Registers the pass with torch::jit's pass manager (once per process) and enables it with these options,
// replacing earlier ones. Safe to call again and from several threads.
void enableMixedPrecisionPass(const JitPassOptions& options = {});
// Graphs optimized from now on are left alone.
void disableMixedPrecisionPass();
bool mixedPrecisionPassEnabled();
std::optional<JitPassOptions> mixedPrecisionPassOptions();

// The pass itself, as the executor calls it on a graph it optimizes: does nothing while disabled. For tests, and for
// callers that run the executor's passes themselves.
void runMixedPrecisionPass(std::shared_ptr<torch::jit::Graph>& graph);

struct PassActivity {
  int64_t converted = 0;  // graphs the pass rewrote since the process started
  int64_t skipped = 0;    // graphs it saw while enabled and left alone
  int64_t calibrating = 0;  // graphs it set to record their inputs, to convert them a run later
  SkipReason lastOutcome = SkipReason::kNone;
  std::optional<ConversionReport> lastReport;  // of the last graph planned (converted, or nothing to lower)
  // The last graph converted, as the executor runs it. With calibration it runs as a function the graph the
  // executor reports as optimized (torch::jit::lastExecutedOptimizedGraph) calls.
  std::shared_ptr<torch::jit::Graph> lastGraph;
  std::string lastError;                       // of the last kFailed
};
PassActivity mixedPrecisionPassActivity();

} // namespace torch_mp::jit
