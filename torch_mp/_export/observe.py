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
    the value is not) and its histogram for clipping (`histogram()`: BINS equal bins over the range seen so far, each
    bin's count, sum and sum of squares, and the exact-zero count, over all runs)."""

    __slots__ = ("dtype", "shape", "numel", "largest", "smallest", "only_integers", "finite", "minimum", "maximum",
                 "zeros", "low", "high", "bins", "_ranges")

    def __init__(self, tensor: torch.Tensor, ranges: bool = False):
        self.dtype = tensor.dtype
        self.shape = None if tensor.is_nested else list(tensor.shape)  # on the example inputs
        self.numel = tensor.numel()
        self.largest, self.smallest, self.only_integers, self.finite = 0.0, float("inf"), True, True
        self.minimum, self.maximum = float("inf"), float("-inf")
        self.zeros, self.low, self.high = 0, 0.0, 0.0
        self.bins = torch.zeros(3, 0, dtype=torch.float64)  # count, sum, sum of squares per bin
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
            if self.finite:
                self._add_to_histogram(flat)

    def _add_to_histogram(self, flat: torch.Tensor) -> None:
        low, high = min(self.minimum, 0.0), max(self.maximum, 0.0)
        if high == low:  # zeros only so far: nothing to bin (and no range to clip)
            return
        self.zeros += int((flat == 0).sum())  # of the binned elements: they round without error
        if self.bins.shape[1] and (low, high) != (self.low, self.high):
            # the range widened: the bins seen so far go whole into the new bin holding their mean
            filled = self.bins[0] > 0
            index = _bin_index(self.bins[1, filled] / self.bins[0, filled], low, high)
            self.bins = torch.stack([torch.bincount(index, weights=row, minlength=BINS)
                                     for row in self.bins[:, filled]])
        elif not self.bins.shape[1]:
            self.bins = torch.zeros(3, BINS, dtype=torch.float64)
        self.low, self.high = low, high
        values = flat.double()
        index = _bin_index(values, low, high)
        self.bins += torch.stack([torch.bincount(index, minlength=BINS).double(),
                                  torch.bincount(index, weights=values, minlength=BINS),
                                  torch.bincount(index, weights=values * values, minlength=BINS)])

    def histogram(self) -> "_C.ValueHistogram":
        count, total, squares = self.bins.tolist() if self.bins.shape[1] else ([], [], [])
        return _C.ValueHistogram(low=self.low, high=self.high, zeros=self.zeros, count=count, sum=total,
                                 sum_of_squares=squares)


BINS = 2048  # a value's histogram bins: clipping bounds fall on their edges, 1/8 of a quantization step apart


def _bin_index(positions: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """The bin of each position among BINS equal bins over [low, high] (the end bins take what float rounding puts
    just past them)."""
    return ((positions.double() - low) * (BINS / (high - low))).floor_().clamp_(0, BINS - 1).long()


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
    `ranges` (those an int8 node could read quantized), their ranges and histograms too."""
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
