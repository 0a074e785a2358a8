// Rewrites a graph to follow a precision plan.
//
// For every planner node, each input it reads in the other precision than its producer wrote is replaced by an
// explicit cast, `aten::to(%v, dtype, false, false, None)`, created once per (value, dtype) and shared by all its
// readers. The cast sits where it dominates every reader: right after the value's definition, or at the start of
// the prim::If branch that holds all its readers (never inside a loop body that the value was defined outside
// of). Constants read in low precision are replaced by low-precision constants computed now (one per constant), so
// weights are stored pre-cast. Nodes the example inputs did not reach (say, the slow path of
// nn.TransformerEncoderLayer) read their weights as low-precision copies cast back to fp32 at run time, so no weight
// is kept in fp32 for them (one beyond fp16's range excepted). Outputs of low-precision nodes get the low dtype in their type.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

#include "core/precision_planner.h"
#include "jit/ir/casts.h"
#include "jit/ir/observed_values.h"
#include "jit/plan/graph_to_dataflow.h"

namespace torch_mp::jit {

// Every cast it inserts comes from `casts`.
void applyPrecisionPlan(
    const std::shared_ptr<torch::jit::Graph>& graph,
    const DataflowMapping& mapping,
    const core::PrecisionPlan& plan,
    const ObservedValues& observed,
    c10::ScalarType lowDtype,
    CastLedger& casts);

} // namespace torch_mp::jit
