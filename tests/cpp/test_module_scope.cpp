// Module scopes (jit/ir/module_scope): the path of the submodule a frozen node was inlined from, and ModuleScopes, which
// works each path out once per call stack and gives the same answers.
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/passes/freeze_module.h>

#include <map>
#include <set>
#include <string>

#include "jit/ir/module_scope.h"

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

} // namespace
} // namespace torch_mp::jit
