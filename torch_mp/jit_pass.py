"""Mixed precision at load time: torch_mp's pipeline as a pass of TorchScript's graph executor.

    with torch_mp.jit_pass(dtype=torch.float16):
        model = torch.jit.load("model_fp32_frozen.pt")    # any frozen fp32 TorchScript file
        model(x)        # first call: the executor profiles the graph (runs fp32)
        y = model(x)    # later calls: the optimized graph, converted by the pass, runs mixed precision

    torch_mp.jit_pass.enable(dtype=torch.bfloat16)      # or for the whole process
    torch_mp.jit_pass.disable()

The pass converts each graph the executor optimizes while it is enabled: dtypes, devices and sizes come from the
executor's profiling run instead of example inputs, so the observed range guard (which needs magnitudes) does not
apply; use torch_mp.convert with example or calibration inputs for that. Inputs of another dtype or device than
profiled run the unconverted graph. Graphs the executor optimized before enabling keep their plan. The state is
process-wide (C++ servers enable it with torch_mp::jit::enableMixedPrecisionPass).
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
    last_outcome: str  # "converted", or why the last graph was left alone
    last_report: Optional[Report]  # of the last graph planned (converted, or nothing to lower)
    last_error: str  # of the last conversion that failed


class jit_pass:
    """Context manager enabling the load-time pass with these options and restoring the previous state on exit.

    dtype: torch.float16 or torch.bfloat16. policy: an OpPolicy of op entries (no exclusions or per-node rules:
    they need module paths and example inputs, which convert() has); default: per graph, the default policy for the
    device the profile saw and `dtype`. planner, fuse_casts, fused_kernels, channels_last, fuse_convolutions: as in
    torch_mp.convert.
    """

    _current: Optional[Dict[str, Any]] = None  # the options the pass is enabled with, None when disabled

    def __init__(self, dtype: torch.dtype = torch.float16, *, policy: Optional[OpPolicy] = None,
                 planner: str = "min-cut", fuse_casts: bool = True, fused_kernels: bool = False,
                 channels_last: bool = True, fuse_convolutions: bool = False):
        self._options = _checked(dict(dtype=dtype, policy=policy, planner=planner, fuse_casts=fuse_casts,
                                      fused_kernels=fused_kernels, channels_last=channels_last,
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
        converted, skipped, outcome, report, error = _C.jit_pass_activity()
        return Activity(converted, skipped, outcome, Report(report) if report is not None else None, error)


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
    _C.enable_jit_pass(_check_dtype(options["dtype"]), policy._c if policy else None, options["planner"],
                       options["fuse_casts"], options["fused_kernels"], options["channels_last"],
                       options["fuse_convolutions"])
