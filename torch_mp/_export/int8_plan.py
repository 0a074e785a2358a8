"""Int8 plan: an int8 conversion's third label. Gathers what core/int8_planner needs of the program (each node with an
int8 role in core/int8_kernels: its FLOPs, whether the float plan runs it low, whether its weight is stored, whether the
accuracy fallback keeps it float; each value such nodes would read quantized: its producer among them, its readers,
size and observed range), has the core decide (_C.plan_int8, an exact minimum cut of float time lost against quantize
passes) and fixes each quantized value's uint8 parameters from its observed range, clipped where that has less
expected squared error (_C.clipped_range, _C.activation_quantization).
Takes the float plan's Decisions (records.py) and the observation; hands on an Int8Plan."""
from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Dict, List, Set

import torch

from .. import _C
from .._errors import Int8Warning
from .._inputs import tensors_of
from .facts import _flops
from .observe import _Seen
from .records import Decision

# The float plan's categories whose nodes run in the low float dtype (core::OpCategory's names).
_LOW_FLOAT_CATEGORIES = {"low", "low_fp32_output"}


@dataclasses.dataclass(frozen=True)
class Int8Plan:
    """What the int8 planner decided: its verdict on every node with an int8 role (by FX node name), and for each value
    the int8 nodes read quantized (by FX node name) its uint8 parameters and the range they cover (the observed one,
    or clipped: core/activation_clipping)."""

    nodes: Dict[str, "_C.Int8NodePlan"]
    quantized: Dict[str, "_C.ActivationQuantization"]
    ranges: Dict[str, "_C.ActivationRange"]
    reduced_range: bool

    @functools.cached_property  # asked per node of the graph by quantize: computed once
    def int8_nodes(self) -> Set[str]:
        return {name for name, plan in self.nodes.items() if plan.int8}


def quantized_input(node: torch.fx.Node) -> torch.fx.Node:
    """The value an int8 node reads quantized: its first argument (a kernel's activation, a follow op's input)."""
    return node.args[0]


def values_read_quantized(graph: torch.fx.Graph) -> Set[str]:
    """The values an int8 node could read quantized: the first argument of each node with an int8 kernel or follow
    role (the values whose ranges and histograms observation keeps)."""
    return {quantized_input(node).name for node in graph.nodes
            if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and node.args
            and isinstance(node.args[0], torch.fx.Node)
            and _role(node.target._schema.name) not in (None, _C.Int8Role.epilogue)}


def _role(op: str):
    facts = _C.int8_facts(op)
    return None if facts is None else facts.role


def _kernel_behind_epilogues(value: torch.fx.Node) -> torch.fx.Node:
    """The node whose output a value is once the epilogues that wrote it (relu after a convolution, a residual add)
    fuse into it: through each epilogue whose first input nothing else reads."""
    while (value.op == "call_function" and isinstance(value.target, torch._ops.OpOverload)
           and _role(value.target._schema.name) == _C.Int8Role.epilogue and value.args
           and isinstance(value.args[0], torch.fx.Node) and len(value.args[0].users) == 1):
        value = value.args[0]
    return value


def plan_int8(planned: List[Decision], seen: Dict[str, _Seen], is_stored, keep_float: Set[str],
              cost_model: "_C.Int8CostModel", reduced_range: bool) -> Int8Plan:
    """The int8 planner's verdicts over the program's nodes with an int8 role. `is_stored(node)`: whether a node is a
    parameter, buffer or constant; `keep_float`: the nodes the accuracy fallback keeps out of int8."""
    candidates = [p for p in planned if _role(p.op) not in (None, _C.Int8Role.epilogue)]
    index = {p.node.name: i for i, p in enumerate(candidates)}
    node_facts = []
    for p in candidates:
        facts = _C.int8_facts(p.op)
        weight = p.node.args[facts.weight_input] if 0 <= facts.weight_input < len(p.node.args) else None
        node_facts.append(_C.Int8NodeFacts(
            op=p.op, flops=_flops(p, seen), runs_low_float=p.verdict.category in _LOW_FLOAT_CATEGORIES,
            weight_stored=weight is not None and is_stored(weight), kept_by_fallback=p.node.name in keep_float))
    readers: Dict[str, List[int]] = {}
    values: Dict[str, torch.fx.Node] = {}
    for i, p in enumerate(candidates):
        value = quantized_input(p.node) if p.node.args else None
        if isinstance(value, torch.fx.Node):
            readers.setdefault(value.name, []).append(i)
            values[value.name] = value
    value_facts = []
    for name, value in values.items():
        observed = seen.get(name)
        usable = observed is not None and observed.dtype == torch.float32 and observed.finite
        value_facts.append(_C.Int8ValueFacts(
            producer=index.get(_kernel_behind_epilogues(value).name, -1), readers=readers[name],
            numel=observed.numel if observed is not None else 0, min=observed.minimum if usable else 0.0, max=observed.maximum if usable else 0.0, finite=usable))
    verdicts = _C.plan_int8(node_facts, value_facts, cost_model)
    chosen = {p.node.name: verdict for p, verdict in zip(candidates, verdicts)}
    quantized, ranges = {}, {}
    for name, value in values.items():  # in graph order: a follow op's input before its output
        if not any(verdicts[reader].int8 for reader in readers[name]):
            continue
        shared = _follows(value)
        if shared is not None and shared.name in ranges:
            # a follow op's output is on its input's uint8 grid (Inductor's int8 max pool keeps the input's
            # parameters): the same range, not one clipped from its own histogram
            ranges[name], quantized[name] = ranges[shared.name], quantized[shared.name]
            continue
        ranges[name] = bounds = _C.clipped_range(seen[name].histogram(), reduced_range)
        quantized[name] = _C.activation_quantization(bounds.min, bounds.max, reduced_range)
    return Int8Plan(chosen, quantized, ranges, reduced_range)


def _follows(value: torch.fx.Node):
    """The input a follow op (max pool, a reshape) computes `value` from, else None."""
    if (value.op == "call_function" and isinstance(value.target, torch._ops.OpOverload) and value.args
            and isinstance(value.args[0], torch.fx.Node) and _role(value.target._schema.name) == _C.Int8Role.follow):
        return quantized_input(value)
    return None


def check_int8_calibration(runs) -> None:
    """int8 scales come from the observed ranges: non-finite data would make them meaningless (a ValueError), and one
    batch alone may not show the ranges later inputs reach (an Int8Warning). `runs`: the example inputs, then each
    calibration input."""
    for run, batch in enumerate(runs):
        for tensor in tensors_of(batch):
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                which = "the example inputs" if run == 0 else f"calibration input {run - 1}"
                raise ValueError(f"torch_mp int8: {which} hold NaN or inf; int8 scales come from the observed ranges, "
                                 "which they would make infinite: pass finite data")
    if len(runs) == 1:
        warnings.warn("torch_mp int8: no calibration_inputs, so the activation ranges (and int8 scales) come from the "
                      "example inputs alone; pass calibration_inputs=[...] with a few representative batches",
                      Int8Warning, stacklevel=3)


def warn_without_int8(model, report) -> None:
    """An Int8Warning where no node runs int8, with how many nodes each reason kept float."""
    verdicts = [node["int8"]["reason"] for node in report.nodes if node["int8"] is not None]
    if any(reason == "int8" for reason in verdicts):
        return
    if not verdicts:
        why = "it has no op with an int8 kernel (conv2d, linear; see core/int8_kernels)"
    else:
        counts = {reason: verdicts.count(reason) for reason in dict.fromkeys(verdicts)}
        why = "of its nodes with an int8 form, " + ", ".join(f"{n} {reason}" for reason, n in counts.items())
    warnings.warn(f"torch_mp int8: no node of {type(model).__name__} runs int8 ({why}); the program is the float "
                  "plan alone", Int8Warning, stacklevel=3)
