// The floor under any pass over a TorchScript graph: one walk over its nodes (through their blocks) that reads the
// type of every value each node reads and writes, and nothing else. conversion_scaling.py times it on the converted
// graph at every size: its per-node cost grows with the graph as the graph outgrows the caches, which no pass that
// touches every node escapes.
#include <torch/csrc/jit/ir/ir.h>
#include <torch/extension.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace {

size_t walk(const torch::jit::Block* block) {
  size_t kinds = 0;
  for (const torch::jit::Node* node : block->nodes()) {
    for (const torch::jit::Value* input : node->inputs()) {
      kinds += static_cast<size_t>(input->type()->kind());
    }
    for (const torch::jit::Value* output : node->outputs()) {
      kinds += static_cast<size_t>(output->type()->kind());
    }
    for (const torch::jit::Block* sub : node->blocks()) {
      kinds += walk(sub);
    }
  }
  return kinds;
}

// The fastest of `repeats` walks, in seconds.
double walkSeconds(const std::shared_ptr<torch::jit::Graph>& graph, int repeats) {
  double best = std::numeric_limits<double>::infinity();
  volatile size_t sink = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    sink = sink + walk(graph->block());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("walk_seconds", &walkSeconds, "the fastest of `repeats` walks over the graph's nodes and values, in seconds");
}
