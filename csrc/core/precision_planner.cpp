#include "core/precision_planner.h"

#include <algorithm>
#include <deque>
#include <stdexcept>

#include "core/min_cut.h"

namespace torch_mp::core {

int64_t fp32CastBytes(int64_t elements) {
  constexpr int64_t kLowBytes = 2;
  return std::max<int64_t>(elements, 1) * (static_cast<int64_t>(sizeof(float)) + kLowBytes);
}

int DataflowGraph::addNode(OpCategory category) {
  nodes.push_back({category});
  return static_cast<int>(nodes.size()) - 1;
}

int DataflowGraph::addValue(int producer, int64_t castBytes, Tie tie) {
  values.push_back({producer, {}, {}, castBytes, tie});
  return static_cast<int>(values.size()) - 1;
}

void DataflowGraph::addUse(int value, int consumer, Access access) {
  Value& read = values[value];
  for (size_t i = 0; i < read.consumers.size(); ++i) {
    if (read.consumers[i] == consumer) {
      if (access == Access::kShares) {
        read.access[i] = Access::kShares;
      }
      return;
    }
  }
  read.consumers.push_back(consumer);
  read.access.push_back(access);
}

int DataflowGraph::tiedAnchor(const Value& value) {
  if (value.tie == Tie::kReaders) {
    for (size_t i = 0; i < value.consumers.size(); ++i) {
      if (value.access[i] == Access::kShares) {
        return value.consumers[i];
      }
    }
  }
  return value.producer;
}

namespace {

bool writesFp32(const DataflowGraph& graph, int node) {
  return graph.nodes[node].category == OpCategory::kLowFp32Output;
}

// The graph in the three categories the solvers know, read through without a copy: each low_fp32_output node is a
// low node, and one extra fp32 node (the last, `writer`) produces its outputs.
class SolverGraph {
 public:
  explicit SolverGraph(const DataflowGraph& graph)
      : graph_(graph), writer_(static_cast<int>(graph.nodes.size())) {}

  int numNodes() const {
    return writer_ + 1;
  }
  OpCategory category(int node) const {
    if (node == writer_) {
      return OpCategory::kFp32;
    }
    const OpCategory category = graph_.nodes[node].category;
    return category == OpCategory::kLowFp32Output ? OpCategory::kLowPrecision : category;
  }
  const std::vector<DataflowGraph::Value>& values() const {
    return graph_.values;
  }
  int producer(const DataflowGraph::Value& value) const {
    return writesFp32(graph_, value.producer) ? writer_ : value.producer;
  }
  // DataflowGraph::tiedAnchor with the producer as the solvers see it.
  int tiedAnchor(const DataflowGraph::Value& value) const {
    const int anchor = DataflowGraph::tiedAnchor(value);
    return anchor == value.producer ? producer(value) : anchor;
  }
  // The precision a consumer reads a value in before any cast of its own: the tied copy's for a tied value, else
  // the producer's.
  int sourceOf(const DataflowGraph::Value& value) const {
    return value.tie == Tie::kNone ? producer(value) : tiedAnchor(value);
  }

 private:
  const DataflowGraph& graph_;
  const int writer_;
};

// The constraints as implications "this node in fp32 => those nodes in fp32": the sharing consumers of a tied value
// agree with its anchor; a widest node must be fp32 when the copy it reads from is fp32.
std::vector<std::vector<int>> fp32Implications(const SolverGraph& graph) {
  std::vector<std::vector<int>> implies(graph.numNodes());
  auto agree = [&](int a, int b) {
    implies[a].push_back(b);
    implies[b].push_back(a);
  };
  for (const DataflowGraph::Value& value : graph.values()) {
    const int source = graph.sourceOf(value);
    for (size_t i = 0; i < value.consumers.size(); ++i) {
      const int consumer = value.consumers[i];
      if (value.tie != Tie::kNone && value.access[i] == Access::kShares) {
        agree(source, consumer);
      } else if (graph.category(consumer) == OpCategory::kWidest) {
        implies[source].push_back(consumer);
      }
    }
  }
  return implies;
}

// Marks everything reachable from the marked nodes along the edges.
void closeOver(const std::vector<std::vector<int>>& edges, std::vector<bool>& marked) {
  std::deque<int> work;
  for (size_t n = 0; n < marked.size(); ++n) {
    if (marked[n]) {
      work.push_back(static_cast<int>(n));
    }
  }
  while (!work.empty()) {
    const int n = work.front();
    work.pop_front();
    for (int next : edges[n]) {
      if (!marked[next]) {
        marked[next] = true;
        work.push_back(next);
      }
    }
  }
}

// Nodes that must be fp32: fp32 nodes and everything the constraints drag along with them.
std::vector<bool> fp32Closure(const SolverGraph& graph, const std::vector<std::vector<int>>& implies) {
  std::vector<bool> fp32(graph.numNodes(), false);
  for (int n = 0; n < graph.numNodes(); ++n) {
    fp32[n] = graph.category(n) == OpCategory::kFp32;
  }
  closeOver(implies, fp32);
  return fp32;
}

std::vector<Precision> solveMinCut(const SolverGraph& graph, const std::vector<bool>& fixedFp32) {
  const int numNodes = graph.numNodes();
  MinCut cut(numNodes + 2);
  const int source = numNodes;  // source side: low precision
  const int sink = numNodes + 1;  // sink side: fp32
  for (int n = 0; n < numNodes; ++n) {
    if (fixedFp32[n]) {
      cut.addEdge(n, sink, MinCut::kInfinite);
    } else if (graph.category(n) == OpCategory::kLowPrecision) {
      cut.addEdge(source, n, MinCut::kInfinite);
    }
  }
  auto agree = [&](int a, int b) {
    cut.addEdge(a, b, MinCut::kInfinite);
    cut.addEdge(b, a, MinCut::kInfinite);
  };
  for (const DataflowGraph::Value& value : graph.values()) {
    const int producer = graph.producer(value);
    if (value.consumers.empty()) {
      continue;
    }
    const int64_t cost = value.castBytes;
    auto castBetween = [&](int a, int b) {
      cut.addEdge(a, b, cost);
      cut.addEdge(b, a, cost);
    };
    if (value.tie != Tie::kNone) {
      const int anchor = graph.tiedAnchor(value);
      if (anchor != producer) {  // kReaders: one cast after the producer makes the shared copy, or none
        castBetween(producer, anchor);
      }
      for (size_t i = 0; i < value.consumers.size(); ++i) {
        const int consumer = value.consumers[i];
        if (value.access[i] == Access::kShares) {
          agree(anchor, consumer);
        } else {
          castBetween(anchor, consumer);  // its own cast, right before it
          if (graph.category(consumer) == OpCategory::kWidest) {
            cut.addEdge(consumer, anchor, MinCut::kInfinite);
          }
        }
      }
      continue;
    }
    for (int consumer : value.consumers) {
      if (graph.category(consumer) == OpCategory::kWidest) {
        cut.addEdge(consumer, producer, MinCut::kInfinite);  // producer fp32 => consumer fp32
      }
    }
    if (value.consumers.size() == 1) {
      castBetween(producer, value.consumers[0]);
      continue;
    }
    // Produced low and read in fp32 by any consumer: one cast, paid on the edge into `toFp32`.
    const int toFp32 = cut.addVertex();
    cut.addEdge(producer, toFp32, cost);
    // Produced fp32 and read low by any consumer: one cast, paid on the edge out of `toLow`.
    const int toLow = cut.addVertex();
    cut.addEdge(toLow, producer, cost);
    for (int consumer : value.consumers) {
      cut.addEdge(toFp32, consumer, MinCut::kInfinite);
      cut.addEdge(consumer, toLow, MinCut::kInfinite);
    }
  }
  if (cut.solve(source, sink) >= MinCut::kInfinite) {
    throw std::logic_error("precision planner: constraints are contradictory after fp32 closure");
  }
  // Of all minimum cuts, the one with the smallest fp32 side: follow nodes prefer low precision when it is free.
  std::vector<Precision> precision(numNodes);
  for (int n = 0; n < numNodes; ++n) {
    precision[n] = cut.onSmallestSinkSide(n) ? Precision::kFp32 : Precision::kLow;
  }
  return precision;
}

// Painting as TVM, TensorFlow and MXNet do, in the order the nodes were built (topological): a follow or widest
// node is low iff every producer it reads from is low. The painted fp32 set is then made valid: nodes whose fp32
// would drag a low-precision op along (through ties) stay low, and the rest is closed under the constraints.
std::vector<Precision> paintGreedily(
    const SolverGraph& graph,
    const std::vector<std::vector<int>>& implies,
    const std::vector<bool>& fixedFp32) {
  const size_t numNodes = graph.numNodes();
  std::vector<std::vector<int>> producersOf(numNodes);
  for (const DataflowGraph::Value& value : graph.values()) {
    for (int consumer : value.consumers) {
      producersOf[consumer].push_back(graph.producer(value));
    }
  }
  std::vector<bool> fp32 = fixedFp32;
  for (size_t n = 0; n < numNodes; ++n) {
    if (fp32[n] || graph.category(n) == OpCategory::kLowPrecision) {
      continue;
    }
    bool allLow = !producersOf[n].empty();
    for (int producer : producersOf[n]) {
      allLow = allLow && !fp32[producer];
    }
    fp32[n] = !allLow;
  }
  std::vector<std::vector<int>> impliedBy(numNodes);
  for (size_t n = 0; n < numNodes; ++n) {
    for (int next : implies[n]) {
      impliedBy[next].push_back(static_cast<int>(n));
    }
  }
  std::vector<bool> mustStayLow(numNodes, false);
  for (size_t n = 0; n < numNodes; ++n) {
    mustStayLow[n] = graph.category(n) == OpCategory::kLowPrecision && !fixedFp32[n];
  }
  closeOver(impliedBy, mustStayLow);
  for (size_t n = 0; n < numNodes; ++n) {
    fp32[n] = fixedFp32[n] || (fp32[n] && !mustStayLow[n]);
  }
  closeOver(implies, fp32);
  std::vector<Precision> precision(numNodes);
  for (size_t n = 0; n < numNodes; ++n) {
    precision[n] = fp32[n] ? Precision::kFp32 : Precision::kLow;
  }
  return precision;
}

} // namespace

PrecisionPlan planPrecision(const DataflowGraph& graph, PlanMethod method) {
  const SolverGraph solved(graph);
  PrecisionPlan plan;
  const std::vector<std::vector<int>> implies = fp32Implications(solved);
  const std::vector<bool> fixedFp32 = fp32Closure(solved, implies);
  plan.precision = method == PlanMethod::kMinCut ? solveMinCut(solved, fixedFp32)
                                                 : paintGreedily(solved, implies, fixedFp32);
  plan.precision.resize(graph.nodes.size());
  plan.forcedToFp32.resize(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    plan.forcedToFp32[n] = graph.nodes[n].category != OpCategory::kFp32 && fixedFp32[n];
  }
  return plan;
}

Precision producedPrecision(const DataflowGraph& graph, const std::vector<Precision>& precision, int value) {
  const int producer = graph.values[value].producer;
  return writesFp32(graph, producer) ? Precision::kFp32 : precision[producer];
}

Precision copyPrecision(const DataflowGraph& graph, const std::vector<Precision>& precision, int value) {
  const DataflowGraph::Value& read = graph.values[value];
  if (read.tie == Tie::kNone) {
    return producedPrecision(graph, precision, value);
  }
  const int anchor = DataflowGraph::tiedAnchor(read);
  return anchor == read.producer ? producedPrecision(graph, precision, value) : precision[anchor];
}

} // namespace torch_mp::core
