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

// Iterative blocking-flow DFS: deep graphs (100k nodes in a chain) must not overflow the call stack. After a push
// it retreats only to the tail of the first saturated edge, so no edge before the bottleneck is walked again.
int64_t MinCut::augment(int source, int sink, int64_t limit) {
  std::vector<int> pathEdges;
  int vertex = source;
  int64_t total = 0;
  while (total < limit) {
    if (vertex == sink) {
      int64_t pushed = limit - total;
      for (int edgeIndex : pathEdges) {
        pushed = std::min(pushed, edges_[edgeIndex].residual);
      }
      size_t bottleneck = pathEdges.size();
      for (size_t i = 0; i < pathEdges.size(); ++i) {
        edges_[pathEdges[i]].residual -= pushed;
        edges_[pathEdges[i] ^ 1].residual += pushed;
        if (edges_[pathEdges[i]].residual == 0 && bottleneck == pathEdges.size()) {
          bottleneck = i;
        }
      }
      total += pushed;
      pathEdges.resize(bottleneck);
      vertex = pathEdges.empty() ? source : edges_[pathEdges.back()].to;
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
      break;
    }
    // Dead end: retreat one step and never try this vertex again in this phase.
    level_[vertex] = -1;
    pathEdges.pop_back();
    vertex = pathEdges.empty() ? source : edges_[pathEdges.back()].to;
  }
  return total;
}

int64_t MinCut::solve(int source, int sink) {
  int64_t flow = 0;
  while (buildLevels(source, sink)) {
    nextEdge_.assign(adjacency_.size(), 0);
    flow += augment(source, sink, kInfinite);
  }
  // Vertices that reach the sink through edges with residual capacity, found backwards from the sink.
  reachesSink_.assign(adjacency_.size(), false);
  std::queue<int> frontier;
  reachesSink_[sink] = true;
  frontier.push(sink);
  while (!frontier.empty()) {
    const int vertex = frontier.front();
    frontier.pop();
    for (int edgeIndex : adjacency_[vertex]) {
      // edgeIndex ^ 1 runs from edges_[edgeIndex].to into `vertex`
      const int from = edges_[edgeIndex].to;
      if (!reachesSink_[from] && edges_[edgeIndex ^ 1].residual > 0) {
        reachesSink_[from] = true;
        frontier.push(from);
      }
    }
  }
  return flow;
}

} // namespace torch_mp::core
