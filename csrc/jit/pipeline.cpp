#include "jit/pipeline.h"

#include <torch/csrc/jit/passes/common_subexpression_elimination.h>
#include <torch/csrc/jit/passes/constant_pooling.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/eliminate_no_ops.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/frozen_graph_optimizations.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/passes/peephole.h>
#include <torch/csrc/jit/passes/remove_mutation.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>
#include <unordered_set>

#include "jit/apply_precision_plan.h"
#include "jit/cancel_casts.h"
#include "jit/channels_last_convolutions.h"
#include "jit/flop_estimate.h"
#include "jit/fold_attribute_reads.h"
#include "jit/fold_constant_casts.h"
#include "jit/fuse_casts.h"
#include "jit/fuse_cudnn_convolutions.h"
#include "jit/fuse_pointwise.h"
#include "jit/graph_to_dataflow.h"
#include "jit/low_precision_io.h"
#include "jit/module_scope.h"
#include "jit/specialize_dtype_queries.h"
#include "jit/state_containers.h"
#include "jit/typed_observation.h"
#include "jit/value_observer.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Stack;

// The dtypes of every tensor in a (nested) output, e.g. "(Float, [Long, Float])". `sameAsFloat`, when given, is
// written as Float: with low-precision IO an output may be either.
std::string dtypeSignature(const c10::IValue& value, std::optional<c10::ScalarType> sameAsFloat = std::nullopt) {
  std::ostringstream out;
  if (value.isTensor()) {
    const c10::ScalarType dtype = value.toTensor().scalar_type();
    out << (dtype == sameAsFloat ? c10::ScalarType::Float : dtype);
  } else if (value.isTuple()) {
    out << '(';
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      out << dtypeSignature(element, sameAsFloat) << ',';
    }
    out << ')';
  } else if (value.isList()) {
    out << '[';
    for (const c10::IValue& element : value.toListRef()) {
      out << dtypeSignature(element, sameAsFloat) << ',';
    }
    out << ']';
  } else if (value.isGenericDict()) {
    out << '{';
    for (const auto& entry : value.toGenericDict()) {
      out << dtypeSignature(entry.key(), sameAsFloat) << ':' << dtypeSignature(entry.value(), sameAsFloat) << ',';
    }
    out << '}';
  } else {
    out << value.tagKind();
  }
  return out.str();
}

std::string signatureOf(const Stack& outputs, std::optional<c10::ScalarType> sameAsFloat = std::nullopt) {
  std::string signature;
  for (const c10::IValue& output : outputs) {
    signature += dtypeSignature(output, sameAsFloat) + ";";
  }
  return signature;
}

Stack runGraph(const std::shared_ptr<Graph>& graph, const Stack& inputs) {
  Stack stack;
  for (const c10::IValue& input : inputs) {
    stack.push_back(input.deepcopy());
  }
  torch::jit::Code code(graph, "torch_mp_verify");  // Code preprocesses a copy: the graph stays as it is
  torch::jit::InterpreterState(code).run(stack);
  return stack;
}

// Graph::lint walks a std::set of all the graph's nodes once per block (std::includes), so it costs nodes x blocks:
// about 8 s for 48k nodes in 457 blocks (benchmarks/CONVERSION_SCALING.md). It is a self-check (the tests lint every
// converted graph themselves), so it runs only where that product is small: graphs not both large and full of blocks.
bool lintIsCheap(const Graph& graph) {
  constexpr int64_t kLintBudget = 2'000'000;
  int64_t nodes = 0;
  int64_t blocks = 1;
  std::vector<const torch::jit::Block*> pending{graph.block()};
  while (!pending.empty()) {
    const torch::jit::Block* block = pending.back();
    pending.pop_back();
    for (const Node* node : block->nodes()) {
      ++nodes;
      for (const torch::jit::Block* sub : node->blocks()) {
        ++blocks;
        pending.push_back(sub);
      }
    }
  }
  return nodes * blocks <= kLintBudget;
}

// Whether a node left as it is runs in `dtype`: its floating tensor outputs are in it or, when it writes none (a
// size query), a tensor it reads is.
bool runsIn(const Node* node, const ObservedValues& observed, c10::ScalarType dtype) {
  auto floatingDtypes = [&](at::ArrayRef<const torch::jit::Value*> values) {
    std::vector<c10::ScalarType> dtypes;
    for (const torch::jit::Value* value : values) {
      auto seen = observed.find(value);
      if (seen != observed.end() && seen->second.isTensor && c10::isFloatingType(seen->second.dtype)) {
        dtypes.push_back(seen->second.dtype);
      }
    }
    return dtypes;
  };
  std::vector<c10::ScalarType> written = floatingDtypes(node->outputs());
  if (!written.empty()) {
    return std::all_of(written.begin(), written.end(), [&](c10::ScalarType d) { return d == dtype; });
  }
  const std::vector<c10::ScalarType> read = floatingDtypes(node->inputs());
  return std::find(read.begin(), read.end(), dtype) != read.end();
}

std::vector<NodeDecision> decisionsOf(
    const DataflowMapping& mapping,
    const core::PrecisionPlan& plan,
    const ObservedValues& observed,
    c10::ScalarType lowDtype) {
  std::vector<NodeDecision> decisions;
  for (size_t n = 0; n < mapping.nodes.size(); ++n) {
    const Node* node = mapping.nodes[n];
    if (node->kind() == c10::prim::Param || node->kind() == c10::prim::Return) {
      continue;
    }
    NodeDecision decision;
    decision.op = node->kind().toQualString();
    decision.output = node->outputs().empty() ? "" : node->output(0)->debugName();
    decision.scope = moduleScope(node);
    bool low = plan.precision[n] == core::Precision::kLow;
    if (mapping.ruleKinds[n] == core::RuleKind::kNotFp32) {  // left as it is: say what it runs in
      low = runsIn(node, observed, lowDtype);
    }
    decision.precision = low ? "low" : "fp32";
    decision.rule = mapping.rules[n];
    decision.ruleKind = mapping.ruleKinds[n];
    if (!node->outputs().empty() && isObservedFp32(observed, node->output(0)) &&
        observed.at(node->output(0)).rangeObserved) {
      decision.amax = observed.at(node->output(0)).largestMagnitude;
    }
    decision.flops = estimateFlops(node, observed);
    const core::OpCategory category = mapping.dataflow.nodes[n].category;
    if (plan.forcedToFp32[n]) {
      decision.rule += " [forced to fp32: shares a container or mutated tensor with an fp32 op, or reads fp32 "
                       "into a type-promoting op]";
    } else if (category == core::OpCategory::kFollow || category == core::OpCategory::kWidest) {
      decision.rule += low ? " [planned low: fewest cast bytes]" : " [planned fp32: fewest cast bytes]";
    }
    decisions.push_back(std::move(decision));
  }
  return decisions;
}

// Bytes a cast reads and writes per inference, at the observed size of the value it casts.
CastRecord castRecordOf(const Node* cast, const ObservedValues& observed) {
  const torch::jit::Value* source = cast->input(0);
  const c10::ScalarType from = recordedDtype(source).value();
  const c10::ScalarType to = recordedDtype(cast->output()).value();
  auto it = observed.find(source);
  const bool reached = it != observed.end() && blockRan(cast->owningBlock(), observed);
  const int64_t numel = reached ? it->second.numel : 0;
  return {source->debugName(), c10::toString(from), c10::toString(to),
          numel * static_cast<int64_t>(c10::elementSize(from) + c10::elementSize(to)), reached};
}

// Drops from `nodes` those no longer in the graph (destroyed by a pass), so a node created later at a freed address
// is never mistaken for one of them.
void keepLiveNodes(const torch::jit::Block* block, const std::unordered_set<const Node*>& nodes,
                   std::unordered_set<const Node*>& live) {
  for (const Node* node : block->nodes()) {
    for (const torch::jit::Block* sub : node->blocks()) {
      keepLiveNodes(sub, nodes, live);
    }
    if (nodes.count(node)) {
      live.insert(node);
    }
  }
}

void collectCasts(
    const torch::jit::Block* block,
    const std::unordered_set<const Node*>& inserted,
    const ObservedValues& observed,
    ConversionReport& report) {
  for (const Node* node : block->nodes()) {
    for (const torch::jit::Block* sub : node->blocks()) {
      collectCasts(sub, inserted, observed, report);
    }
    if (!inserted.count(node)) {
      continue;
    }
    CastRecord cast = castRecordOf(node, observed);
    report.castBytes += cast.bytes;
    report.casts.push_back(std::move(cast));
  }
}

} // namespace

void checkLowDtype(c10::ScalarType lowDtype) {
  TORCH_CHECK_VALUE(
      lowDtype == c10::ScalarType::Half || lowDtype == c10::ScalarType::BFloat16,
      "torch_mp: the low-precision dtype must be float16 or bfloat16, got ", lowDtype);
}

ConvertOptions defaultOptions(
    c10::DeviceType device,
    c10::ScalarType lowDtype,
    const core::CpuFeatures& cpu,
    std::optional<core::CudaCapability> gpu) {
  checkLowDtype(lowDtype);
  const core::Target target =
      core::targetFor(device == c10::DeviceType::CUDA, lowDtype == c10::ScalarType::Half);
  ConvertOptions options;
  options.lowDtype = lowDtype;
  options.policy = core::OpPolicy::defaults(target, cpu, gpu);
  options.policyName = core::toString(target);
  return options;
}

namespace {

// Appends each phase's seconds to the report as it ends.
class PhaseClock {
 public:
  explicit PhaseClock(ConversionReport& report) : report_(report) {}
  void end(const char* phase) {
    const auto now = std::chrono::steady_clock::now();
    report_.phases.emplace_back(phase, std::chrono::duration<double>(now - phaseStart_).count());
    phaseStart_ = now;
  }
  void finish() {
    report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  ConversionReport& report_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point phaseStart_ = start_;
};

ConversionReport emptyReport(const ConvertOptions& options) {
  checkLowDtype(options.lowDtype);
  ConversionReport report;
  report.dtype = c10::toString(options.lowDtype);
  report.policy = options.policyName;
  report.planner = options.planner == core::PlanMethod::kMinCut ? "min-cut" : "greedy";
  return report;
}

// 1. fp32 clean-up, before any cast exists: PyTorch's frozen-graph folding, mutation removal, and freezing's own
//    simplifications once more now that the mutation is gone (a list no longer appended to has a known length, a
//    bias concatenated from constant parts becomes a constant, a branch on a known flag goes). Twice: what the
//    simplifications expose (a convolution and its batch norm out of a removed branch) folds in the second round,
//    so converting the result again finds nothing left to change.
void cleanUp(std::shared_ptr<Graph>& graph, ConversionReport& report) {
  for (int round = 0; round < 2; ++round) {
    torch::jit::OptimizeFrozenGraph(graph, /*optimize_numerics=*/true);
    torch::jit::RemoveTensorMutation(graph);
    torch::jit::RemoveListMutation(graph);
    torch::jit::EliminateCommonSubexpression(graph);
    torch::jit::PeepholeOptimize(graph);
    torch::jit::ConstantPropagation(graph, /*ignore_custom_classes=*/true);
    torch::jit::ConstantPooling(graph);
    torch::jit::EliminateNoOps(graph);
    torch::jit::LowerSimpleTuples(graph);
    torch::jit::EliminateDeadCode(graph);
  }
  report.weightBytesBefore = constantBytes(*graph);
}

// Stages 2 (what the observation leaves to infer) to 6, lint and the report's casts and weights, on a cleaned-up
// graph whose values `observed` describes.
void convertObserved(
    std::shared_ptr<Graph>& graph,
    ObservedValues& observed,
    const StateContainers* state,
    const ConvertOptions& options,
    ConversionReport& report,
    PhaseClock& clock) {
  // 2. Dtype knowledge, completed.
  inferUnreachedDtypes(graph, observed);
  recordObservedDtypes(observed);
  SpecializeDtypeQueries(graph, observed);  // the dead queries go with the final dead-code pass
  clock.end("observe");

  // 3. Plan.
  DataflowMapping mapping =
      buildDataflow(graph, observed, options.policy, options.lowDtype, options.nodeRule, state);
  core::PrecisionPlan plan = core::planPrecision(mapping.dataflow, options.planner);
  report.nodes = decisionsOf(mapping, plan, observed, options.lowDtype);
  report.unknownOps = mapping.unknownOps;
  report.unobservedNodes = mapping.unobservedNodes;
  clock.end("plan");

  // 4. Apply.
  std::unordered_set<const Node*> inserted = applyPrecisionPlan(graph, mapping, plan, observed, options.lowDtype);
  if (state) {
    castStateContainers(*state, mapping, plan, options.lowDtype);
  }
  clock.end("apply");

  // 5. Cancel casts that change nothing (low-precision IO first: its casts meet the plan's head to head), fuse
  //    casts into the ops that read them; drop the fp32 constants nobody reads any more; share equal constants. A
  //    cast leaves `inserted` before it is destroyed, so the report lists exactly the casts that remain, and the
  //    fused ones are counted apart.
  if (options.lowPrecisionIO) {
    LowerGraphIO(graph, options.lowDtype, inserted);
  }
  CancelCasts(graph);
  FoldConstantCasts(graph, inserted);
  {
    std::unordered_set<const Node*> live;
    keepLiveNodes(graph->block(), inserted, live);
    inserted = std::move(live);
  }
  const std::function<void(const Node*)> countFusedCast = [&](const Node* cast) {
    if (inserted.erase(cast)) {
      report.fusedCasts += 1;
      report.fusedCastBytes += castRecordOf(cast, observed).bytes;
    }
  };
  if (options.fuseCasts) {
    FuseCasts(graph, observed, countFusedCast);
  }
  // Mutation removal once more: the fp32 clean-up keeps some in-place writes (timm DLA-34's residual add_ and
  // relu_) that it removes from the converted graph, so a second conversion would make them out of place.
  torch::jit::RemoveTensorMutation(graph);
  torch::jit::EliminateDeadCode(graph);
  clock.end("cancel");

  // 6. CUDA layout and kernels: channels_last before the convolution fusion (which keeps the re-laid weights), both
  //    before fused pointwise kernels, which would otherwise take the relus and adds cuDNN can fuse.
  if (options.channelsLast) {
    report.channelsLastConvolutions = ConvertConvolutionsToChannelsLast(graph, observed);
  }
  if (options.fuseConvolutions) {
    const FusedConvolutions fused = FuseCudnnConvolutions(graph, observed);
    report.fusedConvolutions = fused.convRelu + fused.convAddRelu;
  }
  if (options.fusedKernels) {
    report.fusedPointwise = FusePointwise(graph, observed, countFusedCast);
  }
  torch::jit::EliminateDeadCode(graph);
  // equal constants shared, then the equal casts of them (unreached readers of one weight's views) merged
  torch::jit::ConstantPooling(graph);
  torch::jit::EliminateCommonSubexpression(graph);
  clock.end("kernels");

  // 7. Report (the outputs' dtypes are checked by the caller that can run the graph).
  if (lintIsCheap(*graph)) {
    graph->lint();
  }
  collectCasts(graph->block(), inserted, observed, report);
  report.weightBytesAfter = constantBytes(*graph);
  reportKeptFp32Weights(*graph, report);
  clock.end("report");
}

} // namespace

ConversionReport ConvertToMixedPrecision(
    std::shared_ptr<Graph>& graph,
    const Stack& inputs,
    const ConvertOptions& options,
    const std::vector<Stack>& calibration) {
  ConversionReport report = emptyReport(options);
  PhaseClock clock(report);
  TORCH_CHECK(
      inputs.size() == graph->inputs().size(),
      "torch_mp: the graph takes ", graph->inputs().size(), " inputs but ", inputs.size(), " were given");
  for (const Stack& extra : calibration) {
    TORCH_CHECK_VALUE(
        extra.size() == inputs.size(), "torch_mp: a calibration input has ", extra.size(),
        " values where the example inputs have ", inputs.size());
  }

  if (!inputs.empty()) {
    FoldAttributeReads(graph, inputs[0]);  // inputs[0] is the module in a method's graph
  }
  cleanUp(graph, report);
  clock.end("cleanup");

  auto observe = [&] {
    try {
      return observeValues(graph, inputs, calibration);
    } catch (const c10::Error& error) {
      TORCH_CHECK_VALUE(false, kModelRunFailed, ": ", error.what_without_backtrace());
    } catch (const std::exception& error) {
      TORCH_CHECK_VALUE(false, kModelRunFailed, ": ", error.what());
    }
  };
  Observation observation = observe();
  // Dtype queries answered from the observation make constant what compares them (nn.MultiheadAttention's
  // fast-path checks); folded now, on a graph observed afresh, they leave nothing for a second conversion to fold.
  if (SpecializeDtypeQueries(graph, observation.values) &&
      torch::jit::ConstantPropagation(graph, /*ignore_custom_classes=*/true)) {
    torch::jit::EliminateDeadCode(graph);
    observation = observe();
  }
  const std::optional<StateContainers> state =
      inputs.empty() ? std::nullopt : findStateContainers(*graph, inputs[0]);
  convertObserved(graph, observation.values, state ? &*state : nullptr, options, report, clock);

  if (options.verifyOutputs) {
    Stack verifyInputs = inputs;
    if (!verifyInputs.empty()) {
      verifyInputs[0] = inputs[0].deepcopy();  // the converted model's state stays as the conversion found it
    }
    std::optional<c10::ScalarType> lowAsFloat;
    if (options.lowPrecisionIO) {
      lowAsFloat = options.lowDtype;
      for (size_t i = 0; i < verifyInputs.size(); ++i) {
        if (recordedDtype(graph->inputs()[i]) == options.lowDtype) {
          verifyInputs[i] = lowerInputValue(verifyInputs[i], options.lowDtype);
        }
      }
    }
    const std::string expected = signatureOf(observation.outputs);
    const std::string actual = signatureOf(runGraph(graph, verifyInputs), lowAsFloat);
    TORCH_CHECK(
        expected == actual, "torch_mp internal error: converted outputs have dtypes ", actual, " instead of ",
        expected);
  }
  clock.end("verify");
  clock.finish();
  return report;
}

ConversionReport ConvertTypedGraph(std::shared_ptr<Graph>& graph, const ConvertOptions& options) {
  ConversionReport report = emptyReport(options);
  report.rangesObserved = false;
  PhaseClock clock(report);
  cleanUp(graph, report);
  clock.end("cleanup");
  ObservedValues observed = observeTypes(graph);
  convertObserved(graph, observed, /*state=*/nullptr, options, report, clock);
  clock.finish();
  return report;
}

ConvertedModule convertModule(
    const torch::jit::Module& module,
    const std::vector<c10::IValue>& exampleInputs,
    const ConvertOptions& options,
    const std::vector<std::vector<c10::IValue>>& calibrationInputs) {
  TORCH_CHECK(
      !module.hasattr("training") || !module.is_training(),
      "torch_mp: the module is in training mode; call .eval() before converting");
  torch::jit::Module frozen = torch::jit::freeze_module(module);
  ownAttributeContainers(frozen);
  std::shared_ptr<Graph> graph = frozen.get_method("forward").graph();
  Stack inputs;
  inputs.push_back(frozen._ivalue());
  inputs.insert(inputs.end(), exampleInputs.begin(), exampleInputs.end());
  std::vector<Stack> calibration;
  for (const std::vector<c10::IValue>& extra : calibrationInputs) {
    Stack stack{frozen._ivalue()};
    stack.insert(stack.end(), extra.begin(), extra.end());
    calibration.push_back(std::move(stack));
  }
  ConversionReport report = ConvertToMixedPrecision(graph, inputs, options, calibration);
  dropUnreadAttributes(frozen);
  ownAttributeTensors(frozen);
  return {std::move(frozen), std::move(report)};
}

} // namespace torch_mp::jit
