// Runs the pipeline's stages: each is timed into a list of phases and, with PYTORCH_JIT_LOG_LEVEL=">stage_runner", the
// graph is dumped before and after it (GRAPH_DUMP), as PyTorch's passes log. The passes log their own rewrites
// (GRAPH_UPDATE) under their file names. A stage run more than once (PyTorch's clean-up passes between torch_mp's
// own stages) adds to its one phase.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torch_mp::jit {

using Phases = std::vector<std::pair<std::string, double>>;

class StageRunner {
 public:
  // Appends one (name, seconds) per stage to `phases`, or adds to the stage's entry.
  explicit StageRunner(Phases& phases) : phases_(phases) {}

  // Runs `stage()` as the stage `name` on `graph` and returns what it returns.
  template <typename Stage>
  decltype(auto) run(const char* name, const std::shared_ptr<torch::jit::Graph>& graph, Stage&& stage) {
    GRAPH_DUMP(std::string("Before stage ") + name, graph);
    const Timing timing(phases_, name, graph);
    return stage();
  }

 private:
  // Records the stage's seconds and dumps the graph when the stage ends.
  class Timing {
   public:
    Timing(Phases& phases, const char* name, const std::shared_ptr<torch::jit::Graph>& graph)
        : phases_(phases), name_(name), graph_(graph) {}
    Timing(const Timing&) = delete;
    Timing& operator=(const Timing&) = delete;
    ~Timing() {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      auto phase = std::find_if(phases_.begin(), phases_.end(), [&](const auto& p) { return p.first == name_; });
      if (phase == phases_.end()) {
        phases_.emplace_back(name_, seconds);
      } else {
        phase->second += seconds;
      }
      GRAPH_DUMP(std::string("After stage ") + name_, graph_);
    }

   private:
    Phases& phases_;
    const char* name_;
    const std::shared_ptr<torch::jit::Graph>& graph_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  };

  Phases& phases_;
};

// What the phases took in all.
inline double totalSeconds(const Phases& phases) {
  double total = 0.0;
  for (const auto& [stage, seconds] : phases) {
    total += seconds;
  }
  return total;
}

} // namespace torch_mp::jit
