// The load-time pass (torch_mp/jit_pass.h): registered once with torch::jit's pass manager as a pre-pass.
//
// Why a pre-pass: the profiling executor runs custom pre-passes on the no-grad path while the graph still holds its
// prim::profile nodes, that is, what every tensor was when the graph ran. With the TensorExpr fuser enabled (the
// default) it wipes those types before the post-passes run, so a post-pass would not know a single dtype.
//
// Contract, per graph the executor optimizes while the pass is enabled: a graph with profiled types, no tensor that
// needs a gradient, and frozen (executor_profile) is converted with convert()'s stages
// (ConvertObservedGraph on the inputs calibration_inputs recorded, or ConvertTypedGraph from the profile alone), its
// profile nodes consumed and its types left unspecialized as the executor leaves them; the result runs behind a
// guard on the tensor inputs' dtype and device (prim::TypeCheck), whose other branch is the unconverted graph as a
// prim::FallbackGraph, which the executor turns into a function it profiles and optimizes on its own. With
// `calibrate`, a graph not yet marked by calibration_inputs becomes its recording graph instead. A conversion whose
// outputs on the recorded inputs hold NaN or inf where the fp32 graph's are finite is not used (convert() repairs
// such a plan; here the graph stays fp32). Any other graph, and any failure, leaves the graph exactly as it was.
#include "torch_mp/jit_pass.h"

#include <torch/csrc/jit/jit_log.h>
#include <torch/csrc/jit/passes/pass_manager.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>

#include <mutex>
#include <vector>

#include "jit/load_time/calibration_inputs.h"
#include "jit/load_time/executor_profile.h"
#include "jit/load_time/guard_with_fallback.h"
#include "jit/pipeline.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

struct PassState {
  std::mutex mutex;
  bool registered = false;
  std::optional<JitPassOptions> options;  // set while enabled
  PassActivity activity;
};

PassState& state() {
  static PassState instance;
  return instance;
}

// The device the profile saw the graph's computed tensors on (CUDA when any was), which picks the default policy.
c10::DeviceType deviceOf(const Block* block) {
  for (const Node* node : block->nodes()) {
    for (const Block* sub : node->blocks()) {
      if (deviceOf(sub) == c10::DeviceType::CUDA) {
        return c10::DeviceType::CUDA;
      }
    }
    for (const Value* output : node->outputs()) {
      auto type = output->type()->cast<c10::TensorType>();
      if (type && type->device() && type->device()->is_cuda()) {
        return c10::DeviceType::CUDA;
      }
    }
  }
  return c10::DeviceType::CPU;
}

ConvertOptions convertOptionsFor(const JitPassOptions& pass, c10::DeviceType device) {
  ConvertOptions options = pass.conversion;
  if (pass.policyPerGraph) {
    options.request.policy = defaultOptions(device, options.request.lowDtype).request.policy;
  }
  return options;
}

void record(
    SkipReason outcome,
    std::optional<ConversionReport> report = std::nullopt,
    std::string error = "",
    std::shared_ptr<Graph> converted = nullptr) {
  PassState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.activity.lastOutcome = outcome;
  if (report) {
    s.activity.lastReport = std::move(report);
  }
  if (outcome == SkipReason::kNone) {
    s.activity.converted += 1;
    s.activity.lastGraph = std::move(converted);
  } else if (outcome == SkipReason::kCalibrating) {
    s.activity.calibrating += 1;
  } else {
    s.activity.skipped += 1;
    if (outcome == SkipReason::kFailed) {
      s.activity.lastError = std::move(error);
    }
  }
}

void failed(const std::string& error) {
  TORCH_WARN("torch_mp: the mixed-precision pass left a graph as it was because its conversion failed: ", error);
  record(SkipReason::kFailed, std::nullopt, error);
}

} // namespace

void runMixedPrecisionPass(std::shared_ptr<Graph>& graph) {
  std::optional<JitPassOptions> options = mixedPrecisionPassOptions();
  if (!options) {
    return;
  }
  GRAPH_DEBUG("torch_mp pass: the graph as profiled:\n", *graph);
  std::shared_ptr<Graph> converted = graph->copy();
  const std::optional<int64_t> calibrationKey = takeCalibrationMarker(*converted);
  const std::vector<torch::jit::Stack> calibration =  // taken whatever happens next: they may hold large tensors
      calibrationKey ? takeCalibrationInputs(*calibrationKey) : std::vector<torch::jit::Stack>{};
  const SkipReason reason = whyNotConvertible(*graph);
  if (reason != SkipReason::kNone) {
    GRAPH_DEBUG("torch_mp pass: leaving the graph as it is: ", toString(reason));
    record(reason);
    return;
  }
  ConversionReport report;
  try {
    specializeProfiledTypes(converted);
    ConvertOptions convertOptions = convertOptionsFor(*options, deviceOf(converted->block()));
    // on the recorded inputs, where there are some: its outputs must stay finite on them
    convertOptions.request.verifyOutputs = convertOptions.request.verifyOutputs && !calibration.empty();
    report = calibration.empty() ? ConvertTypedGraph(converted, convertOptions)
                                 : ConvertObservedGraph(converted, calibration, convertOptions);
  } catch (const c10::Error& error) {
    failed(error.what_without_backtrace());
    return;
  } catch (const std::exception& error) {
    failed(error.what());
    return;
  }
  if (report.nonFinite) {
    TORCH_WARN("torch_mp: the mixed-precision pass left a graph fp32: converted, it computes NaN or inf on recorded "
               "input ", report.nonFinite->run, " where the fp32 graph's values are finite (",
               report.nonFinite->outputTensor ? "output tensor " + std::to_string(*report.nonFinite->outputTensor)
                                              : "value %" + report.nonFinite->value,
               "); torch_mp.convert repairs such a plan");
    record(SkipReason::kNonFinite, std::move(report));
    return;
  }
  // The plan from the profile alone lowers at least what one with magnitudes lowers (the range guard only keeps
  // nodes fp32) where the profile typed every value, so such a graph it leaves alone is not made to record. Values
  // the executor does not profile (what only ops outside its fuser's reach read) keep their nodes fp32 until a run
  // is observed.
  const bool calibrating = !calibrationKey && options->calibrate;
  if (report.lowPrecisionNodes() == 0 && !(calibrating && report.unobservedNodes > 0)) {
    GRAPH_DEBUG("torch_mp pass: leaving the graph as it is: ", toString(SkipReason::kNothingToLower));
    record(SkipReason::kNothingToLower, std::move(report));
    return;
  }
  if (calibrating) {
    graph = recordingGraph(unprofiledCopy(*graph));
    GRAPH_UPDATE("torch_mp pass: recording the inputs to calibrate on:\n", *graph);
    record(SkipReason::kCalibrating);
    return;
  }
  const std::vector<c10::TensorTypePtr> guards = inputGuards(*converted);
  torch::jit::RemoveTensorTypeSpecializations(converted);
  // `graph` is still the one the executor gave; other inputs calibrate afresh
  std::shared_ptr<Graph> fallback = unprofiledCopy(*graph);
  takeCalibrationMarker(*fallback);
  guardWithFallback(*converted, guards, std::move(fallback));
  GRAPH_UPDATE("torch_mp pass: ", report.lowPrecisionNodes(), " nodes in ", report.dtype, ", ", report.casts.size(),
               " casts, ",
               report.rangesObserved ? "magnitudes observed on the recorded inputs"
                                     : "dtypes from the profile (magnitudes unknown, so no observed range guard)",
               ":\n", *converted);
  graph = converted;
  record(SkipReason::kNone, std::move(report), "", std::move(converted));
}

const char* toString(SkipReason reason) {
  switch (reason) {
    case SkipReason::kNone:
      return "converted";
    case SkipReason::kNoProfile:
      return "no profiled tensor types (legacy executor, or no tensors)";
    case SkipReason::kNeedsGradient:
      return "a tensor needs a gradient (training, not inference)";
    case SkipReason::kNotFrozen:
      return "weights are read from module attributes: freeze the module (torch.jit.freeze) before saving it";
    case SkipReason::kNothingToLower:
      return "the plan put no node in low precision";
    case SkipReason::kFailed:
      return "the conversion failed";
    case SkipReason::kNonFinite:
      return "converted, its outputs on the recorded inputs held NaN or inf where fp32's are finite";
    case SkipReason::kCalibrating:
      return "recording its inputs to calibrate on: runs fp32 until the executor optimizes it again";
  }
  return "?";
}

void enableMixedPrecisionPass(const JitPassOptions& options) {
  TORCH_CHECK_VALUE(options.conversion.request.keepIoDtypes,
                    "torch_mp: the load-time pass keeps input and output dtypes (its callers pass what the fp32 "
                    "model takes); convert the model with keep_io_dtypes=False instead");
  PassState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.registered) {
    torch::jit::registerPrePass(runMixedPrecisionPass);
    s.registered = true;
  }
  s.options = options;
}

void disableMixedPrecisionPass() {
  PassState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.options.reset();
  dropCalibrationInputs();  // graphs still recording would keep their copies of inputs for good
}

bool mixedPrecisionPassEnabled() {
  return mixedPrecisionPassOptions().has_value();
}

std::optional<JitPassOptions> mixedPrecisionPassOptions() {
  PassState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.options;
}

PassActivity mixedPrecisionPassActivity() {
  PassState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.activity;
}

} // namespace torch_mp::jit
