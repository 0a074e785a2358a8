// Runs a graph node by node and shows each value it computes to a visitor, without building the interpreter's code.
//
// torch::jit::Code preprocesses a copy of the graph (copying, liveness, register allocation, instruction emission)
// at about 13 us a node on a frozen graph, where running a node's operation takes one or two: for a model of small
// tensors that is most of an observation run. GraphRunner runs the nodes as the interpreter does (each node's
// registered operation; constants; prim::If and prim::Loop; attribute reads, list, tuple and dict construction and
// list unpacking as the interpreter's instructions do them), keeps each value only until its last reader in its own
// block has run, and so observes a graph as it stands, with no instrumented copy. `canRun` says whether every node
// is one of those; the interpreter's other special cases (calls, forks, with-blocks, profiling and guard nodes,
// warnings, uninitialised values, object creation, named tuples) are left to Code.
#pragma once

#include <ATen/core/stack.h>
#include <torch/csrc/jit/ir/ir.h>

#include <functional>
#include <memory>
#include <vector>

namespace torch_mp::jit {

class GraphRunner {
 public:
  struct BlockPlan;  // a block's nodes as steps (graph_runner.cpp)
  struct Step;       // one node, as it runs (graph_runner.cpp)
  using Visitor = std::function<void(const torch::jit::Value*, const c10::IValue&)>;

  // Whether GraphRunner runs every node of `graph` as the interpreter would.
  static bool canRun(const torch::jit::Graph& graph);

  // `graph` must outlive the runner, unchanged; canRun(graph) must hold.
  explicit GraphRunner(const torch::jit::Graph& graph);
  ~GraphRunner();

  // Runs the graph on `inputs` (the graph's inputs in order), calls `visit` on every value once it is computed (block
  // inputs at each entry into their block, so a loop body's values once per iteration), and returns the outputs.
  torch::jit::Stack run(torch::jit::Stack inputs, const Visitor& visit) const;

  // Values are numbered by Value::unique(), each below this.
  size_t slotCount() const {
    return slotCount_;
  }

 private:
  std::unique_ptr<BlockPlan> plan_;
  size_t slotCount_ = 0;
};

// Deep copies of `values`: the inputs of a run that must leave the caller's tensors and objects as they are.
torch::jit::Stack deepCopies(const torch::jit::Stack& values);

// Runs `graph` once on `inputs` (consumed) and returns its outputs: with GraphRunner where it can, else with Code.
torch::jit::Stack runGraphOnce(const std::shared_ptr<torch::jit::Graph>& graph, torch::jit::Stack inputs);

} // namespace torch_mp::jit
