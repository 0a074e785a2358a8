// core::classifyNode on facts alone, no IR: each rule fires on its fact, and the rule before it in the order wins
// where both apply (the order both fronts' decisions come from; jit/plan/graph_to_dataflow and torch_mp/_export/facts.py
// only gather the facts).
#include <gtest/gtest.h>

#include <string>

#include "core/classify_node.h"
#include "core/fast_kernels.h"

namespace torch_mp::core {
namespace {

OpPolicy fastBf16() {
  return OpPolicy::defaults(Target::kCpuBFloat16, CpuFeatures::all());
}

NodeFacts linearIn(const std::string& scope) {
  NodeFacts facts;
  facts.op = "aten::linear";
  facts.scope = scope;
  facts.id = "7";
  return facts;
}

GuardVerdict verdict(GuardKind kind) {
  return GuardVerdict{kind, "x", 1e30, 3.39e38};
}

TEST(ClassifyNodeTest, ThePolicyDecidesANodeNoOtherRuleApplies) {
  const NodeDecision decided = classifyNode(linearIn("fc"), fastBf16(), LowDtype::kBFloat16);
  EXPECT_EQ(decided.category, OpCategory::kLowPrecision);
  EXPECT_EQ(decided.kind, RuleKind::kPolicy);
  EXPECT_FALSE(decided.guard);
  EXPECT_EQ(decided.rule.rfind("low: ", 0), 0u) << decided.rule;
  EXPECT_EQ(decided.reason, fastBf16().find("aten::linear")->reason);
  EXPECT_EQ(decided.rule, "low: " + decided.reason);

  NodeFacts unknown = linearIn("fc");
  unknown.op = "my::op";
  EXPECT_EQ(classifyNode(unknown, fastBf16(), LowDtype::kBFloat16).kind, RuleKind::kUnknownOp);
  EXPECT_EQ(classifyNode(unknown, fastBf16(), LowDtype::kBFloat16).category, OpCategory::kFp32);
  // without fast kernels the heavy op keeps fp32, by the policy's own flag
  const OpPolicy slow = OpPolicy::defaults(Target::kCpuBFloat16, CpuFeatures::none());
  EXPECT_EQ(classifyNode(linearIn("fc"), slow, LowDtype::kBFloat16).kind, RuleKind::kNoFastKernel);
}

TEST(ClassifyNodeTest, InputsAndOutputsComeFirstThenUnobservedThenNotFp32) {
  NodeFacts facts = linearIn("fc");
  facts.boundary = Boundary::kOutput;
  facts.unobserved = true;
  facts.notFp32 = true;
  EXPECT_EQ(classifyNode(facts, fastBf16(), LowDtype::kBFloat16).kind, RuleKind::kIo);
  facts.boundary = Boundary::kNone;
  EXPECT_EQ(classifyNode(facts, fastBf16(), LowDtype::kBFloat16).kind, RuleKind::kUnobserved);
  facts.unobserved = false;
  EXPECT_EQ(classifyNode(facts, fastBf16(), LowDtype::kBFloat16).kind, RuleKind::kNotFp32);
  EXPECT_EQ(classifyNode(facts, fastBf16(), LowDtype::kBFloat16).category, OpCategory::kFp32);
}

TEST(ClassifyNodeTest, AForcedLowRuleWinsOverTheGuardsAndCarriesTheOneItOverrode) {
  OpPolicy policy = fastBf16();
  policy.forceLow({"fc", std::nullopt, "checked by hand"});
  NodeFacts facts = linearIn("fc");
  facts.constantRange = verdict(GuardKind::kConstantRange);
  facts.lostScalar = verdict(GuardKind::kLostScalar);
  NodeDecision decided = classifyNode(facts, policy, LowDtype::kBFloat16);
  EXPECT_EQ(decided.category, OpCategory::kLowPrecision);
  EXPECT_EQ(decided.kind, RuleKind::kForcedLow);
  ASSERT_TRUE(decided.guard);
  EXPECT_EQ(decided.guard->kind, GuardKind::kConstantRange);  // the first guard that would have kept it fp32
  facts.underflowToZero = verdict(GuardKind::kUnderflowToZero);
  EXPECT_EQ(classifyNode(facts, policy, LowDtype::kBFloat16).guard->kind, GuardKind::kUnderflowToZero);
  facts.observedRange = verdict(GuardKind::kObservedOverflow);
  EXPECT_EQ(classifyNode(facts, policy, LowDtype::kBFloat16).guard->kind, GuardKind::kObservedOverflow);

  // the repair and the fallback measured that the node must be fp32: they win over the user's wish
  facts.keptNonFinite = true;
  EXPECT_EQ(classifyNode(facts, policy, LowDtype::kBFloat16).kind, RuleKind::kRangeGuard);
  facts.observedRange.reset();
  facts.underflowToZero.reset();
  facts.constantRange.reset();
  EXPECT_EQ(classifyNode(facts, policy, LowDtype::kBFloat16).kind, RuleKind::kNonFinite);
  facts.keptNonFinite = false;
  facts.keptByFallback = true;
  EXPECT_EQ(classifyNode(facts, policy, LowDtype::kBFloat16).kind, RuleKind::kFallback);

  // by id, in another module
  OpPolicy byId = fastBf16();
  byId.forceLowNode("7", "this one");
  NodeFacts other = linearIn("head");
  other.observedRange = verdict(GuardKind::kObservedOverflow);
  EXPECT_EQ(classifyNode(other, byId, LowDtype::kBFloat16).kind, RuleKind::kForcedLow);
  other.id = "8";
  EXPECT_EQ(classifyNode(other, byId, LowDtype::kBFloat16).kind, RuleKind::kRangeGuard);
}

TEST(ClassifyNodeTest, TheGuardsComeInTheirOrderAndKeepTheNodeFp32) {
  NodeFacts facts = linearIn("fc");
  facts.underflowToZero = verdict(GuardKind::kUnderflowToZero);
  facts.constantRange = verdict(GuardKind::kConstantRange);
  facts.lostScalar = verdict(GuardKind::kLostScalar);
  NodeDecision decided = classifyNode(facts, fastBf16(), LowDtype::kBFloat16);
  EXPECT_EQ(decided.category, OpCategory::kFp32);
  EXPECT_EQ(decided.kind, RuleKind::kRangeGuard);
  EXPECT_EQ(decided.guard->kind, GuardKind::kUnderflowToZero);
  EXPECT_EQ(decided.rule, describeGuard(*decided.guard, LowDtype::kBFloat16));
  facts.observedRange = verdict(GuardKind::kObservedIntegers);
  EXPECT_EQ(classifyNode(facts, fastBf16(), LowDtype::kBFloat16).guard->kind, GuardKind::kObservedIntegers);
  facts.observedRange.reset();
  facts.underflowToZero.reset();
  EXPECT_EQ(classifyNode(facts, fastBf16(), LowDtype::kBFloat16).guard->kind, GuardKind::kConstantRange);
  facts.constantRange.reset();
  EXPECT_EQ(classifyNode(facts, fastBf16(), LowDtype::kBFloat16).guard->kind, GuardKind::kLostScalar);
}

TEST(ClassifyNodeTest, ALostScalarCountsOnlyWhereTheNodeWouldNotKeepFp32) {
  OpPolicy policy = fastBf16();
  policy.exclude({"fc", std::nullopt, "by hand"});
  NodeFacts facts = linearIn("fc");
  facts.lostScalar = verdict(GuardKind::kLostScalar);
  const NodeDecision decided = classifyNode(facts, policy, LowDtype::kBFloat16);
  EXPECT_EQ(decided.kind, RuleKind::kExclusion);
  EXPECT_FALSE(decided.guard);
  EXPECT_EQ(decided.rule, "fp32: excluded: by hand");
  EXPECT_EQ(decided.reason, "excluded: by hand");
}

TEST(ClassifyNodeTest, ControlFlowFollowsWhereItsBlocksArePlannedAndKeepsFp32WhereNot) {
  NodeFacts facts;
  facts.op = "prim::If";
  facts.controlFlow = ControlFlow::kPlannedBlocks;
  OpPolicy policy = fastBf16();
  policy.forceLow({"*", std::nullopt, "everything"});
  policy.exclude({"*", std::nullopt, "everything"});
  NodeDecision decided = classifyNode(facts, policy, LowDtype::kBFloat16);
  EXPECT_EQ(decided.category, OpCategory::kFollow);  // neither forced low nor excluded
  EXPECT_EQ(decided.kind, RuleKind::kControlFlow);
  facts.controlFlow = ControlFlow::kOpaqueSubgraphs;
  decided = classifyNode(facts, policy, LowDtype::kBFloat16);
  EXPECT_EQ(decided.category, OpCategory::kFp32);
  EXPECT_EQ(decided.kind, RuleKind::kControlFlow);
  facts.unobserved = true;
  EXPECT_EQ(classifyNode(facts, policy, LowDtype::kBFloat16).kind, RuleKind::kUnobserved);
  facts.unobserved = false;
  facts.observedRange = verdict(GuardKind::kObservedOverflow);
  EXPECT_EQ(classifyNode(facts, policy, LowDtype::kBFloat16).kind, RuleKind::kRangeGuard);
}

TEST(ClassifyNodeTest, TheNodeRuleIsAskedOnlyWhereTheOrderReachesIt) {
  int asked = 0;
  const NodeRuleQuery rule = [&]() -> std::optional<NodeOverride> {
    ++asked;
    return NodeOverride{OpCategory::kFp32, RuleKind::kCallable, "the rule"};
  };
  NodeFacts facts = linearIn("fc");
  NodeDecision decided = classifyNode(facts, fastBf16(), LowDtype::kBFloat16, rule);
  EXPECT_EQ(decided.kind, RuleKind::kCallable);
  EXPECT_EQ(decided.rule, "fp32: the rule");
  EXPECT_EQ(asked, 1);
  OpPolicy excluding = fastBf16();
  excluding.exclude({"fc", std::nullopt, "by hand"});
  EXPECT_EQ(classifyNode(facts, excluding, LowDtype::kBFloat16, rule).kind, RuleKind::kExclusion);
  facts.constantRange = verdict(GuardKind::kConstantRange);
  EXPECT_EQ(classifyNode(facts, fastBf16(), LowDtype::kBFloat16, rule).kind, RuleKind::kRangeGuard);
  EXPECT_EQ(asked, 1);
  // a rule that answers nothing leaves the node to the policy
  facts.constantRange.reset();
  const NodeRuleQuery silent = []() -> std::optional<NodeOverride> { return std::nullopt; };
  EXPECT_EQ(classifyNode(facts, fastBf16(), LowDtype::kBFloat16, silent).kind, RuleKind::kPolicy);
}

TEST(ClassifyNodeTest, TheDemotionsChangeWhatThePolicyOrTheUserChose) {
  OpPolicy policy = fastBf16();
  policy.set("my::unpack", OpCategory::kLowFp32Output, "an op with fp32 outputs");
  NodeFacts facts;
  facts.op = "my::unpack";
  EXPECT_EQ(classifyNode(facts, policy, LowDtype::kBFloat16).category, OpCategory::kLowFp32Output);
  facts.writesTensorList = true;
  NodeDecision decided = classifyNode(facts, policy, LowDtype::kBFloat16);
  EXPECT_EQ(decided.category, OpCategory::kFp32);
  EXPECT_EQ(decided.kind, RuleKind::kWritesTensorList);

  NodeFacts outer = linearIn("fc");
  outer.sumsNothing = true;
  decided = classifyNode(outer, fastBf16(), LowDtype::kBFloat16);
  EXPECT_EQ(decided.category, OpCategory::kFollow);
  EXPECT_EQ(decided.kind, RuleKind::kSumsNothing);
  // an fp32 choice is not demoted to follow
  outer.op = "my::op";
  EXPECT_EQ(classifyNode(outer, fastBf16(), LowDtype::kBFloat16).kind, RuleKind::kUnknownOp);
}

TEST(ClassifyNodeTest, ATableLookupRunsLowWhereItsTableIsStoredLow) {
  NodeFacts facts;
  facts.op = "aten::embedding";
  NodeDecision decided = classifyNode(facts, fastBf16(), LowDtype::kBFloat16);
  EXPECT_EQ(decided.category, OpCategory::kFollow);
  facts.readsTableStoredLow = true;
  decided = classifyNode(facts, fastBf16(), LowDtype::kBFloat16);
  EXPECT_EQ(decided.category, OpCategory::kLowPrecision);
  EXPECT_EQ(decided.kind, RuleKind::kPolicy);
  // only a lookup: another op reading a table stored low keeps its own entry
  NodeFacts relu;
  relu.op = "aten::relu";
  relu.readsTableStoredLow = true;
  EXPECT_EQ(classifyNode(relu, fastBf16(), LowDtype::kBFloat16).category, OpCategory::kFollow);
}

} // namespace
} // namespace torch_mp::core

namespace torch_mp::core {
namespace {

TEST(ClassifyNodeTest, AReasonIsWhatDecidedSaysAndTheRuleBuildsOnIt) {
  NodeFacts input = linearIn("");
  input.boundary = Boundary::kInput;
  const NodeDecision io = classifyNode(input, fastBf16(), LowDtype::kBFloat16);
  EXPECT_EQ(io.reason, "keeps its dtype");
  EXPECT_EQ(io.rule, "input: keeps its dtype");

  NodeFacts guarded = linearIn("fc");
  guarded.constantRange = GuardVerdict{GuardKind::kConstantRange, "mask", 1e9, 65504.0};
  const NodeDecision fp16 = classifyNode(guarded, fastBf16(), LowDtype::kFloat16);
  EXPECT_EQ(fp16.reason, guardFinding(*guarded.constantRange, LowDtype::kFloat16));
  EXPECT_EQ(fp16.rule, describeGuard(*guarded.constantRange, LowDtype::kFloat16));

  NodeFacts outer = linearIn("fc");
  outer.sumsNothing = true;  // a demotion says its own reason
  const NodeDecision demoted = classifyNode(outer, fastBf16(), LowDtype::kBFloat16);
  EXPECT_EQ(demoted.kind, RuleKind::kSumsNothing);
  EXPECT_EQ(demoted.reason.rfind("nothing to sum", 0), 0u) << demoted.reason;
  EXPECT_NE(demoted.rule.find("[follow instead: " + demoted.reason + "]"), std::string::npos) << demoted.rule;
}

TEST(ClassifyNodeTest, APlannedRuleSaysWhatThePlannerChose) {
  EXPECT_EQ(plannedRule("follow: x", OpCategory::kFollow, false, true), "follow: x [planned low: fewest cast bytes]");
  EXPECT_EQ(plannedRule("widest: x", OpCategory::kWidest, false, false),
            "widest: x [planned fp32: fewest cast bytes]");
  EXPECT_NE(plannedRule("follow: x", OpCategory::kFollow, true, false).find("[forced to fp32: "), std::string::npos);
  EXPECT_EQ(plannedRule("low: x", OpCategory::kLowPrecision, false, true), "low: x");  // decided, not planned
}

} // namespace
} // namespace torch_mp::core
