// FusePointwise and the torch_mp::fused_pointwise kernel: chains that fuse and ones that must not, with lint,
// FileCheck and numerics against the unfused graph (bit for bit where only arithmetic and casts are fused).
#include <gtest/gtest.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/library.h>

#include <memory>
#include <regex>

#include "jit/ir/casts.h"
#include "jit/ir/ir_utils.h"
#include "jit/pipeline.h"
#include "jit/rewrite/fuse_pointwise.h"
#include "kernels/fused_pointwise.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

// FusePointwise with a ledger of its own.
int fusePointwise(const std::shared_ptr<torch::jit::Graph>& graph, const ObservedValues& observed) {
  CastLedger ledger(observed);
  return FusePointwise(graph, observed, ledger);
}

// Runs FusePointwise, lints, and compares outputs with the unfused graph within `tolerance` (0: bit for bit).
Fused fuse(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<c10::IValue>& inputs,
           const ObservedValues& observed, double tolerance = 0.0) {
  return fuseAndCompare(graph, inputs, observed, tolerance, FusePointwise);
}

at::Tensor bf16(std::vector<int64_t> sizes) {
  return (at::randn(sizes) * 3).to(at::kBFloat16);
}

// The IR with every `device=cpu` replaced (the pass reads devices from the observations; this keeps the IR honest).
std::string onDevice(const std::string& ir, const std::string& device) {
  return std::regex_replace(ir, std::regex("device=cpu"), "device=" + device);
}

bool buildHasCudaKernel() {
  return kernels::hasFusedPointwiseKernel(c10::DeviceType::CUDA);
}

// While it lives, a CUDA kernel for torch_mp::fused_pointwise where the build has none (a CPU-only build), so that
// the pass may fuse CUDA values; these tests only rewrite such graphs, never run them. Nothing in a CUDA build.
class StandInCudaKernel {
 public:
  StandInCudaKernel() {
    if (!buildHasCudaKernel()) {
      library_ = std::make_unique<torch::Library>(torch::Library::IMPL, "torch_mp", c10::DispatchKey::CUDA, __FILE__,
                                                  __LINE__);
      library_->impl("fused_pointwise",
                     [](at::TensorList, c10::IntArrayRef, c10::ArrayRef<double>, c10::ScalarType) -> at::Tensor {
                       TORCH_CHECK(false, "the tests' stand-in CUDA kernel of torch_mp::fused_pointwise ran");
                     });
    }
  }

 private:
  std::unique_ptr<torch::Library> library_;
};

// upcast -> residual add -> relu -> downcast: the CPU bf16 pattern after a low-precision linear.
constexpr const char* kUpcastAddReluDowncast = R"IR(
    graph(%x : BFloat16(4, 300, strides=[300, 1], device=cpu), %r : Float(4, 300, strides=[300, 1], device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %bf16 : int = prim::Constant[value=15]()
      %one : int = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(4, 300, strides=[300, 1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %s : Float(4, 300, strides=[300, 1], device=cpu) = aten::add(%up, %r, %one)
      %y : Float(4, 300, strides=[300, 1], device=cpu) = aten::relu(%s)
      %z : BFloat16(4, 300, strides=[300, 1], device=cpu) = aten::to(%y, %bf16, %false, %false, %none)
      return (%z))IR";

TEST(FusePointwiseTest, ChainWithCastsBecomesOneCallBitForBit) {
  auto graph = parseGraph(kUpcastAddReluDowncast);
  const Fused fused = fuse(graph, {bf16({4, 300}), at::randn({4, 300})}, observeAllTensors(*graph, {4, 300}));
  EXPECT_EQ(fused.calls, 1);
  EXPECT_EQ(fused.castsRemoved, 2);
  FileCheck().check_not("aten::to")->check_not("aten::add")->check_not("aten::relu")
      ->check("prim::ListConstruct(%x, %r)")->check_count("torch_mp::fused_pointwise", 1, /*exactly=*/true)
      ->run(*graph);
  EXPECT_EQ(recordedDtype(graph->outputs()[0]), at::kBFloat16);
}

TEST(FusePointwiseTest, ScalarOperandsAndEveryOpBitForBit) {
  auto graph = parseGraph(R"IR(
    graph(%x : BFloat16(8, 100, strides=[100, 1], device=cpu), %h : Half(8, 100, strides=[100, 1], device=cpu)):
      %third : float = prim::Constant[value=0.33333333333333331]()
      %three : int = prim::Constant[value=3]()
      %one : int = prim::Constant[value=1]()
      %a : BFloat16(8, 100, strides=[100, 1], device=cpu) = aten::mul(%x, %third)
      %b : BFloat16(8, 100, strides=[100, 1], device=cpu) = aten::sub(%a, %three, %one)
      %c : BFloat16(8, 100, strides=[100, 1], device=cpu) = aten::relu(%b)
      %d : BFloat16(8, 100, strides=[100, 1], device=cpu) = aten::neg(%c)
      %e : Float(8, 100, strides=[100, 1], device=cpu) = aten::div(%d, %h)
      %f : Float(8, 100, strides=[100, 1], device=cpu) = aten::add(%e, %three, %one)
      %g : Float(8, 100, strides=[100, 1], device=cpu) = aten::mul(%f, %x)
      return (%g))IR");
  const Fused fused =
      fuse(graph, {bf16({8, 100}), (at::randn({8, 100}) + 4).to(at::kHalf)}, observeAllTensors(*graph, {8, 100}));
  EXPECT_EQ(fused.calls, 1);
  FileCheck().check_not("aten::")->check("torch_mp::fused_pointwise")->run(*graph);
}

// Numbers fp16 / bf16 / fp32 do not hold, on tensors of each: ATen's CPU add and sub round the number to the
// tensor's dtype first, its mul and div take it in fp32; CUDA's division multiplies by the fp32 reciprocal.
constexpr const char* kInexactNumbers = R"IR(
    graph(%x : BFloat16(8, 100, strides=[100, 1], device=cpu), %h : Half(8, 100, strides=[100, 1], device=cpu)):
      %tenth : float = prim::Constant[value=0.10000000000000001]()
      %third : float = prim::Constant[value=0.33333333333333331]()
      %big : int = prim::Constant[value=2049]()
      %one : int = prim::Constant[value=1]()
      %a : BFloat16(8, 100, strides=[100, 1], device=cpu) = aten::add(%x, %tenth, %one)
      %b : BFloat16(8, 100, strides=[100, 1], device=cpu) = aten::sub(%a, %third, %one)
      %c : BFloat16(8, 100, strides=[100, 1], device=cpu) = aten::mul(%b, %tenth)
      %d : BFloat16(8, 100, strides=[100, 1], device=cpu) = aten::div(%c, %third)
      %e : Half(8, 100, strides=[100, 1], device=cpu) = aten::add(%h, %big, %one)
      %f : Half(8, 100, strides=[100, 1], device=cpu) = aten::sub(%e, %tenth, %one)
      %g : Half(8, 100, strides=[100, 1], device=cpu) = aten::div(%f, %tenth)
      %y : Float(8, 100, strides=[100, 1], device=cpu) = aten::add(%d, %g, %one)
      %z : Float(8, 100, strides=[100, 1], device=cpu) = aten::div(%y, %tenth)
      return (%z))IR";

TEST(FusePointwiseTest, NumbersAsTheCpuKernelsOfAtenTakeThemBitForBit) {
  auto graph = parseGraph(kInexactNumbers);
  const Fused fused = fuse(graph, {bf16({8, 100}), (at::randn({8, 100}) * 500).to(at::kHalf)},
                           observeAllTensors(*graph, {8, 100}));
  EXPECT_EQ(fused.calls, 1);
  FileCheck().check_not("aten::")->check("torch_mp::fused_pointwise")->run(*graph);
}

// The fused call's program and scalars.
std::pair<std::vector<int64_t>, std::vector<double>> programOf(const torch::jit::Graph& graph) {
  for (const torch::jit::Node* node : graph.nodes()) {
    if (node->kind() == c10::Symbol::fromQualString(kernels::kFusedPointwiseOp)) {
      return {torch::jit::toIValue(node->input(1))->toIntVector(),
              torch::jit::toIValue(node->input(2))->toDoubleVector()};
    }
  }
  return {};
}

TEST(FusePointwiseTest, NumbersAsTheCudaKernelsOfAtenTakeThem) {
  const StandInCudaKernel kernel;
  auto onCpu = parseGraph(kInexactNumbers);
  ASSERT_EQ(fusePointwise(onCpu, observeAllTensors(*onCpu, {8, 100})), 1);
  auto onCuda = parseGraph(onDevice(kInexactNumbers, "cuda:0"));
  ASSERT_EQ(fusePointwise(onCuda, observeAllTensors(*onCuda, {8, 100}, {}, c10::Device(c10::kCUDA, 0))), 1);
  onCuda->lint();
  const auto [cpuProgram, cpuScalars] = programOf(*onCpu);
  const auto [cudaProgram, cudaScalars] = programOf(*onCuda);
  auto count = [](const std::vector<int64_t>& program, kernels::PointwiseOp op) {
    int n = 0;
    for (size_t pc = 0; pc < program.size(); pc += 2) {
      n += program[pc] == static_cast<int64_t>(op);
    }
    return n;
  };
  // CPU: four numbers of adds and subs rounded to their tensors' dtypes (2049 to 2048 in fp16), divisions divide
  EXPECT_EQ(count(cpuProgram, kernels::PointwiseOp::kDiv), 3);
  EXPECT_EQ(count(cudaProgram, kernels::PointwiseOp::kDiv), 0);
  // CUDA: the three divisions by a number multiply by its fp32 reciprocal, the numbers of adds and subs stay fp32
  EXPECT_EQ(count(cudaProgram, kernels::PointwiseOp::kMul),
            count(cpuProgram, kernels::PointwiseOp::kMul) + 3);
  EXPECT_EQ(count(cpuProgram, kernels::PointwiseOp::kRound),
            count(cudaProgram, kernels::PointwiseOp::kRound) + 4);
  const std::vector<double> expected = {0.1, 1.0 / 3, 0.1, 1.0f / static_cast<float>(1.0 / 3), 2049, 0.1,
                                        1.0f / 0.1f, 1.0f / 0.1f};
  EXPECT_EQ(cudaScalars, expected);
  EXPECT_EQ(cpuScalars.size(), expected.size());
}

// 1e-3's fp32 reciprocal formed in fp32 (999.99994) is not the double one rounded to fp32 (1000): which one ATen's
// CUDA division uses is not pinned down, so on CUDA that division stays an aten op; 0.5's reciprocal is exact.
constexpr const char* kDivisionsByNumbers = R"IR(
    graph(%x : Half(8, 100, strides=[100, 1], device=cpu)):
      %thousandth : float = prim::Constant[value=0.001]()
      %half : float = prim::Constant[value=0.5]()
      %a : Half(8, 100, strides=[100, 1], device=cpu) = aten::relu(%x)
      %b : Half(8, 100, strides=[100, 1], device=cpu) = aten::div(%a, %half)
      %c : Half(8, 100, strides=[100, 1], device=cpu) = aten::div(%b, %thousandth)
      %d : Half(8, 100, strides=[100, 1], device=cpu) = aten::neg(%c)
      return (%d))IR";

TEST(FusePointwiseTest, CudaDivisionByANumberWithAnAmbiguousReciprocalStaysAtenOp) {
  const StandInCudaKernel kernel;
  auto onCpu = parseGraph(kDivisionsByNumbers);
  ASSERT_EQ(fusePointwise(onCpu, observeAllTensors(*onCpu, {8, 100})), 1);
  FileCheck().check_not("aten::div")->check("torch_mp::fused_pointwise")->run(*onCpu);
  auto onCuda = parseGraph(onDevice(kDivisionsByNumbers, "cuda:0"));
  fusePointwise(onCuda, observeAllTensors(*onCuda, {8, 100}, {}, c10::Device(c10::kCUDA, 0)));
  onCuda->lint();
  FileCheck()
      .check("torch_mp::fused_pointwise")
      ->check_count("aten::div", 1, /*exactly=*/true)
      ->check("aten::neg")
      ->run(*onCuda);
  EXPECT_EQ(programOf(*onCuda).second, std::vector<double>{2.0});  // relu, then times 0.5's reciprocal
}

TEST(FusePointwiseTest, SingleOpOrBroadcastStaysAsItIs) {
  auto graph = parseGraph(R"IR(
    graph(%x : Float(4, 300, strides=[300, 1], device=cpu), %bias : Float(300, strides=[1], device=cpu)):
      %one : int = prim::Constant[value=1]()
      %s : Float(4, 300, strides=[300, 1], device=cpu) = aten::add(%x, %bias, %one)
      %y : Float(4, 300, strides=[300, 1], device=cpu) = aten::relu(%s)
      return (%y))IR");
  const Fused fused =
      fuse(graph, {at::randn({4, 300}), at::randn({300})}, observeAllTensors(*graph, {4, 300}, {{"bias", {300}}}));
  EXPECT_EQ(fused.calls, 0);  // the add broadcasts; the relu alone is one op
  FileCheck().check("aten::add")->check("aten::relu")->check_not("torch_mp::")->run(*graph);
}

TEST(FusePointwiseTest, ValueWithAnotherReaderIsAnInputNotAMember) {
  auto graph = parseGraph(R"IR(
    graph(%x : Float(4, 300, strides=[300, 1], device=cpu)):
      %bf16 : int = prim::Constant[value=15]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %t : Float(4, 300, strides=[300, 1], device=cpu) = aten::tanh(%x)
      %y : Float(4, 300, strides=[300, 1], device=cpu) = aten::relu(%t)
      %z : BFloat16(4, 300, strides=[300, 1], device=cpu) = aten::to(%y, %bf16, %false, %false, %none)
      return (%z, %t))IR");
  const Fused fused = fuse(graph, {at::randn({4, 300})}, observeAllTensors(*graph, {4, 300}));
  EXPECT_EQ(fused.calls, 1);
  FileCheck().check("aten::tanh(%x)")->check("prim::ListConstruct(%")->check("torch_mp::fused_pointwise")
      ->check_not("aten::relu")->run(*graph);
}

// Fuses kUpcastAddReluDowncast observed on cuda:0 and lints; returns the number of fused calls.
int fuseOnCuda(std::shared_ptr<torch::jit::Graph>& graph) {
  graph = parseGraph(onDevice(kUpcastAddReluDowncast, "cuda:0"));
  const int calls = fusePointwise(graph, observeAllTensors(*graph, {4, 300}, {}, c10::Device(c10::kCUDA, 0)));
  graph->lint();
  return calls;
}

TEST(FusePointwiseTest, CudaValuesFuseOnlyInABuildWithTheCudaKernel) {
#if defined(TORCH_MP_WITH_CUDA)
  ASSERT_TRUE(buildHasCudaKernel()) << "a build with CUDA kernels registers torch_mp::fused_pointwise for CUDA";
#endif
  std::shared_ptr<torch::jit::Graph> graph;
  const int calls = fuseOnCuda(graph);
  if (buildHasCudaKernel()) {
    EXPECT_EQ(calls, 1);
    FileCheck().check_not("aten::add")->check("prim::ListConstruct(%x, %r)")
        ->check_count("torch_mp::fused_pointwise", 1, /*exactly=*/true)->run(*graph);
  } else {  // a CPU-only build: a fused call could not run on these tensors
    EXPECT_EQ(calls, 0);
    FileCheck().check("aten::to")->check("aten::add")->check("aten::relu")->check("aten::to")
        ->check_not("torch_mp::")->run(*graph);
  }
}

TEST(FusePointwiseTest, PassAsksTheDispatcherForACudaKernelWhenItRuns) {
  std::shared_ptr<torch::jit::Graph> graph;
  {
    const StandInCudaKernel kernel;
    ASSERT_TRUE(buildHasCudaKernel());
    EXPECT_EQ(fuseOnCuda(graph), 1);
    FileCheck().check("prim::ListConstruct(%x, %r)")->check("torch_mp::fused_pointwise")->check_not("aten::")
        ->run(*graph);
  }
  if (!buildHasCudaKernel()) {  // the stand-in is gone again
    EXPECT_EQ(fuseOnCuda(graph), 0);
  }
}

TEST(FusePointwiseTest, ChainsNeverMixDevices) {
  const StandInCudaKernel kernel;
  // %r elsewhere: the add reads tensors on two devices and stays; the relu and the downcast after it fuse on cuda:0
  for (const c10::Device elsewhere : {c10::Device(c10::kCPU), c10::Device(c10::kCUDA, 1)}) {
    auto graph = parseGraph(onDevice(kUpcastAddReluDowncast, "cuda:0"));
    const ObservedValues observed =
        observeAllTensors(*graph, {4, 300}, {}, c10::Device(c10::kCUDA, 0), {{"r", elsewhere}});
    EXPECT_EQ(fusePointwise(graph, observed), 1) << elsewhere;
    graph->lint();
    FileCheck().check("aten::to(%x")->check("aten::add(")->check(", %r,")->check("prim::ListConstruct(%")
        ->check("torch_mp::fused_pointwise")->check_not("aten::relu")->run(*graph);
  }
  // the upcast's source seen on the CPU, its result on cuda:0: a node whose operands disagree is not a member
  {
    auto graph = parseGraph(onDevice(kUpcastAddReluDowncast, "cuda:0"));
    const ObservedValues observed =
        observeAllTensors(*graph, {4, 300}, {}, c10::Device(c10::kCUDA, 0), {{"x", c10::Device(c10::kCPU)}});
    EXPECT_EQ(fusePointwise(graph, observed), 1);
    graph->lint();
    FileCheck().check("aten::to(%x")->check_not("aten::")->check("prim::ListConstruct(%")->check(", %r)")
        ->check("torch_mp::fused_pointwise")->check_not("aten::")->run(*graph);
  }
}

TEST(FusePointwiseTest, NotOnDevicesWithoutAKernelNorInLoops) {
  {
    auto graph = parseGraph(kUpcastAddReluDowncast);
    EXPECT_EQ(fusePointwise(graph, observeAllTensors(*graph, {4, 300}, {}, c10::Device(c10::kXPU, 0))), 0);
  }
  {
    auto graph = parseGraph(R"IR(
      graph(%x : Float(4, 300, strides=[300, 1], device=cpu), %n : int):
        %true : bool = prim::Constant[value=1]()
        %out : Tensor = prim::Loop(%n, %true, %x)
          block0(%i : int, %carried : Tensor):
            %t : Float(4, 300, strides=[300, 1], device=cpu) = aten::tanh(%carried)
            %y : Float(4, 300, strides=[300, 1], device=cpu) = aten::relu(%t)
            -> (%true, %y)
        return (%out))IR");
    ObservedValues observed;
    const torch::jit::Node* loop = graph->outputs()[0]->node();
    for (const torch::jit::Node* node : loop->blocks()[0]->nodes()) {
      observed.emplace(node->output(), observedTensor({4, 300}));
    }
    EXPECT_EQ(fusePointwise(graph, observed), 0);
    FileCheck().check("aten::tanh")->check("aten::relu")->run(*graph);
  }
}

at::Tensor runKernel(std::vector<int64_t> program, std::vector<at::Tensor> inputs,
                     c10::ScalarType out = at::kFloat) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("torch_mp::fused_pointwise", "")
                             .typed<at::Tensor(at::TensorList, c10::IntArrayRef, c10::ArrayRef<double>,
                                               c10::ScalarType)>();
  return op.call(inputs, program, {}, out);
}

TEST(FusePointwiseTest, KernelKeepsAChannelsLastLayoutAndReadsAnyOther) {
  const at::Tensor a = bf16({2, 16, 9, 9}).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor b = bf16({2, 16, 9, 9}).contiguous(at::MemoryFormat::ChannelsLast);
  const std::vector<int64_t> addRelu = {0, 0, 0, 1, 20, 0, 2, 15, 10, 0};
  const at::Tensor same = runKernel(addRelu, {a, b}, at::kBFloat16);
  EXPECT_TRUE(same.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(at::equal(same, at::relu(a + b)));
  const at::Tensor mixed = runKernel(addRelu, {a, b.contiguous()}, at::kBFloat16);  // layouts differ: copies
  EXPECT_TRUE(mixed.is_contiguous());
  EXPECT_TRUE(at::equal(mixed, at::relu(a + b)));
  const at::Tensor transposed = bf16({4, 30}).t();  // dense, in another order: read as it lies, written alike
  const at::Tensor relued = runKernel({0, 0, 10, 0}, {transposed}, at::kBFloat16);
  EXPECT_EQ(relued.strides(), transposed.strides());
  EXPECT_TRUE(at::equal(relued, at::relu(transposed)));
  const at::Tensor everyOther = bf16({4, 60}).slice(1, 0, 60, 2);  // gaps in memory: a contiguous copy is read
  EXPECT_TRUE(at::equal(runKernel({0, 0, 10, 0}, {everyOther}, at::kBFloat16), at::relu(everyOther)));
}

TEST(FusePointwiseTest, KernelRejectsMalformedPrograms) {
  auto run = [](std::vector<int64_t> program, std::vector<at::Tensor> inputs) { return runKernel(program, inputs); };
  const at::Tensor x = at::randn({3, 5});
  EXPECT_TRUE(at::equal(run({0, 0, 10, 0}, {x}), at::relu(x)));
  EXPECT_THROW(run({0, 1}, {x}), c10::Error);             // no input 1
  EXPECT_THROW(run({0, 0, 0, 0}, {x}), c10::Error);       // two values left
  EXPECT_THROW(run({20, 0}, {x}), c10::Error);            // add on an empty stack
  EXPECT_THROW(run({0, 0, 99, 0}, {x}), c10::Error);      // unknown opcode
  EXPECT_THROW(run({0, 0, 0, 1, 20, 0}, {x, at::randn({4})}), c10::Error);  // sizes that do not broadcast
}

TEST(FusePointwiseTest, KernelBroadcastsSizesThatDifferAtRunTime) {
  // Equal on the example inputs (batch 1), not at run time (batch 8): ATen's broadcasting ops, the same values.
  const at::Tensor batch = bf16({8, 5});
  const at::Tensor row = bf16({1, 5});
  const std::vector<int64_t> addRoundRelu = {0, 0, 0, 1, 20, 0, 2, 15, 10, 0};
  EXPECT_TRUE(at::equal(runKernel(addRoundRelu, {batch, row}, at::kBFloat16), at::relu(batch + row)));
  EXPECT_TRUE(at::equal(runKernel(addRoundRelu, {row, batch}, at::kBFloat16), at::relu(row + batch)));
  const std::vector<int64_t> mulToFloat = {0, 0, 0, 1, 22, 0, 2, 15};
  EXPECT_TRUE(at::equal(runKernel(mulToFloat, {batch, row}, at::kFloat), (batch * row).to(at::kFloat)));
}

TEST(FusePointwiseTest, PipelineFusesOnlyWhenAsked) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %w : Tensor, %b : Tensor):
      %one : int = prim::Constant[value=1]()
      %exact : str = prim::Constant[value="none"]()
      %l : Tensor = aten::linear(%x, %w, %b)
      %g : Tensor = aten::gelu(%l, %exact)
      %s : Tensor = aten::add(%g, %x, %one)
      %n : int = prim::Constant[value=32]()
      %shape : int[] = prim::ListConstruct(%n)
      %none : NoneType = prim::Constant()
      %eps : float = prim::Constant[value=1e-05]()
      %true : bool = prim::Constant[value=1]()
      %y : Tensor = aten::layer_norm(%s, %shape, %none, %none, %eps, %true)
      return (%y))IR");
  inlineInputAsConstant(*graph, 2, torch::randn({32}));
  inlineInputAsConstant(*graph, 1, torch::randn({32, 32}) / 6);
  const std::vector<c10::IValue> inputs{torch::randn({16, 32})};
  auto expected = runGraph(graph, inputs);
  auto convertWith = [&](bool fusedKernels) {
    auto converted = graph->copy();
    ConvertOptions options = defaultOptions(c10::DeviceType::CPU, core::LowDtype::kBFloat16, core::CpuFeatures::all());
    options.kernels = fusedKernels ? Kernels::kFused : Kernels::kPortable;
    ConversionReport report = convertGraphInPlace(converted, inputs, options);
    converted->lint();
    expectCloseOutputs(expected, runGraph(converted, inputs), 3e-2);
    return std::make_pair(converted, report);
  };
  auto [portable, portableReport] = convertWith(false);
  FileCheck().check_not("torch_mp::")->check("aten::gelu")->run(*portable);
  EXPECT_EQ(portableReport.fusedPointwise, 0);
  // fused: the residual add and the casts around it are one call after the gelu; the norm reads its fp32 result
  auto [fused, fusedReport] = convertWith(true);
  FileCheck().check("aten::linear")->check("aten::gelu")->check_not("aten::add")
      ->check("torch_mp::fused_pointwise")->check("aten::layer_norm")->run(*fused);
  EXPECT_EQ(fusedReport.fusedPointwise, 1);
  EXPECT_GT(fusedReport.fusedCasts, portableReport.fusedCasts);
}

} // namespace
} // namespace torch_mp::jit
