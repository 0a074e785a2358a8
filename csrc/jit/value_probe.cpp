#include "jit/value_probe.h"

#include <torch/csrc/jit/runtime/interpreter.h>

#include <unordered_map>

namespace torch_mp::jit {

std::vector<at::Tensor> probeValues(
    const torch::jit::Module& module,
    const std::vector<c10::IValue>& inputs,
    const std::vector<std::string>& names) {
  // Names come from the module's graph: a copy renumbers the values that have no name of their own, so values
  // are matched to the copy by position.
  const std::shared_ptr<torch::jit::Graph>& original = module.get_method("forward").graph();
  std::shared_ptr<torch::jit::Graph> graph = original->copy();
  std::unordered_map<std::string, torch::jit::Value*> byName;
  auto copied = graph->nodes().begin();
  for (torch::jit::Node* node : original->nodes()) {  // top-level block only: block values cannot be returned
    for (size_t i = 0; i < node->outputs().size(); ++i) {
      byName.emplace(node->output(i)->debugName(), copied->output(i));
    }
    ++copied;
  }
  std::vector<int> slot(names.size(), -1);
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = byName.find(names[i]);
    if (it != byName.end() && it->second->type()->kind() == c10::TypeKind::TensorType) {
      slot[i] = static_cast<int>(graph->registerOutput(it->second));
    }
  }
  torch::jit::Stack stack{module._ivalue()};
  for (const c10::IValue& input : inputs) {
    stack.push_back(input.deepcopy());
  }
  torch::jit::Code code(graph, "torch_mp_probe");
  torch::jit::InterpreterState(code).run(stack);
  std::vector<at::Tensor> probed(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    if (slot[i] >= 0) {
      probed[i] = stack[slot[i]].toTensor();
    }
  }
  return probed;
}

} // namespace torch_mp::jit
