// Removes casts by letting their readers cast inside their own kernel. Only stock aten ops are used, so the result
// loads and runs in any libtorch (the portable mode; no custom op is required to load a converted model).
//
// A. Ops with a dtype= argument upcast their input and compute in the requested dtype, bit for bit what the cast
//    followed by the op computes:
//      %y = aten::to(%x, 6, false, false, None)        %x : Half or BFloat16
//      %r = aten::softmax(%y, %dim, None)               =>   %r = aten::softmax(%x, %dim, 6)
//    for softmax, log_softmax, sum (all overloads with dtype=), mean, prod, cumsum, cumprod. Only when the reader's
//    dtype argument is the constant None.
// B. Mixed-dtype arithmetic: add / sub / mul / div (Tensor overloads) reading the upcast %y beside an fp32 tensor %f
//    read %x instead: type promotion computes in fp32 on the upcast values, so the result is the same bit for bit.
//      %y = aten::to(%x, 6, false, false, None)
//      %r = aten::mul(%y, %f)                           =>   %r = aten::mul(%x, %f)
//    Only where promotion provably yields fp32: %f's dtype is Float and %f is dimensioned (dim >= 1) or %x is 0-dim
//    too (a 0-dim tensor does not win over a dimensioned one: half(4) * float() is half). Dims come from complete
//    tensor types or from the observed sizes (not for values defined in a loop body, whose rank could change between
//    iterations); an unknown dim never fuses. %f produced by prim::NumToTensor (a wrapped number) never fuses, and
//    neither does %f == %y (both operands would become low).
// C. Chains: %y = aten::to(%x, 6, ...); %z = aten::to(%y, D, ...) with %x held exactly by fp32 (Half, BFloat16)
//    => %z = aten::to(%x, D, ...) (rounding once from the exact value; D == dtype(%x) is CancelCasts' round trip).
//    Casts of constants need no pass here: applyPrecisionPlan already stores every constant read in low precision
//    as a low-precision constant, and the only casts of constants left are the deliberate low -> fp32 casts for
//    nodes the example inputs did not reach (folding them would bring the fp32 weights back).
// D. A low matrix product read only through its upcast writes fp32 itself, where aten has that one-kernel form for
//    the device the product ran on (a kernel registered for aten::mm.dtype / bmm.dtype there: CUDA in torch 2.13,
//    where cuBLAS accumulates in fp32 and stores fp32; no CPU kernel, so nothing changes on CPU):
//      %p = aten::mm(%a, %b)                            %a, %b : Half or BFloat16
//      %y = aten::to(%p, 6, false, false, None)         =>   %y = aten::mm(%a, %b, 6)   (mm.dtype)
//    for mm, bmm, and matmul of two observed 2-d (mm) or two 3-d tensors with equal batch size (bmm). This is what
//    the low_fp32_output category asks for (apply_precision_plan writes its cast).
// E. A norm computed in fp32 between an upcast and downcasts back to the same low dtype reads the low value and
//    writes the low dtype itself, where ATen's kernel for the device takes a low input with fp32 parameters and
//    computes in fp32 (core/op_facts: the CPU kernels of layer_norm, group_norm, batch_norm, instance_norm; on CUDA
//    batch_norm's and instance_norm's, while its layer_norm and group_norm refuse fp32 parameters for a low input):
//      %y = aten::to(%x, 6, false, false, None)         %x : Half or BFloat16, on CPU (or CUDA for batch/instance)
//      %n = aten::layer_norm(%y, %shape, %w, %b, ...)   %w, %b : Float or None
//      %z = aten::to(%n, 15, false, false, None)        =>   %n = aten::layer_norm(%x, %shape, %w, %b, ...)
//    Only when every reader of %n is such a downcast, and the norm has an fp32 parameter: with none (say, an
//    instance_norm without affine weights) ATen picks its low-dtype kernel, which rounds more than the fp32 one.
//    The kernel rounds its fp32 result once, as the downcast did; it may differ from the cast chain in the last bit
//    (its reductions run in another order).
//
// Never removed: casts to a low dtype (fp32 -> low rounds), casts that are not plain `aten::to(%x, dtype, false,
// false, None)`, casts whose input is written in place anywhere (the cast's copy protects its readers from that).
// A reader that fuses stops reading the cast; the cast itself goes when no reader is left, through `casts.fuse` (which
// accounts for it). A node that replaces another (case D's mm.dtype) takes over its node id. Readers in nested blocks are fine: %x
// dominates the cast, which dominates its readers. Dtypes come from the values' types (recordObservedDtypes).
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <functional>
#include <memory>

#include "jit/ir/casts.h"
#include "jit/ir/observed_values.h"
#include "kernels/dispatcher_kernels.h"

namespace torch_mp::jit {

// Returns whether the graph changed. `kernelExists` answers case D's question (tests stand in for a GPU with it).
bool FuseCasts(
    const std::shared_ptr<torch::jit::Graph>& graph,
    CastLedger& casts,
    const ObservedValues& observed,
    const std::function<bool(const c10::OperatorName&, c10::DeviceType)>& kernelExists = kernels::hasKernelFor);

} // namespace torch_mp::jit
