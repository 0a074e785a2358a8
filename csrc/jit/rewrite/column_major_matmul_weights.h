// Stores the low-precision CPU weights that matrix multiplications read as their right-hand matrix column-major.
//
//   %y = aten::addmm(%bias, %x, %w, ...)   %w: a constant 2-d fp16/bf16 CPU tensor, row-major [K, N], every reader
//                                          reading it as such an operand (core/op_facts: rightHandMatrix)
//     =>  %w becomes w.t().contiguous().t(): the same values and sizes, strides [1, K] (nn.Linear's weight.t())
//
// CPU GEMMs in fp16/bf16 without oneDNN's kernels (a CPU without AVX512-BF16/AMX or AVX512-FP16) multiply a row-major
// right-hand matrix with a scalar loop that is 25-30x slower than the dot products they use for a transposed one
// (torch 2.13, AVX2 AMD EPYC, [128, 3072] x [3072, 768] bf16: 800 ms against 28 ms; fp32 7 ms): GPT-2's Conv1D
// layers (addmm with a [in, out] weight) ran 24 s a call converted against 0.35 s in fp32. Column-major is the layout
// nn.Linear gives these GEMMs, the one every CPU and oneDNN path is made for. A constant read any other way (an
// embedding's table, a view), sharing its storage with another, or on a GPU (cuBLAS takes either layout) stays.
// Strides survive torch.jit.save / load.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace torch_mp::jit {

// Returns the number of constants stored column-major.
int StoreMatmulWeightsColumnMajor(const std::shared_ptr<torch::jit::Graph>& graph);

} // namespace torch_mp::jit
