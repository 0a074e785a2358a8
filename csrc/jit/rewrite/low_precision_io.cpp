#include "jit/rewrite/low_precision_io.h"

#include <torch/csrc/jit/jit_log.h>

#include "jit/ir/ir_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

bool isFp32Tensor(const Value* value) {
  return value->type()->kind() == c10::TypeKind::TensorType && recordedDtype(value) == c10::ScalarType::Float;
}

class IOLowering {
 public:
  IOLowering(const std::shared_ptr<Graph>& graph, c10::ScalarType lowDtype, CastLedger& casts)
      : graph_(graph), castArguments_(*graph), lowDtype_(lowDtype), casts_(casts) {}

  bool run() {
    for (Value* input : graph_->inputs()) {
      if (isFp32Tensor(input)) {
        lowerInput(input);
      }
    }
    Node* returns = graph_->return_node();
    for (size_t i = 0; i < returns->inputs().size(); ++i) {
      torch::jit::WithInsertPoint guard(returns);
      returns->replaceInput(i, lowerOutput(returns->input(i)));
    }
    return changed_;
  }

 private:
  void lowerInput(Value* input) {
    torch::jit::WithInsertPoint guard(graph_->block()->nodes().front());
    Value* fp32 = casts_.create(castArguments_, input, c10::ScalarType::Float);
    input->replaceAllUsesWith(fp32);
    fp32->node()->replaceInput(0, input);
    input->setType(input->type()->expectRef<c10::TensorType>().withScalarType(lowDtype_));
    GRAPH_UPDATE("input %", input->debugName(), " now arrives in ", lowDtype_);
    changed_ = true;
  }

  // The value to return in place of `value`, built at the insertion point.
  Value* lowerOutput(Value* value) {
    if (isFp32Tensor(value)) {
      changed_ = true;
      GRAPH_UPDATE("output %", value->debugName(), " is returned in ", lowDtype_);
      return casts_.create(castArguments_, value, lowDtype_);
    }
    auto tuple = value->type()->cast<c10::TupleType>();
    if (!tuple || tuple->schema() || !holdsFp32Tensor(value)) {
      return value;  // named tuples keep their type; nothing to lower otherwise
    }
    std::vector<Value*> elements;
    for (Value* element : value->node()->inputs()) {
      elements.push_back(lowerOutput(element));
    }
    return graph_->insertNode(graph_->createTuple(elements))->output();
  }

  // Whether lowering would change a tuple: one of its elements (at any depth) is an fp32 tensor by its type.
  bool holdsFp32Tensor(const Value* value) const {
    if (value->node()->kind() != c10::prim::TupleConstruct) {
      return false;  // elements of a tuple made elsewhere carry no recorded dtype
    }
    for (const Value* element : value->node()->inputs()) {
      if (isFp32Tensor(element) || holdsFp32Tensor(element)) {
        return true;
      }
    }
    return false;
  }

  const std::shared_ptr<Graph>& graph_;
  CastArguments castArguments_;
  c10::ScalarType lowDtype_;
  CastLedger& casts_;
  bool changed_ = false;
};

} // namespace

bool LowerGraphIO(const std::shared_ptr<Graph>& graph, c10::ScalarType lowDtype, CastLedger& casts) {
  GRAPH_DUMP("Before LowerGraphIO", graph);
  const bool changed = IOLowering(graph, lowDtype, casts).run();
  GRAPH_DUMP("After LowerGraphIO", graph);
  return changed;
}

c10::IValue lowerInputValue(const c10::IValue& value, c10::ScalarType lowDtype) {
  if (!value.isTensor() || !value.toTensor().defined() || value.toTensor().scalar_type() != c10::ScalarType::Float) {
    return value;
  }
  return value.toTensor().to(lowDtype);
}

} // namespace torch_mp::jit
