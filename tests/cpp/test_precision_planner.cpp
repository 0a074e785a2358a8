// planPrecision on plain DataflowGraphs: the min-cut plan is exactly optimal (checked against brute force on
// random graphs), respects every constraint, and handles the shapes that break naive planners.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/precision_planner.h"

namespace torch_mp::core {
namespace {

// The test oracle: the casts a plan needs, one per (value, precision) that some consumer reads in the other
// precision (a tied value: one for its copy, one per reader that only reads it in another precision).
struct CastCost {
  int casts = 0;
  int64_t bytes = 0;
};

CastCost castCost(const DataflowGraph& graph, const std::vector<Precision>& precision) {
  CastCost cost;
  for (size_t v = 0; v < graph.values.size(); ++v) {
    const DataflowGraph::Value& value = graph.values[v];
    const Precision produced = producedPrecision(graph, precision, static_cast<int>(v));
    if (value.tie != Tie::kNone) {
      const Precision copy = copyPrecision(graph, precision, static_cast<int>(v));
      const int shared = copy != produced ? 1 : 0;
      cost.casts += shared;
      cost.bytes += shared * value.castBytes;
      for (size_t i = 0; i < value.consumers.size(); ++i) {
        if (value.access[i] == Access::kReadsOnly && precision[value.consumers[i]] != copy) {
          cost.casts += 1;
          cost.bytes += value.castBytes;
        }
      }
      continue;
    }
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

constexpr Precision kLow = Precision::kLow;
constexpr Precision kFp32 = Precision::kFp32;

bool writesFp32(const DataflowGraph& graph, int node) {
  return graph.nodes[node].category == OpCategory::kLowFp32Output;
}

// The precision the copy of a value that its consumers read (before any cast of their own) is in: the producer's
// written precision, or for a value tied to its readers whose readers share it, its first sharing reader's.
Precision copyPrecision(const DataflowGraph& graph, const DataflowGraph::Value& value, const std::vector<Precision>& p) {
  const int anchor = value.tie == Tie::kNone ? value.producer : DataflowGraph::tiedAnchor(value);
  if (anchor != value.producer) {
    return p[anchor];
  }
  return writesFp32(graph, value.producer) ? kFp32 : p[value.producer];
}

bool shares(const DataflowGraph::Value& value, size_t i) {
  return value.tie != Tie::kNone && value.access[i] == Access::kShares;
}

// The nodes that must be fp32, computed as precision_planner.h states it, independently of the planner: fp32
// nodes; every sharing member of a tied value one of whose sharing members is fp32 (the producer is a member of a
// value tied to all; a value written in fp32 by a low_fp32_output node counts as an fp32 member); a widest node that
// reads, without sharing it, a copy written in fp32. Iterated to a fixed point.
std::vector<bool> expectedFixedFp32(const DataflowGraph& graph) {
  std::vector<bool> fixed(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    fixed[n] = graph.nodes[n].category == OpCategory::kFp32;
  }
  bool changed = true;
  while (changed) {
    changed = false;
    auto fix = [&](int n) {
      if (!fixed[n]) {
        fixed[n] = true;
        changed = true;
      }
    };
    for (const DataflowGraph::Value& value : graph.values) {
      const bool writtenFp32 = fixed[value.producer] || writesFp32(graph, value.producer);
      bool groupFp32 = value.tie == Tie::kAll && writtenFp32;
      for (size_t i = 0; i < value.consumers.size(); ++i) {
        groupFp32 = groupFp32 || (shares(value, i) && fixed[value.consumers[i]]);
      }
      if (groupFp32) {
        if (value.tie == Tie::kAll && !writesFp32(graph, value.producer)) {
          fix(value.producer);
        }
        for (size_t i = 0; i < value.consumers.size(); ++i) {
          if (shares(value, i)) {
            fix(value.consumers[i]);
          }
        }
      }
      const int anchor = value.tie == Tie::kNone ? value.producer : DataflowGraph::tiedAnchor(value);
      const bool copyFp32 = anchor == value.producer ? writtenFp32 : fixed[anchor];
      for (size_t i = 0; i < value.consumers.size(); ++i) {
        if (!shares(value, i) && copyFp32 && graph.nodes[value.consumers[i]].category == OpCategory::kWidest) {
          fix(value.consumers[i]);
        }
      }
    }
  }
  return fixed;
}

// Empty when the labeling satisfies every constraint, else what it breaks.
std::string violation(const DataflowGraph& graph, const std::vector<bool>& fixed, const std::vector<Precision>& p) {
  std::ostringstream why;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (fixed[n] && p[n] != kFp32) {
      why << "node " << n << " must be fp32; ";
    }
    const OpCategory category = graph.nodes[n].category;
    if (!fixed[n] && (category == OpCategory::kLowPrecision || category == OpCategory::kLowFp32Output) &&
        p[n] != kLow) {
      why << "low node " << n << " is not low; ";
    }
  }
  for (size_t v = 0; v < graph.values.size(); ++v) {
    const DataflowGraph::Value& value = graph.values[v];
    const Precision copy = copyPrecision(graph, value, p);
    for (size_t i = 0; i < value.consumers.size(); ++i) {
      const int consumer = value.consumers[i];
      if (shares(value, i) && p[consumer] != copy) {
        why << "sharing reader " << consumer << " of value " << v << " reads another copy; ";
      }
      if (!shares(value, i) && graph.nodes[consumer].category == OpCategory::kWidest && copy == kFp32 &&
          p[consumer] == kLow) {
        why << "widest node " << consumer << " reads fp32 value " << v << " in low precision; ";
      }
    }
  }
  return why.str();
}

int fp32FollowOrWidest(const DataflowGraph& graph, const std::vector<Precision>& p) {
  int count = 0;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const OpCategory category = graph.nodes[n].category;
    count += (category == OpCategory::kFollow || category == OpCategory::kWidest) && p[n] == kFp32;
  }
  return count;
}

struct BruteForce {
  int64_t bytes = -1;       // minimum bytes cast over all valid labelings
  int fp32Flexible = -1;    // among those, the fewest follow/widest nodes in fp32
};

BruteForce bruteForce(const DataflowGraph& graph, const std::vector<bool>& fixed) {
  const size_t n = graph.nodes.size();
  BruteForce best;
  std::vector<Precision> p(n);
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    for (size_t i = 0; i < n; ++i) {
      p[i] = (mask >> i) & 1 ? kFp32 : kLow;
    }
    if (!violation(graph, fixed, p).empty()) {
      continue;
    }
    const int64_t bytes = castCost(graph, p).bytes;
    const int flexible = fp32FollowOrWidest(graph, p);
    if (best.bytes < 0 || bytes < best.bytes || (bytes == best.bytes && flexible < best.fp32Flexible)) {
      best.bytes = bytes;
      best.fp32Flexible = flexible;
    }
  }
  return best;
}

DataflowGraph randomGraph(std::mt19937& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const OpCategory categories[] = {
      OpCategory::kLowPrecision, OpCategory::kFollow, OpCategory::kWidest, OpCategory::kFp32,
      OpCategory::kLowFp32Output};
  DataflowGraph graph;
  const int numNodes = uniform(2, 9);
  for (int i = 0; i < numNodes; ++i) {
    graph.addNode(categories[uniform(0, 4)]);
  }
  const int numValues = uniform(1, 2 * numNodes);
  for (int v = 0; v < numValues; ++v) {
    const int producer = uniform(0, numNodes - 2);
    const int draw = uniform(0, 9);  // one in five tied to all, one in ten to its readers
    const Tie tie = draw < 2 ? Tie::kAll : draw < 3 ? Tie::kReaders : Tie::kNone;
    const int value = graph.addValue(producer, uniform(1, 1000), tie);
    const int numConsumers = std::min(uniform(1, 3), numNodes - 1 - producer);
    for (int c = 0; c < numConsumers; ++c) {
      const Access access = uniform(0, 1) ? Access::kShares : Access::kReadsOnly;
      graph.addUse(value, uniform(producer + 1, numNodes - 1), access);  // addUse keeps consumers distinct
    }
  }
  return graph;
}

std::string describe(const DataflowGraph& graph, const std::vector<Precision>& p) {
  std::ostringstream out;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    out << "node " << n << " " << toString(graph.nodes[n].category) << " -> "
        << (p[n] == kLow ? "low" : "fp32") << "\n";
  }
  for (size_t v = 0; v < graph.values.size(); ++v) {
    const DataflowGraph::Value& value = graph.values[v];
    out << "value " << v << " from " << value.producer << " bytes " << value.castBytes
        << (value.tie == Tie::kAll ? " tied" : value.tie == Tie::kReaders ? " readers tied" : "") << " to";
    for (size_t i = 0; i < value.consumers.size(); ++i) {
      out << " " << value.consumers[i] << (shares(value, i) ? "(shares)" : "");
    }
    out << "\n";
  }
  return out.str();
}

TEST(PrecisionPlannerTest, ACastMovesFourBytesReadAndTwoWrittenPerElementAndIsNeverFree) {
  EXPECT_EQ(fp32CastBytes(1000), 6000);
  EXPECT_EQ(fp32CastBytes(1), 6);
  EXPECT_EQ(fp32CastBytes(0), 6);  // an empty or unseen tensor counts one element
}

TEST(PrecisionPlannerTest, MinCutMatchesBruteForceOnRandomGraphs) {
  std::mt19937 rng(20240607);
  for (int trial = 0; trial < 500; ++trial) {
    const DataflowGraph graph = randomGraph(rng);
    const std::vector<bool> fixed = expectedFixedFp32(graph);
    const PrecisionPlan plan = planPrecision(graph, PlanMethod::kMinCut);
    ASSERT_EQ(plan.precision.size(), graph.nodes.size());
    ASSERT_EQ(plan.forcedToFp32.size(), graph.nodes.size());
    const std::string context = "trial " + std::to_string(trial) + "\n" + describe(graph, plan.precision);
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
      EXPECT_EQ(plan.forcedToFp32[n], fixed[n] && graph.nodes[n].category != OpCategory::kFp32)
          << "node " << n << "\n" << context;
    }
    EXPECT_EQ(violation(graph, fixed, plan.precision), "") << context;
    const BruteForce best = bruteForce(graph, fixed);
    ASSERT_GE(best.bytes, 0) << "no valid labeling\n" << context;
    EXPECT_EQ(castCost(graph, plan.precision).bytes, best.bytes) << context;
    // Among optimal plans the planner leaves as few follow/widest nodes in fp32 as possible.
    EXPECT_EQ(fp32FollowOrWidest(graph, plan.precision), best.fp32Flexible) << context;
    if (HasFailure()) {
      return;
    }
  }
}

TEST(PrecisionPlannerTest, GreedyIsNeverBetterThanMinCutOnRandomGraphs) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const DataflowGraph graph = randomGraph(rng);
    const std::vector<bool> fixed = expectedFixedFp32(graph);
    const PrecisionPlan greedy = planPrecision(graph, PlanMethod::kGreedy);
    const PrecisionPlan minCut = planPrecision(graph, PlanMethod::kMinCut);
    const std::string context = "trial " + std::to_string(trial) + "\n" + describe(graph, greedy.precision);
    EXPECT_EQ(violation(graph, fixed, greedy.precision), "") << context;
    EXPECT_GE(castCost(graph, greedy.precision).bytes, castCost(graph, minCut.precision).bytes) << context;
    if (HasFailure()) {
      return;
    }
  }
}

// low -> {follow a, follow b} -> low: everything low, nothing cast.
TEST(PrecisionPlannerTest, DiamondBetweenLowNodesStaysLow) {
  DataflowGraph graph;
  const int top = graph.addNode(OpCategory::kLowPrecision);
  const int a = graph.addNode(OpCategory::kFollow);
  const int b = graph.addNode(OpCategory::kFollow);
  const int bottom = graph.addNode(OpCategory::kLowPrecision);
  const int split = graph.addValue(top, 100);
  graph.addUse(split, a);
  graph.addUse(split, b);
  graph.addUse(graph.addValue(a, 100), bottom);
  graph.addUse(graph.addValue(b, 100), bottom);
  const PrecisionPlan plan = planPrecision(graph);
  EXPECT_EQ(plan.precision, std::vector<Precision>(4, kLow));
  EXPECT_EQ(castCost(graph, plan.precision).casts, 0);
}

// The same diamond closed by an fp32 node: the follow nodes sit on the cheaper side of the one cut.
TEST(PrecisionPlannerTest, DiamondIntoFp32CastsOnce) {
  DataflowGraph graph;
  const int top = graph.addNode(OpCategory::kLowPrecision);
  const int a = graph.addNode(OpCategory::kFollow);
  const int b = graph.addNode(OpCategory::kFollow);
  const int bottom = graph.addNode(OpCategory::kFp32);
  const int split = graph.addValue(top, 100);
  graph.addUse(split, a);
  graph.addUse(split, b);
  graph.addUse(graph.addValue(a, 100), bottom);
  graph.addUse(graph.addValue(b, 100), bottom);
  const PrecisionPlan plan = planPrecision(graph);
  // Cutting the shared input costs 100 (one cast for both readers); cutting the two branches costs 200.
  EXPECT_EQ(plan.precision, (std::vector<Precision>{kLow, kFp32, kFp32, kFp32}));
  const CastCost cost = castCost(graph, plan.precision);
  EXPECT_EQ(cost.casts, 1);
  EXPECT_EQ(cost.bytes, 100);
}

// A value read by three fp32 consumers and one low consumer is cast once, not three times.
TEST(PrecisionPlannerTest, FanOutPaysOneCastForAllReaders) {
  DataflowGraph graph;
  const int low = graph.addNode(OpCategory::kLowPrecision);
  const int follow = graph.addNode(OpCategory::kFollow);
  graph.addUse(graph.addValue(low, 200), follow);
  const int fanned = graph.addValue(follow, 100);
  for (int i = 0; i < 3; ++i) {
    graph.addUse(fanned, graph.addNode(OpCategory::kFp32));
  }
  graph.addUse(fanned, graph.addNode(OpCategory::kLowPrecision));
  const PrecisionPlan plan = planPrecision(graph);
  // Low: one shared cast of 100 bytes. Fp32: 200 bytes into it (and a cast back for the low reader). Counting a
  // cast per reader (300) would wrongly prefer fp32.
  EXPECT_EQ(plan.precision[follow], kLow);
  const CastCost cost = castCost(graph, plan.precision);
  EXPECT_EQ(cost.casts, 1);
  EXPECT_EQ(cost.bytes, 100);
}

// A follow node's output read in both precisions: one cast, and the producer keeps the precision of its input.
TEST(PrecisionPlannerTest, ValueReadInBothPrecisions) {
  DataflowGraph graph;
  const int input = graph.addNode(OpCategory::kFp32);
  const int follow = graph.addNode(OpCategory::kFollow);
  const int lowReader = graph.addNode(OpCategory::kLowPrecision);
  const int fp32Reader = graph.addNode(OpCategory::kFp32);
  graph.addUse(graph.addValue(input, 100), follow);
  const int both = graph.addValue(follow, 100);
  graph.addUse(both, lowReader);
  graph.addUse(both, fp32Reader);
  const PrecisionPlan plan = planPrecision(graph);
  EXPECT_EQ(plan.precision, (std::vector<Precision>{kFp32, kFp32, kLow, kFp32}));
  const CastCost cost = castCost(graph, plan.precision);
  EXPECT_EQ(cost.casts, 1);
  EXPECT_EQ(cost.bytes, 100);
}

// fp32 -> follow -> low: the cast lands on the smaller of the two values.
TEST(PrecisionPlannerTest, ChainCastsTheSmallerValue) {
  for (const bool bigFirst : {true, false}) {
    DataflowGraph graph;
    const int input = graph.addNode(OpCategory::kFp32);
    const int follow = graph.addNode(OpCategory::kFollow);
    const int low = graph.addNode(OpCategory::kLowPrecision);
    graph.addUse(graph.addValue(input, bigFirst ? 1000 : 10), follow);
    graph.addUse(graph.addValue(follow, bigFirst ? 10 : 1000), low);
    const PrecisionPlan plan = planPrecision(graph);
    // Big value first: cast the small output, so the follow node stays fp32. Small first: cast it, follow is low.
    EXPECT_EQ(plan.precision[follow], bigFirst ? kFp32 : kLow) << "bigFirst=" << bigFirst;
    EXPECT_EQ(plan.precision[low], kLow);
    EXPECT_EQ(castCost(graph, plan.precision).bytes, 10);
    EXPECT_FALSE(plan.forcedToFp32[follow]);
  }
}

// Equal costs on both sides: follow nodes prefer low precision.
TEST(PrecisionPlannerTest, TieBetweenEqualCutsPrefersLow) {
  DataflowGraph graph;
  const int low = graph.addNode(OpCategory::kLowPrecision);
  const int follow = graph.addNode(OpCategory::kFollow);
  const int fp32 = graph.addNode(OpCategory::kFp32);
  graph.addUse(graph.addValue(low, 100), follow);
  graph.addUse(graph.addValue(follow, 100), fp32);
  EXPECT_EQ(planPrecision(graph).precision[follow], kLow);
}

// A widest node fed by an fp32 producer is fp32 (and says it was forced), even though low would be cheaper.
TEST(PrecisionPlannerTest, WidestFedByFp32IsFp32) {
  DataflowGraph graph;
  const int input = graph.addNode(OpCategory::kFp32);
  const int low = graph.addNode(OpCategory::kLowPrecision);
  const int widest = graph.addNode(OpCategory::kWidest);
  const int next = graph.addNode(OpCategory::kLowPrecision);
  graph.addUse(graph.addValue(input, 1), widest);
  graph.addUse(graph.addValue(low, 1000), widest);
  graph.addUse(graph.addValue(widest, 1000), next);
  const PrecisionPlan plan = planPrecision(graph);
  EXPECT_EQ(plan.precision[widest], kFp32);
  EXPECT_TRUE(plan.forcedToFp32[widest]);
  EXPECT_EQ(plan.precision[low], kLow);
  EXPECT_FALSE(plan.forcedToFp32[low]);
  EXPECT_EQ(castCost(graph, plan.precision).bytes, 2000);
}

// Non-firing: a widest node whose producers are all low is low, and a follow producer of a widest node may be
// planned fp32 only if that is cheaper (here it is not).
TEST(PrecisionPlannerTest, WidestFedByLowIsLow) {
  DataflowGraph graph;
  const int low = graph.addNode(OpCategory::kLowPrecision);
  const int follow = graph.addNode(OpCategory::kFollow);
  const int widest = graph.addNode(OpCategory::kWidest);
  const int next = graph.addNode(OpCategory::kLowPrecision);
  graph.addUse(graph.addValue(low, 100), follow);
  graph.addUse(graph.addValue(low, 100), widest);
  graph.addUse(graph.addValue(follow, 100), widest);
  graph.addUse(graph.addValue(widest, 100), next);
  const PrecisionPlan plan = planPrecision(graph);
  EXPECT_EQ(plan.precision, std::vector<Precision>(4, kLow));
  EXPECT_FALSE(plan.forcedToFp32[widest]);
  EXPECT_EQ(castCost(graph, plan.precision).casts, 0);
}

// A planned (not fixed) fp32 producer also keeps a widest reader in fp32.
TEST(PrecisionPlannerTest, WidestFollowsPlannedFp32Producer) {
  DataflowGraph graph;
  const int input = graph.addNode(OpCategory::kFp32);
  const int follow = graph.addNode(OpCategory::kFollow);
  const int low = graph.addNode(OpCategory::kLowPrecision);
  const int widest = graph.addNode(OpCategory::kWidest);
  const int next = graph.addNode(OpCategory::kLowPrecision);
  graph.addUse(graph.addValue(input, 1000), follow);  // keeps `follow` in fp32
  graph.addUse(graph.addValue(follow, 1000), widest);
  graph.addUse(graph.addValue(low, 10), widest);
  graph.addUse(graph.addValue(widest, 10), next);
  const PrecisionPlan plan = planPrecision(graph);
  EXPECT_EQ(plan.precision[follow], kFp32);
  EXPECT_EQ(plan.precision[widest], kFp32);
  EXPECT_FALSE(plan.forcedToFp32[widest]);
  EXPECT_EQ(castCost(graph, plan.precision).bytes, 20);
}

// A low node tied (value tied to all) to an fp32 node becomes fp32; the same value castable is simply cast.
TEST(PrecisionPlannerTest, TieBetweenLowAndFp32ForcesFp32) {
  for (const bool castable : {false, true}) {
    DataflowGraph graph;
    const int low = graph.addNode(OpCategory::kLowPrecision);
    const int follow = graph.addNode(OpCategory::kFollow);
    const int fp32 = graph.addNode(OpCategory::kFp32);
    graph.addUse(graph.addValue(low, 100), follow);
    graph.addUse(graph.addValue(follow, 100, castable ? Tie::kNone : Tie::kAll), fp32);
    const PrecisionPlan plan = planPrecision(graph);
    if (castable) {
      EXPECT_EQ(plan.precision, (std::vector<Precision>{kLow, kLow, kFp32}));
      EXPECT_FALSE(plan.forcedToFp32[low]);
      EXPECT_FALSE(plan.forcedToFp32[follow]);
    } else {
      EXPECT_EQ(plan.precision[follow], kFp32);
      EXPECT_TRUE(plan.forcedToFp32[follow]);
      EXPECT_EQ(plan.precision[low], kLow);  // the tie stops at the castable value
      EXPECT_FALSE(plan.forcedToFp32[low]);
      EXPECT_FALSE(plan.forcedToFp32[fp32]);  // fp32 by category, not forced
    }
    EXPECT_EQ(castCost(graph, plan.precision).bytes, 100) << "castable=" << castable;
  }
}

TEST(PrecisionPlannerTest, TiedLowNodeIsForcedToFp32) {
  DataflowGraph graph;
  const int low = graph.addNode(OpCategory::kLowPrecision);
  const int fp32 = graph.addNode(OpCategory::kFp32);
  const int tied = graph.addValue(low, 100, Tie::kAll);
  graph.addUse(tied, fp32);
  const PrecisionPlan plan = planPrecision(graph);
  EXPECT_EQ(plan.precision, (std::vector<Precision>{kFp32, kFp32}));
  EXPECT_TRUE(plan.forcedToFp32[low]);
  EXPECT_EQ(castCost(graph, plan.precision).casts, 0);
}

// A conv output written in place by an fp32 op and read by a follow op: the conv stays low and one cast after it
// feeds both readers in fp32; a value tied to all would have made the conv fp32.
// A tensor written in place by an fp32 op (a view of it shares it) and only read by a low op: the low op reads its
// own cast of the written copy, so it stays low and nothing else moves.
TEST(PrecisionPlannerTest, LowReaderOfAWrittenTensorReadsItsOwnCast) {
  DataflowGraph graph;
  const int producer = graph.addNode(OpCategory::kFollow);
  const int writer = graph.addNode(OpCategory::kFp32);
  const int matmul = graph.addNode(OpCategory::kLowPrecision);
  for (Tie tie : {Tie::kReaders, Tie::kAll}) {
    DataflowGraph tied = graph;
    const int written = tied.addValue(producer, 100, tie);
    tied.addUse(written, writer, Access::kShares);
    tied.addUse(written, matmul, Access::kReadsOnly);
    const PrecisionPlan plan = planPrecision(tied);
    EXPECT_EQ(plan.precision[matmul], kLow);
    EXPECT_FALSE(plan.forcedToFp32[matmul]);
    EXPECT_EQ(plan.precision[writer], kFp32);
    const CastCost cost = castCost(tied, plan.precision);
    EXPECT_EQ(cost.casts, 1);
    EXPECT_EQ(cost.bytes, 100);
  }
}

// The same consumer reading and sharing a value shares it.
TEST(PrecisionPlannerTest, SharingWinsOverReadingForOneConsumer) {
  DataflowGraph graph;
  const int producer = graph.addNode(OpCategory::kFp32);
  const int follow = graph.addNode(OpCategory::kFollow);
  const int value = graph.addValue(producer, 10, Tie::kAll);
  graph.addUse(value, follow, Access::kReadsOnly);
  graph.addUse(value, follow, Access::kShares);
  EXPECT_EQ(graph.values[value].access, (std::vector<Access>{Access::kShares}));
  EXPECT_TRUE(planPrecision(graph).forcedToFp32[follow]);
}

TEST(PrecisionPlannerTest, ReadersTieLeavesTheProducerFree) {
  DataflowGraph graph;
  const int conv = graph.addNode(OpCategory::kLowPrecision);
  const int writer = graph.addNode(OpCategory::kFp32);
  const int reader = graph.addNode(OpCategory::kFollow);
  const int written = graph.addValue(conv, 100, Tie::kReaders);
  graph.addUse(written, writer);
  graph.addUse(written, reader);
  const PrecisionPlan plan = planPrecision(graph);
  EXPECT_EQ(plan.precision, (std::vector<Precision>{kLow, kFp32, kFp32}));
  EXPECT_FALSE(plan.forcedToFp32[conv]);
  EXPECT_TRUE(plan.forcedToFp32[reader]);
  const CastCost cost = castCost(graph, plan.precision);
  EXPECT_EQ(cost.casts, 1);
  EXPECT_EQ(cost.bytes, 100);
}

// Greedy painting keeps a follow node with one fp32 input in fp32 and pays twice for the big values around it;
// min-cut casts the small fp32 input instead.
TEST(PrecisionPlannerTest, MinCutBeatsGreedyPainting) {
  DataflowGraph graph;
  const int lowIn = graph.addNode(OpCategory::kLowPrecision);
  const int fp32In = graph.addNode(OpCategory::kFp32);
  const int follow = graph.addNode(OpCategory::kFollow);
  const int lowOut = graph.addNode(OpCategory::kLowPrecision);
  graph.addUse(graph.addValue(lowIn, 1000), follow);
  graph.addUse(graph.addValue(fp32In, 10), follow);
  graph.addUse(graph.addValue(follow, 1000), lowOut);
  const PrecisionPlan minCut = planPrecision(graph, PlanMethod::kMinCut);
  const PrecisionPlan greedy = planPrecision(graph, PlanMethod::kGreedy);
  EXPECT_EQ(minCut.precision[follow], kLow);
  EXPECT_EQ(greedy.precision[follow], kFp32);
  const int64_t minCutBytes = castCost(graph, minCut.precision).bytes;
  const int64_t greedyBytes = castCost(graph, greedy.precision).bytes;
  EXPECT_EQ(minCutBytes, 10);
  EXPECT_EQ(greedyBytes, 2000);
  EXPECT_LT(minCutBytes, greedyBytes);
}

TEST(PrecisionPlannerTest, CastCostCountsOneCastPerValue) {
  DataflowGraph graph;
  const int low = graph.addNode(OpCategory::kLowPrecision);
  const int a = graph.addNode(OpCategory::kFp32);
  const int b = graph.addNode(OpCategory::kFp32);
  const int value = graph.addValue(low, 42);
  graph.addUse(value, a);
  graph.addUse(value, b);
  graph.addUse(value, a);  // a repeated use is one consumer
  EXPECT_EQ(graph.values[value].consumers.size(), 2u);
  const CastCost cost = castCost(graph, {kLow, kFp32, kFp32});
  EXPECT_EQ(cost.casts, 1);
  EXPECT_EQ(cost.bytes, 42);
  EXPECT_EQ(castCost(graph, {kLow, kLow, kLow}).casts, 0);
}

TEST(PrecisionPlannerTest, EmptyGraph) {
  DataflowGraph graph;
  const PrecisionPlan plan = planPrecision(graph);
  EXPECT_TRUE(plan.precision.empty());
  EXPECT_EQ(castCost(graph, plan.precision).casts, 0);
}

// 100k nodes in a chain: low, follow..., fp32, with one cheap value in the middle. Solved iteratively (no stack
// overflow), cut at the cheap value.
TEST(PrecisionPlannerTest, LongChainCutsAtCheapestValue) {
  constexpr int kNodes = 100000;
  constexpr int kCheap = 61234;  // the value from node kCheap to node kCheap + 1
  DataflowGraph graph;
  graph.nodes.reserve(kNodes);
  graph.values.reserve(kNodes);
  graph.addNode(OpCategory::kLowPrecision);
  for (int i = 1; i < kNodes - 1; ++i) {
    graph.addNode(OpCategory::kFollow);
  }
  graph.addNode(OpCategory::kFp32);
  for (int i = 0; i + 1 < kNodes; ++i) {
    graph.addUse(graph.addValue(i, i == kCheap ? 3 : 100), i + 1);
  }
  for (const PlanMethod method : {PlanMethod::kMinCut, PlanMethod::kGreedy}) {
    const PrecisionPlan plan = planPrecision(graph, method);
    ASSERT_EQ(plan.precision.size(), static_cast<size_t>(kNodes));
    if (method == PlanMethod::kMinCut) {
      EXPECT_EQ(plan.precision[kCheap], kLow);
      EXPECT_EQ(plan.precision[kCheap + 1], kFp32);
      EXPECT_EQ(castCost(graph, plan.precision).bytes, 3);
    } else {
      // Painting runs low all the way to the fp32 node.
      EXPECT_EQ(plan.precision[kNodes - 2], kLow);
      EXPECT_EQ(castCost(graph, plan.precision).bytes, 100);
    }
  }
}

TEST(PrecisionPlannerTest, Fp32OutputFeedingFp32NeedsNoCast) {
  DataflowGraph graph;
  const int input = graph.addNode(OpCategory::kFp32);
  const int matmul = graph.addNode(OpCategory::kLowFp32Output);
  const int norm = graph.addNode(OpCategory::kFp32);
  graph.addUse(graph.addValue(input, 100), matmul);
  graph.addUse(graph.addValue(matmul, 1000), norm);
  const PrecisionPlan plan = planPrecision(graph);
  EXPECT_EQ(plan.precision[matmul], kLow);
  EXPECT_EQ(producedPrecision(graph, plan.precision, 1), kFp32);
  const CastCost cost = castCost(graph, plan.precision);
  EXPECT_EQ(cost.casts, 1);  // the input into the matmul; its output reaches the norm as it is
  EXPECT_EQ(cost.bytes, 100);
}

TEST(PrecisionPlannerTest, Fp32OutputDrawsItsFollowersToFp32) {
  // A plain low node would pull the follow node low (its 1000-byte output cast once before the fp32 norm either
  // way); written in fp32, the follow node stays fp32 and nothing after the matmul is cast.
  DataflowGraph graph;
  const int matmul = graph.addNode(OpCategory::kLowFp32Output);
  const int follow = graph.addNode(OpCategory::kFollow);
  const int norm = graph.addNode(OpCategory::kFp32);
  graph.addUse(graph.addValue(matmul, 1000), follow);
  graph.addUse(graph.addValue(follow, 1000), norm);
  const PrecisionPlan plan = planPrecision(graph);
  EXPECT_EQ(plan.precision[follow], kFp32);
  EXPECT_EQ(castCost(graph, plan.precision).casts, 0);
  EXPECT_FALSE(plan.forcedToFp32[follow]);
}

TEST(PrecisionPlannerTest, Fp32OutputTiedToItsReadersMakesThemFp32) {
  DataflowGraph graph;
  const int matmul = graph.addNode(OpCategory::kLowFp32Output);
  const int reader = graph.addNode(OpCategory::kLowPrecision);
  graph.addUse(graph.addValue(matmul, 1000, Tie::kAll), reader);
  const PrecisionPlan plan = planPrecision(graph);
  EXPECT_EQ(plan.precision[matmul], kLow);
  EXPECT_EQ(plan.precision[reader], kFp32);
  EXPECT_TRUE(plan.forcedToFp32[reader]);
  EXPECT_FALSE(plan.forcedToFp32[matmul]);
}

} // namespace
} // namespace torch_mp::core
