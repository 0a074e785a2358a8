#include "jit/upstream/fold_frozen_patterns.h"

#include <torch/csrc/jit/passes/frozen_concat_linear.h>
#include <torch/csrc/jit/passes/frozen_conv_folding.h>
#include <torch/csrc/jit/passes/frozen_linear_folding.h>
#include <torch/csrc/jit/passes/remove_dropout.h>

#include <algorithm>
#include <array>

#include "jit/ir/ir_utils.h"
#include "jit/ir/writers.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;

bool isOneOf(c10::Symbol kind, c10::ArrayRef<c10::Symbol> kinds) {
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

// What removeDropout removes (in inference mode).
constexpr std::array<c10::Symbol, 4> kDropouts{
    c10::aten::dropout, c10::aten::dropout_, c10::aten::feature_dropout, c10::aten::feature_dropout_};
// What the convolution folds fold into (transposed _convolution excluded there, not here).
constexpr std::array<c10::Symbol, 4> kConvolutions{
    c10::aten::conv1d, c10::aten::conv2d, c10::aten::conv3d, c10::aten::_convolution};
constexpr std::array<c10::Symbol, 1> kLinears{c10::aten::linear};
constexpr std::array<c10::Symbol, 1> kBatchNorms{c10::aten::batch_norm};
constexpr std::array<c10::Symbol, 2> kAddsAndSubs{c10::aten::add, c10::aten::sub};
constexpr std::array<c10::Symbol, 2> kMulsAndDivs{c10::aten::mul, c10::aten::div};

// A fold of OptimizeFrozenGraph's repeated round, and what it rewrites: a node of a `readers` kind reading the result
// of a node of a `producers` kind.
struct Fold {
  bool (*pass)(std::shared_ptr<Graph>&);
  c10::ArrayRef<c10::Symbol> producers;
  c10::ArrayRef<c10::Symbol> readers;
};

// In OptimizeFrozenGraph's order.
const std::array<Fold, 4> kFolds{{
    {torch::jit::FoldFrozenConvBatchnorm, kConvolutions, kBatchNorms},
    {torch::jit::FoldFrozenConvAddOrSub, kConvolutions, kAddsAndSubs},
    {torch::jit::FoldFrozenConvMulOrDiv, kConvolutions, kMulsAndDivs},
    {torch::jit::FoldFrozenLinearBatchnorm, kLinears, kBatchNorms},
}};

// What the folds look for, found in one walk over the graph.
struct Patterns {
  int64_t dropouts = 0;
  bool linearsShareAnInput = false;  // what FrozenConcatLinear concatenates
  std::array<bool, kFolds.size()> folds{};  // whether the graph holds each fold's pattern
};

bool readsProducerOf(const Node* node, const Fold& fold) {
  if (!isOneOf(node->kind(), fold.producers)) {
    return false;
  }
  const auto& uses = node->output(0)->uses();
  return std::any_of(uses.begin(), uses.end(), [&](const torch::jit::Use& use) {
    return isOneOf(use.user->kind(), fold.readers);
  });
}

bool sharesItsInputWithALinear(const Node* linear) {
  const auto& uses = linear->input(0)->uses();
  return std::count_if(uses.begin(), uses.end(), [](const torch::jit::Use& use) {
           return use.user->kind() == c10::aten::linear && use.offset == 0;
         }) > 1;
}

Patterns findPatterns(const Graph& graph) {
  Patterns found;
  anyNode(graph.block(), [&](const Node* node) {
    if (isOneOf(node->kind(), kDropouts)) {
      ++found.dropouts;
    }
    if (node->kind() == c10::aten::linear && !found.linearsShareAnInput) {
      found.linearsShareAnInput = sharesItsInputWithALinear(node);
    }
    for (size_t i = 0; i < kFolds.size(); ++i) {
      found.folds[i] = found.folds[i] || readsProducerOf(node, kFolds[i]);
    }
    return false;
  });
  return found;
}

} // namespace

bool FoldFrozenPatterns(std::shared_ptr<Graph>& graph) {
  bool changed = false;
  Patterns found = findPatterns(*graph);
  if (found.dropouts > 0) {
    torch::jit::removeDropout(graph);
    const Patterns after = findPatterns(*graph);
    changed = after.dropouts != found.dropouts;
    found = after;
  }
  if (found.linearsShareAnInput) {
    changed |= torch::jit::FrozenConcatLinear(graph);
    found = findPatterns(*graph);
  }
  for (bool folded = true; folded;) {
    folded = false;
    for (size_t i = 0; i < kFolds.size(); ++i) {
      if (found.folds[i]) {
        folded |= kFolds[i].pass(graph);
        found = findPatterns(*graph);  // what the fold left, for the next ones
      }
    }
    changed |= folded;
  }
  eliminateDeadCode(graph);
  return changed;
}

} // namespace torch_mp::jit
