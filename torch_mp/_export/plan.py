"""Plan: the program's castable fp32 values as the core planner's dataflow graph (nodes with the categories the facts
decided, one source and one sink for the program's inputs and outputs, values with their producer, consumers and the
bytes one cast of them moves), planned by core::planPrecision (_C.plan_dataflow, the min-cut). Takes the _Planned
records; hands on the precision per planned node's name and the nodes the planner's constraints forced to fp32."""
from __future__ import annotations

import operator
from typing import Any, Callable, Dict, List, Set, Tuple

from torch.export import ExportedProgram

from .. import _C
from ..options import ConversionOptions
from .facts import _Planned
from .ir import _fp32_tensor
from .observe import _Seen

_SOURCE, _SINK = 0, 1  # the dataflow nodes for the program's inputs and outputs


def _plan(program: ExportedProgram, planned: List[_Planned], seen: Dict[str, _Seen], options: ConversionOptions,
          bound: "_C.ConvertOptions", stored: Callable[[Any], bool]) -> Tuple[Dict[str, str], Set[str]]:
    """The core planner (the bound options' method) over the program's castable fp32 values: the precision per planned node's name, and
    the nodes its constraints forced to fp32."""
    io = "fp32" if options.keep_io_dtypes else "low"
    categories = [io, io] + [p.decision.category for p in planned]
    index = {p.node.name: p.index for p in planned}
    values = []
    for node in program.graph.nodes:
        if node.op == "placeholder" and not stored(node):
            producer = _SOURCE
        elif node.op == "call_function" and node.target is operator.getitem:
            producer = index.get(node.args[0].name)
        else:
            producer = index.get(node.name)
        if producer is None or not _fp32_tensor(node):
            continue
        consumers = sorted({_SINK if user.op == "output" else index[user.name] for user in node.users
                            if user.op == "output" or user.name in index})
        observed = seen.get(node.name)
        values.append((producer, _C.fp32_cast_bytes(observed.numel if observed is not None else 0), consumers))
    precision, forced = _C.plan_dataflow(categories, values, bound)
    return {p.node.name: precision[p.index] for p in planned}, {p.node.name for p in planned if forced[p.index]}
