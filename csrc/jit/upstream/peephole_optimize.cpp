#include "jit/upstream/peephole_optimize.h"

#include <torch/csrc/jit/passes/concat_opt.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/peephole.h>
#include <torch/csrc/jit/passes/peephole_alias_sensitive.h>
#include <torch/csrc/jit/passes/peephole_dict_idioms.h>
#include <torch/csrc/jit/passes/peephole_list_idioms.h>
#include <torch/csrc/jit/passes/peephole_non_tensor.h>

#include <algorithm>

#include "jit/ir/ir_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// PeepholeOptimize's own node rewrites, shape rewrites disabled: x.t().t(), a number conversion of
// prim::NumToTensor, _grad_sum_to_size.
bool ownRewriteCouldFire(const Node* node) {
  switch (node->kind()) {
    case c10::aten::t:
      return node->input(0)->node()->kind() == c10::aten::t;
    case c10::aten::Float:
    case c10::aten::Int:
    case c10::aten::FloatImplicit:
    case c10::aten::IntImplicit:
    case c10::aten::ScalarImplicit:
      return node->inputs().size() == 1 && node->input(0)->node()->kind() == c10::prim::NumToTensor;
    case c10::aten::_grad_sum_to_size:
      return true;
    default:
      return false;
  }
}

bool isIntValue(const Value* value) {
  return value->type()->kind() == c10::TypeKind::IntType;
}

// PeepholeOptimizeAliasSensitive without shape peepholes: dim() of a convolution, x + 0 and x - 0 with integer
// scalars, x * 1 with an integer scalar.
bool aliasSensitiveCouldRewrite(const Node* node) {
  switch (node->kind()) {
    case c10::aten::conv1d:
    case c10::aten::conv2d:
    case c10::aten::conv3d: {
      const auto& uses = node->output()->uses();
      return std::any_of(uses.begin(), uses.end(), [](const torch::jit::Use& use) {
        return use.user->kind() == c10::aten::dim;
      });
    }
    case c10::aten::add:
    case c10::aten::sub:
      return node->inputs().size() == 3 && isIntValue(node->input(1)) && isIntValue(node->input(2));
    case c10::aten::mul:
      return node->inputs().size() == 2 && isIntValue(node->input(1));
    default:
      return false;
  }
}

// (prim::ListConstruct always gives a list, the type PyTorch's pass asks for first)
bool builtByListConstruct(const Value* list) {
  return list->node()->kind() == c10::prim::ListConstruct;
}

// PeepholeOptimizeListIdioms (without length refinement) rewrites len(), indexing, unpacking and slicing of a list
// built by prim::ListConstruct, and the sum of two such lists.
bool listIdiomCouldRewrite(const Node* node) {
  switch (node->kind()) {
    case c10::aten::len:
    case c10::aten::__getitem__:
    case c10::prim::ListUnpack:
    case c10::aten::slice:
      return !node->inputs().empty() && builtByListConstruct(node->input(0));
    case c10::aten::add:
      return node->inputs().size() == 2 && builtByListConstruct(node->input(0)) &&
          builtByListConstruct(node->input(1));
    default:
      return false;
  }
}

// PeepholeOptimizeDictIdioms rewrites len() and reads of a dict built by prim::DictConstruct.
bool buildsDict(const Node* node) {
  return node->kind() == c10::prim::DictConstruct;
}

// CombineConcats merges a concatenation whose only reader is a list concatenated again.
bool concatenatedAgain(const Node* node) {
  if (node->kind() != c10::aten::cat) {
    return false;
  }
  const auto& uses = node->output()->uses();
  return std::any_of(uses.begin(), uses.end(), [](const torch::jit::Use& use) {
    if (use.user->kind() != c10::prim::ListConstruct) {
      return false;
    }
    const auto& listUses = use.user->output()->uses();
    return std::any_of(listUses.begin(), listUses.end(), [](const torch::jit::Use& listUse) {
      return listUse.user->kind() == c10::aten::cat;
    });
  });
}

} // namespace

bool peepholeOptimize(const std::shared_ptr<Graph>& graph) {
  if (anyNode(graph->block(), ownRewriteCouldFire)) {
    return torch::jit::PeepholeOptimize(graph, /*disable_shape_peepholes=*/true);
  }
  // PeepholeOptimize's order.
  bool changed = false;
  if (anyNode(graph->block(), listIdiomCouldRewrite)) {
    changed |= torch::jit::PeepholeOptimizeListIdioms(graph, /*refine_list_len=*/false);
  }
  if (anyNode(graph->block(), buildsDict)) {
    changed |= torch::jit::PeepholeOptimizeDictIdioms(graph);
  }
  if (anyNode(graph->block(), aliasSensitiveCouldRewrite)) {
    changed |= torch::jit::PeepholeOptimizeAliasSensitive(graph, /*shape_peepholes=*/false);
  }
  changed |= torch::jit::PeepholeOptimizeNonTensor(graph);
  if (anyNode(graph->block(), concatenatedAgain)) {
    changed |= torch::jit::CombineConcats(graph);
  }
  if (changed) {
    torch::jit::EliminateDeadCode(graph->block());
  }
  return changed;
}

} // namespace torch_mp::jit
