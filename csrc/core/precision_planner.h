// Precision planning on a plain dataflow graph: which ops run in low precision, which in fp32.
//
// Input: nodes, each with an op category (low / follow / widest / fp32), and the floating fp32 tensor values that
// flow between them, each with one producer, its consumers and the bytes one cast of it moves. Values that must
// not be cast (containers of tensors, tensors mutated in place) tie their producer and consumers to one precision.
// Constants are not values here: casting them is folded at conversion time and costs nothing at run time.
//
// Output: a precision per node. Low and fp32 nodes keep their category (after conflicts: a low node tied to an
// fp32 node, or a widest node fed in fp32, is fp32). Follow and widest nodes get the precision that minimises the
// bytes moved by casts, where a value read by consumers of the other precision costs one cast however many they
// are. With two labels and these submodular costs the optimum is an exact s-t minimum cut (one auxiliary vertex per
// value and direction models the shared cast). Among optimal plans, follow nodes prefer low precision.
// A low_fp32_output node is a low node whose outputs are fp32 values: to the planner they come from an fp32 node.
//
// Nothing here knows TorchScript: a torch.export front can build the same DataflowGraph.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/op_policy.h"

namespace torch_mp::core {

enum class Precision : uint8_t { kLow, kFp32 };

struct DataflowGraph {
  struct Node {
    OpCategory category;
  };
  struct Value {
    int producer;
    std::vector<int> consumers;  // distinct node indices
    int64_t castBytes;           // bytes read and written by one cast of this value
    bool castable;               // false: producer and all consumers share one precision
  };

  int addNode(OpCategory category);
  int addValue(int producer, int64_t castBytes, bool castable);
  void addUse(int value, int consumer);

  std::vector<Node> nodes;
  std::vector<Value> values;
};

enum class PlanMethod {
  kMinCut,  // exact minimum of bytes cast
  kGreedy,  // painting as TVM/TF/MXNet do: a follow op is low iff all its inputs arrive low (for comparison)
};

struct PrecisionPlan {
  std::vector<Precision> precision;  // per node
  std::vector<bool> forcedToFp32;    // per node: a low/follow/widest node that the constraints made fp32
};

PrecisionPlan planPrecision(const DataflowGraph& graph, PlanMethod method = PlanMethod::kMinCut);

// The precision a value is written in: its producer's, or fp32 for the outputs of a low_fp32_output node.
Precision producedPrecision(const DataflowGraph& graph, const std::vector<Precision>& precision, int value);

struct CastCost {
  int casts = 0;
  int64_t bytes = 0;
};
// The casts a plan needs: one per (value, precision) that some consumer reads in the other precision.
CastCost castCost(const DataflowGraph& graph, const std::vector<Precision>& precision);

} // namespace torch_mp::core
