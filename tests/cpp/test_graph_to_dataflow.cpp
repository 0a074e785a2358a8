// buildDataflow (jit/plan/graph_to_dataflow) on its own: which nodes become planner nodes with which category and rule
// kind, which values become planner values with which cast bytes and ties, how readers access them, and the order in
// which the user's choices are asked.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/scope.h>

#include <algorithm>

#include "jit/plan/graph_to_dataflow.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using core::OpCategory;
using core::RuleKind;

// conv2d (constant weight) -> relu -> softmax -> frac (in no list); an int tensor beside them.
constexpr const char* kMixedGraph = R"IR(
    graph(%x : Tensor, %w : Tensor, %i : Tensor):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %zero : int = prim::Constant[value=0]()
      %ones : int[] = prim::ListConstruct(%one, %one)
      %zeros : int[] = prim::ListConstruct(%zero, %zero)
      %c : Tensor = aten::conv2d(%x, %w, %none, %ones, %zeros, %ones, %one)
      %r : Tensor = aten::relu(%c)
      %s : Tensor = aten::softmax(%r, %one, %none)
      %f : Tensor = aten::frac(%s)
      %j : Tensor = aten::add(%i, %i, %one)
      return (%f, %j))IR";

struct Built {
  std::shared_ptr<torch::jit::Graph> graph;
  ObservedValues observed;
  DataflowMapping mapping;
};

// Observes the graph by running it (constants: a 4x3x3x3 weight for %w) and builds its dataflow for fp16.
Built build(const std::string& ir, const std::vector<c10::IValue>& inputs, const NodeRule& rule = {},
            const KeptFp32& keepFp32 = {}, core::OpPolicy policy = core::OpPolicy::defaults(
                core::Target::kCudaFloat16, core::CpuFeatures::all())) {
  Built built;
  built.graph = parseGraph(ir);
  std::vector<c10::IValue> stack = inputs;
  if (built.graph->inputs().size() > 1 && built.graph->inputs()[1]->debugName() == "w") {
    inlineInputAsConstant(*built.graph, 1, torch::randn({4, 3, 3, 3}));
    stack.erase(stack.begin() + 1);
  }
  assignNodeIds(*built.graph);
  built.observed = observeValues(built.graph, stack).values;
  built.mapping = buildDataflow(built.graph, built.observed, policy, at::kHalf, rule, keepFp32);
  return built;
}

int plannerNodeOf(const DataflowMapping& mapping, const std::string& op) {
  for (size_t n = 0; n < mapping.planned.size(); ++n) {
    if (mapping.planned[n].node->kind().toQualString() == op) {
      return static_cast<int>(n);
    }
  }
  return -1;
}

std::vector<c10::IValue> mixedInputs() {
  return {torch::randn({2, 3, 8, 8}), torch::Tensor(), torch::arange(6)};
}

TEST(GraphToDataflowTest, CategoriesAndRuleKindsComeFromThePolicyAndTheGraphsEdges) {
  const Built built = build(kMixedGraph, mixedInputs());
  const DataflowMapping& m = built.mapping;
  const std::vector<std::pair<std::string, std::pair<OpCategory, RuleKind>>> expected = {
      {"prim::Param", {OpCategory::kFp32, RuleKind::kIo}},
      {"aten::conv2d", {OpCategory::kLowPrecision, RuleKind::kPolicy}},
      {"aten::relu", {OpCategory::kFollow, RuleKind::kPolicy}},
      {"aten::softmax", {OpCategory::kFp32, RuleKind::kPolicy}},
      {"aten::frac", {OpCategory::kFp32, RuleKind::kUnknownOp}},
      {"prim::Return", {OpCategory::kFp32, RuleKind::kIo}},
  };
  ASSERT_EQ(m.planned.size(), expected.size());  // the integer add and the int lists are not planned
  for (size_t n = 0; n < expected.size(); ++n) {
    EXPECT_EQ(m.planned[n].node->kind().toQualString(), expected[n].first) << n;
    EXPECT_EQ(m.dataflow.nodes[n].category, expected[n].second.first) << expected[n].first;
    EXPECT_EQ(m.planned[n].ruleKind, expected[n].second.second) << expected[n].first;
  }
  EXPECT_EQ(m.unknownOps, std::vector<std::string>{"aten::frac"});
  EXPECT_EQ(m.planned[plannerNodeOf(m, "aten::frac")].ruleKind, RuleKind::kUnknownOp);
  EXPECT_EQ(m.unobservedNodes, 0);
}

TEST(GraphToDataflowTest, Fp32TensorsAreValuesWithTheBytesOfOneCastAndConstantsAndIntegersAreNot) {
  const Built built = build(kMixedGraph, mixedInputs());
  const DataflowMapping& m = built.mapping;
  const torch::jit::Value* x = built.graph->inputs()[0];
  const torch::jit::Value* i = built.graph->inputs()[1];
  ASSERT_TRUE(m.values.count(x));
  EXPECT_FALSE(m.values.count(i));  // an integer tensor is never cast
  const core::DataflowGraph::Value& input = m.dataflow.values[m.values.at(x)];
  EXPECT_EQ(input.castBytes, 2 * 3 * 8 * 8 * (4 + 2));  // read fp32, written fp16
  EXPECT_EQ(input.tie, core::Tie::kNone);
  EXPECT_EQ(input.consumers, std::vector<int>{plannerNodeOf(m, "aten::conv2d")});
  EXPECT_EQ(input.access, std::vector<core::Access>{core::Access::kReadsOnly});
  for (const auto& [value, index] : m.values) {
    EXPECT_NE(value->node()->kind(), c10::prim::Constant);  // the weight is folded for free, not planned
  }
}

TEST(GraphToDataflowTest, AWrittenTensorTiesItsSharingReadersAndAListTiesEverything) {
  const Built built = build(R"IR(
    graph(%a : Tensor, %b : Tensor):
      %one : int = prim::Constant[value=1]()
      %zero : int = prim::Constant[value=0]()
      %m : Tensor = aten::mm(%a, %b)
      %w : Tensor = aten::add_(%m, %b, %one)
      %l : Tensor[] = prim::ListConstruct(%m, %b)
      %c : Tensor = aten::cat(%l, %zero)
      return (%c))IR", {torch::randn({4, 4}), torch::randn({4, 4})});
  const DataflowMapping& m = built.mapping;
  const torch::jit::Node* mm = m.planned[plannerNodeOf(m, "aten::mm")].node;
  const core::DataflowGraph::Value& product = m.dataflow.values[m.values.at(mm->output())];
  EXPECT_EQ(product.tie, core::Tie::kReaders);  // written in place after a fresh mm: its sharing readers read one copy
  const torch::jit::Node* list = m.planned[plannerNodeOf(m, "prim::ListConstruct")].node;
  EXPECT_EQ(m.dataflow.values[m.values.at(list->output())].tie, core::Tie::kAll);
  EXPECT_EQ(m.dataflow.values[m.values.at(list->output())].castBytes, 0);
  // add_ writes the product: it shares it; the list holds it: it shares it too
  for (size_t c = 0; c < product.consumers.size(); ++c) {
    EXPECT_EQ(product.access[c], core::Access::kShares)
        << m.planned[product.consumers[c]].node->kind().toQualString();
  }
}

TEST(GraphToDataflowTest, TheFallbacksKeptNodesAreAskedBeforeTheNodeRule) {
  std::vector<std::string> asked;
  const NodeRule rule = [&](const NodeDescription& node) -> std::optional<NodeOverride> {
    asked.push_back(node.op);
    return NodeOverride{OpCategory::kFp32, RuleKind::kCallable, "the rule"};
  };
  const Built plain = build(kMixedGraph, mixedInputs(), rule);
  const NodeId conv = *nodeIdOf(plain.mapping.planned[plannerNodeOf(plain.mapping, "aten::conv2d")].node);
  asked.clear();
  const Built kept = build(kMixedGraph, mixedInputs(), rule, KeptFp32{{}, {conv}});
  const DataflowMapping& m = kept.mapping;
  const int convNode = plannerNodeOf(m, "aten::conv2d");
  EXPECT_EQ(*nodeIdOf(m.planned[convNode].node), conv);  // one graph, numbered alike: the same id
  EXPECT_EQ(m.planned[convNode].ruleKind, RuleKind::kFallback);
  EXPECT_EQ(m.dataflow.nodes[convNode].category, OpCategory::kFp32);
  EXPECT_EQ(m.planned[plannerNodeOf(m, "aten::relu")].ruleKind, RuleKind::kCallable);
  EXPECT_EQ(m.planned[plannerNodeOf(m, "aten::relu")].rule, "fp32: the rule");
  EXPECT_EQ(std::count(asked.begin(), asked.end(), "aten::conv2d"), 0);  // the rule never saw the kept conv
  EXPECT_EQ(std::count(asked.begin(), asked.end(), "aten::relu"), 1);
}

TEST(GraphToDataflowTest, AnExclusionMatchingTheNodesModuleComesBeforeTheNodeRule) {
  auto graph = parseGraph(kMixedGraph);
  inlineInputAsConstant(*graph, 1, torch::randn({4, 3, 3, 3}));
  // put every node in module "head.fc", as a trace records it (module_scope reads the scope)
  const auto scope = c10::make_intrusive<torch::jit::Scope>()->push(c10::Symbol::scope("__module.head.fc"));
  for (torch::jit::Node* node : graph->nodes()) {
    node->setScope(scope);
  }
  assignNodeIds(*graph);
  const ObservedValues observed = observeValues(graph, {torch::randn({2, 3, 8, 8}), torch::arange(6)}).values;
  core::OpPolicy policy = core::OpPolicy::defaults(core::Target::kCudaFloat16, core::CpuFeatures::all());
  policy.exclude({"head", std::nullopt, "the head stays fp32"});
  int asked = 0;
  const NodeRule rule = [&](const NodeDescription&) -> std::optional<NodeOverride> {
    ++asked;
    return std::nullopt;
  };
  const DataflowMapping m = buildDataflow(graph, observed, policy, at::kHalf, rule);
  const int conv = plannerNodeOf(m, "aten::conv2d");
  EXPECT_EQ(m.planned[conv].ruleKind, RuleKind::kExclusion);
  EXPECT_EQ(m.planned[conv].rule, "fp32: excluded: the head stays fp32");
  EXPECT_EQ(asked, 0);
  EXPECT_TRUE(policy.exclusionFor("aten::conv2d", "head.fc"));
  EXPECT_FALSE(policy.exclusionFor("aten::conv2d", "heads.fc"));
}

TEST(GraphToDataflowTest, ANodeTheInputsDidNotReachIsLeftAloneAndCounted) {
  const Built built = build(R"IR(
    graph(%x : Tensor, %c : bool):
      %y : Tensor = prim::If(%c)
        block0():
          %r : Tensor = aten::relu(%x)
          -> (%r)
        block1():
          %n : Tensor = aten::exp(%x)
          -> (%n)
      return (%y))IR", {torch::randn({4}), true});
  const DataflowMapping& m = built.mapping;
  const int exp = plannerNodeOf(m, "aten::exp");
  ASSERT_GE(exp, 0);
  EXPECT_EQ(m.planned[exp].ruleKind, RuleKind::kUnobserved);
  EXPECT_TRUE(m.planned[exp].unobserved);
  const int branch = plannerNodeOf(m, "prim::If");
  EXPECT_EQ(m.planned[branch].ruleKind, RuleKind::kUnobserved);  // a branch not taken: its boundaries keep their dtype
  EXPECT_EQ(m.planned[branch].blockBoundaries.size(), 4u);         // each block's param and return nodes
  EXPECT_EQ(m.unobservedNodes, 2);
  EXPECT_EQ(m.planned[plannerNodeOf(m, "aten::relu")].ruleKind, RuleKind::kPolicy);
}

TEST(GraphToDataflowTest, ControlFlowWhoseBranchesRanIsOneFollowNode) {
  Built built = build(R"IR(
    graph(%x : Tensor, %n : int):
      %true : bool = prim::Constant[value=1]()
      %y : Tensor = prim::Loop(%n, %true, %x)
        block0(%i : int, %h : Tensor):
          %m : Tensor = aten::mm(%h, %h)
          -> (%true, %m)
      return (%y))IR", {torch::randn({4, 4}) * 0.1, int64_t{2}});
  const DataflowMapping& m = built.mapping;
  const int loop = plannerNodeOf(m, "prim::Loop");
  EXPECT_EQ(m.dataflow.nodes[loop].category, OpCategory::kFollow);
  EXPECT_EQ(m.planned[loop].ruleKind, RuleKind::kControlFlow);
  EXPECT_EQ(m.planned[loop].blockBoundaries.size(), 2u);
  EXPECT_EQ(m.dataflow.nodes[plannerNodeOf(m, "aten::mm")].category, OpCategory::kLowPrecision);
}

} // namespace
} // namespace torch_mp::jit
