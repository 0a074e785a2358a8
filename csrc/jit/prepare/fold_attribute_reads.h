// Replaces reads of tensor attributes that freezing left in the graph with constants holding the same tensors.
//
//   %attn : Module = prim::GetAttr[name="self_attn"](%layer)
//   %w : Tensor = prim::GetAttr[name="in_proj_weight"](%attn)     =>   %w : Tensor = prim::Constant[value=<Tensor>]()
//
// torch.jit.freeze keeps an attribute when alias analysis cannot rule out a write to it. nn.TransformerEncoder's
// fast-path check hands every layer's nn.MultiheadAttention in_proj_weight / in_proj_bias to has_torch_function,
// an op it must assume writes, so those stay attributes: read on every run, cast to the low dtype on every run
// (3 E^2 elements per layer) and saved in fp32. As constants they are stored pre-cast like every other weight.
// The constant is the very tensor the attribute holds, so readers see the same data. A tensor the graph writes in
// place (a running total kept in a buffer) stays an attribute, and a graph that assigns attributes (prim::SetAttr)
// is left as it is. The module keeps the attributes; dropUnreadAttributes removes them.
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <optional>

namespace torch_mp::jit {

// What a chain of prim::GetAttr from `selfInput` (the graph's first input, holding `self`) reads, or nothing when
// the value is not such a chain.
std::optional<c10::IValue> attributeValue(
    const torch::jit::Value* value,
    const torch::jit::Value* selfInput,
    const c10::IValue& self);

// `self` is the object the graph's first input holds (a module); returns how many reads became constants.
int FoldAttributeReads(const std::shared_ptr<torch::jit::Graph>& graph, const c10::IValue& self);

// Removes from the module the attributes holding modules or tensors that its forward graph no longer reads (what
// FoldAttributeReads made unread), so a saved model carries no fp32 copy of a folded weight.
void dropUnreadAttributes(torch::jit::Module& module);

// Gives the module its own copy of every tensor attribute it still holds (after folding, the state its forward
// writes): freezing shares tensors with the module it froze, so running the converted model would otherwise write
// into the user's module.
void ownAttributeTensors(torch::jit::Module& module);

// Gives the module its own copy of every dict and list attribute: freezing shares them with the module it froze,
// so the conversion's casts of their contents (state_containers) and runs of the converted model would otherwise
// reach the user's module.
void ownAttributeContainers(torch::jit::Module& module);

} // namespace torch_mp::jit
