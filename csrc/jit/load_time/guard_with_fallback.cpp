#include "jit/load_time/guard_with_fallback.h"

namespace torch_mp::jit {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

std::vector<c10::TensorTypePtr> inputGuards(const Graph& graph) {
  std::vector<c10::TensorTypePtr> guards;
  for (const Value* input : graph.inputs()) {
    auto type = input->type()->cast<c10::TensorType>();
    guards.push_back(type && type->scalarType() && type->device()
                         ? c10::TensorType::get()
                               ->withScalarType(type->scalarType())
                               ->withDevice(type->device())
                               ->withRequiresGrad(false)
                         : nullptr);
  }
  return guards;
}

void guardWithFallback(Graph& graph, const std::vector<c10::TensorTypePtr>& guards, std::shared_ptr<Graph> fallback) {
  std::vector<Value*> checked;
  std::vector<c10::TypePtr> types;
  for (size_t i = 0; i < guards.size(); ++i) {
    if (guards[i]) {
      checked.push_back(graph.inputs()[i]);
      types.push_back(guards[i]);
    }
  }
  if (checked.empty()) {
    return;
  }
  std::vector<Node*> body(graph.nodes().begin(), graph.nodes().end());
  Node* check = graph.create(c10::prim::TypeCheck, checked, checked.size() + 1);
  check->tys_(c10::attr::types, types);
  graph.prependNode(check);
  for (size_t i = 0; i < checked.size(); ++i) {
    check->output(i)->setType(types[i]);
  }
  check->outputs().back()->setType(c10::BoolType::get());

  Node* branch = graph.create(c10::prim::If, {check->outputs().back()}, graph.outputs().size());
  graph.appendNode(branch);
  Block* converted = branch->addBlock();
  Block* original = branch->addBlock();
  for (Node* node : body) {
    node->moveBefore(converted->return_node());
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    converted->registerOutput(graph.outputs()[i]);
    branch->output(i)->setType(graph.outputs()[i]->type());
  }
  for (size_t i = 0; i < checked.size(); ++i) {
    checked[i]->replaceAllUsesAfterNodeWith(check, check->output(i));
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    graph.return_node()->replaceInput(i, branch->output(i));
  }

  Node* call = graph.create(c10::prim::FallbackGraph, graph.inputs(), graph.outputs().size());
  call->g_(c10::attr::Subgraph, std::move(fallback));
  original->appendNode(call);
  for (size_t i = 0; i < call->outputs().size(); ++i) {
    call->output(i)->setType(branch->output(i)->type());
    original->registerOutput(call->output(i));
  }
}
} // namespace torch_mp::jit
