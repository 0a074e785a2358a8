#include "jit/ir/observed_values.h"

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <vector>

#include "core/op_facts.h"
#include "jit/ir/casts.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// Whether the example inputs ran this block itself: it defines a value they were seen producing, or nothing but
// casts and constants (say, a branch that returns an outer value). torch_mp's own casts were never observed.
bool ranItself(const Block* block, const ObservedValues& observed) {
  bool definesValues = false;
  for (const Node* node : block->nodes()) {
    if (plainCastTarget(node)) {
      continue;
    }
    for (const Value* output : node->outputs()) {
      definesValues = definesValues || node->kind() != c10::prim::Constant;
      auto seen = observed.find(output);
      if (seen != observed.end() && !seen->second.inferred) {
        return true;
      }
    }
  }
  return !definesValues;
}
} // namespace

bool preservesDtype(const Node* node) {
  return core::factsOf(node->kind().toQualString()).preservesDtype && node->outputs().size() == 1 &&
      !node->inputs().empty();
}

bool blockRan(const Block* block, const ObservedValues& observed) {
  return outermostUntakenBlock(block, nullptr, observed) == nullptr;
}

const Block* outermostUntakenBlock(const Block* block, const Block* stop, const ObservedValues& observed) {
  const Block* untaken = nullptr;
  for (; block != stop && block->owningNode(); block = block->owningNode()->owningBlock()) {
    if (!ranItself(block, observed)) {
      untaken = block;
    }
  }
  return untaken;
}

namespace {

void collectInputDependentRank(
    const torch::jit::Block* block,
    const ObservedValues& observed,
    std::unordered_set<const torch::jit::Value*>& varying) {
  for (const torch::jit::Node* node : block->nodes()) {
    std::vector<const torch::jit::Block*> ran;
    for (const torch::jit::Block* sub : node->blocks()) {
      if (blockRan(sub, observed)) {
        ran.push_back(sub);
        collectInputDependentRank(sub, observed, varying);
      }
    }
    bool varies = node->kind() == c10::aten::squeeze || node->kind() == c10::aten::squeeze_;
    for (const torch::jit::Value* input : node->inputs()) {
      varies = varies || varying.count(input);
    }
    for (const torch::jit::Block* sub : ran) {
      for (const torch::jit::Value* output : sub->outputs()) {
        varies = varies || varying.count(output);
      }
    }
    if (varies) {
      varying.insert(node->outputs().begin(), node->outputs().end());
    }
  }
}

} // namespace

std::unordered_set<const torch::jit::Value*> valuesOfInputDependentRank(
    const torch::jit::Block* block, const ObservedValues& observed) {
  std::unordered_set<const torch::jit::Value*> varying;
  collectInputDependentRank(block, observed, varying);
  return varying;
}

std::optional<std::vector<int64_t>> knownSizes(const ObservedValue& seen) {
  if (seen.nested) {
    return std::nullopt;
  }
  return seen.sizes;
}

const ObservedValue* observedThroughCasts(const ObservedValues& observed, const Value* value) {
  return askThroughPlainCasts(value, [&](const Value* step) -> std::optional<const ObservedValue*> {
           auto it = observed.find(step);
           return it != observed.end() && it->second.isTensor ? std::make_optional(&it->second) : std::nullopt;
         }).value_or(nullptr);
}

std::optional<std::vector<int64_t>> sizesOf(const ObservedValues& observed, const Value* value) {
  if (value->node()->kind() == c10::prim::Constant) {
    const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
    if (constant && constant->isTensor()) {
      return constant->toTensor().sizes().vec();
    }
  }
  const ObservedValue* seen = observedThroughCasts(observed, value);
  return seen ? knownSizes(*seen) : std::nullopt;
}

namespace {

// finiteMagnitudes of `count` fp32 values in one pass: no copy, no reduction kernels, no item() calls. On the bits,
// in 16 lanes without branches, so that the compiler vectorises it: |x| is the bits without the sign, inf and NaN have
// every exponent bit set. Built for AVX2 too, chosen at load time: 9.5 G values/s per core against 1.9 for a plain
// loop, which GCC does not vectorise (a calibration input's observation cost 2.9 fp32 forwards of a conv net with
// oneDNN's kernels, most of it in this scan).
__attribute__((target_clones("avx2", "default"))) FiniteMagnitudes scanMagnitudes(const float* data, int64_t count) {
  constexpr int kLanes = 16;
  constexpr uint32_t kMagnitude = 0x7fffffffu;
  constexpr uint32_t kExponent = 0x7f800000u;  // the bits of inf
  uint32_t largest[kLanes];
  uint32_t smallest[kLanes];
  uint32_t nonFinite[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) {
    largest[lane] = 0u;
    smallest[lane] = kExponent;
    nonFinite[lane] = 0u;
  }
  // non-negative floats order as their bits do: the lanes compare bits
  auto scan = [&](const float* values, int lanes) {
    for (int lane = 0; lane < lanes; ++lane) {
      uint32_t bits;
      std::memcpy(&bits, values + lane, sizeof(bits));
      bits &= kMagnitude;
      const uint32_t bad = bits >= kExponent ? ~0u : 0u;
      const uint32_t skipped = bad | (bits == 0u ? ~0u : 0u);  // no smallest non-zero from a zero or a bad value
      const uint32_t forLargest = bits & ~bad;
      const uint32_t forSmallest = (bits & ~skipped) | (kExponent & skipped);
      largest[lane] = largest[lane] > forLargest ? largest[lane] : forLargest;
      smallest[lane] = smallest[lane] < forSmallest ? smallest[lane] : forSmallest;
      nonFinite[lane] |= bad;
    }
  };
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    scan(data + i, kLanes);
  }
  scan(data + i, static_cast<int>(count - i));
  uint32_t top = 0u;
  uint32_t bottom = kExponent;
  uint32_t bad = 0u;
  for (int lane = 0; lane < kLanes; ++lane) {
    top = std::max(top, largest[lane]);
    bottom = std::min(bottom, smallest[lane]);
    bad |= nonFinite[lane];
  }
  float largestValue;
  float smallestValue;
  std::memcpy(&largestValue, &top, sizeof(top));
  std::memcpy(&smallestValue, &bottom, sizeof(bottom));
  return {largestValue, smallestValue, bad == 0u};
}

// Whether none of `count` floating values whose bits are `Bits` has all exponent bits set (inf and NaN).
template <typename Bits, Bits kExponent>
bool noneNonFinite(const void* data, int64_t count) {
  const Bits* bits = static_cast<const Bits*>(data);
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  std::vector<char> bad(static_cast<size_t>(chunks), 0);
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      const int64_t first = chunk * kChunk;
      const int64_t last = std::min(count, first + kChunk);
      bool any = false;
      for (int64_t i = first; i < last; ++i) {
        any = any | ((bits[i] & kExponent) == kExponent);
      }
      bad[static_cast<size_t>(chunk)] = any;
    }
  });
  return std::none_of(bad.begin(), bad.end(), [](char b) { return b != 0; });
}

} // namespace

bool allFinite(const at::Tensor& tensor) {
  if (tensor.numel() == 0) {
    return true;
  }
  if (tensor.is_cpu() && tensor.layout() == c10::kStrided && tensor.is_non_overlapping_and_dense()) {
    // dense in some order (a transpose, a channels_last tensor): its storage from its offset holds exactly its values
    const void* data = tensor.const_data_ptr();
    switch (tensor.scalar_type()) {
      case c10::ScalarType::Float:
        return noneNonFinite<uint32_t, 0x7F800000u>(data, tensor.numel());
      case c10::ScalarType::BFloat16:
        return noneNonFinite<uint16_t, 0x7F80u>(data, tensor.numel());
      case c10::ScalarType::Half:
        return noneNonFinite<uint16_t, 0x7C00u>(data, tensor.numel());
      default:
        break;
    }
  }
  return at::isfinite(tensor).all().item<bool>();
}

FiniteMagnitudes finiteMagnitudes(const at::Tensor& tensor) {
  constexpr double kNone = std::numeric_limits<double>::infinity();
  if (tensor.numel() == 0) {
    return {};
  }
  // fp32 CPU tensors (every observed value of a CPU run, every weight): one pass over the data, in parallel chunks,
  // instead of |x|, aminmax and, where the tensor holds a zero (any value after a relu) or a non-finite number, masked
  // copies and more reductions: eight passes and two copies of the tensor. A strided view is made contiguous first.
  if (tensor.scalar_type() == c10::ScalarType::Float && tensor.is_cpu() && tensor.layout() == c10::kStrided) {
    const at::Tensor dense = tensor.contiguous();
    const float* data = dense.const_data_ptr<float>();
    constexpr int64_t kChunk = int64_t{1} << 16;
    const int64_t count = dense.numel();
    const int64_t chunks = (count + kChunk - 1) / kChunk;
    std::vector<FiniteMagnitudes> partial(static_cast<size_t>(chunks));
    at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t chunk = begin; chunk < end; ++chunk) {
        const int64_t first = chunk * kChunk;
        partial[static_cast<size_t>(chunk)] = scanMagnitudes(data + first, std::min(kChunk, count - first));
      }
    });
    FiniteMagnitudes all{0.0, kNone, true};
    for (const FiniteMagnitudes& part : partial) {
      all.largest = std::max(all.largest, part.largest);
      all.smallest = std::min(all.smallest, part.smallest);
      all.allFinite = all.allFinite && part.allFinite;
    }
    return all;
  }
  // aminmax of |x| in one pass; only a tensor holding zeros, infinities or NaN (which aminmax propagates) pays for a
  // masked copy
  const at::Tensor absolute = tensor.abs();
  auto [low, high] = absolute.aminmax();
  double largest = high.item<double>();
  double smallest = low.item<double>();
  const bool finite = std::isfinite(largest);
  if (!finite) {
    largest = absolute.masked_fill(absolute.isfinite().logical_not(), 0).max().item<double>();
  }
  if (!finite || smallest == 0.0) {
    const at::Tensor ignored = absolute.isfinite().logical_not().logical_or_(absolute.eq(0));
    smallest = absolute.masked_fill(ignored, kNone).min().item<double>();
  }
  return {largest, smallest, finite};
}

double largestFiniteMagnitude(const at::Tensor& tensor) {
  return finiteMagnitudes(tensor).largest;
}

ObservedValues observationOfCopy(
    const ObservedValues& observed, const torch::jit::Graph& original, torch::jit::Graph& copy) {
  const std::unordered_map<const Value*, Value*> valueOf = correspondingValues(original, copy);
  ObservedValues carried;
  carried.reserve(observed.size());
  for (const auto& [value, seen] : observed) {
    carried.emplace(valueOf.at(value), seen);
  }
  return carried;
}

} // namespace torch_mp::jit
