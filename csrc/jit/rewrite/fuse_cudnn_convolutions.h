// Fuses CUDA 2-d convolutions with the bias, residual add and relu after them into one cuDNN call, stock aten ops
// that any libtorch built with cuDNN runs:
//
//   %c = aten::conv2d(%x, %w, %b, %stride, %padding, %dilation, %groups)
//   %r = aten::relu(%c)                          =>  %r = aten::cudnn_convolution_relu(%x, %w, %b, ...)
//
//   %c = aten::conv2d(%x, %w, %b, ...)
//   %s = aten::add(%c, %z, %alpha)               (or add(%z, %c, %alpha))
//   %r = aten::relu(%s)                          =>  %r = aten::cudnn_convolution_add_relu(%x, %w, %z, %alpha, %b, ...)
//
// Where %z is computed by a CUDA convolution with a constant bias that only this add reads, that bias joins %b
// (summed in fp32, rounded once) and the residual convolution runs without one: a bias-add kernel fewer.
//
// aten::_convolution (traced models) fuses the same way when it is not transposed. Fires when %c was observed on a
// CUDA device, %w is a constant 4-d fp32 / fp16 / bf16 tensor, %b is None or a constant vector of its dtype, groups
// is 1, dilation is 1, %x (and %z) have %w's dtype, %z has the convolution's observed sizes (cuDNN adds without
// broadcasting; never for values in loop bodies or of input-dependent rank), alpha is 1, each intermediate has its
// one reader, and nothing writes %x or %z in place. The fused kernel accumulates in fp32 and rounds once, so results
// differ from the unfused chain (which rounds after each op) within the low dtype's rounding.
//
// PyTorch's own FuseFrozenConvAddRelu (torch/csrc/jit/passes/frozen_conv_add_relu_fusion_cuda.cpp) does the same
// rewrite but requires a contiguous (NCHW) weight, so it never fires after channels_last_convolutions, and it checks
// neither dtypes of %x / %z nor that %z needs no broadcasting: this pass replaces it.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

#include "jit/ir/observed_values.h"

namespace torch_mp::jit {

struct FusedConvolutions {
  int convRelu = 0;
  int convAddRelu = 0;
  int foldedResidualBiases = 0;
};

FusedConvolutions FuseCudnnConvolutions(const std::shared_ptr<torch::jit::Graph>& graph,
                                        const ObservedValues& observed);

} // namespace torch_mp::jit
