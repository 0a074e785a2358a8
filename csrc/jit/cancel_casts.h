// Removes casts that change nothing.
//
//   %y = aten::to(%x, D, false, false, None)   where %x is already D            =>  uses of %y read %x
//   %y = aten::to(%x, fp32, ...)
//   %z = aten::to(%y, D, ...)                  where %x is D and fp32 holds D exactly (D = fp16 / bf16)
//                                                                                =>  uses of %z read %x
// A lossy round trip (fp32 -> low -> fp32) changes values and is never removed. Only plain dtype casts
// (non_blocking=false, copy=false, no memory format) match; dtypes come from the values' types.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace torch_mp::jit {

// The target dtype of `aten::to(%x, dtype, false, false, None)` (a plain dtype cast), or nothing for any other
// node.
std::optional<c10::ScalarType> plainCastTarget(const torch::jit::Node* node);

// The first answer `ask` gives for `value` or, walking back through plain casts (which keep sizes, rank and device),
// for the value each cast read; nothing when none answers. `ask` returns an std::optional.
template <typename Ask>
auto askThroughPlainCasts(const torch::jit::Value* value, const Ask& ask) -> decltype(ask(value)) {
  for (;;) {
    if (auto answer = ask(value)) {
      return answer;
    }
    if (!plainCastTarget(value->node())) {
      return std::nullopt;
    }
    value = value->node()->input(0);
  }
}

// Returns whether the graph changed.
bool CancelCasts(const std::shared_ptr<torch::jit::Graph>& graph);

} // namespace torch_mp::jit
