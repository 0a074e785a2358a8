#include "contract/program_report.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/int8_kernels.h"

namespace torch_mp::contract {

ConversionReport programReport(const ConversionRequest& request, ProgramRecords records) {
  const std::vector<std::string>& names = records.names;
  const auto named = [&names](NodeId id) {
    if (id < 0 || id >= static_cast<NodeId>(names.size())) {
      throw std::invalid_argument("torch_mp: report id " + std::to_string(id) + " of " + std::to_string(names.size()) +
                                  " names");
    }
    return id;
  };
  ConversionReport report = reportFor(request);
  for (const ProgramNode& planned : records.nodes) {
    const core::NodeDecision& decided = planned.decision;
    NodeDecision node;
    node.id = named(planned.id);
    node.op = planned.op;
    node.output = names[planned.id];
    node.scope = planned.scope;
    node.precision = planned.low ? core::Precision::kLow : core::Precision::kFp32;
    node.category = decided.category;
    node.forcedToFp32 = planned.forcedToFp32;
    node.rule = core::plannedRule(decided.rule, decided.category, planned.forcedToFp32, planned.low);
    node.reason = decided.reason;
    node.ruleKind = decided.kind;
    node.guard = decided.guard;
    node.amax = planned.amax.value_or(-1.0);
    node.flops = planned.flops;
    node.int8 = planned.int8;
    if (node.runsInt8()) {
      node.rule = std::string("int8: ") + core::int8FactsOf(planned.op)->reason;
      node.reason = core::int8FactsOf(planned.op)->reason;
      node.ruleKind = core::RuleKind::kInt8;
    }
    if (decided.kind == core::RuleKind::kUnknownOp &&
        std::find(report.unknownOps.begin(), report.unknownOps.end(), planned.op) == report.unknownOps.end()) {
      report.unknownOps.push_back(planned.op);
    }
    report.nodes.push_back(std::move(node));
  }
  for (const ProgramCast& cast : records.casts) {
    report.casts.push_back(
        {.id = named(cast.id), .value = cast.value, .from = cast.from, .to = cast.to, .bytes = cast.bytes,
         .reached = true});
    report.castBytes += cast.bytes;
  }
  for (const ProgramGraphItem& item : records.graph) {
    for (NodeId input : item.inputs) {
      named(input);
    }
    report.graph.push_back({.id = named(item.id),
                            .kind = item.isCast ? GraphItem::Kind::kCast : GraphItem::Kind::kNode,
                            .op = item.op,
                            .inputs = item.inputs,
                            .cast = item.isCast ? item.cast : -1});
  }
  std::vector<KeptFp32Weight> weights;
  for (const ProgramWeight& weight : records.keptFp32) {
    weights.push_back({.name = weight.name, .bytes = weight.bytes, .readers = weight.readers,
                       .decidedBy = weight.decidedBy ? std::optional<NodeId>(named(*weight.decidedBy)) : std::nullopt});
  }
  report.weightBytesBefore = records.weightBytesBefore;
  report.weightBytesAfter = records.weightBytesAfter;
  report.setKeptFp32Weights(std::move(weights));
  report.nonFinite = std::move(records.nonFinite);
  report.seconds = 0.0;
  for (const auto& [stage, seconds] : records.phases) {
    report.seconds += seconds;
  }
  report.phases = std::move(records.phases);
  report.capture = "export";
  report.nodeNames = std::move(records.names);
  return report;
}

} // namespace torch_mp::contract
