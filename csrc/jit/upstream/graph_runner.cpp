#include "jit/upstream/graph_runner.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <optional>
#include <unordered_set>

#include "jit/ir/ir_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Stack;
using torch::jit::Value;

// Kinds the interpreter runs its own way (instructions, calls, guards) and GraphRunner does not.
bool leftToTheInterpreter(c10::Symbol kind) {
  static const std::unordered_set<c10::Symbol> kinds{
      c10::prim::CallFunction, c10::prim::CallMethod, c10::prim::TypeCheck,      c10::prim::BailOut,
      c10::prim::profile,      c10::prim::profile_ivalue, c10::prim::SetAttr,    c10::prim::CreateObject,
      c10::prim::isinstance,   c10::prim::TupleSlice,  c10::prim::fork,          c10::prim::awaitable,
      c10::aten::wait,         c10::aten::warn,        c10::prim::Enter,         c10::prim::Exit,
      c10::prim::Uninitialized, c10::prim::Closure,    c10::prim::RequiresGradCheck, c10::prim::Guard,
      c10::prim::BailoutTemplate, c10::prim::Drop};
  return kinds.count(kind) > 0;
}

enum class StepKind {
  kOperation,  // the node's registered operation
  kConstant,
  kIf,
  kLoop,
  kGetAttr,
  kListConstruct,
  kTupleConstruct,
  kDictConstruct,
  kListUnpack,
};

StepKind stepKindOf(const Node* node) {
  switch (node->kind()) {
    case c10::prim::Constant:
      return StepKind::kConstant;
    case c10::prim::If:
      return StepKind::kIf;
    case c10::prim::Loop:
      return StepKind::kLoop;
    case c10::prim::GetAttr:
      return StepKind::kGetAttr;
    case c10::prim::ListConstruct:
      return StepKind::kListConstruct;
    case c10::prim::TupleConstruct:
      return StepKind::kTupleConstruct;
    case c10::prim::DictConstruct:
      return StepKind::kDictConstruct;
    case c10::prim::ListUnpack:
      return StepKind::kListUnpack;
    default:
      return StepKind::kOperation;
  }
}

bool runsNode(const Node* node) {
  if (leftToTheInterpreter(node->kind()) || node->hasAttribute(c10::attr::Subgraph)) {
    return false;
  }
  switch (stepKindOf(node)) {
    case StepKind::kIf:
      return node->blocks().size() == 2;
    case StepKind::kLoop:
      return node->blocks().size() == 1;
    case StepKind::kTupleConstruct: {
      const auto tuple = node->output()->type()->cast<c10::TupleType>();
      return tuple && !tuple->schema();  // a named tuple is built with its schema
    }
    case StepKind::kOperation:
      return node->blocks().empty() && node->maybeOperator() != nullptr;
    case StepKind::kConstant:
      return torch::jit::toIValue(node->output()).has_value();  // not a function, which only calls read
    default:
      return node->blocks().empty();
  }
}

} // namespace

// A block's nodes in order, with each value's slot (its Value::unique()) and when it can go.
struct GraphRunner::BlockPlan {
  std::vector<const Value*> inputs;
  std::vector<size_t> unreadInputs;
  std::vector<GraphRunner::Step> steps;
  std::vector<const Value*> outputs;
  std::vector<size_t> clearAtEnd;  // defined here, read by the block's return: the caller takes them, then they go
};

struct GraphRunner::Step {
  StepKind kind = StepKind::kOperation;
  const Node* node = nullptr;
  mutable std::optional<torch::jit::Operation> operation;  // kOperation (calling it is not const)
  bool takesInputCount = false;  // a vararg operation reads its input count from the stack, as the interpreter's OPN
  c10::IValue constant;
  std::vector<size_t> inputs;
  std::vector<const Value*> outputs;
  std::vector<size_t> dropAfter;  // slots whose last reader in this block this step is
  std::vector<GraphRunner::BlockPlan> blocks;
};

namespace {

// The node of `block` that holds `node` (itself, or the node whose blocks hold it).
const Node* holderIn(const Node* node, const Block* block) {
  while (node->owningBlock() != block) {
    node = node->owningBlock()->owningNode();
  }
  return node;
}

class PlanBuilder {
 public:
  GraphRunner::BlockPlan build(const Block* block) {
    GraphRunner::BlockPlan plan;
    size_t index = 0;
    for (const Node* node : block->nodes()) {
      position_[node] = index++;
    }
    plan.inputs.assign(block->inputs().begin(), block->inputs().end());
    for (const Node* node : block->nodes()) {
      plan.steps.push_back(stepFor(node));
    }
    plan.outputs.assign(block->outputs().begin(), block->outputs().end());
    for (const Value* input : block->inputs()) {
      placeDrop(input, block, plan, std::nullopt);
    }
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      for (const Value* output : plan.steps[i].outputs) {
        placeDrop(output, block, plan, i);
      }
    }
    return plan;
  }

 private:
  GraphRunner::Step stepFor(const Node* node) {
    GraphRunner::Step step;
    step.kind = stepKindOf(node);
    step.node = node;
    for (const Value* input : node->inputs()) {
      step.inputs.push_back(input->unique());
    }
    step.outputs.assign(node->outputs().begin(), node->outputs().end());
    if (step.kind == StepKind::kConstant) {
      step.constant = torch::jit::toIValue(node->output()).value();
    } else if (step.kind == StepKind::kOperation) {
      const torch::jit::Operator& op = node->getOperator();
      step.operation = op.getOperation(node);
      step.takesInputCount = op.hasOperation() && op.schema().is_vararg();
    }
    for (const Block* sub : node->blocks()) {
      step.blocks.push_back(build(sub));
    }
    return step;
  }

  // Where the value defined in `block` (by step `definedBy`, or as a block input) is read last.
  void placeDrop(const Value* value, const Block* block, GraphRunner::BlockPlan& plan, std::optional<size_t> definedBy) {
    std::optional<size_t> last;
    bool readAtEnd = false;
    for (const torch::jit::Use& use : value->uses()) {
      const Node* holder = holderIn(use.user, block);
      if (holder == block->return_node()) {
        readAtEnd = true;
      } else {
        last = std::max(last.value_or(0), position_.at(holder));
      }
    }
    if (readAtEnd) {
      plan.clearAtEnd.push_back(value->unique());
    } else if (last) {
      plan.steps[*last].dropAfter.push_back(value->unique());
    } else if (definedBy) {
      plan.steps[*definedBy].dropAfter.push_back(value->unique());
    } else {
      plan.unreadInputs.push_back(value->unique());
    }
  }

  ska::flat_hash_map<const Node*, size_t> position_;  // one allocation per rehash, not one per node
};

size_t largestUnique(const Block* block) {
  size_t largest = 0;
  for (const Value* input : block->inputs()) {
    largest = std::max(largest, input->unique());
  }
  for (const Node* node : block->nodes()) {
    for (const Value* output : node->outputs()) {
      largest = std::max(largest, output->unique());
    }
    for (const Block* sub : node->blocks()) {
      largest = std::max(largest, largestUnique(sub));
    }
  }
  return largest;
}

class Execution {
 public:
  Execution(size_t slots, const GraphRunner::Visitor& visit) : slots_(slots), visit_(visit) {}

  c10::IValue& slot(const Value* value) {
    return slots_[value->unique()];
  }

  void runBlock(const GraphRunner::BlockPlan& plan) {
    for (const Value* input : plan.inputs) {
      visit_(input, slot(input));
    }
    for (size_t unread : plan.unreadInputs) {
      slots_[unread] = c10::IValue();
    }
    for (const GraphRunner::Step& step : plan.steps) {
      runStep(step);
      for (const Value* output : step.outputs) {
        visit_(output, slot(output));
      }
      for (size_t done : step.dropAfter) {
        slots_[done] = c10::IValue();
      }
    }
  }

  // The block's outputs, after which what only they read goes.
  std::vector<c10::IValue> takeOutputs(const GraphRunner::BlockPlan& plan) {
    std::vector<c10::IValue> outputs;
    outputs.reserve(plan.outputs.size());
    for (const Value* output : plan.outputs) {
      outputs.push_back(slot(output));
    }
    for (size_t done : plan.clearAtEnd) {
      slots_[done] = c10::IValue();
    }
    return outputs;
  }

 private:
  void runStep(const GraphRunner::Step& step) {
    switch (step.kind) {
      case StepKind::kConstant:
        slot(step.outputs[0]) = step.constant;
        return;
      case StepKind::kOperation:
        runOperation(step);
        return;
      case StepKind::kIf: {
        const GraphRunner::BlockPlan& branch = step.blocks[slots_[step.inputs[0]].toBool() ? 0 : 1];
        runBlock(branch);
        setOutputs(step, takeOutputs(branch));
        return;
      }
      case StepKind::kLoop:
        runLoop(step);
        return;
      case StepKind::kGetAttr:
        slot(step.outputs[0]) = slots_[step.inputs[0]].toObject()->getAttr(step.node->s(c10::attr::name));
        return;
      case StepKind::kListConstruct: {
        c10::impl::GenericList list(step.outputs[0]->type()->expectRef<c10::ListType>().getElementType());
        list.reserve(step.inputs.size());
        for (size_t input : step.inputs) {
          list.push_back(slots_[input]);
        }
        slot(step.outputs[0]) = std::move(list);
        return;
      }
      case StepKind::kTupleConstruct: {
        std::vector<c10::IValue> elements;
        elements.reserve(step.inputs.size());
        for (size_t input : step.inputs) {
          elements.push_back(slots_[input]);
        }
        slot(step.outputs[0]) = c10::ivalue::Tuple::create(std::move(elements));
        return;
      }
      case StepKind::kDictConstruct: {
        const auto& type = step.outputs[0]->type()->expectRef<c10::DictType>();
        c10::impl::GenericDict dict(type.getKeyType(), type.getValueType());
        dict.reserve(step.inputs.size() / 2);
        for (size_t i = 0; i + 1 < step.inputs.size(); i += 2) {
          dict.insert_or_assign(slots_[step.inputs[i]], slots_[step.inputs[i + 1]]);
        }
        slot(step.outputs[0]) = std::move(dict);
        return;
      }
      case StepKind::kListUnpack: {
        const c10::ArrayRef<c10::IValue> list = slots_[step.inputs[0]].toListRef();
        TORCH_CHECK(
            list.size() == step.outputs.size(), "Expected ", step.outputs.size(), " elements in a list but found ",
            list.size());
        setOutputs(step, std::vector<c10::IValue>(list.begin(), list.end()));
        return;
      }
    }
  }

  void runOperation(const GraphRunner::Step& step) {
    stack_.clear();
    for (size_t input : step.inputs) {
      stack_.push_back(slots_[input]);
    }
    if (step.takesInputCount) {
      stack_.emplace_back(static_cast<int64_t>(step.inputs.size()));
    }
    (*step.operation)(stack_);
    TORCH_INTERNAL_ASSERT(stack_.size() == step.outputs.size(), "torch_mp: ", step.node->kind().toQualString(),
                          " left ", stack_.size(), " values for ", step.outputs.size(), " outputs");
    for (size_t i = 0; i < step.outputs.size(); ++i) {
      slot(step.outputs[i]) = std::move(stack_[i]);
    }
  }

  // prim::Loop(max trip count, condition, carried...): the body takes (iteration, carried...) and returns
  // (condition, carried...).
  void runLoop(const GraphRunner::Step& step) {
    const GraphRunner::BlockPlan& body = step.blocks[0];
    const int64_t trips = slots_[step.inputs[0]].toInt();
    bool proceed = slots_[step.inputs[1]].toBool();
    std::vector<c10::IValue> carried;
    for (size_t i = 2; i < step.inputs.size(); ++i) {
      carried.push_back(slots_[step.inputs[i]]);
    }
    for (int64_t iteration = 0; proceed && iteration < trips; ++iteration) {
      slot(body.inputs[0]) = iteration;
      for (size_t i = 0; i < carried.size(); ++i) {
        slot(body.inputs[i + 1]) = std::move(carried[i]);
      }
      runBlock(body);
      std::vector<c10::IValue> returned = takeOutputs(body);
      proceed = returned[0].toBool();
      carried.assign(std::make_move_iterator(returned.begin() + 1), std::make_move_iterator(returned.end()));
    }
    setOutputs(step, std::move(carried));
  }

  void setOutputs(const GraphRunner::Step& step, std::vector<c10::IValue> values) {
    for (size_t i = 0; i < step.outputs.size(); ++i) {
      slot(step.outputs[i]) = std::move(values[i]);
    }
  }

  std::vector<c10::IValue> slots_;
  Stack stack_;
  const GraphRunner::Visitor& visit_;
};

} // namespace

bool GraphRunner::canRun(const Graph& graph) {
  return !anyNode(graph.block(), [](const Node* node) { return !runsNode(node); });
}

GraphRunner::GraphRunner(const Graph& graph)
    : plan_(std::make_unique<BlockPlan>(PlanBuilder().build(graph.block()))),
      slotCount_(largestUnique(graph.block()) + 1) {}

GraphRunner::~GraphRunner() = default;

Stack GraphRunner::run(Stack inputs, const Visitor& visit) const {
  TORCH_CHECK(inputs.size() == plan_->inputs.size(), "torch_mp: the graph takes ", plan_->inputs.size(),
              " inputs but ", inputs.size(), " were given");
  Execution execution(slotCount_, visit);
  for (size_t i = 0; i < inputs.size(); ++i) {
    execution.slot(plan_->inputs[i]) = std::move(inputs[i]);
  }
  execution.runBlock(*plan_);
  std::vector<c10::IValue> outputs = execution.takeOutputs(*plan_);
  return Stack(std::make_move_iterator(outputs.begin()), std::make_move_iterator(outputs.end()));
}

Stack deepCopies(const Stack& values) {
  Stack copies;
  copies.reserve(values.size());
  for (const c10::IValue& value : values) {
    copies.push_back(value.deepcopy());
  }
  return copies;
}

Stack runGraphOnce(const std::shared_ptr<Graph>& graph, Stack inputs) {
  if (GraphRunner::canRun(*graph)) {
    return GraphRunner(*graph).run(std::move(inputs), [](const Value*, const c10::IValue&) {});
  }
  torch::jit::Code code(graph, "torch_mp_run");  // Code preprocesses a copy: the graph stays as it is
  torch::jit::InterpreterState(code).run(inputs);
  return inputs;
}

} // namespace torch_mp::jit
