#include "jit/upstream/merge_equal_nodes.h"

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/node_hashing.h>
#include <torch/csrc/jit/passes/common_subexpression_elimination.h>
#include <torch/csrc/jit/passes/constant_pooling.h>

#include <ATen/Dispatch.h>
#include <c10/util/hash.h>
#include <c10/util/Load.h>
#include <c10/util/flat_hash_map.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <optional>

#include "jit/ir/writers.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// Up to this many of a tensor constant's elements, evenly spaced, go into its hash.
constexpr int64_t kSampledElements = 16;
// The dtypes whose values are sampled (AT_DISPATCH_ALL_TYPES_AND3's below).
constexpr std::array<c10::ScalarType, 10> kSampledDtypes{
    c10::kByte, c10::kChar, c10::kShort, c10::kInt, c10::kLong, c10::kFloat, c10::kDouble, c10::kHalf,
    c10::kBFloat16, c10::kBool};

// PyTorch's HashNode with tensorValueHash for tensor constants: only equal (and rare look-alike) tensors meet, where
// PyTorch's hash compares each new weight with every one kept, quadratic in the number of weights.
struct HashNodeAndValue {
  size_t operator()(const Node* node) const {
    const size_t hash = torch::jit::HashNode{}(node);
    if (node->kind() != c10::prim::Constant || !node->hasAttribute(c10::attr::value) ||
        node->kindOf(c10::attr::value) != torch::jit::AttributeKind::t) {
      return hash;
    }
    return c10::hash_combine(hash, tensorValueHash(node->t(c10::attr::value)));
  }
};

// A node with its hash, computed once: a lookup in each enclosing block's set and the insertion share it, and the set
// rehashes without hashing nodes again.
struct HashedNode {
  explicit HashedNode(Node* node) : node(node), hash(HashNodeAndValue{}(node)) {}
  Node* node;
  size_t hash;
};

struct HashOfHashedNode {
  size_t operator()(const HashedNode& hashed) const {
    return hashed.hash;
  }
};

struct EqualHashedNodes {
  bool operator()(const HashedNode& a, const HashedNode& b) const {
    return a.hash == b.hash && torch::jit::EqualNode{}(a.node, b.node);
  }
};

// Nodes kept, one of each class of equal nodes, in an open-addressing set (a node-based one allocates per node).
class EqualNodes {
 public:
  // The kept node equal to `node`, or nullptr.
  Node* find(const HashedNode& node) const {
    const auto found = nodes_.find(node);
    return found == nodes_.end() ? nullptr : found->node;
  }

  // Keeps `node` and returns nullptr, or returns the kept node equal to it.
  Node* keep(const HashedNode& node) {
    const auto [kept, inserted] = nodes_.insert(node);
    return inserted ? nullptr : kept->node;
  }

 private:
  ska::flat_hash_set<HashedNode, HashOfHashedNode, EqualHashedNodes> nodes_;
};

// Whether alias analysis may track a value of this type: anything but the immutable scalars, and optionals and
// tuples of them. Saying "tracked" of an untracked type only costs building the AliasDb, which then answers.
bool mayBeTracked(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::NoneType:
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::ComplexType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::NumberType:
    case c10::TypeKind::StringType:
    case c10::TypeKind::DeviceObjType:
      return false;
    case c10::TypeKind::OptionalType:
    case c10::TypeKind::TupleType: {
      const auto contained = type->containedTypes();
      return std::any_of(contained.begin(), contained.end(), mayBeTracked);
    }
    default:
      return true;
  }
}

bool anyMayBeTracked(at::ArrayRef<Value*> values) {
  return std::any_of(values.begin(), values.end(), [](const Value* value) { return mayBeTracked(value->type()); });
}

// The AliasDb questions the passes ask before a merge, for a graph where no node writes, built on the first question
// about tracked values.
class MergeSafety {
 public:
  explicit MergeSafety(std::shared_ptr<Graph> graph) : graph_(std::move(graph)) {}

  // AliasDb::safeToChangeAliasingRelationship: not both may alias the graph's inputs, outputs or the wildcard set.
  bool safeToChangeAliasing(at::ArrayRef<Value*> a, at::ArrayRef<Value*> b) {
    return !anyMayBeTracked(a) || !anyMayBeTracked(b) || aliasDb().safeToChangeAliasingRelationship(a, b);
  }

  // Whether both may contain an alias of the graph's outputs (CSE would make graph outputs alias).
  bool bothMayAliasOutputs(at::ArrayRef<Value*> a, at::ArrayRef<Value*> b) {
    if (!anyMayBeTracked(a) || !anyMayBeTracked(b)) {
      return false;
    }
    const auto outputs = graph_->outputs();
    return aliasDb().mayContainAlias(a, outputs) && aliasDb().mayContainAlias(b, outputs);
  }

 private:
  torch::jit::AliasDb& aliasDb() {
    if (!aliasDb_) {
      aliasDb_ = std::make_unique<torch::jit::AliasDb>(graph_);
    }
    return *aliasDb_;
  }

  std::shared_ptr<Graph> graph_;
  std::unique_ptr<torch::jit::AliasDb> aliasDb_;
};

void poolBlock(Block* block, EqualNodes& constants, MergeSafety& safety) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    Node* node = *it;
    ++it;  // the node may move or go
    if (!node->blocks().empty()) {
      for (Block* sub : node->blocks()) {
        poolBlock(sub, constants, safety);
      }
      continue;
    }
    if (node->kind() != c10::prim::Constant) {
      continue;
    }
    if (Node* kept = constants.keep(HashedNode(node))) {
      const std::optional<c10::IValue> keptValue = torch::jit::toIValue(kept->output());
      const std::optional<c10::IValue> value = torch::jit::toIValue(node->output());
      const bool sameObject = keptValue && value && keptValue->is(*value);
      if (!sameObject && !safety.safeToChangeAliasing(node->outputs(), kept->outputs())) {
        continue;
      }
      node->replaceAllUsesWith(kept);
      node->destroy();
      continue;
    }
    Node* first = node->owningGraph()->block()->nodes().front();
    if (node != first) {
      node->moveBefore(first);
    }
  }
}

// `enclosing` finds an equal node in the blocks around `block`.
bool eliminateInBlock(Block* block, const std::function<Node*(const HashedNode&)>& enclosing, MergeSafety& safety) {
  EqualNodes seen;
  bool changed = false;
  for (auto it = block->nodes().begin(); it != block->nodes().end(); ++it) {
    Node* node = *it;
    if (node->kind() == c10::prim::profile || node->hasSideEffects() || node->isNondeterministic()) {
      continue;
    }
    if (!node->blocks().empty()) {
      for (Block* sub : node->blocks()) {
        changed |= eliminateInBlock(
            sub,
            [&](const HashedNode& inner) {
              Node* found = seen.find(inner);
              return found ? found : enclosing(inner);
            },
            safety);
      }
      continue;
    }
    const HashedNode hashed(node);
    if (Node* outer = enclosing(hashed)) {
      if (!safety.safeToChangeAliasing(node->outputs(), outer->outputs())) {
        continue;
      }
      node->replaceAllUsesWith(outer);
      it.destroyCurrent();
      changed = true;
      continue;
    }
    if (Node* kept = seen.keep(hashed)) {
      if (safety.bothMayAliasOutputs(node->outputs(), kept->outputs())) {
        continue;
      }
      node->replaceAllUsesWith(kept);
      it.destroyCurrent();
      changed = true;
    }
  }
  return changed;
}

} // namespace

size_t tensorValueHash(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.layout() != c10::kStrided || tensor.is_nested()) {
    return 0;
  }
  size_t hash = c10::get_hash(tensor.sizes().vec());
  const int64_t count = tensor.numel();
  const c10::ScalarType dtype = tensor.scalar_type();
  const bool readable = tensor.device().is_cpu() && !tensor.is_quantized() && count > 0 &&
      std::find(kSampledDtypes.begin(), kSampledDtypes.end(), dtype) != kSampledDtypes.end();
  if (!readable) {
    return hash;
  }
  const int64_t samples = std::min(count, kSampledElements);
  const bool zeros = tensor._is_zerotensor();  // no storage behind it: every element is 0
  const at::Tensor values = tensor.is_neg() ? tensor.resolve_neg() : tensor;  // a negative view stores -values
  AT_DISPATCH_ALL_TYPES_AND3(c10::kHalf, c10::kBFloat16, c10::kBool, dtype, "tensorValueHash", [&] {
    const scalar_t* data = zeros ? nullptr : values.const_data_ptr<scalar_t>();
    for (int64_t sample = 0; sample < samples; ++sample) {
      int64_t flat = samples == 1 ? 0 : sample * (count - 1) / (samples - 1);
      int64_t offset = 0;
      for (int64_t dim = values.dim() - 1; dim >= 0; --dim) {
        offset += (flat % values.size(dim)) * values.stride(dim);
        flat /= values.size(dim);
      }
      // c10::load reads a bool as at::equal does (any nonzero byte is true)
      const double value = zeros ? 0.0 : static_cast<double>(c10::load<scalar_t>(data + offset));
      hash = c10::hash_combine(hash, std::isnan(value) ? 0 : std::hash<double>{}(value));
    }
  });
  return hash;
}

void poolConstants(const std::shared_ptr<Graph>& graph) {
  if (graphMayWrite(*graph)) {
    torch::jit::ConstantPooling(graph);
    return;
  }
  MergeSafety safety(graph);
  EqualNodes constants;
  poolBlock(graph->block(), constants, safety);
}

bool eliminateCommonSubexpressions(const std::shared_ptr<Graph>& graph) {
  if (graphMayWrite(*graph)) {
    return torch::jit::EliminateCommonSubexpression(graph);
  }
  MergeSafety safety(graph);
  return eliminateInBlock(graph->block(), [](const HashedNode&) -> Node* { return nullptr; }, safety);
}

} // namespace torch_mp::jit
