#include "jit/report/value_probe.h"

#include <torch/csrc/jit/runtime/interpreter.h>

#include <unordered_map>

namespace torch_mp::jit {

std::vector<at::Tensor> probeNodeOutputs(
    const torch::jit::Module& module,
    const std::vector<c10::IValue>& inputs,
    const std::vector<NodeId>& ids) {
  std::shared_ptr<torch::jit::Graph> graph = module.get_method("forward").graph()->copy();  // ids come along
  std::unordered_map<NodeId, torch::jit::Value*> firstOutput;
  for (torch::jit::Node* node : graph->nodes()) {  // top-level block only: block values cannot be returned
    const std::optional<NodeId> id = nodeIdOf(node);
    if (id && !node->outputs().empty()) {
      firstOutput.emplace(*id, node->output(0));
    }
  }
  std::vector<int> slot(ids.size(), -1);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = firstOutput.find(ids[i]);
    if (it != firstOutput.end() && it->second->type()->kind() == c10::TypeKind::TensorType) {
      slot[i] = static_cast<int>(graph->registerOutput(it->second));
    }
  }
  torch::jit::Stack stack{c10::IValue(module._ivalue()).deepcopy()};  // what the module keeps stays as it is
  for (const c10::IValue& input : inputs) {
    stack.push_back(input.deepcopy());
  }
  torch::jit::Code code(graph, "torch_mp_probe");
  torch::jit::InterpreterState(code).run(stack);
  std::vector<at::Tensor> probed(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (slot[i] >= 0 && stack[slot[i]].isTensor()) {  // a Tensor-typed value may hold prim::Uninitialized's value
      probed[i] = stack[slot[i]].toTensor();
    }
  }
  return probed;
}

} // namespace torch_mp::jit
