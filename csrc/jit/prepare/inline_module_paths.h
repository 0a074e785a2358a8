// Inlines a module's method calls into its forward graph, each call's module named by its whole attribute path
// from the caller ("layers.0"), so that moduleScope gives the user's named_modules() names.
//
//   %layers : ModuleList = prim::GetAttr[name="layers"](%self)
//   %layer : Layer = prim::GetAttr[name="0"](%layers)
//   %y : Tensor = prim::CallMethod[name="forward"](%layer, %x)     =>   the body of layers.0's forward
//
// PyTorch's inliner (which freezing runs) names a call's module after the last prim::GetAttr alone: a loop over an
// nn.ModuleList (`for layer in self.layers:`, unrolled by the compiler), an indexed ModuleList or ModuleDict, or a
// call through a chain (`self.body.first(x)`) records "0" or "first", and the node's path misses the container
// ("0.fc" for layers.0.fc; HF Llama's model.layers.0.mlp.down_proj became 0.mlp.down_proj), so an exclusion of
// "layers.1" matched nothing. Here each call is inlined as PyTorch does (torch::jit::inlineCallTo), its callee's
// body inlined the same way first (once per function), with the call's last prim::GetAttr named by the whole chain
// from the caller's `self` while the call is inlined, and its own name again afterwards: the graph reads the same
// attributes. Free functions are inlined the same way; calls through interfaces are left to freezing.
#pragma once

#include <torch/csrc/jit/api/module.h>

namespace torch_mp::jit {

// Inlines the method calls of `module`'s forward graph in place; `module` must be a clone the caller owns (its
// forward graph changes). Returns how many calls were inlined.
int InlineModulePaths(torch::jit::Module& module);

} // namespace torch_mp::jit
