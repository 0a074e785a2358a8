"""Verify: the converted program run by the observation's interpreter on the example and calibration inputs (as the
converted model takes them), looking for NaN or inf where the fp32 program's values are finite: the first output
tensor, or else the first intermediate value the fp32 runs saw finite (a NonFinite record, records.py: the report's
non_finite, which finite_outputs.py's repair starts from)."""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import torch
from torch.export import ExportedProgram

from .. import _C
from .._inputs import CallInputs, tensors_of
from .observe import _Recorder, _flat_inputs
from .records import NonFinite, Observation


def find_non_finite(program: ExportedProgram, runs: Sequence[CallInputs], observation: Observation,
                    module_inputs: Callable[[CallInputs], CallInputs]) -> Optional[NonFinite]:
    """Where the converted program computes NaN or inf where the fp32 one is finite: the first output tensor, or
    else the first intermediate value the fp32 runs saw finite; None when nowhere. `runs`: the inputs the
    observation ran, as the fp32 program takes them."""
    seen, reference_outputs = observation.values, observation.outputs
    for run, inputs in enumerate(runs):
        bad: List[str] = []

        def record(node, value, bad=bad):
            observed = seen.get(node.name)
            if not bad and observed is not None and observed.finite and isinstance(value, torch.Tensor) \
                    and value.is_floating_point() and value.numel() and not _C.all_finite(value):
                bad.append(node.name)

        with torch.no_grad():
            outputs = _Recorder(program.graph_module, record).run(*_flat_inputs(program, module_inputs(inputs)))
        pairs = [(o, r) for o, r in zip(tensors_of(outputs), tensors_of(reference_outputs[run]))
                 if o.is_floating_point()]
        for position, (output, reference) in enumerate(pairs):
            if not _C.all_finite(output) and bool((~torch.isfinite(output) & torch.isfinite(reference)).any()):
                return NonFinite(run, position, "")
        if bad:
            return NonFinite(run, None, bad[0])
    return None
