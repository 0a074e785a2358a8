"""torch_mp.export and the job that sequences the export front's stages (as csrc/jit/pipeline.cpp sequences
convert's), each handing the next a record (records.py):

    capture (capture.py) -> clean up (_clean_up: inference_form.py, fold_constants.py, fold_batch_norms.py)
    -> observe (observe.py), once per program; then per conversion (ProgramConversion.run):
    decide (facts.py) -> plan (plan.py; int8_plan.py first for int8) -> apply (apply.py; quantize.py for int8)
    -> verify (verify.py) -> report (report.py)

with the accuracy fallback and the repair of non-finite outputs around the conversions, through the job interface
(ProgramConversion, a _job.ConversionJob). The order is written here and nowhere else; the work is in the stages'
modules."""
from __future__ import annotations

import time
from typing import Any, Dict, Iterable, Optional, Sequence, Set, Tuple

import torch
from torch.export import ExportedProgram

from .. import _C, capture_check
from .._errors import ConversionError, ModelRunError
from .._inputs import (CallInputs, _device_of, _normalize_calibration, _normalize_calibration_calls, _refuse_autocast,
                       module_inputs)
from .._job import run_job
from ..options import ConversionOptions
from ..report import Report, carrying_report, returned
from .apply import apply_plan, rewritten
from .capture import _check_capture, _first_line, capture
from .facts import ProgramFacts
from .fold_batch_norms import fold_batch_norms
from .fold_constants import fold_constants
from .inference_form import inference_form
from .int8_plan import Int8Plan, check_int8_calibration, plan_int8, values_read_quantized, warn_without_int8
from .int8_simulation import simulated
from .ir import stored_tensors
from .observe import _probe, observe
from .plan import plan_precision
from .quantize import _quantize
from .report import _mutable_buffers, build_report
from .verify import find_non_finite


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
        dtype, calibration_inputs, return_report (deprecated): as for torch_mp.convert.
        dynamic_shapes: passed to torch.export.export.
        options, option_fields: a ConversionOptions and fields replacing its own, as for torch_mp.convert: policy,
            planner, keep_io_dtypes, tolerance, metric, progress, verify (not a TorchScriptOptions: fuse_casts,
            kernels, channels_last and fuse_convolutions are the TorchScript front's).

    Returns:
        the torch.export.ExportedProgram, carrying its Report (torch_mp.report_of); (program, Report) with
        return_report=True.
    """
    chosen = ConversionOptions.of(options, dtype=dtype, **option_fields)
    _refuse_autocast("torch_mp.export")
    start = time.perf_counter()
    captured = capture(model, example_inputs, example_kwarg_inputs, dynamic_shapes)
    program, inputs, eager = _clean_up(captured.program, type(model).__name__), captured.inputs, captured.eager_outputs
    del captured  # the program as exported need not stay alive beside its cleaned-up form
    if inputs.kwargs:
        calibration = _normalize_calibration_calls(calibration_inputs, list(inputs.kwargs))
    else:
        calibration = [CallInputs(args, {}) for args in _normalize_calibration(calibration_inputs)]
    chosen = chosen.for_device(_device_of((inputs.args, inputs.kwargs), None))
    if chosen.int8:
        check_int8_calibration([(call.args, call.kwargs) for call in [inputs] + calibration])
    try:
        capture_seconds = time.perf_counter() - start
        job = ProgramConversion(program, inputs, calibration, chosen)
        job.captured_seconds = capture_seconds
        if eager is not None:
            _check_capture(model, program, eager, job.observation.outputs[0])
        eager = None  # checked: the model's outputs (a decoder's logits) need not stay alive through the conversion
        converted, report = run_job(job, inputs, calibration)
        if chosen.int8:
            warn_without_int8(model, report)
    except (ValueError, TypeError, ConversionError):
        raise
    except Exception as error:  # noqa: BLE001 - an internal failure: the user's model and program are untouched
        name = type(model).__name__
        raise ConversionError(f"torch_mp could not convert the program of {name}: {_first_line(error)}") from error
    return returned(carrying_report(converted.program, report), return_report, "torch_mp.export")


def _clean_up(program: ExportedProgram, model_name: str) -> ExportedProgram:
    """The program cleaned up in fp32, before any cast exists, as convert's frozen-graph folding: its functional
    inference form (inference_form.py: the plan needs a program without in-place writes), then what it computes from
    stored tensors alone folded into constants (fold_constants.py), then its batch norms after convolutions folded
    into them (fold_batch_norms.py: after fold_constants, so that a weight computed from stored tensors is a stored
    tensor it can fold into)."""
    try:
        functional = inference_form(program)
    except Exception as error:  # noqa: BLE001 - torch's retrace failing inside torch_mp: say what was attempted
        raise ConversionError(
            f"torch_mp could not make the program of {model_name} functional: ExportedProgram."
            f"run_decompositions({{}}) failed ({_first_line(error)}). A program that writes in place into tensors "
            "other than its inputs, buffers and fresh tensors is the usual cause") from error
    return fold_batch_norms(fold_constants(functional))


class ConvertedProgram:
    """A converted program and its runnable module (made on first call; an int8 program's as int8_simulation runs it):
    what job.run returns to the fallback and the repair, which call it."""

    def __init__(self, program: ExportedProgram):
        self.program = program
        self._module = None

    def __call__(self, *args, **kwargs):
        if self._module is None:
            self._module = simulated(self.program.module())
        return self._module(*args, **kwargs)


class ProgramConversion:
    """A functional program, its observations and the options of its conversions; run() converts it, keeping given
    nodes (by FX name) in fp32 (what the accuracy fallback varies), and always those in `keep_non_finite`. The job
    interface of torch_mp.fallback and torch_mp.finite_outputs (_job.ConversionJob), as
    _torchscript.conversion.Conversion for TorchScript; _job.run_job runs it."""

    def __init__(self, program: ExportedProgram, inputs: CallInputs, calibration: Sequence[CallInputs],
                 options: ConversionOptions):
        self.program = program
        self.int8 = options.int8
        if self.int8:  # the float plan's options; the int8 plan is this job's own stage
            options = options.float_plan()
            self.int8_cost_model = _C.Int8CostModel.for_cpu()
            self.int8_reduced_range = _C.Int8CostModel.reduced_range()
        self.options = options
        self.bound = options.bind_request()  # once, as convert binds its options: every core call takes them
        self.policy = options.policy
        self.keep_non_finite: Set[str] = set()
        self.captured_seconds = 0.0
        self.stored = stored_tensors(program)
        start = time.perf_counter()
        self.runs = [inputs] + list(calibration)
        try:
            self.observation = observe(program, self.runs,
                                       ranges=values_read_quantized(program.graph) if self.int8 else frozenset())
        except Exception as error:  # noqa: BLE001 - the program's own failure on its inputs (their shapes, ...)
            which = "example or calibration inputs" if calibration else "example inputs"
            raise ModelRunError(f"torch_mp: running the program on the {which} failed: {_first_line(error)}") \
                from error
        self.observed_seconds = time.perf_counter() - start
        self._reference_module = None
        self.facts = ProgramFacts(program, self.observation, self.stored, self.policy, self.bound)

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
            verify: bool = True, keep_float: Iterable[str] = ()) -> Tuple[ConvertedProgram, Report]:
        """Decides, plans, applies, verifies and reports; FX node names stay as they are, so `keep_node_ids` and
        `in_place` change nothing. `keep_fp32`: nodes run fp32, whatever the plans said; `keep_float`: int8 nodes
        moved to the float plan's precision (the accuracy fallback's first step out of int8)."""
        start = time.perf_counter()
        keep, int8 = set(keep_fp32), None
        if self.int8:
            int8 = self._int8_plan(keep | set(keep_float))
        decisions = self.facts.decide(keep, self.keep_non_finite, int8.int8_nodes if int8 is not None else set())
        plan = plan_precision(self.program, decisions, self.observation, self.stored, self.options, self.bound, int8)
        applied = apply_plan(self.program, plan, self.observation, self.stored)
        if int8 is not None and int8.int8_nodes:
            applied = rewritten(applied, _quantize(applied.program, int8), self.program, self.stored)
        converted = ConvertedProgram(applied.program)
        applied_at = time.perf_counter()
        non_finite = find_non_finite(converted.program, self.runs, self.observation, self.module_inputs) \
            if verify and self.options.verify else None
        phases = {"capture": self.captured_seconds, "observe": self.observed_seconds, "plan": applied_at - start,
                  "verify": time.perf_counter() - applied_at}
        report = build_report(self.bound, plan, self.observation, applied, non_finite, phases)
        report.annotate("mutable_buffers", _mutable_buffers(self.program, applied.program))
        if int8 is not None:
            report.annotate("int8", {"float_dtype": self.options.dtype_name, "reduced_range": int8.reduced_range,
                                     "int8_nodes": len(int8.int8_nodes), "quantized_values": len(int8.quantized),
                                     "clipped_values": sum(bounds.clipped for bounds in int8.ranges.values())})
        return converted, report

    def _int8_plan(self, out_of_int8: Set[str]) -> Int8Plan:
        """The int8 plan, with the nodes in `out_of_int8` kept float. Its facts come from the float plan without the
        fallback's keeps (which of them runs low float is what int8 competes with)."""
        unkept = self.facts.decide(set(), self.keep_non_finite)
        return plan_int8(unkept, self.observation.values, self.stored.holds, out_of_int8, self.int8_cost_model,
                         self.int8_reduced_range)

