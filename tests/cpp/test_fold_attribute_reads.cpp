// FoldAttributeReads: tensor attributes read through prim::GetAttr chains become constants of the same tensors;
// graphs that assign attributes, and attributes that are not tensors, stay as they are. dropUnreadAttributes then
// removes what no read reaches.
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <algorithm>

#include "jit/prepare/fold_attribute_reads.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Module;
using torch::jit::testing::FileCheck;

// A module whose forward reads a submodule's weight, as freezing leaves nn.MultiheadAttention's in_proj_weight.
Module attentionLike(const std::string& forward) {
  Module inner("Inner");
  inner.register_parameter("in_proj_weight", torch::randn({6, 4}), /*is_buffer=*/false);
  inner.register_attribute("heads", c10::IntType::get(), 2);
  Module outer("Outer");
  outer.register_module("attn", inner);
  outer.define(forward);
  return outer;
}

std::shared_ptr<torch::jit::Graph> forwardGraph(const Module& module) {
  std::shared_ptr<torch::jit::Graph> graph = module.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  return graph;
}

TEST(FoldAttributeReadsTest, TensorAttributeReadBecomesAConstantOfTheSameTensor) {
  Module module = attentionLike(R"(
    def forward(self, x):
        return torch.mm(x, self.attn.in_proj_weight.t()) * self.attn.heads
  )");
  auto graph = forwardGraph(module);
  const at::Tensor x = torch::randn({3, 4});
  const auto before = runGraph(graph, {module._ivalue(), x});
  EXPECT_EQ(FoldAttributeReads(graph, module._ivalue()), 1);
  graph->lint();
  // the weight is a constant now; the int attribute is still read
  FileCheck().check_not("name=\"in_proj_weight\"")->check("prim::Constant[value=<Tensor>]")->check("aten::mm")
      ->check("prim::GetAttr[name=\"heads\"]")->run(*graph);
  expectSameOutputs(before, runGraph(graph, {module._ivalue(), x}));
  const torch::jit::Node* transpose = *std::find_if(graph->nodes().begin(), graph->nodes().end(),
                                                    [](const torch::jit::Node* n) { return n->kind() == c10::aten::t; });
  const at::Tensor folded = torch::jit::toIValue(transpose->input())->toTensor();
  EXPECT_TRUE(folded.is_alias_of(module.attr("attn").toModule().attr("in_proj_weight").toTensor()));
  EXPECT_FALSE(folded.requires_grad());
}

TEST(FoldAttributeReadsTest, GraphThatAssignsAttributesIsLeftAsItIs) {
  Module module = attentionLike(R"(
    def forward(self, x):
        self.attn.heads = 3
        return torch.mm(x, self.attn.in_proj_weight.t())
  )");
  auto graph = forwardGraph(module);
  EXPECT_EQ(FoldAttributeReads(graph, module._ivalue()), 0);
  FileCheck().check("prim::SetAttr")->check("prim::GetAttr[name=\"in_proj_weight\"]")->run(*graph);
}

// Alias analysis cannot tell one tensor attribute from another: once one is written, every read stays a read.
TEST(FoldAttributeReadsTest, TensorWrittenInPlaceStaysAnAttribute) {
  Module module("Accumulator");
  module.register_buffer("total", torch::zeros({4}));
  module.register_parameter("weight", torch::randn({4, 4}), /*is_buffer=*/false);
  module.define(R"(
    def forward(self, x):
        self.total.add_(x.sum(0))
        return torch.mm(x, self.weight) + self.total
  )");
  auto graph = forwardGraph(module);
  EXPECT_EQ(FoldAttributeReads(graph, module._ivalue()), 0);
  FileCheck().check("prim::GetAttr[name=\"total\"]")->check("aten::add_")->check("prim::GetAttr[name=\"weight\"]")
      ->run(*graph);
}

TEST(FoldAttributeReadsTest, GraphWithoutAModuleInputIsLeftAsItIs) {
  auto graph = parseGraph(R"IR(
    graph(%x : Tensor):
      %y : Tensor = aten::relu(%x)
      return (%y))IR");
  const std::string before = graph->toString();
  EXPECT_EQ(FoldAttributeReads(graph, torch::randn({2})), 0);
  EXPECT_EQ(graph->toString(), before);
}

TEST(FoldAttributeReadsTest, DropsTheSubmodulesNoReadReaches) {
  Module module = attentionLike(R"(
    def forward(self, x):
        return torch.mm(x, self.attn.in_proj_weight.t())
  )");
  Module kept = attentionLike(R"(
    def forward(self, x):
        return torch.mm(x, self.attn.in_proj_weight.t())
  )");
  for (Module* target : {&module, &kept}) {
    auto graph = target->get_method("forward").graph();
    torch::jit::Inline(*graph);
  }
  FoldAttributeReads(module.get_method("forward").graph(), module._ivalue());
  torch::jit::EliminateDeadCode(module.get_method("forward").graph());
  dropUnreadAttributes(module);
  dropUnreadAttributes(kept);  // its forward still reads self.attn
  EXPECT_FALSE(module.hasattr("attn"));
  EXPECT_TRUE(kept.hasattr("attn"));
  const at::Tensor x = torch::randn({3, 4});
  EXPECT_EQ(module.forward({x}).toTensor().sizes(), (std::vector<int64_t>{3, 6}));
}

} // namespace
} // namespace torch_mp::jit
