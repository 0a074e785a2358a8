// verifyOutputDtypes (jit/report/verify_outputs): a converted graph whose outputs, nested ones included, keep the fp32
// graph's dtypes passes; one that returns another dtype anywhere is an internal error; the caller's inputs stay.
// verifyConvertedOutputs: the first run with an output, or else an observed intermediate, that turned NaN or inf where
// fp32's is finite; non-finite values fp32 had too pass.
#include <gtest/gtest.h>

#include "jit/report/verify_outputs.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

// Returns (%x relu'd, (%x cast to `dtype`, %i)): the tuple's first element has the dtype the IR asks for.
std::shared_ptr<torch::jit::Graph> nestedOutputs(int dtype) {
  return parseGraph(R"IR(
    graph(%x : Tensor, %i : Tensor):
      %dtype : int = prim::Constant[value=)IR" + std::to_string(dtype) + R"IR(]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %r : Tensor = aten::relu(%x)
      %c : Tensor = aten::to(%x, %dtype, %false, %false, %none)
      %t : (Tensor, Tensor) = prim::TupleConstruct(%c, %i)
      return (%r, %t))IR");
}

TEST(VerifyOutputsTest, SameDtypesEverywherePass) {
  const std::vector<c10::IValue> inputs{torch::randn({3}), torch::arange(3)};
  const auto expected = runGraph(nestedOutputs(6), inputs);
  EXPECT_NO_THROW(verifyOutputDtypes(nestedOutputs(6), inputs, expected));
}

TEST(VerifyOutputsTest, ANestedOutputOfAnotherDtypeIsAnInternalError) {
  const std::vector<c10::IValue> inputs{torch::randn({3}), torch::arange(3)};
  const auto expected = runGraph(nestedOutputs(6), inputs);
  try {
    verifyOutputDtypes(nestedOutputs(5), inputs, expected);
    FAIL() << "a Half output where the fp32 graph returned Float must not pass";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("converted outputs have dtypes Float;(Half,Long,); instead of "
                                             "Float;(Float,Long,);"),
              std::string::npos)
        << error.what();
  }
}

TEST(VerifyOutputsTest, WithLowPrecisionIOTheLowDtypeStandsForFloat) {
  const std::vector<c10::IValue> inputs{torch::randn({3}), torch::arange(3)};
  const auto expected = runGraph(nestedOutputs(6), inputs);
  EXPECT_NO_THROW(verifyOutputDtypes(nestedOutputs(5), inputs, expected, at::kHalf));
  EXPECT_THROW(verifyOutputDtypes(nestedOutputs(15), inputs, expected, at::kHalf), c10::Error);
}

TEST(VerifyOutputsTest, TheCallersInputsAreNotWritten) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      %one : int = prim::Constant[value=1]()
      %w : Tensor = aten::add_(%x, %x, %one)
      return (%w))IR");
  const at::Tensor x = torch::ones({2});
  verifyOutputDtypes(graph, {x}, {torch::ones({2})});
  EXPECT_TRUE(x.equal(torch::ones({2})));
}

// 1 / (x - x * 1.0001): the "converted" graph rounds the factor away (1.0), as fp16 would, and divides by 0.
constexpr const char* kQuotient = R"IR(
    graph(%x : Tensor):
      %factor : float = prim::Constant[value=)IR";
constexpr const char* kQuotientTail = R"IR(]()
      %one : int = prim::Constant[value=1]()
      %scaled : Tensor = aten::mul(%x, %factor)
      %difference : Tensor = aten::sub(%x, %scaled, %one)
      %quotient : Tensor = aten::reciprocal(%difference)
      %clamped : Tensor = aten::clamp(%quotient, %one, %one)
      return (%quotient, %clamped))IR";

std::shared_ptr<torch::jit::Graph> quotient(const std::string& factor, bool returnQuotient = true) {
  std::string ir = std::string(kQuotient) + factor + kQuotientTail;
  if (!returnQuotient) {
    ir.replace(ir.find("return (%quotient, %clamped)"), 28, "return (%clamped)");
  }
  return parseGraph(ir);
}

TEST(VerifyOutputsTest, AnOutputTurnedNonFiniteIsFoundWithItsRun) {
  const torch::jit::Stack calm{torch::ones({4})};
  const torch::jit::Stack zeros{torch::zeros({4}) + 2};
  auto fp32 = quotient("1.0001");
  const Observation observation = observeValues(fp32, calm, {zeros});
  auto converted = quotient("1.");
  const std::optional<NonFiniteValue> found = verifyConvertedOutputs(
      converted, {calm, zeros}, {observation.outputs, observation.calibrationOutputs[0]}, {}, std::nullopt);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->run, 0u);
  EXPECT_EQ(found->outputTensor, std::optional<size_t>(0));
  // the same graph as the fp32 one passes
  EXPECT_FALSE(verifyConvertedOutputs(fp32, {calm}, {observation.outputs}, {}, std::nullopt));
}

TEST(VerifyOutputsTest, AnIntermediateTurnedNonFiniteIsFoundWhereFp32WasFinite) {
  const torch::jit::Stack calm{torch::ones({4})};
  auto fp32 = quotient("1.0001", false);
  const Observation observation = observeValues(fp32, calm);
  // the converted graph is the fp32 one with the factor rounded: its values are the observed ones
  torch::jit::Node* mul = torch::jit::findAllNodes(*fp32, c10::aten::mul, false).at(0);
  {
    torch::jit::WithInsertPoint guard(mul);
    mul->replaceInput(1, fp32->insertConstant(1.0));
  }
  const std::optional<NonFiniteValue> found =
      verifyConvertedOutputs(fp32, {calm}, {observation.outputs}, observation.values, std::nullopt);
  ASSERT_TRUE(found);  // the clamp hides the inf from the output
  EXPECT_FALSE(found->outputTensor);
  EXPECT_EQ(found->value, torch::jit::findAllNodes(*fp32, c10::aten::reciprocal, false).at(0)->output()->debugName());
  // a value fp32 held non-finite too is no finding
  ObservedValues alsoInFp32 = observation.values;
  for (auto& [value, seen] : alsoInFp32) {
    seen.nonFinite = true;
  }
  EXPECT_FALSE(verifyConvertedOutputs(fp32, {calm}, {observation.outputs}, alsoInFp32, std::nullopt));
}

} // namespace
} // namespace torch_mp::jit
