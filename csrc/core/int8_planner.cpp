#include "core/int8_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/min_cut.h"

namespace torch_mp::core {
namespace {

constexpr double kPicoseconds = 1e12;  // the cut's integer capacities
constexpr int64_t kFollowTieBreak = 1;  // a picosecond: a follow op that spares nothing stays float
constexpr double kSmallestScale = std::numeric_limits<float>::epsilon();  // as PyTorch's observers clamp it

int64_t picoseconds(double seconds) {
  return static_cast<int64_t>(std::llround(std::max(seconds, 0.0) * kPicoseconds));
}

double quantizeSeconds(const Int8ValueFacts& value, const Int8CostModel& model) {
  return static_cast<double>(value.numel) * 5.0 / model.bytesPerSecond + model.secondsPerPass;
}

// The facts' verdict on a node before costs: kInt8 where it may be int8.
Int8Reason eligibility(const Int8NodeFacts& node) {
  const Int8OpFacts* facts = int8FactsOf(node.op);
  if (facts == nullptr || facts->role == Int8Role::kNone) {
    return Int8Reason::kNoInt8Form;
  }
  if (facts->role == Int8Role::kEpilogue) {
    return Int8Reason::kNoInt8Form;  // its front counts what it writes as its kernel's
  }
  if (facts->role == Int8Role::kNoKernel) {
    return Int8Reason::kNoKernel;
  }
  if (facts->role == Int8Role::kKernel && !node.weightStored) {
    return Int8Reason::kWeightComputed;
  }
  if (node.keptByFallback) {
    return Int8Reason::kKeptByFallback;
  }
  return Int8Reason::kInt8;
}

} // namespace

Int8CostModel Int8CostModel::forCpu(const CpuFeatures& features) {
  Int8CostModel model;
  if (features.has(CpuFeature::kAmxInt8)) {
    model.int8Speedup = 6.0;
  } else if (!reducedRange(features)) {
    model.int8Speedup = 3.0;
  }
  if (features.has(CpuFeature::kAmxBf16) || features.has(CpuFeature::kAmxFp16)) {
    model.lowFloatSpeedup = 3.0;
  } else if (features.has(CpuFeature::kAvx512Bf16) || features.has(CpuFeature::kAvx512Fp16)) {
    model.lowFloatSpeedup = 1.5;
  }
  return model;
}

bool Int8CostModel::reducedRange(const CpuFeatures& features) {
  return !(features.has(CpuFeature::kAvx512Vnni) || features.has(CpuFeature::kAvxVnni) ||
           features.has(CpuFeature::kAmxInt8));
}

bool int8RangeUsable(const Int8ValueFacts& value) {
  if (!value.finite || !std::isfinite(value.min) || !std::isfinite(value.max) || !(value.max > value.min)) {
    return false;
  }
  // below this the scale would be clamped to its smallest (MinMaxObserver's eps) and the values round to the zero point
  const double widened = std::max(value.max, 0.0) - std::min(value.min, 0.0);
  return widened >= 255.0 * kSmallestScale;
}

std::vector<Int8NodePlan> planInt8(
    const std::vector<Int8NodeFacts>& nodes,
    const std::vector<Int8ValueFacts>& values,
    const Int8CostModel& model) {
  const int numNodes = static_cast<int>(nodes.size());
  std::vector<Int8NodePlan> plan(nodes.size());
  for (int i = 0; i < numNodes; ++i) {
    plan[i].reason = eligibility(nodes[i]);
    if (plan[i].reason == Int8Reason::kInt8 && int8FactsOf(nodes[i].op)->role == Int8Role::kKernel) {
      const double floatSpeedup = nodes[i].runsLowFloat ? model.lowFloatSpeedup : 1.0;
      const double fp32Seconds = static_cast<double>(nodes[i].flops) / model.fp32MultiplyAddsPerSecond;
      plan[i].savedSeconds = fp32Seconds * (1.0 / floatSpeedup - 1.0 / model.int8Speedup);
    }
  }
  for (const Int8ValueFacts& value : values) {
    if (!int8RangeUsable(value)) {
      for (int reader : value.readers) {
        if (plan[reader].reason == Int8Reason::kInt8) {
          plan[reader].reason = Int8Reason::kRangeGuard;
        }
      }
    }
  }

  // vertices: 0 source (int8), 1 sink (float), 2 + i node i, then one per value read quantized
  const int source = 0, sink = 1;
  MinCut cut(2 + numNodes);
  auto vertex = [](int node) { return 2 + node; };
  for (int i = 0; i < numNodes; ++i) {
    if (plan[i].reason != Int8Reason::kInt8) {
      cut.addEdge(vertex(i), sink, MinCut::kInfinite);
    } else if (int8FactsOf(nodes[i].op)->role == Int8Role::kKernel) {
      cut.addEdge(source, vertex(i), picoseconds(plan[i].savedSeconds));
    } else {
      cut.addEdge(vertex(i), sink, kFollowTieBreak);
    }
  }
  for (const Int8ValueFacts& value : values) {
    if (value.readers.empty()) {
      continue;
    }
    const int quantize = cut.addVertex();
    for (int reader : value.readers) {
      cut.addEdge(vertex(reader), quantize, MinCut::kInfinite);
    }
    cut.addEdge(quantize, value.producer >= 0 ? vertex(value.producer) : sink,
                picoseconds(quantizeSeconds(value, model)));
  }
  cut.solve(source, sink);

  for (int i = 0; i < numNodes; ++i) {
    plan[i].int8 = plan[i].reason == Int8Reason::kInt8 && !cut.onSmallestSinkSide(vertex(i));
  }
  for (const Int8ValueFacts& value : values) {
    const bool producerInt8 = value.producer >= 0 && plan[value.producer].int8;
    for (int reader : value.readers) {
      if (!producerInt8) {
        plan[reader].quantizeSeconds += quantizeSeconds(value, model);
      }
    }
  }
  for (Int8NodePlan& node : plan) {
    if (!node.int8 && node.reason == Int8Reason::kInt8) {
      node.reason = Int8Reason::kCostsMore;
    }
  }
  return plan;
}

ActivationQuantization activationQuantization(double min, double max, bool reducedRange) {
  ActivationQuantization q;
  q.qmax = reducedRange ? 127 : 255;
  const double low = std::min(min, 0.0);
  const double high = std::max(max, 0.0);
  q.scale = std::max((high - low) / static_cast<double>(q.qmax - q.qmin), kSmallestScale);
  q.zeroPoint = std::clamp<int64_t>(q.qmin - std::llround(low / q.scale), q.qmin, q.qmax);
  return q;
}

} // namespace torch_mp::core
