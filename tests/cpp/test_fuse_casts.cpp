// FuseCasts: each case where it fires and where it must not, with lint, FileCheck and numerics before/after.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "jit/ir/casts.h"
#include "jit/ir/ir_utils.h"
#include "jit/pipeline.h"
#include "jit/rewrite/fuse_casts.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

// FuseCasts with a ledger of its own.
bool fuseCasts(const std::shared_ptr<torch::jit::Graph>& graph, const ObservedValues& observed = {}) {
  CastLedger ledger(observed);
  return FuseCasts(graph, ledger, observed);
}

// Runs FuseCasts and checks lint and that the outputs are bit for bit the same; returns whether it changed the graph
// and how many casts it removed.
std::pair<bool, int> fuse(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<c10::IValue>& inputs) {
  auto before = runGraph(graph, inputs);
  const int castsBefore = countNodes(*graph, c10::aten::to);
  const ObservedValues observed;
  CastLedger ledger(observed);
  const bool changed = FuseCasts(graph, ledger, observed);
  const int removed = castsBefore - countNodes(*graph, c10::aten::to);
  graph->lint();
  expectSameOutputs(before, runGraph(graph, inputs));
  return {changed, removed};
}

// The constant dtype= argument of every `kind` node (-1 where it is None), in program order.
std::vector<int64_t> dtypeArguments(const torch::jit::Block* block, c10::Symbol kind) {
  std::vector<int64_t> dtypes;
  for (const torch::jit::Node* node : block->nodes()) {
    for (const torch::jit::Block* sub : node->blocks()) {
      auto inner = dtypeArguments(sub, kind);
      dtypes.insert(dtypes.end(), inner.begin(), inner.end());
    }
    if (node->kind() == kind) {
      const auto index = node->schema().argumentIndexWithName("dtype").value();
      const auto dtype = torch::jit::toIValue(node->input(index));
      dtypes.push_back(dtype && dtype->isInt() ? dtype->toInt() : -1);
    }
  }
  return dtypes;
}

const std::vector<int64_t> kFloatOnce = {static_cast<int64_t>(at::kFloat)};

// Gives the value produced by the first `kind` node the type Float without sizes (IR strings cannot spell it).
torch::jit::Value* typeAsFloatOfUnknownRank(torch::jit::Graph& graph, c10::Symbol kind) {
  for (torch::jit::Node* node : graph.nodes()) {
    if (node->kind() == kind) {
      node->output()->setType(c10::TensorType::get()->withScalarType(at::kFloat));
      return node->output();
    }
  }
  return nullptr;
}

at::Tensor halfInput(std::vector<int64_t> sizes) {
  return (at::randn(sizes) * 4).to(at::kHalf);
}

// --- A. ops with dtype= -----------------------------------------------------------------------------------------

TEST(FuseCastsTest, SoftmaxReadsLowInputWithDtypeFloat) {
  auto graph = parseGraph(R"IR(
    graph(%x : Half(2, 8, strides=[8, 1], device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %one : int = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(2, 8, strides=[8, 1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %s : Float(2, 8, strides=[8, 1], device=cpu) = aten::softmax(%up, %one, %none)
      return (%s))IR");
  auto [changed, removed] = fuse(graph, {halfInput({2, 8})});
  EXPECT_TRUE(changed);
  EXPECT_EQ(removed, 1);
  FileCheck().check_not("aten::to")->check("aten::softmax(%x, ")->run(*graph);
  EXPECT_EQ(dtypeArguments(graph->block(), c10::aten::softmax), kFloatOnce);
}

TEST(FuseCastsTest, ReductionsAndScansReadLowInputWithDtypeFloat) {
  auto graph = parseGraph(R"IR(
    graph(%x : BFloat16(3, 5, strides=[5, 1], device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %one : int = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %dims : int[] = prim::ListConstruct(%one)
      %up : Float(3, 5, strides=[5, 1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %sum : Float(3, strides=[1], device=cpu) = aten::sum(%up, %dims, %false, %none)
      %mean : Float(3, strides=[1], device=cpu) = aten::mean(%up, %dims, %false, %none)
      %all : Float(requires_grad=0, device=cpu) = aten::sum(%up, %none)
      %cumsum : Float(3, 5, strides=[5, 1], device=cpu) = aten::cumsum(%up, %one, %none)
      %logp : Float(3, 5, strides=[5, 1], device=cpu) = aten::log_softmax(%up, %one, %none)
      return (%sum, %mean, %all, %cumsum, %logp))IR");
  auto [changed, removed] = fuse(graph, {(at::randn({3, 5}) * 4).to(at::kBFloat16)});
  EXPECT_TRUE(changed);
  EXPECT_EQ(removed, 1);
  FileCheck()
      .check_not("aten::to")
      ->check("aten::sum(%x, ")->check("aten::mean(%x, ")->check("aten::sum(%x, ")->check("aten::cumsum(%x, ")
      ->check("aten::log_softmax(%x, ")
      ->run(*graph);
  const int64_t f = static_cast<int64_t>(at::kFloat);
  EXPECT_EQ(dtypeArguments(graph->block(), c10::aten::sum), std::vector<int64_t>({f, f}));
  for (c10::Symbol kind : {c10::aten::mean, c10::aten::cumsum, c10::aten::log_softmax}) {
    EXPECT_EQ(dtypeArguments(graph->block(), kind), kFloatOnce) << kind.toQualString();
  }
}

TEST(FuseCastsTest, SoftmaxWithDtypeAlreadySetKeepsTheCast) {
  auto graph = parseGraph(R"IR(
    graph(%x : Half(2, 8, strides=[8, 1], device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %one : int = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(2, 8, strides=[8, 1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %s : Float(2, 8, strides=[8, 1], device=cpu) = aten::softmax(%up, %one, %fp32)
      return (%s))IR");
  auto [changed, removed] = fuse(graph, {halfInput({2, 8})});
  EXPECT_FALSE(changed);
  EXPECT_EQ(removed, 0);
  FileCheck().check("aten::to(%x")->check("aten::softmax(")->run(*graph);
  FileCheck().check_not("aten::softmax(%x")->run(*graph);
}

TEST(FuseCastsTest, CastWithAnotherReaderStaysForIt) {
  auto graph = parseGraph(R"IR(
    graph(%x : Half(2, 8, strides=[8, 1], device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %one : int = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(2, 8, strides=[8, 1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %s : Float(2, 8, strides=[8, 1], device=cpu) = aten::softmax(%up, %one, %none)
      %e : Float(2, 8, strides=[8, 1], device=cpu) = aten::exp(%up)
      return (%s, %e))IR");
  auto [changed, removed] = fuse(graph, {halfInput({2, 8})});
  EXPECT_TRUE(changed);
  EXPECT_EQ(removed, 0);  // exp still reads the cast
  FileCheck()
      .check_count("aten::to(%x", 1, /*exactly=*/true)->check("aten::softmax(%x, ")->check("aten::exp(")
      ->run(*graph);
  FileCheck().check_not("aten::exp(%x")->run(*graph);
  EXPECT_EQ(dtypeArguments(graph->block(), c10::aten::softmax), kFloatOnce);
}

TEST(FuseCastsTest, LossyDowncastIsNeverFused) {
  // fp32 -> half rounds; softmax on the rounded half values is not softmax on the fp32 ones.
  auto graph = parseGraph(R"IR(
    graph(%x : Float(2, 8, strides=[8, 1], device=cpu)):
      %half : int = prim::Constant[value=5]()
      %one : int = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %down : Half(2, 8, strides=[8, 1], device=cpu) = aten::to(%x, %half, %false, %false, %none)
      %s : Half(2, 8, strides=[8, 1], device=cpu) = aten::softmax(%down, %one, %none)
      %y : Float(2, 8, strides=[8, 1], device=cpu) = aten::add(%down, %x, %one)
      return (%s, %y))IR");
  auto [changed, removed] = fuse(graph, {at::randn({2, 8})});
  EXPECT_FALSE(changed);
  FileCheck().check_count("aten::to(%x, ", 1, /*exactly=*/true)->check("aten::softmax(%")->run(*graph);
  FileCheck().check_not("aten::softmax(%x")->check_not("aten::add(%x")->run(*graph);
}

TEST(FuseCastsTest, InPlaceWriteOfTheLowValueKeepsTheCast) {
  // The cast's copy protects softmax from the later in-place write.
  auto graph = parseGraph(R"IR(
    graph(%x : Half(2, 8, strides=[8, 1], device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %one : int = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %c : Half(2, 8, strides=[8, 1], device=cpu) = aten::clone(%x, %none)
      %up : Float(2, 8, strides=[8, 1], device=cpu) = aten::to(%c, %fp32, %false, %false, %none)
      %w : Half(2, 8, strides=[8, 1], device=cpu) = aten::mul_(%c, %c)
      %s : Float(2, 8, strides=[8, 1], device=cpu) = aten::softmax(%up, %one, %none)
      return (%s, %w))IR");
  auto [changed, removed] = fuse(graph, {halfInput({2, 8})});
  EXPECT_FALSE(changed);
  FileCheck().check("aten::clone(%x")->check("aten::to(")->check("aten::mul_(")->check("aten::softmax(")
      ->run(*graph);
  EXPECT_EQ(dtypeArguments(graph->block(), c10::aten::softmax), std::vector<int64_t>({-1}));
}

TEST(FuseCastsTest, ReaderInsideIfBranchReadsTheLowValue) {
  auto graph = parseGraph(R"IR(
    graph(%x : Half(2, 8, strides=[8, 1], device=cpu), %flag : bool):
      %fp32 : int = prim::Constant[value=6]()
      %one : int = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(2, 8, strides=[8, 1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %r : Float(2, 8, strides=[8, 1], device=cpu) = prim::If(%flag)
        block0():
          %s : Float(2, 8, strides=[8, 1], device=cpu) = aten::softmax(%up, %one, %none)
          -> (%s)
        block1():
          %e : Float(2, 8, strides=[8, 1], device=cpu) = aten::exp(%up)
          -> (%e)
      return (%r))IR");
  auto [changed, removed] = fuse(graph, {halfInput({2, 8}), true});
  EXPECT_TRUE(changed);
  EXPECT_EQ(removed, 0);
  FileCheck().check("aten::to(%x")->check("prim::If")->check("aten::softmax(%x, ")->check("aten::exp(")
      ->run(*graph);
  FileCheck().check_not("aten::exp(%x")->run(*graph);
  expectSameOutputs(runGraph(graph, {halfInput({2, 8}).fill_(0.5), false}),
                    {at::full({2, 8}, 0.5).exp()});
}

// --- B. mixed-dtype arithmetic ----------------------------------------------------------------------------------

TEST(FuseCastsTest, ArithmeticWithDimensionedFp32OperandReadsLowValue) {
  auto graph = parseGraph(R"IR(
    graph(%x : Half(2, 8, strides=[8, 1], device=cpu), %f : Float(8, strides=[1], device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %one : int = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(2, 8, strides=[8, 1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %a : Float(2, 8, strides=[8, 1], device=cpu) = aten::add(%up, %f, %one)
      %b : Float(2, 8, strides=[8, 1], device=cpu) = aten::sub(%f, %up, %one)
      %c : Float(2, 8, strides=[8, 1], device=cpu) = aten::mul(%up, %f)
      %d : Float(2, 8, strides=[8, 1], device=cpu) = aten::div(%f, %up)
      return (%a, %b, %c, %d))IR");
  auto [changed, removed] = fuse(graph, {halfInput({2, 8}), at::randn({8})});
  EXPECT_TRUE(changed);
  EXPECT_EQ(removed, 1);
  FileCheck()
      .check_not("aten::to")->check("aten::add(%x, %f")->check("aten::sub(%f, %x")->check("aten::mul(%x, %f")
      ->check("aten::div(%f, %x")->run(*graph);
}

TEST(FuseCastsTest, ArithmeticOnTwoZeroDimTensorsReadsLowValue) {
  auto graph = parseGraph(R"IR(
    graph(%x : Half(requires_grad=0, device=cpu), %f : Float(requires_grad=0, device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(requires_grad=0, device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %c : Float(requires_grad=0, device=cpu) = aten::mul(%up, %f)
      return (%c))IR");
  auto [changed, removed] = fuse(graph, {at::tensor(3.3).to(at::kHalf), at::tensor(1.7f)});
  EXPECT_TRUE(changed);
  FileCheck().check_not("aten::to")->check("aten::mul(%x, %f)")->run(*graph);
}

TEST(FuseCastsTest, ZeroDimFp32OperandKeepsTheCast) {
  // half(2, 8) * float() is half: a 0-dim tensor does not win promotion over a dimensioned one.
  auto graph = parseGraph(R"IR(
    graph(%x : Half(2, 8, strides=[8, 1], device=cpu), %f : Float(requires_grad=0, device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(2, 8, strides=[8, 1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %c : Float(2, 8, strides=[8, 1], device=cpu) = aten::mul(%up, %f)
      return (%c))IR");
  auto [changed, removed] = fuse(graph, {halfInput({2, 8}), at::tensor(1.7f)});
  EXPECT_FALSE(changed);
  FileCheck().check("aten::to(%x")->check("aten::mul(%")->check(", %f)")->run(*graph);
  FileCheck().check_not("aten::mul(%x")->run(*graph);
}

TEST(FuseCastsTest, UnknownDimsOrSameOperandKeepTheCast) {
  // %f's dim is unknown (no sizes, nothing observed); %up * %up would become half * half.
  auto graph = parseGraph(R"IR(
    graph(%x : Half(2, 8, strides=[8, 1], device=cpu), %f : Float(*, *, device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(2, 8, strides=[8, 1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %g : Tensor = aten::relu(%f)
      %c : Float(2, 8, strides=[8, 1], device=cpu) = aten::mul(%up, %g)
      %s : Float(2, 8, strides=[8, 1], device=cpu) = aten::mul(%up, %up)
      return (%c, %s))IR");
  typeAsFloatOfUnknownRank(*graph, c10::aten::relu);
  auto [changed, removed] = fuse(graph, {halfInput({2, 8}), at::randn({2, 8})});
  EXPECT_FALSE(changed);
  FileCheck().check_count("aten::to(%x", 1, /*exactly=*/true)->run(*graph);
  FileCheck().check_not("aten::mul(%x")->run(*graph);
}

TEST(FuseCastsTest, ObservedSizesGiveTheDims) {
  auto graph = parseGraph(R"IR(
    graph(%x : Half(2, 8, strides=[8, 1], device=cpu), %f : Float(*, *, device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(2, 8, strides=[8, 1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %g : Tensor = aten::relu(%f)
      %c : Float(2, 8, strides=[8, 1], device=cpu) = aten::mul(%up, %g)
      return (%c))IR");
  ObservedValues observed{{typeAsFloatOfUnknownRank(*graph, c10::aten::relu), observedTensor({2, 8})}};
  auto inputs = std::vector<c10::IValue>{halfInput({2, 8}), at::randn({2, 8})};
  auto before = runGraph(graph, inputs);
  EXPECT_TRUE(fuseCasts(graph, observed));
  graph->lint();
  FileCheck().check_not("aten::to")->check("aten::mul(%x, %")->run(*graph);
  expectSameOutputs(before, runGraph(graph, inputs));
}

TEST(FuseCastsTest, RankThatDependsOnTheInputKeepsTheCast) {
  // squeeze drops the dims that happen to be 1: [B, 1] -> [B] was observed at B = 2, but at B = 1 it is 0-dim and
  // half * 0-dim float would be half. Neither the observed rank nor a traced type may decide.
  auto graph = parseGraph(R"IR(
    graph(%x : Half(2, strides=[1], device=cpu), %f : Float(2, 1, strides=[1, 1], device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(2, strides=[1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %s : Float(2, strides=[1], device=cpu) = aten::squeeze(%f)
      %g : Float(2, strides=[1], device=cpu) = aten::relu(%s)
      %c : Float(2, strides=[1], device=cpu) = aten::mul(%up, %g)
      return (%c))IR");
  ObservedValues observed{{graph->outputs()[0]->node()->input(1), observedTensor({2})}};
  EXPECT_FALSE(fuseCasts(graph, observed));
  FileCheck().check("aten::to(%x")->check("aten::mul(%")->run(*graph);
  const auto batchOne = std::vector<c10::IValue>{halfInput({1}), at::randn({1, 1})};
  EXPECT_EQ(runGraph(graph, batchOne)[0].toTensor().scalar_type(), at::kFloat);
}

// --- D. products that write fp32 themselves ----------------------------------------------------------------------

// to(matmul(%a, %b), fp32) on low operands of the given rank.
std::shared_ptr<torch::jit::Graph> lowMatmulUpcast(int rank, bool lowReaderToo = false) {
  std::string type = "(";
  for (int d = 0; d < rank; ++d) {
    type += "*, ";
  }
  type += "device=cpu)";
  return parseGraph(
      "graph(%a : Half" + type + ", %b : Half" + type + "):\n"
      "  %fp32 : int = prim::Constant[value=6]()\n"
      "  %false : bool = prim::Constant[value=0]()\n"
      "  %none : NoneType = prim::Constant()\n"
      "  %p : Half" + type + " = aten::matmul(%a, %b)\n"
      "  %up : Float" + type + " = aten::to(%p, %fp32, %false, %false, %none)\n" +
      (lowReaderToo ? "  %r : Half" + type + " = aten::relu(%p)\n  return (%up, %r)" : "  return (%up)"));
}

// What the product's operands and result were observed as: matmul of [batch, 4, 8] x [batch, 8, 5] on `device`.
ObservedValues observedMatmul(const torch::jit::Graph& graph, c10::Device device, std::vector<int64_t> left) {
  std::vector<int64_t> right = left;
  right[right.size() - 2] = 8;
  right.back() = 5;
  std::vector<int64_t> result = left;
  result.back() = 5;
  ObservedValues observed;
  observed.emplace(graph.inputs()[0], observedTensor(left, at::kHalf, device));
  observed.emplace(graph.inputs()[1], observedTensor(right, at::kHalf, device));
  for (const torch::jit::Node* node : graph.nodes()) {
    if (node->kind() == c10::aten::matmul) {
      observed.emplace(node->output(), observedTensor(result, at::kHalf, device));
    }
  }
  return observed;
}

// Stands in for a CUDA build: every mm.dtype / bmm.dtype query on CUDA says yes, and is recorded.
struct CudaKernels {
  std::vector<std::string> asked;
  bool operator()(const c10::OperatorName& op, c10::DeviceType device) {
    asked.push_back(op.name + "." + op.overload_name + "@" + c10::DeviceTypeName(device, /*lower_case=*/true));
    return device == c10::DeviceType::CUDA;
  }
};

TEST(FuseCastsTest, CudaMatmulOfMatricesWritesFp32ThroughMmDtype) {
  auto graph = lowMatmulUpcast(2);
  const ObservedValues observed = observedMatmul(*graph, c10::Device(c10::kCUDA, 0), {4, 8});
  CudaKernels kernels;
  CastLedger ledger(observed);
  EXPECT_TRUE(FuseCasts(graph, ledger, observed, std::ref(kernels)));
  graph->lint();
  EXPECT_EQ(countNodes(*graph, c10::aten::to), 0);
  EXPECT_EQ(kernels.asked, std::vector<std::string>{"aten::mm.dtype@cuda"});
  FileCheck().check_not("aten::to")->check_not("aten::matmul")->check("aten::mm(%a, %b, %")->run(*graph);
  const torch::jit::Node* product = graph->outputs()[0]->node();
  EXPECT_EQ(product->schema().overload_name(), "dtype");
  EXPECT_EQ(torch::jit::toIValue(product->input(2))->toInt(), static_cast<int64_t>(at::kFloat));
  EXPECT_EQ(recordedDtype(graph->outputs()[0]), at::kFloat);
}

TEST(FuseCastsTest, CudaBatchedMatmulWritesFp32ThroughBmmDtype) {
  auto graph = lowMatmulUpcast(3);
  const ObservedValues observed = observedMatmul(*graph, c10::Device(c10::kCUDA, 0), {3, 4, 8});
  CudaKernels kernels;
  CastLedger ledger(observed);
  EXPECT_TRUE(FuseCasts(graph, ledger, observed, std::ref(kernels)));
  graph->lint();
  FileCheck().check_not("aten::to")->check("aten::bmm(%a, %b, %")->run(*graph);
}

// As the plan writes it: the matmul reads its cast of the fp32 input and the weight's fp16 copy, neither of which the
// example inputs saw; their sizes come through the cast and from the constant.
TEST(FuseCastsTest, ProductOfTheCastInputAndALowWeightCopyFindsItsOperandsSizes) {
  auto graph = std::make_shared<torch::jit::Graph>();
  std::unordered_map<std::string, torch::jit::Value*> named;
  torch::jit::parseIR(R"IR(
    graph(%x : Float(3, 4, 8, strides=[32, 8, 1], device=cpu), %w : Half(3, 8, 5, strides=[40, 5, 1], device=cpu)):
      %fp16 : int = prim::Constant[value=5]()
      %fp32 : int = prim::Constant[value=6]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %a : Half(3, 4, 8, strides=[32, 8, 1], device=cpu) = aten::to(%x, %fp16, %false, %false, %none)
      %p : Half(3, 4, 5, strides=[20, 5, 1], device=cpu) = aten::matmul(%a, %w)
      %up : Float(3, 4, 5, strides=[20, 5, 1], device=cpu) = aten::to(%p, %fp32, %false, %false, %none)
      return (%up))IR", graph.get(), named);
  {  // the weight a constant, as in a frozen graph
    torch::jit::WithInsertPoint start(graph->nodes().front());
    named.at("w")->replaceAllUsesWith(graph->insertConstant(at::randn({3, 8, 5}).to(at::kHalf)));
    graph->eraseInput(1);
  }
  const c10::Device cuda(c10::kCUDA, 0);
  ObservedValues observed;
  observed.emplace(named.at("x"), observedTensor({3, 4, 8}, at::kFloat, cuda));
  observed.emplace(named.at("p"), observedTensor({3, 4, 5}, at::kHalf, cuda));
  CudaKernels kernels;
  CastLedger ledger(observed);
  EXPECT_TRUE(FuseCasts(graph, ledger, observed, std::ref(kernels)));
  graph->lint();
  FileCheck().check("aten::to(%x")->check("aten::bmm(")->check_not("aten::to")->run(*graph);
  const torch::jit::Node* product = graph->outputs()[0]->node();
  EXPECT_EQ(product->input(0)->node()->kind(), c10::aten::to);  // the cast of %x
  EXPECT_EQ(product->input(1)->node()->kind(), c10::prim::Constant);
  EXPECT_EQ(torch::jit::toIValue(product->input(2))->toInt(), static_cast<int64_t>(at::kFloat));
}

TEST(FuseCastsTest, ProductStaysWhereNoOutDtypeKernelOrNoMatchingForm) {
  {  // on CPU: torch has no kernel for aten::mm.dtype there, and the real dispatcher says so
    auto graph = lowMatmulUpcast(2);
    auto inputs = std::vector<c10::IValue>{halfInput({4, 8}), halfInput({8, 5})};
    auto before = runGraph(graph, inputs);
    EXPECT_FALSE(kernels::hasKernelFor(c10::OperatorName("aten::mm", "dtype"), c10::DeviceType::CPU));
    const ObservedValues observed = observedMatmul(*graph, c10::Device(c10::kCPU), {4, 8});
    CastLedger ledger(observed);
    EXPECT_FALSE(FuseCasts(graph, ledger, observed));
    FileCheck().check("aten::matmul(%a, %b)")->check("= aten::to(")->run(*graph);
    expectSameOutputs(before, runGraph(graph, inputs));
  }
  {  // a 4-d matmul is neither mm nor bmm
    auto graph = lowMatmulUpcast(4);
    CudaKernels kernels;
    const ObservedValues observed = observedMatmul(*graph, c10::Device(c10::kCUDA, 0), {2, 3, 4, 8});
    CastLedger ledger(observed);
    EXPECT_FALSE(FuseCasts(graph, ledger, observed, std::ref(kernels)));
    FileCheck().check("aten::matmul(%a, %b)")->check("= aten::to(")->run(*graph);
  }
  {  // another reader needs the low product
    auto graph = lowMatmulUpcast(2, /*lowReaderToo=*/true);
    CudaKernels kernels;
    const ObservedValues observed = observedMatmul(*graph, c10::Device(c10::kCUDA, 0), {4, 8});
    CastLedger ledger(observed);
    EXPECT_FALSE(FuseCasts(graph, ledger, observed, std::ref(kernels)));
    FileCheck().check("aten::matmul(%a, %b)")->check("= aten::to(")->run(*graph);
  }
}

// --- E. norms between an upcast and a downcast -------------------------------------------------------------------

// %x (low, on `device`) -> upcast -> `norm` with fp32 parameters %w, %b -> downcast to %x's dtype (and, with
// `fp32Reader`, also an fp32 exp of the norm's result).
std::shared_ptr<torch::jit::Graph> normBetweenCasts(const std::string& norm, const std::string& low,
                                                    const std::string& device = "cpu", bool fp32Reader = false) {
  const std::string lowCode = low == "Half" ? "5" : "15";
  const std::string t = "(2, 4, 4, strides=[16, 4, 1], device=" + device + ")";
  const std::string p = "(4, strides=[1], device=" + device + ")";
  std::string ir = "graph(%x : " + low + t + ", %w : Float" + p + ", %b : Float" + p + R"IR(, %mean : Float)IR" + p +
                   ", %var : Float" + p + R"IR():
      %fp32 : int = prim::Constant[value=6]()
      %lowcode : int = prim::Constant[value=)IR" + lowCode + R"IR(]()
      %false : bool = prim::Constant[value=0]()
      %true : bool = prim::Constant[value=1]()
      %none : NoneType = prim::Constant()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %momentum : float = prim::Constant[value=0.10000000000000001]()
      %groups : int = prim::Constant[value=2]()
      %four : int = prim::Constant[value=4]()
      %shape : int[] = prim::ListConstruct(%four)
      %up : Float)IR" + t + R"IR( = aten::to(%x, %fp32, %false, %false, %none)
      %n : Float)IR" + t + " = " + norm + R"IR(
      %down : )IR" + low + t + R"IR( = aten::to(%n, %lowcode, %false, %false, %none)
      %y : )IR" + low + t + R"IR( = aten::mul(%down, %down)
)IR";
  ir += fp32Reader ? "      %e : Float" + t + " = aten::exp(%n)\n      return (%y, %e)\n" : "      return (%y)\n";
  return parseGraph(ir);
}

const char* const kLayerNorm = "aten::layer_norm(%up, %shape, %w, %b, %eps, %true)";
const char* const kGroupNorm = "aten::group_norm(%up, %groups, %w, %b, %eps, %true)";
const char* const kBatchNorm = "aten::batch_norm(%up, %w, %b, %mean, %var, %false, %momentum, %eps, %true)";
const char* const kInstanceNorm = "aten::instance_norm(%up, %w, %b, %none, %none, %true, %momentum, %eps, %true)";

// "aten::layer_norm" of "aten::layer_norm(%up, ...)".
std::string opOf(const char* call) {
  const std::string text(call);
  return text.substr(0, text.find('('));
}

std::vector<c10::IValue> normInputs(at::ScalarType low) {
  return {(at::randn({2, 4, 4}) * 3 + 1).to(low), at::randn({4}), at::randn({4}), at::randn({4}), at::rand({4}) + 0.5};
}

TEST(FuseCastsTest, NormsOnCpuReadAndWriteTheLowValue) {
  const char* const layerNormWithBiasOnly = "aten::layer_norm(%up, %shape, %none, %b, %eps, %true)";
  for (const char* norm : {kLayerNorm, kGroupNorm, kBatchNorm, kInstanceNorm, layerNormWithBiasOnly}) {
    for (const auto& [low, name] : {std::pair(at::kHalf, "Half"), std::pair(at::kBFloat16, "BFloat16")}) {
      SCOPED_TRACE(std::string(norm) + " " + name);
      auto graph = normBetweenCasts(norm, name);
      const auto inputs = normInputs(low);
      const auto before = runGraph(graph, inputs);
      EXPECT_TRUE(fuseCasts(graph));
      graph->lint();
      EXPECT_EQ(countNodes(*graph, c10::aten::to), 0);  // the downcast, and the upcast with its last reader
      const std::string fused = opOf(norm) + "(%x, ";
      FileCheck().check_not("aten::to")->check(fused)->check("aten::mul(")->run(*graph);
      EXPECT_EQ(recordedDtype(graph->outputs()[0]->node()->input(0)), low);
      // fp32 inside, one rounding to the low dtype: the same values up to the last bit (of a value squared here)
      expectCloseOutputs(before, runGraph(graph, inputs), low == at::kHalf ? 4e-3 : 3e-2);
    }
  }
}

TEST(FuseCastsTest, BatchAndInstanceNormsOnCudaReadAndWriteTheLowValue) {
  // ATen's CUDA batch_norm (which instance_norm runs through) takes fp16 / bf16 input with fp32 parameters and writes
  // the input's dtype (benchmarks/cuda_norm_probe.py on an H200, torch 2.11); the graph is not run here
  for (const char* norm : {kBatchNorm, kInstanceNorm}) {
    for (const char* low : {"Half", "BFloat16"}) {
      SCOPED_TRACE(std::string(norm) + " " + low);
      auto graph = normBetweenCasts(norm, low, "cuda:0");
      EXPECT_TRUE(fuseCasts(graph));
      graph->lint();
      EXPECT_EQ(countNodes(*graph, c10::aten::to), 0);
      const std::string fused = opOf(norm) + "(%x, ";
      FileCheck().check_not("aten::to")->check(fused)->check("aten::mul(")->run(*graph);
    }
  }
}

TEST(FuseCastsTest, NormKeepsItsCastsWhereTheResultOrParametersOrDeviceForbid) {
  {  // an fp32 reader needs the fp32 result
    auto graph = normBetweenCasts(kLayerNorm, "BFloat16", "cpu", /*fp32Reader=*/true);
    const auto inputs = normInputs(at::kBFloat16);
    const auto before = runGraph(graph, inputs);
    EXPECT_FALSE(fuseCasts(graph));
    FileCheck().check("aten::to(%x")->check("aten::layer_norm(%")->check("aten::to(%")->run(*graph);
    expectSameOutputs(before, runGraph(graph, inputs));
  }
  {  // low parameters: not the mixed-type form
    auto graph = normBetweenCasts(kLayerNorm, "Half");
    graph->inputs()[1]->setType(graph->inputs()[1]->type()->expectRef<c10::TensorType>().withScalarType(at::kHalf));
    EXPECT_FALSE(fuseCasts(graph));
    FileCheck().check("aten::to(%x")->check("aten::layer_norm(%")->check("aten::to(%")->run(*graph);
  }
  for (const char* norm : {kLayerNorm, kGroupNorm}) {  // their CUDA kernels want parameters of the input's dtype
    SCOPED_TRACE(norm);
    auto graph = normBetweenCasts(norm, "Half", "cuda:0");
    EXPECT_FALSE(fuseCasts(graph));
    const std::string op = opOf(norm) + "(%";
    FileCheck().check("aten::to(%x")->check(op)->check("aten::to(%")->run(*graph);
  }
  {  // no fp32 parameter: ATen would take its low-dtype kernel, not the mixed one
    auto graph = normBetweenCasts("aten::instance_norm(%up, %none, %none, %none, %none, %true, %momentum, %eps, %true)",
                                  "BFloat16");
    EXPECT_FALSE(fuseCasts(graph));
    FileCheck().check("aten::to(%x")->check("aten::instance_norm(%")->check("aten::to(%")->run(*graph);
  }
  {  // a device nobody knows (no complete type, no observation)
    auto graph = normBetweenCasts(kLayerNorm, "Half");
    graph->inputs()[0]->setType(c10::TensorType::get()->withScalarType(at::kHalf));
    EXPECT_FALSE(fuseCasts(graph));
    FileCheck().check("aten::to(%x")->check("aten::layer_norm(%")->check("aten::to(%")->run(*graph);
  }
}

// --- C. chains and constants ------------------------------------------------------------------------------------

TEST(FuseCastsTest, LosslessChainCastsOnce) {
  auto graph = parseGraph(R"IR(
    graph(%x : Half(4, strides=[1], device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %bf16 : int = prim::Constant[value=15]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(4, strides=[1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %b : BFloat16(4, strides=[1], device=cpu) = aten::to(%up, %bf16, %false, %false, %none)
      return (%b))IR");
  auto [changed, removed] = fuse(graph, {halfInput({4})});
  EXPECT_TRUE(changed);
  EXPECT_EQ(removed, 1);
  FileCheck().check_count("aten::to(%x, ", 1, /*exactly=*/true)->run(*graph);
  FileCheck().check_count("aten::to", 1, /*exactly=*/true)->run(*graph);
}

TEST(FuseCastsTest, LossyChainStays) {
  auto graph = parseGraph(R"IR(
    graph(%x : Float(4, strides=[1], device=cpu)):
      %half : int = prim::Constant[value=5]()
      %bf16 : int = prim::Constant[value=15]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %h : Half(4, strides=[1], device=cpu) = aten::to(%x, %half, %false, %false, %none)
      %b : BFloat16(4, strides=[1], device=cpu) = aten::to(%h, %bf16, %false, %false, %none)
      return (%b))IR");
  auto [changed, removed] = fuse(graph, {at::randn({4})});
  EXPECT_FALSE(changed);
  FileCheck().check_count("aten::to", 2, /*exactly=*/true)->run(*graph);
}

// In the pipeline: weights read in low precision are stored as low constants (no cast of a constant is left), the
// softmax after a low conv reads it with dtype=Float, and the report counts the fused cast apart.
TEST(FuseCastsTest, PipelineFoldsConstantsAndReportsFusedCasts) {
  const auto x = torch::randn({2, 3, 8, 8});
  const auto w = torch::randn({4, 3, 3, 3});
  auto convert = [&](bool fuseCasts) {
    auto graph = parseGraph(kConvReluSoftmax);
    inlineInputAsConstant(*graph, 1, w);
    auto before = runGraph(graph, {x});
    ConvertOptions options = defaultOptions(c10::DeviceType::CPU, core::LowDtype::kFloat16, core::CpuFeatures::all());
    options.fuseCasts = fuseCasts;
    ConversionReport report = convertGraphInPlace(graph, {x}, options);
    graph->lint();
    expectCloseOutputs(before, runGraph(graph, {x}), 1e-2);
    return std::make_pair(graph, report);
  };
  auto [fused, fusedReport] = convert(true);
  auto [plain, plainReport] = convert(false);
  FileCheck()
      .check("Half(4, 3, 3, 3")->check("prim::Constant")->check_count("aten::to", 1, /*exactly=*/true)
      ->check("aten::conv2d")->check("aten::relu")->check("aten::softmax(%")->check_not("aten::to")
      ->run(*fused);
  for (torch::jit::Node* node : fused->nodes()) {
    if (node->kind() == c10::aten::softmax) {
      EXPECT_EQ(recordedDtype(node->input(0)), at::kHalf);
      EXPECT_EQ(torch::jit::constant_as<int64_t>(node->input(2)), static_cast<int64_t>(at::kFloat));
    }
  }
  EXPECT_EQ(plainReport.casts.size(), 2u);
  EXPECT_EQ(plainReport.fusedCasts, 0);
  EXPECT_EQ(fusedReport.casts.size(), 1u);
  EXPECT_EQ(fusedReport.fusedCasts, 1);
  EXPECT_EQ(fusedReport.fusedCastBytes, 2 * 4 * 6 * 6 * 6);  // the fp16 conv output read, an fp32 copy written
  EXPECT_EQ(fusedReport.castBytes + fusedReport.fusedCastBytes, plainReport.castBytes);
}

} // namespace
} // namespace torch_mp::jit
