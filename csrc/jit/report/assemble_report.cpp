#include "jit/report/assemble_report.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/classify_node.h"
#include "jit/ir/ir_utils.h"
#include "jit/ir/module_scope.h"
#include "jit/plan/flop_estimate.h"
#include "jit/plan/numeric_guards.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// Whether a node left as it is runs in `dtype`: its floating tensor outputs are in it or, when it writes none (a
// size query), a tensor it reads is.
bool runsIn(const Node* node, const ObservedValues& observed, c10::ScalarType dtype) {
  auto floatingDtypes = [&](at::ArrayRef<const Value*> values) {
    std::vector<c10::ScalarType> dtypes;
    for (const Value* value : values) {
      auto seen = observed.find(value);
      if (seen != observed.end() && seen->second.isTensor && c10::isFloatingType(seen->second.dtype)) {
        dtypes.push_back(seen->second.dtype);
      }
    }
    return dtypes;
  };
  std::vector<c10::ScalarType> written = floatingDtypes(node->outputs());
  if (!written.empty()) {
    return std::all_of(written.begin(), written.end(), [&](c10::ScalarType d) { return d == dtype; });
  }
  const std::vector<c10::ScalarType> read = floatingDtypes(node->inputs());
  return std::find(read.begin(), read.end(), dtype) != read.end();
}

bool touchesTensors(const Node* node) {
  for (const Value* value : node->inputs()) {
    if (containsTensor(value->type())) {
      return true;
    }
  }
  for (const Value* value : node->outputs()) {
    if (containsTensor(value->type())) {
      return true;
    }
  }
  return false;
}

// The converted graph as items (GraphItem), the conversion's casts among them recorded in the report.
class GraphItems {
 public:
  GraphItems(const Graph& graph, const Bookkeeping& bookkeeping, const CastLedger& casts, ConversionReport& report)
      : graph_(graph), bookkeeping_(bookkeeping), casts_(casts), report_(report) {
    // sized once: growing maps of a whole graph's size, allocation by allocation, costs more than filling them
    itemOf_.reserve(2 * bookkeeping_.ids.size());
    report_.graph.reserve(bookkeeping_.ids.size() + bookkeeping_.casts.size());
    for (const NodeDecision& decision : report_.nodes) {
      nextId_ = std::max(nextId_, decision.id + 1);
    }
    for (const auto& [node, id] : bookkeeping_.ids) {
      nextId_ = std::max(nextId_, id + 1);
    }
    decided_.assign(nextId_, false);
    for (const NodeDecision& decision : report_.nodes) {
      if (decision.id >= 0) {
        decided_[decision.id] = true;
      }
    }
  }

  void run() {
    for (const Value* input : graph_.inputs()) {
      if (containsTensor(input->type())) {
        add(GraphItem::Kind::kInput, input->debugName(), {}, {input});
      }
    }
    visit(graph_.block());
    std::vector<NodeId> returned;
    for (const Value* output : graph_.outputs()) {
      appendItemOf(output, returned);
    }
    add(GraphItem::Kind::kOutput, "output", std::move(returned), {});
  }

 private:
  void appendItemOf(const Value* value, std::vector<NodeId>& inputs) const {
    auto it = itemOf_.find(value);
    if (it != itemOf_.end() && std::find(inputs.begin(), inputs.end(), it->second) == inputs.end()) {
      inputs.push_back(it->second);
    }
  }

  size_t add(GraphItem::Kind kind, std::string op, std::vector<NodeId> inputs, at::ArrayRef<const Value*> outputs,
             std::optional<NodeId> id = std::nullopt) {
    GraphItem item;
    item.id = id ? *id : nextId_++;
    item.kind = kind;
    item.op = std::move(op);
    item.inputs = std::move(inputs);
    for (const Value* output : outputs) {
      itemOf_[output] = item.id;
    }
    report_.graph.push_back(std::move(item));
    return report_.graph.size() - 1;
  }

  void visit(const Block* block) {
    for (const Node* node : block->nodes()) {
      if (node->kind() == c10::prim::Constant) {
        continue;
      }
      std::optional<size_t> index;
      if (touchesTensors(node)) {
        std::vector<NodeId> inputs;
        for (const Value* input : node->inputs()) {
          appendItemOf(input, inputs);
        }
        auto numbered = bookkeeping_.ids.find(node);
        const std::optional<NodeId> id =
            numbered == bookkeeping_.ids.end() ? std::nullopt : std::make_optional(numbered->second);
        GraphItem::Kind kind = id && *id >= 0 && decided_[*id] ? GraphItem::Kind::kNode : GraphItem::Kind::kOther;
        if (bookkeeping_.casts.count(node)) {
          kind = GraphItem::Kind::kCast;
        }
        index = add(kind, node->kind().toQualString(), std::move(inputs), node->outputs(), id);
        if (kind == GraphItem::Kind::kCast) {
          CastRecord record = casts_.recordOf(node);
          record.id = report_.graph[*index].id;
          report_.castBytes += record.bytes;
          report_.graph[*index].cast = static_cast<int>(report_.casts.size());
          report_.casts.push_back(std::move(record));
        }
      }
      for (const Block* sub : node->blocks()) {
        visit(sub);
      }
      if (index) {  // what a branch or loop body returns flows into the node's outputs
        for (const Block* sub : node->blocks()) {
          for (const Value* returned : sub->outputs()) {
            auto item = itemOf_.find(returned);
            if (item != itemOf_.end() && item->second != report_.graph[*index].id) {
              appendItemOf(returned, report_.graph[*index].inputs);
            }
          }
        }
      }
    }
  }

  const Graph& graph_;
  const Bookkeeping& bookkeeping_;
  const CastLedger& casts_;
  ConversionReport& report_;
  std::vector<bool> decided_;  // per node id
  ska::flat_hash_map<const Value*, NodeId> itemOf_;
  NodeId nextId_ = 0;
};

// The tensor constants of the converted graph (each storage once): weightBytesAfter, and of the fp32 ones
// weightBytesKeptFp32 and weightsKeptFp32, each with the rule of its first reader the plan decided.
void reportWeights(const Graph& graph, const NodeIds& ids, ConversionReport& report) {
  std::unordered_map<NodeId, const NodeDecision*> decisionOf;
  decisionOf.reserve(report.nodes.size());
  for (const NodeDecision& decision : report.nodes) {
    decisionOf.emplace(decision.id, &decision);
  }
  std::unordered_set<const void*> stored;
  report.weightBytesAfter = 0;
  std::unordered_map<const void*, size_t> entryOf;  // fp32 storage -> index in `kept`
  std::vector<KeptFp32Weight> kept;
  forEachConstantTensor(graph.block(), [&](const Node* constant, const at::Tensor& tensor) {
    if (!tensor.has_storage()) {
      return;
    }
    if (stored.insert(tensor.storage().unsafeGetStorageImpl()).second) {
      report.weightBytesAfter += static_cast<int64_t>(tensor.storage().nbytes());
    }
    if (tensor.scalar_type() != c10::ScalarType::Float) {
      return;
    }
    auto [slot, added] = entryOf.emplace(tensor.storage().unsafeGetStorageImpl(), kept.size());
    if (added) {
      KeptFp32Weight weight;
      weight.name = constant->output()->debugName();
      weight.bytes = static_cast<int64_t>(tensor.storage().nbytes());
      kept.push_back(std::move(weight));
    }
    KeptFp32Weight& weight = kept[slot->second];
    for (const torch::jit::Use& use : constant->output()->uses()) {
      weight.readers.push_back(use.user->kind().toQualString());
      auto numbered = ids.find(use.user);
      auto decided = numbered != ids.end() ? decisionOf.find(numbered->second) : decisionOf.end();
      if (!weight.decidedBy && decided != decisionOf.end()) {
        weight.decidedBy = numbered->second;
      }
    }
  });
  report.setKeptFp32Weights(std::move(kept));
}

} // namespace

std::vector<NodeDecision> decisionsOf(
    const DataflowMapping& mapping,
    const core::PrecisionPlan& plan,
    const ObservedValues& observed,
    c10::ScalarType lowDtype) {
  std::vector<NodeDecision> decisions;
  decisions.reserve(mapping.planned.size());
  ModuleScopes scopes;
  for (size_t n = 0; n < mapping.planned.size(); ++n) {
    const PlannedNode& planned = mapping.planned[n];
    const Node* node = planned.node;
    if (node->kind() == c10::prim::Param || node->kind() == c10::prim::Return) {
      continue;
    }
    NodeDecision decision;
    decision.id = planned.id;
    decision.op = node->kind().toQualString();
    decision.output = node->outputs().empty() ? "" : node->output(0)->debugName();
    decision.scope = scopes.of(node);
    bool low = plan.precision[n] == core::Precision::kLow;
    if (planned.ruleKind == core::RuleKind::kNotFp32) {  // left as it is: say what it runs in
      low = runsIn(node, observed, lowDtype);
    }
    decision.precision = low ? core::Precision::kLow : core::Precision::kFp32;
    decision.category = mapping.dataflow.nodes[n].category;
    decision.forcedToFp32 = plan.forcedToFp32[n];
    decision.ruleKind = planned.ruleKind;
    decision.reason = planned.reason;
    decision.guard = planned.guard;
    if (const ObservedValue* seen = node->outputs().empty() ? nullptr : observedFp32(observed, node->output(0));
        seen && seen->rangeObserved) {
      decision.amax = seen->largestMagnitude;
    }
    decision.flops = estimateFlops(node, observed);
    decision.rule = core::plannedRule(planned.rule, decision.category, decision.forcedToFp32, low);
    decisions.push_back(std::move(decision));
  }
  return decisions;
}

Bookkeeping takeBookkeeping(Graph& graph, size_t numbered) {
  Bookkeeping taken;
  taken.ids.reserve(numbered);
  forEachNode(graph.block(), [&](Node* node) {
    if (std::optional<NodeId> id = takeNodeId(node)) {
      taken.ids.emplace(node, *id);
    }
    if (CastLedger::takeMark(node)) {
      taken.casts.insert(node);
    }
  });
  return taken;
}

void reportConvertedGraph(
    const Graph& graph, const Bookkeeping& bookkeeping, const CastLedger& casts, ConversionReport& report) {
  report.fusedCasts = casts.fusedCasts();
  report.fusedCastBytes = casts.fusedCastBytes();
  GraphItems(graph, bookkeeping, casts, report).run();
  reportWeights(graph, bookkeeping.ids, report);
}

} // namespace torch_mp::jit
