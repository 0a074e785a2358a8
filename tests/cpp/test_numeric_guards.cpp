// The numeric guards (numeric_guards): each fires on a number the low dtype cannot carry and names the guard, the
// value, what was seen and the limit; each stays quiet where the number fits, and fp16 and bf16 differ where their
// ranges do.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/classify_node.h"
#include "jit/plan/numeric_guards.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Graph;
using torch::jit::Node;

constexpr const char* kRelu = R"IR(
    graph(%x : Tensor):
      %y : Tensor = aten::relu(%x)
      return (%y))IR";

Node* firstOf(Graph& graph, c10::Symbol kind) {
  for (Node* node : graph.nodes()) {
    if (node->kind() == kind) {
      return node;
    }
  }
  return nullptr;
}

// What the observer would record of %x with this largest magnitude.
ObservedValues observedInput(const Graph& graph, double largest, bool onlyIntegers) {
  ObservedValue seen = observedTensor({4, 4});
  seen.largestMagnitude = largest;
  seen.onlyIntegers = onlyIntegers;
  return {{graph.inputs()[0], seen}};
}

std::optional<core::GuardVerdict> observedGuard(double largest, bool onlyIntegers, c10::ScalarType dtype) {
  auto graph = parseGraph(kRelu);
  const ObservedValues observed = observedInput(*graph, largest, onlyIntegers);
  return NumericGuards(observed, dtype).observedOutOfRange(firstOf(*graph, c10::aten::relu), {});
}

TEST(NumericGuardsTest, ObservedOverflowKeepsAReserveOfOneBinade) {
  const std::optional<core::GuardVerdict> fp16 = observedGuard(40000.0, false, at::kHalf);
  ASSERT_TRUE(fp16);
  EXPECT_EQ(fp16->kind, core::GuardKind::kObservedOverflow);
  EXPECT_EQ(fp16->value, "x");
  EXPECT_EQ(fp16->seen, 40000.0);
  EXPECT_EQ(fp16->limit, 65504.0 / 2);
  EXPECT_FALSE(observedGuard(40000.0, false, at::kBFloat16));
  EXPECT_FALSE(observedGuard(30000.0, false, at::kHalf));
}

TEST(NumericGuardsTest, IntegersTheLowDtypeSkipsKeepFp32) {
  const std::optional<core::GuardVerdict> bf16 = observedGuard(300.0, true, at::kBFloat16);
  ASSERT_TRUE(bf16);
  EXPECT_EQ(bf16->kind, core::GuardKind::kObservedIntegers);
  EXPECT_EQ(bf16->limit, 256.0);
  EXPECT_FALSE(observedGuard(300.0, true, at::kHalf));  // fp16 holds every integer up to 2048
  ASSERT_TRUE(observedGuard(3000.0, true, at::kHalf));
  EXPECT_FALSE(observedGuard(300.0, false, at::kBFloat16));  // fractions: rounding, not skipped integers
  EXPECT_FALSE(observedGuard(3.0e7, true, at::kBFloat16));   // beyond 2^24 every fp32 value is an integer
}

TEST(NumericGuardsTest, Fp16UnderflowBelowTheSmallestNormal) {
  const std::optional<core::GuardVerdict> fp16 = observedGuard(1e-6, false, at::kHalf);
  ASSERT_TRUE(fp16);
  EXPECT_EQ(fp16->kind, core::GuardKind::kObservedTiny);
  EXPECT_EQ(fp16->limit, std::ldexp(1.0, -14));
  EXPECT_FALSE(observedGuard(1e-6, false, at::kBFloat16));  // bf16 has fp32's exponent range
  EXPECT_FALSE(observedGuard(0.0, false, at::kHalf));       // all zeros lose nothing
}

TEST(NumericGuardsTest, ConstantBeyondTheLowDtypesMax) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %mask : Tensor):
      %one : int = prim::Constant[value=1]()
      %y : Tensor = aten::add(%x, %mask, %one)
      return (%y))IR");
  inlineInputAsConstant(*graph, 1, torch::full({4}, -1e9));
  const ObservedValues observed = observedInput(*graph, 1.0, false);
  Node* add = firstOf(*graph, c10::aten::add);
  NumericGuards fp16(observed, at::kHalf);
  const std::optional<core::GuardVerdict> verdict = fp16.constantOutOfRange(add);
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->kind, core::GuardKind::kConstantRange);
  EXPECT_EQ(verdict->seen, 1e9);
  EXPECT_EQ(verdict->limit, 65504.0);
  EXPECT_FALSE(NumericGuards(observed, at::kBFloat16).constantOutOfRange(add));

  auto lowest = parseGraph(R"IR(
    graph(%x : Tensor, %mask : Tensor):
      %one : int = prim::Constant[value=1]()
      %y : Tensor = aten::add(%x, %mask, %one)
      return (%y))IR");
  inlineInputAsConstant(*lowest, 1, torch::full({4}, std::numeric_limits<float>::lowest()));
  const ObservedValues lowestObserved = observedInput(*lowest, 1.0, false);
  EXPECT_TRUE(NumericGuards(lowestObserved, at::kBFloat16).constantOutOfRange(firstOf(*lowest, c10::aten::add)));
}

TEST(NumericGuardsTest, ScalarRoundedAwayInTheLowDtype) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      %eps : float = prim::Constant[value=1e-08]()
      %half : float = prim::Constant[value=0.5]()
      %none : NoneType = prim::Constant()
      %c : Tensor = aten::clamp(%x, %eps, %none)
      %d : Tensor = aten::clamp(%x, %half, %none)
      return (%c, %d))IR");
  const ObservedValues observed = observedInput(*graph, 1.0, false);
  std::vector<Node*> clamps;
  for (Node* node : graph->nodes()) {
    if (node->kind() == c10::aten::clamp) {
      clamps.push_back(node);
    }
  }
  ASSERT_EQ(clamps.size(), 2u);
  const std::optional<core::GuardVerdict> fp16 = NumericGuards(observed, at::kHalf).scalarLostInLowDtype(clamps[0]);
  ASSERT_TRUE(fp16);
  EXPECT_EQ(fp16->kind, core::GuardKind::kLostScalar);
  EXPECT_EQ(fp16->value, clamps[0]->input(1)->debugName());
  EXPECT_EQ(fp16->seen, 1e-8);
  EXPECT_EQ(fp16->limit, 0.0);  // what 1e-8 becomes in fp16
  EXPECT_FALSE(NumericGuards(observed, at::kBFloat16).scalarLostInLowDtype(clamps[0]));
  EXPECT_FALSE(NumericGuards(observed, at::kHalf).scalarLostInLowDtype(clamps[1]));
}

// F.normalize as TorchScript writes it: the clamped norm, expanded, divides.
constexpr const char* kNormalize = R"IR(
    graph(%x : Tensor):
      %eps : float = prim::Constant[value=9.9999999999999998e-13]()
      %two : float = prim::Constant[value=2.]()
      %dims : int[] = prim::Constant[value=[-1]]()
      %true : bool = prim::Constant[value=1]()
      %n : Tensor = aten::norm(%x, %two, %dims, %true)
      %c : Tensor = aten::clamp_min(%n, %eps)
      %d : Tensor = aten::expand_as(%c, %x)
      %y : Tensor = aten::div(%x, %d)
      return (%y))IR";

// The observation of every non-constant value: fp32, with this smallest non-zero magnitude.
ObservedValues observedAll(const Graph& graph, double smallest) {
  ObservedValues observed;
  ObservedValue seen = observedTensor({4, 4});
  seen.largestMagnitude = 1.0;
  seen.smallestMagnitude = smallest;
  observed.emplace(graph.inputs()[0], seen);
  for (const Node* node : graph.nodes()) {
    if (node->kind() != c10::prim::Constant) {
      observed.emplace(node->output(), seen);
    }
  }
  return observed;
}

TEST(NumericGuardsTest, ADivisorFromATinyScalarKeepsItsPathFp32) {
  auto graph = parseGraph(kNormalize);
  const ObservedValues observed = observedAll(*graph, 0.5);  // the values seen were all large: the scalar decides
  NumericGuards fp16(observed, at::kHalf);
  for (c10::Symbol kind : {c10::aten::div, c10::aten::expand_as, c10::aten::clamp_min}) {
    const std::optional<core::GuardVerdict> verdict = fp16.underflowToZero(firstOf(*graph, kind));
    ASSERT_TRUE(verdict) << kind.toQualString();
    EXPECT_EQ(verdict->kind, core::GuardKind::kUnderflowToZero);
    // the clamped norm, which the expansion only views
    EXPECT_EQ(verdict->value, firstOf(*graph, c10::aten::clamp_min)->output()->debugName());
    EXPECT_EQ(verdict->seen, 9.9999999999999998e-13);
    EXPECT_EQ(verdict->limit, std::ldexp(1.0, -24));
  }
  EXPECT_FALSE(fp16.underflowToZero(firstOf(*graph, c10::aten::norm)));  // a 0 norm is clamped: no 0 reaches div
  // bf16 holds 1e-12
  EXPECT_FALSE(NumericGuards(observed, at::kBFloat16).underflowToZero(firstOf(*graph, c10::aten::div)));
}

TEST(NumericGuardsTest, ObservedTinyDivisorsFireAndComfortableOnesDoNot) {
  constexpr const char* kDivide = R"IR(
    graph(%x : Tensor, %s : Tensor):
      %e : Tensor = aten::exp(%s)
      %y : Tensor = aten::div(%x, %e)
      %r : Tensor = aten::rsqrt(%e)
      %z : Tensor = aten::mul(%y, %r)
      return (%z))IR";
  auto graph = parseGraph(kDivide);
  const ObservedValues tiny = observedAll(*graph, 1e-9);
  NumericGuards fp16(tiny, at::kHalf);
  for (c10::Symbol kind : {c10::aten::div, c10::aten::rsqrt, c10::aten::exp}) {
    const std::optional<core::GuardVerdict> verdict = fp16.underflowToZero(firstOf(*graph, kind));
    ASSERT_TRUE(verdict) << kind.toQualString();
    EXPECT_EQ(verdict->value, firstOf(*graph, c10::aten::exp)->output()->debugName());
    EXPECT_EQ(verdict->seen, 1e-9);
  }
  EXPECT_FALSE(fp16.underflowToZero(firstOf(*graph, c10::aten::mul)));  // a product of a 0 is no inf

  const ObservedValues comfortable = observedAll(*graph, 1e-3);
  NumericGuards inRange(comfortable, at::kHalf);
  EXPECT_FALSE(inRange.underflowToZero(firstOf(*graph, c10::aten::div)));
  EXPECT_FALSE(inRange.underflowToZero(firstOf(*graph, c10::aten::rsqrt)));
  // below fp16's smallest normal but above its smallest subnormal: rounded, never 0
  EXPECT_FALSE(NumericGuards(observedAll(*graph, 1e-6), at::kHalf).underflowToZero(firstOf(*graph, c10::aten::div)));
}

TEST(NumericGuardsTest, AConstantDivisorBelowTheSmallestNumberFires) {
  auto graphDividingBy = [](double scale) {
    auto graph = parseGraph(R"IR(
      graph(%x : Tensor, %scale : Tensor):
        %y : Tensor = aten::div(%x, %scale)
        return (%y))IR");
    inlineInputAsConstant(*graph, 1, torch::full({4}, scale));
    return graph;
  };
  auto tiny = graphDividingBy(1e-9);
  const std::optional<core::GuardVerdict> verdict =
      NumericGuards(observedInput(*tiny, 1.0, false), at::kHalf).underflowToZero(firstOf(*tiny, c10::aten::div));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->kind, core::GuardKind::kUnderflowToZero);
  EXPECT_FLOAT_EQ(verdict->seen, 1e-9);
  auto held = graphDividingBy(1e-3);
  EXPECT_FALSE(
      NumericGuards(observedInput(*held, 1.0, false), at::kHalf).underflowToZero(firstOf(*held, c10::aten::div)));
}

TEST(NumericGuardsTest, OnlyANegativePowerIsSensitiveToZero) {
  constexpr const char* kPowers = R"IR(
    graph(%x : Tensor):
      %minus : float = prim::Constant[value=-0.5]()
      %plus : float = prim::Constant[value=2.]()
      %e : Tensor = aten::exp(%x)
      %a : Tensor = aten::pow(%e, %minus)
      %f : Tensor = aten::exp(%x)
      %b : Tensor = aten::pow(%f, %plus)
      return (%a, %b))IR";
  auto graph = parseGraph(kPowers);
  const ObservedValues tiny = observedAll(*graph, 1e-9);
  NumericGuards fp16(tiny, at::kHalf);
  std::vector<Node*> powers;
  for (Node* node : graph->nodes()) {
    if (node->kind() == c10::aten::pow) {
      powers.push_back(node);
    }
  }
  ASSERT_EQ(powers.size(), 2u);
  EXPECT_TRUE(fp16.underflowToZero(powers[0]));
  EXPECT_FALSE(fp16.underflowToZero(powers[1]));
}

TEST(NumericGuardsTest, DescribeNamesTheGuardTheValueAndTheLimit) {
  const core::GuardVerdict verdict{core::GuardKind::kUnderflowToZero, "c", 1e-12, std::ldexp(1.0, -24)};
  EXPECT_EQ(core::describeGuard(verdict, core::LowDtype::kFloat16),
            "range guard: %c can be as small as 1e-12, below float16's smallest number 5.96e-08, and reaches an "
            "input where 0 gives inf or NaN (a divisor, rsqrt, log, a negative power), so the node keeps fp32");
}

} // namespace
} // namespace torch_mp::jit
