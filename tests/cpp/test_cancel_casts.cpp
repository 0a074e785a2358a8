// CancelCasts: lossless round trips and no-op casts go, lossy round trips stay.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "jit/rewrite/cancel_casts.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

TEST(CancelCastsTest, RemovesLosslessRoundTrip) {
  auto graph = parseGraph(R"IR(
    graph(%x : Half(4, strides=[1], device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %half : int = prim::Constant[value=5]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %up : Float(4, strides=[1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %down : Half(4, strides=[1], device=cpu) = aten::to(%up, %half, %false, %false, %none)
      %y : Half(4, strides=[1], device=cpu) = aten::relu(%down)
      return (%y))IR");
  auto input = at::randn({4}).to(at::kHalf);
  auto before = runGraph(graph, {input});
  EXPECT_TRUE(CancelCasts(graph));
  graph->lint();
  FileCheck().check("aten::relu(%x)")->run(*graph);
  expectSameOutputs(before, runGraph(graph, {input}));
}

TEST(CancelCastsTest, KeepsLossyRoundTrip) {
  auto graph = parseGraph(R"IR(
    graph(%x : Float(4, strides=[1], device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %half : int = prim::Constant[value=5]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %down : Half(4, strides=[1], device=cpu) = aten::to(%x, %half, %false, %false, %none)
      %up : Float(4, strides=[1], device=cpu) = aten::to(%down, %fp32, %false, %false, %none)
      return (%up))IR");
  EXPECT_FALSE(CancelCasts(graph));
  FileCheck().check_count("aten::to", 2, /*exactly=*/true)->run(*graph);
}

TEST(CancelCastsTest, RemovesCastToOwnDtypeButNotCopy) {
  auto graph = parseGraph(R"IR(
    graph(%x : Float(4, strides=[1], device=cpu)):
      %fp32 : int = prim::Constant[value=6]()
      %false : bool = prim::Constant[value=0]()
      %true : bool = prim::Constant[value=1]()
      %one : int = prim::Constant[value=1]()
      %none : NoneType = prim::Constant()
      %same : Float(4, strides=[1], device=cpu) = aten::to(%x, %fp32, %false, %false, %none)
      %copied : Float(4, strides=[1], device=cpu) = aten::to(%x, %fp32, %false, %true, %none)
      %y : Float(4, strides=[1], device=cpu) = aten::add(%same, %copied, %one)
      return (%y))IR");
  EXPECT_TRUE(CancelCasts(graph));
  graph->lint();
  FileCheck().check_count("aten::to", 1, /*exactly=*/true)->check("aten::add(%x, ")->run(*graph);
}

} // namespace
} // namespace torch_mp::jit
