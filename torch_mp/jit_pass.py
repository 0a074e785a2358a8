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

from typing import Any, Dict, NamedTuple, Optional

import torch

from . import _C
from ._convert import _check_dtype
from .policy import OpPolicy
from .report import Report


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

    dtype: torch.float16 or torch.bfloat16. calibrate: observe the inputs of the runs before converting (one more
    fp32 call), for the observed range guard; False converts from the executor's profile alone. policy: an OpPolicy
    of op entries (no exclusions or per-node rules: they need module paths and example inputs, which convert() has);
    default: per graph, the default policy for the device the profile saw and `dtype`. planner, fuse_casts,
    fused_kernels, channels_last, fuse_convolutions: as in torch_mp.convert.
    """

    _current: Optional[Dict[str, Any]] = None  # the options the pass is enabled with, None when disabled

    def __init__(self, dtype: torch.dtype = torch.float16, *, calibrate: bool = True,
                 policy: Optional[OpPolicy] = None, planner: str = "min-cut", fuse_casts: bool = True,
                 fused_kernels: bool = False, channels_last: bool = True, fuse_convolutions: bool = True):
        self._options = _checked(dict(dtype=dtype, calibrate=calibrate, policy=policy, planner=planner,
                                      fuse_casts=fuse_casts, fused_kernels=fused_kernels, channels_last=channels_last,
                                      fuse_convolutions=fuse_convolutions))
        self._previous: Optional[Dict[str, Any]] = None

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


def _checked(options: Dict[str, Any]) -> Dict[str, Any]:
    _check_dtype(options["dtype"])
    policy = options["policy"]
    if policy is not None:
        if not isinstance(policy, OpPolicy):
            raise TypeError(f"policy must be a torch_mp.OpPolicy, got {type(policy).__name__}")
        if policy.rules or policy.exclusions:
            raise ValueError("the load-time pass takes a policy of op entries only: exclusions and per-node rules "
                             "need module paths and example inputs; use torch_mp.convert for them")
    if options["planner"] not in ("min-cut", "greedy"):
        raise ValueError(f"planner must be 'min-cut' or 'greedy', got {options['planner']!r}")
    return options


def _apply(options: Optional[Dict[str, Any]]) -> None:
    jit_pass._current = options
    if options is None:
        _C.disable_jit_pass()
        return
    policy = options["policy"]
    _C.enable_jit_pass(_check_dtype(options["dtype"]), options["calibrate"], policy._c if policy else None,
                       options["planner"], options["fuse_casts"], options["fused_kernels"],
                       options["channels_last"], options["fuse_convolutions"])
