"""Report: the export front's ConversionReport, the type convert's pipeline fills and serialises (REPORT.md), filled
by _C.program_report from what the stages hand on: the core's decision per planned node, its precision, FLOPs and
largest observed magnitude, the casts and weights apply made, the verification's finding and the stages' seconds.
The report's ids index the FX node names it is written with."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from torch.export import ExportedProgram

from .. import _C
from ..report import MutableBuffer, Report
from .facts import _flops
from .int8_plan import Int8Plan
from .ir import _op_name, _outputs_of
from .observe import _Seen


def _report(bound: "_C.ConvertOptions", seen: Dict[str, _Seen], planned, precision, forced, casts, weights, graph,
            non_finite: Optional[Dict[str, Any]], phases: Dict[str, float], int8: Optional[Int8Plan] = None) -> Report:
    names: List[str] = []
    ids: Dict[str, int] = {}

    def id_of(name: str) -> int:
        if name not in ids:
            ids[name] = len(names)
            names.append(name)
        return ids[name]

    nodes = []
    for p in planned:
        outputs = _outputs_of(p.node)
        observed = seen.get(outputs[0].name) if outputs else None
        amax = observed.largest if observed is not None and observed.dtype == torch.float32 else None
        nodes.append((id_of(p.node.name), p.op, p.scope, p.decision, precision[p.node.name] == "low",
                      p.node.name in forced, amax, _flops(p, seen),
                      None if int8 is None else int8.nodes.get(p.node.name)))
    before, after, kept = weights
    decided = {p.node.name for p in planned}
    kept_fp32 = [(w.name, w.bytes, [_op_name(r) for r in w.readers if r.op == "call_function"],
                  next((id_of(r.name) for r in w.readers if r.name in decided), None)) for w in kept]
    report = _C.program_report(
        bound, names, nodes,
        [(id_of(name), value, source, target, size) for name, value, source, target, size in casts],
        [(id_of(name), is_cast, op, [id_of(i) for i in inputs], cast) for name, is_cast, op, inputs, cast in graph],
        kept_fp32, (before, after),
        None if non_finite is None else (non_finite["run"], non_finite["tensor"], non_finite["value"]),
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
