"""Report: the export front's ConversionReport, the type convert's pipeline fills and serialises (REPORT.md), filled
by _C.program_report from the stages' records: the Plan (the core's decision per planned node, its precision, and
an int8 conversion's verdicts), the Observation (each node's largest observed magnitude and, with the sizes, its
FLOPs), the Applied record (casts, weights, the graph), the verification's NonFinite and the stages' seconds. The
report's ids index the FX node names it is written with."""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch.export import ExportedProgram

from .. import _C
from ..report import MutableBuffer, Report
from .facts import _flops
from .ir import _op_name, _outputs_of
from .records import Applied, NonFinite, Observation, Plan


def build_report(bound: "_C.ConvertOptions", plan: Plan, observation: Observation, applied: Applied,
                 non_finite: Optional[NonFinite], phases: Dict[str, float]) -> Report:
    names: List[str] = []
    ids: Dict[str, int] = {}

    def id_of(name: str) -> int:
        if name not in ids:
            ids[name] = len(names)
            names.append(name)
        return ids[name]

    seen, int8 = observation.values, plan.int8
    nodes = []
    for d in plan.decisions:
        outputs = _outputs_of(d.node)
        observed = seen.get(outputs[0].name) if outputs else None
        amax = observed.largest if observed is not None and observed.dtype == torch.float32 else None
        nodes.append((id_of(d.node.name), d.op, d.scope, d.verdict, plan.runs_low(d.node.name),
                      d.node.name in plan.forced_fp32, amax, _flops(d, seen),
                      None if int8 is None else int8.nodes.get(d.node.name)))
    weights = applied.weights
    kept_fp32 = [(w.name, w.bytes, [_op_name(r) for r in w.readers if r.op == "call_function"],
                  next((id_of(r.name) for r in w.readers if r.name in plan.precision), None))
                 for w in weights.kept_fp32]
    report = _C.program_report(
        bound, names, nodes,
        [(id_of(c.name), c.value, c.source, c.target, c.bytes) for c in applied.casts],
        [(id_of(item.name), item.is_cast, item.op, [id_of(read) for read in item.reads], item.cast_index)
         for item in applied.graph],
        kept_fp32, (weights.bytes_before, weights.bytes_after),
        None if non_finite is None else (non_finite.run, non_finite.tensor, non_finite.value),
        list(phases.items()))
    return Report(report)


def _mutable_buffers(given: ExportedProgram, converted: ExportedProgram) -> List[Dict[str, Any]]:
    """The buffers the converted program writes, in the order its signature writes them, with their dtype and bytes
    there and in the program given (a persistent buffer is in the state_dict, a non-persistent one a constant)."""

    def stored(program: ExportedProgram, name: str) -> torch.Tensor:
        return program.state_dict[name] if name in program.state_dict else program.constants[name]

    buffers = []
    for name in converted.graph_signature.buffers_to_mutate.values():
        tensor = stored(converted, name)
        buffers.append(MutableBuffer.of(name, tensor, stored(given, name).nbytes))
    return buffers
