"""Mixed precision at load time: torch_mp's pipeline as a pass of TorchScript's graph executor.

    with torch_mp.jit_pass(dtype=torch.float16):
        model = torch.jit.load("model_fp32_frozen.pt")    # any frozen fp32 TorchScript file
        model(x)        # first call: the executor profiles the graph (runs fp32)
        model(x)        # second: the pass has the graph record its inputs to calibrate on (runs fp32)
        y = model(x)    # later calls: the optimized graph, converted by the pass, runs mixed precision

    torch_mp.jit_pass.enable(dtype=torch.bfloat16)      # or for the whole process
    torch_mp.jit_pass.disable()

The pass converts each graph the executor optimizes while it is enabled, as torch_mp.convert would on the inputs of
the graph's runs before the conversion (the second call's and the third's, with the executor's default of one
profiling run): they are recorded and observed for dtypes, sizes and magnitudes, so the observed range guard keeps
values beyond fp16's range in fp32. With calibrate=False it converts one call earlier from the executor's profile
alone (dtypes, devices, sizes), without magnitudes and so without the observed range guard. Inputs of another dtype
or device than profiled run the unconverted graph. Graphs the executor optimized before enabling keep their plan. The
state is process-wide (C++ servers enable it with torch_mp::jit::enableMixedPrecisionPass).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch

from .. import _C
from ..options import ConversionOptions, TorchScriptOptions
from ..report import Report


class Activity(NamedTuple):
    converted: int  # graphs the pass rewrote in this process
    skipped: int  # graphs it saw while enabled and left as they were
    calibrating: int  # graphs it set to record their inputs, to convert them a run later
    last_outcome: str  # "converted", or why the last graph was left alone
    last_report: Optional[Report]  # of the last graph planned (converted, or nothing to lower)
    last_error: str  # of the last conversion that failed
    # the last graph converted, as the executor runs it (with calibration, as a function that the graph
    # torch.jit.last_executed_optimized_graph() returns calls)
    last_graph: Optional[torch._C.Graph]


class jit_pass:
    """Context manager enabling the load-time pass with these options and restoring the previous state on exit.

    dtype: torch.float16 (default) or torch.bfloat16: the pass is enabled before any graph's device is known.
    calibrate: observe the inputs of the runs before converting (one more fp32 call), for the observed range guard;
    False converts from the executor's profile alone. options / option_fields: a ConversionOptions and fields
    replacing its own, as torch_mp.convert takes them, but: the policy holds op entries only (exclusions and per-node
    rules need module paths and example inputs, which convert() has) and defaults, per graph, to the one for the
    device the profile saw and `dtype`; inputs and outputs keep their dtypes; no accuracy fallback (tolerance).
    """

    _current: Optional[Tuple[ConversionOptions, bool]] = None  # the options the pass is enabled with, and calibrate

    def __init__(self, dtype: torch.dtype = torch.float16, *, calibrate: bool = True,
                 options: Optional[ConversionOptions] = None, **option_fields):
        chosen = TorchScriptOptions.of(options, dtype=dtype, **option_fields)
        chosen.refuse_int8("torch_mp.jit_pass")
        self._options = (_checked(chosen), bool(calibrate))
        self._previous: Optional[Tuple[ConversionOptions, bool]] = None

    def __enter__(self) -> "jit_pass":
        self._previous = jit_pass._current
        _apply(self._options)
        return self

    def __exit__(self, *exc_info) -> None:
        _apply(self._previous)

    @staticmethod
    def enable(dtype: torch.dtype = torch.float16, **options) -> None:
        """Enables the pass for the process (keyword options as for jit_pass(...)); replaces earlier options."""
        _apply(jit_pass(dtype, **options)._options)

    @staticmethod
    def disable() -> None:
        _apply(None)

    @staticmethod
    def is_enabled() -> bool:
        return _C.jit_pass_enabled()

    @staticmethod
    def activity() -> Activity:
        """What the pass has done in this process, with the report of the last graph it planned."""
        converted, skipped, calibrating, outcome, report, error, graph = _C.jit_pass_activity()
        return Activity(converted, skipped, calibrating, outcome, Report(report) if report is not None else None,
                        error, graph)


def _checked(options: ConversionOptions) -> ConversionOptions:
    if options.dtype is None:
        raise ValueError("the load-time pass needs a dtype (torch.float16 or torch.bfloat16): it is enabled before "
                         "any graph's device is known")
    policy = options.policy
    if policy is not None and (policy.rules or policy.exclusions or policy.forced_low):
        raise ValueError("the load-time pass takes a policy of op entries only: exclusions, forced-low and per-node "
                         "rules need module paths and example inputs; use torch_mp.convert for them")
    if not options.keep_io_dtypes:
        raise ValueError("the load-time pass keeps input and output dtypes (its callers pass what the fp32 model "
                         "takes); use torch_mp.convert(..., keep_io_dtypes=False) instead")
    if options.tolerance is not None:
        raise ValueError("the load-time pass has no accuracy fallback (tolerance): use torch_mp.convert for it")
    return options


def _apply(enabled: Optional[Tuple[ConversionOptions, bool]]) -> None:
    jit_pass._current = enabled
    if enabled is None:
        _C.disable_jit_pass()
        return
    options, calibrate = enabled
    _C.enable_jit_pass(options.bind(), policy_per_graph=options.policy is None, calibrate=calibrate)
