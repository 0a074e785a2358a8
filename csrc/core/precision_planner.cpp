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

// Nodes that must be fp32: fp32 nodes and everything the constraints drag along with them. A tied value forces its
// producer and consumers to agree; a widest node must be fp32 when a producer it reads from is fp32.
std::vector<bool> fp32Closure(const DataflowGraph& graph) {
  std::vector<std::vector<int>> implies(graph.nodes.size());  // a node in fp32 implies these are fp32
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
  std::vector<bool> fp32(graph.nodes.size(), false);
  std::deque<int> work;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.nodes[n].category == OpCategory::kFp32) {
      fp32[n] = true;
      work.push_back(static_cast<int>(n));
    }
  }
  while (!work.empty()) {
    int n = work.front();
    work.pop_front();
    for (int next : implies[n]) {
      if (!fp32[next]) {
        fp32[next] = true;
        work.push_back(next);
      }
    }
  }
  return fp32;
}

std::vector<Precision> solveMinCut(const DataflowGraph& graph, const std::vector<bool>& fixedFp32) {
  const int numNodes = static_cast<int>(graph.nodes.size());
  // Cast bytes dominate; the tie-breaker (one unit per follow node left in fp32) never outweighs one byte.
  const int64_t scale = numNodes + 1;
  MinCut cut(numNodes + 2);
  const int source = numNodes;  // source side: low precision
  const int sink = numNodes + 1;  // sink side: fp32
  for (int n = 0; n < numNodes; ++n) {
    if (fixedFp32[n]) {
      cut.addEdge(n, sink, MinCut::kInfinite);
    } else if (graph.nodes[n].category == OpCategory::kLowPrecision) {
      cut.addEdge(source, n, MinCut::kInfinite);
    } else {
      cut.addEdge(source, n, 1);
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
    const int64_t cost = value.castBytes * scale;
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
  std::vector<Precision> precision(numNodes);
  for (int n = 0; n < numNodes; ++n) {
    precision[n] = cut.onSourceSide(n) ? Precision::kLow : Precision::kFp32;
  }
  return precision;
}

// Nodes are in topological order within the graph that built them, so one forward sweep paints them.
std::vector<Precision> paintGreedily(const DataflowGraph& graph, const std::vector<bool>& fixedFp32) {
  const size_t numNodes = graph.nodes.size();
  std::vector<std::vector<int>> producersOf(numNodes);
  for (const DataflowGraph::Value& value : graph.values) {
    for (int consumer : value.consumers) {
      producersOf[consumer].push_back(value.producer);
    }
  }
  std::vector<Precision> precision(numNodes, Precision::kFp32);
  for (size_t n = 0; n < numNodes; ++n) {
    if (fixedFp32[n]) {
      continue;
    }
    if (graph.nodes[n].category == OpCategory::kLowPrecision) {
      precision[n] = Precision::kLow;
      continue;
    }
    bool allLow = !producersOf[n].empty();
    for (int producer : producersOf[n]) {
      allLow = allLow && precision[producer] == Precision::kLow;
    }
    precision[n] = allLow ? Precision::kLow : Precision::kFp32;
  }
  // Painting ignores ties; a tie broken by it is settled in fp32, as those converters do.
  bool changed = true;
  while (changed) {
    changed = false;
    for (const DataflowGraph::Value& value : graph.values) {
      if (value.castable) {
        continue;
      }
      bool anyFp32 = precision[value.producer] == Precision::kFp32;
      for (int consumer : value.consumers) {
        anyFp32 = anyFp32 || precision[consumer] == Precision::kFp32;
      }
      if (!anyFp32) {
        continue;
      }
      for (int member : value.consumers) {
        changed = changed || precision[member] == Precision::kLow;
        precision[member] = Precision::kFp32;
      }
      changed = changed || precision[value.producer] == Precision::kLow;
      precision[value.producer] = Precision::kFp32;
    }
  }
  return precision;
}

} // namespace

PrecisionPlan planPrecision(const DataflowGraph& graph, PlanMethod method) {
  PrecisionPlan plan;
  std::vector<bool> fixedFp32 = fp32Closure(graph);
  plan.precision =
      method == PlanMethod::kMinCut ? solveMinCut(graph, fixedFp32) : paintGreedily(graph, fixedFp32);
  plan.forcedToFp32.resize(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    plan.forcedToFp32[n] = graph.nodes[n].category != OpCategory::kFp32 && fixedFp32[n];
  }
  return plan;
}

CastCost castCost(const DataflowGraph& graph, const std::vector<Precision>& precision) {
  CastCost cost;
  for (const DataflowGraph::Value& value : graph.values) {
    const Precision produced = precision[value.producer];
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
