// The numeric guards (numeric_guards): each fires on a number the low dtype cannot carry and names the value, what
// was seen and the limit; each stays quiet where the number fits, and fp16 and bf16 differ where their ranges do.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "jit/numeric_guards.h"
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

std::optional<GuardVerdict> observedGuard(double largest, bool onlyIntegers, c10::ScalarType dtype) {
  auto graph = parseGraph(kRelu);
  const ObservedValues observed = observedInput(*graph, largest, onlyIntegers);
  return NumericGuards(observed, dtype).observedOutOfRange(firstOf(*graph, c10::aten::relu), {});
}

TEST(NumericGuardsTest, ObservedOverflowKeepsAReserveOfOneBinade) {
  const std::optional<GuardVerdict> fp16 = observedGuard(40000.0, false, at::kHalf);
  ASSERT_TRUE(fp16);
  EXPECT_EQ(fp16->value->debugName(), "x");
  EXPECT_EQ(fp16->seen, 40000.0);
  EXPECT_EQ(fp16->limit, 65504.0 / 2);
  EXPECT_NE(fp16->reason.find("range guard: %x observed up to 4e+04, above half of float16's max"),
            std::string::npos)
      << fp16->reason;
  EXPECT_FALSE(observedGuard(40000.0, false, at::kBFloat16));
  EXPECT_FALSE(observedGuard(30000.0, false, at::kHalf));
}

TEST(NumericGuardsTest, IntegersTheLowDtypeSkipsKeepFp32) {
  const std::optional<GuardVerdict> bf16 = observedGuard(300.0, true, at::kBFloat16);
  ASSERT_TRUE(bf16);
  EXPECT_EQ(bf16->limit, 256.0);
  EXPECT_FALSE(observedGuard(300.0, true, at::kHalf));  // fp16 holds every integer up to 2048
  ASSERT_TRUE(observedGuard(3000.0, true, at::kHalf));
  EXPECT_FALSE(observedGuard(300.0, false, at::kBFloat16));  // fractions: rounding, not skipped integers
  EXPECT_FALSE(observedGuard(3.0e7, true, at::kBFloat16));   // beyond 2^24 every fp32 value is an integer
}

TEST(NumericGuardsTest, Fp16UnderflowBelowTheSmallestNormal) {
  const std::optional<GuardVerdict> fp16 = observedGuard(1e-6, false, at::kHalf);
  ASSERT_TRUE(fp16);
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
  const std::optional<GuardVerdict> verdict = fp16.constantOutOfRange(add);
  ASSERT_TRUE(verdict);
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
  const std::optional<GuardVerdict> fp16 = NumericGuards(observed, at::kHalf).scalarLostInLowDtype(clamps[0]);
  ASSERT_TRUE(fp16);
  EXPECT_EQ(fp16->limit, 0.0);  // what 1e-8 becomes in fp16
  EXPECT_NE(fp16->reason.find("becomes 0 in float16"), std::string::npos) << fp16->reason;
  EXPECT_FALSE(NumericGuards(observed, at::kBFloat16).scalarLostInLowDtype(clamps[0]));
  EXPECT_FALSE(NumericGuards(observed, at::kHalf).scalarLostInLowDtype(clamps[1]));
}

} // namespace
} // namespace torch_mp::jit
