#include "core/min_cut.h"

#include <algorithm>

namespace torch_mp::core {

MinCut::MinCut(int numVertices) : numVertices_(numVertices) {}

int MinCut::addVertex() {
  return numVertices_++;
}

void MinCut::addEdge(int from, int to, int64_t capacity) {
  edges_.push_back({to, capacity});
  edges_.push_back({from, 0});
}

// A counting sort of the edges by the vertex they leave (edge i leaves edges_[i ^ 1].to), stable in edge order.
void MinCut::buildAdjacency() {
  firstEdge_.assign(numVertices_ + 1, 0);
  for (size_t edge = 0; edge < edges_.size(); ++edge) {
    ++firstEdge_[edges_[edge ^ 1].to + 1];
  }
  for (int vertex = 0; vertex < numVertices_; ++vertex) {
    firstEdge_[vertex + 1] += firstEdge_[vertex];
  }
  adjacentEdges_.resize(edges_.size());
  std::vector<int> next(firstEdge_.begin(), firstEdge_.end() - 1);
  for (size_t edge = 0; edge < edges_.size(); ++edge) {
    adjacentEdges_[next[edges_[edge ^ 1].to]++] = static_cast<int>(edge);
  }
}

// Levels by breadth-first search from the source, up to the sink's: a vertex at the sink's level or beyond lies on
// no shortest path to it, so the search stops there.
bool MinCut::buildLevels(int source, int sink) {
  level_.assign(numVertices_, -1);
  frontier_.clear();
  level_[source] = 0;
  frontier_.push_back(source);
  for (size_t next = 0; next < frontier_.size(); ++next) {
    const int vertex = frontier_[next];
    if (level_[sink] >= 0 && level_[vertex] >= level_[sink]) {
      break;
    }
    for (int i = firstEdge_[vertex]; i < firstEdge_[vertex + 1]; ++i) {
      const Edge& edge = edges_[adjacentEdges_[i]];
      if (edge.residual > 0 && level_[edge.to] < 0) {
        level_[edge.to] = level_[vertex] + 1;
        frontier_.push_back(edge.to);
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
    for (int& i = nextEdge_[vertex]; i < firstEdge_[vertex + 1]; ++i) {
      const int edgeIndex = adjacentEdges_[i];
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
  buildAdjacency();
  int64_t flow = 0;
  while (buildLevels(source, sink)) {
    nextEdge_.assign(firstEdge_.begin(), firstEdge_.end() - 1);
    flow += augment(source, sink, kInfinite);
  }
  // Vertices that reach the sink through edges with residual capacity, found backwards from the sink.
  reachesSink_.assign(numVertices_, false);
  frontier_.clear();
  reachesSink_[sink] = true;
  frontier_.push_back(sink);
  for (size_t next = 0; next < frontier_.size(); ++next) {
    const int vertex = frontier_[next];
    for (int i = firstEdge_[vertex]; i < firstEdge_[vertex + 1]; ++i) {
      const int edgeIndex = adjacentEdges_[i];
      // edgeIndex ^ 1 runs from edges_[edgeIndex].to into `vertex`
      const int from = edges_[edgeIndex].to;
      if (!reachesSink_[from] && edges_[edgeIndex ^ 1].residual > 0) {
        reachesSink_[from] = true;
        frontier_.push_back(from);
      }
    }
  }
  return flow;
}

} // namespace torch_mp::core
