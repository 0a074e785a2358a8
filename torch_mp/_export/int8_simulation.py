"""Int8 simulation: the module the accuracy fallback and the repair of non-finite outputs run an int8 program as,
computing what `program.module()` computes (its quantize / dequantize reference form, quantize.py) about twice as
fast: each quantize_per_tensor -> dequantize_per_tensor pair is one fake_quantize_per_tensor_affine (round, clamp,
subtract and multiply in one kernel, instead of five with two dtype copies), and each int8 weight is dequantized
once, when the module is made, instead of at every call. One difference: fake_quantize multiplies by 1/scale
computed in float, the decomposed quantize by 1/scale computed in double and rounded to float; where the two differ
in their last bit an element on a rounding boundary lands one step over (rare, and within what the compiled int8
kernels, which requantize otherwise again, differ from both). Takes the program's module (`module()`, a
GraphModule); hands on that module, rewritten in place. A module without quantize / dequantize is left as it is."""
from __future__ import annotations

import torch

from .quantize import DEQUANTIZE, DEQUANTIZE_PER_CHANNEL, QUANTIZE


def simulated(module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    graph = module.graph
    changed = False
    for node in list(graph.nodes):
        if node.target == DEQUANTIZE and isinstance(node.args[0], torch.fx.Node) and node.args[0].target == QUANTIZE \
                and tuple(node.args[0].args[1:]) == tuple(node.args[1:]):
            value, scale, zero_point, quant_min, quant_max, _ = node.args[0].args
            with graph.inserting_before(node):
                fake = graph.call_function(torch.fake_quantize_per_tensor_affine,
                                           (value, scale, zero_point, quant_min, quant_max))
            _replace(graph, node, fake)
            changed = True
        elif node.target == DEQUANTIZE_PER_CHANNEL and all(a.op == "get_attr" for a in node.args[:3]):
            tensors = [_attribute(module, a.target) for a in node.args[:3]]
            weight = DEQUANTIZE_PER_CHANNEL(*tensors, *node.args[3:])
            name = f"_dequantized_{node.name}"
            module.register_buffer(name, weight)
            with graph.inserting_before(node):
                _replace(graph, node, graph.get_attr(name))
            changed = True
    if changed:
        module.recompile()
    return module


def _attribute(module: torch.nn.Module, target: str) -> torch.Tensor:
    for part in target.split("."):
        module = getattr(module, part)
    return module


def _replace(graph: torch.fx.Graph, node: torch.fx.Node, by: torch.fx.Node) -> None:
    """`node`'s readers read `by`; `node` goes, and so do the inputs only it read (its quantize, an int8 weight's
    get_attr nodes)."""
    node.replace_all_uses_with(by)
    inputs = node.all_input_nodes
    graph.erase_node(node)
    for value in inputs:
        if not value.users and (value.op == "get_attr" or value.target == QUANTIZE):
            graph.erase_node(value)
