// The cast ledger (jit/ir/casts): the conversion's casts are marked, fused ones counted with their bytes, cancelled ones
// and model casts not; what is left is read off the graph; the marks are taken off before the graph is handed out.
#include <gtest/gtest.h>
#include <torch/csrc/jit/passes/common_subexpression_elimination.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "jit/ir/casts.h"
#include "jit/ir/ir_utils.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

constexpr const char* kTwoReaders = R"IR(
    graph(%x : Float(2, 3, strides=[3, 1], device=cpu)):
      %a : Float(2, 3, strides=[3, 1], device=cpu) = aten::relu(%x)
      %b : Float(2, 3, strides=[3, 1], device=cpu) = aten::neg(%x)
      return (%a, %b))IR";

ObservedValues observedInput(const torch::jit::Graph& graph) {
  ObservedValues observed;
  observed.emplace(graph.inputs()[0], observedTensor({2, 3}));
  return observed;
}

TEST(CastLedgerTest, CreatesMarkedCastsAndPlainInsertsUnmarkedOnes) {
  auto graph = parseGraph(kTwoReaders);
  const ObservedValues observed = observedInput(*graph);
  CastLedger ledger(observed);
  CastArguments arguments(*graph);
  torch::jit::Node* relu = graph->outputs()[0]->node();
  torch::jit::WithInsertPoint guard(relu);
  torch::jit::Value* ours = ledger.create(arguments, graph->inputs()[0], at::kHalf);
  torch::jit::Value* plain = insertCast(arguments, graph->inputs()[0], at::kBFloat16);
  EXPECT_TRUE(CastLedger::created(ours->node()));
  EXPECT_FALSE(CastLedger::created(plain->node()));
  EXPECT_EQ(plainCastTarget(ours->node()), at::kHalf);
  EXPECT_EQ(recordedDtype(ours), at::kHalf);
  EXPECT_EQ(plainCastTarget(relu), std::nullopt);
  const CastRecord record = ledger.recordOf(ours->node());
  EXPECT_EQ(record.from, "Float");
  EXPECT_EQ(record.to, "Half");
  EXPECT_EQ(record.bytes, 6 * (4 + 2));  // read fp32, written fp16
  EXPECT_TRUE(record.reached);
  graph->lint();
}

TEST(CastArgumentsTest, CastsShareOneConstantPerArgumentAheadOfThemAll) {
  auto graph = parseGraph(kTwoReaders);
  CastArguments arguments(*graph);
  torch::jit::Value* x = graph->inputs()[0];
  std::vector<torch::jit::Node*> casts;
  for (int i = 1; i >= 0; --i) {  // before the second reader, then before the first: the constants move up
    torch::jit::WithInsertPoint guard(graph->outputs()[i]->node());
    casts.push_back(insertCast(arguments, x, at::kHalf)->node());
    casts.push_back(insertCast(arguments, x, at::kBFloat16)->node());
  }
  {  // a pass inserting at the top of the graph, where the constants now are: the cast goes after them
    torch::jit::WithInsertPoint guard(graph->block()->nodes().front());
    casts.push_back(insertCast(arguments, x, at::kHalf)->node());
  }
  EXPECT_EQ(casts[0]->input(1), casts[2]->input(1));  // one dtype constant per dtype
  EXPECT_NE(casts[0]->input(1), casts[1]->input(1));
  for (torch::jit::Node* cast : casts) {
    EXPECT_EQ(cast->input(0), x);
    EXPECT_EQ(cast->input(2), casts[0]->input(2));
    EXPECT_EQ(cast->input(3), casts[0]->input(2));
    EXPECT_EQ(cast->input(4), casts[0]->input(4));
  }
  EXPECT_EQ(plainCastTarget(casts[1]), at::kBFloat16);
  EXPECT_EQ(plainCastTarget(casts[2]), at::kHalf);
  // half, bf16, false, None: all ahead of the first cast
  FileCheck()
      .check_count("prim::Constant", 4, /*exactly=*/true)
      ->check_not("prim::Constant")
      ->check("aten::to(%x")
      ->run(*graph);
  graph->lint();
}

TEST(CastArgumentsTest, AConstantServesAtMost64CastsSoDestroyingOneScansAShortUseList) {
  auto graph = parseGraph(kTwoReaders);
  CastArguments arguments(*graph);
  torch::jit::Value* x = graph->inputs()[0];
  std::vector<torch::jit::Node*> casts;
  torch::jit::WithInsertPoint guard(graph->outputs()[0]->node());
  for (int i = 0; i < 100; ++i) {
    casts.push_back(insertCast(arguments, x, at::kHalf)->node());
  }
  EXPECT_EQ(casts[0]->input(1), casts[63]->input(1));  // the dtype: one constant for the first 64 casts
  EXPECT_NE(casts[63]->input(1), casts[64]->input(1));
  EXPECT_EQ(casts[0]->input(2), casts[31]->input(2));  // false, read twice per cast: one for the first 32
  EXPECT_NE(casts[31]->input(2), casts[32]->input(2));
  for (torch::jit::Node* cast : casts) {
    for (size_t i = 1; i < cast->inputs().size(); ++i) {
      EXPECT_LE(cast->input(i)->uses().size(), 64u);
    }
  }
  // dtype, None: 2 each; false: 4
  FileCheck().check_count("prim::Constant", 8, /*exactly=*/true)->run(*graph);
  graph->lint();
}

TEST(CastLedgerTest, FusedCastsAreCountedOnlyWhenTheConversionMadeThem) {
  auto graph = parseGraph(kTwoReaders);
  const ObservedValues observed = observedInput(*graph);
  CastLedger ledger(observed);
  CastArguments arguments(*graph);
  torch::jit::Value* x = graph->inputs()[0];
  torch::jit::WithInsertPoint guard(graph->outputs()[0]->node());
  torch::jit::Node* ours = ledger.create(arguments, x, at::kHalf)->node();
  torch::jit::Node* model = insertCast(arguments, x, at::kHalf)->node();
  ledger.fuse(ours);
  ledger.fuse(model);
  EXPECT_EQ(ledger.fusedCasts(), 1);
  EXPECT_EQ(ledger.fusedCastBytes(), 6 * (4 + 2));
  FileCheck().check_not("aten::to")->run(*graph);
  graph->lint();
}

TEST(CastLedgerTest, CancelledCastHandsItsReadersTheSameValue) {
  auto graph = parseGraph(kTwoReaders);
  const ObservedValues observed = observedInput(*graph);
  CastLedger ledger(observed);
  CastArguments arguments(*graph);
  torch::jit::Value* x = graph->inputs()[0];
  torch::jit::Node* relu = graph->outputs()[0]->node();
  {
    torch::jit::WithInsertPoint guard(relu);
    relu->replaceInput(0, ledger.create(arguments, x, at::kFloat));  // a no-op cast
  }
  const at::Tensor input = torch::randn({2, 3});
  const auto before = runGraph(graph, {input});
  CastLedger::cancel(relu->input(0)->node(), x);
  EXPECT_EQ(relu->input(0), x);
  EXPECT_EQ(ledger.fusedCasts(), 0);
  FileCheck().check_not("aten::to")->check("aten::relu(%x)")->run(*graph);
  expectSameOutputs(before, runGraph(graph, {input}));
  graph->lint();
}

TEST(CastLedgerTest, MarksLetEqualCastsMergeAndAreReleased) {
  auto graph = parseGraph(kTwoReaders);
  const ObservedValues observed = observedInput(*graph);
  CastLedger ledger(observed);
  CastArguments arguments(*graph);
  torch::jit::Value* x = graph->inputs()[0];
  for (torch::jit::Value* output : graph->outputs()) {
    torch::jit::WithInsertPoint guard(output->node());
    output->node()->replaceInput(0, ledger.create(arguments, x, at::kHalf));
  }
  const at::Tensor input = torch::randn({2, 3});
  const auto before = runGraph(graph, {input});
  torch::jit::EliminateCommonSubexpression(graph);  // the two casts of %x are one
  FileCheck().check_count("aten::to", 1, /*exactly=*/true)->run(*graph);
  const torch::jit::Node* merged = graph->outputs()[0]->node()->input(0)->node();
  EXPECT_TRUE(CastLedger::created(merged));
  std::unordered_set<const torch::jit::Node*> marked;
  forEachNode(graph->block(), [&](torch::jit::Node* node) {
    if (CastLedger::takeMark(node)) {
      marked.insert(node);
    }
  });
  EXPECT_EQ(marked, std::unordered_set<const torch::jit::Node*>{merged});
  EXPECT_FALSE(CastLedger::created(merged));
  EXPECT_EQ(graph->toString().find("torch_mp_cast"), std::string::npos);
  expectSameOutputs(before, runGraph(graph, {input}));
  graph->lint();
}

TEST(CastLedgerTest, ACastInABranchTheInputsDidNotTakeMovesNoBytes) {
  auto graph = parseGraph(R"IR(
    graph(%x : Float(2, 3, strides=[3, 1], device=cpu), %c : bool):
      %y : Tensor = prim::If(%c)
        block0():
          %r : Float(2, 3, strides=[3, 1], device=cpu) = aten::relu(%x)
          -> (%r)
        block1():
          -> (%x)
      return (%y))IR");
  ObservedValues observed = observedInput(*graph);
  torch::jit::Block* branch = graph->outputs()[0]->node()->blocks()[0];
  CastLedger ledger(observed);
  CastArguments arguments(*graph);
  torch::jit::WithInsertPoint guard(branch->nodes().front());
  torch::jit::Value* cast = ledger.create(arguments, graph->inputs()[0], at::kHalf);
  const CastRecord record = ledger.recordOf(cast->node());  // %r was never seen: the branch did not run
  EXPECT_FALSE(record.reached);
  EXPECT_EQ(record.bytes, 0);
  graph->lint();  // the cast's constants, in the top block ahead of the branch, dominate it
}

} // namespace
} // namespace torch_mp::jit
