// The observer (jit/prepare/value_observer) on its own: what one run records per value (dtype, sizes, the largest finite
// magnitude, integrality), what calibration runs add, what is never seen, what is completed statically, and that the
// caller's inputs are not touched.
#include <gtest/gtest.h>

#include <torch/csrc/jit/ir/irparser.h>

#include <limits>
#include <unordered_map>

#include "jit/ir/tensor_statistics.h"
#include "jit/prepare/value_observer.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

// A graph from IR and its values by the names the IR gives them.
struct NamedGraph {
  std::shared_ptr<torch::jit::Graph> graph;
  std::unordered_map<std::string, torch::jit::Value*> values;
};

NamedGraph parseNamed(const std::string& ir) {
  NamedGraph parsed{std::make_shared<torch::jit::Graph>(), {}};
  torch::jit::parseIR(ir, parsed.graph.get(), parsed.values);
  return parsed;
}

TEST(ValueObserverTest, RecordsDtypeSizesMagnitudeAndIntegralityPerValue) {
  auto [graph, named] = parseNamed(R"IR(
    graph(%x : Tensor, %i : Tensor):
      %big : float = prim::Constant[value=1000.]()
      %y : Tensor = aten::mul(%x, %big)
      %r : Tensor = aten::round(%y)
      %s : Tensor = aten::mul(%i, %i)
      return (%y, %r, %s))IR");
  const at::Tensor x = torch::tensor({{0.5f, -2.25f, 1.0f}, {3.0f, 0.1234f, -0.75f}});
  const Observation observation = observeValues(graph, {x, torch::arange(6).reshape({2, 3})});
  const ObservedValue& y = observation.values.at(named.at("y"));
  EXPECT_TRUE(y.isTensor);
  EXPECT_EQ(y.dtype, at::kFloat);
  EXPECT_EQ(y.sizes, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(y.numel, 6);
  EXPECT_DOUBLE_EQ(y.largestMagnitude, 3000.0);
  EXPECT_FALSE(y.onlyIntegers);  // 123.4 among values beyond 256
  EXPECT_TRUE(y.rangeObserved);
  const ObservedValue& r = observation.values.at(named.at("r"));
  EXPECT_TRUE(r.onlyIntegers);
  const ObservedValue& s = observation.values.at(named.at("s"));
  EXPECT_EQ(s.dtype, at::kLong);
  EXPECT_EQ(s.sizes, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(observation.outputs.size(), 3u);
  EXPECT_TRUE(observation.outputs[0].toTensor().equal(x * 1000));
}

// prim::Uninitialized is one of the interpreter's own cases: the graph runs as an instrumented copy in Code, and
// records the same as GraphRunner's run of the graph without it.
TEST(ValueObserverTest, AGraphLeftToTheInterpreterRecordsWhatGraphRunnerRecords) {
  const std::string body = R"IR(
      %big : float = prim::Constant[value=1000.]()
      %y : Tensor = aten::mul(%x, %big)
      %r : Tensor = aten::round(%y)
      %n : Tensor = aten::mul(%i, %i)
      %s : Tensor = aten::sum(%n, %none)
)IR";
  auto [runnable, runnableValues] = parseNamed(
      "graph(%x : Tensor, %i : Tensor):\n      %none : NoneType = prim::Constant()" + body +
      "      return (%y, %r, %s)");
  auto [interpreted, interpretedValues] = parseNamed(
      "graph(%x : Tensor, %i : Tensor):\n      %none : NoneType = prim::Constant()\n"
      "      %u : Tensor = prim::Uninitialized()" + body + "      return (%y, %r, %s, %u)");
  const at::Tensor x = torch::randn({4, 3}) * 100;
  const at::Tensor i = torch::arange(12).reshape({4, 3});
  const Observation byRunner = observeValues(runnable, {x, i});
  const Observation byInterpreter = observeValues(interpreted, {x, i});
  for (const char* name : {"x", "i", "y", "r", "n", "s"}) {
    SCOPED_TRACE(name);
    const ObservedValue& a = byRunner.values.at(runnableValues.at(name));
    const ObservedValue& b = byInterpreter.values.at(interpretedValues.at(name));
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.sizes, b.sizes);
    EXPECT_EQ(a.numel, b.numel);
    EXPECT_EQ(a.largestMagnitude, b.largestMagnitude);
    EXPECT_EQ(a.onlyIntegers, b.onlyIntegers);
  }
  EXPECT_EQ(byRunner.values.size() + 1, byInterpreter.values.size());  // and %u, which held no tensor
  EXPECT_TRUE(byRunner.outputs[0].toTensor().equal(byInterpreter.outputs[0].toTensor()));
}

TEST(ValueObserverTest, CalibrationRunsKeepTheLargestSizesAndMagnitudes) {
  auto [graph, named] = parseNamed(R"IR(
    graph(%x : Tensor):
      %r : Tensor = aten::relu(%x)
      return (%r))IR");
  const Observation observation = observeValues(
      graph, {torch::full({2, 2}, 1.5f)}, {{torch::full({4, 2}, 7.0f)}, {torch::full({1, 2}, -9.0f)}});
  const ObservedValue& r = observation.values.at(named.at("r"));
  EXPECT_EQ(r.numel, 8);
  EXPECT_EQ(r.sizes, (std::vector<int64_t>{4, 2}));
  EXPECT_DOUBLE_EQ(r.largestMagnitude, 7.0);
  const ObservedValue& x = observation.values.at(graph->inputs()[0]);
  EXPECT_DOUBLE_EQ(x.largestMagnitude, 9.0);
  EXPECT_TRUE(observation.outputs[0].toTensor().equal(torch::full({2, 2}, 1.5f)));  // the example inputs' run
}

TEST(ValueObserverTest, InfinitiesAndNanDoNotCountAsMagnitudes) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      %r : Tensor = aten::relu(%x)
      return (%r))IR");
  const float inf = std::numeric_limits<float>::infinity();
  const Observation observation =
      observeValues(graph, {torch::tensor({2.0f, inf, -5.0f, std::numeric_limits<float>::quiet_NaN()})});
  EXPECT_DOUBLE_EQ(observation.values.at(graph->inputs()[0]).largestMagnitude, 5.0);
  EXPECT_DOUBLE_EQ(largestFiniteMagnitude(torch::full({5000}, -inf)), 0.0);
  EXPECT_DOUBLE_EQ(largestFiniteMagnitude(torch::empty({0})), 0.0);
}

TEST(ValueObserverTest, TensorStatisticsAreWhatBothFrontsObserve) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const TensorStatistics mixed = tensorStatistics(torch::tensor({0.0f, -3e-8f, 300.0f, inf, -2.5f}), true);
  EXPECT_DOUBLE_EQ(mixed.magnitudes.largest, 300.0);
  EXPECT_DOUBLE_EQ(mixed.magnitudes.smallest, static_cast<double>(3e-8f));  // zeros do not count
  EXPECT_FALSE(mixed.magnitudes.allFinite);
  EXPECT_FALSE(mixed.onlyIntegers);  // -2.5, above the integer check's magnitude
  EXPECT_TRUE(tensorStatistics(torch::tensor({1.0f, -4096.0f, 0.0f}), true).onlyIntegers);
  EXPECT_FALSE(tensorStatistics(torch::tensor({1000.0f, nan}), true).onlyIntegers);  // NaN is no integer
  EXPECT_TRUE(tensorStatistics(torch::tensor({1000.5f}), false).onlyIntegers);  // not asked: not checked
  EXPECT_TRUE(tensorStatistics(torch::tensor({200.5f}), true).onlyIntegers);  // below 256: not checked
  const TensorStatistics none = tensorStatistics(torch::zeros({3}), true);
  EXPECT_DOUBLE_EQ(none.magnitudes.largest, 0.0);
  EXPECT_EQ(none.magnitudes.smallest, inf);
}

// The one-pass scan (16 lanes on the bits, AVX2 where the CPU has it) against ATen's reductions, at lengths below,
// at and past a lane block and a parallel chunk, with zeros, negative zeros, subnormals, inf and NaN mixed in.
TEST(ValueObserverTest, FiniteMagnitudesEqualATensReductionsAtEveryLength) {
  torch::manual_seed(0);
  const float specials[] = {0.0f, -0.0f, 1e-40f, -3e-39f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::max(), -1e-30f};
  for (int64_t length : {1, 7, 15, 16, 17, 33, 1000, 65536, 65537, 200000}) {
    for (int withSpecials = 0; withSpecials < 2; ++withSpecials) {
      at::Tensor values = torch::randn({length}) * torch::exp(torch::randn({length}) * 20);
      if (withSpecials) {
        for (int64_t i = 0; i < length; i += 5) {
          values[i] = specials[(i / 5) % 9];
        }
      }
      const at::Tensor magnitude = values.abs();
      const at::Tensor finite = torch::isfinite(values);
      const at::Tensor finiteMagnitude = torch::where(finite, magnitude, torch::zeros_like(magnitude));
      const at::Tensor nonZero = torch::where(finite & (magnitude > 0), magnitude,
                                              torch::full_like(magnitude, std::numeric_limits<float>::infinity()));
      const FiniteMagnitudes seen = finiteMagnitudes(values);
      EXPECT_EQ(seen.largest, finiteMagnitude.max().item<double>()) << length;
      EXPECT_EQ(seen.smallest, nonZero.min().item<double>()) << length;
      EXPECT_EQ(seen.allFinite, finite.all().item<bool>()) << length;
    }
  }
}

TEST(ValueObserverTest, ABranchNotTakenIsNotSeenAndItsViewsAreCompletedStatically) {
  auto [graph, named] = parseNamed(R"IR(
    graph(%x : Tensor, %c : bool):
      %zero : int = prim::Constant[value=0]()
      %y : Tensor = prim::If(%c)
        block0():
          %u : Tensor = aten::unsqueeze(%x, %zero)
          -> (%u)
        block1():
          %e : Tensor = aten::exp(%x)
          -> (%e)
      return (%y))IR");
  ObservedValues observed = observeValues(graph, {torch::randn({3}), false}).values;
  const torch::jit::Value* u = named.at("u");
  const torch::jit::Node* branch = graph->outputs()[0]->node();
  EXPECT_FALSE(observed.count(u));
  EXPECT_TRUE(observed.count(named.at("e")));
  EXPECT_FALSE(blockRan(branch->blocks()[0], observed));
  EXPECT_TRUE(blockRan(branch->blocks()[1], observed));
  EXPECT_TRUE(blockRan(graph->block(), observed));
  EXPECT_EQ(inferUnreachedDtypes(graph, observed), 1);  // the view of a known tensor; exp might change dtypes
  ASSERT_TRUE(observed.count(u));
  EXPECT_TRUE(observed.at(u).inferred);
  EXPECT_EQ(observed.at(u).dtype, at::kFloat);
  EXPECT_EQ(observed.at(u).numel, 0);  // never ran: moves no bytes
  EXPECT_FALSE(blockRan(branch->blocks()[0], observed));  // inferred values do not make a block ran
}

// InstanceNorm's shape: a branch for unbatched input squeezes. Only a squeeze the inputs ran makes ranks vary.
constexpr const char* kSqueezeInOneBranch = R"IR(
    graph(%x : Tensor, %c : bool):
      %zero : int = prim::Constant[value=0]()
      %y : Tensor = prim::If(%c)
        block0():
          %u : Tensor = aten::unsqueeze(%x, %zero)
          %s : Tensor = aten::squeeze(%u, %zero)
          -> (%s)
        block1():
          %e : Tensor = aten::exp(%x)
          -> (%e)
      %z : Tensor = aten::relu(%y)
      return (%z))IR";

TEST(ValueObserverTest, ASqueezeInABranchNotTakenLeavesRanksAsObserved) {
  auto [graph, named] = parseNamed(kSqueezeInOneBranch);
  const ObservedValues observed = observeValues(graph, {torch::randn({3}), false}).values;
  EXPECT_TRUE(valuesOfInputDependentRank(graph->block(), observed).empty());
}

TEST(ValueObserverTest, ASqueezeTheInputsRanMakesEverythingAfterItVary) {
  auto [graph, named] = parseNamed(kSqueezeInOneBranch);
  const ObservedValues observed = observeValues(graph, {torch::randn({3}), true}).values;
  const auto varying = valuesOfInputDependentRank(graph->block(), observed);
  EXPECT_TRUE(varying.count(named.at("s")) && varying.count(named.at("y")) && varying.count(named.at("z")));
  EXPECT_FALSE(varying.count(named.at("u")) || varying.count(named.at("e")));
}

TEST(ValueObserverTest, TheCallersInputsAreNotTouched) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      %one : int = prim::Constant[value=1]()
      %w : Tensor = aten::add_(%x, %x, %one)
      return (%w))IR");
  const at::Tensor x = torch::ones({3});
  const Observation observation = observeValues(graph, {x});
  EXPECT_TRUE(x.equal(torch::ones({3})));
  EXPECT_TRUE(observation.outputs[0].toTensor().equal(torch::full({3}, 2.0f)));
}

} // namespace
} // namespace torch_mp::jit
