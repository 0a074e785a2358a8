// peepholeOptimize: PyTorch's PeepholeOptimize without shape peepholes, its alias-analysis passes run only where the
// graph holds what they rewrite. The result is PyTorch's, graph text for graph text, where each pass fires and where
// none can.
#include <gtest/gtest.h>
#include <torch/csrc/jit/passes/peephole.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "jit/upstream/peephole_optimize.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::testing::FileCheck;

// Runs peepholeOptimize on `graph` and PyTorch's pass on a copy made first; expects the same text and the same answer.
void peepholeLikePyTorch(std::shared_ptr<torch::jit::Graph>& graph, bool expectChanged) {
  std::shared_ptr<torch::jit::Graph> reference = graph->copy();
  std::shared_ptr<torch::jit::Graph> ours = graph->copy();
  EXPECT_EQ(torch::jit::PeepholeOptimize(reference, /*disable_shape_peepholes=*/true), expectChanged);
  EXPECT_EQ(peepholeOptimize(ours), expectChanged);
  EXPECT_EQ(ours->toString(), reference->toString());
  ours->lint();
  graph = ours;
}

// A single transpose and a float scale are nothing PeepholeOptimize's other rewrites change.
TEST(PeepholeOptimizeTest, ListIdiomsRunWhereNothingElseCanFire) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor):
      %scale : float = prim::Constant[value=0.5]()
      %l : Tensor[] = prim::ListConstruct(%a, %b)
      %x : Tensor, %y : Tensor = prim::ListUnpack(%l)
      %xt : Tensor = aten::t(%x)
      %m : Tensor = aten::mul(%xt, %scale)
      %s : Tensor = aten::add(%m, %y, %scale)
      return (%s))IR");
  peepholeLikePyTorch(graph, /*expectChanged=*/true);
  FileCheck().check_not("prim::ListUnpack")->check("aten::mul")->check("aten::add")->run(*graph);

  auto unchanged = parseGraph(R"IR(
    graph(%a : Tensor):
      %scale : float = prim::Constant[value=0.5]()
      %m : Tensor = aten::mul(%a, %scale)
      return (%m))IR");
  peepholeLikePyTorch(unchanged, /*expectChanged=*/false);
}

// Each list idiom where the list is built in the graph: a length, an index, a slice, a sum of two lists; one list
// appended to stays as it is. A list only concatenated has nothing to rewrite.
TEST(PeepholeOptimizeTest, ListIdiomsFoldOnListsBuiltInTheGraph) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor):
      %zero : int = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %none : NoneType = prim::Constant()
      %l : Tensor[] = prim::ListConstruct(%a, %b)
      %k : Tensor[] = prim::ListConstruct(%b)
      %n : int = aten::len(%l)
      %first : Tensor = aten::__getitem__(%l, %zero)
      %tail : Tensor[] = aten::slice(%l, %one, %none, %one)
      %both : Tensor[] = aten::add(%l, %k)
      %c : Tensor = aten::cat(%tail, %zero)
      %d : Tensor = aten::cat(%both, %n)
      %e : Tensor = aten::mul(%first, %d)
      %m : Tensor[] = prim::ListConstruct(%a)
      %appended : Tensor[] = aten::append(%m, %b)
      %f : Tensor = aten::cat(%m, %zero)
      return (%c, %e, %f))IR");
  peepholeLikePyTorch(graph, /*expectChanged=*/true);
  FileCheck()
      .check_not("aten::len")
      ->check_not("aten::__getitem__")
      ->check_not("aten::slice")
      ->check("aten::append")
      ->run(*graph);

  auto onlyConcatenated = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor):
      %zero : int = prim::Constant[value=0]()
      %l : Tensor[] = prim::ListConstruct(%a, %b)
      %c : Tensor = aten::cat(%l, %zero)
      return (%c))IR");
  peepholeLikePyTorch(onlyConcatenated, /*expectChanged=*/false);
}

TEST(PeepholeOptimizeTest, IntegerIdentitiesAndTheRankOfAConvolutionFold) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor, %w : Tensor):
      %none : NoneType = prim::Constant()
      %zero : int = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %ones : int[] = prim::Constant[value=[1, 1]]()
      %zeros : int[] = prim::Constant[value=[0, 0]]()
      %c : Tensor = aten::conv2d(%x, %w, %none, %ones, %zeros, %ones, %one)
      %rank : int = aten::dim(%c)
      %a : Tensor = aten::add(%c, %zero, %one)
      %r : Tensor = aten::relu(%a)
      %p : Tensor = aten::sigmoid(%x)
      %m : Tensor = aten::mul(%p, %one)
      %q : Tensor = aten::relu(%m)
      return (%r, %q, %rank))IR");
  peepholeLikePyTorch(graph, /*expectChanged=*/true);
  FileCheck().check_not("aten::dim")->check_not("aten::add")->check_not("aten::mul")->run(*graph);
}

TEST(PeepholeOptimizeTest, DictReadsAndNestedConcatenationsFold) {
  auto graph = parseGraph(R"IR(
    graph(%a : Tensor, %b : Tensor, %c : Tensor):
      %key : str = prim::Constant[value="k"]()
      %zero : int = prim::Constant[value=0]()
      %d : Dict(str, Tensor) = prim::DictConstruct(%key, %a)
      %v : Tensor = aten::__getitem__(%d, %key)
      %inner_list : Tensor[] = prim::ListConstruct(%v, %b)
      %inner : Tensor = aten::cat(%inner_list, %zero)
      %outer_list : Tensor[] = prim::ListConstruct(%inner, %c)
      %outer : Tensor = aten::cat(%outer_list, %zero)
      return (%outer))IR");
  peepholeLikePyTorch(graph, /*expectChanged=*/true);
  FileCheck()
      .check_not("aten::__getitem__")
      ->check_count("aten::cat", 1, /*exactly=*/true)
      ->run(*graph);
}

TEST(PeepholeOptimizeTest, PyTorchsOwnRewritesGetPyTorchsPass) {
  auto transposes = parseGraph(R"IR(
    graph(%x : Tensor, %n : int):
      %t : Tensor = aten::t(%x)
      %tt : Tensor = aten::t(%t)
      %nt : Tensor = prim::NumToTensor(%n)
      %back : int = aten::Int(%nt)
      %r : Tensor = aten::relu(%tt)
      return (%r, %back))IR");
  peepholeLikePyTorch(transposes, /*expectChanged=*/true);
  FileCheck().check_not("aten::t(")->check_not("aten::Int")->run(*transposes);
}

} // namespace
} // namespace torch_mp::jit
