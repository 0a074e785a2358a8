// Removes casts that change nothing.
//
//   %y = aten::to(%x, D, false, false, None)   where %x is already D            =>  uses of %y read %x
//   %y = aten::to(%x, fp32, ...)
//   %z = aten::to(%y, D, ...)                  where %x is D and fp32 holds D exactly (D = fp16 / bf16)
//                                                                                =>  uses of %z read %x
// A lossy round trip (fp32 -> low -> fp32) changes values and is never removed. Only plain dtype casts
// (non_blocking=false, copy=false, no memory format) match; dtypes come from the values' types. The casts it removes,
// the conversion's own and the model's alike, go through CastLedger::cancel.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace torch_mp::jit {

// Returns whether the graph changed.
bool CancelCasts(const std::shared_ptr<torch::jit::Graph>& graph);

} // namespace torch_mp::jit
