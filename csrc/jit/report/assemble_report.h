// Report assembly: what a conversion decided, read off its plan, and what it left, read off the converted graph.
// Nodes are named by their ids and the conversion's casts known by the ledger's marks, both taken off the graph
// (BookkeepingOf) before the last clean-up, so that equal nodes merge whatever their ids.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <unordered_set>
#include <vector>

#include "core/precision_planner.h"
#include "jit/ir/casts.h"
#include "jit/ir/observed_values.h"
#include "jit/plan/graph_to_dataflow.h"
#include "jit/report/conversion_report.h"

namespace torch_mp::jit {

// One decision per planner node (graph inputs and outputs excepted): its precision and the rule behind it. A node
// left as it is (not fp32) reports the dtype it runs in.
std::vector<NodeDecision> decisionsOf(
    const DataflowMapping& mapping,
    const core::PrecisionPlan& plan,
    const ObservedValues& observed,
    c10::ScalarType lowDtype);

// The node ids and the ledger's marks, taken off the graph (which keeps neither).
struct Bookkeeping {
  NodeIds ids;
  ska::flat_hash_set<const torch::jit::Node*> casts;  // the conversion's own
};
// `numbered`: about how many nodes carry an id (the decisions' count), to size the map once.
Bookkeeping takeBookkeeping(torch::jit::Graph& graph, size_t numbered);

// Fills the report from the converted graph: the conversion's casts that are left (casts, castBytes) and those
// fused away (from the ledger), the graph as the picture draws it, the weight bytes after, and the fp32 weights
// kept with the rule of their first decided reader. `report.nodes` must hold the decisions already.
void reportConvertedGraph(
    const torch::jit::Graph& graph, const Bookkeeping& bookkeeping, const CastLedger& casts, ConversionReport& report);

} // namespace torch_mp::jit
