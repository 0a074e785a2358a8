#include "jit/load_time/calibration_inputs.h"

#include <torch/csrc/jit/runtime/custom_operator.h>

#include <mutex>
#include <unordered_map>

namespace torch_mp::jit {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Stack;
using torch::jit::Value;

constexpr const char* kRecordOp = "torch_mp::record_calibration_inputs";
constexpr const char* kMarkerOp = "torch_mp::calibration_marker";

struct Recordings {
  std::mutex mutex;
  int64_t nextKey = 0;
  std::unordered_map<int64_t, std::vector<Stack>> open;  // keys not yet taken
};

Recordings& recordings() {
  static Recordings instance;
  return instance;
}

// Runs `torch_mp::record_calibration_inputs(key, inputs...)`: a copy of the inputs, since the graph may write to
// them in place; the module object (a method's first input) is shared, not copied.
torch::jit::Operation recordInputs(const Node* node) {
  const size_t count = node->inputs().size();
  return [count](Stack& stack) {
    const int64_t key = stack[stack.size() - count].toInt();
    Recordings& r = recordings();
    {
      std::lock_guard<std::mutex> lock(r.mutex);
      auto entry = r.open.find(key);
      if (entry == r.open.end() || entry->second.size() >= kMaxCalibrationRuns) {
        torch::jit::drop(stack, count);  // every run once converted: nothing copied
        return;
      }
    }
    Stack inputs(stack.end() - static_cast<std::ptrdiff_t>(count) + 1, stack.end());
    torch::jit::drop(stack, count);
    for (c10::IValue& input : inputs) {
      if (!input.isObject()) {
        input = input.deepcopy();
      }
    }
    std::lock_guard<std::mutex> lock(r.mutex);
    auto entry = r.open.find(key);
    if (entry != r.open.end() && entry->second.size() < kMaxCalibrationRuns) {
      entry->second.push_back(std::move(inputs));
    }
  };
}

const torch::jit::RegisterOperators registerCalibrationOps({
    torch::jit::Operator(std::string(kRecordOp) + "(...) -> ()", recordInputs, c10::AliasAnalysisKind::CONSERVATIVE),
    // Only marks a graph for the pass; side effects keep it from being removed as dead code before the pass sees it.
    torch::jit::Operator(
        std::string(kMarkerOp) + "(int key) -> ()",
        [](Stack& stack) { torch::jit::drop(stack, 1); },
        c10::AliasAnalysisKind::CONSERVATIVE),
});

} // namespace

std::shared_ptr<Graph> recordingGraph(std::shared_ptr<Graph> fp32) {
  Recordings& r = recordings();
  int64_t key = 0;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    key = r.nextKey++;
    r.open.emplace(key, std::vector<Stack>{});
  }
  {
    torch::jit::WithInsertPoint start(fp32->block()->nodes().front());
    fp32->insertNode(fp32->create(c10::Symbol::fromQualString(kMarkerOp), {fp32->insertConstant(key)}, 0));
  }

  auto graph = std::make_shared<Graph>();
  std::vector<Value*> inputs;
  for (const Value* input : fp32->inputs()) {
    inputs.push_back(graph->addInput(input->debugNameBase())->setType(input->type()));
  }
  std::vector<Value*> recorded{graph->insertConstant(key)};
  recorded.insert(recorded.end(), inputs.begin(), inputs.end());
  graph->insertNode(graph->create(c10::Symbol::fromQualString(kRecordOp), recorded, 0));
  Node* call = graph->insertNode(graph->create(c10::prim::FallbackGraph, inputs, fp32->outputs().size()));
  for (size_t i = 0; i < fp32->outputs().size(); ++i) {
    call->output(i)->setType(fp32->outputs()[i]->type());
    graph->registerOutput(call->output(i));
  }
  call->g_(c10::attr::Subgraph, std::move(fp32));
  return graph;
}

std::optional<int64_t> takeCalibrationMarker(Graph& graph) {
  const c10::Symbol marker = c10::Symbol::fromQualString(kMarkerOp);
  for (Node* node : graph.nodes()) {
    if (node->kind() == marker) {
      const int64_t key = torch::jit::toIValue(node->input(0))->toInt();
      node->destroy();
      return key;
    }
  }
  return std::nullopt;
}

std::vector<Stack> takeCalibrationInputs(int64_t key) {
  Recordings& r = recordings();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto entry = r.open.find(key);
  if (entry == r.open.end()) {
    return {};
  }
  std::vector<Stack> inputs = std::move(entry->second);
  r.open.erase(entry);
  return inputs;
}

void dropCalibrationInputs() {
  Recordings& r = recordings();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.open.clear();
}

} // namespace torch_mp::jit
