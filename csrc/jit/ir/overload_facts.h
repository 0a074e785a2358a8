// What holds for every overload a node could match, so its own overload need not be matched to know it.
//
// Matching a node to its overload (Node::maybeOperator) compares its kind's name and input types with each overload's
// schema, about a microsecond a node; a node caches its match, but nodes a pass creates (thousands of casts) and a
// graph nobody has matched yet pay it per node. A node can only match an overload of its kind that takes as many
// arguments as it has inputs (TorchScript spells out defaulted arguments), which leaves out the `.out` forms that
// make most aten ops writers. Where all those candidates agree (none writes; none lets the result alias argument i),
// the answer holds for the node's overload too: every node of a graph that ran matched one. One instance per walk:
// it caches per kind and input count, and the operator registry may grow between conversions.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace torch_mp::jit {

class OverloadFacts {
 public:
  // Whether the node has candidate overloads and none of them writes (a write annotation, or alias analysis that is
  // neither pure nor from the schema).
  bool noneWrites(const torch::jit::Node* node);
  // Whether the node has candidate overloads, none of variadic arguments, and none gives argument `offset` an alias
  // set.
  bool noneAliasesArgument(const torch::jit::Node* node, size_t offset);

 private:
  struct Facts {
    bool known = false;         // has candidates, none variadic
    bool noneWrites = false;
    std::vector<bool> aliased;  // per argument: whether some candidate gives it an alias set
  };
  const Facts& factsOf(const torch::jit::Node* node);

  std::unordered_map<uint64_t, Facts> facts_;  // by kind and input count
};

// Whether AliasDb registers a write for a node of this overload: a write annotation, or alias analysis that is
// neither pure nor from the schema.
bool operatorMayWrite(const torch::jit::Operator& op);

} // namespace torch_mp::jit
