// torch_mp::fused_pointwise: a chain of elementwise ops and the casts between them, in one pass over memory.
//
//   torch_mp::fused_pointwise(Tensor[] inputs, int[] program, float[] scalars, ScalarType out_dtype) -> Tensor
//
// `inputs` are tensors (fp32, fp16 or bf16, any strides) of the same sizes on the example inputs; sizes that differ at
// run time (a [1, n] tensor beside a batch) take a slower path of broadcasting ATen ops with the same values. `program`
// is a stack program of (opcode, operand) pairs run per element in fp32: push an input or a scalar, apply a unary or
// binary op to the top, round the top to a dtype (what a cast, or an op writing fp16/bf16, does). The one value left is
// written as `out_dtype`. Every aten op it stands for computes in fp32 and rounds once to its output dtype, so a
// program that rounds after each op as the op's output dtype says reproduces the chain bit for bit. Only ops whose
// loops vectorise are here (arithmetic, relu, casts): a transcendental activation computed per element by libm was
// slower than ATen's vectorised kernel it would replace.
//
// Registered by loading the torch_mp library: `import torch_mp` in Python, linking libtorch_mp in C++. A model
// holding this op loads nowhere else ("Unknown builtin op: torch_mp::fused_pointwise").
#pragma once

#include <cstdint>

namespace torch_mp::kernels {

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

} // namespace torch_mp::kernels
