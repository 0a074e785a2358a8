// Module scopes (jit/ir/module_scope): the path of the submodule a frozen node was inlined from, and ModuleScopes, which
// works each path out once per call stack and gives the same answers; with inline_module_paths, the whole path of a
// module called through a chain of attributes (as a loop over an nn.ModuleList calls layers.0).
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/torch.h>

#include <map>
#include <set>
#include <string>

#include "jit/ir/module_scope.h"
#include "jit/prepare/inline_module_paths.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Module;

Module block() {
  Module module("Block");
  module.define(R"(
    def forward(self, x):
        return torch.relu(x) * torch.sigmoid(x)
  )");
  return module;
}

// Net: body.first and body.second (two Blocks), then its own softmax.
Module net() {
  Module body("Body");
  body.register_module("first", block());
  body.register_module("second", block());
  body.define(R"(
    def forward(self, x):
        return self.second.forward(self.first.forward(x))
  )");
  Module module("Net");
  module.register_module("body", body);
  module.define(R"(
    def forward(self, x):
        return torch.softmax(self.body.forward(x), -1)
  )");
  module.eval();
  return module;
}

TEST(ModuleScopeTest, FrozenNodesNameTheSubmoduleTheyCameFromAndTheMemoMatches) {
  Module frozen = torch::jit::freeze_module(net());
  std::shared_ptr<torch::jit::Graph> graph = frozen.get_method("forward").graph();
  ModuleScopes scopes;
  std::map<std::string, std::multiset<std::string>> opsByScope;
  for (const torch::jit::Node* node : graph->nodes()) {
    if (node->kind() == c10::prim::Constant) {
      continue;
    }
    const std::string& memo = scopes.of(node);
    EXPECT_EQ(memo, moduleScope(node)) << node->kind().toQualString();
    EXPECT_EQ(&scopes.of(node), &memo);  // asked again: the same entry
    opsByScope[memo].insert(node->kind().toQualString());
  }
  const std::multiset<std::string> blockOps{"aten::relu", "aten::sigmoid", "aten::mul"};
  EXPECT_EQ(opsByScope["body.first"], blockOps);
  EXPECT_EQ(opsByScope["body.second"], blockOps);
  EXPECT_EQ(opsByScope[""], std::multiset<std::string>{"aten::softmax"});
}

// Chained: its forward calls body.first and body.second through the chain `self.body.<name>`, as the unrolled loop
// `for layer in self.layers:` calls `self.layers.0` (TorchScript source cannot name an nn.ModuleList's "0").
Module chained() {
  Module body("Body");
  body.register_module("first", block());
  body.register_module("second", block());
  Module module("Chained");
  module.register_module("body", body);
  module.define(R"(
    def forward(self, x):
        return torch.softmax(self.body.second.forward(self.body.first.forward(x)), -1)
  )");
  module.eval();
  return module;
}

std::map<std::string, std::multiset<std::string>> opsByScope(const Module& frozen) {
  std::map<std::string, std::multiset<std::string>> ops;
  for (const torch::jit::Node* node : frozen.get_method("forward").graph()->nodes()) {
    if (node->kind() != c10::prim::Constant) {
      ops[moduleScope(node)].insert(node->kind().toQualString());
    }
  }
  return ops;
}

TEST(ModuleScopeTest, CallsThroughAnAttributeChainNameTheWholePathOnceInlinedWithModulePaths) {
  const std::multiset<std::string> blockOps{"aten::relu", "aten::sigmoid", "aten::mul"};
  // PyTorch's inliner alone names the module by the chain's last attribute
  EXPECT_EQ(opsByScope(torch::jit::freeze_module(chained()))["first"], blockOps);

  Module original = chained();
  Module named = original.clone(/*inplace=*/true);
  EXPECT_EQ(InlineModulePaths(named), 2);
  std::map<std::string, std::multiset<std::string>> ops = opsByScope(torch::jit::freeze_module(named));
  EXPECT_EQ(ops["body.first"], blockOps);
  EXPECT_EQ(ops["body.second"], blockOps);
  EXPECT_EQ(ops[""], std::multiset<std::string>{"aten::softmax"});
  EXPECT_EQ(ops.count("first"), 0u);
  // the chain reads the same attributes again, and the original keeps its calls
  torch::jit::testing::FileCheck()
      .check("prim::GetAttr[name=\"body\"]")
      ->check("prim::GetAttr[name=\"first\"]")
      ->check_not("prim::CallMethod")
      ->run(*named.get_method("forward").graph());
  torch::jit::testing::FileCheck().check_count("prim::CallMethod", 2)->run(*original.get_method("forward").graph());
  const at::Tensor x = torch::randn({2, 8});
  EXPECT_TRUE(torch::allclose(named.forward({x}).toTensor(), original.forward({x}).toTensor()));
}

} // namespace
} // namespace torch_mp::jit
