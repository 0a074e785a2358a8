// Low-precision inputs and outputs, for models that feed one another (an option; by default a converted model keeps
// its IO dtypes).
//
//   graph(%x : Float(...)):  ...  return (%y, (%a, %b))
//     =>  graph(%x : Half(...)):  %x.1 = aten::to(%x, fp32)  [readers of %x read %x.1]  ...
//         return (aten::to(%y, low), (aten::to(%a, low), aten::to(%b, low)))
//
// Only fp32 tensors change: top-level tensor inputs, and outputs that are tensors or tuples built in the graph
// (nested ones too); tensors inside lists, dicts, input tuples and tuples of unknown origin keep their dtype. The
// casts this adds meet the plan's casts head to head (low -> fp32 -> low), so CancelCasts removes both: a
// low-precision producer returns its result directly.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

#include "jit/ir/casts.h"

namespace torch_mp::jit {

// Returns whether the graph changed; its casts come from `casts`.
bool LowerGraphIO(const std::shared_ptr<torch::jit::Graph>& graph, c10::ScalarType lowDtype, CastLedger& casts);

// An input as the lowered graph takes it: an fp32 tensor cast to `lowDtype`, anything else as it is.
c10::IValue lowerInputValue(const c10::IValue& value, c10::ScalarType lowDtype);

} // namespace torch_mp::jit
