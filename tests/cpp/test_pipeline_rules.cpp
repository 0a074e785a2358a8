// convertGraphInPlace on IR-string graphs: each rule where it fires and where it must not, with the exact
// casts checked by FileCheck, lint after the pass, and numerics against the fp32 graph.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>

#include "jit/pipeline.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

struct Converted {
  std::shared_ptr<torch::jit::Graph> graph;
  ConversionReport report;
  std::vector<c10::IValue> before;
  std::vector<c10::IValue> after;
};

Converted convert(const std::shared_ptr<torch::jit::Graph>& original, const std::vector<c10::IValue>& inputs,
                  core::LowDtype low = core::LowDtype::kFloat16, const std::function<void(ConvertOptions&)>& edit = {}) {
  Converted result;
  result.before = runGraph(original, inputs);
  result.graph = original->copy();
  // planned for a CPU with fast kernels in both low dtypes, whichever CPU runs the test
  ConvertOptions options = defaultOptions(c10::DeviceType::CPU, low, core::CpuFeatures::all());
  if (edit) {
    edit(options);
  }
  result.report = convertGraphInPlace(result.graph, inputs, options);
  result.graph->lint();
  result.after = runGraph(result.graph, inputs);
  return result;
}

const NodeDecision& decisionFor(const ConversionReport& report, const std::string& op) {
  for (const NodeDecision& node : report.nodes) {
    if (node.op == op) {
      return node;
    }
  }
  throw std::runtime_error("no decision for " + op);
}

TEST(PipelineRulesTest, ConvReluSoftmaxCastsOnceInAndOnceOut) {
  auto graph = parseGraph(kConvReluSoftmax);
  inlineInputAsConstant(*graph, 1, torch::randn({4, 3, 3, 3}));
  // Without fusion (test_fuse_casts.cpp has it with): the softmax reads an fp32 copy.
  auto result = convert(graph, {torch::randn({2, 3, 8, 8})}, core::LowDtype::kFloat16, [](ConvertOptions& o) { o.fuseCasts = false; });
  FileCheck()
      .check("Half(4, 3, 3, 3")->check("prim::Constant")
      ->check("HalfTensor = aten::to(%x, ")->check("aten::conv2d")->check("aten::relu")
      ->check("FloatTensor = aten::to(")->check("aten::softmax")->check_not("aten::to")
      ->run(*result.graph);
  EXPECT_EQ(result.report.casts.size(), 2u);
  EXPECT_EQ(result.report.casts[0].bytes, 2 * 3 * 8 * 8 * 6);  // one fp32 read + one fp16 write per element
  EXPECT_EQ(result.report.weightBytesAfter * 2, result.report.weightBytesBefore);
  expectCloseOutputs(result.before, result.after, 1e-2);
}

TEST(PipelineRulesTest, Fp32OnlyGraphGetsNoCast) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %e : Tensor = aten::exp(%x)
      %s : Tensor = aten::softmax(%e, %one, %none)
      return (%s))IR");
  auto result = convert(graph, {torch::randn({3, 5})});
  FileCheck().check_not("aten::to")->run(*result.graph);
  EXPECT_TRUE(result.report.casts.empty());
  expectSameOutputs(result.before, result.after);
}

TEST(PipelineRulesTest, IntegerTensorsAreNeverCast) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor, %offset : Tensor):
      %false : bool = prim::Constant[value=0]()
      %minus : int = prim::Constant[value=-1]()
      %one : int = prim::Constant[value=1]()
      %m : Tensor = aten::mm(%a, %b)
      %i : Tensor = aten::argmax(%m, %minus, %false)
      %j : Tensor = aten::add(%i, %offset, %one)
      return (%m, %j))IR");
  auto result = convert(graph, {torch::randn({4, 6}), torch::randn({6, 5}), torch::arange(4)});
  FileCheck().check_not("aten::to(%offset")->check_not("aten::to(%i")->run(*result.graph);
  EXPECT_EQ(result.after[1].toTensor().scalar_type(), at::kLong);
  EXPECT_EQ(result.after[0].toTensor().scalar_type(), at::kFloat);
  expectCloseOutputs({result.before[0]}, {result.after[0]}, 1e-2);
}

TEST(PipelineRulesTest, DoubleGraphIsUntouched) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor):
      %m : Tensor = aten::mm(%a, %b)
      %r : Tensor = aten::relu(%m)
      return (%r))IR");
  auto result = convert(graph, {torch::randn({4, 6}, at::kDouble), torch::randn({6, 5}, at::kDouble)});
  FileCheck().check_not("aten::to")->run(*result.graph);
  EXPECT_EQ(result.report.lowPrecisionNodes(), 0);
  expectSameOutputs(result.before, result.after);
}

TEST(PipelineRulesTest, UnreachedBranchIsLeftAloneAndReported) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor, %flag : bool):
      %m : Tensor = prim::If(%flag)
        block0():
          %x : Tensor = aten::mm(%a, %b)
          -> (%x)
        block1():
          %y : Tensor = aten::exp(%a)
          -> (%y)
      return (%m))IR");
  auto a = torch::randn({4, 4});
  auto b = torch::randn({4, 4});
  auto result = convert(graph, {a, b, true});
  EXPECT_EQ(result.report.unobservedNodes, 1);  // the exp of block1, which never ran
  FileCheck().check("prim::If")->check("block0")->check("aten::mm")->check("block1")->check_not("aten::to")
      ->check("aten::exp")->run(*result.graph);
  expectCloseOutputs(result.before, result.after, 1e-2);
  // The unreached branch still computes what it did.
  expectSameOutputs(runGraph(graph, {a, b, false}), runGraph(result.graph, {a, b, false}));
}

// The untaken branch returns what the taken one did: the If carries fp16 into the next matmul, and the untaken
// branch casts its own result at its end, so the path taken has no cast around the If.
TEST(PipelineRulesTest, UntakenBranchCastsItsResultToTheIfsLowOutput) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor, %flag : bool):
      %m : Tensor = prim::If(%flag)
        block0():
          %x : Tensor = aten::mm(%a, %b)
          -> (%x)
        block1():
          %y : Tensor = aten::exp(%a)
          -> (%y)
      %z : Tensor = aten::mm(%m, %b)
      return (%z))IR");
  auto a = torch::randn({4, 4});
  auto b = torch::randn({4, 4});
  auto result = convert(graph, {a, b, true});
  FileCheck().check("HalfTensor = prim::If")->check("block0")->check("HalfTensor = aten::mm")->check("block1")
      ->check("FloatTensor = aten::exp")->check("HalfTensor = aten::to(")->check_next("->")->check_not("aten::to(")
      ->check("HalfTensor = aten::mm(")->run(*result.graph);
  int reached = 0;
  for (const CastRecord& cast : result.report.casts) {
    reached += cast.reached;
    EXPECT_TRUE(cast.reached || cast.bytes == 0) << cast.value;
  }
  EXPECT_EQ(reached, 3);  // %a and %b in, %z out
  expectCloseOutputs(result.before, result.after, 1e-2);
  expectCloseOutputs(runGraph(graph, {a, b, false}), runGraph(result.graph, {a, b, false}), 1e-2);
}

// Readers in branches the example inputs did not take get casts of their own there, not one shared cast above
// both Ifs that every inference would pay for.
TEST(PipelineRulesTest, ReadersInUntakenBranchesCastInsideThem) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor, %flag : bool):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %h : Tensor = aten::mm(%a, %b)
      %p : Tensor = prim::If(%flag)
        block0():
          %q : Tensor = aten::mm(%h, %b)
          -> (%q)
        block1():
          %e : Tensor = aten::exp(%h)
          -> (%e)
      %r : Tensor = prim::If(%flag)
        block0():
          %t : Tensor = aten::mm(%p, %b)
          -> (%t)
        block1():
          %s : Tensor = aten::softmax(%h, %one, %none)
          -> (%s)
      return (%r))IR");
  auto a = torch::randn({4, 4});
  auto b = torch::randn({4, 4});
  auto result = convert(graph, {a, b, true});
  // the exp's branch casts %h up itself; the softmax's branch reads it with dtype=float (a fused cast)
  FileCheck().check("HalfTensor = aten::mm(")->check("prim::If")->check("block1")->check("FloatTensor = aten::to(")
      ->check("aten::exp")->check("prim::If")->check("block1")->check_not("aten::to(")->check("aten::softmax")
      ->run(*result.graph);
  // on the path taken: %a and %b in, %r out; no cast of %h
  int reached = 0;
  for (const CastRecord& cast : result.report.casts) {
    reached += cast.reached;
  }
  EXPECT_EQ(reached, 3);
  EXPECT_EQ(result.report.casts.size(), 5u);  // and the exp's branch: %h up, its result down
  expectCloseOutputs(result.before, result.after, 1e-2);
  expectCloseOutputs(runGraph(graph, {a, b, false}), runGraph(result.graph, {a, b, false}), 1e-2);
}

TEST(PipelineRulesTest, LoopCarriesLowPrecisionBetweenMatmuls) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %w : Tensor, %n : int):
      %true : bool = prim::Constant[value=1]()
      %h : Tensor = prim::Loop(%n, %true, %x)
        block0(%i : int, %carried : Tensor):
          %m : Tensor = aten::mm(%carried, %w)
          %t : Tensor = aten::tanh(%m)
          -> (%true, %t)
      return (%h))IR");
  inlineInputAsConstant(*graph, 1, torch::randn({8, 8}) / 3);
  auto result = convert(graph, {torch::randn({2, 8}), int64_t(3)});
  // One cast into the loop and one out of it; none inside the body.
  FileCheck().check("HalfTensor = aten::to(%x")->check("prim::Loop")->check("aten::mm")->check_not("aten::to")
      ->check("-> (")->check("FloatTensor = aten::to(")->run(*result.graph);
  EXPECT_EQ(result.report.casts.size(), 2u);
  expectCloseOutputs(result.before, result.after, 1e-2);
}

TEST(PipelineRulesTest, TupleOutputsKeepFp32) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor):
      %m : Tensor = aten::mm(%a, %b)
      %r : Tensor = aten::relu(%m)
      %t : (Tensor, Tensor) = prim::TupleConstruct(%m, %r)
      return (%t))IR");
  auto result = convert(graph, {torch::randn({4, 6}), torch::randn({6, 5})}, core::LowDtype::kBFloat16);
  FileCheck().check("aten::mm")->check("FloatTensor = aten::to")->check("prim::TupleConstruct")->run(*result.graph);
  for (const c10::IValue& element : result.after[0].toTupleRef().elements()) {
    EXPECT_EQ(element.toTensor().scalar_type(), at::kFloat);
  }
}

TEST(PipelineRulesTest, InPlaceWriteIsNeverSplitByACast) {
  // sinh_ writes %m through the view %v (so the mutation cannot be removed); a cast of %m for only some readers would
  // give them a copy the write never reaches. The mm still runs low: its result is cast once, right after it, and
  // every reader (the view that frac_ writes through and the add) reads that one fp32 copy, as sinh_ is unknown.
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor, %c : Tensor):
      %one : int = prim::Constant[value=1]()
      %minus : int = prim::Constant[value=-1]()
      %shape : int[] = prim::ListConstruct(%minus)
      %m : Tensor = aten::mm(%a, %b)
      %v : Tensor = aten::view(%m, %shape)
      %unused : Tensor = aten::sinh_(%v)
      %s : Tensor = aten::add(%m, %c, %one)
      return (%s))IR");
  auto result = convert(graph, {torch::randn({4, 6}), torch::randn({6, 5}), torch::randn({4, 5})});
  result.graph->lint();
  FileCheck().check_count("aten::to", 3, /*exactly=*/true)->run(*result.graph);
  FileCheck()
      .check("HalfTensor = aten::mm")
      ->check_next("FloatTensor = aten::to(")
      ->run(*result.graph);
  const torch::jit::Node* mm = nullptr;
  for (const torch::jit::Node* node : result.graph->nodes()) {
    if (node->kind() == c10::aten::mm) {
      mm = node;
    }
  }
  ASSERT_NE(mm, nullptr);
  ASSERT_EQ(mm->output()->uses().size(), 1u);
  std::vector<std::string> readersOfTheCopy;
  for (const torch::jit::Use& use : mm->output()->uses()[0].user->output()->uses()) {
    readersOfTheCopy.push_back(use.user->kind().toQualString());
  }
  EXPECT_EQ(readersOfTheCopy, (std::vector<std::string>{"aten::view", "aten::add"}));
  expectCloseOutputs(result.before, result.after, 1e-2);
}

// Two 3x3 convolutions of %x (1x3x8x8, padding 1) with weights %w1 and %w2 (4x3x3x3) as constants, then the body.
std::shared_ptr<torch::jit::Graph> twoConvolutions(const std::string& body, const std::string& extraInputs = "") {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %w1 : Tensor, %w2 : Tensor)IR" + extraInputs + R"IR():
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %minus : int = prim::Constant[value=-1]()
      %ones : int[] = prim::ListConstruct(%one, %one)
      %flat : int[] = prim::ListConstruct(%minus)
      %a : Tensor = aten::conv2d(%x, %w1, %none, %ones, %ones, %ones, %one)
      %b : Tensor = aten::conv2d(%x, %w2, %none, %ones, %ones, %ones, %one)
)IR" + body);
  inlineInputAsConstant(*graph, 2, torch::randn({4, 3, 3, 3}));
  inlineInputAsConstant(*graph, 1, torch::randn({4, 3, 3, 3}));
  return graph;
}

// The ops a tie forced to fp32 against their category.
std::vector<std::string> forcedToFp32(const ConversionReport& report) {
  std::vector<std::string> ops;
  for (const NodeDecision& node : report.nodes) {
    if (node.forcedToFp32) {
      ops.push_back(node.op);
    }
  }
  return ops;
}

TEST(PipelineRulesTest, InPlaceAddOnAConvOutputKeepsTheConvLow) {
  // %b is written in place by the add and read afterwards through a view taken before it (so the write stays): the
  // add, the view and the relu, follow ops, take the convolutions' precision.
  auto graph = twoConvolutions(R"IR(
      %v : Tensor = aten::view(%b, %flat)
      %sum : Tensor = aten::add_(%b, %a, %one)
      %r : Tensor = aten::relu(%v)
      return (%r))IR");
  auto result = convert(graph, {torch::randn({1, 3, 8, 8})});
  FileCheck()
      .check_count("HalfTensor = aten::conv2d", 2, /*exactly=*/true)
      ->check("HalfTensor = aten::view")
      ->check("HalfTensor = aten::add_")
      ->check("HalfTensor = aten::relu")
      ->run(*result.graph);
  FileCheck().check_count("aten::to", 2, /*exactly=*/true)->run(*result.graph);  // %x in, %r out
  EXPECT_EQ(forcedToFp32(result.report), std::vector<std::string>{});
  expectCloseOutputs(result.before, result.after, 1e-2);
}

TEST(PipelineRulesTest, ConvOutputWrittenByAnFp32OpIsCastOnceAndReadLowAfterTheWrite) {
  // pow_ (fp32) writes %a through a view, which no pass can undo: %a is cast once after its convolution for the
  // view and pow_ to share; the reader (a third convolution of %a) only reads it and takes its own low
  // cast, placed after the write so that it sees it. No convolution is pulled to fp32.
  auto graph = twoConvolutions(R"IR(
      %v : Tensor = aten::view(%a, %flat)
      %two : int = prim::Constant[value=2]()
      %written : Tensor = aten::pow_(%v, %two)
      %c : Tensor = aten::conv2d(%a, %w3, %none, %ones, %ones, %ones, %one)
      %s : Tensor = aten::add(%c, %b, %one)
      return (%s))IR", ", %w3 : Tensor");
  inlineInputAsConstant(*graph, 1, torch::randn({4, 4, 3, 3}));
  auto result = convert(graph, {torch::randn({1, 3, 8, 8})});
  FileCheck()
      .check("HalfTensor = aten::conv2d")
      ->check_next("FloatTensor = aten::to(")
      ->check("FloatTensor = aten::view(")
      ->check_next("FloatTensor = aten::pow_(")
      ->check("HalfTensor = aten::to(")
      ->check_next("HalfTensor = aten::conv2d(")
      ->run(*result.graph);
  FileCheck().check_count("HalfTensor = aten::conv2d", 3, /*exactly=*/true)->run(*result.graph);
  EXPECT_EQ(forcedToFp32(result.report), std::vector<std::string>{"aten::view"});  // shares pow_'s copy
  expectCloseOutputs(result.before, result.after, 2e-2);
}

TEST(PipelineRulesTest, ListOfConvOutputsWithAnFp32MemberCastsEachMemberWhereItEntersTheList) {
  // The list and cat cannot be split by a cast, but each member can be cast where it enters the list: the cheapest
  // plan here casts the two convolution outputs (256 elements each) to fp32 rather than the softmax (192) to low
  // and the concatenation (704) back to fp32 for the output. The convolutions stay low.
  auto graph = twoConvolutions(R"IR(
      %soft : Tensor = aten::softmax(%x, %one, %none)
      %members : Tensor[] = prim::ListConstruct(%a, %b, %soft)
      %joined : Tensor = aten::cat(%members, %one)
      return (%joined))IR");
  auto result = convert(graph, {torch::randn({1, 3, 8, 8})});
  FileCheck().check_count("HalfTensor = aten::conv2d", 2, /*exactly=*/true)->run(*result.graph);
  FileCheck().check_count("FloatTensor = aten::to(", 2, /*exactly=*/true)->run(*result.graph);
  FileCheck().check_count("aten::to", 3, /*exactly=*/true)->run(*result.graph);  // and %x once, for both
  FileCheck().check("Tensor[] = prim::ListConstruct(")->check_next("FloatTensor = aten::cat(")->run(*result.graph);
  EXPECT_EQ(forcedToFp32(result.report), std::vector<std::string>{});
  expectCloseOutputs(result.before, result.after, 1e-2);
}

TEST(PipelineRulesTest, GraphInputWrittenInPlaceIsReadLowOnlyAfterTheWrite) {
  // relu_ writes the caller's %a (not undoable, the caller sees it): relu_ stays on the fp32 input itself, and the
  // matmul's low copy is made after it. Non-firing half: nothing casts %a before the write.
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor):
      %r : Tensor = aten::relu_(%a)
      %m : Tensor = aten::mm(%a, %b)
      return (%m))IR");
  const at::Tensor a = torch::randn({4, 6});
  auto result = convert(graph, {a, torch::randn({6, 5})});
  FileCheck()
      .check_not("aten::to(%a")
      ->check("FloatTensor = aten::relu_(%a)")
      ->check("HalfTensor = aten::to(%a")
      ->check("HalfTensor = aten::mm(")
      ->run(*result.graph);
  EXPECT_EQ(forcedToFp32(result.report), std::vector<std::string>{"aten::relu_"});  // shares the caller's fp32 %a
  expectCloseOutputs(result.before, result.after, 1e-2);
}

TEST(PipelineRulesTest, GraphInputOnlyReadIsCastOnceEvenWhereAListMemberIsWritten) {
  // AliasDb counts %x among the writers' possible targets (graph inputs and list members share its wildcard set);
  // following %x's own uses shows only reads, so both convolutions read one shared cast.
  auto graph = twoConvolutions(R"IR(
      %r : Tensor = aten::relu_(%b)
      %members : Tensor[] = prim::ListConstruct(%a, %r)
      %more : Tensor[] = aten::add(%members, %members)
      %joined : Tensor = aten::cat(%more, %one)
      return (%joined))IR");
  auto result = convert(graph, {torch::randn({1, 3, 8, 8})});
  FileCheck().check_count("aten::to(%x", 1, /*exactly=*/true)->run(*result.graph);
  FileCheck().check_count("HalfTensor = aten::conv2d", 2, /*exactly=*/true)->run(*result.graph);
  expectCloseOutputs(result.before, result.after, 1e-2);
}

// An embedding table %table (16 x 8) as a constant, looked up at %ids (2 x 3), then the body.
std::shared_ptr<torch::jit::Graph> embeddingLookup(const std::string& body, const at::Tensor& table,
                                                   const std::string& extraInputs = "") {
  auto graph = parseGraph(R"IR(
    graph(%ids : Tensor, %table : Tensor)IR" + extraInputs + R"IR():
      %none : NoneType = prim::Constant()
      %false : bool = prim::Constant[value=0]()
      %minus : int = prim::Constant[value=-1]()
      %one : int = prim::Constant[value=1]()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %width : int[] = prim::Constant[value=[8]]()
      %e : Tensor = aten::embedding(%table, %ids, %minus, %false, %false)
)IR" + body);
  inlineInputAsConstant(*graph, 1, table);
  return graph;
}

// Bytes of fp32 and of low-precision tensor constants in the graph (each constant node counted).
std::pair<int64_t, int64_t> constantBytesByPrecision(const torch::jit::Graph& graph) {
  std::pair<int64_t, int64_t> bytes{0, 0};
  for (const torch::jit::Node* node : graph.nodes()) {
    if (node->kind() == c10::prim::Constant && node->output()->type()->kind() == c10::TypeKind::TensorType) {
      const at::Tensor tensor = torch::jit::toIValue(node->output())->toTensor();
      (tensor.scalar_type() == at::kFloat ? bytes.first : bytes.second) += tensor.nbytes();
    }
  }
  return bytes;
}

TEST(PipelineRulesTest, EmbeddingOfAConstantTableRunsLowAndCastsOnlyTheRowsItReads) {
  // Read by an fp32 op (layer_norm) and a low one (mm): the lookup runs on the low table, its 6 rows are cast for
  // the layer_norm, the mm reads them as they are; the table is stored once, low.
  const at::Tensor table = torch::randn({16, 8});
  auto graph = embeddingLookup(R"IR(
      %normed : Tensor = aten::layer_norm(%e, %width, %none, %none, %eps, %false)
      %products : Tensor = aten::matmul(%e, %w)
      return (%normed, %products))IR", table, ", %w : Tensor");
  auto result = convert(graph, {torch::randint(0, 16, {2, 3}), torch::randn({8, 4})}, core::LowDtype::kFloat16);
  FileCheck()
      .check("HalfTensor = aten::embedding(")
      ->check("FloatTensor = aten::to(")
      ->check("FloatTensor = aten::layer_norm(")
      ->run(*result.graph);
  FileCheck().check("HalfTensor = aten::matmul(")->run(*result.graph);
  EXPECT_EQ(constantBytesByPrecision(*result.graph), std::make_pair(int64_t{0}, int64_t{16 * 8 * 2}));
  EXPECT_EQ(result.report.weightBytesKeptFp32, 0);
  expectCloseOutputs(result.before, result.after, 1e-2);
}

TEST(PipelineRulesTest, TiedTableReadByEmbeddingAndMatmulIsStoredOnceLow) {
  // The output head reads the embedding table transposed (a tied LM head): both read one low copy.
  const at::Tensor table = torch::randn({16, 8});
  auto graph = embeddingLookup(R"IR(
      %normed : Tensor = aten::layer_norm(%e, %width, %none, %none, %eps, %false)
      %logits : Tensor = aten::linear(%normed, %table, %none)
      return (%logits))IR", table);
  auto result = convert(graph, {torch::randint(0, 16, {2, 3})}, core::LowDtype::kFloat16);
  FileCheck().check("HalfTensor = aten::embedding(")->check("HalfTensor = aten::linear(")->run(*result.graph);
  EXPECT_EQ(constantBytesByPrecision(*result.graph), std::make_pair(int64_t{0}, int64_t{16 * 8 * 2}));
  EXPECT_EQ(result.report.weightBytesAfter * 2, result.report.weightBytesBefore);
  expectCloseOutputs(result.before, result.after, 1e-2);
}

TEST(PipelineRulesTest, TiedTableWhoseOtherReaderStaysFp32IsStoredOnceFp32) {
  // On a CPU without fp16 kernels the output layer stays fp32: the lookup follows it, and the table is stored once,
  // fp32, as before (stored low too, the converted weights would be 1.5x the fp32 model's).
  const at::Tensor table = torch::randn({16, 8});
  auto graph = embeddingLookup(R"IR(
      %normed : Tensor = aten::layer_norm(%e, %width, %none, %none, %eps, %false)
      %logits : Tensor = aten::linear(%normed, %table, %none)
      return (%logits))IR", table);
  auto result = convert(graph, {torch::randint(0, 16, {2, 3})}, core::LowDtype::kFloat16, [](ConvertOptions& o) {
    o.request.policy = core::OpPolicy::defaults(core::Target::kCpuFloat16, core::CpuFeatures::none());
  });
  EXPECT_EQ(decisionFor(result.report, "aten::embedding").precision, core::Precision::kFp32);
  FileCheck().check_not("Half")->run(*result.graph);
  EXPECT_EQ(constantBytesByPrecision(*result.graph), std::make_pair(int64_t{16 * 8 * 4}, int64_t{0}));
  EXPECT_EQ(result.report.weightBytesAfter, result.report.weightBytesBefore);
  expectSameOutputs(result.before, result.after);
}

TEST(PipelineRulesTest, EmbeddingOfATableComputedAtRunTimeFollows) {
  // Non-firing: the table is an input, not a constant; the lookup follows its fp32 reader and nothing is cast.
  auto graph = parseGraph(R"IR(
    graph(%ids : Tensor, %table : Tensor):
      %none : NoneType = prim::Constant()
      %false : bool = prim::Constant[value=0]()
      %minus : int = prim::Constant[value=-1]()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %width : int[] = prim::Constant[value=[8]]()
      %e : Tensor = aten::embedding(%table, %ids, %minus, %false, %false)
      %normed : Tensor = aten::layer_norm(%e, %width, %none, %none, %eps, %false)
      return (%normed))IR");
  auto result = convert(graph, {torch::randint(0, 16, {2, 3}), torch::randn({16, 8})}, core::LowDtype::kFloat16);
  FileCheck().check_not("aten::to")->check("FloatTensor = aten::embedding(")->run(*result.graph);
  expectSameOutputs(result.before, result.after);
}

TEST(PipelineRulesTest, ConvertingTwiceChangesNothing) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %m : Tensor = aten::mm(%a, %b)
      %s : Tensor = aten::softmax(%m, %one, %none)
      return (%s))IR");
  std::vector<c10::IValue> inputs{torch::randn({4, 6}), torch::randn({6, 5})};
  auto once = convert(graph, inputs);
  auto twice = convert(once.graph, inputs);
  // Same nodes in the same order; constant pooling may order the constants differently.
  auto nonConstantNodes = [](const std::shared_ptr<torch::jit::Graph>& g) {
    std::vector<std::string> kinds;
    for (const torch::jit::Node* node : g->nodes()) {
      if (node->kind() != c10::prim::Constant) {
        kinds.push_back(node->kind().toQualString());
      }
    }
    return kinds;
  };
  EXPECT_EQ(nonConstantNodes(once.graph), nonConstantNodes(twice.graph));
  expectSameOutputs(once.after, twice.after);
  EXPECT_TRUE(twice.report.casts.empty());
}

TEST(PipelineRulesTest, RangeGuardKeepsLargeConstantsOutOfFp16) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %w : Tensor, %v : Tensor):
      %m : Tensor = aten::mm(%a, %w)
      %n : Tensor = aten::mm(%m, %v)
      return (%n))IR");
  inlineInputAsConstant(*graph, 2, torch::randn({5, 3}));
  auto large = torch::randn({6, 5});
  large[0][0] = 1e5;
  inlineInputAsConstant(*graph, 1, large);
  const at::Tensor input = torch::randn({4, 6}) * 0.01;  // keeps 1e5 * input within fp16 for the next matmul
  auto fp16 = convert(graph, {input});
  int guarded = 0;
  for (const NodeDecision& node : fp16.report.nodes) {
    guarded += node.ruleKind == core::RuleKind::kRangeGuard && node.precision == core::Precision::kFp32;
  }
  EXPECT_EQ(guarded, 1);
  EXPECT_TRUE(fp16.after[0].toTensor().isfinite().all().item<bool>());
  expectCloseOutputs(fp16.before, fp16.after, 1e-2);
  auto bf16 = convert(graph, {input}, core::LowDtype::kBFloat16);  // bf16 holds 1e5: no guard
  EXPECT_EQ(bf16.report.lowPrecisionNodes(), 2);
}

TEST(PipelineRulesTest, ReportListsUnknownOpsAndTheConvertedGraph) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor):
      %m : Tensor = aten::mm(%a, %b)
      %f : Tensor = aten::frac(%m)
      return (%f))IR");
  auto result = convert(graph, {torch::randn({4, 6}), torch::randn({6, 5})});
  ASSERT_EQ(result.report.unknownOps, std::vector<std::string>{"aten::frac"});
  // the graph: inputs, the low mm (reading two casts), the cast of its result back to fp32, frac, the output
  const std::vector<GraphItem>& items = result.report.graph;
  std::vector<std::string> kinds;
  for (const GraphItem& item : items) {
    kinds.push_back(std::string(toString(item.kind)) + ":" + item.op);
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"input:a", "input:b", "cast:aten::to", "cast:aten::to", "node:aten::mm",
                                             "cast:aten::to", "node:aten::frac", "output:output"}));
  const NodeDecision& mm = decisionFor(result.report, "aten::mm");
  EXPECT_EQ(items[4].id, mm.id);
  std::vector<NodeId> read = items[4].inputs;
  std::sort(read.begin(), read.end());
  EXPECT_EQ(read, (std::vector<NodeId>{items[2].id, items[3].id}));  // the casts of %a and %b, in either order
  std::vector<NodeId> castSources = {items[2].inputs.at(0), items[3].inputs.at(0)};
  std::sort(castSources.begin(), castSources.end());
  EXPECT_EQ(castSources, (std::vector<NodeId>{items[0].id, items[1].id}));
  EXPECT_EQ(items[6].id, decisionFor(result.report, "aten::frac").id);
  EXPECT_EQ(items[6].inputs, std::vector<NodeId>{items[5].id});
  EXPECT_EQ(items[7].inputs, std::vector<NodeId>{items[6].id});
  ASSERT_EQ(result.report.casts.size(), 3u);
  for (size_t c = 0; c < 3; ++c) {
    const GraphItem& cast = items[c < 2 ? 2 + c : 5];
    EXPECT_EQ(cast.cast, static_cast<int>(c));
    EXPECT_EQ(result.report.casts[c].id, cast.id);
    EXPECT_GT(cast.id, std::max(mm.id, items[6].id));  // casts are numbered above every node
  }
  EXPECT_EQ(result.report.casts[0].to, "Half");
  EXPECT_EQ(result.report.casts[2].to, "Float");
}

constexpr const char* kMatmulSoftmaxMatmul = R"IR(
    graph(%a : Tensor, %b : Tensor):
      %one : int = prim::Constant[value=1]()
      %none : NoneType = prim::Constant()
      %m : Tensor = aten::mm(%a, %b)
      %s : Tensor = aten::softmax(%m, %one, %none)
      %t : Tensor = aten::t(%s)
      %o : Tensor = aten::mm(%s, %t)
      return (%o))IR";

TEST(PipelineRulesTest, NodeRuleOverridesThePolicyWithItsKindAndReason) {
  auto graph = parseGraph(kMatmulSoftmaxMatmul);
  std::vector<NodeDescription> asked;
  auto result = convert(graph, {torch::randn({4, 6}), torch::randn({6, 5})}, core::LowDtype::kFloat16, [&](ConvertOptions& o) {
    o.nodeRule = [&](const NodeDescription& node) -> std::optional<NodeOverride> {
      asked.push_back(node);
      if (node.op == "aten::mm" && node.inputShapes[0] == std::vector<int64_t>{4, 5}) {  // the second mm
        return NodeOverride{core::OpCategory::kFp32, core::RuleKind::kCallable, "the last matmul stays fp32"};
      }
      return std::nullopt;
    };
  });
  // the first mm is low, the second (kept fp32 by the rule) reads the fp32 softmax: casts of the inputs only (the
  // softmax upcasts through its dtype= argument)
  FileCheck().check_count("HalfTensor = aten::to(", 2, /*exactly=*/true)->check("aten::mm")
      ->check("FloatTensor = aten::softmax")->check_not("aten::to")->run(*result.graph);
  const NodeDecision& last = result.report.nodes.back();
  EXPECT_EQ(last.op, "aten::mm");
  EXPECT_EQ(last.precision, core::Precision::kFp32);
  EXPECT_EQ(last.ruleKind, core::RuleKind::kCallable);
  EXPECT_EQ(last.rule, "fp32: the last matmul stays fp32");
  ASSERT_FALSE(asked.empty());
  EXPECT_EQ(asked.front().op, "aten::mm");
  ASSERT_EQ(asked.front().inputShapes.size(), 2u);
  EXPECT_EQ(*asked.front().inputShapes[0], (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(*asked.front().inputDtypes[1], c10::ScalarType::Float);
  expectCloseOutputs(result.before, result.after, 1e-2);
}

TEST(PipelineRulesTest, NodeRuleWithoutOpinionChangesNothing) {
  auto graph = parseGraph(kMatmulSoftmaxMatmul);
  const std::vector<c10::IValue> inputs{torch::randn({4, 6}), torch::randn({6, 5})};
  auto plain = convert(graph, inputs);
  auto ruled = convert(graph, inputs, core::LowDtype::kFloat16, [](ConvertOptions& o) {
    o.nodeRule = [](const NodeDescription&) -> std::optional<NodeOverride> { return std::nullopt; };
  });
  EXPECT_EQ(plain.graph->toString(), ruled.graph->toString());
}

TEST(PipelineRulesTest, LowPrecisionIOTakesAndReturnsTheLowDtype) {
  auto graph = parseGraph(kMatmulSoftmaxMatmul);
  const at::Tensor a = torch::randn({4, 6});
  const at::Tensor b = torch::randn({6, 5});
  auto result = convert(graph, {a, b}, core::LowDtype::kFloat16, [](ConvertOptions& o) { o.request.keepIoDtypes = false; });
  // the first mm reads the fp16 inputs directly and the last one returns fp16: only the softmax's output cast
  // remains (its input cast is folded into its dtype= argument)
  FileCheck().check("graph(%a : Half")->check("%b : Half")->check_not("aten::to(%a")->check("aten::mm(%a, %b)")
      ->check_not("aten::to")->check("aten::softmax")->check("HalfTensor = aten::to(")
      ->check("aten::mm")->check_not("aten::to")->run(*result.graph);
  auto out = runGraph(result.graph, {a.to(at::kHalf), b.to(at::kHalf)});
  EXPECT_EQ(out[0].toTensor().scalar_type(), at::kHalf);
  expectCloseOutputs({result.before[0].toTensor().to(at::kHalf)}, out, 1e-2);
}

TEST(PipelineRulesTest, LowPrecisionIOLeavesIntegerAndFp32OnlyGraphsTyped) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %i : Tensor):
      %one : int = prim::Constant[value=1]()
      %none : NoneType = prim::Constant()
      %s : Tensor = aten::softmax(%x, %one, %none)
      %j : Tensor = aten::add(%i, %i, %one)
      %t : (Tensor, Tensor) = prim::TupleConstruct(%s, %j)
      return (%t))IR");
  const at::Tensor x = torch::randn({3, 4});
  const at::Tensor i = torch::arange(3);
  auto result = convert(graph, {x, i}, core::LowDtype::kFloat16, [](ConvertOptions& o) { o.request.keepIoDtypes = false; });
  // the softmax stays fp32 between the input and output casts (the input's folded into its dtype= argument); the
  // integer tensor is never cast
  FileCheck().check("%x : Half")->check("%i : Long")->check_not("aten::to(%x")->check("aten::softmax(%x, %")
      ->check("HalfTensor = aten::to(")->check("prim::TupleConstruct")->run(*result.graph);
  auto out = runGraph(result.graph, {x.to(at::kHalf), i});
  const auto& elements = out[0].toTupleRef().elements();
  EXPECT_EQ(elements[0].toTensor().scalar_type(), at::kHalf);
  EXPECT_EQ(elements[1].toTensor().scalar_type(), at::kLong);
}


// matmul -> relu -> layer_norm: a low op, a follow op and an fp32 op.
constexpr const char* kMatmulReluNorm = R"IR(
    graph(%x : Tensor, %w : Tensor):
      %none : NoneType = prim::Constant()
      %eps : float = prim::Constant[value=1e-05]()
      %true : bool = prim::Constant[value=1]()
      %n : int = prim::Constant[value=5]()
      %shape : int[] = prim::ListConstruct(%n)
      %p : Tensor = aten::matmul(%x, %w)
      %r : Tensor = aten::relu(%p)
      %y : Tensor = aten::layer_norm(%r, %shape, %none, %none, %eps, %true)
      return (%y))IR";

TEST(PipelineRulesTest, LowFp32OutputCastsRightAfterTheOpAndItsReadersStayFp32) {
  auto graph = parseGraph(kMatmulReluNorm);
  // positive operands: no cancellation in the products, so the norm (which magnifies the error of a row of small
  // values by 1/std) compares with fp32 within fp16's rounding
  inlineInputAsConstant(*graph, 1, torch::rand({6, 5}));
  const std::vector<c10::IValue> inputs{torch::rand({3, 4, 6}) + 0.5};
  // as a plain low op, the relu follows it in fp16 and the norm reads an upcast of the relu's output
  auto low = convert(graph, inputs);
  FileCheck().check("aten::matmul")->check("HalfTensor = aten::relu")->check("FloatTensor = aten::to(")
      ->check("aten::layer_norm")->run(*low.graph);
  auto fp32Output = convert(graph, inputs, core::LowDtype::kFloat16, [](ConvertOptions& o) {
    o.request.policy.set("aten::matmul", core::OpCategory::kLowFp32Output, "feeds a norm");
  });
  // the matmul still reads fp16 (its input cast and the fp16 weight), its result is cast once, on CPU (no
  // aten::matmul out_dtype kernel), and the relu and the norm read fp32
  FileCheck().check("Half(6, 5")->check("HalfTensor = aten::to(%x, ")->check("HalfTensor = aten::matmul(")
      ->check("FloatTensor = aten::to(")->check("FloatTensor = aten::relu")->check_not("aten::to")
      ->check("aten::layer_norm")->run(*fp32Output.graph);
  EXPECT_EQ(fp32Output.report.casts.size(), 2u);
  const NodeDecision& matmul = decisionFor(fp32Output.report, "aten::matmul");
  EXPECT_EQ(matmul.precision, core::Precision::kLow);
  EXPECT_EQ(matmul.rule, "low_fp32_output: feeds a norm");
  EXPECT_EQ(decisionFor(fp32Output.report, "aten::relu").precision, core::Precision::kFp32);
  expectCloseOutputs(fp32Output.before, fp32Output.after, 1e-2);
}

// matmul -> layer_norm (with a scale and a shift) -> matmul: a norm between two low ops.
constexpr const char* kMatmulNormMatmul = R"IR(
    graph(%x : Tensor, %w : Tensor, %gamma : Tensor, %beta : Tensor):
      %eps : float = prim::Constant[value=1e-05]()
      %true : bool = prim::Constant[value=1]()
      %n : int = prim::Constant[value=5]()
      %shape : int[] = prim::ListConstruct(%n)
      %p : Tensor = aten::matmul(%x, %w)
      %y : Tensor = aten::layer_norm(%p, %shape, %gamma, %beta, %eps, %true)
      %t : Tensor = aten::t(%w)
      %o : Tensor = aten::matmul(%y, %t)
      return (%o))IR";

TEST(PipelineRulesTest, CudaFp16PolicyRunsALayerNormBetweenLowOpsLow) {
  auto graph = parseGraph(kMatmulNormMatmul);
  inlineInputAsConstant(*graph, 3, torch::randn({5}));
  inlineInputAsConstant(*graph, 2, torch::rand({5}) + 0.5);
  inlineInputAsConstant(*graph, 1, torch::randn({6, 5}));
  const std::vector<c10::IValue> inputs{torch::randn({3, 4, 6})};
  // the CUDA policies as data, run here on the CPU: under cuda_fp16 the norm follows its fp16 input, so the only
  // casts are the input's and the output's, and its scale and shift are stored fp16
  auto fp16 = convert(graph, inputs, core::LowDtype::kFloat16, [](ConvertOptions& o) {
    o.request.policy = core::OpPolicy::defaults(core::Target::kCudaFloat16, core::CpuFeatures::none());
  });
  FileCheck().check("Half(5")->check("Half(5")->check("HalfTensor = aten::matmul(")->check_not("aten::to(")
      ->check("HalfTensor = aten::layer_norm(")->check_not("aten::to(")->check("HalfTensor = aten::matmul(")
      ->check("FloatTensor = aten::to(")->run(*fp16.graph);
  EXPECT_EQ(fp16.report.casts.size(), 2u);
  const NodeDecision& norm = decisionFor(fp16.report, "aten::layer_norm");
  EXPECT_EQ(norm.precision, core::Precision::kLow);
  EXPECT_EQ(norm.category, core::OpCategory::kFollow);  // cuda_fp16's table: the norm follows its input
  EXPECT_EQ(norm.ruleKind, core::RuleKind::kPolicy);
  expectCloseOutputs(fp16.before, fp16.after, 2e-2);
  // cuda_bf16 keeps it fp32, like the CPU policies
  auto bf16 = convert(graph, inputs, core::LowDtype::kBFloat16, [](ConvertOptions& o) {
    o.request.policy = core::OpPolicy::defaults(core::Target::kCudaBFloat16, core::CpuFeatures::none());
  });
  EXPECT_EQ(decisionFor(bf16.report, "aten::layer_norm").precision, core::Precision::kFp32);
  EXPECT_EQ(decisionFor(convert(graph, inputs).report, "aten::layer_norm").precision, core::Precision::kFp32);
}

TEST(PipelineRulesTest, LowFp32OutputFeedingSoftmaxFoldsItsCastIntoTheSoftmax) {
  auto graph = parseGraph(kMatmulSoftmaxMatmul);
  auto result = convert(graph, {torch::randn({4, 6}), torch::randn({6, 5})}, core::LowDtype::kFloat16, [](ConvertOptions& o) {
    o.request.policy.set("aten::mm", core::OpCategory::kLowFp32Output, "feeds a softmax");
  });
  // the first mm's fp32 result is what the softmax computes from, in one kernel: softmax(low, dtype=float)
  FileCheck().check("HalfTensor = aten::mm(")->check_not("FloatTensor = aten::to(")
      ->check("FloatTensor = aten::softmax(")->run(*result.graph);
  EXPECT_EQ(result.report.fusedCasts, 1);
  expectCloseOutputs(result.before, result.after, 1e-2);
}

TEST(PipelineRulesTest, LowFp32OutputWithAListResultRunsInFp32) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      %two : int = prim::Constant[value=2]()
      %zero : int = prim::Constant[value=0]()
      %parts : Tensor[] = aten::split(%x, %two, %zero)
      %first : Tensor = aten::__getitem__(%parts, %zero)
      return (%first))IR");
  auto result = convert(graph, {torch::randn({4, 3})}, core::LowDtype::kFloat16, [](ConvertOptions& o) {
    o.request.policy.set("aten::split", core::OpCategory::kLowFp32Output, "asked for");
  });
  FileCheck().check_not("aten::to")->run(*result.graph);
  const NodeDecision& split = decisionFor(result.report, "aten::split");
  EXPECT_EQ(split.precision, core::Precision::kFp32);
  EXPECT_EQ(split.ruleKind, core::RuleKind::kWritesTensorList);
  expectSameOutputs(result.before, result.after);
}

// A matrix product that sums something stays low; an einsum that sums nothing (an outer product) follows, and
// between fp32 producers and an fp32 reader it stays fp32: no cast at all.
TEST(PipelineRulesTest, ProductThatSumsNothingFollowsItsNeighbours) {
  auto graphFor = [](const std::string& equation) {
    return parseGraph(R"IR(
      graph(%p : Tensor, %f : Tensor):
        %eq : str = prim::Constant[value=")IR" + equation + R"IR("]()
        %none : NoneType = prim::Constant()
        %operands : Tensor[] = prim::ListConstruct(%p, %f)
        %angles : Tensor = aten::einsum(%eq, %operands, %none)
        %c : Tensor = aten::cos(%angles)
        return (%c))IR");
  };
  const std::vector<c10::IValue> inputs{torch::arange(200).to(at::kFloat), torch::rand({8})};
  auto outer = convert(graphFor("i,j->ij"), inputs, core::LowDtype::kBFloat16);
  FileCheck().check_not("aten::to")->check("aten::einsum")->check("aten::cos")->run(*outer.graph);
  const auto einsum = std::find_if(outer.report.nodes.begin(), outer.report.nodes.end(),
                                   [](const NodeDecision& node) { return node.op == "aten::einsum"; });
  ASSERT_NE(einsum, outer.report.nodes.end());
  EXPECT_EQ(einsum->precision, core::Precision::kFp32);
  EXPECT_EQ(einsum->ruleKind, core::RuleKind::kSumsNothing);
  expectCloseOutputs(outer.before, outer.after, 1e-6);

  // dot product 3.43, cos -0.96: far from cos's zeros, where a relative tolerance would mean nothing
  const std::vector<c10::IValue> vectors{torch::linspace(0, 1, 8), torch::linspace(0.5, 1, 8)};
  auto dot = convert(graphFor("i,i->"), vectors, core::LowDtype::kBFloat16);  // sums over i: a low product
  FileCheck().check_count("BFloat16Tensor = aten::to(", 2, /*exactly=*/true)->check("BFloat16Tensor = aten::einsum")
      ->run(*dot.graph);
  expectCloseOutputs(dot.before, dot.after, 2e-2);
}

// Integers beyond those the low dtype holds exactly keep the node that reads them in fp32 (and only then).
TEST(PipelineRulesTest, IntegerValuesBeyondTheExactRangeKeepFp32) {
  auto graph = parseGraph(R"IR(
    graph(%coords : Tensor, %w : Tensor):
      %none : NoneType = prim::Constant()
      %y : Tensor = aten::linear(%coords, %w, %none)
      return (%y))IR");
  const at::Tensor w = torch::randn({4, 2});
  auto wide = convert(graph, {torch::arange(600).reshape({300, 2}).to(at::kFloat), w}, core::LowDtype::kBFloat16);
  FileCheck().check_not("aten::to")->check("aten::linear")->run(*wide.graph);
  ASSERT_TRUE(wide.report.nodes[0].guard);
  EXPECT_EQ(wide.report.nodes[0].guard->kind, core::GuardKind::kObservedIntegers);
  EXPECT_EQ(wide.report.nodes[0].guard->seen, 599.0);
  expectSameOutputs(wide.before, wide.after);

  auto narrow = convert(graph, {torch::arange(200).reshape({100, 2}).to(at::kFloat), w}, core::LowDtype::kBFloat16);
  FileCheck().check("BFloat16Tensor = aten::to(%coords")->check("aten::linear")->run(*narrow.graph);
  auto fractional = convert(graph, {torch::arange(600).reshape({300, 2}).to(at::kFloat) + 0.5, w}, core::LowDtype::kBFloat16);
  FileCheck().check("BFloat16Tensor = aten::to(%coords")->check("aten::linear")->run(*fractional.graph);
  // from 2^24 on every fp32 value is an integer: large activations are not taken for positions
  auto huge = convert(graph, {torch::arange(600).reshape({300, 2}).to(at::kFloat) * 65536.0, w}, core::LowDtype::kBFloat16);
  FileCheck().check("BFloat16Tensor = aten::to(%coords")->check("aten::linear")->run(*huge.graph);
}

// clamp converts its bound to the tensor's dtype: 1e-8 is 0 in fp16, and log(clamp(relu(x), 1e-8)) would be -inf.
// The clamp feeds log: the underflow-to-zero guard names it first; feeding a product, the lost scalar does.
TEST(PipelineRulesTest, ScalarTheLowDtypeLosesKeepsItsReaderFp32) {
  auto graphWithBound = [](const std::string& bound, const std::string& reader = "aten::log(%c)") {
    return parseGraph(R"IR(
      graph(%x : Tensor, %w : Tensor):
        %bound : float = prim::Constant[value=)IR" + bound + R"IR(]()
        %none : NoneType = prim::Constant()
        %p : Tensor = aten::mm(%x, %w)
        %r : Tensor = aten::relu(%p)
        %c : Tensor = aten::clamp(%r, %bound, %none)
        %y : Tensor = )IR" + reader + R"IR(
        return (%y))IR");
  };
  const std::vector<c10::IValue> inputs{torch::randn({8, 6}), torch::randn({6, 5})};
  auto tiny = convert(graphWithBound("1e-08"), inputs);
  FileCheck().check("HalfTensor = aten::relu")->check("FloatTensor = aten::to(")->check("FloatTensor = aten::clamp")
      ->run(*tiny.graph);
  const NodeDecision& clamp = decisionFor(tiny.report, "aten::clamp");
  EXPECT_EQ(clamp.precision, core::Precision::kFp32);
  EXPECT_EQ(clamp.ruleKind, core::RuleKind::kRangeGuard);
  ASSERT_TRUE(clamp.guard);
  EXPECT_EQ(clamp.guard->kind, core::GuardKind::kUnderflowToZero);
  EXPECT_EQ(clamp.guard->value, clamp.output);
  EXPECT_FLOAT_EQ(clamp.guard->seen, 1e-8);  // the clamped values, observed in fp32
  EXPECT_EQ(decisionFor(tiny.report, "aten::log").guard->kind, core::GuardKind::kUnderflowToZero);
  EXPECT_TRUE(tiny.after[0].toTensor().isfinite().all().item<bool>());
  auto product = convert(graphWithBound("1e-08", "aten::mul(%c, %c)"), inputs);
  const NodeDecision& productClamp = decisionFor(product.report, "aten::clamp");
  EXPECT_EQ(productClamp.precision, core::Precision::kFp32);
  ASSERT_TRUE(productClamp.guard);
  EXPECT_EQ(productClamp.guard->kind, core::GuardKind::kLostScalar);
  EXPECT_EQ(productClamp.guard->seen, 1e-8);
  EXPECT_EQ(productClamp.guard->limit, 0.0);
  EXPECT_FALSE(decisionFor(product.report, "aten::mul").guard);  // a product of a 0 is no inf
  expectCloseOutputs(tiny.before, tiny.after, 1e-2);

  auto held = convert(graphWithBound("0.001"), inputs);  // fp16 holds 1e-3 to 0.01%: no guard
  FileCheck().check("HalfTensor = aten::clamp")->run(*held.graph);
  auto bf16 = convert(graphWithBound("1e-08"), inputs, core::LowDtype::kBFloat16);  // bf16 has fp32's exponent range
  FileCheck().check("BFloat16Tensor = aten::clamp")->run(*bf16.graph);
  EXPECT_TRUE(bf16.after[0].toTensor().isfinite().all().item<bool>());
}

TEST(PipelineRulesTest, ForcedLowRunsAGuardedNodeLowAndReportsTheGuardItOverrode) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %w : Tensor):
      %p : Tensor = aten::mm(%x, %w)
      %r : Tensor = aten::relu(%p)
      return (%r))IR");
  // products of 4e4: beyond half of fp16's largest number, so the observed-range guard keeps the mm fp32
  const std::vector<c10::IValue> inputs{torch::full({4, 8}, 100.0), torch::full({8, 3}, 50.0)};
  auto guarded = convert(graph, inputs);
  EXPECT_EQ(decisionFor(guarded.report, "aten::mm").precision, core::Precision::kFp32);
  EXPECT_EQ(decisionFor(guarded.report, "aten::mm").ruleKind, core::RuleKind::kRangeGuard);

  auto forced = convert(graph, inputs, core::LowDtype::kFloat16, [](ConvertOptions& o) {
    o.request.policy.forceLow({"*", std::vector<std::string>{"aten::mm"}, "the user knows"});
  });
  const NodeDecision& mm = decisionFor(forced.report, "aten::mm");
  EXPECT_EQ(mm.precision, core::Precision::kLow);
  EXPECT_EQ(mm.ruleKind, core::RuleKind::kForcedLow);
  ASSERT_TRUE(mm.guard);
  EXPECT_EQ(mm.guard->kind, core::GuardKind::kObservedOverflow);
  FileCheck().check("HalfTensor = aten::mm")->run(*forced.graph);
  // non-firing: a rule for another op leaves the guard as it was
  auto other = convert(graph, inputs, core::LowDtype::kFloat16, [](ConvertOptions& o) {
    o.request.policy.forceLow({"*", std::vector<std::string>{"aten::conv2d"}, "the user knows"});
  });
  EXPECT_EQ(decisionFor(other.report, "aten::mm").ruleKind, core::RuleKind::kRangeGuard);
  expectSameOutputs(guarded.before, other.after);

  // by node: the id the report gave the guarded mm forces it; another node's id leaves the guard
  const std::string mmId = std::to_string(decisionFor(guarded.report, "aten::mm").id);
  auto byNode = convert(graph, inputs, core::LowDtype::kFloat16, [&](ConvertOptions& o) { o.request.policy.forceLowNode(mmId, "node"); });
  EXPECT_EQ(decisionFor(byNode.report, "aten::mm").ruleKind, core::RuleKind::kForcedLow);
  EXPECT_EQ(decisionFor(byNode.report, "aten::mm").guard->kind, core::GuardKind::kObservedOverflow);
  FileCheck().check("HalfTensor = aten::mm")->run(*byNode.graph);
  const std::string reluId = std::to_string(decisionFor(guarded.report, "aten::relu").id);
  auto otherNode = convert(graph, inputs, core::LowDtype::kFloat16, [&](ConvertOptions& o) { o.request.policy.forceLowNode(reluId, "n"); });
  EXPECT_EQ(decisionFor(otherNode.report, "aten::mm").ruleKind, core::RuleKind::kRangeGuard);
}

// The kernels stage re-lays and fuses only convolutions the example inputs ran on a CUDA device (here typed so, the
// weight a CPU constant, as in test_cuda_convolutions.cpp); a graph that ran on the CPU has nothing for it.
TEST(PipelineRulesTest, KernelsStageRewritesOnlyConvolutionsThatRanOnCuda) {
  for (const std::string device : {"cuda:0", "cpu"}) {
    const std::string tensor = "Float(1, 4, 6, 6, strides=[144, 36, 6, 1], requires_grad=0, device=" + device + ")";
    auto graph = parseGraph(R"IR(
      graph(%x : Float(1, 3, 8, 8, strides=[192, 64, 8, 1], requires_grad=0, device=)IR" + device + R"IR(), %w : Tensor):
        %none : NoneType = prim::Constant()
        %one : int = prim::Constant[value=1]()
        %zero : int = prim::Constant[value=0]()
        %ones : int[] = prim::ListConstruct(%one, %one)
        %zeros : int[] = prim::ListConstruct(%zero, %zero)
        %c : )IR" + tensor + R"IR( = aten::conv2d(%x, %w, %none, %ones, %zeros, %ones, %one)
        %r : )IR" + tensor + R"IR( = aten::relu(%c)
        return (%r))IR");
    inlineInputAsConstant(*graph, 1, torch::randn({4, 3, 3, 3}));
    const bool cuda = device != "cpu";
    PreparedGraph prepared = prepareTypedGraph(graph);
    const ConversionReport report = convertPrepared(
        prepared, defaultOptions(cuda ? c10::kCUDA : c10::kCPU, core::LowDtype::kFloat16, core::CpuFeatures::all(),
                                 core::CudaCapability{9, 0}));
    prepared.graph->lint();
    EXPECT_EQ(report.channelsLastConvolutions, cuda ? 1 : 0) << device;
    EXPECT_EQ(report.fusedConvolutions, cuda ? 1 : 0) << device;
    FileCheck().check_count("aten::cudnn_convolution_relu", cuda ? 1 : 0, /*exactly=*/true)->run(*prepared.graph);
  }
}

// An IBN unit (conv -> split -> the first half's contiguous copy instance-normalised inside nn.InstanceNorm2d's If,
// the second's batch-normalised -> cat -> relu -> conv) typed as run on cuda:0 goes through every stage: the plan
// keeps the instance norm fp32 and the convolutions low, and the kernels stage keeps the unit NHWC with no copy (the
// casts at either end change the layout as they change the dtype). The weights are CPU constants (the passes read their sizes and dtypes), so the
// converted graph runs here on CPU inputs, within fp16 rounding of the fp32 graph.
TEST(PipelineRulesTest, IbnUnitTypedOnCudaStaysNhwcThroughEveryStage) {
  auto type = [](const std::string& sizes, const std::string& strides) {
    return "Float(" + sizes + ", strides=[" + strides + "], requires_grad=0, device=cuda:0)";
  };
  const std::string half = type("2, 2, 8, 8", "256, 64, 8, 1");
  auto graph = parseGraph(R"IR(
    graph(%x : )IR" + type("2, 3, 8, 8", "192, 64, 8, 1") + R"IR(, %w1 : Tensor, %w2 : Tensor, %gamma : Tensor,
          %beta : Tensor, %mean : Tensor, %var : Tensor):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %zero : int = prim::Constant[value=0]()
      %two : int = prim::Constant[value=2]()
      %three : int = prim::Constant[value=3]()
      %true : bool = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %momentum : float = prim::Constant[value=0.1]()
      %eps : float = prim::Constant[value=1e-05]()
      %ones : int[] = prim::ListConstruct(%one, %one)
      %c1 : )IR" + type("2, 4, 8, 8", "256, 64, 8, 1") + R"IR( = aten::conv2d(%x, %w1, %none, %ones, %ones, %ones, %one)
      %halves : Tensor[] = aten::split(%c1, %two, %one)
      %h1 : )IR" + half + R"IR( = aten::__getitem__(%halves, %zero)
      %h1c : )IR" + type("2, 2, 8, 8", "128, 64, 8, 1") + R"IR( = aten::contiguous(%h1, %zero)
      %d : int = aten::dim(%h1c)
      %unbatched : bool = aten::eq(%d, %three)
      %inorm : )IR" + type("2, 2, 8, 8", "128, 64, 8, 1") + R"IR( = prim::If(%unbatched)
        block0():
          %u : Tensor = aten::unsqueeze(%h1c, %zero)
          %un : Tensor = aten::instance_norm(%u, %gamma, %beta, %none, %none, %true, %momentum, %eps, %true)
          %s : Tensor = aten::squeeze(%un, %zero)
          -> (%s)
        block1():
          %n : )IR" + type("2, 2, 8, 8", "128, 64, 8, 1") + R"IR( = aten::instance_norm(%h1c, %gamma, %beta, %none, %none, %true, %momentum, %eps, %true)
          -> (%n)
      %h2 : )IR" + half + R"IR( = aten::__getitem__(%halves, %one)
      %h2c : )IR" + type("2, 2, 8, 8", "128, 64, 8, 1") + R"IR( = aten::contiguous(%h2, %zero)
      %bn : )IR" + type("2, 2, 8, 8", "128, 64, 8, 1") + R"IR( = aten::batch_norm(%h2c, %gamma, %beta, %mean, %var, %false, %momentum, %eps, %true)
      %parts : Tensor[] = prim::ListConstruct(%inorm, %bn)
      %cat : )IR" + type("2, 4, 8, 8", "256, 64, 8, 1") + R"IR( = aten::cat(%parts, %one)
      %r : )IR" + type("2, 4, 8, 8", "256, 64, 8, 1") + R"IR( = aten::relu(%cat)
      %c2 : )IR" + type("2, 4, 8, 8", "256, 64, 8, 1") + R"IR( = aten::conv2d(%r, %w2, %none, %ones, %ones, %ones, %one)
      return (%c2))IR");
  const std::vector<at::Tensor> weights = {torch::randn({4, 3, 3, 3}), torch::randn({4, 4, 3, 3}), torch::randn({2}),
                                           torch::randn({2}), torch::randn({2}), torch::rand({2}) + 0.5};
  for (size_t i = weights.size(); i > 0; --i) {
    inlineInputAsConstant(*graph, i, weights[i - 1]);
  }
  const std::vector<c10::IValue> inputs = {torch::randn({2, 3, 8, 8})};
  const auto before = runGraph(graph, inputs);
  PreparedGraph prepared = prepareTypedGraph(graph);
  const ConversionReport report = convertPrepared(
      prepared, defaultOptions(c10::kCUDA, core::LowDtype::kFloat16, core::CpuFeatures::all(), core::CudaCapability{9, 0}));
  prepared.graph->lint();
  EXPECT_EQ(report.channelsLastConvolutions, 2);
  EXPECT_EQ(decisionFor(report, "aten::conv2d").precision, core::Precision::kLow);
  FileCheck().check("aten::conv2d")->check("aten::split")->check("block1")->check_not("aten::contiguous")
      ->check("aten::var_mean")->check("aten::addcmul")->check_not("aten::contiguous")->check("aten::batch_norm")
      ->check("aten::cat")->check("aten::conv2d")->check_not("aten::contiguous")->run(*prepared.graph);
  // the input cast writes NHWC for the first convolution, the output cast NCHW for the graph's return
  const torch::jit::Node* outputCast = prepared.graph->outputs()[0]->node();
  ASSERT_EQ(outputCast->kind(), c10::aten::to);
  EXPECT_EQ(torch::jit::toIValue(outputCast->input(4))->toInt(), static_cast<int64_t>(c10::MemoryFormat::Contiguous));
  const torch::jit::Node* inputCast = prepared.graph->inputs()[0]->uses()[0].user;
  ASSERT_EQ(inputCast->kind(), c10::aten::to);
  EXPECT_EQ(torch::jit::toIValue(inputCast->input(4))->toInt(), static_cast<int64_t>(c10::MemoryFormat::ChannelsLast));
  const auto after = runGraph(prepared.graph, inputs);
  expectCloseOutputs(before, after, 5e-3);
  EXPECT_TRUE(after[0].toTensor().is_contiguous());
}

} // namespace
} // namespace torch_mp::jit
