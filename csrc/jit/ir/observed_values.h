// What an observation knows of a graph's values (dtype, device, sizes, magnitudes: one ObservedValue per value),
// and the questions every pass asks of it: which blocks the example inputs ran, a value's sizes through the
// conversion's casts, which values' rank the inputs decide. prepare/value_observer and load_time/typed_observation
// fill it; planning, rewriting and reporting only read it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/flat_hash_map.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <unordered_set>
#include <vector>

#include "jit/ir/ir_utils.h"

namespace torch_mp::jit {

struct ObservedValue {
  bool isTensor = false;  // false: a container, or an Optional[Tensor] that held None
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::Device device = c10::Device(c10::kCPU);
  int64_t numel = 0;
  // at the largest element count; empty for a nested tensor (nn.TransformerEncoder's fast path with a padding
  // mask), whose rows differ in length: ask knownSizes() rather than reading this
  std::vector<int64_t> sizes;
  bool nested = false;
  // completed statically (inferUnreachedDtypes), never seen running: numel is 0
  bool inferred = false;
  double largestMagnitude = 0.0;  // fp32 tensors: max |x| over finite elements, across all times it was seen
  // fp32 tensors: min |x| over finite non-zero elements, across all times it was seen (infinity: none seen); what the
  // underflow guard compares with the low dtype's smallest number
  double smallestMagnitude = std::numeric_limits<double>::infinity();
  // fp32 tensors: whether it held NaN or inf any time it was seen (verification asks a converted value to be finite
  // only where fp32's was)
  bool nonFinite = false;
  // false where the values were never seen (dtype knowledge from types, typed_observation): largestMagnitude is 0
  // and onlyIntegers true, so no observed range guard fires
  bool rangeObserved = true;
  // fp32 tensors: whether every time it held values beyond kIntegerCheckAbove they were all integers (positions,
  // indices, pixel coordinates), which fp16 / bf16 hold exactly only up to 2048 / 256
  bool onlyIntegers = true;
};

// Open addressing: every pass of a conversion looks values up in a map of the whole graph's size, and a
// node-per-entry map costs a second cache miss per lookup. Filled only while preparing: a reference into it stays
// valid through a conversion, which only reads it.
using ObservedValues = ska::flat_hash_map<const torch::jit::Value*, ObservedValue>;

// Whether the example inputs ran `block`: the graph's own block did; a nested one (a branch, a loop body) did when
// it and every block around it ran, that is, each defines a value they were seen producing (values completed by
// inferUnreachedDtypes do not count) or nothing but casts and constants.
bool blockRan(const torch::jit::Block* block, const ObservedValues& observed);

// The outermost of `block` and the blocks around it, up to but not including `stop`, that the example inputs did
// not run; nullptr when they ran all of them.
const torch::jit::Block* outermostUntakenBlock(
    const torch::jit::Block* block,
    const torch::jit::Block* stop,
    const ObservedValues& observed);

// Whether the node's one tensor output always has its first input's dtype (views, reshapes, copies).
bool preservesDtype(const torch::jit::Node* node);

// The sizes the value had (at its largest element count), or nothing for a nested tensor, which has none.
std::optional<std::vector<int64_t>> knownSizes(const ObservedValue& seen);

// The tensor observation of `value`, or of the value a chain of plain casts made it from: the conversion's casts are
// new values nobody observed, and a cast changes neither sizes nor device (only the dtype, which the observation
// then does not tell). Null where neither was observed as a tensor.
const ObservedValue* observedThroughCasts(const ObservedValues& observed, const torch::jit::Value* value);

// The sizes of a tensor value: a constant's own, else knownSizes of observedThroughCasts (constants the plan made,
// such as a weight's low-precision copy, were never observed).
std::optional<std::vector<int64_t>> sizesOf(const ObservedValues& observed, const torch::jit::Value* value);

// max |x| over the finite elements of a floating tensor (0 for an empty one), and min |x| over its finite non-zero
// elements (infinity where it has none).
struct FiniteMagnitudes {
  double largest = 0.0;
  double smallest = std::numeric_limits<double>::infinity();
  bool allFinite = true;  // no NaN or inf
};
FiniteMagnitudes finiteMagnitudes(const at::Tensor& tensor);

// Whether a floating tensor holds no NaN and no inf. fp32, bf16 and fp16 CPU tensors laid out densely are read in
// place, in one pass (no boolean tensor, no reduction kernel): verification asks it of every value of every run.
bool allFinite(const at::Tensor& tensor);

// finiteMagnitudes(tensor).largest.
double largestFiniteMagnitude(const at::Tensor& tensor);

// Below this magnitude every integer is exact in both low dtypes, so integrality is not checked (it costs a pass).
constexpr double kIntegerCheckAbove = 256.0;

// The values whose number of dimensions can differ from what the example inputs showed: results of squeeze (it
// drops the dims that happen to have size 1: a [B, 1] tensor squeezes to 0-dim at batch 1) and everything computed
// from them. Their observed (or traced) rank holds for the example inputs only. A block the example inputs never ran
// counts for nothing (InstanceNorm's branch for an unbatched input squeezes): an If's outputs were observed with the
// rank of the branch taken, which every pass reading observed sizes already assumes is the branch taken later.
std::unordered_set<const torch::jit::Value*> valuesOfInputDependentRank(
    const torch::jit::Block* block, const ObservedValues& observed);

// The observation of `original`'s values, keyed by the values of `copy` that correspond to them (correspondingValues:
// a copied graph, a cloned module's method).
ObservedValues observationOfCopy(
    const ObservedValues& observed, const torch::jit::Graph& original, torch::jit::Graph& copy);

} // namespace torch_mp::jit
