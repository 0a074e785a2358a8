// What a conversion decided and what it cost: per node the precision and the rule that chose it, every cast with
// the bytes it moves per inference, weight bytes before and after, ops in no policy list. Serialises to JSON.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/op_policy.h"

namespace torch_mp::jit {

struct NodeDecision {
  std::string op;         // "aten::conv2d"
  std::string output;     // debug name of the first output
  std::string scope;      // module path, "layer1.0.conv1"
  std::string precision;  // "low" or "fp32"
  std::string rule;       // why
  core::RuleKind ruleKind = core::RuleKind::kPolicy;  // which kind of rule decided
  double amax = -1.0;     // largest finite |x| of the first output observed in fp32 (-1: not an observed fp32 tensor)
  int64_t flops = 0;      // multiply-add FLOPs of a heavy op at the example inputs' sizes (flop_estimate)
};

struct CastRecord {
  std::string value;  // debug name of the value cast
  std::string from;   // dtype names, e.g. "Float"
  std::string to;
  int64_t bytes = 0;  // read + written per inference, at the example inputs' sizes
  bool reached = true;  // whether the example inputs ran it (a cast on a path they skipped moves no bytes then)
};

// An fp32 tensor constant the converted graph still holds (each storage once).
struct KeptFp32Weight {
  std::string name;                  // debug name of the first constant holding it
  int64_t bytes = 0;                 // its storage
  std::vector<std::string> readers;  // the ops reading it
  std::string rule;                  // the plan's rule for its first reader the plan decided ("" if none)
  std::optional<core::RuleKind> ruleKind;  // and that rule's kind (none if no reader was decided)
};

struct ConversionReport {
  std::string dtype;
  std::string policy;
  std::string planner;
  std::vector<NodeDecision> nodes;
  std::vector<CastRecord> casts;
  int64_t castBytes = 0;
  int fusedCasts = 0;          // casts the plan needed that fuse_casts folded into their readers (not in `casts`)
  int64_t fusedCastBytes = 0;  // the bytes those would have moved per inference
  int fusedPointwise = 0;      // torch_mp::fused_pointwise calls (fused kernels only)
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
  double seconds = 0.0;
  // Seconds per pipeline phase, in order: cleanup, observe, plan, apply, cancel, kernels, report, verify (convert()
  // only: the load-time pass runs nothing).
  std::vector<std::pair<std::string, double>> phases;

  int lowPrecisionNodes() const;
  // Fraction of the heavy ops' FLOPs that run in low precision (1 when the graph has none).
  double lowPrecisionFlopFraction() const;
  std::string toJson() const;
};

// Bytes held by the tensor constants of a graph (each storage counted once).
int64_t constantBytes(const torch::jit::Graph& graph);

// fp32 weights below this size are counted, not listed: norm scales, biases.
constexpr int64_t kKeptFp32ListedBytes = 64 * 1024;

// The fp32 tensor constants of a converted graph: fills the report's weightBytesKeptFp32 and weightsKeptFp32, the
// rules coming from its nodes (matched by their first output's name).
void reportKeptFp32Weights(const torch::jit::Graph& graph, ConversionReport& report);

} // namespace torch_mp::jit
