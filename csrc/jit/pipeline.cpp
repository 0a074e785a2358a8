#include "jit/pipeline.h"

#include <torch/csrc/jit/passes/eliminate_no_ops.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include <algorithm>

#include "jit/convert_options.h"
#include "jit/ir/casts.h"
#include "jit/ir/writers.h"
#include "jit/plan/state_containers.h"
#include "jit/prepare/fold_attribute_reads.h"
#include "jit/prepare/inline_module_paths.h"
#include "jit/prepare/specialize_dtype_queries.h"
#include "jit/prepare/typed_observation.h"
#include "jit/prepare/value_observer.h"
#include "jit/report/assemble_report.h"
#include "jit/report/verify_outputs.h"
#include "jit/rewrite/apply_precision_plan.h"
#include "jit/rewrite/cancel_casts.h"
#include "jit/rewrite/channels_last_convolutions.h"
#include "jit/rewrite/column_major_matmul_weights.h"
#include "jit/rewrite/fold_constant_casts.h"
#include "jit/rewrite/fuse_casts.h"
#include "jit/rewrite/fuse_cudnn_convolutions.h"
#include "jit/rewrite/fuse_normalization.h"
#include "jit/rewrite/fuse_pointwise.h"
#include "jit/rewrite/low_precision_io.h"
#include "jit/upstream/fold_frozen_patterns.h"
#include "jit/upstream/merge_equal_nodes.h"
#include "jit/upstream/peephole_optimize.h"
#include "jit/upstream/propagate_constants.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Graph;
using torch::jit::Stack;

// 1. fp32 clean-up, before any cast exists: PyTorch's frozen-graph folding (FoldFrozenPatterns: OptimizeFrozenGraph,
//    each fold only where its ops are), mutation removal, and freezing's own simplifications once more now that the
//    mutation is gone (a list no longer appended to has a known length, a bias concatenated from constant parts
//    becomes a constant, a branch on a known flag goes; freezing's graph is not always at their fixed point either:
//    CSE still merges nn.LSTM's size checks). Twice: what the simplifications expose (a convolution and its batch
//    norm out of a removed branch) folds in the second round, so converting the result again finds nothing left to
//    change. Once where the first round changed nothing after its folding: the folding is at its fixed point, so a
//    second round would run the same passes on the same graph and change nothing either. Shape and type queries are
//    never folded from the values' types: the load-time pass cleans up graphs typed with the sizes of one profiled
//    run, which other batch sizes and ranks must still run (its guard checks dtype and device only); dtype queries
//    are answered from the observation instead.
void cleanUp(std::shared_ptr<Graph>& graph) {
  for (int round = 0; round < 2; ++round) {
    FoldFrozenPatterns(graph);
    const size_t folded = structureHash(*graph);
    torch::jit::RemoveTensorMutation(graph);
    torch::jit::RemoveListMutation(graph);
    eliminateCommonSubexpressions(graph);
    peepholeOptimize(graph);
    propagateConstants(graph);
    poolConstants(graph);
    torch::jit::EliminateNoOps(graph);
    torch::jit::LowerSimpleTuples(graph->block());  // the graph overload sweeps dead code with alias analysis
    eliminateDeadCode(graph);
    if (structureHash(*graph) == folded) {
      break;
    }
  }
}

// 2. What the observation leaves to infer, recorded in the graph's types; dtype queries answered from it.
void completeObservation(const std::shared_ptr<Graph>& graph, ObservedValues& observed) {
  inferUnreachedDtypes(graph, observed);
  recordObservedDtypes(observed);
  SpecializeDtypeQueries(graph, observed);  // the dead queries go with the final dead-code pass
}

// 3. Plan (with the state containers the module keeps, where it has them) and 4. apply.
void planAndApply(
    const std::shared_ptr<Graph>& graph,
    const PreparedGraph& prepared,
    const ConvertOptions& options,
    CastLedger& casts,
    ConversionReport& report,
    StageRunner& stages) {
  const std::optional<StateContainers> state =
      prepared.inputs.empty() ? std::nullopt : findStateContainers(*graph, prepared.inputs[0]);
  auto [mapping, plan] = stages.run("plan", graph, [&] {
    DataflowMapping mapping = buildDataflow(
        graph, prepared.observed, options.request.policy, scalarTypeOf(options.request.lowDtype), options.nodeRule, options.run.keepFp32,
        state ? &*state : nullptr);
    core::PrecisionPlan plan = core::planPrecision(mapping.dataflow, options.request.planner);
    report.nodes = decisionsOf(mapping, plan, prepared.observed, scalarTypeOf(options.request.lowDtype));
    report.unknownOps = mapping.unknownOps;
    report.unobservedNodes = mapping.unobservedNodes;
    return std::make_pair(std::move(mapping), std::move(plan));
  });
  stages.run("apply", graph, [&] {
    applyPrecisionPlan(graph, mapping, plan, prepared.observed, scalarTypeOf(options.request.lowDtype), casts);
    if (state) {
      castStateContainers(*state, mapping, plan, scalarTypeOf(options.request.lowDtype));
    }
  });
}

// 5. Cancel casts that change nothing (low-precision IO first: its casts meet the plan's head to head), fuse casts into
//    the ops that read them.
void cancelAndFuseCasts(
    std::shared_ptr<Graph>& graph, const PreparedGraph& prepared, const ConvertOptions& options, CastLedger& casts) {
  if (!options.request.keepIoDtypes) {
    LowerGraphIO(graph, scalarTypeOf(options.request.lowDtype), casts);
  }
  CancelCasts(graph);
  FoldConstantCasts(graph);
  if (options.fuseCasts) {
    FuseCasts(graph, casts, prepared.observed);
  }
}

// PyTorch's clean-up passes after 5 (the `tidy` phase): mutation removal once more (the fp32 clean-up keeps some
// in-place writes, timm DLA-34's residual add_ and relu_, that it removes from the converted graph, so a second
// conversion would make them out of place), then what nobody reads any more goes. Only mutation removal's rewrite
// is of writes, so where no node may write it is skipped: it would match every node the conversion created to its
// overload to find none.
void removeMutationAndDeadCode(std::shared_ptr<Graph>& graph) {
  if (graphMayWrite(*graph)) {
    torch::jit::RemoveTensorMutation(graph);
  }
  eliminateDeadCode(graph);
}

// 6. Layouts and kernels: CPU matmul weights column-major; on CUDA channels_last before the convolution fusion (which
//    keeps the re-laid weights), both before fused pointwise kernels, which would otherwise take the relus and adds
//    cuDNN can fuse. Returns whether any of them rewrote the graph (which leaves dead code).
bool layOutAndFuseKernels(
    std::shared_ptr<Graph>& graph,
    const PreparedGraph& prepared,
    const ConvertOptions& options,
    CastLedger& casts,
    ConversionReport& report) {
  report.columnMajorMatmulWeights = StoreMatmulWeightsColumnMajor(graph);
  // before the CUDA layout pass, which keeps chains NHWC through the fused norms (layout kKeeps)
  if (options.kernels == Kernels::kFused) {
    report.fusedNormalizations = FuseNormalization(graph, prepared.observed, casts);
  }
  // Both rewrite only convolutions the example inputs ran on a CUDA device: where nothing did, neither walks the graph.
  const bool ranOnCuda = std::any_of(prepared.observed.begin(), prepared.observed.end(), [](const auto& entry) {
    return entry.second.isTensor && entry.second.device.is_cuda();
  });
  if (options.channelsLast && ranOnCuda) {
    report.channelsLastConvolutions = ConvertConvolutionsToChannelsLast(graph, prepared.observed);
  }
  if (options.fuseConvolutions && ranOnCuda) {
    const FusedConvolutions fused = FuseCudnnConvolutions(graph, prepared.observed);
    report.fusedConvolutions = fused.convRelu + fused.convAddRelu;
  }
  if (options.kernels == Kernels::kFused) {
    report.fusedPointwise = FusePointwise(graph, prepared.observed, casts);
  }
  return report.columnMajorMatmulWeights + report.fusedNormalizations + report.channelsLastConvolutions +
             report.fusedConvolutions + report.fusedPointwise > 0;
}

// 7. The report, from the bookkeeping taken off the graph before constant pooling and common-subexpression
//    elimination (in `tidy`) merge equal constants and equal nodes (the casts of equal constants: unreached readers
//    of one weight's views) whatever their ids; neither creates a node, so the bookkeeping stays valid for what is
//    left. The ids go back where asked.
void reportConversion(
    std::shared_ptr<Graph>& graph,
    const Bookkeeping& bookkeeping,
    const ConvertOptions& options,
    const CastLedger& casts,
    ConversionReport& report) {
  lintWhereCheap(*graph);
  reportConvertedGraph(*graph, bookkeeping, casts, report);
  if (options.run.keepNodeIds) {
    restoreNodeIds(*graph, bookkeeping.ids);
  }
}

// Stages 3-7 on the module's forward (`forward`, in place), then what the module keeps: no attribute the graph no
// longer reads, its own copy of each tensor attribute.
ConvertedModule convertInto(torch::jit::Module module, PreparedGraph& forward, const ConvertOptions& options) {
  ConversionReport report = convertPrepared(forward, options);
  dropUnreadAttributes(module);
  ownAttributeTensors(module);
  return {std::move(module), std::move(report)};
}

} // namespace

PreparedGraph prepareGraph(std::shared_ptr<Graph> graph, const Stack& inputs, const std::vector<Stack>& calibration) {
  TORCH_CHECK(
      inputs.size() == graph->inputs().size(),
      "torch_mp: the graph takes ", graph->inputs().size(), " inputs but ", inputs.size(), " were given");
  for (const Stack& extra : calibration) {
    TORCH_CHECK_VALUE(
        extra.size() == inputs.size(), "torch_mp: a calibration input has ", extra.size(),
        " values where the example inputs have ", inputs.size());
  }
  PreparedGraph prepared;
  StageRunner stages(prepared.phases);
  stages.run("cleanup", graph, [&] {
    if (!inputs.empty()) {
      FoldAttributeReads(graph, inputs[0]);  // inputs[0] is the module in a method's graph
    }
    cleanUp(graph);
  });
  stages.run("observe", graph, [&] {
    Observation observation = observeValues(graph, inputs, calibration);
    // Dtype queries answered from the observation make constant what compares them (nn.MultiheadAttention's
    // fast-path checks); folded now, on a graph observed afresh, they leave nothing for a second conversion to fold.
    if (SpecializeDtypeQueries(graph, observation.values) &&
        propagateConstants(graph)) {
      eliminateDeadCode(graph);
      observation = observeValues(graph, inputs, calibration);
    }
    completeObservation(graph, observation.values);
    prepared.observed = std::move(observation.values);
    prepared.outputs = std::move(observation.outputs);
    prepared.calibrationOutputs = std::move(observation.calibrationOutputs);
  });
  assignNodeIds(*graph);
  prepared.weightBytesBefore = constantBytes(*graph);
  prepared.inputs = inputs;
  prepared.calibration = calibration;
  prepared.graph = std::move(graph);
  return prepared;
}

PreparedGraph prepareTypedGraph(std::shared_ptr<Graph> graph) {
  PreparedGraph prepared;
  prepared.rangesObserved = false;
  StageRunner stages(prepared.phases);
  stages.run("cleanup", graph, [&] { cleanUp(graph); });
  stages.run("observe", graph, [&] {
    prepared.observed = observeTypes(graph);
    completeObservation(graph, prepared.observed);
  });
  assignNodeIds(*graph);
  prepared.weightBytesBefore = constantBytes(*graph);
  prepared.graph = std::move(graph);
  return prepared;
}

ConversionReport convertPrepared(PreparedGraph& prepared, const ConvertOptions& options) {
  ConversionReport report = contract::reportFor(options.request);
  report.rangesObserved = prepared.rangesObserved;
  report.weightBytesBefore = prepared.weightBytesBefore;
  report.phases = prepared.phases;
  std::shared_ptr<Graph>& graph = prepared.graph;
  StageRunner stages(report.phases);
  CastLedger casts(prepared.observed);
  // No stage adds a node that may write: where the graph holds none, the stages and the clean-up between them ask
  // without walking it.
  const WriteFreeGraph writeFree = stages.run("plan", graph, [&] { return WriteFreeGraph(graph); });
  planAndApply(graph, prepared, options, casts, report, stages);
  stages.run("cancel", graph, [&] { cancelAndFuseCasts(graph, prepared, options, casts); });
  stages.run("tidy", graph, [&] { removeMutationAndDeadCode(graph); });
  if (stages.run("kernels", graph, [&] { return layOutAndFuseKernels(graph, prepared, options, casts, report); })) {
    stages.run("tidy", graph, [&] { eliminateDeadCode(graph); });
  }
  const Bookkeeping bookkeeping =
      stages.run("report", graph, [&] { return takeBookkeeping(*graph, report.nodes.size()); });
  stages.run("tidy", graph, [&] {
    poolConstants(graph);
    eliminateCommonSubexpressions(graph);
  });
  stages.run("report", graph, [&] {
    writeFree.check();
    reportConversion(graph, bookkeeping, options, casts, report);
  });
  if (options.request.verifyOutputs && !prepared.inputs.empty()) {
    stages.run("verify", graph, [&] {
      report.nonFinite = verifyConversion(
          graph, prepared.inputs, prepared.outputs, prepared.calibration, prepared.calibrationOutputs,
          prepared.observed, options.request.keepIoDtypes ? std::nullopt : std::make_optional(scalarTypeOf(options.request.lowDtype)));
    });
  }
  report.seconds = totalSeconds(report.phases);
  return report;
}

ConversionReport ConvertTypedGraph(std::shared_ptr<Graph>& graph, const ConvertOptions& options) {
  PreparedGraph prepared = prepareTypedGraph(graph);
  ConversionReport report = convertPrepared(prepared, options);
  graph = prepared.graph;
  return report;
}

ConversionReport ConvertObservedGraph(
    std::shared_ptr<Graph>& graph,
    const std::vector<Stack>& runs,
    const ConvertOptions& options) {
  TORCH_CHECK(!runs.empty(), "torch_mp: no recorded inputs to observe the graph on");
  PreparedGraph prepared = prepareGraph(graph, runs.front(), std::vector<Stack>(runs.begin() + 1, runs.end()));
  ConversionReport report = convertPrepared(prepared, options);
  graph = prepared.graph;
  return report;
}

PreparedModel prepareModule(
    const torch::jit::Module& module,
    const std::vector<c10::IValue>& exampleInputs,
    const std::vector<std::vector<c10::IValue>>& calibrationInputs) {
  TORCH_CHECK(
      !module.hasattr("training") || !module.is_training(),
      "torch_mp: the module is in training mode; call .eval() before converting");
  Phases freezing;
  torch::jit::Module frozen = StageRunner(freezing).run("freeze", module.get_method("forward").graph(), [&] {
    torch::jit::Module named = module.clone(/*inplace=*/true);  // its own methods, the module's attribute values
    InlineModulePaths(named);
    torch::jit::Module copy = torch::jit::freeze_module(named);
    ownAttributeContainers(copy);
    return copy;
  });
  Stack inputs{frozen._ivalue()};
  inputs.insert(inputs.end(), exampleInputs.begin(), exampleInputs.end());
  std::vector<Stack> calibration;
  for (const std::vector<c10::IValue>& extra : calibrationInputs) {
    Stack stack{frozen._ivalue()};
    stack.insert(stack.end(), extra.begin(), extra.end());
    calibration.push_back(std::move(stack));
  }
  PreparedGraph forward = prepareGraph(frozen.get_method("forward").graph(), inputs, calibration);
  forward.phases.insert(forward.phases.begin(), freezing.begin(), freezing.end());
  return {std::move(frozen), std::move(forward)};
}

ConvertedModule convertPreparedModule(const PreparedModel& prepared, const ConvertOptions& options) {
  TORCH_CHECK(prepared.forward.graph, "torch_mp: this preparation was used up by a conversion in place");
  PreparedGraph copy;
  copy.phases = prepared.forward.phases;
  // A clone copies the graph (node ids included) and deep-copies the attributes, shared ones staying shared.
  torch::jit::Module module = StageRunner(copy.phases).run("clone", prepared.forward.graph, [&] {
    torch::jit::Module clone = prepared.frozen.clone();
    copy.graph = clone.get_method("forward").graph();
    copy.observed = observationOfCopy(prepared.forward.observed, *prepared.forward.graph, *copy.graph);
    return clone;
  });
  copy.inputs = prepared.forward.inputs;
  copy.inputs[0] = module._ivalue();
  copy.outputs = prepared.forward.outputs;
  copy.calibration = prepared.forward.calibration;
  for (Stack& calibration : copy.calibration) {
    calibration[0] = module._ivalue();
  }
  copy.calibrationOutputs = prepared.forward.calibrationOutputs;
  copy.weightBytesBefore = prepared.forward.weightBytesBefore;
  copy.rangesObserved = prepared.forward.rangesObserved;
  return convertInto(std::move(module), copy, options);
}

ConvertedModule convertModule(
    const torch::jit::Module& module,
    const std::vector<c10::IValue>& exampleInputs,
    const ConvertOptions& options,
    const std::vector<std::vector<c10::IValue>>& calibrationInputs) {
  return convertPreparedModule(prepareModule(module, exampleInputs, calibrationInputs), options);
}

ConvertedModule convertPreparedModule(PreparedModel&& prepared, const ConvertOptions& options) {
  TORCH_CHECK(prepared.forward.graph, "torch_mp: this preparation was used up by a conversion in place");
  PreparedModel used = std::move(prepared);  // `prepared` holds no graph now: a second use fails the check above
  return convertInto(std::move(used.frozen), used.forward, options);
}

} // namespace torch_mp::jit
