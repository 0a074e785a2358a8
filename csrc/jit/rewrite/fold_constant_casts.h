// Casts of constants, folded. A plain dtype cast (aten::to(%w, D, false, false, None)) of a tensor constant to a
// floating dtype no wider than its own becomes the constant it computes: a model that casts its own weight at run
// time (timm's Linear under scripting reads `weight.to(dtype=input.dtype)`, which the plan makes a cast to the low
// dtype) then stores the weight in the dtype it is read in, and no cast runs per inference. The original constant
// goes with the final dead-code pass where nothing else reads it. Casts the conversion created (CastLedger::created: a
// low weight read in fp32 where the example inputs never ran) stay, so no weight is stored twice.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace torch_mp::jit {

// Returns the number of casts folded.
int FoldConstantCasts(const std::shared_ptr<torch::jit::Graph>& graph);

} // namespace torch_mp::jit
