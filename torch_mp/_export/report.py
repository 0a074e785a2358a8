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


def build_report(bound: "_C.ConversionRequest", plan: Plan, observation: Observation, applied: Applied,
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
        nodes.append(_C.ProgramNode(id=id_of(d.node.name), op=d.op, scope=d.scope, decision=d.verdict,
                                    low=plan.runs_low(d.node.name), forced_to_fp32=d.node.name in plan.forced_fp32,
                                    amax=amax, flops=_flops(d, seen),
                                    int8=None if int8 is None else int8.nodes.get(d.node.name)))
    weights = applied.weights
    kept_fp32 = [_C.ProgramWeight(name=w.name, bytes=w.bytes,
                                  readers=[_op_name(r) for r in w.readers if r.op == "call_function"],
                                  decided_by=next((id_of(r.name) for r in w.readers if r.name in plan.precision),
                                                  None))
                 for w in weights.kept_fp32]
    report = _C.program_report(
        bound, names=names, nodes=nodes,
        casts=[_C.ProgramCast(id=id_of(c.name), value=c.value, from_dtype=c.source, to_dtype=c.target, bytes=c.bytes)
               for c in applied.casts],
        graph=[_C.ProgramGraphItem(id=id_of(item.name), is_cast=item.is_cast, op=item.op,
                                   inputs=[id_of(read) for read in item.reads], cast=item.cast_index)
               for item in applied.graph],
        kept_fp32=kept_fp32, weight_bytes_before=weights.bytes_before, weight_bytes_after=weights.bytes_after,
        non_finite=None if non_finite is None else _C.NonFiniteValue(
            run=non_finite.run, output_tensor=non_finite.tensor, value=non_finite.value),
        phases=list(phases.items()))
    return Report(report)


def _mutable_buffers(given: ExportedProgram, converted: ExportedProgram) -> List[MutableBuffer]:
    """The buffers the converted program writes, in the order its signature writes them, with their dtype and bytes
    there and in the program given (a persistent buffer is in the state_dict, a non-persistent one a constant)."""

    def stored(program: ExportedProgram, name: str) -> torch.Tensor:
        return program.state_dict[name] if name in program.state_dict else program.constants[name]

    buffers = []
    for name in converted.graph_signature.buffers_to_mutate.values():
        tensor = stored(converted, name)
        buffers.append(MutableBuffer.of(name, tensor, stored(given, name).nbytes))
    return buffers
