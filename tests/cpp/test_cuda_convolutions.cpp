// The CUDA convolution rewrites, run without a GPU: convolutions observed on a CUDA device are given as data, their
// weights are CPU constants (the passes read only their sizes and dtype). channels_last_convolutions: weights
// re-laid, contiguous copies only where an NHWC value leaves the layout-keeping ops, with numerics unchanged.
// fuse_cudnn_convolutions: conv (+add) +relu into cuDNN's fused ops, and every case the fused kernel does not cover.
#include <gtest/gtest.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <map>
#include <string>
#include <unordered_map>

#include "jit/rewrite/channels_last_convolutions.h"
#include "jit/rewrite/fuse_cudnn_convolutions.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

const c10::Device kCuda(c10::kCUDA, 0);

// A graph parsed from IR, with its values by the names the IR gave them (the parser keeps only the inputs' names in
// the graph itself).
struct NamedGraph {
  std::shared_ptr<torch::jit::Graph> graph;
  std::unordered_map<std::string, torch::jit::Value*> values;
};

NamedGraph parseNamed(const std::string& ir) {
  NamedGraph named{std::make_shared<torch::jit::Graph>(), {}};
  torch::jit::parseIR(ir, named.graph.get(), named.values);
  return named;
}

// Observes the named values as tensors of the given sizes and dtype on `device`.
ObservedValues observeNamed(const NamedGraph& named, const std::map<std::string, std::vector<int64_t>>& sizes,
                            c10::ScalarType dtype = at::kHalf, c10::Device device = kCuda) {
  ObservedValues observed;
  for (const auto& [name, valueSizes] : sizes) {
    observed.emplace(named.values.at(name), observedTensor(valueSizes, dtype, device));
  }
  return observed;
}

std::vector<at::Tensor> tensorConstants(const torch::jit::Graph& graph) {
  std::vector<at::Tensor> tensors;
  for (const torch::jit::Node* node : graph.nodes()) {
    if (node->kind() == c10::prim::Constant && node->output()->type()->kind() == c10::TypeKind::TensorType) {
      tensors.push_back(torch::jit::toIValue(node->output())->toTensor());
    }
  }
  return tensors;
}

// Two convolutions with a relu between them, then `tail` reading %c2 and returning %out.
std::string twoConvolutions(const std::string& tail) {
  return R"IR(
    graph(%x : Float(2, 3, 8, 8, strides=[192, 64, 8, 1], device=cpu), %w1 : Tensor, %w2 : Tensor):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %zero : int = prim::Constant[value=0]()
      %minus : int = prim::Constant[value=-1]()
      %two : int = prim::Constant[value=2]()
      %ones : int[] = prim::ListConstruct(%one, %one)
      %zeros : int[] = prim::ListConstruct(%zero, %zero)
      %c1 : Tensor = aten::conv2d(%x, %w1, %none, %ones, %ones, %ones, %one)
      %r1 : Tensor = aten::relu(%c1)
      %c2 : Tensor = aten::conv2d(%r1, %w2, %none, %ones, %ones, %ones, %one)
)IR" + tail;
}

struct ChannelsLastCase {
  std::shared_ptr<torch::jit::Graph> graph;
  std::vector<c10::IValue> inputs;
  int convolutions = 0;
};

// Builds twoConvolutions(tail) with constant weights, observes %c1 and %c2 on `device`, runs the pass, lints and
// checks the outputs against the graph before (within float rounding: oneDNN may pick another algorithm for NHWC).
ChannelsLastCase convertToChannelsLast(const std::string& tail, c10::Device device = kCuda) {
  ChannelsLastCase result;
  const NamedGraph named = parseNamed(twoConvolutions(tail));
  result.graph = named.graph;
  inlineInputAsConstant(*result.graph, 2, at::randn({4, 4, 3, 3}));
  inlineInputAsConstant(*result.graph, 1, at::randn({4, 3, 3, 3}));
  result.inputs = {at::randn({2, 3, 8, 8})};
  const auto before = runGraph(result.graph, result.inputs);
  const ObservedValues observed =
      observeNamed(named, {{"c1", {2, 4, 8, 8}}, {"c2", {2, 4, 8, 8}}}, at::kFloat, device);
  result.convolutions = ConvertConvolutionsToChannelsLast(result.graph, observed);
  result.graph->lint();
  expectCloseOutputs(before, runGraph(result.graph, result.inputs), 1e-5);
  return result;
}

TEST(ChannelsLastConvolutionsTest, ChainStaysNhwcAndTheOutputIsContiguous) {
  const ChannelsLastCase converted = convertToChannelsLast(R"IR(
      %out : Tensor = aten::relu(%c2)
      return (%out))IR");
  EXPECT_EQ(converted.convolutions, 2);
  for (const at::Tensor& weight : tensorConstants(*converted.graph)) {
    EXPECT_TRUE(weight.is_contiguous(at::MemoryFormat::ChannelsLast));
  }
  FileCheck().check("aten::conv2d")->check_not("aten::contiguous")->check("aten::conv2d")
      ->check_not("aten::contiguous")->check("aten::relu")->check("aten::contiguous")->check("return")
      ->run(*converted.graph);
  const at::Tensor out = runGraph(converted.graph, converted.inputs)[0].toTensor();
  EXPECT_TRUE(out.is_contiguous());
}

TEST(ChannelsLastConvolutionsTest, ViewReadsContiguousSizeReadsNhwc) {
  const ChannelsLastCase converted = convertToChannelsLast(R"IR(
      %n : int = aten::size(%c2, %zero)
      %shape : int[] = prim::ListConstruct(%n, %minus)
      %out : Tensor = aten::view(%c2, %shape)
      return (%out))IR");
  EXPECT_EQ(converted.convolutions, 2);
  // %c2 (the second conv's output) is read by aten::size as it is and by the view through a contiguous copy
  FileCheck().check("aten::conv2d")->check("aten::conv2d")->check("aten::contiguous")->check("aten::size")
      ->check("aten::view")->run(*converted.graph);
  const torch::jit::Node* view = converted.graph->outputs()[0]->node();
  ASSERT_EQ(view->kind(), c10::aten::view);
  EXPECT_EQ(view->input(0)->node()->kind(), c10::aten::contiguous);
  const torch::jit::Node* size = view->input(1)->node()->input(0)->node();
  ASSERT_EQ(size->kind(), c10::aten::size);
  EXPECT_EQ(size->input(0)->node()->kind(), c10::aten::conv2d);
}

TEST(ChannelsLastConvolutionsTest, ListIntoCatStaysNhwcListIntoOtherOpsDoesNot) {
  const ChannelsLastCase intoCat = convertToChannelsLast(R"IR(
      %list : Tensor[] = prim::ListConstruct(%c2, %r1)
      %out : Tensor = aten::cat(%list, %one)
      return (%out))IR");
  FileCheck().check("aten::cat")->check("aten::contiguous")->check("return")->run(*intoCat.graph);
  FileCheck().check_count("aten::contiguous", 1, /*exactly=*/true)->run(*intoCat.graph);
  const ChannelsLastCase intoStack = convertToChannelsLast(R"IR(
      %list : Tensor[] = prim::ListConstruct(%c2, %r1)
      %out : Tensor = aten::stack(%list, %one)
      return (%out))IR");
  // each tensor entering the list read by stack (not in the table) is copied contiguous first
  FileCheck().check_count("aten::contiguous", 2, /*exactly=*/true)->run(*intoStack.graph);
}

TEST(ChannelsLastConvolutionsTest, NotOnCpuNorUnobserved) {
  const ChannelsLastCase onCpu = convertToChannelsLast(R"IR(
      return (%c2))IR", c10::Device(c10::kCPU));
  EXPECT_EQ(onCpu.convolutions, 0);
  FileCheck().check_not("aten::contiguous")->run(*onCpu.graph);
  for (const at::Tensor& weight : tensorConstants(*onCpu.graph)) {
    EXPECT_TRUE(weight.is_contiguous());
    EXPECT_FALSE(weight.is_contiguous(at::MemoryFormat::ChannelsLast));
  }
  auto graph = parseGraph(twoConvolutions("      return (%c2)"));
  inlineInputAsConstant(*graph, 2, at::randn({4, 4, 3, 3}));
  inlineInputAsConstant(*graph, 1, at::randn({4, 3, 3, 3}));
  EXPECT_EQ(ConvertConvolutionsToChannelsLast(graph, {}), 0);
}

// conv (weight %w, bias %b) then `tail`; %x and %z are Half CUDA tensors.
NamedGraph convolutionThen(const std::string& tail, const std::string& groups = "1", const std::string& dilation = "1",
                           const std::string& zType = "Half(2, 8, 8, 8)") {
  NamedGraph named = parseNamed(R"IR(
    graph(%x : Half(2, 8, 8, 8), %z : )IR" + zType + R"IR(, %w : Tensor, %b : Tensor):
      %one : int = prim::Constant[value=1]()
      %groups : int = prim::Constant[value=)IR" + groups + R"IR(]()
      %d : int = prim::Constant[value=)IR" + dilation + R"IR(]()
      %ones : int[] = prim::ListConstruct(%one, %one)
      %dilation : int[] = prim::ListConstruct(%d, %d)
      %c : Half(2, 8, 8, 8) = aten::conv2d(%x, %w, %b, %ones, %dilation, %dilation, %groups)
)IR" + tail);
  const int64_t perGroup = 8 / std::stoll(groups);
  inlineInputAsConstant(*named.graph, 3, at::randn({8}).to(at::kHalf));
  inlineInputAsConstant(*named.graph, 2, at::randn({8, perGroup, 3, 3}).to(at::kHalf));
  return named;
}

constexpr const char* kAddRelu = R"IR(
      %s : Half(2, 8, 8, 8) = aten::add(%c, %z, %one)
      %r : Half(2, 8, 8, 8) = aten::relu(%s)
      return (%r))IR";

FusedConvolutions fuseObserved(const NamedGraph& named, const std::vector<int64_t>& zSizes = {2, 8, 8, 8},
                               c10::Device device = kCuda) {
  const FusedConvolutions fused = FuseCudnnConvolutions(
      named.graph, observeNamed(named, {{"c", {2, 8, 8, 8}}, {"z", zSizes}}, at::kHalf, device));
  named.graph->lint();
  return fused;
}

TEST(FuseCudnnConvolutionsTest, ConvReluBecomesCudnnConvolutionRelu) {
  const NamedGraph named = convolutionThen(R"IR(
      %r : Half(2, 8, 8, 8) = aten::relu(%c)
      return (%r))IR");
  const FusedConvolutions fused = fuseObserved(named);
  EXPECT_EQ(fused.convRelu, 1);
  FileCheck().check("aten::cudnn_convolution_relu(%x, ")->check_not("aten::conv2d")->check_not("aten::relu")
      ->run(*named.graph);
}

TEST(FuseCudnnConvolutionsTest, ConvAddReluBecomesCudnnConvolutionAddReluEitherOperandOrder) {
  for (const char* add : {"aten::add(%c, %z, %one)", "aten::add(%z, %c, %one)"}) {
    const NamedGraph named = convolutionThen(std::string("      %s : Half(2, 8, 8, 8) = ") + add + R"IR(
      %r : Half(2, 8, 8, 8) = aten::relu(%s)
      return (%r))IR");
    const FusedConvolutions fused = fuseObserved(named);
    EXPECT_EQ(fused.convAddRelu, 1) << add;
    FileCheck().check("aten::cudnn_convolution_add_relu(%x, %")->check_not("aten::add")->check_not("aten::relu")
        ->run(*named.graph);
    const torch::jit::Node* fusedNode = named.graph->outputs()[0]->node();
    EXPECT_EQ(fusedNode->input(2)->debugName(), "z");  // the residual, then alpha 1, then the bias
    EXPECT_EQ(torch::jit::toIValue(fusedNode->input(3))->toInt(), 1);
  }
}

TEST(FuseCudnnConvolutionsTest, NoFusionWithoutRelu) {
  const NamedGraph named = convolutionThen(R"IR(
      %s : Half(2, 8, 8, 8) = aten::add(%c, %z, %one)
      return (%s))IR");
  const FusedConvolutions fused = fuseObserved(named);
  EXPECT_EQ(fused.convRelu + fused.convAddRelu, 0);
  FileCheck().check("aten::conv2d")->check("aten::add")->check_not("cudnn")->run(*named.graph);
}

TEST(FuseCudnnConvolutionsTest, NoFusionForGroupsDilationCpuOrUnknownDevice) {
  const std::vector<std::pair<std::string, NamedGraph>> graphs = {
      {"groups", convolutionThen(kAddRelu, "2")},
      {"dilation", convolutionThen(kAddRelu, "1", "2")},
  };
  for (const auto& [name, named] : graphs) {
    EXPECT_EQ(fuseObserved(named).convAddRelu, 0) << name;
    FileCheck().check("aten::conv2d")->check("aten::add")->check("aten::relu")->check_not("cudnn")
        ->run(*named.graph);
  }
  const NamedGraph onCpu = convolutionThen(kAddRelu);
  EXPECT_EQ(fuseObserved(onCpu, {2, 8, 8, 8}, c10::Device(c10::kCPU)).convAddRelu, 0);
  FileCheck().check_not("cudnn")->run(*onCpu.graph);
  const NamedGraph unobserved = convolutionThen(kAddRelu);
  EXPECT_EQ(FuseCudnnConvolutions(unobserved.graph, {}).convAddRelu, 0);
  FileCheck().check_not("cudnn")->run(*unobserved.graph);
}

TEST(FuseCudnnConvolutionsTest, ResidualThatBroadcastsOrHasAnotherDtypeOnlyFusesNothing) {
  const NamedGraph broadcast = convolutionThen(kAddRelu, "1", "1", "Half(1, 8, 1, 1)");
  EXPECT_EQ(fuseObserved(broadcast, {1, 8, 1, 1}).convAddRelu, 0);
  FileCheck().check("aten::conv2d")->check("aten::add")->check_not("cudnn")->run(*broadcast.graph);
  const NamedGraph otherDtype = convolutionThen(kAddRelu, "1", "1", "Float(2, 8, 8, 8)");
  EXPECT_EQ(fuseObserved(otherDtype).convAddRelu, 0);
  FileCheck().check("aten::conv2d")->check("aten::add")->check_not("cudnn")->run(*otherDtype.graph);
}

TEST(FuseCudnnConvolutionsTest, ConvolutionWithAnotherReaderStaysAsItIs) {
  const NamedGraph named = convolutionThen(R"IR(
      %r : Half(2, 8, 8, 8) = aten::relu(%c)
      return (%r, %c))IR");
  EXPECT_EQ(fuseObserved(named).convRelu, 0);
  FileCheck().check("aten::conv2d")->check("aten::relu")->check_not("cudnn")->run(*named.graph);
}

// A traced convolution (aten::_convolution), transposed or not, then relu.
NamedGraph tracedConvolutionRelu(const std::string& transposed) {
  NamedGraph named = parseNamed(R"IR(
    graph(%x : Half(2, 8, 8, 8), %w : Tensor):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %zero : int = prim::Constant[value=0]()
      %false : bool = prim::Constant[value=0]()
      %true : bool = prim::Constant[value=1]()
      %transposed : bool = prim::Constant[value=)IR" + transposed + R"IR(]()
      %ones : int[] = prim::ListConstruct(%one, %one)
      %zeros : int[] = prim::ListConstruct(%zero, %zero)
      %c : Half(2, 8, 8, 8) = aten::_convolution(%x, %w, %none, %ones, %ones, %ones, %transposed, %zeros, %one, %false, %false, %true, %true)
      %r : Half(2, 8, 8, 8) = aten::relu(%c)
      return (%r))IR");
  inlineInputAsConstant(*named.graph, 1, at::randn({8, 8, 3, 3}).to(at::kHalf));
  return named;
}

TEST(FuseCudnnConvolutionsTest, ResidualConvolutionsBiasIsAddedInsideTheFusedCall) {
  for (const bool residualReadElsewhere : {false, true}) {
    NamedGraph named = parseNamed(std::string(R"IR(
      graph(%x : Half(2, 8, 8, 8), %y : Half(2, 8, 8, 8), %w : Tensor, %b : Tensor, %wd : Tensor, %bd : Tensor):
        %one : int = prim::Constant[value=1]()
        %ones : int[] = prim::ListConstruct(%one, %one)
        %c : Half(2, 8, 8, 8) = aten::conv2d(%x, %w, %b, %ones, %ones, %ones, %one)
        %z : Half(2, 8, 8, 8) = aten::conv2d(%y, %wd, %bd, %ones, %ones, %ones, %one)
        %s : Half(2, 8, 8, 8) = aten::add(%c, %z, %one)
        %r : Half(2, 8, 8, 8) = aten::relu(%s)
)IR") + (residualReadElsewhere ? "        return (%r, %z)" : "        return (%r)"));
    const at::Tensor b = at::randn({8}).to(at::kHalf);
    const at::Tensor bd = at::randn({8}).to(at::kHalf);
    inlineInputAsConstant(*named.graph, 5, bd);
    inlineInputAsConstant(*named.graph, 4, at::randn({8, 8, 3, 3}).to(at::kHalf));
    inlineInputAsConstant(*named.graph, 3, b);
    inlineInputAsConstant(*named.graph, 2, at::randn({8, 8, 3, 3}).to(at::kHalf));
    const FusedConvolutions fused = FuseCudnnConvolutions(
        named.graph, observeNamed(named, {{"c", {2, 8, 8, 8}}, {"z", {2, 8, 8, 8}}}));
    named.graph->lint();
    EXPECT_EQ(fused.convAddRelu, 1);
    EXPECT_EQ(fused.foldedResidualBiases, residualReadElsewhere ? 0 : 1);
    const torch::jit::Node* fusedCall = named.graph->outputs()[0]->node();
    ASSERT_EQ(fusedCall->kind().toQualString(), std::string("aten::cudnn_convolution_add_relu"));
    const torch::jit::Node* residual = fusedCall->input(2)->node();
    ASSERT_EQ(residual->kind(), c10::aten::conv2d);
    const at::Tensor fusedBias = torch::jit::toIValue(fusedCall->input(4))->toTensor();
    const c10::IValue residualBias = *torch::jit::toIValue(residual->input(2));
    if (residualReadElsewhere) {  // %z itself is an output: it keeps its bias
      EXPECT_TRUE(residualBias.toTensor().equal(bd));
      EXPECT_TRUE(fusedBias.equal(b));
    } else {  // summed in fp32, rounded once
      EXPECT_TRUE(residualBias.isNone());
      EXPECT_TRUE(fusedBias.equal((b.to(at::kFloat) + bd.to(at::kFloat)).to(at::kHalf)));
    }
  }
}

TEST(FuseCudnnConvolutionsTest, ResidualMadeByAFusedCallFusesIntoTheNextBlock) {
  // two ResNet blocks with identity shortcuts: the second adds the first's fused result, which nobody observed
  NamedGraph named = parseNamed(R"IR(
    graph(%x : Half(2, 8, 8, 8), %w1 : Tensor, %w2 : Tensor, %b : Tensor):
      %one : int = prim::Constant[value=1]()
      %ones : int[] = prim::ListConstruct(%one, %one)
      %c1 : Half(2, 8, 8, 8) = aten::conv2d(%x, %w1, %b, %ones, %ones, %ones, %one)
      %s1 : Half(2, 8, 8, 8) = aten::add(%c1, %x, %one)
      %r1 : Half(2, 8, 8, 8) = aten::relu(%s1)
      %c2 : Half(2, 8, 8, 8) = aten::conv2d(%r1, %w2, %b, %ones, %ones, %ones, %one)
      %s2 : Half(2, 8, 8, 8) = aten::add(%c2, %r1, %one)
      %r2 : Half(2, 8, 8, 8) = aten::relu(%s2)
      return (%r2))IR");
  inlineInputAsConstant(*named.graph, 3, at::randn({8}).to(at::kHalf));
  inlineInputAsConstant(*named.graph, 2, at::randn({8, 8, 3, 3}).to(at::kHalf));
  inlineInputAsConstant(*named.graph, 1, at::randn({8, 8, 3, 3}).to(at::kHalf));
  const FusedConvolutions fused = FuseCudnnConvolutions(
      named.graph,
      observeNamed(named, {{"x", {2, 8, 8, 8}}, {"c1", {2, 8, 8, 8}}, {"r1", {2, 8, 8, 8}}, {"c2", {2, 8, 8, 8}}}));
  named.graph->lint();
  EXPECT_EQ(fused.convAddRelu, 2);
  FileCheck().check_count("aten::cudnn_convolution_add_relu", 2, /*exactly=*/true)->check_not("aten::add")
      ->run(*named.graph);
}

TEST(FuseCudnnConvolutionsTest, TracedConvolutionFusesUnlessTransposed) {
  const NamedGraph traced = tracedConvolutionRelu("0");
  EXPECT_EQ(FuseCudnnConvolutions(traced.graph, observeNamed(traced, {{"c", {2, 8, 8, 8}}})).convRelu, 1);
  traced.graph->lint();
  FileCheck().check("aten::cudnn_convolution_relu(%x, ")->check_not("aten::_convolution")->run(*traced.graph);
  const NamedGraph transposed = tracedConvolutionRelu("1");
  EXPECT_EQ(FuseCudnnConvolutions(transposed.graph, observeNamed(transposed, {{"c", {2, 8, 8, 8}}})).convRelu, 0);
  FileCheck().check("aten::_convolution")->check("aten::relu")->check_not("cudnn")->run(*transposed.graph);
}

TEST(ChannelsLastConvolutionsTest, TracedConvolutionIsReLaidUnlessTransposed) {
  for (const char* transposed : {"0", "1"}) {
    const NamedGraph named = tracedConvolutionRelu(transposed);
    const int convolutions =
        ConvertConvolutionsToChannelsLast(named.graph, observeNamed(named, {{"c", {2, 8, 8, 8}}}));
    named.graph->lint();
    EXPECT_EQ(convolutions, std::string(transposed) == "0" ? 1 : 0) << "transposed=" << transposed;
  }
}


// An IBN unit as a scripted model converted to fp16 has it: conv -> split in two halves -> one half's contiguous copy
// instance-normalised in fp32 inside nn.InstanceNorm2d's If (for an unbatched input), the other's batch-normalised ->
// cat -> relu -> conv. `norm` is the batched branch's norm of %f (the half cast to fp32), `copy` the copies' memory
// format. Weights: %w1 [4, 3, 3, 3], %w2 [4, 4, 3, 3], the norms' parameters of 2 channels, all Half but the
// instance norm's.
std::string ibnUnit(const std::string& norm, const std::string& copy = "%zero", const std::string& beforeReturn = "") {
  return R"IR(
    graph(%x : Half(2, 3, 8, 8, strides=[192, 64, 8, 1], device=cpu), %w1 : Tensor, %w2 : Tensor, %gamma : Tensor,
          %beta : Tensor, %bnw : Tensor, %bnb : Tensor, %mean : Tensor, %var : Tensor):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %zero : int = prim::Constant[value=0]()
      %two : int = prim::Constant[value=2]()
      %three : int = prim::Constant[value=3]()
      %float : int = prim::Constant[value=6]()
      %half : int = prim::Constant[value=5]()
      %true : bool = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %momentum : float = prim::Constant[value=0.1]()
      %eps : float = prim::Constant[value=1e-05]()
      %ones : int[] = prim::ListConstruct(%one, %one)
      %c1 : Half(2, 4, 8, 8) = aten::conv2d(%x, %w1, %none, %ones, %ones, %ones, %one)
      %halves : Tensor[] = aten::split(%c1, %two, %one)
      %h1 : Half(2, 2, 8, 8) = aten::__getitem__(%halves, %zero)
      %h1c : Half(2, 2, 8, 8) = aten::contiguous(%h1, )IR" + copy + R"IR()
      %d : int = aten::dim(%h1c)
      %unbatched : bool = aten::eq(%d, %three)
      %inorm : Float(2, 2, 8, 8) = prim::If(%unbatched)
        block0():
          %f0 : Float(2, 8, 8) = aten::to(%h1c, %float, %false, %false, %none)
          %u : Float(1, 2, 8, 8) = aten::unsqueeze(%f0, %zero)
          %un : Float(1, 2, 8, 8) = aten::instance_norm(%u, %gamma, %beta, %none, %none, %true, %momentum, %eps, %true)
          %s : Float(2, 8, 8) = aten::squeeze(%un, %zero)
          -> (%s)
        block1():
          %f : Float(2, 2, 8, 8) = aten::to(%h1c, %float, %false, %false, %none)
          )IR" + norm + R"IR(
          -> (%n)
      %inh : Half(2, 2, 8, 8) = aten::to(%inorm, %half, %false, %false, %none)
      %h2 : Half(2, 2, 8, 8) = aten::__getitem__(%halves, %one)
      %h2c : Half(2, 2, 8, 8) = aten::contiguous(%h2, )IR" + copy + R"IR()
      %bn : Half(2, 2, 8, 8) = aten::batch_norm(%h2c, %bnw, %bnb, %mean, %var, %false, %momentum, %eps, %true)
      %parts : Tensor[] = prim::ListConstruct(%inh, %bn)
      %cat : Half(2, 4, 8, 8) = aten::cat(%parts, %one)
      %r : Half(2, 4, 8, 8) = aten::relu(%cat)
      %c2 : Half(2, 4, 8, 8) = aten::conv2d(%r, %w2, %none, %ones, %ones, %ones, %one)
)IR" + beforeReturn + R"IR(
      return (%c2))IR";
}

constexpr const char* kInstanceNorm =
    "%n : Float(2, 2, 8, 8) = aten::instance_norm(%f, %gamma, %beta, %none, %none, %true, %momentum, %eps, %true)";

struct IbnCase {
  std::shared_ptr<torch::jit::Graph> graph;
  std::vector<c10::IValue> inputs;
};

// ibnUnit(...) with its weights inlined, %c1, %c2 and %n observed on `device`, through the pass; lint, and the
// outputs within fp16 rounding of the graph's before (NHWC fp16 convolutions accumulate in another order on a CPU).
IbnCase relayIbnUnit(const std::string& ir, const at::Tensor& gamma, const at::Tensor& beta) {
  const NamedGraph named = parseNamed(ir);
  IbnCase result{named.graph, {at::randn({2, 3, 8, 8}).to(at::kHalf)}};
  const std::vector<at::Tensor> weights = {
      at::randn({4, 3, 3, 3}).to(at::kHalf), at::randn({4, 4, 3, 3}).to(at::kHalf), gamma, beta,
      at::rand({2}).to(at::kHalf) + 0.5, at::randn({2}).to(at::kHalf), at::randn({2}).to(at::kHalf),
      at::rand({2}).to(at::kHalf) + 0.5};
  for (size_t i = weights.size(); i > 0; --i) {
    inlineInputAsConstant(*result.graph, i, weights[i - 1]);
  }
  const auto before = runGraph(result.graph, result.inputs);
  const int convolutions = ConvertConvolutionsToChannelsLast(
      result.graph, observeNamed(named, {{"c1", {2, 4, 8, 8}}, {"c2", {2, 4, 8, 8}}, {"n", {2, 2, 8, 8}}}));
  EXPECT_EQ(convolutions, 2);
  result.graph->lint();
  expectCloseOutputs(before, runGraph(result.graph, result.inputs), 2e-3);
  return result;
}

TEST(ChannelsLastConvolutionsTest, IbnUnitStaysNhwcThroughSplitCopiesBranchesAndInstanceNorm) {
  const IbnCase converted = relayIbnUnit(ibnUnit(kInstanceNorm), at::randn({2}), at::randn({2}));
  // No copy to NCHW in the chain: the halves are read as strided NHWC views (both model copies dropped), the instance
  // norm is fp32 statistics and one scale-and-shift pass; the unbatched branch's cast writes NCHW for its unsqueeze
  // (a view), and only the graph's return reads a contiguous copy.
  FileCheck().check("aten::split")->check("prim::If")->check_not("aten::contiguous")->check("aten::unsqueeze")
      ->check("aten::instance_norm")->check("block1")->check_not("aten::contiguous")->check("aten::var_mean")
      ->check("aten::rsqrt")->check("aten::addcmul")->check("aten::addcmul")->check_not("aten::instance_norm")
      ->check_not("aten::contiguous")->check("aten::batch_norm")->check("aten::cat")->check("aten::conv2d")
      ->check("aten::contiguous")->check("return")->run(*converted.graph);
  EXPECT_EQ(countNodes(*converted.graph, c10::aten::contiguous), 1);
  torch::jit::Stack stack = runGraph(converted.graph, converted.inputs);
  EXPECT_TRUE(stack[0].toTensor().is_contiguous());
}

TEST(ChannelsLastConvolutionsTest, NormWithoutAffineAndGroupNormAreWrittenForNhwc) {
  relayIbnUnit(ibnUnit(
      "%n : Float(2, 2, 8, 8) = aten::instance_norm(%f, %none, %none, %none, %none, %true, %momentum, %eps, %true)"),
      at::randn({2}), at::randn({2}));
  for (const char* groups : {"1", "2"}) {
    const IbnCase converted = relayIbnUnit(ibnUnit(std::string(R"IR(%g : int = prim::Constant[value=)IR") + groups +
        R"IR(]()
          %n : Float(2, 2, 8, 8) = aten::group_norm(%f, %g, %gamma, %beta, %eps, %true))IR"), at::randn({2}),
        at::randn({2}));
    if (std::string(groups) == "1") {  // two channels a group: statistics over a [N, 1, 2, H, W] view
      FileCheck().check("block1")->check_not("aten::contiguous")->check("aten::unflatten")->check("aten::var_mean")
          ->check("aten::flatten")->check("aten::addcmul")->check_not("aten::group_norm")->run(*converted.graph);
    } else {  // a channel a group: an instance norm
      FileCheck().check("block1")->check_not("aten::contiguous")->check_not("aten::unflatten")
          ->check("aten::var_mean")->check_not("aten::flatten")->check("aten::addcmul")->check_not("aten::group_norm")
          ->run(*converted.graph);
    }
  }
}

TEST(ChannelsLastConvolutionsTest, NormsItCannotWriteForNhwcReadNchw) {
  // running statistics in use, a group count that is not a constant, a weight that is not a constant
  for (const std::string& norm : {
           std::string("%n : Float(2, 2, 8, 8) = aten::instance_norm(%f, %gamma, %beta, %gamma, %beta, %false, "
                       "%momentum, %eps, %true)"),
           std::string("%g : int = aten::size(%f, %one)\n          "
                       "%n : Float(2, 2, 8, 8) = aten::group_norm(%f, %g, %gamma, %beta, %eps, %true)"),
           std::string("%w : Tensor = aten::abs(%gamma)\n          "
                       "%n : Float(2, 2, 8, 8) = aten::instance_norm(%f, %w, %beta, %none, %none, %true, %momentum, "
                       "%eps, %true)")}) {
    const IbnCase converted = relayIbnUnit(ibnUnit(norm), at::randn({2}), at::rand({2}) + 0.5);
    // the norm reads NCHW: from the cast, which writes it itself where the norm is its only reader, or a copy
    const torch::jit::Node* branches = nullptr;
    for (const torch::jit::Node* node : converted.graph->nodes()) {
      branches = node->kind() == c10::prim::If ? node : branches;
    }
    ASSERT_NE(branches, nullptr);
    const torch::jit::Node* kept = branches->blocks()[1]->outputs()[0]->node();
    ASSERT_TRUE(kept->kind() == c10::aten::instance_norm || kept->kind() == c10::aten::group_norm);
    const torch::jit::Node* producer = kept->input(0)->node();
    EXPECT_TRUE(producer->kind() == c10::aten::contiguous ||
                (producer->kind() == c10::aten::to &&
                 torch::jit::toIValue(producer->input(4))->toInt() ==
                     static_cast<int64_t>(c10::MemoryFormat::Contiguous)))
        << *converted.graph;
    FileCheck().check_not("aten::var_mean")->run(*converted.graph);
  }
}

TEST(ChannelsLastConvolutionsTest, ModelCopiesStayWhereTheGraphWritesOrAReaderNeedsNchw) {
  // a write anywhere in the graph: the copies may be what keeps it from the original
  const IbnCase writes = relayIbnUnit(ibnUnit(kInstanceNorm, "%zero", "      %w2c : Tensor = aten::relu_(%c2)"),
                                      at::randn({2}), at::randn({2}));
  FileCheck().check("aten::split")->check("aten::contiguous")->check("prim::If")->run(*writes.graph);
  // a copy in channels_last (not the model's NCHW one) is not for this pass to drop
  const IbnCase channelsLast = relayIbnUnit(ibnUnit(kInstanceNorm, "%two"), at::randn({2}), at::randn({2}));
  FileCheck().check("aten::split")->check("aten::contiguous")->check("prim::If")->run(*channelsLast.graph);
}

TEST(ChannelsLastConvolutionsTest, InputCastIntoConvolutionsWritesNhwcAtOnce) {
  for (const bool otherReader : {false, true}) {
    const NamedGraph named = parseNamed(std::string(R"IR(
      graph(%x : Float(2, 3, 8, 8), %w : Tensor):
        %none : NoneType = prim::Constant()
        %one : int = prim::Constant[value=1]()
        %half : int = prim::Constant[value=5]()
        %false : bool = prim::Constant[value=0]()
        %ones : int[] = prim::ListConstruct(%one, %one)
        %xh : Half(2, 3, 8, 8) = aten::to(%x, %half, %false, %false, %none)
        %c : Half(2, 4, 8, 8) = aten::conv2d(%xh, %w, %none, %ones, %ones, %ones, %one)
)IR") + (otherReader ? "        %o : Half(2, 3, 8, 8) = aten::relu(%xh)\n        return (%c, %o)"
                     : "        return (%c)"));
    inlineInputAsConstant(*named.graph, 1, at::randn({4, 3, 3, 3}).to(at::kHalf));
    const std::vector<c10::IValue> inputs = {at::randn({2, 3, 8, 8})};
    const auto before = runGraph(named.graph, inputs);
    ConvertConvolutionsToChannelsLast(named.graph, observeNamed(named, {{"xh", {2, 3, 8, 8}}, {"c", {2, 4, 8, 8}}}));
    named.graph->lint();
    expectCloseOutputs(before, runGraph(named.graph, inputs), 2e-3);
    const torch::jit::Node* cast = named.graph->outputs()[0]->node()->input(0)->node()->input(0)->node();
    ASSERT_EQ(cast->kind(), c10::aten::to);
    const c10::IValue memoryFormat = *torch::jit::toIValue(cast->input(4));
    if (otherReader) {  // the relu reads NCHW as before
      EXPECT_TRUE(memoryFormat.isNone());
    } else {
      EXPECT_EQ(memoryFormat.toInt(), static_cast<int64_t>(c10::MemoryFormat::ChannelsLast));
    }
  }
}

} // namespace
} // namespace torch_mp::jit
