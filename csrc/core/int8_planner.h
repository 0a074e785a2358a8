// Int8 planning: which nodes run as int8 kernels (or follow them on uint8), the third label beside the float plan's
// low and fp32. Knows nothing about TorchScript or FX: a front hands over facts per node and per value.
//
// Input: the candidate nodes (kernel, follow and no-kernel ops of core/int8_kernels), each with its FLOPs, whether the float plan
// would run it low, whether its weight is a stored tensor and whether the accuracy fallback keeps it float; the
// values int8 nodes would read quantized, each with its producer, those readers, its size and its observed range.
//
// Cost model (Int8CostModel, seconds per inference): an int8 kernel saves
//     flops / fp32Rate * (1 / floatSpeedup - 1 / int8Speedup)
// where floatSpeedup is lowFloatSpeedup for a node the float plan runs low, else 1; a value read quantized costs one
// quantize pass, numel * 5 bytes / bytesPerSecond + secondsPerPass, unless its producer is itself int8 (the kernel
// writes uint8, a follow op keeps its input's grid: the quantize fuses into it). One quantize serves all its int8
// readers. A follow op saves nothing of its own: it is int8 only where that spares a quantize after it.
//
// Decision: the labels minimising (time of float kernels lost) + (quantize passes paid), exactly, as an s-t minimum
// cut: source side int8, sink side float. A kernel is an edge source -> node of its saving; a value's quantize an
// auxiliary vertex that every int8 reader pulls to the source side (infinite edges reader -> aux) and that pays its
// cost where its producer is float (edge aux -> producer, or aux -> sink where the producer is no candidate). Follow
// ops pay a tie-breaking picosecond to be int8, so a tie leaves them float (no quantization error for nothing).
// Nodes the facts rule out (no kernel, a computed weight, a value read quantized outside the range guard, kept by the
// fallback) are tied to the sink.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/fast_kernels.h"
#include "core/int8_kernels.h"

namespace torch_mp::core {

struct Int8CostModel {
  double fp32MultiplyAddsPerSecond = 5e10;  // one AVX2 / AVX-512 core's fp32 GEMM rate; only its ratio to bytes counts
  double int8Speedup = 2.0;                 // int8 kernel time / fp32 kernel time, inverted
  double lowFloatSpeedup = 1.0;             // the low float dtype's kernels against fp32 (1: no fast kernels)
  double bytesPerSecond = 1e10;             // a quantize pass: fp32 read + uint8 written
  double secondsPerPass = 3e-6;             // launching one more pass over memory

  // The x86 CPU with these features: VNNI (avx512_vnni, avx_vnni) or AMX-INT8 give full-range uint8 dot products
  // (int8Speedup 3, AMX 6); without them AVX2's vpmaddubsw sums pairs into int16 (2, and the activations take the
  // reduced 7-bit range: reducedRange). lowFloatSpeedup from the bf16 / fp16 kernels: AMX 3, AVX512 1.5.
  static Int8CostModel forCpu(const CpuFeatures& features);
  // Whether activations must use the reduced range [0, 127] on this CPU (no VNNI: vpmaddubsw saturates int16 sums).
  static bool reducedRange(const CpuFeatures& features);
};

struct Int8NodeFacts {
  std::string op;
  int64_t flops = 0;           // multiply-adds at the example inputs' sizes (core/flop_formulas)
  bool runsLowFloat = false;   // the float plan's rule makes it low
  bool weightStored = true;    // kernel ops: its weight is a parameter, buffer or constant (per-channel scales)
  bool keptByFallback = false;  // the accuracy fallback keeps it float
};

struct Int8ValueFacts {
  int producer = -1;         // a node index, or -1: a graph input or a node that is no candidate; a value an epilogue
                             // op writes from a kernel's output counts as the kernel's (the front looks through them)
  std::vector<int> readers;  // candidate nodes that would read it quantized (a kernel's activation, a follow op's input)
  int64_t numel = 0;
  double min = 0.0;          // observed over every run
  double max = 0.0;
  bool finite = true;
};

// Whether a value can be read quantized: observed finite, with a range wider than one value and wide enough that 255
// steps of it are no finer than float32's epsilon, the smallest scale PyTorch's observers give (a value vanishing
// through a random-weight MobileNetV2, 1e-9 wide, would quantize to its zero point) (else kRangeGuard).
bool int8RangeUsable(const Int8ValueFacts& value);

std::vector<Int8NodePlan> planInt8(
    const std::vector<Int8NodeFacts>& nodes,
    const std::vector<Int8ValueFacts>& values,
    const Int8CostModel& model);

// Affine uint8 quantization of an activation from its observed range, as PyTorch's MinMaxObserver makes it: the range
// widened to hold 0, scale = range / (qmax - qmin), zero point rounded into [qmin, qmax].
struct ActivationQuantization {
  double scale = 1.0;
  int64_t zeroPoint = 0;
  int64_t qmin = 0;
  int64_t qmax = 255;
};
ActivationQuantization activationQuantization(double min, double max, bool reducedRange);

} // namespace torch_mp::core
