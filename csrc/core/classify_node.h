// The rule order, written once for both fronts: which rule decides a node's category, from what a front knows of the
// node (NodeFacts) and the op policy. A front gathers the facts of its IR (jit/plan/graph_to_dataflow for TorchScript,
// torch_mp/_export/facts.py through _C.classify_nodes for torch.export programs) and takes the decision as it comes.
//
// First match wins:
//   1. a graph input or output keeps its dtype (io)
//   2. a node not reached by the example inputs is left as it is (unobserved)
//   3. a node with a floating tensor that is not fp32 is left as it is (not fp32)
//   4. the user's forced-low rule (by node id, else by op and module path), unless the verification's repair or the
//      accuracy fallback keeps the node fp32; over every guard, which the decision still carries (forced low)
//   5. the observed-range guard, then the underflow-to-zero guard (range guard)
//   6. control flow: planned with its blocks' boundaries, it follows; with subgraphs the front cannot plan, fp32
//   7. the constant-range guard (range guard)
//   8. an int8 conversion's int8 nodes keep fp32 at their float boundary (int8); the user's choices: the verification's
//      repair, the accuracy fallback, the policy's exclusions, the per-node callable (non-finite, fallback, exclusion,
//      callable)
//   9. the op policy's entry (policy, no fast kernel); a table lookup it lets follow runs low where its table is a
//      constant stored once in the low dtype
//  10. an op in no list keeps fp32 (unknown op)
// Then two demotions of what rules 8-9 chose: a low_fp32_output node writing a tensor list keeps fp32 (writes a tensor
// list), a node computing low that sums nothing follows (sums nothing). A node that would not keep fp32 keeps it where a
// float scalar it reads is lost in the low dtype (range guard).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/numeric_limits.h"
#include "core/op_policy.h"

namespace torch_mp::core {

// A rule's verdict on one node: the category, what kind of rule decided (exclusion, callable, fallback), and why.
enum class Boundary : uint8_t { kNone, kInput, kOutput };

enum class ControlFlow : uint8_t {
  kNone,
  kPlannedBlocks,     // TorchScript's prim::If / prim::Loop: its blocks' nodes are planned, their boundaries shared
  kOpaqueSubgraphs,   // a torch.export higher-order op: its subgraphs are not planned, so what crosses them stays fp32
};

// What a front knows of one node. The guards are the verdicts of the front's numeric guards on the node, each where it
// fired; the rule order decides which of them counts.
struct NodeFacts {
  std::string op;     // "aten::conv2d"
  std::string scope;  // module path, "layers.0.fc"
  std::string id;     // by which forced_low_nodes names the node; empty where it has none
  Boundary boundary = Boundary::kNone;
  bool unobserved = false;      // a tensor it reads or writes has no observed dtype
  bool notFp32 = false;         // it reads or writes a floating tensor that is not fp32
  ControlFlow controlFlow = ControlFlow::kNone;
  bool keptNonFinite = false;   // the verification's repair keeps it fp32
  bool keptByFallback = false;  // the accuracy fallback keeps it fp32
  bool runsInt8 = false;        // an int8 conversion runs it int8 (core/int8_planner): float neighbours meet it in fp32
  std::optional<GuardVerdict> observedRange;    // core/range_guards' verdicts on the node's numbers
  std::optional<GuardVerdict> underflowToZero;  // core/underflow_to_zero's
  std::optional<GuardVerdict> constantRange;
  std::optional<GuardVerdict> lostScalar;
  bool readsTableStoredLow = false;  // its first argument is a constant table OpPolicy::storesTableLow stores low
  bool writesTensorList = false;
  bool sumsNothing = false;     // core::sumsNothing of its operands
};

struct NodeDecision {
  OpCategory category = OpCategory::kFp32;
  RuleKind kind = RuleKind::kPolicy;
  std::string rule;                   // for people: the category or boundary, then the reason, then a demotion's
  std::string reason;                 // why, in the words of what decided: the policy entry's reason, the user's, the
                                      // guard's finding, the demotion's ("keeps its dtype", "matmul: tensor cores")
  std::optional<GuardVerdict> guard;  // the guard that kept it fp32, or the one a forced-low rule overrode
};

// The user's per-node callable, asked only where the rule order reaches it; nothing leaves the node to the policy.
using NodeRuleQuery = std::function<std::optional<NodeOverride>()>;

NodeDecision classifyNode(const NodeFacts& facts, const OpPolicy& policy, LowDtype dtype,
                          const NodeRuleQuery& nodeRule = {});

// The rule once the planner has run: a node it forced to fp32 says why, a follow / widest node what it was planned.
std::string plannedRule(const std::string& rule, OpCategory category, bool forcedToFp32, bool low);

// The guard's verdict for people: "range guard: %x observed up to 4e+04, above half of float16's max 6.55e+04, so the
// node keeps fp32".
std::string describeGuard(const GuardVerdict& verdict, LowDtype dtype);
// Its finding alone: "%x observed up to 4e+04, above half of float16's max 6.55e+04".
std::string guardFinding(const GuardVerdict& verdict, LowDtype dtype);

} // namespace torch_mp::core
