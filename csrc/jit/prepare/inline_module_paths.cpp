#include "jit/prepare/inline_module_paths.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/jit_log.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::GraphFunction;
using torch::jit::Node;
using torch::jit::Value;

// The prim::GetAttr nodes that read `module` from the graph's first input (`self`), outermost first; empty when
// the module is not read so (`self` itself, or a module handed in as a value).
std::vector<Node*> attributeChain(Value* module) {
  std::vector<Node*> chain;
  const Value* self = module->owningGraph()->inputs().empty() ? nullptr : module->owningGraph()->inputs()[0];
  Value* current = module;
  while (current != self) {
    Node* read = current->node();
    if (read->kind() != c10::prim::GetAttr) {
      return {};
    }
    chain.insert(chain.begin(), read);
    current = read->input(0);
  }
  return chain;
}

std::string pathOf(const std::vector<Node*>& chain) {
  std::string path;
  for (const Node* read : chain) {
    path += (path.empty() ? "" : ".") + read->s(c10::attr::name);
  }
  return path;
}

class ModulePathInliner {
 public:
  int run(Graph& graph) {
    inlineCalls(graph.block());
    return inlined_;
  }

 private:
  void inlineCalls(Block* block) {
    for (auto it = block->nodes().begin(); it != block->nodes().end();) {
      Node* node = *it++;  // inlining replaces `node`; the inlined nodes, already inlined themselves, come before `it`
      if (node->kind() == c10::prim::CallMethod) {
        inlineMethodCall(node);
        continue;
      }
      if (node->kind() == c10::prim::CallFunction) {
        inlineFunctionCall(node);
        continue;
      }
      for (Block* nested : node->blocks()) {
        inlineCalls(nested);
      }
    }
  }

  void inlineMethodCall(Node* call) {
    const c10::ClassTypePtr type = call->input(0)->type()->cast<c10::ClassType>();
    if (!type) {
      return;  // an interface: the method is known once frozen
    }
    GraphFunction* callee = torch::jit::tryToGraphFunction(type->getMethod(call->s(c10::attr::name)));
    if (!callee) {
      return;
    }
    Graph* body = inlinedBody(callee);
    const std::vector<Node*> chain = attributeChain(call->input(0));
    if (chain.size() < 2) {  // `self` or one attribute: PyTorch's own name is the path step already
      torch::jit::inlineCallTo(call, callee, body);
    } else {
      Node* last = chain.back();
      const std::string ownName = last->s(c10::attr::name);
      last->s_(c10::attr::name, pathOf(chain));  // what inlineCallTo names the call's module by
      torch::jit::inlineCallTo(call, callee, body);
      last->s_(c10::attr::name, ownName);
      GRAPH_UPDATE("inlined ", callee->qualname().qualifiedName(), " as ", pathOf(chain));
    }
    ++inlined_;
  }

  // A free function (nn.Softmax's F.softmax) is inlined here too: inlineCallTo gives the nodes it inlines the
  // callee's call stack under the call's entry, not the call's own, so a call left for freezing inside a body
  // inlined here would lose its module path.
  void inlineFunctionCall(Node* call) {
    Node* constant = call->input(0)->node();
    const c10::FunctionTypePtr type = call->input(0)->type()->cast<c10::FunctionType>();
    if (constant->kind() != c10::prim::Constant || !type || constant->hasAttribute(c10::Symbol::attr("fallback"))) {
      return;
    }
    GraphFunction* callee = torch::jit::tryToGraphFunction(*type->function());
    if (!callee) {
      return;
    }
    Graph* body = inlinedBody(callee);
    call->removeInput(0);
    torch::jit::inlineCallTo(call, callee, body);
    ++inlined_;
  }

  // The callee's graph with its own calls inlined, made once per function (modules of one type share it).
  Graph* inlinedBody(GraphFunction* callee) {
    if (auto known = bodies_.find(callee); known != bodies_.end()) {
      return known->second.get();
    }
    std::shared_ptr<Graph> body = callee->graph()->copy();
    inlineCalls(body->block());  // adds the bodies it calls to bodies_
    return bodies_.emplace(callee, std::move(body)).first->second.get();
  }

  std::unordered_map<GraphFunction*, std::shared_ptr<Graph>> bodies_;
  int inlined_ = 0;
};

} // namespace

int InlineModulePaths(torch::jit::Module& module) {
  std::shared_ptr<Graph> graph = module.get_method("forward").graph();
  const int inlined = ModulePathInliner().run(*graph);
  GRAPH_DUMP("after InlineModulePaths", graph);
  return inlined;
}

} // namespace torch_mp::jit
