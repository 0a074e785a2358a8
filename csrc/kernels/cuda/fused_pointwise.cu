// torch_mp::fused_pointwise on CUDA (kernels/fused_pointwise.h): one thread runs the program on 8 consecutive
// elements in registers (16-byte loads and stores) where every operand's data pointer is 16-byte aligned, else on one
// element at a time; a grid-stride loop covers the elements, the last numel % 8 one at a time. 256 threads a block,
// at most as many blocks as the GPU holds at once.
//
// The program is decoded on the host into the kernel's parameter (read in place from constant memory; every thread
// runs the same instruction, so its branches never diverge), each instruction naming the stack slot it writes: the
// stack depth after every instruction is known before running (checkProgram), so in the kernel each slot is a fixed
// set of registers, never local memory. Kernels are built for stacks of 2, 4 and 8 slots; the smallest that holds
// the program runs (fewer registers, more threads resident).
//
// The same bits as the CPU kernel for the same program (kernels/fused_pointwise.h): inputs widened to fp32 exactly,
// each op in fp32 with the IEEE round-to-nearest intrinsics (__fadd_rn & co.: never contracted into an FMA, whatever
// --fmad says; true division; subnormals kept, as no --use_fast_math), relu as ATen's CUDA clamp_min (NaN kept, -0
// becomes +0), roundings through c10::Half / c10::BFloat16 as ATen's CUDA casts and stores do (__float2half_rn;
// __float2bfloat16, or the same round-to-nearest-even in software before sm_80). What ATen's CUDA kernels do
// differently from its CPU ones (a division by a number multiplies by the number's fp32 reciprocal) the program says
// (jit/rewrite/fuse_pointwise).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "kernels/fused_pointwise.h"

#if defined(__USE_FAST_MATH__)
#error "kernels/cuda/fused_pointwise.cu must be compiled without --use_fast_math: it must round as ATen's kernels do"
#endif

namespace torch_mp::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kVector = 8;              // elements per thread and step on the wide path
constexpr int kAlignment = 16;          // bytes: one 16-byte access per 8 fp16/bf16 values, two per 8 fp32 ones
constexpr int kMaxInputs = 32;          // more take the ATen-ops path (a kernel parameter has 4 KiB)
constexpr int kMaxInstructions = 256;

enum class Dtype : uint8_t { kFloat, kHalf, kBFloat16 };

struct Instruction {
  uint8_t op;       // PointwiseOp
  uint8_t slot;     // the stack slot written: the depth after it, minus one
  uint8_t operand;  // kInput: the input; kRound: the Dtype
  float scalar;     // kScalar: the value
};

// The kernel's whole argument, passed by value (__grid_constant__: read in place, not copied per thread).
struct Program {
  const void* inputs[kMaxInputs];
  void* out;
  Dtype inputTypes[kMaxInputs];
  Dtype outType;
  int length;
  Instruction code[kMaxInstructions];
};
static_assert(sizeof(Program) <= 4000, "a kernel parameter has at most 4 KiB");

Dtype dtypeOf(c10::ScalarType type) {
  return type == c10::ScalarType::Half ? Dtype::kHalf
      : type == c10::ScalarType::BFloat16 ? Dtype::kBFloat16
                                          : Dtype::kFloat;
}

// 16 bytes of T, loaded and stored as one access.
template <typename T>
struct alignas(kAlignment) Pack {
  static constexpr int kSize = kAlignment / sizeof(T);
  T values[kSize];
};

template <typename T, int V>
__device__ __forceinline__ void loadAs(const void* base, int64_t begin, float (&row)[V]) {
  const T* source = static_cast<const T*>(base) + begin;
  if constexpr (V == 1) {
    row[0] = static_cast<float>(source[0]);
  } else {
    constexpr int kPack = Pack<T>::kSize;
    static_assert(V % kPack == 0, "whole 16-byte accesses");
#pragma unroll
    for (int j = 0; j < V; j += kPack) {
      const Pack<T> pack = *reinterpret_cast<const Pack<T>*>(source + j);
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        row[j + k] = static_cast<float>(pack.values[k]);
      }
    }
  }
}

template <typename T, int V>
__device__ __forceinline__ void storeAs(const float (&row)[V], int64_t begin, void* base) {
  T* target = static_cast<T*>(base) + begin;
  if constexpr (V == 1) {
    target[0] = static_cast<T>(row[0]);
  } else {
    constexpr int kPack = Pack<T>::kSize;
#pragma unroll
    for (int j = 0; j < V; j += kPack) {
      Pack<T> pack;
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        pack.values[k] = static_cast<T>(row[j + k]);
      }
      *reinterpret_cast<Pack<T>*>(target + j) = pack;
    }
  }
}

template <int V>
__device__ __forceinline__ void load(Dtype type, const void* base, int64_t begin, float (&row)[V]) {
  switch (type) {
    case Dtype::kHalf:
      loadAs<c10::Half>(base, begin, row);
      break;
    case Dtype::kBFloat16:
      loadAs<c10::BFloat16>(base, begin, row);
      break;
    default:
      loadAs<float>(base, begin, row);
  }
}

template <int V>
__device__ __forceinline__ void store(Dtype type, const float (&row)[V], int64_t begin, void* base) {
  switch (type) {
    case Dtype::kHalf:
      storeAs<c10::Half>(row, begin, base);
      break;
    case Dtype::kBFloat16:
      storeAs<c10::BFloat16>(row, begin, base);
      break;
    default:
      storeAs<float>(row, begin, base);
  }
}

// One instruction whose result goes to slot S of a stack of kDepth slots (a binary op reads slots S and S + 1).
template <int S, int kDepth, int V>
__device__ __forceinline__ void step(
    const Program& program,
    const Instruction& instruction,
    int64_t begin,
    float (&stack)[kDepth][V]) {
  float(&top)[V] = stack[S];
  switch (static_cast<PointwiseOp>(instruction.op)) {
    case PointwiseOp::kInput:
      load(program.inputTypes[instruction.operand], program.inputs[instruction.operand], begin, top);
      return;
    case PointwiseOp::kScalar:
#pragma unroll
      for (int k = 0; k < V; ++k) {
        top[k] = instruction.scalar;
      }
      return;
    case PointwiseOp::kRound:
      if (static_cast<Dtype>(instruction.operand) == Dtype::kHalf) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          top[k] = static_cast<float>(c10::Half(top[k]));
        }
      } else if (static_cast<Dtype>(instruction.operand) == Dtype::kBFloat16) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          top[k] = static_cast<float>(c10::BFloat16(top[k]));
        }
      }
      return;
    case PointwiseOp::kRelu:
#pragma unroll
      for (int k = 0; k < V; ++k) {
        // ATen's CUDA clamp_min(x, 0): NaN kept, else ::max(x, 0), which orders -0 below +0 (unlike the CPU's,
        // which keeps -0; seen on an H200, torch 2.11, as 1 / relu(-0) = +inf)
        top[k] = isnan(top[k]) ? top[k] : fmaxf(top[k], 0.0f);
      }
      return;
    case PointwiseOp::kNeg:
#pragma unroll
      for (int k = 0; k < V; ++k) {
        top[k] = -top[k];
      }
      return;
    default:
      break;
  }
  if constexpr (S + 1 < kDepth) {  // the host never gives a binary op the last slot
    const float(&right)[V] = stack[S + 1];
    switch (static_cast<PointwiseOp>(instruction.op)) {
      case PointwiseOp::kAdd:
#pragma unroll
        for (int k = 0; k < V; ++k) {
          top[k] = __fadd_rn(top[k], right[k]);
        }
        break;
      case PointwiseOp::kSub:
#pragma unroll
        for (int k = 0; k < V; ++k) {
          top[k] = __fsub_rn(top[k], right[k]);
        }
        break;
      case PointwiseOp::kMul:
#pragma unroll
        for (int k = 0; k < V; ++k) {
          top[k] = __fmul_rn(top[k], right[k]);
        }
        break;
      default:  // kDiv
#pragma unroll
        for (int k = 0; k < V; ++k) {
          top[k] = __fdiv_rn(top[k], right[k]);
        }
    }
  }
}

// Runs the program on elements [begin, begin + V) of every operand, with a stack of kDepth slots: the registers
// a thread needs grow with kDepth * V, so a program that holds fewer values runs with fewer registers and more threads
// resident (most chains are a row of binary ops, two values at a time).
template <int kDepth, int V, int... kSlots>
__device__ __forceinline__ void run(const Program& program, int64_t begin, std::integer_sequence<int, kSlots...>) {
  float stack[kDepth][V];
  for (int pc = 0; pc < program.length; ++pc) {
    const Instruction& instruction = program.code[pc];
    // one branch per slot, taken alike by every thread
    ((instruction.slot == kSlots ? step<kSlots>(program, instruction, begin, stack) : void()), ...);
  }
  store(program.outType, stack[0], begin, program.out);
}

template <int kDepth, int V>
__device__ __forceinline__ void run(const Program& program, int64_t begin) {
  run<kDepth, V>(program, begin, std::make_integer_sequence<int, kDepth>());
}

// Wide: elements [0, numel - numel % kVector) kVector at a time, then the rest one at a time. Otherwise all one at a
// time. Grid-stride loops: any grid covers any numel.
template <bool kWide, int kDepth>
__global__ void __launch_bounds__(kThreads) fusedPointwiseKernel(const __grid_constant__ Program program, int64_t numel) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t rest = 0;
  if constexpr (kWide) {
    const int64_t vectors = numel / kVector;
    for (int64_t i = first; i < vectors; i += stride) {
      run<kDepth, kVector>(program, i * kVector);
    }
    rest = vectors * kVector;
  }
  for (int64_t i = rest + first; i < numel; i += stride) {
    run<kDepth, 1>(program, i);
  }
}

// The stack sizes kernels are built for: the smallest that holds the program's values is launched.
constexpr int kDepths[] = {2, 4, kMaxPointwiseStack};

template <bool kWide, int kDepth>
void launchKernel(const Program& program, int64_t numel, unsigned blocks, cudaStream_t stream) {
  fusedPointwiseKernel<kWide, kDepth><<<blocks, kThreads, 0, stream>>>(program, numel);
}

template <bool kWide>
void launchKernel(int depth, const Program& program, int64_t numel, unsigned blocks, cudaStream_t stream) {
  if (depth <= kDepths[0]) {
    launchKernel<kWide, kDepths[0]>(program, numel, blocks, stream);
  } else if (depth <= kDepths[1]) {
    launchKernel<kWide, kDepths[1]>(program, numel, blocks, stream);
  } else {
    launchKernel<kWide, kDepths[2]>(program, numel, blocks, stream);
  }
}

bool isAligned(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % kAlignment == 0;
}

void launch(const DensePointwise& dense, c10::IntArrayRef program, c10::ArrayRef<double> scalars) {
  const size_t length = program.size() / 2;
  if (dense.inputs.size() > kMaxInputs || length > kMaxInstructions) {
    dense.out.copy_(runWithAtenOps(dense.inputs, program, scalars, dense.out.scalar_type()));
    return;
  }
  Program decoded{};
  bool aligned = isAligned(dense.out.data_ptr());
  for (size_t i = 0; i < dense.inputs.size(); ++i) {
    decoded.inputs[i] = dense.inputs[i].const_data_ptr();
    decoded.inputTypes[i] = dtypeOf(dense.inputs[i].scalar_type());
    aligned = aligned && isAligned(decoded.inputs[i]);
  }
  decoded.out = dense.out.mutable_data_ptr();
  decoded.outType = dtypeOf(dense.out.scalar_type());
  decoded.length = static_cast<int>(length);
  for (size_t pc = 0; pc < length; ++pc) {
    const auto op = static_cast<PointwiseOp>(program[2 * pc]);
    const int64_t operand = program[2 * pc + 1];
    Instruction& instruction = decoded.code[pc];
    instruction.slot = static_cast<uint8_t>(dense.depths[pc] - 1);
    if (op == PointwiseOp::kInput) {
      instruction.operand = static_cast<uint8_t>(operand);
    } else if (op == PointwiseOp::kRound) {
      instruction.operand = static_cast<uint8_t>(dtypeOf(static_cast<c10::ScalarType>(operand)));
    } else if (op == PointwiseOp::kScalar) {
      instruction.scalar = static_cast<float>(scalars[operand]);
    }
    instruction.op = static_cast<uint8_t>(op);
  }

  const int64_t numel = dense.out.numel();
  const int64_t work = aligned ? (numel + kVector - 1) / kVector : numel;
  const cudaDeviceProp* properties = at::cuda::getCurrentDeviceProperties();
  const int64_t resident =
      static_cast<int64_t>(properties->multiProcessorCount) * (properties->maxThreadsPerMultiProcessor / kThreads);
  const auto blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min((work + kThreads - 1) / kThreads, resident)));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int depth = *std::max_element(dense.depths.begin(), dense.depths.end());
  if (aligned) {
    launchKernel<true>(depth, decoded, numel, blocks, stream);
  } else {
    launchKernel<false>(depth, decoded, numel, blocks, stream);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor fusedPointwiseCuda(
    at::TensorList inputs,
    c10::IntArrayRef program,
    c10::ArrayRef<double> scalars,
    c10::ScalarType outDtype) {
  TORCH_CHECK(!inputs.empty(), "torch_mp::fused_pointwise: needs at least one input tensor");
  const c10::Device device = inputs[0].device();
  for (size_t i = 0; i < inputs.size(); ++i) {
    // the index as text: streaming an integer from this nvcc-compiled file crashed (a lent H200, torch 2.11)
    TORCH_CHECK(inputs[i].is_cuda() && inputs[i].device() == device,
                "torch_mp::fused_pointwise: all inputs must be on one CUDA device; input ", std::to_string(i),
                " is on ", inputs[i].device().str(), ", input 0 on ", device.str());
  }
  const c10::cuda::CUDAGuard guard(device);
  return runFusedPointwise(inputs, program, scalars, outDtype,
                           [&](const DensePointwise& dense) { launch(dense, program, scalars); });
}

} // namespace

TORCH_LIBRARY_IMPL(torch_mp, CUDA, m) {
  m.impl("fused_pointwise", &fusedPointwiseCuda);
}

} // namespace torch_mp::kernels
