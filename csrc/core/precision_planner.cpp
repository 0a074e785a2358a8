#include "core/precision_planner.h"

#include <deque>
#include <stdexcept>

#include "core/min_cut.h"

namespace torch_mp::core {

int DataflowGraph::addNode(OpCategory category) {
  nodes.push_back({category});
  return static_cast<int>(nodes.size()) - 1;
}

int DataflowGraph::addValue(int producer, int64_t castBytes, bool castable) {
  values.push_back({producer, {}, castBytes, castable});
  return static_cast<int>(values.size()) - 1;
}

void DataflowGraph::addUse(int value, int consumer) {
  std::vector<int>& consumers = values[value].consumers;
  for (int existing : consumers) {
    if (existing == consumer) {
      return;
    }
  }
  consumers.push_back(consumer);
}

namespace {

// The constraints as implications "this node in fp32 => those nodes in fp32": a tied value forces its producer and
// consumers to agree; a widest node must be fp32 when a producer it reads from is fp32.
std::vector<std::vector<int>> fp32Implications(const DataflowGraph& graph) {
  std::vector<std::vector<int>> implies(graph.nodes.size());
  for (const DataflowGraph::Value& value : graph.values) {
    for (int consumer : value.consumers) {
      if (!value.castable) {
        implies[value.producer].push_back(consumer);
        implies[consumer].push_back(value.producer);
      } else if (graph.nodes[consumer].category == OpCategory::kWidest) {
        implies[value.producer].push_back(consumer);
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
std::vector<bool> fp32Closure(const DataflowGraph& graph, const std::vector<std::vector<int>>& implies) {
  std::vector<bool> fp32(graph.nodes.size(), false);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    fp32[n] = graph.nodes[n].category == OpCategory::kFp32;
  }
  closeOver(implies, fp32);
  return fp32;
}

std::vector<Precision> solveMinCut(const DataflowGraph& graph, const std::vector<bool>& fixedFp32) {
  const int numNodes = static_cast<int>(graph.nodes.size());
  MinCut cut(numNodes + 2);
  const int source = numNodes;  // source side: low precision
  const int sink = numNodes + 1;  // sink side: fp32
  for (int n = 0; n < numNodes; ++n) {
    if (fixedFp32[n]) {
      cut.addEdge(n, sink, MinCut::kInfinite);
    } else if (graph.nodes[n].category == OpCategory::kLowPrecision) {
      cut.addEdge(source, n, MinCut::kInfinite);
    }
  }
  for (const DataflowGraph::Value& value : graph.values) {
    const int producer = value.producer;
    if (!value.castable) {
      for (int consumer : value.consumers) {
        cut.addEdge(producer, consumer, MinCut::kInfinite);
        cut.addEdge(consumer, producer, MinCut::kInfinite);
      }
      continue;
    }
    const int64_t cost = value.castBytes;
    for (int consumer : value.consumers) {
      if (graph.nodes[consumer].category == OpCategory::kWidest) {
        cut.addEdge(consumer, producer, MinCut::kInfinite);  // producer fp32 => consumer fp32
      }
    }
    if (value.consumers.size() == 1) {
      cut.addEdge(producer, value.consumers[0], cost);
      cut.addEdge(value.consumers[0], producer, cost);
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
    const DataflowGraph& graph,
    const std::vector<std::vector<int>>& implies,
    const std::vector<bool>& fixedFp32) {
  const size_t numNodes = graph.nodes.size();
  std::vector<std::vector<int>> producersOf(numNodes);
  for (const DataflowGraph::Value& value : graph.values) {
    for (int consumer : value.consumers) {
      producersOf[consumer].push_back(value.producer);
    }
  }
  std::vector<bool> fp32 = fixedFp32;
  for (size_t n = 0; n < numNodes; ++n) {
    if (fp32[n] || graph.nodes[n].category == OpCategory::kLowPrecision) {
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
    mustStayLow[n] = graph.nodes[n].category == OpCategory::kLowPrecision && !fixedFp32[n];
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

bool writesFp32(const DataflowGraph& graph, int node) {
  return graph.nodes[node].category == OpCategory::kLowFp32Output;
}

// The same graph in the three categories the solvers know: each low_fp32_output node becomes a low node, and one
// extra fp32 node (the last) produces its outputs.
DataflowGraph withFp32Writer(const DataflowGraph& graph) {
  DataflowGraph plain = graph;
  const int writer = plain.addNode(OpCategory::kFp32);
  for (DataflowGraph::Value& value : plain.values) {
    if (writesFp32(graph, value.producer)) {
      value.producer = writer;
    }
  }
  for (DataflowGraph::Node& node : plain.nodes) {
    if (node.category == OpCategory::kLowFp32Output) {
      node.category = OpCategory::kLowPrecision;
    }
  }
  return plain;
}

} // namespace

PrecisionPlan planPrecision(const DataflowGraph& graph, PlanMethod method) {
  const DataflowGraph plain = withFp32Writer(graph);
  PrecisionPlan plan;
  const std::vector<std::vector<int>> implies = fp32Implications(plain);
  const std::vector<bool> fixedFp32 = fp32Closure(plain, implies);
  plan.precision = method == PlanMethod::kMinCut ? solveMinCut(plain, fixedFp32)
                                                 : paintGreedily(plain, implies, fixedFp32);
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

CastCost castCost(const DataflowGraph& graph, const std::vector<Precision>& precision) {
  CastCost cost;
  for (size_t v = 0; v < graph.values.size(); ++v) {
    const DataflowGraph::Value& value = graph.values[v];
    const Precision produced = producedPrecision(graph, precision, static_cast<int>(v));
    bool readInOther = false;
    for (int consumer : value.consumers) {
      readInOther = readInOther || precision[consumer] != produced;
    }
    if (readInOther) {
      cost.casts += 1;
      cost.bytes += value.castBytes;
    }
  }
  return cost;
}

} // namespace torch_mp::core
