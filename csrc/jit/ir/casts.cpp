#include "jit/ir/casts.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include "jit/ir/ir_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kCastMark = c10::Symbol::attr("torch_mp_cast");

} // namespace

std::optional<c10::ScalarType> plainCastTarget(const Node* node) {
  if (node->kind() != c10::aten::to || node->inputs().size() != 5 ||
      node->input(1)->type()->kind() != c10::TypeKind::IntType) {  // not aten::to.other(Tensor, Tensor, ...)
    return std::nullopt;
  }
  auto dtype = torch::jit::constant_as<int64_t>(node->input(1));
  auto nonBlocking = torch::jit::constant_as<bool>(node->input(2));
  auto copy = torch::jit::constant_as<bool>(node->input(3));
  auto memoryFormat = torch::jit::toIValue(node->input(4));
  if (!dtype || !nonBlocking || *nonBlocking || !copy || *copy || !memoryFormat || !memoryFormat->isNone()) {
    return std::nullopt;
  }
  return static_cast<c10::ScalarType>(*dtype);
}

Node* CastArguments::nodeAheadOfInsertPoint() {
  Node* point = graph_.insertPoint();
  // A pass inserting at the top of the graph may point at one of these constants: its casts go after them instead.
  while (constants_.count(point)) {
    point = point->next();
  }
  graph_.setInsertPoint(point);
  while (point->owningBlock() != graph_.block()) {
    point = point->owningBlock()->owningNode();
  }
  return point;
}

Value* CastArguments::shared(Value*& cached, const c10::IValue& constant, Node* ahead) {
  if (!cached || cached->uses().size() >= kReadersPerConstant) {
    torch::jit::WithInsertPoint guard(ahead);
    cached = graph_.insertConstant(constant);
    constants_.insert(cached->node());
  } else if (!cached->node()->isBefore(ahead)) {
    cached->node()->moveBefore(ahead);  // a constant reads nothing: earlier, it still dominates its other readers
  }
  return cached;
}

std::array<Value*, 5> CastArguments::of(Value* value, c10::ScalarType dtype) {
  Node* ahead = nodeAheadOfInsertPoint();
  Value* target = shared(dtypes_[dtype], dtype, ahead);
  Value* no = shared(false_, false, ahead);
  return {value, target, no, no, shared(none_, c10::IValue(), ahead)};
}

Value* insertCast(CastArguments& arguments, Value* value, c10::ScalarType dtype) {
  const std::array<Value*, 5> inputs = arguments.of(value, dtype);
  Graph& graph = arguments.graph();
  Node* cast = graph.insertNode(graph.create(c10::aten::to, inputs));
  c10::TypePtr type = c10::TensorType::get();
  if (auto tensorType = value->type()->cast<c10::TensorType>()) {
    type = tensorType->withScalarType(dtype);
  }
  cast->output()->setType(type);
  return cast->output();
}

Value* CastLedger::create(CastArguments& arguments, Value* value, c10::ScalarType dtype) {
  Value* cast = insertCast(arguments, value, dtype);
  cast->node()->i_(kCastMark, 1);
  GRAPH_UPDATE("Cast ", value->debugName(), " to ", c10::toString(dtype));
  return cast;
}

bool CastLedger::created(const Node* node) {
  return node->hasAttribute(kCastMark);
}

void CastLedger::fuse(Node* cast) {
  TORCH_INTERNAL_ASSERT(!cast->output()->hasUses(), "torch_mp: a fused cast still has readers");
  if (created(cast)) {
    fusedCasts_ += 1;
    fusedCastBytes_ += recordOf(cast).bytes;
  }
  GRAPH_UPDATE("Fused cast ", cast->output()->debugName(), " into its readers");
  cast->destroy();
}

void CastLedger::cancel(Node* cast, Value* sameValue) {
  GRAPH_UPDATE("Cancelled cast ", cast->output()->debugName());
  cast->output()->replaceAllUsesWith(sameValue);
  cast->destroy();
}

CastRecord CastLedger::recordOf(const Node* cast) const {
  const Value* source = cast->input(0);
  const c10::ScalarType from = recordedDtype(source).value();
  const c10::ScalarType to = recordedDtype(cast->output()).value();
  auto it = observed_.find(source);
  const bool reached = it != observed_.end() && blockRan(cast->owningBlock(), observed_);
  const int64_t numel = reached ? it->second.numel : 0;
  CastRecord record;
  record.value = source->debugName();
  record.from = c10::toString(from);
  record.to = c10::toString(to);
  record.bytes = numel * static_cast<int64_t>(c10::elementSize(from) + c10::elementSize(to));
  record.reached = reached;
  return record;
}

bool CastLedger::takeMark(Node* node) {
  if (!created(node)) {
    return false;
  }
  node->removeAttribute(kCastMark);
  return true;
}

} // namespace torch_mp::jit
