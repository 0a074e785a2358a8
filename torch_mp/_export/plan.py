"""Plan: the program's castable fp32 values as the core planner's dataflow graph (nodes with the categories the facts
decided, one source and one sink for the program's inputs and outputs, values with their producer, consumers and the
bytes one cast of them moves), planned by core::planPrecision (_C.plan_dataflow, the min-cut). Takes the Decisions
(records.py); hands on a Plan: the precision per planned node's name and the nodes the planner's constraints forced
to fp32. The dataflow graph's node numbers are this module's own: nothing else sees them."""
from __future__ import annotations

import operator
from typing import Dict, List, Optional

from torch.export import ExportedProgram

from .. import _C
from ..options import ConversionOptions
from .int8_plan import Int8Plan
from .ir import _fp32_tensor
from .records import Decision, Observation, Plan, StoredTensors

# The dataflow graph's nodes: the program's inputs, its outputs, then the planned nodes in the decisions' order.
_SOURCE, _SINK, _FIRST_PLANNED = 0, 1, 2


def plan_precision(program: ExportedProgram, decisions: List[Decision], observation: Observation,
                   stored: StoredTensors, options: ConversionOptions, bound: "_C.ConversionRequest",
                   int8: Optional[Int8Plan] = None) -> Plan:
    """The core planner (the bound options' method) over the program's castable fp32 values; `int8`, an int8
    conversion's int8 plan, goes with it."""
    io = "fp32" if options.keep_io_dtypes else "low"
    categories = [io, io] + [d.verdict.category for d in decisions]
    number: Dict[str, int] = {d.node.name: _FIRST_PLANNED + i for i, d in enumerate(decisions)}
    values = []
    for node in program.graph.nodes:
        if node.op == "placeholder" and not stored.holds(node):
            producer = _SOURCE
        elif node.op == "call_function" and node.target is operator.getitem:
            producer = number.get(node.args[0].name)
        else:
            producer = number.get(node.name)
        if producer is None or not _fp32_tensor(node):
            continue
        consumers = sorted({_SINK if user.op == "output" else number[user.name] for user in node.users
                            if user.op == "output" or user.name in number})
        observed = observation.values.get(node.name)
        values.append((producer, _C.fp32_cast_bytes(observed.numel if observed is not None else 0), consumers))
    precision, forced = _C.plan_dataflow(categories, values, bound)
    return Plan(decisions=decisions,
                precision={name: precision[i] for name, i in number.items()},
                forced_fp32={name for name, i in number.items() if forced[i]},
                low_dtype=options.dtype, low_io=not options.keep_io_dtypes, int8=int8)
