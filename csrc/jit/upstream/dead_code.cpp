#include "jit/upstream/dead_code.h"

#include <c10/util/flat_hash_map.h>
#include <torch/csrc/jit/ir/ir_views.h>
#include <torch/csrc/jit/jit_log.h>

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// An inverse mark and sweep. Marked live: the graph's outputs, the nodes with side effects, and whatever a live node
// reads, block by block from the last node up (a loop body until nothing new is marked, since a carried value read
// in the next iteration is live). Then every node neither marked nor read goes, after the outputs of its branches and
// loops that nobody reads.
class DeadCodeSweeper {
 public:
  void run(Block* block) {
    removeUnreadForkInputs(block);
    markNode(block->return_node());
    markBlock(block);
    sweep(block);
  }

 private:
  // As PyTorch's pass does, including its step past the input after each one it erases.
  static void removeUnreadForkInputs(Block* block) {
    for (Node* node : block->nodes()) {
      for (Block* sub : node->blocks()) {
        removeUnreadForkInputs(sub);
      }
      if (node->kind() != c10::prim::fork) {
        continue;
      }
      torch::jit::Graph& subgraph = *node->g(c10::attr::Subgraph);
      for (size_t i = 0; i < subgraph.inputs().size(); ++i) {
        if (!subgraph.inputs()[i]->hasUses()) {
          subgraph.eraseInput(i);
          node->removeInput(i);
        }
      }
    }
  }

  // Each mark* returns whether it marked anything not marked before.
  bool markBlock(Block* block) {
    bool marked = false;
    for (Node* node : block->nodes()) {
      if (hasSideEffects(node)) {
        marked |= markNode(node);
      }
    }
    marked |= markReturn(block->return_node());
    for (auto it = block->nodes().rbegin(); it != block->nodes().rend(); ++it) {
      Node* node = *it;
      if (node->kind() == c10::prim::Loop) {
        marked |= markLoop(node);
      } else {
        for (Block* sub : node->blocks()) {
          marked |= markBlock(sub);
        }
      }
      marked |= markIfLive(node);
    }
    return marked;
  }

  bool markLoop(Node* loop) {
    bool marked = false;
    while (markBlock(loop->blocks()[0])) {
      marked = true;
    }
    return marked;
  }

  // A block's return node reads a value for its owner only where the owner's matching output is live; a loop body's
  // carried value also where the body reads it in the next iteration, and its condition always. The graph's own
  // return node (and an autodiff reverse block's) reads all it returns.
  bool markReturn(Node* ret) {
    if (marked_.count(ret)) {
      return false;
    }
    Node* owner = ret->owningBlock()->owningNode();
    if (!owner || owner->kind() == c10::prim::Reverse) {
      return markNode(ret);
    }
    if (owner->kind() == c10::prim::Loop) {
      const torch::jit::LoopView loop(owner);
      for (size_t i = 0; i < loop.carriedOutputs().size(); ++i) {
        if (live_.count(loop.carriedOutputs()[i]) || loop.bodyCarriedInputs()[i]->hasUses()) {
          live_.insert(loop.bodyCarriedOutputs()[i]);
        }
      }
      live_.insert(loop.nextCond());
    } else {
      TORCH_INTERNAL_ASSERT(owner->outputs().size() == ret->inputs().size());
      for (size_t i = 0; i < owner->outputs().size(); ++i) {
        if (live_.count(owner->outputs()[i])) {
          live_.insert(ret->inputs()[i]);
        }
      }
    }
    marked_.insert(ret);
    return true;
  }

  bool markIfLive(Node* node) {
    for (const Value* output : node->outputs()) {
      if (live_.count(output)) {
        return markNode(node);
      }
    }
    return false;
  }

  // A live node makes the nodes holding it live, and what it reads.
  bool markNode(Node* node) {
    if (!marked_.insert(node).second) {
      return false;
    }
    if (node->owningBlock()) {
      if (Node* owner = node->owningBlock()->owningNode()) {
        markNode(owner);
      }
    }
    for (const Value* input : node->inputs()) {
      live_.insert(input);
    }
    return true;
  }

  // A side effect of its own or of a node in its blocks, or a mutable schema (without alias information a write's
  // effects are unknown).
  bool hasSideEffects(Node* node) {
    if (auto known = sideEffects_.find(node); known != sideEffects_.end()) {
      return known->second;
    }
    bool effects = node->hasSideEffects();
    for (Block* sub : node->blocks()) {
      for (Node* inner : sub->nodes()) {
        effects = effects || hasSideEffects(inner);
      }
    }
    if (!effects) {
      const c10::FunctionSchema* schema = node->maybeSchema();
      effects = schema && schema->is_mutable();
    }
    sideEffects_.emplace(node, effects);
    return effects;
  }

  void sweep(Block* block) {
    auto nodes = block->nodes().reverse();
    for (auto it = nodes.begin(); it != nodes.end(); ++it) {
      Node* node = *it;
      removeUnreadBranchOutputs(node);
      removeUnreadLoopValues(node);
      for (Block* sub : node->blocks()) {
        sweep(sub);
      }
      if (!marked_.count(node) && !node->hasUses()) {
        GRAPH_UPDATE("Removed dead ", node->kind().toQualString());
        it.destroyCurrent();
      }
    }
  }

  static void removeUnreadBranchOutputs(Node* node) {
    if (node->kind() != c10::prim::If && node->kind() != c10::prim::GradOf) {
      return;
    }
    for (size_t i = node->outputs().size(); i-- > 0;) {
      if (!node->outputs()[i]->hasUses()) {
        node->eraseOutput(i);
        for (Block* sub : node->blocks()) {
          sub->eraseOutput(i);
        }
      }
    }
  }

  // A carried value that neither the loop's user nor the body reads: its input, body input, body output and output.
  static void removeUnreadLoopValues(Node* node) {
    if (node->kind() != c10::prim::Loop) {
      return;
    }
    constexpr size_t kFirstCarriedInput = 2;      // after the trip count and the initial condition
    constexpr size_t kFirstCarriedBodyValue = 1;  // after the iteration number (inputs), the next condition (outputs)
    Block* body = node->blocks()[0];
    for (size_t i = node->outputs().size(); i-- > 0;) {
      if (!node->outputs()[i]->hasUses() && !body->inputs()[kFirstCarriedBodyValue + i]->hasUses()) {
        node->eraseOutput(i);
        node->removeInput(kFirstCarriedInput + i);
        body->eraseInput(kFirstCarriedBodyValue + i);
        body->eraseOutput(kFirstCarriedBodyValue + i);
      }
    }
  }

  ska::flat_hash_set<const Node*> marked_;
  ska::flat_hash_set<const Value*> live_;
  ska::flat_hash_map<const Node*, bool> sideEffects_;
};

} // namespace

void eliminateDeadCodeWithoutAliases(Block* block) {
  DeadCodeSweeper().run(block);
}

} // namespace torch_mp::jit
