"""Quantize: an int8 plan written into a converted program in the form PyTorch's int8 lowering recognises (the
reference form torchao's PT2E flow writes: torch.ops.quantized_decomposed). Each value int8 nodes read quantized gets
one quantize_per_tensor -> dequantize_per_tensor pair (uint8, the plan's scale and zero point) before its first int8
reader, read by all of them; each int8 kernel's weight becomes an int8 lifted constant, symmetric per output channel
(dim 0, zero points 0, [-128, 127]) with its fp32 scales, read through dequantize_per_channel. The program still
computes in fp32 on dequantized values (what `module()` runs); Inductor with freezing turns dequantize -> conv / linear
-> quantize into onednn.qconv_pointwise / qlinear_pointwise. fp32 weights no node reads any more are dropped. Takes the
float plan's program and the Int8Plan; hands on the program."""
from __future__ import annotations

import dataclasses
from typing import Dict

import torch
from torch.export import ExportedProgram

from .. import _C
from .._compat import import_quantized_decomposed
from .int8_plan import Int8Plan, quantized_input
from .ir import (CAST, LiftedConstants, _stored_tensor, _val, _with_inputs, _without_unread_state, graph_module_copy,
                 quiet_spec_copies, renamed_outputs)

import_quantized_decomposed()
QUANTIZE = torch.ops.quantized_decomposed.quantize_per_tensor.default
DEQUANTIZE = torch.ops.quantized_decomposed.dequantize_per_tensor.default
DEQUANTIZE_PER_CHANNEL = torch.ops.quantized_decomposed.dequantize_per_channel.default
WEIGHT_RANGE = (-128, 127)


@dataclasses.dataclass(frozen=True)
class QuantizedWeight:
    """A weight quantized symmetrically per output channel (dim 0)."""

    values: torch.Tensor  # int8
    scales: torch.Tensor  # fp32, one per output channel
    zero_points: torch.Tensor  # int64 zeros

    @staticmethod
    def of(weight: torch.Tensor) -> "QuantizedWeight":
        weight = weight.detach().float()
        largest = weight.abs().amax(dim=tuple(range(1, weight.dim()))) if weight.dim() > 1 else weight.abs()
        # an all-zero channel keeps a scale that represents its zeros exactly
        scales = (largest / WEIGHT_RANGE[1]).clamp_min(torch.finfo(torch.float32).eps)
        shape = (-1,) + (1,) * (weight.dim() - 1)
        values = torch.clamp(torch.round(weight / scales.view(shape)), *WEIGHT_RANGE).to(torch.int8)
        return QuantizedWeight(values, scales, torch.zeros_like(scales, dtype=torch.int64))


def _accumulate_dequantized(add: torch.fx.Node, plan: Int8Plan, dequantized: Dict[str, torch.fx.Node], call) -> None:
    """A residual add after an int8 kernel reads its other operand through a dequantize of its own where that operand
    is quantized anyway (read by an int8 node): Inductor then fuses the add into the kernel as oneDNN's sum post-op,
    which writes into that operand's buffer, so the buffer must be this add's alone (PT2E's form; the add then sees
    the quantized operand, as the int8 readers of it do)."""
    if add.op != "call_function" or add.target is not torch.ops.aten.add.Tensor or len(add.args) != 2:
        return
    kernels = [a for a in add.args if isinstance(a, torch.fx.Node) and a.name in plan.int8_nodes
               and len(a.users) == 1 and _C.int8_facts(a.target._schema.name).role == _C.Int8Role.kernel]
    if not kernels:
        return
    args = list(add.args)
    other = 1 - args.index(kernels[0])
    if isinstance(args[other], torch.fx.Node) and args[other].name in dequantized:
        shared = dequantized[args[other].name]
        args[other] = call(add, DEQUANTIZE, tuple(shared.args))
        add.args = tuple(args)


def _quantize(program: ExportedProgram, plan: Int8Plan) -> ExportedProgram:
    """The program with the plan's Q/DQ written in."""
    module = graph_module_copy(program)
    graph = module.graph
    fake_mode = torch._guards.detect_fake_mode([_val(n) for n in graph.nodes if n.op == "placeholder"])
    specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
    lifted = LiftedConstants(program, graph)
    dequantized: Dict[str, torch.fx.Node] = {}  # value name -> its dequantize
    weights: Dict[str, torch.fx.Node] = {}  # fp32 weight placeholder name -> its dequantize_per_channel

    def call(reader: torch.fx.Node, target, args) -> torch.fx.Node:
        with graph.inserting_before(reader):
            made = graph.call_function(target, args)
        with fake_mode:
            made.meta["val"] = target(*[_val(a) if isinstance(a, torch.fx.Node) else a for a in args])
        return made

    def read_quantized(reader: torch.fx.Node, value: torch.fx.Node) -> torch.fx.Node:
        source = value.args[0] if value.target is CAST else value  # a float plan's cast back to fp32
        if value.name not in dequantized:
            q = plan.quantized[source.name]
            parameters = (q.scale, q.zero_point, q.qmin, q.qmax, torch.uint8)
            dequantized[value.name] = call(reader, DEQUANTIZE, (call(reader, QUANTIZE, (value,) + parameters),)
                                           + parameters)
        return dequantized[value.name]

    def read_int8_weight(reader: torch.fx.Node, weight: torch.fx.Node) -> torch.fx.Node:
        if weight.name not in weights:
            quantized = QuantizedWeight.of(_stored_tensor(program, specs[weight.name].target))
            holders = [lifted.add(f"{weight.name}_{part}", tensor, fake_mode.from_tensor(tensor, static_shapes=True))
                       for part, tensor in zip(("int8", "scale", "zero_point"), dataclasses.astuple(quantized))]
            weights[weight.name] = call(reader, DEQUANTIZE_PER_CHANNEL,
                                        (*holders, 0, *WEIGHT_RANGE, torch.int8))
        return weights[weight.name]

    for node in list(graph.nodes):
        if node.op != "call_function" or node.name not in plan.int8_nodes:
            continue
        args = list(node.args)
        args[0] = read_quantized(node, quantized_input(node))
        facts = _C.int8_facts(node.target._schema.name)
        if facts.role == _C.Int8Role.kernel:
            args[facts.weight_input] = read_int8_weight(node, args[facts.weight_input])
        node.args = tuple(args)
    for node in list(graph.nodes):
        _accumulate_dequantized(node, plan, dequantized, call)

    signature = _with_inputs(program.graph_signature, lifted.specs)
    specs.update(lifted.specs)
    state_dict, constants = dict(program.state_dict), lifted.constants
    signature = _without_unread_state(signature, specs, graph, state_dict, constants)
    graph.lint()
    with quiet_spec_copies():
        converted = program._update(module, renamed_outputs(signature, graph), state_dict=state_dict,
                                    constants=constants)
    return converted
