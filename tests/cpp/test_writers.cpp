// Writers: which nodes may write, WriterQuery's answers against AliasDb's own, and dead-code elimination with and
// without writes.
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <string>
#include <vector>

#include "jit/writers.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Node;
using torch::jit::testing::FileCheck;

// Pure tensor ops, views, containers, a branch and a batch norm in inference mode: nothing writes.
constexpr const char* kNoWrites = R"IR(
    graph(%x : Tensor, %w : Tensor, %c : bool):
      %none : NoneType = prim::Constant()
      %false : bool = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %shape : int[] = prim::ListConstruct(%one)
      %y : Tensor = aten::linear(%x, %w, %none)
      %v : Tensor = aten::view(%y, %shape)
      %l : Tensor[] = prim::ListConstruct(%y, %x)
      %cat : Tensor = aten::cat(%l, %one)
      %b : Tensor = aten::batch_norm(%y, %none, %none, %none, %none, %false, %eps, %eps, %false)
      %r : Tensor = prim::If(%c)
        block0():
          %t : Tensor = aten::relu(%cat)
          -> (%t)
        block1():
          -> (%v)
      return (%r, %b))IR";

// The same ops, with an in-place write to a view inside the branch.
constexpr const char* kWriteInABranch = R"IR(
    graph(%x : Tensor, %w : Tensor, %c : bool):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %shape : int[] = prim::ListConstruct(%one)
      %y : Tensor = aten::linear(%x, %w, %none)
      %v : Tensor = aten::view(%y, %shape)
      %z : Tensor = aten::relu(%x)
      %r : Tensor = prim::If(%c)
        block0():
          %t : Tensor = aten::relu_(%v)
          -> (%t)
        block1():
          -> (%z)
      return (%r, %y))IR";

std::vector<const torch::jit::Value*> allValues(torch::jit::Block* block) {
  std::vector<const torch::jit::Value*> values(block->inputs().begin(), block->inputs().end());
  for (Node* node : block->nodes()) {
    for (torch::jit::Block* sub : node->blocks()) {
      const std::vector<const torch::jit::Value*> inner = allValues(sub);
      values.insert(values.end(), inner.begin(), inner.end());
    }
    values.insert(values.end(), node->outputs().begin(), node->outputs().end());
  }
  return values;
}

Node* firstOfKind(torch::jit::Block* block, c10::Symbol kind) {
  for (Node* node : block->nodes()) {
    if (node->kind() == kind) {
      return node;
    }
    for (torch::jit::Block* sub : node->blocks()) {
      if (Node* found = firstOfKind(sub, kind)) {
        return found;
      }
    }
  }
  return nullptr;
}

TEST(WritersTest, PureOpsViewsContainersBranchesAndInferenceBatchNormDoNotWrite) {
  auto graph = parseGraph(kNoWrites);
  EXPECT_FALSE(graphMayWrite(*graph));
  for (const char* kind : {"aten::linear", "aten::view", "prim::ListConstruct", "aten::batch_norm", "prim::If"}) {
    Node* node = firstOfKind(graph->block(), c10::Symbol::fromQualString(kind));
    ASSERT_NE(node, nullptr) << kind;
    EXPECT_FALSE(mayWrite(node)) << kind;
  }
}

TEST(WritersTest, InPlaceOpsAttributeWritesAndTrainingBatchNormMayWrite) {
  auto graph = parseGraph(kWriteInABranch);
  EXPECT_TRUE(graphMayWrite(*graph));  // found inside the branch
  EXPECT_TRUE(mayWrite(firstOfKind(graph->block(), c10::aten::relu_)));
  EXPECT_FALSE(mayWrite(firstOfKind(graph->block(), c10::aten::relu)));

  auto training = parseGraph(R"IR(
    graph(%x : Tensor, %mean : Tensor, %var : Tensor, %training : bool):
      %none : NoneType = prim::Constant()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %b : Tensor = aten::batch_norm(%x, %none, %none, %mean, %var, %training, %eps, %eps, %training)
      return (%b))IR");
  EXPECT_TRUE(mayWrite(firstOfKind(training->block(), c10::aten::batch_norm)));  // the mode is not known

  auto module = torch::jit::Module("M");
  module.register_attribute("count", c10::IntType::get(), 0);
  module.define(R"JIT(
    def forward(self, x: int) -> int:
        self.count = x
        return x
  )JIT");
  auto method = module.get_method("forward").graph();
  EXPECT_TRUE(mayWrite(firstOfKind(method->block(), c10::prim::SetAttr)));
  EXPECT_TRUE(graphMayWrite(*method));
}

TEST(WritersTest, WriterQueryAnswersAsAliasDbDoes) {
  for (const char* ir : {kNoWrites, kWriteInABranch}) {
    auto graph = parseGraph(ir);
    const torch::jit::AliasDb aliasDb(graph);
    const WriterQuery writers(graph);
    int written = 0;
    for (const torch::jit::Value* value : allValues(graph->block())) {
      EXPECT_EQ(writers.hasWriters(value), aliasDb.hasWriters(value)) << value->debugName();
      written += aliasDb.hasWriters(value) ? 1 : 0;
    }
    EXPECT_EQ(written > 0, graphMayWrite(*graph));  // the second graph's view, its base and the write's result
  }
}

TEST(WritersTest, DeadCodeGoesAsPyTorchsEliminationRemovesIt) {
  // Without writes: the dead chain goes, the branch's dead output with it.
  const std::string pure = R"IR(
    graph(%x : Tensor, %c : bool):
      %dead : Tensor = aten::relu(%x)
      %dead2 : Tensor = aten::sigmoid(%dead)
      %r : Tensor, %unused : Tensor = prim::If(%c)
        block0():
          %t : Tensor = aten::tanh(%x)
          -> (%t, %t)
        block1():
          %e : Tensor = aten::exp(%x)
          -> (%x, %e)
      return (%r))IR";
  // With a write: an in-place write to a value nothing reads goes only with alias information, which ours builds.
  const std::string written = R"IR(
    graph(%x : Tensor):
      %y : Tensor = aten::relu(%x)
      %z : Tensor = aten::sigmoid_(%y)
      %w : Tensor = aten::tanh(%x)
      return (%w))IR";
  for (const std::string& ir : {pure, written}) {
    auto ours = parseGraph(ir);
    auto theirs = parseGraph(ir);
    eliminateDeadCode(ours);
    torch::jit::EliminateDeadCode(theirs);
    ours->lint();
    EXPECT_EQ(ours->toString(), theirs->toString());
  }
  auto graph = parseGraph(pure);
  eliminateDeadCode(graph);
  FileCheck().check_not("aten::relu")->check_not("aten::sigmoid")->check_not("aten::exp")->run(*graph);
  graph = parseGraph(written);
  eliminateDeadCode(graph);
  FileCheck().check_not("aten::sigmoid_")->check("aten::tanh")->run(*graph);
}

} // namespace
} // namespace torch_mp::jit
