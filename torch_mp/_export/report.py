"""Report: the export front's ConversionReport, the type convert's pipeline fills and serialises (REPORT.md), filled
by _C.program_report from what the stages hand on: the core's decision per planned node, its precision, FLOPs and
largest observed magnitude, the casts and weights apply made, the verification's finding and the stages' seconds.
The report's ids index the FX node names it is written with."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from .. import _C
from ..report import Report
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
        nodes.append(_C.ProgramNode(id=id_of(p.node.name), op=p.op, scope=p.scope, decision=p.decision,
                                    low=precision[p.node.name] == "low", forced_to_fp32=p.node.name in forced,
                                    amax=amax, flops=_flops(p, seen),
                                    int8=None if int8 is None else int8.nodes.get(p.node.name)))
    before, after, kept = weights
    decided = {p.node.name for p in planned}
    kept_fp32 = [_C.ProgramWeight(name=w.name, bytes=w.bytes,
                                  readers=[_op_name(r) for r in w.readers if r.op == "call_function"],
                                  decided_by=next((id_of(r.name) for r in w.readers if r.name in decided), None))
                 for w in kept]
    report = _C.program_report(
        bound, names=names, nodes=nodes,
        casts=[_C.ProgramCast(id=id_of(name), value=value, from_dtype=source, to_dtype=target, bytes=size)
               for name, value, source, target, size in casts],
        graph=[_C.ProgramGraphItem(id=id_of(name), is_cast=is_cast, op=op, inputs=[id_of(i) for i in inputs],
                                   cast=cast) for name, is_cast, op, inputs, cast in graph],
        kept_fp32=kept_fp32, weight_bytes_before=before, weight_bytes_after=after,
        non_finite=None if non_finite is None else _C.NonFiniteValue(
            run=non_finite["run"], output_tensor=non_finite["tensor"], value=non_finite["value"]),
        phases=list(phases.items()))
    return Report(report)
