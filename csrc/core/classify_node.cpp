#include "core/classify_node.h"

#include <cstdio>
#include <utility>

#include "core/op_facts.h"

namespace torch_mp::core {
namespace {

std::string formatMagnitude(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", value);
  return text;
}

// The rule reads "<category>: <reason>" unless `heading` names the node otherwise ("input", or nothing at all).
NodeDecision decided(OpCategory category, RuleKind kind, std::string reason,
                     std::optional<std::string> heading = std::nullopt) {
  const std::string head = heading ? *heading : toString(category);
  std::string rule = head.empty() ? reason : head + ": " + reason;
  return NodeDecision{category, kind, std::move(rule), std::move(reason), std::nullopt};
}

NodeDecision guarded(GuardVerdict verdict, LowDtype dtype) {
  NodeDecision decision = decided(OpCategory::kFp32, RuleKind::kRangeGuard, guardFinding(verdict, dtype), "");
  decision.rule = describeGuard(verdict, dtype);
  decision.guard = std::move(verdict);
  return decision;
}

// A demotion of what the rules chose: the new category and kind, the reason said after the rule it overrode.
void demote(NodeDecision& decision, OpCategory category, RuleKind kind, const char* instead, std::string reason) {
  decision.category = category;
  decision.kind = kind;
  decision.rule += std::string(" [") + instead + ": " + reason + "]";
  decision.reason = std::move(reason);
}

// Rule 4's reason, if the user forces the node low (by its id, else by op and module path).
std::optional<std::string> forcedLow(const NodeFacts& facts, const OpPolicy& policy) {
  if (facts.controlFlow != ControlFlow::kNone || facts.keptNonFinite || facts.keptByFallback || facts.runsInt8) {
    return std::nullopt;  // measured to need fp32 (the repair, the fallback): that wins over the user's wish
  }
  if (const std::string* reason = facts.id.empty() ? nullptr : policy.forcedLowNode(facts.id)) {
    return *reason;
  }
  const ModuleRule* rule = policy.forcedLowFor(facts.op, facts.scope);
  return rule ? std::make_optional(rule->reason) : std::nullopt;
}

// Rule 8, first match wins.
std::optional<NodeOverride> userChoice(const NodeFacts& facts, const OpPolicy& policy, const NodeRuleQuery& nodeRule) {
  if (facts.runsInt8) {
    return NodeOverride{OpCategory::kFp32, RuleKind::kInt8,
                        "int8: runs as an int8 kernel; its float neighbours meet it in fp32"};
  }
  if (facts.keptNonFinite) {
    return NodeOverride{OpCategory::kFp32, RuleKind::kNonFinite,
                        "verification: in low precision its output was NaN or inf where fp32's is finite"};
  }
  if (facts.keptByFallback) {
    return NodeOverride{OpCategory::kFp32, RuleKind::kFallback,
                        "accuracy fallback: keeping it in fp32 brings the error within tolerance"};
  }
  if (const ModuleRule* exclusion = policy.exclusionFor(facts.op, facts.scope)) {
    return NodeOverride{OpCategory::kFp32, RuleKind::kExclusion, "excluded: " + exclusion->reason};
  }
  return nodeRule ? nodeRule() : std::nullopt;
}

// Rules 9 and 10.
NodeDecision byPolicy(const NodeFacts& facts, const OpPolicy& policy) {
  const OpPolicy::Match match = policy.match(facts.op);
  if (!match.entry) {
    return decided(OpCategory::kFp32, RuleKind::kUnknownOp, "in no list (unknown op)");
  }
  NodeDecision decision = decided(match.entry->category,
                                  match.entry->noFastKernel ? RuleKind::kNoFastKernel : RuleKind::kPolicy,
                                  match.entry->reason);
  if (match.via != facts.op) {
    decision.rule += " [in place, as " + match.via + "]";
  }
  const char* lookup = factsOf(facts.op).tableLookup;
  if (lookup && decision.category == OpCategory::kFollow && facts.readsTableStoredLow) {
    decision = decided(OpCategory::kLowPrecision, decision.kind,
                       std::string(lookup) + " that is a constant: the table is stored once, in the low dtype, and "
                                             "only what is read is cast");
  }
  return decision;
}

} // namespace

NodeDecision classifyNode(const NodeFacts& facts, const OpPolicy& policy, LowDtype dtype,
                          const NodeRuleQuery& nodeRule) {
  const bool controlFlow = facts.controlFlow != ControlFlow::kNone;
  switch (facts.boundary) {
    case Boundary::kInput:
      return decided(OpCategory::kFp32, RuleKind::kIo, "keeps its dtype", "input");
    case Boundary::kOutput:
      return decided(OpCategory::kFp32, RuleKind::kIo, "keeps its dtype", "output");
    case Boundary::kNone:
      break;
  }
  if (facts.unobserved) {
    return decided(OpCategory::kFp32, RuleKind::kUnobserved,
                   controlFlow ? "control flow with a branch not reached by the example inputs: boundaries keep "
                                 "their dtype"
                               : "dtype unknown: not reached by the example inputs",
                   "");
  }
  if (facts.notFp32) {
    return decided(OpCategory::kFp32, RuleKind::kNotFp32, "has a floating tensor that is not fp32: left as it is", "");
  }
  const std::optional<GuardVerdict>& guard = facts.observedRange ? facts.observedRange : facts.underflowToZero;
  if (std::optional<std::string> forced = forcedLow(facts, policy)) {
    NodeDecision decision = decided(OpCategory::kLowPrecision, RuleKind::kForcedLow, *forced, "low: forced");
    decision.guard = guard ? guard : facts.constantRange ? facts.constantRange : facts.lostScalar;  // overridden
    return decision;
  }
  if (guard) {
    return guarded(*guard, dtype);
  }
  NodeDecision decision;
  if (facts.controlFlow == ControlFlow::kOpaqueSubgraphs) {
    return decided(OpCategory::kFp32, RuleKind::kControlFlow,
                   "control flow whose subgraphs are not planned: what crosses them keeps fp32");
  } else if (facts.controlFlow == ControlFlow::kPlannedBlocks) {
    decision = decided(OpCategory::kFollow, RuleKind::kControlFlow,
                       "control flow; values crossing its block boundaries share one precision");
  } else if (facts.constantRange) {
    return guarded(*facts.constantRange, dtype);
  } else if (std::optional<NodeOverride> chosen = userChoice(facts, policy, nodeRule)) {
    decision = decided(chosen->category, chosen->kind, chosen->reason);
  } else {
    decision = byPolicy(facts, policy);
    if (decision.kind == RuleKind::kUnknownOp) {
      return decision;
    }
  }
  if (decision.category == OpCategory::kLowFp32Output && facts.writesTensorList) {
    demote(decision, OpCategory::kFp32, RuleKind::kWritesTensorList, "fp32 instead",
           "it writes a list or tuple of tensors, which one cast cannot make fp32");
  }
  if (computesLow(decision.category) && facts.sumsNothing) {
    demote(decision, OpCategory::kFollow, RuleKind::kSumsNothing, "follow instead",
           "nothing to sum (an outer product), so low precision would only round its inputs, say positions or "
           "timesteps");
  }
  if (decision.category != OpCategory::kFp32 && facts.lostScalar) {
    return guarded(*facts.lostScalar, dtype);
  }
  return decision;
}

std::string plannedRule(const std::string& rule, OpCategory category, bool forcedToFp32, bool low) {
  if (forcedToFp32) {
    return rule + " [forced to fp32: shares a container or mutated tensor with an fp32 op, or reads fp32 into a "
                  "type-promoting op]";
  }
  if (category == OpCategory::kFollow || category == OpCategory::kWidest) {
    return rule + (low ? " [planned low: fewest cast bytes]" : " [planned fp32: fewest cast bytes]");
  }
  return rule;
}

std::string describeGuard(const GuardVerdict& verdict, LowDtype dtype) {
  return "range guard: " + guardFinding(verdict, dtype) + ", so the node keeps fp32";
}

std::string guardFinding(const GuardVerdict& verdict, LowDtype dtype) {
  const std::string value = "%" + verdict.value;
  const std::string name = lowDtypeName(dtype);
  const std::string seen = formatMagnitude(verdict.seen);
  const std::string limit = formatMagnitude(verdict.limit);
  std::string why;
  switch (verdict.kind) {
    case GuardKind::kObservedOverflow:
      why = value + " observed up to " + seen + ", above half of " + name + "'s max " +
          formatMagnitude(2 * verdict.limit);
      break;
    case GuardKind::kObservedIntegers:
      why = value + " holds integers up to " + seen + " (positions, indices, coordinates?); " + name +
          " holds every integer only up to " + limit;
      break;
    case GuardKind::kObservedTiny:
      why = value + " observed only up to " + seen + ", below " + name + "'s smallest normal " + limit;
      break;
    case GuardKind::kConstantRange:
      why = "constant " + value + " has values up to " + seen + ", beyond " + name + "'s max " + limit;
      break;
    case GuardKind::kLostScalar:
      why = "scalar " + value + " = " + seen + " becomes " + limit + " in " + name;
      break;
    case GuardKind::kUnderflowToZero:
      why = value + " can be as small as " + seen + ", below " + name + "'s smallest number " + limit +
          ", and reaches an input where 0 gives inf or NaN (a divisor, rsqrt, log, a negative power)";
      break;
  }
  return why;
}

} // namespace torch_mp::core
