"""Observation: the program's graph module run by an FX interpreter on the example and calibration inputs, every
floating value's dtype, size and statistics recorded per node name (_Seen: the statistics the TorchScript front's
value_observer keeps, by the same C++ function), and the values of named nodes read on one input (_probe, the job
interface's probe). Takes a functional program and its inputs; hands on an Observation (records.py): a _Seen per
value's node name, and each run's outputs."""
from __future__ import annotations

from typing import AbstractSet, Any, Callable, Dict, List, Optional, Sequence

import torch
from torch.export import ExportedProgram

from .. import _C
from .._inputs import CallInputs, tensors_of
from .records import Observation


class _Seen:
    """What the runs showed of one value: its dtype, and for an fp32 tensor its size and the statistics the
    TorchScript front's observer keeps (_C.value_statistics, the one C++ function both fronts observe with): the
    largest finite and smallest finite non-zero magnitudes, integrality, finiteness; and where asked (int8
    conversions), its smallest and largest value (what int8 quantization scales an activation by; not finite where
    the value is not) and its tails for clipping (`tails()`: the TAIL largest and smallest elements over all runs,
    the element and exact-zero counts)."""

    __slots__ = ("dtype", "shape", "numel", "largest", "smallest", "only_integers", "finite", "minimum", "maximum",
                 "elements", "zeros", "top", "bottom", "_ranges")

    def __init__(self, tensor: torch.Tensor, ranges: bool = False):
        self.dtype = tensor.dtype
        self.shape = None if tensor.is_nested else list(tensor.shape)  # on the example inputs
        self.numel = tensor.numel()
        self.largest, self.smallest, self.only_integers, self.finite = 0.0, float("inf"), True, True
        self.minimum, self.maximum = float("inf"), float("-inf")
        self.elements, self.zeros = 0, 0
        self.top, self.bottom = torch.empty(0), torch.empty(0)
        self._ranges = ranges
        self.add(tensor)

    def add(self, tensor: torch.Tensor) -> None:
        if self.dtype != torch.float32 or tensor.is_nested or tensor.numel() == 0:
            return
        largest, smallest, only_integers, finite = _C.value_statistics(tensor.detach(), self.only_integers)
        self.largest, self.smallest = max(self.largest, largest), min(self.smallest, smallest)
        self.only_integers, self.finite = self.only_integers and only_integers, self.finite and finite
        if self._ranges:
            flat = tensor.detach().flatten()
            minimum, maximum = torch.aminmax(flat)
            self.minimum, self.maximum = min(self.minimum, minimum.item()), max(self.maximum, maximum.item())
            self.elements += flat.numel()
            self.zeros += int((flat == 0).sum())
            self.top = _extremes(torch.cat([self.top, _extremes(flat, largest=True)]), largest=True)
            self.bottom = _extremes(torch.cat([self.bottom, _extremes(flat, largest=False)]), largest=False)

    def tails(self) -> "_C.ValueTails":
        return _C.ValueTails(numel=self.elements, zeros=self.zeros, largest=self.top.tolist(),
                             smallest=self.bottom.tolist())


TAIL = 256  # extreme elements kept per side of a value: how far clipping may reach into it


def _extremes(values: torch.Tensor, largest: bool) -> torch.Tensor:
    """The TAIL largest (descending) or smallest (ascending) of `values`."""
    return torch.topk(values, min(TAIL, values.numel()), largest=largest, sorted=True).values


class _Recorder(torch.fx.Interpreter):
    """Runs a program's graph module, calling `record(node, value)` for every placeholder and call."""

    def __init__(self, module: torch.fx.GraphModule, record: Callable[[torch.fx.Node, Any], None]):
        super().__init__(module)
        self.record = record

    def run_node(self, node: torch.fx.Node) -> Any:
        value = super().run_node(node)
        if node.op in ("placeholder", "call_function"):
            self.record(node, value)
        return value


def _flat_inputs(program: ExportedProgram, call: CallInputs) -> List[Any]:
    """The graph module's arguments for the program's forward(*args, **kwargs): its parameters, buffers and
    constants, then the inputs, flat."""
    return program._graph_module_flat_inputs(call.args, call.kwargs)


def observe(program: ExportedProgram, runs: Sequence[CallInputs], ranges: AbstractSet[str] = frozenset()) \
        -> Observation:
    """What each run showed of every floating value, by node name, and each run's outputs; of the values named in
    `ranges` (those an int8 node could read quantized), their ranges and tails too."""
    seen: Dict[str, _Seen] = {}

    def record(node: torch.fx.Node, value: Any) -> None:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            if node.name in seen:
                seen[node.name].add(value)
            else:
                seen[node.name] = _Seen(value, node.name in ranges)

    outputs = []
    with torch.no_grad():
        for inputs in runs:
            outputs.append(_Recorder(program.graph_module, record).run(*_flat_inputs(program, inputs)))
    return Observation(seen, outputs)


def _probe(program: ExportedProgram, inputs: CallInputs, ids: Sequence[str]) -> List[Optional[torch.Tensor]]:
    """The first tensor each named node computes on `inputs` (None where it computes none)."""
    wanted, values = set(ids), {}

    def record(node: torch.fx.Node, value: Any) -> None:
        if node.name in wanted:
            first = next(iter(tensors_of(value)), None)
            values[node.name] = None if first is None else first.detach().clone()

    with torch.no_grad():
        _Recorder(program.graph_module, record).run(*_flat_inputs(program, inputs))
    return [values.get(name) for name in ids]
