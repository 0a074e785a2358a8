// core::underflowToZero on a graph's IR-free view: a value reaching a divisor keeps the reader, the views between and
// its producer fp32 where it (or a scalar its producer reads) can be below the low dtype's smallest number; not where
// it cannot, nor for a pow whose exponent is not negative.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/underflow_to_zero.h"

namespace torch_mp::core {
namespace {

constexpr double kNone = std::numeric_limits<double>::infinity();

// x -> %n = clamp_min(x, eps) -> %v = view(%n) -> div(y, %v); y and x are graph inputs
struct Normalize {
  std::vector<GraphViewNode> nodes{{"aten::clamp_min", {0}, {}}, {"aten::view", {1}, {}}, {"aten::div", {3, 2}, {}}};
  std::vector<GraphViewValue> values{{"x", -1}, {"n", 0}, {"v", 1}, {"y", -1}};
};

TEST(UnderflowToZeroTest, AValueThatCanBeTooSmallKeepsItsPathToTheDivisorFp32) {
  Normalize graph;
  graph.nodes[0].floatScalars = {1e-12};  // F.normalize's eps: 0 in fp16
  const auto verdicts = underflowToZero(graph.nodes, graph.values, [](int) { return 1.0; }, LowDtype::kFloat16);
  ASSERT_EQ(verdicts.size(), 3u);
  for (int node : {0, 1, 2}) {
    EXPECT_EQ(verdicts.at(node).kind, GuardKind::kUnderflowToZero);
    EXPECT_EQ(verdicts.at(node).value, "n");
    EXPECT_EQ(verdicts.at(node).seen, 1e-12);
  }
  // in bf16 1e-12 is a number (its smallest is 1.18e-38): nothing fires
  EXPECT_TRUE(underflowToZero(graph.nodes, graph.values, [](int) { return 1.0; }, LowDtype::kBFloat16).empty());
}

TEST(UnderflowToZeroTest, ObservedMagnitudesAlongTheViewsCountAndTheDividendDoesNot) {
  Normalize graph;
  // the view's value was observed as small as 1e-9; the dividend y as small as 1e-30 (it is not the divisor)
  const auto small = [](int value) { return value == 2 ? 1e-9 : value == 3 ? 1e-30 : 1.0; };
  const auto verdicts = underflowToZero(graph.nodes, graph.values, small, LowDtype::kFloat16);
  ASSERT_EQ(verdicts.size(), 3u);
  EXPECT_EQ(verdicts.at(2).seen, 1e-9);
  EXPECT_TRUE(underflowToZero(graph.nodes, graph.values, [](int value) { return value == 3 ? 1e-30 : kNone; },
                              LowDtype::kFloat16)
                  .empty());
}

TEST(UnderflowToZeroTest, APowerCountsOnlyWithAnExponentThatMayBeNegative) {
  std::vector<GraphViewNode> nodes{{"aten::pow", {0, -1}, {}, true}};
  const std::vector<GraphViewValue> values{{"x", -1}};
  EXPECT_EQ(underflowToZero(nodes, values, [](int) { return 1e-10; }, LowDtype::kFloat16).size(), 1u);
  nodes[0].exponentMayBeNegative = false;
  EXPECT_TRUE(underflowToZero(nodes, values, [](int) { return 1e-10; }, LowDtype::kFloat16).empty());
  // a graph input read directly: the reader alone keeps fp32
  nodes.push_back({"aten::rsqrt", {0}, {}});
  const auto verdicts = underflowToZero(nodes, values, [](int) { return 1e-10; }, LowDtype::kFloat16);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts.begin()->first, 1);
}

} // namespace
} // namespace torch_mp::core
