// torch_mp::fused_pointwise: a chain of elementwise ops and the casts between them, in one pass over memory.
//
//   torch_mp::fused_pointwise(Tensor[] inputs, int[] program, float[] scalars, ScalarType out_dtype) -> Tensor
//
// `inputs` are tensors (fp32, fp16 or bf16, any strides) of the same sizes on the example inputs, all on one device;
// sizes that differ at run time (a [1, n] tensor beside a batch) take a slower path of broadcasting ATen ops with the
// same values (runWithAtenOps). `program` is a stack program of (opcode, operand) pairs run per element in fp32: push
// an input or a scalar (as fp32), apply a unary or binary op to the top (IEEE fp32, rounding to nearest even; relu
// as the device's ATen relu: NaN kept; -0 kept on the CPU, +0 on CUDA), round the top to a dtype (what a cast, or an
// op writing fp16/bf16, does). The one value left is written as `out_dtype`. A program means the same on every
// device: the CPU and CUDA kernels give the same bits for it, but for the payloads of NaNs (in the same places; each
// device's ATen conversions decide them) and the sign of relu's zero.
//
// Every aten op it stands for computes in fp32 and rounds once to its output dtype, so a program that rounds after
// each op as the op's output dtype says reproduces the chain bit for bit. Where ATen's kernels take a number
// differently per device, the program spells out what the device the chain runs on does (jit/rewrite/fuse_pointwise's
// table): ATen's CPU add / sub round the number to the tensor's dtype first (a kRound after the kScalar); CUDA's
// division by a number multiplies by its fp32 reciprocal (a kScalar holding it, then kMul). Only ops whose loops
// vectorise are here (arithmetic, relu, casts): a transcendental activation computed per element by libm was slower
// than ATen's vectorised kernel it would replace.
//
// Inputs of the same sizes laid out alike in memory without gaps (contiguous, or all channels_last) are read in
// memory order and the output gets their layout; otherwise contiguous copies are read and the output is contiguous.
//
// Layout as torchvision's ops: the schema and what every backend shares (argument checks, the ATen-ops path) in
// kernels/fused_pointwise.cpp; a kernel per backend registering itself: kernels/cpu/fused_pointwise.cpp (CPU, always)
// and kernels/cuda/fused_pointwise.cu (CUDA, in builds against a CUDA torch). Registered by loading the torch_mp
// library: `import torch_mp` in Python, linking libtorch_mp in C++. A model holding this op loads nowhere else
// ("Unknown builtin op: torch_mp::fused_pointwise"), and runs only on devices whose kernel the library has.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <vector>

namespace torch_mp::kernels {

constexpr const char* kFusedPointwiseOp = "torch_mp::fused_pointwise";

enum class PointwiseOp : int64_t {
  kInput = 0,   // operand: input index
  kScalar = 1,  // operand: scalar index
  kRound = 2,   // operand: ScalarType (Half or BFloat16; Float is the identity)
  kRelu = 10,
  kNeg = 11,
  kAdd = 20,
  kSub = 21,
  kMul = 22,
  kDiv = 23,
};

// Most values a program may hold at once.
constexpr int kMaxPointwiseStack = 8;

// Whether the op has a kernel for tensors on devices of this type, asked of the dispatcher (CPU: always; CUDA: in a
// build with the CUDA kernel). A pass must not emit the op on a device without one: the model could not run.
bool hasFusedPointwiseKernel(c10::DeviceType device);

// fp32, fp16 or bf16: what the kernels read and write.
bool isPointwiseDtype(c10::ScalarType dtype);

// What a backend's kernel runs on: operands of the same sizes laid out alike in memory without gaps, each read from
// its data pointer in memory order, element k of one beside element k of the others; an output of the same layout
// and at least one element; and the stack depth after each instruction of the checked program (its result is in
// slot depth - 1).
struct DensePointwise {
  std::vector<at::Tensor> inputs;
  at::Tensor out;
  std::vector<int> depths;
};

// The part of the op every backend shares: checks the arguments and the program, runs inputs whose sizes differ with
// ATen ops (runWithAtenOps), makes dense operands and the output, and lets `runDense` fill the output.
at::Tensor runFusedPointwise(
    at::TensorList inputs,
    c10::IntArrayRef program,
    c10::ArrayRef<double> scalars,
    c10::ScalarType outDtype,
    c10::function_ref<void(const DensePointwise&)> runDense);

// The checked program run with ATen ops on whole fp32 tensors on the inputs' device, which broadcast: the same values
// as a kernel's per-element loop (every op computes in fp32 and rounds where the program says; numbers are fp32
// tensors on that device, which ATen's kernels take as they are).
at::Tensor runWithAtenOps(
    at::TensorList inputs,
    c10::IntArrayRef program,
    c10::ArrayRef<double> scalars,
    c10::ScalarType outDtype);

} // namespace torch_mp::kernels
