#include "jit/plan/graph_to_dataflow.h"

#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <unordered_set>

#include "core/classify_node.h"
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

  // What core::classifyNode decided of the node, from the facts gathered here, and whether a tensor it reads or
  // writes was not observed; nothing when the node does not touch the plan.
  std::optional<std::pair<core::NodeDecision, bool>> classify(Node* node, const std::vector<Node*>& boundaries,
                                             std::optional<NodeId> id) {
    bool relevant = false;
    core::NodeFacts facts;
    auto inspect = [&](const Value* value) {
      switch (kindOf(value)) {
        case ValueKind::kIrrelevant:
          return;
        case ValueKind::kUnknown:
          facts.unobserved = true;
          break;
        case ValueKind::kOtherFloating:
          facts.notFp32 = true;
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
      facts.unobserved = facts.unobserved || (seen != observed_.end() && seen->second.inferred && !preservesDtype(node));
    }
    if (!relevant) {
      return std::nullopt;
    }
    facts.op = node->kind().toQualString();
    facts.scope = scopes_.of(node);
    facts.id = id ? std::to_string(*id) : "";
    facts.boundary = node->kind() == c10::prim::Param ? core::Boundary::kInput
        : node->kind() == c10::prim::Return            ? core::Boundary::kOutput
                                                        : core::Boundary::kNone;
    if (node->kind() == c10::prim::If || node->kind() == c10::prim::Loop) {
      facts.controlFlow = core::ControlFlow::kPlannedBlocks;
    }
    facts.keptNonFinite = id && keepFp32_.nonFinite.count(*id);
    facts.keptByFallback = id && keepFp32_.fallback.count(*id);
    facts.observedRange = guards_.observedOutOfRange(node, boundaries);
    facts.underflowToZero = guards_.underflowToZero(node);
    facts.constantRange = guards_.constantOutOfRange(node);
    facts.lostScalar = guards_.scalarLostInLowDtype(node);
    facts.readsTableStoredLow = core::factsOf(facts.op).tableLookup && readsConstantTable(node);
    facts.writesTensorList = writesContainer(node);
    facts.sumsNothing = sumsNothing(node);
    core::NodeDecision decided = core::classifyNode(facts, policy_, toLowDtype(lowDtype_), [&] {
      return nodeRule_ ? nodeRule_(describe(node, facts, id)) : std::nullopt;
    });
    if (decided.kind == core::RuleKind::kUnobserved) {
      ++mapping_.unobservedNodes;
    } else if (decided.kind == core::RuleKind::kUnknownOp &&
               std::find(mapping_.unknownOps.begin(), mapping_.unknownOps.end(), facts.op) ==
                   mapping_.unknownOps.end()) {
      mapping_.unknownOps.push_back(facts.op);
    }
    return std::make_pair(std::move(decided), facts.unobserved);
  }

  // What the user's per-node rule sees of the node.
  NodeDescription describe(const Node* node, const core::NodeFacts& facts, std::optional<NodeId> id) const {
    NodeDescription description;
    description.id = id.value_or(-1);
    description.op = facts.op;
    description.scope = facts.scope;
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
    return description;
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
      const int64_t castBytes = kind == ValueKind::kFp32Tensor ? core::fp32CastBytes(observed_.at(output).numel) : 0;
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
    if (node->inputs().empty()) {
      return false;
    }
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
    if (auto classified = classify(node, boundaries, id)) {
      core::NodeDecision& decided = classified->first;
      index = mapping_.dataflow.addNode(decided.category);
      mapping_.planned.push_back(PlannedNode{node, boundaries, id.value_or(-1), decided.kind, std::move(decided.rule),
                                             std::move(decided.reason), std::move(decided.guard),
                                             classified->second});
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
