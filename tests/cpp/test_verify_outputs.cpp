// verifyOutputDtypes (jit/verify_outputs): a converted graph whose outputs, nested ones included, keep the fp32
// graph's dtypes passes; one that returns another dtype anywhere is an internal error; the caller's inputs stay.
#include <gtest/gtest.h>

#include "jit/verify_outputs.h"
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

} // namespace
} // namespace torch_mp::jit
