"""torch_mp.convert: capture (script, else trace), then the C++ pipeline on a frozen copy."""
from __future__ import annotations

import copy
import re
import threading
import warnings
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from . import _C
from ._torchscript import TorchScriptDeprecationWarning, jit_call
from .policy import OpPolicy, target_for
from .report import Report

LOW_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
PLANNERS = ("min-cut", "greedy")
KERNELS = ("portable", "fused")


class ConversionError(RuntimeError):
    """The conversion itself failed. The user's model is untouched."""


class InputSpec(NamedTuple):
    """An input given by shape and dtype instead of a tensor: it is filled with random normals (floating dtypes)
    or zeros (integer and bool dtypes) for the one observed run."""

    shape: Sequence[int]
    dtype: torch.dtype = torch.float32
    device: Union[str, torch.device] = "cpu"

    def materialize(self) -> torch.Tensor:
        if self.dtype.is_floating_point:
            return torch.randn(*self.shape, dtype=self.dtype, device=self.device)
        return torch.zeros(*self.shape, dtype=self.dtype, device=self.device)


def convert(
    model: torch.nn.Module,
    example_inputs: Any = None,
    dtype: torch.dtype = torch.float16,
    *,
    policy: Optional[OpPolicy] = None,
    planner: str = "min-cut",
    verify: bool = True,
    fuse_casts: bool = True,
    kernels: str = "portable",
    channels_last: bool = True,
    fuse_convolutions: bool = True,
    return_report: bool = False,
    calibration_inputs: Optional[Sequence[Any]] = None,
    keep_io_dtypes: bool = True,
    tolerance: Optional[float] = None,
    metric: Optional[Callable[[Any, Any], float]] = None,
    progress: bool = True,
):
    """Converts an fp32 model into a frozen mixed-precision TorchScript module.

    Args:
        model: an nn.Module in eval mode, a ScriptModule in eval mode, or a frozen ScriptModule. It is not modified.
        example_inputs: the positional inputs of one forward call (a tensor, or a tuple of tensors / nested
            containers / InputSpec). The model runs once on them to learn every value's dtype and size.
        dtype: torch.float16 or torch.bfloat16.
        policy: an OpPolicy; default: the one for the inputs' device and `dtype`.
        planner: "min-cut" (fewest cast bytes, exact) or "greedy" (painting, for comparison).
        verify: run the result once and check every output keeps its dtype.
        fuse_casts: fold casts into the ops that read them (softmax/sum/mean/... with dtype=, mixed-dtype
            add/sub/mul/div, cast chains); only stock aten ops, so the result still loads anywhere. False keeps
            every cast the plan needs (for comparison).
        kernels: "portable" (default): only aten ops, the saved model loads in any libtorch. "fused": chains of
            elementwise ops and casts on CPU tensors (and CUDA tensors, in a CUDA build of torch_mp) become
            torch_mp::fused_pointwise calls (one pass over memory);
            loading such a model needs the torch_mp library: `import torch_mp` before torch.jit.load, or linking
            libtorch_mp in C++.
        channels_last: CUDA 2-d convolutions store their weights channels_last (NHWC) and pass NHWC activations
            from one to the next, cuDNN's fast layout; other readers see the layout the fp32 model had. No effect on
            CPU models.
        fuse_convolutions: on CUDA, conv (+bias) +relu and conv (+bias) +residual add +relu become one cuDNN call
            (aten::cudnn_convolution_relu / aten::cudnn_convolution_add_relu, stock aten ops; on by default: faster
            than the unfused chain on an H200, benchmarks/CUDA_SPEED.md). Such a model runs on CUDA only; False
            for one that may be moved to the CPU. No effect on CPU conversions.
        return_report: also return the Report.
        calibration_inputs: more inputs (a list, each like example_inputs) the model runs on before planning: the
            range guard keeps in fp32 every node whose values on any of them leave the low dtype's safe range.
        keep_io_dtypes: True (default): inputs and outputs keep their dtypes. False: fp32 tensor inputs and outputs
            (top level, and tuples built by the model) take the low dtype, for models that feed one another.
        tolerance: with it, the accuracy fallback keeps a small set of nodes in fp32 until `metric` (default:
            relative L2 error of the floating outputs, torch_mp.fallback.relative_error) against the fp32 model is
            at most `tolerance` on every calibration input (the example inputs when none are given).
        metric: metric(reference_output, converted_output) -> error, for the fallback.
        progress: show a progress bar during the fallback search (on stderr).

    Returns:
        the converted torch.jit.ScriptModule, or (module, Report) with return_report=True.
    """
    options = _checked_options(dtype, policy, planner, verify, fuse_casts, kernels, channels_last, fuse_convolutions,
                               keep_io_dtypes, tolerance, metric)
    prepared = prepare(model, example_inputs, calibration_inputs=calibration_inputs)
    return prepared._convert(options, tolerance, metric, progress, return_report, in_place=True)


def prepare(model: torch.nn.Module, example_inputs: Any = None, *,
            calibration_inputs: Optional[Sequence[Any]] = None) -> "PreparedModel":
    """Prepares a model for conversion once: captures it (script, else trace), freezes a copy, cleans it up in fp32
    and observes it on the example (and calibration) inputs. PreparedModel.convert then plans and applies a policy
    as often as asked, in either low dtype, without doing any of that again: for sweeps over policies, dtypes or
    options. Arguments and errors as for torch_mp.convert; the model is not modified."""
    _refuse_autocast()
    inputs = _normalize_inputs(example_inputs)
    calibration = _normalize_calibration(calibration_inputs)
    scripted, capture = _capture(model, inputs)
    try:
        bound = _prepare_scripted(scripted, inputs, calibration)
    except ValueError as error:
        # a module can script and still refuse to run scripted (torch.nn.utils.parametrize raises "Parametrization
        # is not working with scripting"): tracing records what it computes instead
        if capture != "script" or not str(error).startswith(_C.MODEL_RUN_FAILED):
            raise
        try:
            with _CAPTURE_LOCK:
                scripted = _trace(model, inputs, "fails to run scripted")
        except ValueError:
            raise error from None  # the inputs do not run the model at all: that is the error to see
        capture = "trace"
        bound = _prepare_scripted(scripted, inputs, calibration)
    return PreparedModel(scripted, capture, inputs, calibration, bound, _device_of(inputs, model))


def _prepare_scripted(scripted, inputs, calibration) -> "_C.PreparedModel":
    return _bound_call(scripted, _C.prepare_module, scripted._c, inputs, calibration)


def _bound_call(scripted, function, *args):
    """Calls into the C++ pipeline; its internal failures become a ConversionError (the model is untouched)."""
    try:
        with torch.no_grad():
            return function(*args)
    except (ValueError, TypeError):
        raise
    except RuntimeError as error:
        name = getattr(scripted, "original_name", type(scripted).__name__)
        raise ConversionError(f"torch_mp could not convert {name}: {error}") from error


class _Options(NamedTuple):
    dtype: torch.dtype
    policy: Optional[OpPolicy]
    planner: str
    verify: bool
    fuse_casts: bool
    kernels: str
    channels_last: bool
    fuse_convolutions: bool
    keep_io_dtypes: bool


def _checked_options(dtype, policy, planner, verify, fuse_casts, kernels, channels_last, fuse_convolutions,
                     keep_io_dtypes, tolerance, metric) -> _Options:
    check_shared_options(dtype, policy, tolerance, metric)
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
    if planner not in PLANNERS:
        raise ValueError(f"planner must be one of {PLANNERS}, got {planner!r}")
    return _Options(dtype, policy, planner, bool(verify), bool(fuse_casts), kernels, bool(channels_last),
                    bool(fuse_convolutions), bool(keep_io_dtypes))


def check_shared_options(dtype, policy, tolerance, metric) -> None:
    """The options convert and export both take."""
    _check_dtype(dtype)
    if policy is not None and not isinstance(policy, OpPolicy):
        raise TypeError(f"policy must be a torch_mp.OpPolicy, got {type(policy).__name__}")
    if metric is not None and tolerance is None:
        raise ValueError("a metric needs a tolerance: the fallback keeps nodes in fp32 until metric <= tolerance")
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and tolerance >= 0):
        raise ValueError(f"tolerance must be a number >= 0, got {tolerance!r}")


class PreparedModel:
    """A model captured, frozen on a copy, cleaned up in fp32 and observed on its example and calibration inputs,
    once (torch_mp.prepare). convert() plans and applies a policy to a copy of it, as often as asked."""

    def __init__(self, scripted, capture: str, inputs, calibration, bound: "_C.PreparedModel", device: torch.device):
        self.scripted = scripted
        self.capture = capture
        self.inputs = inputs
        self.calibration = calibration
        self.device = device
        self._bound = bound

    @property
    def seconds(self) -> Dict[str, float]:
        """Seconds the preparation took per stage (cleanup, observe)."""
        return dict(self._bound.phases)

    def convert(
        self,
        dtype: torch.dtype = torch.float16,
        *,
        policy: Optional[OpPolicy] = None,
        planner: str = "min-cut",
        verify: bool = True,
        fuse_casts: bool = True,
        kernels: str = "portable",
        channels_last: bool = True,
        fuse_convolutions: bool = True,
        return_report: bool = False,
        keep_io_dtypes: bool = True,
        tolerance: Optional[float] = None,
        metric: Optional[Callable[[Any, Any], float]] = None,
        progress: bool = True,
    ):
        """Converts a copy of the prepared model: the arguments of torch_mp.convert but the model, its inputs and
        calibration inputs, which the preparation holds. The preparation stays as it is."""
        options = _checked_options(dtype, policy, planner, verify, fuse_casts, kernels, channels_last,
                                   fuse_convolutions, keep_io_dtypes, tolerance, metric)
        return self._convert(options, tolerance, metric, progress, return_report, in_place=False)

    def _convert(self, options: _Options, tolerance, metric, progress, return_report, in_place: bool):
        policy = options.policy
        if policy is None:
            capability = torch.cuda.get_device_capability(self.device) if self.device.type == "cuda" else None
            policy = OpPolicy.default(target_for(self.device, options.dtype), cuda_capability=capability)
        job = Conversion(self, options._replace(policy=policy))
        if tolerance is None:
            module, report = job.run(in_place=in_place)
        else:
            from .fallback import search_fallback

            module, report = search_fallback(job, self.calibration or [self.inputs], tolerance, metric, progress)
        if report.data.get("non_finite") is not None:
            from .finite_outputs import repair_non_finite

            if in_place and tolerance is None:  # the conversion used the preparation up: the repair plans again
                self._bound = _prepare_scripted(self.scripted, self.inputs, self.calibration)
            module, report = repair_non_finite(job, module, report, [self.inputs] + list(self.calibration))
        report.annotate("capture", self.capture)
        if policy.slow_kernels:
            report.annotate("slow_kernels", policy.slow_kernels)
        return (module, report) if return_report else module


class Conversion:
    """A prepared model and the options of its conversions; run() converts a copy, keeping given nodes (by id) in
    fp32 (what the accuracy fallback varies), and always those in `keep_non_finite` (what the repair of non-finite
    outputs found)."""

    def __init__(self, prepared: PreparedModel, options: _Options):
        self.prepared = prepared
        self.scripted = prepared.scripted
        self.policy = options.policy
        self.dtype_name = LOW_DTYPES[options.dtype]
        self.low_precision_io = not options.keep_io_dtypes
        self.low_dtype = options.dtype
        self.keep_non_finite: set = set()
        self._options = _C.ConvertOptions(self.dtype_name, options.policy._c)
        self._options.planner = options.planner
        self._options.verify_outputs = options.verify
        self._options.low_precision_io = self.low_precision_io
        self._options.fuse_casts = options.fuse_casts
        self._options.fused_kernels = options.kernels == "fused"
        self._options.channels_last = options.channels_last
        self._options.fuse_convolutions = options.fuse_convolutions
        self._options.set_node_rule(options.policy.node_rule())

    def probe(self, module, inputs: Tuple[Any, ...], ids: Sequence[int]) -> List[Optional[torch.Tensor]]:
        """The first output of each node named, in a conversion made with keep_node_ids, on `inputs` (as the fp32
        model takes them)."""
        return _C.probe_nodes(module._c, self.module_inputs(inputs), ids)

    def probe_reference(self, inputs: Tuple[Any, ...], ids: Sequence[int]) -> List[Optional[torch.Tensor]]:
        """The same of the prepared fp32 module, whose nodes are numbered as in every conversion of it."""
        return _C.probe_nodes(self.prepared._bound.frozen, inputs, ids)

    def run(self, keep_fp32: Iterable[int] = (), keep_node_ids: bool = False, in_place: bool = False,
            verify: bool = True) -> Tuple[Any, Report]:
        """Converts a copy of the prepared model, the nodes with ids in `keep_fp32` kept in fp32; with
        `keep_node_ids` the result's graph keeps its node ids. `in_place` converts the preparation itself, which is
        then used up. `verify=False` skips the verification run (a caller that runs the result itself checks it)."""
        options = copy.copy(self._options)
        options.keep_fp32 = set(keep_fp32)
        options.keep_fp32_non_finite = self.keep_non_finite
        options.keep_node_ids = keep_node_ids
        options.verify_outputs = options.verify_outputs and verify
        bound = self.prepared._bound
        converted, report = _bound_call(self.scripted, bound.convert_in_place if in_place else bound.convert, options)
        return torch.jit._recursive.wrap_cpp_module(converted), Report(report)

    def module_inputs(self, inputs: Tuple[Any, ...]) -> Tuple[Any, ...]:
        """The inputs as the converted module takes them: with low-precision IO, fp32 tensors in the low dtype."""
        if not self.low_precision_io:
            return inputs
        return tuple(x.to(self.low_dtype) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x
                     for x in inputs)


def _normalize_calibration(calibration_inputs: Optional[Sequence[Any]]) -> List[Tuple[Any, ...]]:
    if calibration_inputs is None:
        return []
    if isinstance(calibration_inputs, (torch.Tensor, tuple)) or not isinstance(calibration_inputs, Sequence):
        raise TypeError(
            "calibration_inputs must be a list of inputs, each a tensor or a tuple like example_inputs, "
            f"got {type(calibration_inputs).__name__}"
        )
    return [_normalize_inputs(item) for item in calibration_inputs]


def _check_dtype(dtype: Any) -> str:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be torch.float16 or torch.bfloat16, got {dtype!r}")
    if dtype not in LOW_DTYPES:
        raise ValueError(f"dtype must be a low-precision floating dtype (torch.float16 or torch.bfloat16), got {dtype}")
    return LOW_DTYPES[dtype]


def _refuse_autocast() -> None:
    for device_type in ("cpu", "cuda"):
        if torch.is_autocast_enabled(device_type):
            raise RuntimeError(
                f"torch_mp.convert was called inside an active torch.autocast('{device_type}') region; "
                "autocast would change the fp32 reference the conversion is planned from. Convert outside it."
            )


def _normalize_inputs(example_inputs: Any) -> Tuple[Any, ...]:
    if example_inputs is None:
        return ()
    if isinstance(example_inputs, (torch.Tensor, InputSpec)):
        example_inputs = (example_inputs,)
    if isinstance(example_inputs, list):
        example_inputs = tuple(example_inputs)
    if not isinstance(example_inputs, tuple):
        raise TypeError(
            "example_inputs must be a tensor or a tuple of the forward's positional inputs, "
            f"got {type(example_inputs).__name__}"
        )
    return tuple(_materialize(item) for item in example_inputs)


def _materialize(item: Any) -> Any:
    if isinstance(item, InputSpec):
        return item.materialize()
    if isinstance(item, tuple):
        return tuple(_materialize(x) for x in item)
    if isinstance(item, list):
        return [_materialize(x) for x in item]
    if isinstance(item, dict):
        return {k: _materialize(v) for k, v in item.items()}
    return item


def _is_frozen(module: torch.jit.ScriptModule) -> bool:
    return not module._c.hasattr("training")


def _capture(model: Any, inputs: Tuple[Any, ...]) -> Tuple[torch.jit.ScriptModule, str]:
    """The model as a ScriptModule, and how it was obtained: "scriptmodule" (given), "script" or "trace".""" 
    if isinstance(model, torch.jit.ScriptModule):
        if not _is_frozen(model) and model.training:
            raise ValueError("the module is in training mode; call model.eval() before converting")
        if not inputs:
            raise ValueError("example_inputs are required: torch_mp runs the model once to learn dtypes and sizes")
        return model, "scriptmodule"
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"expected a torch.nn.Module or torch.jit.ScriptModule, got {type(model).__name__}")
    if model.training:
        raise ValueError(
            f"{type(model).__name__} is in training mode (dropout and batch-norm statistics would be wrong); "
            "call model.eval() before converting"
        )
    with _CAPTURE_LOCK:
        return _script_or_trace(model, inputs)


# torch.jit.script compiles classes into one global compilation unit, and warnings filters are process-wide: two
# threads capturing at once made scripting fail in one of them, which then silently fell back to tracing (CI,
# tests/python/test_concurrency.py). Capture is serialised; the conversion itself still runs in parallel.
_CAPTURE_LOCK = threading.Lock()


def _script_or_trace(model: torch.nn.Module, inputs: Tuple[Any, ...]) -> Tuple[torch.jit.ScriptModule, str]:
    capture = "script"
    try:
        scripted = jit_call(torch.jit.script, model)
    except TorchScriptDeprecationWarning:
        raise  # torch_mp's warning turned into an error by a filter: not a reason to trace instead
    except Exception as script_error:  # noqa: BLE001 - any scripting failure falls back to tracing
        if not inputs:
            raise ValueError(
                f"{type(model).__name__} cannot be scripted ({_first_line(script_error)}); "
                "pass example_inputs so it can be traced instead"
            ) from script_error
        scripted = _trace(model, inputs, f"cannot be scripted ({_first_line(script_error)})")
        capture = "trace"
    if not inputs:
        raise ValueError("example_inputs are required: torch_mp runs the model once to learn dtypes and sizes")
    return scripted, capture


def _trace(model: torch.nn.Module, inputs: Tuple[Any, ...], why_not_script: str) -> torch.jit.ScriptModule:
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            # strict=False: dict outputs (transformers' ModelOutput, detection heads) are traced as dicts
            return jit_call(torch.jit.trace, model, inputs, check_trace=False, strict=False)
    except Exception as trace_error:  # noqa: BLE001
        untraceable = _untraceable_output(model, inputs)
        if untraceable is None:
            raise ValueError(
                f"{type(model).__name__} {why_not_script} and cannot be traced with the example inputs "
                f"({_first_line(trace_error)})"
            ) from trace_error
        path, kind = untraceable
        name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        hint = ""
        if any(t.__module__.startswith("transformers.") for t in (type(model), kind)):
            hint = " (for a transformers model: use_cache=False, in its config or the forward call)"
        # the tracer's own message prints the whole output, tensors and all, and names no position: not shown
        raise ValueError(
            f"{type(model).__name__} {why_not_script} and cannot be traced with the example inputs: its {path} is "
            f"of type {name}, which TorchScript cannot hold. Make forward return tensors, or tuples, lists or dicts of "
            f"tensors{hint}"
        ) from None


def _untraceable_output(model: torch.nn.Module, inputs: Tuple[Any, ...]) -> Optional[Tuple[str, type]]:
    """Where the model's output holds something a trace cannot (anything but a tensor inside tuples, lists and
    dicts), and its type; None if nothing does or the model does not run on the inputs. Runs the model once, as
    tracing just did."""
    try:
        with torch.no_grad():
            output = model(*inputs)
    except Exception:  # noqa: BLE001 - then the tracer's message is the one to show
        return None
    return _first_non_tensor(output, "output")


def _first_non_tensor(value: Any, path: str) -> Optional[Tuple[str, type]]:
    if isinstance(value, torch.Tensor):
        return None
    if isinstance(value, (tuple, list)):
        items = enumerate(value)
    elif isinstance(value, dict):
        items = value.items()
    else:
        return path, type(value)
    for key, item in items:
        found = _first_non_tensor(item, f"{path}[{key!r}]")
        if found is not None:
            return found
    return None


# a printed tensor, as the tracer's messages show outputs it could not type (one level of nested parentheses:
# `tensor([], size=(0, 3))`)
_TENSOR_REPR = re.compile(r"tensor\((?:[^()]|\([^()]*\))*\)")


def _first_line(error: Exception) -> str:
    text = _TENSOR_REPR.sub("<tensor>", str(error)).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _device_of(inputs: Tuple[Any, ...], model: Any) -> torch.device:
    for tensor in _tensors(inputs):
        return tensor.device
    if isinstance(model, torch.nn.Module):
        for parameter in model.parameters():
            return parameter.device
    return torch.device("cpu")


def _tensors(value: Any):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
