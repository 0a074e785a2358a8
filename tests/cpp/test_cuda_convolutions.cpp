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

} // namespace
} // namespace torch_mp::jit
