// propagateConstants: PyTorch's ConstantPropagation, run only where it could change the graph. The result is
// PyTorch's, graph text for graph text and the same answer, on graphs where each of its rewrites fires and on
// graphs where none can (constants read by nodes that also read a non-constant, nondeterministic and side-effecting
// nodes, branches and loops with nothing to simplify).
#include <gtest/gtest.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <string>

#include "jit/upstream/propagate_constants.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

// Ours and PyTorch's on two parses of `ir`: the same answer and graph text, which lints. Returns ours.
std::shared_ptr<torch::jit::Graph> propagateBothWays(const std::string& ir, bool expectChanged) {
  auto ours = parseGraph(ir);
  auto theirs = parseGraph(ir);
  EXPECT_EQ(propagateConstants(ours), expectChanged) << ir;
  EXPECT_EQ(torch::jit::ConstantPropagation(theirs, /*ignore_custom_classes=*/true), expectChanged) << ir;
  ours->lint();
  EXPECT_EQ(ours->toString(), theirs->toString()) << ir;
  return ours;
}

TEST(PropagateConstantsTest, ANodeOfConstantsFolds) {
  auto graph = propagateBothWays(R"IR(
    graph(%x : Tensor):
      %two : int = prim::Constant[value=2]()
      %three : int = prim::Constant[value=3]()
      %five : int = aten::add(%two, %three)
      %sizes : int[] = prim::ListConstruct(%five, %two)
      %r : Tensor = aten::view(%x, %sizes)
      return (%r))IR",
      /*expectChanged=*/true);
  FileCheck().check_not("aten::add")->check_not("prim::ListConstruct")->check("value=[5, 2]")->run(*graph);
}

TEST(PropagateConstantsTest, BranchesOnAConstantOrWithAlikeOutputsSimplify) {
  auto constantCondition = propagateBothWays(R"IR(
    graph(%x : Tensor):
      %true : bool = prim::Constant[value=1]()
      %r : Tensor = prim::If(%true)
        block0():
          %a : Tensor = aten::relu(%x)
          -> (%a)
        block1():
          %b : Tensor = aten::tanh(%x)
          -> (%b)
      return (%r))IR",
      /*expectChanged=*/true);
  FileCheck().check_not("prim::If")->check("aten::relu")->check_not("aten::tanh")->run(*constantCondition);

  auto alikeOutputs = propagateBothWays(R"IR(
    graph(%x : Tensor, %c : bool):
      %r : Tensor, %same : Tensor, %k : int = prim::If(%c)
        block0():
          %a : Tensor = aten::relu(%x)
          %one : int = prim::Constant[value=1]()
          -> (%a, %x, %one)
        block1():
          %b : Tensor = aten::tanh(%x)
          %uno : int = prim::Constant[value=1]()
          -> (%b, %x, %uno)
      %s : Tensor = aten::add(%r, %same, %k)
      return (%s))IR",
      /*expectChanged=*/true);
  FileCheck()
      .check("prim::Constant[value=1]")
      ->check("Tensor = prim::If")
      ->check("aten::add(%")
      ->check_same(", %x, %")
      ->run(*alikeOutputs);
}

TEST(PropagateConstantsTest, LoopsThatNeverRunOrCarryAnUnchangedValueSimplify) {
  propagateBothWays(R"IR(
    graph(%x : Tensor):
      %zero : int = prim::Constant[value=0]()
      %true : bool = prim::Constant[value=1]()
      %r : Tensor = prim::Loop(%zero, %true, %x)
        block0(%i : int, %acc : Tensor):
          %next : Tensor = aten::relu(%acc)
          -> (%true, %next)
      return (%r))IR",
      /*expectChanged=*/true);

  propagateBothWays(R"IR(
    graph(%x : Tensor, %n : int):
      %true : bool = prim::Constant[value=1]()
      %r : Tensor, %kept : Tensor = prim::Loop(%n, %true, %x, %x)
        block0(%i : int, %acc : Tensor, %same : Tensor):
          %next : Tensor = aten::mul(%acc, %same)
          -> (%true, %next, %same)
      return (%r, %kept))IR",
      /*expectChanged=*/true);
}

TEST(PropagateConstantsTest, NothingToFoldLeavesTheGraph) {
  auto graph = propagateBothWays(R"IR(
    graph(%x : Tensor, %c : bool, %n : int):
      %two : int = prim::Constant[value=2]()
      %sizes : int[] = prim::Constant[value=[8, 2]]()
      %none : NoneType = prim::Constant()
      %true : bool = prim::Constant[value=1]()
      %message : str = prim::Constant[value="done"]()
      %scaled : Tensor = aten::mul(%x, %two)
      %noise : Tensor = aten::rand(%sizes, %none, %none, %none, %none)
      prim::Print(%message)
      %r : Tensor = prim::If(%c)
        block0():
          %a : Tensor = aten::relu(%scaled)
          -> (%a)
        block1():
          %b : Tensor = aten::tanh(%noise)
          -> (%b)
      %loop : Tensor = prim::Loop(%n, %true, %r)
        block0(%i : int, %acc : Tensor):
          %next : Tensor = aten::add(%acc, %scaled, %two)
          -> (%true, %next)
      return (%loop))IR",
      /*expectChanged=*/false);
  FileCheck().check("aten::rand")->check("prim::Print")->check("prim::If")->check("prim::Loop")->run(*graph);
}

} // namespace
} // namespace torch_mp::jit
