// Containers of tensors that a module keeps as attributes and that its forward reads and writes. timm's LeViT caches
// attention_biases[:, idxs] per device in a Dict[str, Tensor] on its first call; freezing keeps such an attribute
// (the graph writes it), and the graph reads it through prim::GetAttr chains from its module input.
//
// findStateContainers says which prim::GetAttr nodes read which container, so the planner gives every read of one
// container one precision, as it does for a container the graph makes itself. castStateContainers then casts what
// the containers already hold to the precision planned for them, as constants are cast, so what the graph writes
// into a container and what it finds there agree.
//
// Only a state seen whole is planned: every module in the graph comes from the module input through prim::GetAttr
// and is used only by prim::GetAttr; no attribute is assigned (prim::SetAttr) or holds a module interface (whose
// methods may read the containers unseen); every other attribute the graph reads that holds tensors is a
// Dict[_, Tensor] or List[Tensor] that holds only fp32 tensors. Otherwise there is nothing to plan and module
// state keeps its dtype (the planner ties it to the module input, which keeps its dtype).
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <optional>
#include <vector>

#include "core/precision_planner.h"
#include "jit/plan/graph_to_dataflow.h"

namespace torch_mp::jit {

// `module` is the object the graph's first input holds.
std::optional<StateContainers> findStateContainers(const torch::jit::Graph& graph, const c10::IValue& module);

// Casts every fp32 tensor held by a container the plan made low to the low dtype (`mapping` was built with `state`).
void castStateContainers(
    const StateContainers& state,
    const DataflowMapping& mapping,
    const core::PrecisionPlan& plan,
    c10::ScalarType lowDtype);

} // namespace torch_mp::jit
