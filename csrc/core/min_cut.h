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
  bool buildLevels(int source, int sink);
  int64_t augment(int vertex, int sink, int64_t limit);

  std::vector<Edge> edges_;  // edge i and i ^ 1 are each other's reverse
  std::vector<std::vector<int>> adjacency_;
  std::vector<int> level_;
  std::vector<size_t> nextEdge_;
  std::vector<bool> reachesSink_;
};

} // namespace torch_mp::core
