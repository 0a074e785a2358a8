#include "core/min_cut.h"

#include <algorithm>
#include <queue>

namespace torch_mp::core {

MinCut::MinCut(int numVertices) : adjacency_(numVertices) {}

int MinCut::addVertex() {
  adjacency_.emplace_back();
  return static_cast<int>(adjacency_.size()) - 1;
}

void MinCut::addEdge(int from, int to, int64_t capacity) {
  adjacency_[from].push_back(static_cast<int>(edges_.size()));
  edges_.push_back({to, capacity});
  adjacency_[to].push_back(static_cast<int>(edges_.size()));
  edges_.push_back({from, 0});
}

bool MinCut::buildLevels(int source, int sink) {
  level_.assign(adjacency_.size(), -1);
  std::queue<int> frontier;
  level_[source] = 0;
  frontier.push(source);
  while (!frontier.empty()) {
    int vertex = frontier.front();
    frontier.pop();
    for (int edgeIndex : adjacency_[vertex]) {
      const Edge& edge = edges_[edgeIndex];
      if (edge.residual > 0 && level_[edge.to] < 0) {
        level_[edge.to] = level_[vertex] + 1;
        frontier.push(edge.to);
      }
    }
  }
  return level_[sink] >= 0;
}

// Iterative blocking-flow DFS: deep graphs (100k nodes in a chain) must not overflow the call stack.
int64_t MinCut::augment(int source, int sink, int64_t limit) {
  std::vector<int> pathEdges;
  int vertex = source;
  int64_t total = 0;
  while (true) {
    if (vertex == sink) {
      int64_t pushed = limit - total;
      for (int edgeIndex : pathEdges) {
        pushed = std::min(pushed, edges_[edgeIndex].residual);
      }
      for (int edgeIndex : pathEdges) {
        edges_[edgeIndex].residual -= pushed;
        edges_[edgeIndex ^ 1].residual += pushed;
      }
      total += pushed;
      if (total >= limit) {
        return total;
      }
      pathEdges.clear();
      vertex = source;
      continue;
    }
    bool advanced = false;
    for (size_t& i = nextEdge_[vertex]; i < adjacency_[vertex].size(); ++i) {
      int edgeIndex = adjacency_[vertex][i];
      const Edge& edge = edges_[edgeIndex];
      if (edge.residual > 0 && level_[edge.to] == level_[vertex] + 1) {
        pathEdges.push_back(edgeIndex);
        vertex = edge.to;
        advanced = true;
        break;
      }
    }
    if (advanced) {
      continue;
    }
    if (vertex == source) {
      return total;
    }
    // Dead end: retreat one step and never try this vertex again in this phase.
    level_[vertex] = -1;
    int edgeIndex = pathEdges.back();
    pathEdges.pop_back();
    vertex = edges_[edgeIndex ^ 1].to;
  }
}

int64_t MinCut::solve(int source, int sink) {
  int64_t flow = 0;
  while (buildLevels(source, sink)) {
    nextEdge_.assign(adjacency_.size(), 0);
    flow += augment(source, sink, kInfinite);
  }
  sourceSide_.assign(adjacency_.size(), false);
  for (size_t v = 0; v < level_.size(); ++v) {
    sourceSide_[v] = level_[v] >= 0;
  }
  return flow;
}

} // namespace torch_mp::core
