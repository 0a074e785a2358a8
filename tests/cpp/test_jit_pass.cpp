// The load-time pass: graphs with the profile the executor records (prim::profile nodes carrying each tensor's
// type, built here from the types written in the IR strings), checked with FileCheck where the pass fires (guarded
// conversion with a fallback) and where it must not (integer tensors, a module not frozen, a disabled pass, shape
// queries); the recording graph a calibrating pass hands back; and the executor itself running a graph function
// under the pass, calibrating and not, against its fp32 results.
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/clear_profiling.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/torch.h>

#include <algorithm>

#include "jit/load_time/calibration_inputs.h"
#include "test_utils.h"
#include "torch_mp/jit_pass.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

// What the profiling executor hands its passes: every tensor input of every node read through a prim::profile
// node holding the type seen (here: the type the IR string gave the value), and the values' own types unshaped.
void profileTypedValues(const std::shared_ptr<torch::jit::Graph>& graph) {
  std::vector<torch::jit::Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  nodes.push_back(graph->return_node());
  for (torch::jit::Node* node : nodes) {
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      torch::jit::Value* value = node->input(i);
      auto type = value->type()->cast<c10::TensorType>();
      if (!type || !type->scalarType() || value->node()->kind() == c10::prim::Constant) {
        continue;
      }
      torch::jit::Node* profile = graph->create(c10::prim::profile, {value}, 1);
      profile->ty_(c10::attr::profiled_type, type);
      profile->insertBefore(node);
      node->replaceInput(i, profile->output());
    }
  }
  torch::jit::ClearProfilingInformation(graph);
}

// The pass picks the default policy for the CPU it runs on; these tests plan for a CPU with fast kernels in both
// low dtypes, whichever CPU runs them (JitPassTest.SlowKernelsKeepTheGraph plans for one without).
class JitPassTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("TORCH_MP_CPU_FEATURES", "all", 1);
  }
  void TearDown() override {
    disableMixedPrecisionPass();
    unsetenv("TORCH_MP_CPU_FEATURES");
  }
};

constexpr const char* kTypedConvReluSoftmax = R"IR(
    graph(%x : Float(1, 3, 8, 8, strides=[192, 64, 8, 1], requires_grad=0, device=cpu), %w : Tensor):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %zero : int = prim::Constant[value=0]()
      %ones : int[] = prim::ListConstruct(%one, %one)
      %zeros : int[] = prim::ListConstruct(%zero, %zero)
      %c : Float(1, 4, 6, 6, strides=[144, 36, 6, 1], requires_grad=0, device=cpu) = aten::conv2d(%x, %w, %none, %ones, %zeros, %ones, %one)
      %r : Float(1, 4, 6, 6, strides=[144, 36, 6, 1], requires_grad=0, device=cpu) = aten::relu(%c)
      %s : Float(1, 4, 6, 6, strides=[144, 36, 6, 1], requires_grad=0, device=cpu) = aten::softmax(%r, %one, %none)
      return (%s))IR";

std::shared_ptr<torch::jit::Graph> profiledConvReluSoftmax() {
  auto graph = parseGraph(kTypedConvReluSoftmax);
  inlineInputAsConstant(*graph, 1, torch::randn({4, 3, 3, 3}));
  profileTypedValues(graph);
  return graph;
}

TEST_F(JitPassTest, ProfiledFrozenGraphIsConvertedBehindADtypeGuard) {
  auto graph = profiledConvReluSoftmax();
  enableMixedPrecisionPass({.conversion = {.request = {.lowDtype = core::LowDtype::kFloat16}}, .calibrate = false});
  const int64_t before = mixedPrecisionPassActivity().converted;
  runMixedPrecisionPass(graph);
  graph->lint();
  FileCheck()
      .check("prim::TypeCheck[types=[FloatTensor(requires_grad=0, device=cpu)]](%x)")
      ->check("prim::If")
      ->check("aten::to")  // the input, to fp16
      ->check("aten::conv2d")
      ->check("aten::relu")
      ->check("aten::softmax")  // reads fp16, computes in fp32: the cast back fused into its dtype argument
      ->check("prim::FallbackGraph")
      ->check_not("prim::profile")
      ->run(*graph);
  FileCheck().check("Half(4, 3, 3, 3")->run(*graph);  // the weight, cast once
  const PassActivity activity = mixedPrecisionPassActivity();
  EXPECT_EQ(activity.converted, before + 1);
  EXPECT_EQ(activity.lastOutcome, SkipReason::kNone);
  ASSERT_TRUE(activity.lastReport);
  EXPECT_EQ(activity.lastReport->lowPrecisionNodes(), 2);  // conv2d, relu
  // the fallback is the graph as it was, profile nodes gone
  auto fallback = torch::jit::findAllNodes(*graph, c10::prim::FallbackGraph, /*recurse=*/true).at(0)->g(
      c10::attr::Subgraph);
  FileCheck().check_not("aten::to")->check("aten::conv2d")->check_not("prim::profile")->run(*fallback);
  const auto weights = torch::jit::findAllNodes(*fallback, c10::prim::Constant, /*recurse=*/false);
  EXPECT_EQ(std::count_if(weights.begin(), weights.end(), [](torch::jit::Node* node) {
              auto value = torch::jit::toIValue(node->output());
              return value->isTensor() && value->toTensor().scalar_type() == at::kFloat;
            }),
            1);
}

TEST_F(JitPassTest, ShapeQueriesAreNotFoldedFromTheProfiledSizes) {
  // the guard checks dtype and device only: a batch size or rank folded from the profile would break other inputs
  auto graph = parseGraph(R"IR(
    graph(%x : Float(4, 48, strides=[48, 1], requires_grad=0, device=cpu), %w : Tensor):
      %none : NoneType = prim::Constant()
      %zero : int = prim::Constant[value=0]()
      %minus : int = prim::Constant[value=-1]()
      %sizes : int[] = aten::size(%x)
      %n : int = aten::__getitem__(%sizes, %zero)
      %rank : int = aten::dim(%x)
      %shape : int[] = prim::ListConstruct(%n, %minus)
      %r : Float(4, 48, strides=[48, 1], requires_grad=0, device=cpu) = aten::reshape(%x, %shape)
      %y : Float(4, 5, strides=[5, 1], requires_grad=0, device=cpu) = aten::linear(%r, %w, %none)
      return (%y, %rank))IR");
  inlineInputAsConstant(*graph, 1, torch::randn({5, 48}));
  profileTypedValues(graph);
  enableMixedPrecisionPass({.conversion = {.request = {.lowDtype = core::LowDtype::kBFloat16}}, .calibrate = false});
  runMixedPrecisionPass(graph);
  graph->lint();
  EXPECT_EQ(mixedPrecisionPassActivity().lastOutcome, SkipReason::kNone);
  FileCheck()
      .check("prim::TypeCheck")
      ->check("aten::size(")
      ->check("aten::dim(")
      ->check("aten::reshape")
      ->check("aten::linear")
      ->check("prim::FallbackGraph")
      ->run(*graph);
}

TEST_F(JitPassTest, IntegerGraphIsLeftAsItWas) {
  auto graph = parseGraph(R"IR(
    graph(%i : Long(4, strides=[1], requires_grad=0, device=cpu)):
      %one : int = prim::Constant[value=1]()
      %s : Long(4, strides=[1], requires_grad=0, device=cpu) = aten::add(%i, %i, %one)
      %m : Long(4, strides=[1], requires_grad=0, device=cpu) = aten::mul(%s, %i)
      return (%m))IR");
  profileTypedValues(graph);
  const std::string before = graph->toString();
  enableMixedPrecisionPass({.conversion = {.request = {.lowDtype = core::LowDtype::kBFloat16}}});
  runMixedPrecisionPass(graph);
  EXPECT_EQ(graph->toString(), before);
  EXPECT_EQ(mixedPrecisionPassActivity().lastOutcome, SkipReason::kNothingToLower);
}

TEST_F(JitPassTest, SlowKernelsKeepTheGraph) {
  // a CPU without float16 arithmetic: the default policy keeps the convolution fp32, so nothing is lowered
  setenv("TORCH_MP_CPU_FEATURES", "avx512_bf16", 1);
  auto graph = profiledConvReluSoftmax();
  const std::string before = graph->toString();
  enableMixedPrecisionPass({.conversion = {.request = {.lowDtype = core::LowDtype::kFloat16}}});
  runMixedPrecisionPass(graph);
  EXPECT_EQ(graph->toString(), before);
  const PassActivity activity = mixedPrecisionPassActivity();
  EXPECT_EQ(activity.lastOutcome, SkipReason::kNothingToLower);
  ASSERT_TRUE(activity.lastReport);
  const auto& nodes = activity.lastReport->nodes;
  auto conv = std::find_if(nodes.begin(), nodes.end(), [](const NodeDecision& n) { return n.op == "aten::conv2d"; });
  ASSERT_NE(conv, nodes.end());
  EXPECT_EQ(conv->precision, core::Precision::kFp32);
  EXPECT_EQ(conv->ruleKind, core::RuleKind::kNoFastKernel);

  // the same CPU converts to bfloat16
  auto again = profiledConvReluSoftmax();
  enableMixedPrecisionPass({.conversion = {.request = {.lowDtype = core::LowDtype::kBFloat16}}, .calibrate = false});
  runMixedPrecisionPass(again);
  FileCheck().check("prim::TypeCheck")->check("BFloat16(4, 3, 3, 3")->check("aten::conv2d")->run(*again);
}

TEST_F(JitPassTest, GraphWithoutProfileIsLeftAsItWas) {
  auto graph = parseGraph(kConvReluSoftmax);
  const std::string before = graph->toString();
  enableMixedPrecisionPass({.conversion = {.request = {.lowDtype = core::LowDtype::kFloat16}}});
  runMixedPrecisionPass(graph);
  EXPECT_EQ(graph->toString(), before);
  EXPECT_EQ(mixedPrecisionPassActivity().lastOutcome, SkipReason::kNoProfile);
}

TEST_F(JitPassTest, DisabledPassChangesNothing) {
  auto graph = profiledConvReluSoftmax();
  const std::string before = graph->toString();
  const PassActivity activity = mixedPrecisionPassActivity();
  enableMixedPrecisionPass({.conversion = {.request = {.lowDtype = core::LowDtype::kFloat16}}});
  disableMixedPrecisionPass();
  runMixedPrecisionPass(graph);
  EXPECT_EQ(graph->toString(), before);
  EXPECT_EQ(mixedPrecisionPassActivity().converted, activity.converted);
  EXPECT_EQ(mixedPrecisionPassActivity().skipped, activity.skipped);
}

TEST_F(JitPassTest, RejectsLowPrecisionInputsAndOutputs) {
  // the executor's callers pass what the fp32 graph takes
  EXPECT_THROW(enableMixedPrecisionPass(
                   {.conversion = {.request = {.lowDtype = core::LowDtype::kFloat16, .keepIoDtypes = false}}}),
               c10::ValueError);
  EXPECT_FALSE(mixedPrecisionPassEnabled());
}

TEST_F(JitPassTest, CalibratingPassHandsBackAGraphRecordingItsInputs) {
  auto graph = profiledConvReluSoftmax();
  enableMixedPrecisionPass({.conversion = {.request = {.lowDtype = core::LowDtype::kFloat16}}});
  const PassActivity before = mixedPrecisionPassActivity();
  runMixedPrecisionPass(graph);
  graph->lint();
  FileCheck()
      .check("torch_mp::record_calibration_inputs(%")
      ->check_same("%x")
      ->check("prim::FallbackGraph")
      ->check_not("aten::to")
      ->run(*graph);
  const PassActivity activity = mixedPrecisionPassActivity();
  EXPECT_EQ(activity.lastOutcome, SkipReason::kCalibrating);
  EXPECT_EQ(activity.calibrating, before.calibrating + 1);
  EXPECT_EQ(activity.converted, before.converted);

  // the fp32 graph the executor will profile, marked for the pass: the marker gives the key the inputs are under
  torch::jit::Node* record = graph->nodes().front()->next();
  ASSERT_EQ(record->kind().toQualString(), std::string("torch_mp::record_calibration_inputs"));
  auto fallback = torch::jit::findAllNodes(*graph, c10::prim::FallbackGraph, false).at(0)->g(c10::attr::Subgraph);
  FileCheck().check("torch_mp::calibration_marker")->check("aten::conv2d")->check_not("prim::profile")->run(
      *fallback);
  const std::optional<int64_t> key = takeCalibrationMarker(*fallback);
  ASSERT_TRUE(key);
  FileCheck().check_not("torch_mp::calibration_marker")->run(*fallback);

  // each run records a copy of its inputs until the pass takes them; then nothing more
  at::Tensor x = torch::randn({1, 3, 8, 8});
  const at::Tensor original = x.clone();
  torch::jit::Stack stack{*torch::jit::toIValue(record->input(0)), x};
  record->getOperation()(stack);
  EXPECT_TRUE(stack.empty());
  x.mul_(2);  // as a graph writing to its input would
  std::vector<torch::jit::Stack> recorded = takeCalibrationInputs(*key);
  ASSERT_EQ(recorded.size(), 1u);
  ASSERT_EQ(recorded[0].size(), 1u);
  EXPECT_TRUE(torch::equal(recorded[0][0].toTensor(), original));
  stack = {*torch::jit::toIValue(record->input(0)), x};
  record->getOperation()(stack);
  EXPECT_TRUE(takeCalibrationInputs(*key).empty());

  // disabling the pass drops what graphs still recording hold: they record nothing more
  auto another = profiledConvReluSoftmax();
  runMixedPrecisionPass(another);
  torch::jit::Node* recordAnother = another->nodes().front()->next();
  auto marked = torch::jit::findAllNodes(*another, c10::prim::FallbackGraph, false).at(0)->g(c10::attr::Subgraph);
  const std::optional<int64_t> anotherKey = takeCalibrationMarker(*marked);
  ASSERT_TRUE(anotherKey);
  stack = {*torch::jit::toIValue(recordAnother->input(0)), x};
  recordAnother->getOperation()(stack);
  disableMixedPrecisionPass();
  stack = {*torch::jit::toIValue(recordAnother->input(0)), x};
  recordAnother->getOperation()(stack);
  EXPECT_TRUE(takeCalibrationInputs(*anotherKey).empty());
}

// Calls through the executor, as a loaded module's forward goes: the first profiles; the second runs the optimized
// graph, which the pass converted, or (calibrating) had record its inputs; the third then runs the converted one.
c10::IValue runCalls(torch::jit::Function& function, const at::Tensor& x, int calls) {
  torch::NoGradGuard noGrad;
  for (int i = 1; i < calls; ++i) {
    function({x});
  }
  return function({x});
}

TEST_F(JitPassTest, ExecutorRunsAFrozenGraphMixedAndAModuleNotFrozenInFp32) {
  auto graph = parseGraph(kConvReluSoftmax);
  const at::Tensor weight = torch::randn({4, 3, 3, 3});
  inlineInputAsConstant(*graph, 1, weight);
  const at::Tensor x = torch::randn({2, 3, 10, 10});
  const at::Tensor expected = runGraph(graph, {x})[0].toTensor();

  for (const bool calibrate : {true, false}) {
    SCOPED_TRACE(calibrate ? "calibrating" : "from the profile");
    enableMixedPrecisionPass({.conversion = {.request = {.lowDtype = core::LowDtype::kBFloat16}}, .calibrate = calibrate});
    torch::jit::GraphFunction frozen("frozen", graph->copy(), nullptr);
    const at::Tensor mixed = runCalls(frozen, x, calibrate ? 3 : 2).toTensor();
    const PassActivity activity = mixedPrecisionPassActivity();
    EXPECT_EQ(activity.lastOutcome, SkipReason::kNone);
    ASSERT_TRUE(activity.lastReport);
    EXPECT_EQ(activity.lastReport->rangesObserved, calibrate);
    ASSERT_TRUE(activity.lastGraph);
    FileCheck().check("prim::TypeCheck")->check("BFloat16(4, 3, 3, 3")->check("aten::conv2d")->run(
        *activity.lastGraph);
    EXPECT_EQ(mixed.scalar_type(), at::kFloat);
    EXPECT_FALSE(torch::equal(mixed, expected));
    EXPECT_TRUE(torch::allclose(mixed, expected, /*rtol=*/0, /*atol=*/2e-2));
  }

  torch::jit::Module module("NotFrozen");
  module.register_parameter("weight", weight, /*is_buffer=*/false);
  module.define(R"(
    def forward(self, x):
        return torch.softmax(torch.relu(torch.conv2d(x, self.weight)), 1)
  )");
  module.eval();
  torch::NoGradGuard noGrad;
  module.forward({x});
  const at::Tensor fp32 = module.forward({x}).toTensor();
  EXPECT_EQ(mixedPrecisionPassActivity().lastOutcome, SkipReason::kNotFrozen);
  EXPECT_TRUE(torch::equal(fp32, expected));
  FileCheck().check_not("aten::to")->check_not("prim::TypeCheck")->run(*torch::jit::lastExecutedOptimizedGraph());
}

} // namespace
} // namespace torch_mp::jit
