// TorchScript graph -> the planner's plain dataflow graph.
//
// Every node that touches an fp32 tensor (or a container of tensors) becomes a planner node. Its category is what
// core::classifyNode decides (the rule order, written once for both fronts) from the facts gathered here: whether it
// is the graph's prim::Param or prim::Return, whether a tensor it reads or writes was not observed or is a floating
// tensor that is not fp32, whether it is control flow (a prim::If / prim::Loop is one planner node together with its
// blocks' inputs and outputs, so the values crossing the block boundaries all take its precision), the verdicts of
// the numeric guards (jit/plan/numeric_guards), the nodes kept fp32 by id (the verification's repair, the accuracy
// fallback), whether a table lookup's constant table can be stored low, whether it writes a tensor list or sums
// nothing; the user's per-node callable is asked only where the rule order reaches it.
// Module objects are not values when the module's state containers are given (their reads are planned instead);
// without them, the module input ties everything read from module state to its dtype.
// Every fp32 tensor (not a constant: constants are folded for free) and every container holding tensors becomes
// a planner value. Containers, Optional-typed tensors and written tensors that alias what their producer read
// (in-place results, views) are tied to their producer and sharing readers; a written tensor its producer made
// fresh (per the schema) ties only its sharing readers, which read one copy, cast after the producer where the plan
// says so. A reader that only reads a tied tensor (per its schema: no write, no alias) is not tied: it may read its
// own cast, made right before it. "Written" is AliasDb's answer, unless following the value's uses through its
// aliases shows no write (AliasDb sees writers of any list member in every graph input).
#pragma once

#include <c10/util/flat_hash_map.h>
#include <torch/csrc/jit/ir/ir.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "contract/conversion_request.h"
#include "core/classify_node.h"
#include "core/op_policy.h"
#include "core/precision_planner.h"
#include "jit/ir/ir_utils.h"
#include "jit/ir/observed_values.h"
#include "torch_mp/convert.h"

namespace torch_mp::jit {

// Containers of tensors the module keeps as attributes (jit/plan/state_containers finds them): every read of one
// container shares one precision, and they are containers even where a read was not reached.
struct StateContainers {
  std::vector<const torch::jit::Node*> reads;  // the prim::GetAttr nodes reading a container, in graph order
  std::vector<size_t> containerOf;             // per read: its container, an index into `containers`
  std::vector<c10::IValue> containers;         // in the order of their first read
};

// What classification decided for one planner node, and why.
struct PlannedNode {
  torch::jit::Node* node = nullptr;  // the TorchScript node (prim::Param for graph inputs)
  // the block input/output nodes of a prim::If / prim::Loop, which share its precision
  std::vector<torch::jit::Node*> blockBoundaries;
  NodeId id = -1;                                   // its node's id, -1 where it has none
  core::RuleKind ruleKind = core::RuleKind::kPolicy;  // which kind of rule decided it
  std::string rule;                                 // why it has its category, for people
  std::string reason;                               // the rule's reason alone (core::NodeDecision::reason)
  std::optional<core::GuardVerdict> guard;          // the numeric guard that kept it fp32 (kRangeGuard)
  bool unobserved = false;                          // left alone because its dtypes are unknown
};

using contract::KeptFp32;  // nodes kept fp32 by id (the verification's repair, the accuracy fallback)

struct DataflowMapping {
  core::DataflowGraph dataflow;
  std::vector<PlannedNode> planned;  // per planner node
  ska::flat_hash_map<const torch::jit::Value*, int> values;  // TorchScript value -> planner value
  std::vector<std::string> unknownOps;   // ops in no policy list, each once
  int unobservedNodes = 0;               // how many planner nodes were left alone as unobserved
  std::vector<int> stateContainerNodes;  // per state container: the planner node whose precision it has, or -1
};

DataflowMapping buildDataflow(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const ObservedValues& observed,
    const core::OpPolicy& policy,
    c10::ScalarType lowDtype,
    const NodeRule& nodeRule = {},
    const KeptFp32& keepFp32 = {},
    const StateContainers* state = nullptr);

// The value's observation where it was observed as an fp32 tensor, else nullptr.
const ObservedValue* observedFp32(const ObservedValues& observed, const torch::jit::Value* value);

// Whether the value was observed as an fp32 tensor.
bool isObservedFp32(const ObservedValues& observed, const torch::jit::Value* value);

} // namespace torch_mp::jit
