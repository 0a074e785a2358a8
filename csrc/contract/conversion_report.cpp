#include "contract/conversion_report.h"

#include <algorithm>
#include <unordered_map>

#include "core/numeric_limits.h"

namespace torch_mp::contract {

const char* toString(GraphItem::Kind kind) {
  switch (kind) {
    case GraphItem::Kind::kInput:
      return "input";
    case GraphItem::Kind::kNode:
      return "node";
    case GraphItem::Kind::kCast:
      return "cast";
    case GraphItem::Kind::kOther:
      return "other";
    case GraphItem::Kind::kOutput:
      return "output";
  }
  return "?";
}

int ConversionReport::lowPrecisionNodes() const {
  int count = 0;
  for (const NodeDecision& node : nodes) {
    count += node.precision == core::Precision::kLow && !node.runsInt8();
  }
  return count;
}

void ConversionReport::setKeptFp32Weights(std::vector<KeptFp32Weight> kept) {
  std::unordered_map<NodeId, const NodeDecision*> decisionOf;
  for (const NodeDecision& node : nodes) {
    decisionOf.emplace(node.id, &node);
  }
  weightBytesKeptFp32 = 0;
  weightsKeptFp32.clear();
  for (KeptFp32Weight& weight : kept) {
    weightBytesKeptFp32 += weight.bytes;
    if (weight.bytes <= kKeptFp32ListedBytes) {
      continue;
    }
    auto decided = weight.decidedBy ? decisionOf.find(*weight.decidedBy) : decisionOf.end();
    if (decided != decisionOf.end()) {
      weight.rule = decided->second->rule;
      weight.ruleKind = decided->second->ruleKind;
    }
    weightsKeptFp32.push_back(std::move(weight));
  }
  std::stable_sort(weightsKeptFp32.begin(), weightsKeptFp32.end(),
                   [](const KeptFp32Weight& a, const KeptFp32Weight& b) { return a.bytes > b.bytes; });
}

double ConversionReport::lowPrecisionFlopFraction() const {
  int64_t total = 0;
  int64_t low = 0;
  for (const NodeDecision& node : nodes) {
    total += node.flops;
    low += node.precision == core::Precision::kLow || node.runsInt8() ? node.flops : 0;
  }
  return total ? static_cast<double>(low) / static_cast<double>(total) : 1.0;
}

ConversionReport reportFor(const ConversionRequest& request) {
  ConversionReport report;
  report.dtype = core::lowDtypeName(request.lowDtype);
  report.policy = request.policy.name();
  report.planner = request.planner == core::PlanMethod::kMinCut ? "min-cut" : "greedy";
  report.slowKernels = request.policy.slowKernels();
  return report;
}

} // namespace torch_mp::contract
