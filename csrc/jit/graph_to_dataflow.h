// TorchScript graph -> the planner's plain dataflow graph.
//
// Every node that touches an fp32 tensor (or a container of tensors) becomes a planner node whose category comes
// from the op policy, unless the node must stay as it is:
//   - block inputs, block outputs, prim::If and prim::Loop: fp32 (graph IO keeps its dtype; control-flow
//     boundaries carry the original dtype);
//   - a node reading or writing a tensor whose dtype is unknown (not reached by the example inputs): fp32;
//   - a node reading or writing a floating tensor that is not fp32 (fp16, bf16, fp64): fp32, i.e. untouched.
// Every fp32 tensor (not a constant: constants are folded for free) and every container holding tensors becomes
// a planner value. Containers, Optional-typed tensors and tensors that are written in place (or alias a written
// tensor) are not castable: their producer and consumers share one precision.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/op_policy.h"
#include "core/precision_planner.h"
#include "jit/value_observer.h"

namespace torch_mp::jit {

struct DataflowMapping {
  core::DataflowGraph dataflow;
  std::vector<torch::jit::Node*> nodes;  // planner node -> TorchScript node (prim::Param for block inputs)
  std::vector<std::string> rules;        // planner node -> why it has its category
  std::unordered_map<const torch::jit::Value*, int> values;  // TorchScript value -> planner value
  std::vector<std::string> unknownOps;   // ops in no policy list, each once
  int unobservedNodes = 0;               // nodes left alone because their dtypes are unknown
};

DataflowMapping buildDataflow(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const ObservedValues& observed,
    const core::OpPolicy& policy,
    c10::ScalarType lowDtype);

// Whether the value was observed as an fp32 tensor.
bool isObservedFp32(const ObservedValues& observed, const torch::jit::Value* value);
// Whether the static type holds tensors inside a list, tuple, dict or optional container.
bool isTensorContainer(const c10::TypePtr& type);

} // namespace torch_mp::jit
