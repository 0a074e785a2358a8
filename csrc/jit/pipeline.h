// The conversion pipeline, in order. Each step is its own pass; this file only sequences them.
//
// Preparation (once per model, whatever is planned from it):
//   0. freeze            method calls inlined with each module's whole path (inline_module_paths), then PyTorch's
//                        freezing, of a copy
//   1. fp32 clean-up     tensor attributes freezing left become constants (fold_attribute_reads); PyTorch's
//                        frozen-graph folding (conv+bn, conv+add/mul, linear+bn) where those ops are
//                        (fold_frozen_patterns), removal of in-place mutation and freezing's simplifications (pooling
//                        and CSE: merge_equal_nodes), while every constant is still fp32
//   2. dtype knowledge   one observed run on the example inputs and one per calibration input (value_observer, node
//                        by node: graph_runner), or
//                        the types the graph executor profiled (typed_observation, for the load-time pass);
//                        completed statically for views in branches not reached; dtype queries answered from it
//                        (specialize_dtype_queries); then every node is numbered (jit/ir/ir_utils: node ids)
// Planning and applying (per policy; on a copy of the prepared graph, or on the graph itself):
//   3. plan              graph -> dataflow (graph_to_dataflow, asking the fallback's kept nodes, the policy's
//                        exclusions and the user's node rule; the module's state containers from state_containers),
//                        min-cut precision plan (core/precision_planner)
//   4. apply             casts at plan boundaries, low-precision constants (apply_precision_plan); what the state
//                        containers hold cast with them (state_containers)
//   5. cancel casts      low-precision IO on request (low_precision_io); lossless round trips and no-op casts
//      and fuse casts    (cancel_casts); the model's own casts of constants folded (fold_constant_casts); casts
//                        fused into the ops that read them (fuse_casts: dtype= arguments, mixed-dtype arithmetic,
//                        cast chains, out-dtype matmuls); then (phase `tidy`, PyTorch's passes) mutation removal
//                        and dead code
//   6. CUDA layout       with fused kernels, instance / group norms (with a channel cat of them and eval batch norms,
//                        and a relu) into torch_mp::fused_channel_norm calls (fuse_normalization); CUDA
//                        convolutions channels_last (channels_last_convolutions); conv (+add) +relu as one cuDNN
//      and kernels       call (fuse_cudnn_convolutions); with fused kernels, elementwise chains into
//                        torch_mp::fused_pointwise calls (fuse_pointwise)
//   7. report and check  node ids and the cast ledger's marks taken off the graph, then (`tidy`) constant pooling
//                        and common-subexpression elimination (merge_equal_nodes); lint, report (assemble_report);
//                        outputs keep their dtypes (verify_outputs, where inputs exist)
// Every cast stages 4-6 create, fold or remove goes through one CastLedger (jit/ir/casts); each stage runs through a
// StageRunner (jit/stage_runner), which times it and dumps the graph around it.
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <string>
#include <vector>

#include "jit/ir/observed_values.h"
#include "jit/report/conversion_report.h"
#include "jit/stage_runner.h"
#include "torch_mp/convert.h"

namespace torch_mp::jit {

// A graph after stages 1-2: cleaned up in fp32, its dtypes known, its nodes numbered.
struct PreparedGraph {
  std::shared_ptr<torch::jit::Graph> graph;
  ObservedValues observed;   // of `graph`'s values
  torch::jit::Stack inputs;   // the example inputs (the module first for a method); none for a profiled graph
  torch::jit::Stack outputs;  // what the graph returned on them
  std::vector<torch::jit::Stack> calibration;         // the calibration inputs, in the same form
  std::vector<torch::jit::Stack> calibrationOutputs;  // what the graph returned on each
  int64_t weightBytesBefore = 0;
  bool rangesObserved = true;  // false where dtypes came from the executor's profile: no magnitudes
  Phases phases;               // cleanup, observe
};

// Stages 1-2 on `graph`, in place. `inputs` are the graph's inputs in order (the module first for a method);
// `calibration` holds more input stacks of the same form, observed for value ranges only. Throws ModelRunError when
// the graph fails on them.
PreparedGraph prepareGraph(
    std::shared_ptr<torch::jit::Graph> graph,
    const torch::jit::Stack& inputs,
    const std::vector<torch::jit::Stack>& calibration = {});

// Stages 1-2 for a graph whose tensor values carry their dtype, device and sizes in their types, as the graph
// executor profiled them (typed_observation), without running it: the load-time pass (jit_pass).
PreparedGraph prepareTypedGraph(std::shared_ptr<torch::jit::Graph> graph);

// Stages 3-7 on `prepared.graph`, in place (the prepared graph is used up). Throws c10::Error on bad options or
// internal failure; the caller converts a copy it can throw away.
ConversionReport convertPrepared(PreparedGraph& prepared, const ConvertOptions& options);

// prepareTypedGraph, then convertPrepared: the load-time pass's conversion of a profiled graph, in place. No
// observed magnitudes, so no observed range guard; the caller checks what running needs (outputs' dtypes).
ConversionReport ConvertTypedGraph(std::shared_ptr<torch::jit::Graph>& graph, const ConvertOptions& options);

// prepareGraph on `runs` (the first as example inputs, the others as calibration), then convertPrepared: the
// load-time pass's conversion of a graph whose inputs calibration_inputs recorded, in place, with magnitudes.
ConversionReport ConvertObservedGraph(
    std::shared_ptr<torch::jit::Graph>& graph,
    const std::vector<torch::jit::Stack>& runs,
    const ConvertOptions& options);

// A module prepared once, for any number of conversions: a frozen copy in eval mode (its own dict and list
// attributes), its forward prepared.
struct PreparedModel {
  torch::jit::Module frozen;
  PreparedGraph forward;  // frozen's forward graph
};

// Freezes a copy of a scripted module in eval mode (or of an already frozen one) and prepares its forward.
// `calibrationInputs` are more forward inputs (without the module), observed for value ranges only. The module
// passed in is not modified.
PreparedModel prepareModule(
    const torch::jit::Module& module,
    const std::vector<c10::IValue>& exampleInputs,
    const std::vector<std::vector<c10::IValue>>& calibrationInputs = {});

// Converts a copy of the prepared module; `prepared` stays as it is, ready for the next plan. (convertModule,
// torch_mp/convert.h: prepareModule, then convertPreparedModule.)
ConvertedModule convertPreparedModule(const PreparedModel& prepared, const ConvertOptions& options);
// Converts the prepared module itself, which is used up (no copy: for a preparation made for one conversion).
ConvertedModule convertPreparedModule(PreparedModel&& prepared, const ConvertOptions& options);

} // namespace torch_mp::jit
