// Precision planning on a plain dataflow graph: which ops run in low precision, which in fp32.
//
// Input: nodes, each with an op category (low / follow / widest / fp32), and the floating fp32 tensor values that
// flow between them, each with one producer, its consumers and the bytes one cast of it moves. A value may tie
// precisions together (see Tie): a container of tensors or an alias its producer made cannot be cast, so its
// producer and sharing consumers share one precision; a fresh tensor that is written in place may be cast once after
// its producer, but all its sharing consumers must then read that one copy. A consumer that only reads a tied tensor
// pays its own cast where its precision differs from the tied copy's (see Access), so a low op is never pulled to
// fp32 by a tie it only reads through.
// Constants are not values here: casting them is folded at conversion time and costs nothing at run time.
//
// Output: a precision per node. Low and fp32 nodes keep their category (after conflicts: a low node tied to an
// fp32 node, or a widest node fed in fp32, is fp32; only ties with another node make such conflicts). Follow and widest nodes get the precision that minimises the
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

// The bytes one cast of an fp32 tensor of `elements` to the low dtype (2 bytes, float16 and bfloat16 alike) moves, read
// and written: a value's cost in the dataflow graph, on both fronts. A tensor seen empty, or not seen, counts one
// element: no cast is free.
int64_t fp32CastBytes(int64_t elements);

// How a value ties the precisions of the nodes around it.
enum class Tie : uint8_t {
  kNone,     // castable: readers of the other precision share one cast of it
  kReaders,  // a fresh tensor written in place later: its sharing readers (writers, views) share one precision and
             // see the writes, so they read one copy; a cast right after the producer may make that copy
  kAll,      // a container of tensors, or an alias of what its producer read: no cast can stand between the producer
             // and its sharing readers, so they share one precision
};

// How a consumer of a tied value uses it. A consumer that only reads a tensor may read its own cast of the tied
// copy, made right before it runs, so it sees every write made until then; one that writes it, or keeps an alias of
// it (a view, an in-place result, a container, a block), must share the tied copy. Untied values ignore this.
enum class Access : uint8_t { kShares, kReadsOnly };

struct DataflowGraph {
  struct Node {
    OpCategory category;
  };
  struct Value {
    int producer;
    std::vector<int> consumers;  // distinct node indices
    std::vector<Access> access;  // per consumer
    int64_t castBytes;           // bytes read and written by one cast of this value
    Tie tie;
  };

  int addNode(OpCategory category);
  int addValue(int producer, int64_t castBytes, Tie tie = Tie::kNone);
  // A consumer that both shares and only reads the value (two uses) shares it.
  void addUse(int value, int consumer, Access access = Access::kShares);

  // The node whose precision a tied value's copy has: the producer for kAll, the first sharing consumer for kReaders
  // (the producer when none shares it). Undefined for untied values.
  static int tiedAnchor(const Value& value);

  std::vector<Node> nodes;
  std::vector<Value> values;
};

struct PrecisionPlan {
  std::vector<Precision> precision;  // per node
  std::vector<bool> forcedToFp32;    // per node: a low/follow/widest node that the constraints made fp32
};

PrecisionPlan planPrecision(const DataflowGraph& graph, PlanMethod method = PlanMethod::kMinCut);

// The precision a value is written in: its producer's, or fp32 for the outputs of a low_fp32_output node.
Precision producedPrecision(const DataflowGraph& graph, const std::vector<Precision>& precision, int value);

// The precision of the copy of a value its consumers read before any cast of their own: the produced one, or for a
// value tied to its readers whose readers share it, its anchor's (the copy cast once after the producer).
Precision copyPrecision(const DataflowGraph& graph, const std::vector<Precision>& precision, int value);

} // namespace torch_mp::core
