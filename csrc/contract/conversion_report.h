// What a conversion decided and what it cost, whatever front converted: per node the precision and the rule that
// chose it, every cast with the bytes it moves per inference, weight bytes before and after, ops in no policy list,
// the converted graph by integer node ids. Convert's pipeline fills it (jit/report/assemble_report), the export front
// too (jit/report/program_report). Python reads it as a dict (csrc/python/report_bindings.cpp) and writes JSON with
// its json module. Torch-free (CMake target torch_mp_contract).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "contract/conversion_request.h"
#include "contract/node_id.h"
#include "core/policy_vocabulary.h"

namespace torch_mp::contract {

// A cast the converted model holds (TorchScript: what CastLedger::recordOf reads off a cast).
struct CastRecord {
  NodeId id = -1;     // its item in the report's graph
  std::string value;  // debug name of the value cast
  std::string from;   // dtype names, e.g. "Float"
  std::string to;
  int64_t bytes = 0;  // read + written per inference, at the example inputs' sizes
  bool reached = true;  // whether the example inputs ran it (a cast on a path they skipped moves no bytes then)
};

struct NodeDecision {
  NodeId id = -1;         // the node's id (contract/node_id.h): the same in every plan made from one preparation
  std::string op;         // "aten::conv2d"
  std::string output;     // debug name of the first output (for people: programs go by `id`)
  std::string scope;      // module path, "layer1.0.conv1"
  core::Precision precision = core::Precision::kFp32;  // what it runs in
  core::OpCategory category = core::OpCategory::kFp32;  // what its rule made it (follow and widest: the planner chose)
  bool forcedToFp32 = false;  // a follow/widest node the planner had to put in fp32 (a shared container, a write)
  std::string rule;       // why, for people
  std::string reason;     // the rule's reason alone: the policy entry's, the user's, the guard's finding
  core::RuleKind ruleKind = core::RuleKind::kPolicy;  // which kind of rule decided
  std::optional<core::GuardVerdict> guard;  // with kRangeGuard: which guard, the value, what was seen, the limit
  double amax = -1.0;     // largest finite |x| of the first output observed in fp32 (-1: not an observed fp32 tensor)
  int64_t flops = 0;      // multiply-add FLOPs of a heavy op at the example inputs' sizes (flop_estimate)
  // an int8 conversion's verdict on a node with an int8 role (core/int8_planner); where int8->int8 it runs int8
  // whatever `precision` says of the float plan
  std::optional<core::Int8NodePlan> int8;
  bool runsInt8() const {
    return int8 && int8->int8;
  }
};

// An fp32 tensor constant the converted graph still holds (each storage once).
struct KeptFp32Weight {
  std::string name;                  // debug name of the first constant holding it
  int64_t bytes = 0;                 // its storage
  std::vector<std::string> readers;  // the ops reading it
  std::optional<NodeId> decidedBy;   // the first reader the plan decided (its id), if any
  std::string rule;                  // that reader's rule ("" if none; ConversionReport::setKeptFp32Weights)
  std::optional<core::RuleKind> ruleKind;  // and that rule's kind
};

// One node of the converted graph as the picture draws it (torch_mp/visualize.py): the graph's tensor inputs, the
// nodes that touch tensors (constants left out), the output. Nodes the plan decided keep their id (NodeDecision::id),
// the conversion's casts and the nodes passes created get ids of their own, above every node id.
struct GraphItem {
  enum class Kind : uint8_t { kInput, kNode, kCast, kOther, kOutput };
  NodeId id = -1;
  Kind kind = Kind::kOther;
  std::string op;              // "aten::relu"; an input's name
  std::vector<NodeId> inputs;  // the items whose values it reads; for a node with blocks, also what they return
  int cast = -1;               // kCast: its index in ConversionReport::casts
};
const char* toString(GraphItem::Kind kind);

// Where verification found a converted value holding NaN or inf where the fp32 model's is finite: an output, or else
// an intermediate value the fp32 run observed finite.
struct NonFiniteValue {
  size_t run = 0;                     // 0: the example inputs; i: the i-th calibration input
  std::optional<size_t> outputTensor;  // which of the outputs' floating tensors (nested ones included, in order)
  std::string value;                   // else the intermediate's debug name
};

struct ConversionReport {
  std::string dtype;
  std::string policy;
  std::string planner;
  // how the front captured the model: convert's "script", "trace" or "scriptmodule" (given one, as the load-time
  // pass's graphs are), "export"
  std::string capture = "scriptmodule";
  std::optional<std::string> slowKernels;  // the policy's (OpPolicy::slowKernels): why its heavy ops stay fp32
  // The export front's node names (FX): where not empty, every id in the report (a node's, a cast's, a graph item's
  // and its inputs', decidedBy) indexes them, and the report is written with the names; TorchScript's ids are numbers.
  std::vector<std::string> nodeNames;
  std::vector<NodeDecision> nodes;
  std::vector<CastRecord> casts;
  std::vector<GraphItem> graph;  // the converted graph, for the picture
  int64_t castBytes = 0;
  int fusedCasts = 0;          // casts the plan needed that fuse_casts folded into their readers (not in `casts`)
  int64_t fusedCastBytes = 0;  // the bytes those would have moved per inference
  int fusedPointwise = 0;      // torch_mp::fused_pointwise calls (fused kernels only)
  int fusedNormalizations = 0;  // torch_mp::fused_channel_norm calls (fused kernels only)
  int columnMajorMatmulWeights = 0;  // low-precision CPU matmul weights stored column-major
  int channelsLastConvolutions = 0;  // CUDA convolutions whose weights are stored channels_last
  int fusedConvolutions = 0;         // cuDNN fused convolutions (conv +relu, conv +add +relu)
  int64_t weightBytesBefore = 0;
  int64_t weightBytesAfter = 0;
  int64_t weightBytesKeptFp32 = 0;               // of weightBytesAfter, the fp32 tensors'
  std::vector<KeptFp32Weight> weightsKeptFp32;   // those over kKeptFp32ListedBytes, largest first
  std::vector<std::string> unknownOps;
  int unobservedNodes = 0;
  // false for the load-time pass, whose dtypes come from the executor's profile: no magnitudes, so the observed range
  // guard could not fire (constants are still checked)
  bool rangesObserved = true;
  // verification (where it ran): the first value that turned NaN or inf where fp32's is finite; the conversion is not
  // done (convert() keeps the nodes responsible fp32 and plans again)
  std::optional<NonFiniteValue> nonFinite;
  double seconds = 0.0;
  // Seconds per pipeline stage, in order: freeze (a module's), cleanup and observe (the preparation, measured once
  // however many plans are made from it), clone (the prepared module copied for this plan), plan, apply, cancel, tidy
  // (PyTorch's clean-up passes between torch_mp's stages: mutation removal, dead code, constant pooling, common
  // subexpressions), kernels, report, verify (convert() only: the load-time pass runs nothing).
  std::vector<std::pair<std::string, double>> phases;

  // The fp32 tensors the converted graph holds, each storage once, with its first decided reader's id: counts their
  // bytes, lists those over kKeptFp32ListedBytes largest first, each with that reader's rule from `nodes`.
  void setKeptFp32Weights(std::vector<KeptFp32Weight> kept);

  int lowPrecisionNodes() const;
  // Fraction of the heavy ops' FLOPs that run in low precision (1 when the graph has none).
  double lowPrecisionFlopFraction() const;
};

// fp32 weights below this size are counted, not listed: norm scales, biases.
constexpr int64_t kKeptFp32ListedBytes = 64 * 1024;

// The report of a conversion with this request, before it runs: the dtype, policy and planner it names, and why the
// policy keeps heavy ops fp32 where it does (slowKernels).
ConversionReport reportFor(const ConversionRequest& request);

} // namespace torch_mp::contract
