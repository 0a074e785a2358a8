// Dead-code elimination without alias information: text for text what PyTorch's EliminateDeadCode(block, true)
// leaves, on graphs where it removes something and where it must keep it.
#include <gtest/gtest.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <string>

#include "jit/upstream/dead_code.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

// Ours and PyTorch's on two parses of `ir`: the same graph text, which lints. Returns ours.
std::shared_ptr<torch::jit::Graph> eliminateBothWays(const std::string& ir) {
  auto ours = parseGraph(ir);
  auto theirs = parseGraph(ir);
  eliminateDeadCodeWithoutAliases(ours->block());
  torch::jit::EliminateDeadCode(theirs->block(), /*recurse=*/true);
  ours->lint();
  EXPECT_EQ(ours->toString(), theirs->toString()) << ir;
  return ours;
}

TEST(DeadCodeTest, DeadChainsAndUnreadBranchOutputsGo) {
  auto graph = eliminateBothWays(R"IR(
    graph(%x : Tensor, %c : bool):
      %unused : int = prim::Constant[value=3]()
      %dead : Tensor = aten::relu(%x)
      %dead2 : Tensor = aten::sigmoid(%dead)
      %r : Tensor, %unread : Tensor = prim::If(%c)
        block0():
          %t : Tensor = aten::tanh(%x)
          %inner : Tensor, %innerUnread : Tensor = prim::If(%c)
            block0():
              %e : Tensor = aten::exp(%t)
              -> (%e, %e)
            block1():
              %l : Tensor = aten::log(%x)
              -> (%t, %l)
          -> (%inner, %t)
        block1():
          %n : Tensor = aten::neg(%x)
          -> (%x, %n)
      return (%r))IR");
  FileCheck()
      .check_not("prim::Constant")
      ->check_not("aten::relu")
      ->check_not("aten::sigmoid")
      ->check("aten::tanh")
      ->check("aten::exp")
      ->check_not("aten::log")
      ->check_not("aten::neg")
      ->run(*graph);
  EXPECT_EQ(graph->return_node()->input()->node()->outputs().size(), 1u);  // the unread outputs went
}

TEST(DeadCodeTest, LoopsKeepWhatTheNextIterationReadsAndLoseOtherUnreadCarriedValues) {
  auto graph = eliminateBothWays(R"IR(
    graph(%x : Tensor, %n : int):
      %true : bool = prim::Constant[value=1]()
      %acc : Tensor, %unread : Tensor, %fed : Tensor = prim::Loop(%n, %true, %x, %x, %x)
        block0(%i : int, %a : Tensor, %u : Tensor, %f : Tensor):
          %a2 : Tensor = aten::add(%a, %f, %n)
          %u2 : Tensor = aten::relu(%x)
          %f2 : Tensor = aten::sigmoid(%f)
          %dead : Tensor = aten::exp(%a)
          -> (%true, %a2, %u2, %f2)
      return (%acc))IR");
  // %fed is read by the next iteration's add: its sigmoid stays; %unread, which the body never reads, goes with the
  // relu that computes it, and the exp.
  FileCheck()
      .check("prim::Loop")
      ->check("aten::add")
      ->check_not("aten::relu")
      ->check("aten::sigmoid")
      ->check_not("aten::exp")
      ->run(*graph);
}

TEST(DeadCodeTest, SideEffectsAndMutableSchemasStay) {
  auto graph = eliminateBothWays(R"IR(
    graph(%x : Tensor, %c : bool):
      %one : int = prim::Constant[value=1]()
      %printed : Tensor = aten::relu(%x)
      prim::Print(%printed)
      %written : Tensor = aten::sigmoid(%x)
      %w : Tensor = aten::add_(%written, %x, %one)
      prim::If(%c)
        block0():
          %message : str = prim::Constant[value="no"]()
          prim::RaiseException(%message, %message)
          -> ()
        block1():
          -> ()
      %dead : Tensor = aten::tanh(%x)
      return (%x))IR");
  FileCheck()
      .check("aten::relu")
      ->check("prim::Print")
      ->check("aten::sigmoid")
      ->check("aten::add_")
      ->check("prim::RaiseException")
      ->check_not("aten::tanh")
      ->run(*graph);
}

TEST(DeadCodeTest, AGraphWithNothingDeadStaysAsItIs) {
  const std::string ir = R"IR(
    graph(%x : Tensor):
      %y : Tensor = aten::relu(%x)
      %z : Tensor = aten::mul(%y, %x)
      return (%z))IR";
  auto graph = eliminateBothWays(ir);
  EXPECT_EQ(graph->toString(), parseGraph(ir)->toString());
}

} // namespace
} // namespace torch_mp::jit
