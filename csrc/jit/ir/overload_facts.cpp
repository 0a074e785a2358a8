#include "jit/ir/overload_facts.h"

#include <torch/csrc/jit/runtime/operator.h>

namespace torch_mp::jit {

bool operatorMayWrite(const torch::jit::Operator& op) {
  switch (op.aliasAnalysisKind()) {
    case c10::AliasAnalysisKind::PURE_FUNCTION:
      return false;
    case c10::AliasAnalysisKind::FROM_SCHEMA:
      return op.schema().is_mutable();
    default:  // CONSERVATIVE writes every input; INTERNAL_SPECIAL_CASE may write
      return true;
  }
}

const OverloadFacts::Facts& OverloadFacts::factsOf(const torch::jit::Node* node) {
  const size_t inputs = node->inputs().size();
  const uint64_t key = (static_cast<uint64_t>(static_cast<c10::unique_t>(node->kind())) << 32) | inputs;
  auto [it, added] = facts_.try_emplace(key);
  if (!added) {
    return it->second;
  }
  Facts& facts = it->second;
  facts.known = true;
  facts.noneWrites = true;
  facts.aliased.assign(inputs, false);
  bool candidates = false;
  for (const auto& op : torch::jit::getAllOperatorsFor(node->kind())) {
    const c10::FunctionSchema& schema = op->schema();
    const std::vector<c10::Argument>& arguments = schema.arguments();
    if (schema.is_vararg() ? arguments.size() > inputs : arguments.size() != inputs) {
      continue;  // a node never matches it (Node::matches)
    }
    candidates = true;
    facts.known = facts.known && !schema.is_vararg();
    facts.noneWrites = facts.noneWrites && !operatorMayWrite(*op);
    for (size_t i = 0; i < arguments.size(); ++i) {
      facts.aliased[i] = facts.aliased[i] || arguments[i].alias_info();
    }
  }
  facts.known = facts.known && candidates;
  return facts;
}

bool OverloadFacts::noneWrites(const torch::jit::Node* node) {
  const Facts& facts = factsOf(node);
  return facts.known && facts.noneWrites;
}

bool OverloadFacts::noneAliasesArgument(const torch::jit::Node* node, size_t offset) {
  const Facts& facts = factsOf(node);
  return facts.known && offset < facts.aliased.size() && !facts.aliased[offset];
}

} // namespace torch_mp::jit
