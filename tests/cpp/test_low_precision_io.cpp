// LowerGraphIO (jit/rewrite/low_precision_io) on its own: fp32 tensor inputs arrive low and are cast up once inside, fp32
// outputs (and tuples the graph builds) leave low, every cast from the ledger; anything else keeps its dtype.
#include <gtest/gtest.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "jit/rewrite/low_precision_io.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

int ledgerCasts(const torch::jit::Graph& graph) {
  int count = 0;
  for (const torch::jit::Node* node : graph.nodes()) {
    count += CastLedger::created(node);
  }
  return count;
}

TEST(LowPrecisionIOTest, Fp32InputsAndOutputsTakeTheLowDtypeAndIntegersKeepTheirs) {
  auto graph = parseGraph(R"IR(
    graph(%x : Float(2, 3, strides=[3, 1], device=cpu), %i : Long(2, strides=[1], device=cpu)):
      %one : int = prim::Constant[value=1]()
      %r : Float(2, 3, strides=[3, 1], device=cpu) = aten::relu(%x)
      %j : Long(2, strides=[1], device=cpu) = aten::add(%i, %i, %one)
      %t : (Tensor, Tensor) = prim::TupleConstruct(%r, %j)
      return (%r, %t))IR");
  const ObservedValues observed;
  CastLedger ledger(observed);
  EXPECT_TRUE(LowerGraphIO(graph, at::kHalf, ledger));
  graph->lint();
  EXPECT_EQ(recordedDtype(graph->inputs()[0]), at::kHalf);
  EXPECT_EQ(recordedDtype(graph->inputs()[1]), at::kLong);
  // %x cast up once for its readers; %r cast down once per place it leaves (top level, in the rebuilt tuple)
  FileCheck()
      .check("Float(2, 3, strides=[3, 1], device=cpu) = aten::to[torch_mp_cast=1](%x, ")->check("aten::relu(")
      ->check_count("Half(2, 3, strides=[3, 1], device=cpu) = aten::to[torch_mp_cast=1](", 2, /*exactly=*/true)
      ->check("prim::TupleConstruct")
      ->run(*graph);
  EXPECT_EQ(ledgerCasts(*graph), 3);
  const at::Tensor x = torch::randn({2, 3});
  const auto outputs = runGraph(graph, {lowerInputValue(x, at::kHalf), lowerInputValue(torch::arange(2), at::kHalf)});
  EXPECT_EQ(outputs[0].toTensor().scalar_type(), at::kHalf);
  const auto& tuple = outputs[1].toTupleRef().elements();
  EXPECT_EQ(tuple[0].toTensor().scalar_type(), at::kHalf);
  EXPECT_EQ(tuple[1].toTensor().scalar_type(), at::kLong);
  EXPECT_TRUE(outputs[0].toTensor().equal(torch::relu(x.to(at::kHalf))));
}

TEST(LowPrecisionIOTest, AGraphWithoutFp32InputsOrOutputsIsLeftAlone) {
  auto graph = parseGraph(R"IR(
    graph(%i : Long(2, strides=[1], device=cpu), %h : Half(2, strides=[1], device=cpu)):
      %one : int = prim::Constant[value=1]()
      %j : Long(2, strides=[1], device=cpu) = aten::add(%i, %i, %one)
      return (%j, %h))IR");
  const std::string before = graph->toString();
  const ObservedValues observed;
  CastLedger ledger(observed);
  EXPECT_FALSE(LowerGraphIO(graph, at::kBFloat16, ledger));
  EXPECT_EQ(graph->toString(), before);
}

TEST(LowPrecisionIOTest, InputValuesAreLoweredOnlyWhenTheyAreFp32Tensors) {
  EXPECT_EQ(lowerInputValue(torch::ones({2}), at::kBFloat16).toTensor().scalar_type(), at::kBFloat16);
  EXPECT_EQ(lowerInputValue(torch::ones({2}, at::kDouble), at::kHalf).toTensor().scalar_type(), at::kDouble);
  EXPECT_EQ(lowerInputValue(c10::IValue(3), at::kHalf).toInt(), 3);
  EXPECT_FALSE(lowerInputValue(at::Tensor(), at::kHalf).toTensor().defined());
}

} // namespace
} // namespace torch_mp::jit
