// Minimum s-t cut by Dinic's max-flow: the exact solver behind the precision planner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace torch_mp::core {

class MinCut {
 public:
  static constexpr int64_t kInfinite = std::numeric_limits<int64_t>::max() / 4;

  explicit MinCut(int numVertices);

  int addVertex();
  void addEdge(int from, int to, int64_t capacity);

  // Computes a maximum flow from source to sink; returns its value, the capacity of a minimum cut.
  int64_t solve(int source, int sink);
  // After solve(): whether the vertex is on the sink side of the minimum cut with the smallest sink side (it can
  // still reach the sink in the residual graph). Every minimum cut's sink side contains this one.
  bool onSmallestSinkSide(int vertex) const {
    return reachesSink_[vertex];
  }

 private:
  struct Edge {
    int to;
    int64_t residual;
  };
  void buildAdjacency();
  bool buildLevels(int source, int sink);
  int64_t augment(int vertex, int sink, int64_t limit);

  int numVertices_;
  std::vector<Edge> edges_;  // edge i and i ^ 1 are each other's reverse
  // The edges leaving vertex v, in the order they were added: adjacentEdges_[firstEdge_[v]] up to (excluding)
  // adjacentEdges_[firstEdge_[v + 1]]. Built once by solve(): one array for all vertices, not one vector per vertex
  // (graphs of 100k nodes make over 100k vertices, and their allocations cost more than the flow).
  std::vector<int> firstEdge_;
  std::vector<int> adjacentEdges_;
  std::vector<int> level_;
  std::vector<int> frontier_;  // the breadth-first searches' queue: each vertex enters it at most once
  std::vector<int> nextEdge_;  // per vertex: the position in adjacentEdges_ its search goes on from in this phase
  std::vector<bool> reachesSink_;
};

} // namespace torch_mp::core
