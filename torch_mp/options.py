"""The options of a conversion, as two types checked when made and bound to C++ in one place each: ConversionOptions,
what any front is asked to do (`bind_request`: C++'s front-neutral contract::ConversionRequest,
csrc/contract/conversion_request.h), and TorchScriptOptions, those and the knobs only the TorchScript front has
(`bind`: jit::ConvertOptions). torch_mp.export and torch_mp.aoti_compile take a ConversionOptions; torch_mp.convert,
PreparedModel.convert and the load-time pass (these + `calibrate`) take either, as keywords or whole:

    options = torch_mp.ConversionOptions(dtype=torch.bfloat16, tolerance=1e-3)
    torch_mp.convert(model, (x,), options=options)
    torch_mp.convert(model, (x,), torch.bfloat16, tolerance=1e-3)        # the same
    torch_mp.convert(model, (x,), options=torch_mp.TorchScriptOptions(dtype=torch.bfloat16, kernels="fused"))
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Optional, Union

import torch

from . import _C
from .policy import (OpPolicy, SlowKernelsWarning, all_fp32, device_dtype, fast_float_dtype, runs_nothing_heavy_low,
                     target_for, warn_nothing_low)

LOW_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
PLANNERS = _C.PLANNERS  # ("min-cut", "greedy"), as the C++ options parse them
KERNELS = _C.KERNELS  # ("portable", "fused")


@dataclasses.dataclass(frozen=True)
class ConversionOptions:
    """What a conversion is asked to do, whatever front converts it (TorchScriptOptions adds the TorchScript front's
    own knobs).

    dtype: torch.float16 or torch.bfloat16; None: the device's choice (policy.device_dtype: fp16 on CUDA, on a CPU the
        one it has fast kernels for); torch.int8 (torch_mp.export and aoti_compile, on a CPU): int8 kernels where the
        int8 planner finds they pay, the CPU's fast low float dtype or fp32 elsewhere.
    policy: an OpPolicy; None: the default for the device and dtype.
    planner: "min-cut" (fewest cast bytes, exact) or "greedy" (painting, for comparison).
    verify: run the result on the example and calibration inputs: outputs keep their dtypes, nothing turns NaN or
        inf where fp32 is finite.
    keep_io_dtypes: inputs and outputs keep their dtypes; False: fp32 ones take the low dtype.
    tolerance, metric: the accuracy fallback (metric(reference, converted) <= tolerance on every calibration input).
    progress: show the fallback's progress on stderr.
    int8_float_dtype: with dtype=torch.int8, the float plan's low dtype (set by for_device: the CPU's fast one, else
        bf16, whose default policy then keeps the heavy ops fp32).
    """

    dtype: Optional[torch.dtype] = None
    policy: Optional[OpPolicy] = None
    planner: str = "min-cut"
    verify: bool = True
    keep_io_dtypes: bool = True
    tolerance: Optional[float] = None
    metric: Optional[Callable[[Any, Any], float]] = None
    progress: bool = True
    int8_float_dtype: Optional[torch.dtype] = None

    def __new__(cls, *args, **fields):
        # the knobs TorchScriptOptions adds were ConversionOptions' fields once: say where they went
        if cls is ConversionOptions:
            _refuse_torchscript_fields(fields)
        return super().__new__(cls)

    def __post_init__(self):
        if self.dtype is not None:
            if not isinstance(self.dtype, torch.dtype):
                raise TypeError(f"dtype must be torch.float16, torch.bfloat16, torch.int8 or None, got {self.dtype!r}")
            if self.dtype not in LOW_DTYPES and self.dtype != torch.int8:
                raise ValueError("dtype must be a low-precision floating dtype (torch.float16 or torch.bfloat16) or "
                                 f"torch.int8, got {self.dtype}")
        if self.int8_float_dtype is not None and (self.dtype != torch.int8 or self.int8_float_dtype not in LOW_DTYPES):
            raise ValueError("int8_float_dtype goes with dtype=torch.int8 and is torch.float16 or torch.bfloat16, got "
                             f"{self.int8_float_dtype} with dtype={self.dtype}")
        if self.policy is not None and not isinstance(self.policy, OpPolicy):
            raise TypeError(f"policy must be a torch_mp.OpPolicy, got {type(self.policy).__name__}")
        if self.planner not in PLANNERS:
            raise ValueError(f"planner must be one of {PLANNERS}, got {self.planner!r}")
        for name in ("verify", "keep_io_dtypes", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.metric is not None and self.tolerance is None:
            raise ValueError("a metric needs a tolerance: the fallback keeps nodes in fp32 until metric <= tolerance")
        if self.tolerance is not None and not (isinstance(self.tolerance, (int, float))
                                               and not isinstance(self.tolerance, bool) and self.tolerance >= 0):
            raise ValueError(f"tolerance must be a number >= 0, got {self.tolerance!r}")

    @classmethod
    def of(cls, options: Optional["ConversionOptions"] = None, **fields) -> "ConversionOptions":
        """`options` (default: the defaults) with the given fields replaced; a field None stays as `options` has it.
        TorchScriptOptions.of also takes a ConversionOptions (TorchScript's knobs at their defaults); a
        ConversionOptions is not given TorchScript's knobs (a ValueError names the front that takes them)."""
        if options is None:
            options = cls()
        elif isinstance(options, ConversionOptions) and not isinstance(options, cls):
            options = cls(**{f.name: getattr(options, f.name) for f in dataclasses.fields(options)})
        if type(options) is not cls:
            raise TypeError(f"options must be a torch_mp.{cls.__name__}, got {type(options).__name__}"
                            + (": TorchScriptOptions are the TorchScript front's (torch_mp.convert, "
                               "PreparedModel.convert, torch_mp.jit_pass)"
                               if isinstance(options, TorchScriptOptions) else ""))
        if cls is ConversionOptions:
            _refuse_torchscript_fields(fields)
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; the options are "
                            + ", ".join(f.name for f in dataclasses.fields(cls)))
        given = {name: value for name, value in fields.items() if value is not None}
        return dataclasses.replace(options, **given) if given else options

    def for_device(self, device: Union[str, torch.device]) -> "ConversionOptions":
        """With the dtype and the policy the device gets where they were left to it (for int8: the float plan's). A
        policy that runs nothing heavy low, for want of fast kernels, becomes all fp32 (policy.all_fp32): nothing
        stored or computed low for no speed; with an explicit dtype that is a SlowKernelsWarning (dtype=None warned
        already, in device_dtype; int8 does not warn: it is the answer to no fast float kernels)."""
        device = torch.device(device)
        if self.int8:
            if device.type != "cpu":
                raise ValueError(f"dtype=torch.int8 converts for x86 CPUs (oneDNN int8 kernels); the inputs are on "
                                 f"{device.type}, where torch_mp has no int8 path: use dtype=torch.float16 there")
            float_dtype = self.int8_float_dtype or fast_float_dtype(device)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SlowKernelsWarning)
                planned = dataclasses.replace(self, dtype=float_dtype, int8_float_dtype=None).for_device(device)
            return dataclasses.replace(planned, dtype=torch.int8, int8_float_dtype=float_dtype)
        dtype = self.dtype if self.dtype is not None else device_dtype(device)
        policy = self.policy
        if policy is None:
            capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
            policy = OpPolicy.default(target_for(device, dtype), cuda_capability=capability)
        if runs_nothing_heavy_low(policy):
            if self.dtype is not None:
                warn_nothing_low(policy, dtype, target_for(device, dtype))
            policy = all_fp32(policy)
        return dataclasses.replace(self, dtype=dtype, policy=policy)

    def refuse_int8(self, front: str) -> None:
        """A ValueError where a front without an int8 path is asked for dtype=torch.int8."""
        if self.int8:
            raise ValueError(f"{front} does not convert to int8: int8 runs through torch.export and Inductor's oneDNN "
                             "int8 kernels; use torch_mp.export(model, inputs, torch.int8) or torch_mp.aoti_compile("
                             "model, inputs, torch.int8, 'model.pt2')")

    @property
    def int8(self) -> bool:
        return self.dtype == torch.int8

    def float_plan(self) -> "ConversionOptions":
        """An int8 conversion's float part (after for_device): these options with the float plan's dtype."""
        if not self.int8 or self.int8_float_dtype is None:
            raise ValueError("float_plan() is for dtype=torch.int8 options made for a device (for_device)")
        return dataclasses.replace(self, dtype=self.int8_float_dtype, int8_float_dtype=None)

    @property
    def dtype_name(self) -> str:
        return LOW_DTYPES[self.dtype]

    def bind_request(self) -> "_C.ConversionRequest":
        """The C++ request both fronts convert with (the dtype known; no policy: an empty one, which the load-time
        pass replaces per graph)."""
        policy = self.policy if self.policy is not None else OpPolicy()
        return _C.ConversionRequest(dtype=self.dtype_name, policy=policy._c, planner=self.planner, verify=self.verify,
                                    keep_io_dtypes=self.keep_io_dtypes)


@dataclasses.dataclass(frozen=True)
class TorchScriptOptions(ConversionOptions):
    """A ConversionOptions and the knobs only the TorchScript front (torch_mp.convert, PreparedModel.convert,
    torch_mp.jit_pass) has.

    fuse_casts: fold casts into the ops that read them.
    kernels: "portable" (aten ops only) or "fused" (torch_mp::fused_pointwise and fused_channel_norm calls; loading
        the model then needs torch_mp).
    channels_last, fuse_convolutions: CUDA convolution layout and cuDNN fusions.
    """

    fuse_casts: bool = True
    kernels: str = "portable"
    channels_last: bool = True
    fuse_convolutions: bool = True

    def __post_init__(self):
        super().__post_init__()
        if self.kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {KERNELS}, got {self.kernels!r}")
        for name in ("fuse_casts", "channels_last", "fuse_convolutions"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")

    def bind(self) -> "_C.ConvertOptions":
        """The TorchScript pipeline's ConvertOptions: the request, this front's knobs and the policy's node rule."""
        policy = self.policy if self.policy is not None else OpPolicy()
        return _C.ConvertOptions(request=self.bind_request(), fuse_casts=self.fuse_casts, kernels=self.kernels,
                                 channels_last=self.channels_last, fuse_convolutions=self.fuse_convolutions,
                                 node_rule=policy.node_rule())


def _refuse_torchscript_fields(fields) -> None:
    """A ValueError for the first of `fields` that is TorchScriptOptions' own, naming the fronts that take it."""
    shared = {f.name for f in dataclasses.fields(ConversionOptions)}
    for name in (f.name for f in dataclasses.fields(TorchScriptOptions) if f.name not in shared):
        if fields.get(name) is not None:
            raise ValueError(f"{name}={fields[name]!r} is an option of the TorchScript front only (torch_mp.convert, "
                             "PreparedModel.convert, torch_mp.jit_pass), which takes it as a keyword or in a "
                             "torch_mp.TorchScriptOptions")
