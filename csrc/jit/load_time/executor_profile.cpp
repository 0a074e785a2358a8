#include "jit/load_time/executor_profile.h"

#include <torch/csrc/jit/passes/clear_profiling.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>

#include <functional>
#include <unordered_map>

#include "jit/ir/observed_values.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

bool isProfile(const Node* node) {
  return node->kind() == c10::prim::profile || node->kind() == c10::prim::profile_ivalue;
}

bool executed(const Node* profile) {
  if (!profile->hasAttribute(c10::attr::profiled_type)) {
    return false;
  }
  auto type = profile->ty(c10::attr::profiled_type)->cast<c10::TensorType>();
  return type && type->scalarType();
}

// What the profile says about the graph: whether any tensor was profiled, whether one needed a gradient.
void scanProfiles(const Block* block, bool& profiled, bool& needsGradient) {
  for (const Node* node : block->nodes()) {
    for (const Block* sub : node->blocks()) {
      scanProfiles(sub, profiled, needsGradient);
    }
    if (node->kind() == c10::prim::profile && executed(node)) {
      profiled = true;
      needsGradient = needsGradient || node->ty(c10::attr::profiled_type)->expectRef<c10::TensorType>()
                                           .requiresGrad().value_or(false);
    }
  }
}

// Whether the graph reads tensors from module attributes (prim::GetAttr) and holds no tensor constant: a module
// that was not frozen. A frozen graph may still read the few tensors freezing leaves as attributes (those it cannot
// prove unmutated, such as MultiheadAttention's in_proj_weight): they are planned like activations, cast per call.
void scanTensorSources(const Block* block, bool& readsAttributes, bool& holdsConstants) {
  for (const Node* node : block->nodes()) {
    for (const Block* sub : node->blocks()) {
      scanTensorSources(sub, readsAttributes, holdsConstants);
    }
    if (node->kind() == c10::prim::GetAttr) {
      readsAttributes = readsAttributes || containsTensor(node->output()->type());
    } else if (node->kind() == c10::prim::Constant) {
      holdsConstants = holdsConstants || node->output()->type()->kind() == c10::TypeKind::TensorType;
    }
  }
}

// Removes the profile nodes `remove` picks, their readers reading the profiled value itself.
void removeProfiles(Block* block, const std::function<bool(const Node*)>& remove) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    for (Block* sub : it->blocks()) {
      removeProfiles(sub, remove);
    }
    if (isProfile(*it) && remove(*it)) {
      for (size_t i = 0; i < it->outputs().size(); ++i) {
        it->output(i)->replaceAllUsesWith(it->input(i));
      }
      it.destroyCurrent();
    } else {
      ++it;
    }
  }
}

// The profiled type of the value (from a profile node reading it that ran), or nullptr.
c10::TensorTypePtr profiledType(const Value* value) {
  for (const torch::jit::Use& use : value->uses()) {
    if (use.user->kind() == c10::prim::profile && executed(use.user)) {
      return use.user->ty(c10::attr::profiled_type)->expect<c10::TensorType>();
    }
  }
  return nullptr;
}

// Whether the profile shows the block ran (a profile node in it, at any depth, ran), did not (it has profile
// nodes, none ran), or cannot tell (it has none).
std::optional<bool> profiledAsRun(const Block* block) {
  std::optional<bool> ran;
  for (const Node* node : block->nodes()) {
    for (const Block* sub : node->blocks()) {
      const std::optional<bool> subRan = profiledAsRun(sub);
      if (subRan == true) {
        return true;
      }
      ran = ran.has_value() || subRan.has_value() ? std::make_optional(false) : ran;
    }
    if (node->kind() == c10::prim::profile) {
      if (executed(node)) {
        return true;
      }
      ran = false;
    }
  }
  return ran;
}

// The executor profiles values where nodes read them, not where blocks return them: a tensor that the branch taken
// returns and nothing else reads (the output of nn.TransformerEncoderLayer's fast path, returned through two nested
// Ifs) has no profile of its own. Where the profile tells which branch of an If ran, what it returned is what the
// If's output was profiled as (or was found to be, outer Ifs first). Collects those types, to be set once the
// profile nodes are gone.
void typesOfBranchReturns(Block* block, std::unordered_map<Value*, c10::TensorTypePtr>& types) {
  for (Node* node : block->nodes()) {
    if (node->kind() == c10::prim::If) {
      const std::optional<bool> first = profiledAsRun(node->blocks()[0]);
      const std::optional<bool> second = profiledAsRun(node->blocks()[1]);
      Block* taken = nullptr;
      if (first == true || (first != false && second == false)) {
        taken = second == true ? nullptr : node->blocks()[0];  // both ran: profiled more than once
      } else if (second == true || (second != false && first == false)) {
        taken = node->blocks()[1];
      }
      for (size_t i = 0; taken && i < node->outputs().size(); ++i) {
        Value* returned = taken->outputs()[i];
        if (returned->node()->kind() == c10::prim::profile) {
          if (executed(returned->node())) {
            continue;  // typed by its profile
          }
          returned = returned->node()->input();  // the profile goes with the unrun ones; the value stays
        }
        auto known = types.find(node->output(i));
        c10::TensorTypePtr type = known != types.end() ? known->second : profiledType(node->output(i));
        if (type && !profiledType(returned) && returned->type()->kind() == c10::TypeKind::TensorType) {
          types.emplace(returned, type);
        }
      }
    }
    for (Block* sub : node->blocks()) {
      typesOfBranchReturns(sub, types);
    }
  }
}

// Whether the node writes its first argument in place and returns it (`aten::add_`, `aten::relu_`).
bool returnsItsWrittenSelf(const Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  return schema && !schema->arguments().empty() && schema->returns().size() == 1 &&
      schema->arguments()[0].alias_info() && schema->arguments()[0].alias_info()->isWrite() &&
      schema->returns()[0].alias_info() && schema->returns()[0].alias_info()->isWrite();
}

// The result of an in-place op is its first argument: same dtype, device and sizes. The executor profiles where
// values are read, and the result of `out.add_(identity)` often is not, though the functional op that replaces it
// (RemoveTensorMutation, in the clean-up) is what the rest of the graph reads.
void typeInPlaceResults(Block* block) {
  for (Node* node : block->nodes()) {
    for (Block* sub : node->blocks()) {
      typeInPlaceResults(sub);
    }
    if (!returnsItsWrittenSelf(node)) {
      continue;
    }
    auto self = node->input(0)->type()->cast<c10::TensorType>();
    auto result = node->output()->type()->cast<c10::TensorType>();
    if (self && self->scalarType() && result && !result->scalarType()) {
      node->output()->setType(self);
    }
  }
}

} // namespace

SkipReason whyNotConvertible(const Graph& graph) {
  bool profiled = false;
  bool needsGradient = false;
  scanProfiles(graph.block(), profiled, needsGradient);
  if (!profiled) {
    return SkipReason::kNoProfile;
  }
  if (needsGradient) {
    return SkipReason::kNeedsGradient;
  }
  bool readsAttributes = false;
  bool holdsConstants = false;
  scanTensorSources(graph.block(), readsAttributes, holdsConstants);
  if (readsAttributes && !holdsConstants) {
    return SkipReason::kNotFrozen;
  }
  return SkipReason::kNone;
}

std::shared_ptr<Graph> unprofiledCopy(Graph& graph) {
  std::shared_ptr<Graph> copy = graph.copy();
  removeProfiles(copy->block(), [](const Node*) { return true; });
  torch::jit::ClearProfilingInformation(copy);
  return copy;
}

void specializeProfiledTypes(std::shared_ptr<Graph>& graph) {
  std::unordered_map<Value*, c10::TensorTypePtr> branchReturns;
  typesOfBranchReturns(graph->block(), branchReturns);
  // Profiles that never ran (in branches not taken) go first. PyTorch's RemoveProfileNodesAndSpecializeTypes leaves
  // a value unspecialized when its profiles differ, and an unrun profile (no dtype) always differs from a run one:
  // a tensor read in the branch not taken and returned by the one taken (`if not is_batched: output =
  // output.squeeze(1)` in nn.GRU / LSTM / MultiheadAttention) would lose its dtype.
  removeProfiles(graph->block(), [](const Node* profile) {
    return profile->kind() == c10::prim::profile && !executed(profile);
  });
  torch::jit::RemoveProfileNodesAndSpecializeTypes(graph);
  removeProfiles(graph->block(), [](const Node*) { return true; });  // profile_ivalue nodes, which that pass leaves
  for (const auto& [value, type] : branchReturns) {
    if (!value->type()->expectRef<c10::TensorType>().scalarType()) {
      value->setType(type);
    }
  }
  typeInPlaceResults(graph->block());
}

} // namespace torch_mp::jit
