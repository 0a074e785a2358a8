"""torch_mp.export and the job that sequences the export front's stages (as csrc/jit/pipeline.cpp sequences
convert's): capture (capture.py, with the inference form), observe (observe.py), then per conversion facts and
decisions (facts.py), plan (plan.py), apply (apply.py), verify (verify.py) and report (report.py); the accuracy
fallback and the repair of non-finite outputs around them, through the job interface (ProgramConversion, a
_job.ConversionJob). The order is written here and nowhere else; the work is in the stages' modules."""
from __future__ import annotations

import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import torch
from torch.export import ExportedProgram

from .. import _C, capture_check
from .._errors import ConversionError, ModelRunError
from .._inputs import (CallInputs, _device_of, _normalize_calibration, _normalize_calibration_calls, _refuse_autocast,
                       module_inputs)
from ..fallback import search_fallback
from ..finite_outputs import repair_non_finite
from ..options import ConversionOptions
from ..policy import check_rules_match
from ..report import Report
from .apply import _apply, _kept_fp32, _stored_bytes
from .capture import _check_capture, _first_line, _program_of
from .facts import ProgramFacts
from .int8_plan import Int8Plan, check_int8_calibration, plan_int8, warn_without_int8
from .ir import _STORED, _stored_groups
from .observe import _observe, _probe
from .plan import _plan
from .quantize import _quantize
from .report import _mutable_buffers, _report
from .verify import _verify


def export(
    model: Any,
    example_inputs: Any = None,
    dtype: Optional[torch.dtype] = None,
    *,
    example_kwarg_inputs: Optional[Dict[str, Any]] = None,
    calibration_inputs: Optional[Sequence[Any]] = None,
    dynamic_shapes: Any = None,
    return_report: bool = False,
    options: Optional[ConversionOptions] = None,
    **option_fields,
):
    """Exports a model (torch.export.export) and applies a mixed-precision plan to the program.

    Args:
        model: an nn.Module in eval mode, or a torch.export.ExportedProgram. It is not modified.
        example_inputs: the positional inputs of one forward call (as for convert); for a program, default its own
            example inputs (with their keyword inputs) where neither example_inputs nor example_kwarg_inputs is given.
        example_kwarg_inputs: the keyword inputs of that call, a dict (torch.export's kwargs); with them, each
            calibration input is a dict of keyword inputs or an (args, kwargs) pair.
        dtype, calibration_inputs, return_report: as for torch_mp.convert.
        dynamic_shapes: passed to torch.export.export.
        options, option_fields: a ConversionOptions and fields replacing its own, as for torch_mp.convert: policy,
            planner, keep_io_dtypes, tolerance, metric, progress, verify (the TorchScript front's fuse_casts,
            kernels, channels_last and fuse_convolutions only at their defaults).

    Returns:
        the torch.export.ExportedProgram, or (program, Report) with return_report=True.
    """
    chosen = ConversionOptions.of(options, dtype=dtype, **option_fields)
    chosen.refuse_torchscript_only("torch_mp.export")
    _refuse_autocast("torch_mp.export")
    start = time.perf_counter()
    program, inputs, eager = _program_of(model, example_inputs, example_kwarg_inputs, dynamic_shapes)
    if inputs.kwargs:
        calibration = _normalize_calibration_calls(calibration_inputs, list(inputs.kwargs))
    else:
        calibration = [CallInputs(args, {}) for args in _normalize_calibration(calibration_inputs)]
    chosen = chosen.for_device(_device_of((inputs.args, inputs.kwargs), None))
    if chosen.int8:
        check_int8_calibration([(call.args, call.kwargs) for call in [inputs] + calibration])
    try:
        captured = time.perf_counter() - start
        job = ProgramConversion(program, inputs, calibration, chosen)
        job.captured_seconds = captured
        if eager is not None:
            _check_capture(model, program, eager, job.reference_outputs[0])
        eager = None  # checked: the model's outputs (a decoder's logits) need not stay alive through the conversion
        if chosen.tolerance is None:
            converted, report = job.run()
        else:
            converted, report = search_fallback(job, calibration or [inputs], chosen.tolerance, chosen.metric,
                                                chosen.progress)
        if report.data["non_finite"] is not None:
            converted, report = repair_non_finite(job, converted, report, [inputs] + list(calibration))
        if chosen.int8:
            warn_without_int8(model, report)
    except (ValueError, TypeError, ConversionError):
        raise
    except Exception as error:  # noqa: BLE001 - an internal failure: the user's model and program are untouched
        name = type(model).__name__
        raise ConversionError(f"torch_mp could not convert the program of {name}: {_first_line(error)}") from error
    return (converted.program, report) if return_report else converted.program


class ConvertedProgram:
    """A converted program and its runnable module (made on first call): what job.run returns to the fallback and
    the repair, which call it."""

    def __init__(self, program: ExportedProgram):
        self.program = program
        self._module = None

    def __call__(self, *args, **kwargs):
        if self._module is None:
            self._module = self.program.module()
        return self._module(*args, **kwargs)


class ProgramConversion:
    """A functional program, its observations and the options of its conversions; run() converts it, keeping given
    nodes (by FX name) in fp32 (what the accuracy fallback varies), and always those in `keep_non_finite`. The job
    interface of torch_mp.fallback and torch_mp.finite_outputs (_job.ConversionJob), as _convert.Conversion for
    TorchScript."""

    def __init__(self, program: ExportedProgram, inputs: CallInputs, calibration: Sequence[CallInputs],
                 options: ConversionOptions):
        self.program = program
        self.int8 = options.int8
        if self.int8:  # the float plan's options; the int8 plan is this job's own stage
            options = options.float_plan()
            self.int8_cost_model = _C.Int8CostModel.for_cpu()
            self.int8_reduced_range = _C.Int8CostModel.reduced_range()
        self.options = options
        self.bound = options.bind()  # once, as convert binds its options: every core call takes them
        self.policy = options.policy
        self.keep_non_finite: Set[str] = set()
        self.captured_seconds = 0.0
        self._rules_checked = False
        self._stored_names = {spec.arg.name for spec in program.graph_signature.input_specs if spec.kind in _STORED}
        self._stored_readers: Dict[str, List[torch.fx.Node]] = {}  # a stored placeholder -> readers of its tensor
        for group in _stored_groups(program).values():
            readers = [user for holder in group for user in holder.users]
            self._stored_readers.update((holder.name, readers) for holder in group)
        start = time.perf_counter()
        self.runs = [inputs] + list(calibration)
        try:
            self.seen, self.reference_outputs = _observe(program, self.runs, ranges=self.int8)
        except Exception as error:  # noqa: BLE001 - the program's own failure on its inputs (their shapes, ...)
            which = "example or calibration inputs" if calibration else "example inputs"
            raise ModelRunError(f"torch_mp: running the program on the {which} failed: {_first_line(error)}") \
                from error
        self.observed_seconds = time.perf_counter() - start
        self._reference_module = None
        self._facts = ProgramFacts(program, self.seen, self.policy, self.bound, self._stored_names,
                                   self._stored_readers)

    # --- the job interface ------------------------------------------------------------------------------------

    def reference(self, inputs: CallInputs):
        """The fp32 program's output (the fallback's reference)."""
        if self._reference_module is None:
            self._reference_module = self.program.module()
        with capture_check.buffers_kept(self._reference_module):  # the buffers it writes are the model's tensors
            return self._reference_module(*inputs.args, **inputs.kwargs)

    def call(self, converted: ConvertedProgram, inputs: CallInputs):
        low = self.module_inputs(inputs)
        return converted(*low.args, **low.kwargs)

    def module_inputs(self, inputs: CallInputs) -> CallInputs:
        return module_inputs(self.options, inputs)

    def probe(self, converted: ConvertedProgram, inputs: CallInputs, ids: Sequence[str]):
        return _probe(converted.program, self.module_inputs(inputs), ids)

    def probe_reference(self, inputs: CallInputs, ids: Sequence[str]):
        return _probe(self.program, inputs, ids)

    def run(self, keep_fp32: Iterable[str] = (), keep_node_ids: bool = False, in_place: bool = False,
            verify: bool = True) -> Tuple[ConvertedProgram, Report]:
        """Plans and applies; FX node names stay as they are, so `keep_node_ids` and `in_place` change nothing."""
        start = time.perf_counter()
        keep, int8 = set(keep_fp32), None
        if self.int8:
            int8, keep = self._int8_plan(keep)
        planned = self._facts._decide(keep, self.keep_non_finite, int8.int8_nodes if int8 is not None else set())
        precision, forced = _plan(self.program, planned, self.seen, self.options, self.bound, self._facts._stored)
        program, casts, weights, graph = _apply(self.program, planned, precision, self.options.dtype,
                                                not self.options.keep_io_dtypes, self.seen, self._stored_readers)
        if int8 is not None and int8.int8_nodes:
            program = _quantize(program, int8)
            weights = (weights[0], _stored_bytes(program.state_dict, program.constants),
                       _kept_fp32(self.program, program.state_dict, program.constants, self._stored_readers))
        converted = ConvertedProgram(program)
        applied = time.perf_counter()
        non_finite = _verify(converted.program, self.runs, self.seen, self.reference_outputs, self.module_inputs) \
            if verify and self.options.verify else None
        phases = {"capture": self.captured_seconds, "observe": self.observed_seconds, "plan": applied - start,
                  "verify": time.perf_counter() - applied}
        report = _report(self.bound, self.seen, planned, precision, forced, casts, weights, graph, non_finite, phases,
                         int8)
        report.annotate("mutable_buffers", _mutable_buffers(self.program, program))
        if int8 is not None:
            report.annotate("int8", {"float_dtype": self.options.dtype_name, "reduced_range": int8.reduced_range,
                                     "int8_nodes": len(int8.int8_nodes), "quantized_values": len(int8.quantized)})
        if not self._rules_checked:
            check_rules_match(self.policy, report.nodes)
            self._rules_checked = True
        return converted, report

    def _int8_plan(self, keep: Set[str]) -> Tuple[Int8Plan, Set[str]]:
        """The int8 plan, and what the float plan keeps fp32. A node the accuracy fallback keeps goes one step towards
        fp32: from int8 to the float plan's precision where it would be int8, else to fp32."""
        unkept = self._facts._decide(set(), self.keep_non_finite)
        unkept_plan = plan_int8(unkept, self.seen, self._facts._stored, set(), self.int8_cost_model,
                                self.int8_reduced_range)
        leaves_int8 = keep & unkept_plan.int8_nodes
        if not leaves_int8:  # nothing kept that would be int8: the plan without keeps is the plan
            return unkept_plan, keep
        return (plan_int8(unkept, self.seen, self._facts._stored, leaves_int8, self.int8_cost_model,
                          self.int8_reduced_range), keep - leaves_int8)

