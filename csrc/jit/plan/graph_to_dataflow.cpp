#include "jit/plan/graph_to_dataflow.h"

#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <cctype>
#include <unordered_set>

#include "core/flop_formulas.h"
#include "core/op_facts.h"
#include "jit/ir/module_scope.h"
#include "jit/ir/overload_facts.h"
#include "jit/ir/writers.h"
#include "jit/plan/numeric_guards.h"
#include "jit/plan/state_containers.h"

namespace torch_mp::jit {
namespace {

using core::OpCategory;
using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// What a value means to the planner.
enum class ValueKind {
  kIrrelevant,      // no floating fp32 tensor in it (ints, bools, non-tensors)
  kFp32Tensor,      // an fp32 tensor: a cast candidate
  kOtherFloating,   // a floating tensor of another dtype: its node stays untouched
  kUnknown,         // may hold a tensor (or a container of them), but was never observed
  kContainer,       // a list/tuple/dict holding tensors
};

// What decided a node: its category, the rule's text and kind, the guard that fired, and whether its dtypes were not
// all observed.
struct Classification {
  OpCategory category;
  core::RuleKind kind;
  std::string rule;
  bool unobserved;
  std::optional<core::GuardVerdict> guard;
};

class DataflowBuilder {
 public:
  DataflowBuilder(
      const std::shared_ptr<Graph>& graph,
      const ObservedValues& observed,
      const core::OpPolicy& policy,
      c10::ScalarType lowDtype,
      const NodeRule& nodeRule,
      const KeptFp32& keepFp32,
      const StateContainers* state)
      : graph_(graph),
        observed_(observed),
        policy_(policy),
        nodeRule_(nodeRule),
        keepFp32_(keepFp32),
        state_(state),
        writers_(graph),
        lowDtype_(lowDtype),
        guards_(observed, lowDtype) {
    if (state_) {
      for (const Node* read : state_->reads) {
        stateReads_.insert(read->output());
      }
    }
  }

  DataflowMapping run() {
    reserve(observed_.size() + 2);  // about a planner node per observed value, with the graph's inputs and outputs
    visitGraph();
    if (state_) {
      tieStateContainerReads();
    }
    return std::move(mapping_);
  }

 private:
  ValueKind kindOf(const Value* value) const {
    const c10::TypePtr& type = value->type();
    if (state_) {
      if (stateReads_.count(value)) {
        return ValueKind::kContainer;  // what it holds is known, reached or not
      }
      if (isModule(value)) {
        return ValueKind::kIrrelevant;  // its containers are planned where they are read
      }
    }
    if (mayHoldTensor(type)) {
      auto it = observed_.find(value);
      if (it == observed_.end()) {
        return ValueKind::kUnknown;
      }
      const ObservedValue& seen = it->second;
      if (!seen.isTensor || !c10::isFloatingType(seen.dtype)) {
        return ValueKind::kIrrelevant;
      }
      return seen.dtype == c10::ScalarType::Float ? ValueKind::kFp32Tensor : ValueKind::kOtherFloating;
    }
    if (!isTensorContainer(type)) {
      return ValueKind::kIrrelevant;
    }
    return observed_.count(value) ? ValueKind::kContainer : ValueKind::kUnknown;
  }

  // The TorchScript nodes that share one planner node: a node alone, or a prim::If / prim::Loop with the input
  // and output nodes of its blocks.
  static std::vector<Node*> boundariesOf(Node* node) {
    std::vector<Node*> boundaries;
    for (Block* block : node->blocks()) {
      boundaries.push_back(block->param_node());
      boundaries.push_back(block->return_node());
    }
    return boundaries;
  }

  // The node's category, the rule behind it and that rule's kind, or nothing when the node does not touch the plan.
  // The rules, first match wins: graph inputs and outputs; nodes not reached by the example inputs; nodes with a
  // floating tensor that is not fp32; the user's forced-low rule (over every guard below, which the report still
  // gives); the observed-range guard; the underflow-to-zero guard; control flow; the constant-range guard; the
  // user's choices (userChoice); the op policy (a constant-table lookup it lets follow runs low); unknown ops. Then
  // two demotions of what those chose: a low_fp32_output node writing a tensor list keeps fp32, a low one summing
  // nothing follows (core::sumsNothing). A node that would compute low or follow keeps fp32 where a scalar it reads is
  // lost in the low dtype.
  std::optional<Classification> classify(Node* node, const std::vector<Node*>& boundaries, std::optional<NodeId> id) {
    bool relevant = false;
    bool unknown = false;
    bool otherFloating = false;
    auto inspect = [&](const Value* value) {
      switch (kindOf(value)) {
        case ValueKind::kIrrelevant:
          return;
        case ValueKind::kUnknown:
          unknown = true;
          break;
        case ValueKind::kOtherFloating:
          otherFloating = true;
          break;
        case ValueKind::kFp32Tensor:
        case ValueKind::kContainer:
          break;
      }
      relevant = true;
    };
    for (const Node* member : boundaries) {
      for (const Value* input : member->inputs()) {
        inspect(input);
      }
      for (const Value* output : member->outputs()) {
        inspect(output);
      }
    }
    for (const Value* input : node->inputs()) {
      inspect(input);
    }
    for (const Value* output : node->outputs()) {
      inspect(output);
      // an output completed statically (inferUnreachedDtypes) comes from a node that never ran: left as it is,
      // unless it only views or copies its input (planning it moves no value through another dtype than its
      // input's)
      auto seen = observed_.find(output);
      unknown = unknown || (seen != observed_.end() && seen->second.inferred && !preservesDtype(node));
    }
    if (!relevant) {
      return std::nullopt;
    }
    Classification decided{OpCategory::kFp32, core::RuleKind::kPolicy, "", unknown, std::nullopt};
    auto fp32Because = [&](core::RuleKind kind, std::string rule) {
      decided.category = OpCategory::kFp32;
      decided.kind = kind;
      decided.rule = std::move(rule);
      return decided;
    };
    auto guarded = [&](core::GuardVerdict verdict) {
      decided.guard = std::move(verdict);
      return fp32Because(core::RuleKind::kRangeGuard, describeGuard(*decided.guard, lowDtype_));
    };
    const bool controlFlow = node->kind() == c10::prim::If || node->kind() == c10::prim::Loop;
    if (node->kind() == c10::prim::Param) {
      return fp32Because(core::RuleKind::kIo, "input: keeps its dtype");
    }
    if (node->kind() == c10::prim::Return) {
      return fp32Because(core::RuleKind::kIo, "output: keeps its dtype");
    }
    if (unknown) {
      ++mapping_.unobservedNodes;
      return fp32Because(
          core::RuleKind::kUnobserved,
          controlFlow ? "control flow with a branch not reached by the example inputs: boundaries keep their dtype"
                      : "dtype unknown: not reached by the example inputs");
    }
    if (otherFloating) {
      return fp32Because(core::RuleKind::kNotFp32, "has a floating tensor that is not fp32: left as it is");
    }
    std::optional<core::GuardVerdict> guard = guards_.observedOutOfRange(node, boundaries);
    if (!guard) {
      guard = guards_.underflowToZero(node);
    }
    if (std::optional<std::string> forced = controlFlow ? std::nullopt : forcedLow(node, id)) {
      decided.category = OpCategory::kLowPrecision;
      decided.kind = core::RuleKind::kForcedLow;
      decided.rule = "low: forced: " + *forced;
      // the guard it overrides, if one would have kept it fp32
      decided.guard = guard ? std::move(guard) : guards_.constantOutOfRange(node);
      if (!decided.guard) {
        decided.guard = guards_.scalarLostInLowDtype(node);
      }
      return decided;
    }
    if (guard) {
      return guarded(std::move(*guard));
    }
    std::optional<core::GuardVerdict> constantGuard;
    if (controlFlow) {
      decided.category = OpCategory::kFollow;
      decided.kind = core::RuleKind::kControlFlow;
      decided.rule = "follow: control flow; values crossing its block boundaries share one precision";
    } else if (constantGuard = guards_.constantOutOfRange(node); constantGuard) {
      return guarded(std::move(*constantGuard));
    } else if (std::optional<NodeOverride> chosen = userChoice(node, id)) {
      decided.category = chosen->category;
      decided.kind = chosen->kind;
      decided.rule = std::string(core::toString(chosen->category)) + ": " + chosen->reason;
    } else if (const core::OpPolicy::Match match = policy_.match(node->kind().toQualString()); match.entry) {
      decided.category = match.entry->category;
      decided.kind = match.entry->noFastKernel ? core::RuleKind::kNoFastKernel : core::RuleKind::kPolicy;
      decided.rule = std::string(core::toString(decided.category)) + ": " + match.entry->reason;
      if (match.via != node->kind().toQualString()) {
        decided.rule += " [in place, as " + match.via + "]";
      }
      const char* lookup = core::factsOf(node->kind().toQualString()).tableLookup;
      if (lookup && decided.category == OpCategory::kFollow && readsConstantTable(node)) {
        decided.category = OpCategory::kLowPrecision;
        decided.rule = std::string("low: ") + lookup +
            " that is a constant: the table is stored once, in the low dtype, and only what is read is cast";
      }
    } else {
      const std::string op = node->kind().toQualString();
      if (std::find(mapping_.unknownOps.begin(), mapping_.unknownOps.end(), op) == mapping_.unknownOps.end()) {
        mapping_.unknownOps.push_back(op);
      }
      return fp32Because(core::RuleKind::kUnknownOp, "fp32: in no list (unknown op)");
    }
    if (decided.category == OpCategory::kLowFp32Output && writesContainer(node)) {
      decided.category = OpCategory::kFp32;
      decided.kind = core::RuleKind::kWritesTensorList;
      decided.rule += " [fp32 instead: it writes a list or tuple of tensors, which one cast cannot make fp32]";
    }
    if (core::computesLow(decided.category) && sumsNothing(node)) {
      decided.category = OpCategory::kFollow;
      decided.kind = core::RuleKind::kSumsNothing;
      decided.rule += " [follow instead: nothing to sum (an outer product), so low precision would only round "
                      "its inputs, say positions or timesteps]";
    }
    if (decided.category != OpCategory::kFp32) {
      if (std::optional<core::GuardVerdict> guard = guards_.scalarLostInLowDtype(node)) {
        return guarded(std::move(*guard));
      }
    }
    return decided;
  }

  // The reason of the policy's forced-low rule for the node (by its id, else by op and module path), unless the
  // verification's repair or the accuracy fallback keeps it fp32 (they measured that it must be).
  std::optional<std::string> forcedLow(const Node* node, std::optional<NodeId> id) {
    if ((policy_.forcedLow().empty() && policy_.forcedLowNodes().empty()) ||
        (id && (keepFp32_.nonFinite.count(*id) || keepFp32_.fallback.count(*id)))) {
      return std::nullopt;
    }
    if (const std::string* reason = id ? policy_.forcedLowNode(std::to_string(*id)) : nullptr) {
      return *reason;
    }
    const core::ModuleRule* rule = policy_.forcedLowFor(node->kind().toQualString(), scopes_.of(node));
    return rule ? std::make_optional(rule->reason) : std::nullopt;
  }

  // What the user asks of the node, first match wins: the nodes the verification's repair keeps, the accuracy
  // fallback's kept nodes, the policy's exclusions, the node rule.
  std::optional<NodeOverride> userChoice(const Node* node, std::optional<NodeId> id) {
    if (id && keepFp32_.nonFinite.count(*id)) {
      return NodeOverride{OpCategory::kFp32, core::RuleKind::kNonFinite,
                          "verification: in low precision its output was NaN or inf where fp32's is finite"};
    }
    if (id && keepFp32_.fallback.count(*id)) {
      return NodeOverride{OpCategory::kFp32, core::RuleKind::kFallback,
                          "accuracy fallback: keeping it in fp32 brings the error within tolerance"};
    }
    if (policy_.exclusions().empty() && !nodeRule_) {
      return std::nullopt;
    }
    const std::string op = node->kind().toQualString();
    const std::string& scope = scopes_.of(node);
    if (const core::ModuleRule* exclusion = policy_.exclusionFor(op, scope)) {
      return NodeOverride{OpCategory::kFp32, core::RuleKind::kExclusion, "excluded: " + exclusion->reason};
    }
    if (!nodeRule_) {
      return std::nullopt;
    }
    NodeDescription description;
    description.id = id.value_or(-1);
    description.op = op;
    description.scope = scope;
    description.output = node->outputs().empty() ? "" : node->output(0)->debugName();
    const c10::FunctionSchema* schema = node->maybeSchema();
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      const Value* input = node->input(i);
      auto it = observed_.find(input);
      const bool tensor = it != observed_.end() && it->second.isTensor;
      description.inputShapes.push_back(tensor ? knownSizes(it->second) : std::nullopt);
      description.inputDtypes.push_back(tensor ? std::make_optional(it->second.dtype) : std::nullopt);
      if (schema && i < schema->arguments().size() && input->node()->kind() == c10::prim::Constant &&
          !input->type()->cast<c10::TensorType>()) {
        description.constants.emplace_back(schema->arguments()[i].name(), *torch::jit::toIValue(input));
      }
    }
    return nodeRule_(description);
  }

  void addUses(const Node* consumer, int index) {
    for (size_t i = 0; i < consumer->inputs().size(); ++i) {
      auto it = mapping_.values.find(consumer->input(i));
      if (it != mapping_.values.end()) {
        mapping_.dataflow.addUse(it->second, index, accessOf(consumer, i));
      }
    }
  }

  // A tensor argument the schema neither writes nor lets the result alias is only read: a cast of it made right
  // before the node reads the same data. Anything else (containers, blocks, ops without a schema) shares it. Where no
  // overload of the op aliases the argument, the node's own overload is not matched.
  core::Access accessOf(const Node* consumer, size_t offset) {
    if (!consumer->blocks().empty() || consumer->input(offset)->type()->kind() != c10::TypeKind::TensorType) {
      return core::Access::kShares;
    }
    if (overloads_.noneAliasesArgument(consumer, offset)) {
      return core::Access::kReadsOnly;
    }
    const c10::FunctionSchema* schema = consumer->maybeSchema();
    const bool readsOnly = schema && offset < schema->arguments().size() && !schema->arguments()[offset].alias_info();
    return readsOnly ? core::Access::kReadsOnly : core::Access::kShares;
  }

  void addOutputs(const Node* producer, int index) {
    for (const Value* output : producer->outputs()) {
      const ValueKind kind = kindOf(output);
      if (kind != ValueKind::kFp32Tensor && kind != ValueKind::kContainer) {
        continue;
      }
      int64_t castBytes = 0;
      if (kind == ValueKind::kFp32Tensor) {
        const int64_t numel = std::max<int64_t>(observed_.at(output).numel, 1);
        castBytes = numel * static_cast<int64_t>(sizeof(float) + c10::elementSize(lowDtype_));
      }
      mapping_.values.emplace(output, mapping_.dataflow.addValue(index, castBytes, tieOf(producer, output, kind)));
    }
  }

  core::Tie tieOf(const Node* producer, const Value* output, ValueKind kind) const {
    if (kind != ValueKind::kFp32Tensor || output->type()->kind() != c10::TypeKind::TensorType) {
      return core::Tie::kAll;  // a container or an Optional: one cast cannot convert what it holds
    }
    if (!writers_.hasWriters(output) || neverWrittenThroughItsUses(output)) {
      return core::Tie::kNone;
    }
    return returnsFresh(producer, output) ? core::Tie::kReaders : core::Tie::kAll;
  }

  // Whether the node's table is a constant that can be stored once, low (core::OpPolicy::storesTableLow over every
  // node reading it: a language model's output layer tied to its embedding runs low where the device has fast
  // kernels). Otherwise apply_precision_plan stores a table read in both precisions once, fp32.
  bool readsConstantTable(const Node* node) {
    const void* storage = node->inputs().empty() ? nullptr : constantStorage(node->input(0));
    if (!storage) {
      return false;
    }
    if (!storages_) {
      storages_ = constantStorages(*graph_);
    }
    std::vector<core::OpPolicy::TableReader> readers;
    for (const Node* reader : storages_->at(storage).readers) {
      readers.push_back({reader->kind().toQualString(),
                         !reader->inputs().empty() && constantStorage(reader->input(0)) == storage});
    }
    return policy_.storesTableLow(readers);
  }

  // Whether following the value's uses, through the views and in-place results that alias it, reaches no write and
  // nothing the walk cannot see through (containers, blocks, ops without a schema). AliasDb answers for graph inputs
  // and list members through its wildcard set, so it finds writers of any tensor a list holds in every graph input;
  // this walk is exact where it answers and says false where it cannot.
  static bool neverWrittenThroughItsUses(const Value* value) {
    std::vector<const Value*> work{value};
    std::unordered_set<const Value*> reached{value};
    while (!work.empty()) {
      const Value* aliased = work.back();
      work.pop_back();
      for (const torch::jit::Use& use : aliased->uses()) {
        const Node* user = use.user;
        if (user == aliased->owningGraph()->return_node()) {
          continue;  // handed to the caller, unwritten inside the graph
        }
        const c10::FunctionSchema* schema = user->maybeSchema();
        if (!schema || !user->blocks().empty() || use.offset >= schema->arguments().size()) {
          return false;
        }
        const c10::AliasInfo* argument = schema->arguments()[use.offset].alias_info();
        if (!argument) {
          continue;  // read only, nothing aliases it
        }
        if (argument->isWrite() || argument->isWildcardBefore()) {
          return false;
        }
        for (size_t r = 0; r < schema->returns().size() && r < user->outputs().size(); ++r) {
          const c10::AliasInfo* result = schema->returns()[r].alias_info();
          if (result && result->beforeSets() == argument->beforeSets() && reached.insert(user->output(r)).second) {
            work.push_back(user->output(r));
          }
        }
      }
    }
    return true;
  }

  // Whether the output is a tensor its producer allocated (its schema gives it no alias set): then a copy made
  // right after the producer, read by every use, is the same program. Block inputs and outputs, graph inputs and
  // aliasing results (in-place ops, views, list reads) are not.
  static bool returnsFresh(const Node* producer, const Value* output) {
    const c10::FunctionSchema* schema = producer->maybeSchema();
    if (!schema || !producer->blocks().empty()) {
      return false;
    }
    return schema->returns().size() == producer->outputs().size() &&
        !schema->returns()[output->offset()].alias_info();
  }

  // core::sumsNothing of the node: its einsum equation, or its first input's observed sizes.
  bool sumsNothing(const Node* node) const {
    std::optional<std::string> equation;
    if (node->kind() == c10::aten::einsum) {
      equation = torch::jit::constant_as<std::string>(node->input(0));
    }
    auto left = observed_.find(node->input(0));
    const bool observedTensor = left != observed_.end() && left->second.isTensor;
    return core::sumsNothing(
        node->kind().toQualString(), equation, observedTensor ? knownSizes(left->second) : std::nullopt);
  }

  bool writesContainer(const Node* node) const {
    for (const Value* output : node->outputs()) {
      if (kindOf(output) == ValueKind::kContainer) {
        return true;
      }
    }
    return false;
  }

  // Adds the node (with its blocks' boundaries) and visits its blocks. Values are registered before they are
  // used: the node's outputs and block inputs first, the uses of block outputs after the blocks are visited.
  void addNode(Node* node) {
    const std::vector<Node*> boundaries = boundariesOf(node);
    int index = -1;
    const std::optional<NodeId> id = nodeIdOf(node);
    if (std::optional<Classification> decided = classify(node, boundaries, id)) {
      index = mapping_.dataflow.addNode(decided->category);
      mapping_.planned.push_back(PlannedNode{node, boundaries, id.value_or(-1), decided->kind,
                                             std::move(decided->rule), std::move(decided->guard),
                                             decided->unobserved});
      addUses(node, index);
      addOutputs(node, index);
      for (const Node* boundary : boundaries) {
        if (boundary->kind() == c10::prim::Param) {
          addOutputs(boundary, index);
        }
      }
    }
    for (Block* block : node->blocks()) {
      visitNodes(block);
    }
    if (index < 0) {
      return;
    }
    for (const Node* boundary : boundaries) {
      if (boundary->kind() == c10::prim::Return) {
        addUses(boundary, index);
      }
    }
  }

  void visitNodes(Block* block) {
    for (Node* node : block->nodes()) {
      if (node->kind() != c10::prim::Constant) {
        addNode(node);
      }
    }
  }

  // Sized once for about `nodes` planner nodes (and as many values: a node has most often one output); growing them a
  // doubling at a time costs more than filling them. Not counted: counting walks the whole graph once more.
  void reserve(size_t nodes) {
    mapping_.dataflow.nodes.reserve(nodes);
    mapping_.dataflow.values.reserve(nodes);
    mapping_.planned.reserve(nodes);
    mapping_.values.reserve(nodes);
  }

  void visitGraph() {
    addNode(graph_->block()->param_node());
    visitNodes(graph_->block());
    addNode(graph_->block()->return_node());
  }

  // Every read of one state container shares the precision of its first read: one tied value, which no cast can
  // convert, from that read to the others.
  void tieStateContainerReads() {
    // the planner node of each read: a map of the few reads, not of the whole graph's planner nodes
    std::unordered_map<const Node*, size_t> readIndex;
    for (size_t r = 0; r < state_->reads.size(); ++r) {
      readIndex.emplace(state_->reads[r], r);
    }
    std::vector<int> plannerNode(state_->reads.size(), -1);
    for (size_t n = 0; n < mapping_.planned.size() && !readIndex.empty(); ++n) {
      if (auto read = readIndex.find(mapping_.planned[n].node); read != readIndex.end()) {
        plannerNode[read->second] = static_cast<int>(n);
      }
    }
    std::vector<int> tie(state_->containers.size(), -1);
    mapping_.stateContainerNodes.assign(state_->containers.size(), -1);
    for (size_t r = 0; r < state_->reads.size(); ++r) {
      const int read = plannerNode[r];
      if (read < 0) {
        continue;
      }
      const size_t container = state_->containerOf[r];
      if (mapping_.stateContainerNodes[container] < 0) {
        mapping_.stateContainerNodes[container] = read;
        tie[container] = mapping_.dataflow.addValue(read, 0, core::Tie::kAll);
      } else {
        mapping_.dataflow.addUse(tie[container], read);
      }
    }
  }

  const std::shared_ptr<Graph>& graph_;
  const ObservedValues& observed_;
  const core::OpPolicy& policy_;
  const NodeRule& nodeRule_;
  const KeptFp32& keepFp32_;
  const StateContainers* state_;
  std::unordered_set<const Value*> stateReads_;
  // the constant storages and their readers, found at the first table lookup that asks
  std::optional<std::unordered_map<const void*, ConstantStorage>> storages_;
  WriterQuery writers_;
  OverloadFacts overloads_;
  ModuleScopes scopes_;
  c10::ScalarType lowDtype_;
  DataflowMapping mapping_;
  NumericGuards guards_;
};

} // namespace

const ObservedValue* observedFp32(const ObservedValues& observed, const Value* value) {
  auto it = observed.find(value);
  const bool fp32 = it != observed.end() && it->second.isTensor && it->second.dtype == c10::ScalarType::Float;
  return fp32 ? &it->second : nullptr;
}

bool isObservedFp32(const ObservedValues& observed, const Value* value) {
  return observedFp32(observed, value) != nullptr;
}

DataflowMapping buildDataflow(
    const std::shared_ptr<Graph>& graph,
    const ObservedValues& observed,
    const core::OpPolicy& policy,
    c10::ScalarType lowDtype,
    const NodeRule& nodeRule,
    const KeptFp32& keepFp32,
    const StateContainers* state) {
  return DataflowBuilder(graph, observed, policy, lowDtype, nodeRule, keepFp32, state).run();
}

} // namespace torch_mp::jit
