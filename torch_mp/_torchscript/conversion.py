"""torch_mp.convert: capture (script, else trace), then the C++ pipeline on a frozen copy."""
from __future__ import annotations

import copy
import inspect
import re
import threading
import warnings
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from .. import _C, capture_check
from .._compat import forget_dead_quantized_decomposed_builtins
from .._errors import ConversionError, ModelRunError
from .._inputs import (CallInputs, _device_of, _normalize_calibration, _normalize_calibration_calls, _normalize_inputs,
                      _normalize_kwargs, _refuse_autocast, module_inputs)
from .._memory import release_freed_memory
from .jit_calls import TorchScriptDeprecationWarning, jit_call, user_stacklevel
from .._job import run_job
from ..options import ConversionOptions, TorchScriptOptions
from ..report import MutableBuffer, Report, carrying_report, returned


def convert(
    model: torch.nn.Module,
    example_inputs: Any = None,
    dtype: Optional[torch.dtype] = None,
    *,
    example_kwarg_inputs: Optional[Dict[str, Any]] = None,
    calibration_inputs: Optional[Sequence[Any]] = None,
    return_report: bool = False,
    options: Optional[ConversionOptions] = None,
    **option_fields,
):
    """Converts an fp32 model into a frozen mixed-precision TorchScript module.

    Args:
        model: an nn.Module in eval mode, a ScriptModule in eval mode, or a frozen ScriptModule. It is not modified.
        example_inputs: the positional inputs of one forward call (a tensor, or a tuple of tensors / nested
            containers / InputSpec). The model runs once on them to learn every value's dtype and size.
        example_kwarg_inputs: keyword inputs of that call, a dict (torch.export's kwargs). Keywords that only
            continue the positional inputs in forward's order are taken as positional ones; others (arguments left
            out before them) make the model traced with torch.jit.trace's example_kwarg_inputs, and the converted
            module takes the inputs given, in forward's order. With them, each calibration input is a dict of
            keyword inputs or an (args, kwargs) pair.
        dtype: torch.float16 or torch.bfloat16; None (default): the device's choice (fp16 on CUDA; on a CPU bf16
            or fp16, whichever it has fast kernels for), with a SlowKernelsWarning where it has none.
        calibration_inputs: more inputs (a list, each like example_inputs) the model runs on before planning: the
            range guard keeps in fp32 every node whose values on any of them leave the low dtype's safe range, and
            the accuracy fallback and the verification use them.
        return_report: deprecated (a FutureWarning): also return the Report, which torch_mp.report_of(module) gives.
        options: a ConversionOptions or a TorchScriptOptions; the keyword options (their fields: policy, planner,
            verify, fuse_casts, kernels, channels_last, fuse_convolutions, keep_io_dtypes, tolerance, metric,
            progress; see torch_mp.ConversionOptions and torch_mp.TorchScriptOptions) replace its fields.

    Returns:
        the converted torch.jit.ScriptModule, carrying its Report (torch_mp.report_of); (module, Report) with
        return_report=True.
    """
    chosen = TorchScriptOptions.of(options, dtype=dtype, **option_fields)
    chosen.refuse_int8("torch_mp.convert")
    prepared = prepare(model, example_inputs, example_kwarg_inputs=example_kwarg_inputs,
                       calibration_inputs=calibration_inputs)
    return returned(prepared._convert(chosen, in_place=True), return_report, "torch_mp.convert")


def prepare(model: torch.nn.Module, example_inputs: Any = None, *,
            example_kwarg_inputs: Optional[Dict[str, Any]] = None,
            calibration_inputs: Optional[Sequence[Any]] = None) -> "PreparedModel":
    """Prepares a model for conversion once: captures it (script, else trace), freezes a copy, cleans it up in fp32
    and observes it on the example (and calibration) inputs. PreparedModel.convert then plans and applies a policy
    as often as asked, in either low dtype, without doing any of that again: for sweeps over policies, dtypes or
    options. Arguments and errors as for torch_mp.convert; the model is not modified."""
    _refuse_autocast("torch_mp.convert")
    inputs = _normalize_inputs(example_inputs)
    keyword_inputs = _normalize_kwargs(example_kwarg_inputs)
    keywords: Tuple[str, ...] = ()  # the forward's parameters the inputs are traced as, where not positional
    if keyword_inputs:
        inputs, keywords = _bind_keywords(model, CallInputs(inputs, keyword_inputs))
        calibration = []
        for index, call in enumerate(_normalize_calibration_calls(calibration_inputs, None)):
            values, names = _bind_keywords(model, call)
            if names != keywords:
                raise ValueError(f"calibration input {index} binds to other parameters of forward than the example "
                                 "inputs: give each call the same positional and keyword inputs")
            calibration.append(values)
    else:
        calibration = _normalize_calibration(calibration_inputs)
    with capture_check.buffers_kept(model):  # tracing runs the model, whose forward may write its buffers (a cache)
        scripted, capture = _capture(model, inputs, keywords)
        try:
            bound = _prepare_scripted(scripted, inputs, calibration)
        except ValueError as error:
            # a module can script and still refuse to run scripted (torch.nn.utils.parametrize raises
            # "Parametrization is not working with scripting"): tracing records what it computes instead
            if capture != "script" or not isinstance(error, ModelRunError):
                raise
            try:
                with _CAPTURE_LOCK:
                    scripted = _trace(model, inputs, "fails to run scripted")
            except ValueError:
                raise error from None  # the inputs do not run the model at all: that is the error to see
            capture = "trace"
            bound = _prepare_scripted(scripted, inputs, calibration)
    release_freed_memory()  # the capture check's and the observation's runs, before the low copies are made
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
        """Seconds the preparation took per stage (freeze, cleanup, observe)."""
        return dict(self._bound.phases)

    def convert(self, dtype: Optional[torch.dtype] = None, *, return_report: bool = False,
                options: Optional[ConversionOptions] = None, **option_fields):
        """Converts a copy of the prepared model: the arguments of torch_mp.convert but the model, its inputs and
        calibration inputs, which the preparation holds. The preparation stays as it is."""
        chosen = TorchScriptOptions.of(options, dtype=dtype, **option_fields)
        chosen.refuse_int8("PreparedModel.convert")
        return returned(self._convert(chosen, in_place=False), return_report, "PreparedModel.convert")

    def _convert(self, options: ConversionOptions, in_place: bool) -> torch.jit.ScriptModule:
        """The converted module, carrying its report."""
        options = options.for_device(self.device)
        module, report = run_job(Conversion(self, options), self.inputs, self.calibration, in_place=in_place)
        report.annotate("capture", self.capture)
        # a frozen module keeps as attributes only the state its forward writes; the TorchScript front keeps their dtype
        report.annotate("mutable_buffers", [MutableBuffer.of(name, buffer, buffer.nbytes)
                                            for name, buffer in module.named_buffers()])
        return carrying_report(module, report)


class Conversion:
    """A prepared model and the options of its conversions; run() converts a copy, keeping given nodes (by id) in
    fp32 (what the accuracy fallback varies), and always those in `keep_non_finite` (what the repair of non-finite
    outputs found). The job interface of torch_mp.fallback and torch_mp.finite_outputs (_job.ConversionJob), which
    _job.run_job runs."""

    def __init__(self, prepared: PreparedModel, options: TorchScriptOptions):
        self.prepared = prepared
        self.scripted = prepared.scripted
        self.options = options
        self.keep_non_finite: set = set()
        self._bound_options = options.bind()
        self._preparation_used_up = False  # by an in-place conversion

    def reference(self, inputs: Tuple[Any, ...]) -> Any:
        with capture_check.buffers_kept(self.scripted):  # the captured module shares the user's module's buffers
            return self.scripted(*inputs)

    def call(self, module, inputs: Tuple[Any, ...]) -> Any:
        return module(*self.module_inputs(inputs))

    def probe(self, module, inputs: Tuple[Any, ...], ids: Sequence[int]) -> List[Optional[torch.Tensor]]:
        """The first output of each node named, in a conversion made with keep_node_ids, on `inputs` (as the fp32
        model takes them)."""
        return _C.probe_nodes(module._c, self.module_inputs(inputs), ids)

    def probe_reference(self, inputs: Tuple[Any, ...], ids: Sequence[int]) -> List[Optional[torch.Tensor]]:
        """The same of the prepared fp32 module, whose nodes are numbered as in every conversion of it."""
        return _C.probe_nodes(self.prepared._bound.frozen, inputs, ids)

    def run(self, keep_fp32: Iterable[int] = (), keep_node_ids: bool = False, in_place: bool = False,
            verify: bool = True, keep_float: Iterable[int] = ()) -> Tuple[Any, Report]:
        """Converts a copy of the prepared model, the nodes with ids in `keep_fp32` kept in fp32; with
        `keep_node_ids` the result's graph keeps its node ids. `in_place` converts the preparation itself, which is
        then used up: a later run prepares the model again. `verify=False` skips the verification run (a caller that
        runs the result itself checks it). `keep_float` is for int8 nodes, which a TorchScript conversion has none of."""
        if keep_float:
            raise ConversionError(f"torch_mp internal error: nodes {sorted(keep_float)} moved out of int8 in a "
                                  "TorchScript conversion, which plans no int8")
        if self._preparation_used_up:
            prepared = self.prepared
            prepared._bound = _prepare_scripted(self.scripted, prepared.inputs, prepared.calibration)
            self._preparation_used_up = False
        options = copy.copy(self._bound_options)
        options.keep_fp32 = set(keep_fp32)
        options.keep_fp32_non_finite = self.keep_non_finite
        options.keep_node_ids = keep_node_ids
        options.verify_outputs = options.verify_outputs and verify
        bound = self.prepared._bound
        self._preparation_used_up = in_place
        converted, report = _bound_call(self.scripted, bound.convert_in_place if in_place else bound.convert, options)
        return torch.jit._recursive.wrap_cpp_module(converted), Report(report)

    def module_inputs(self, inputs: Tuple[Any, ...]) -> Tuple[Any, ...]:
        """The inputs as the converted module takes them: with low-precision IO, fp32 tensors in the low dtype."""
        return module_inputs(self.options, inputs)


def _is_frozen(module: torch.jit.ScriptModule) -> bool:
    return not module._c.hasattr("training")


def _bind_keywords(model: Any, call: CallInputs) -> Tuple[Tuple[Any, ...], Tuple[str, ...]]:
    """Positional and keyword inputs bound to the model's forward: their values in forward's order, and the names
    of the parameters they bind to where they must be traced by name (() where they are forward's leading
    parameters, positional inputs as any other)."""
    name = getattr(model, "original_name", type(model).__name__)
    if isinstance(model, torch.jit.ScriptModule):
        raise ValueError(f"{name} is a ScriptModule, which torch_mp.convert runs with positional inputs only: pass "
                         "example_inputs in forward's order, or convert the nn.Module (traced with the keyword "
                         "inputs), or use torch_mp.export, which takes keyword inputs")
    if not isinstance(model, torch.nn.Module):
        return call.args + tuple(call.kwargs.values()), ()  # refused by _capture, which names the type
    signature = inspect.signature(model.forward)
    try:
        bound = signature.bind(*call.args, **call.kwargs)
    except TypeError as error:
        raise ValueError(f"torch_mp: {name}.forward does not take the {len(call.args)} example inputs and the keyword "
                         f"inputs {sorted(call.kwargs)} ({error})") from None
    parameters = list(signature.parameters.values())
    variadic = [p.name for p in parameters if p.name in bound.arguments and p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if variadic:
        raise ValueError(f"{name}.forward takes the example inputs through *{variadic[0]}, which a trace cannot "
                         "name: pass them as forward's named parameters, or use torch_mp.export")
    names = tuple(bound.arguments)
    leading = parameters[:len(names)]
    if names == tuple(p.name for p in leading) and all(p.kind != p.KEYWORD_ONLY for p in leading):
        return tuple(bound.arguments.values()), ()
    return tuple(bound.arguments.values()), names


def _capture(model: Any, inputs: Tuple[Any, ...], keywords: Tuple[str, ...] = ()
             ) -> Tuple[torch.jit.ScriptModule, str]:
    """The model as a ScriptModule, and how it was obtained: "scriptmodule" (given), "script" or "trace". With
    `keywords` (the parameters `inputs` bind to, leaving out some before them) it is traced by them: a scripted
    forward would need every argument left out."""
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
        if keywords:
            try:
                return _trace(model, inputs, f"is given keyword inputs ({', '.join(keywords)}) with arguments before "
                              "them left out (so it is traced by name)", keywords), "trace"
            except ValueError as error:
                raise ValueError(f"{error}. torch_mp.export takes keyword inputs without tracing") from error
        scripted, capture = _script_or_trace(model, inputs)
    if capture == "script":
        found = _scripted_difference(model, scripted, inputs)  # outside the lock: it runs the model twice
        if found is not None:
            why = (f"computes otherwise scripted than eagerly on the example inputs ({found}; TorchScript binds an "
                   "op's schema defaults, which can differ from its Python binding's: pass every argument explicitly)")
            with _CAPTURE_LOCK:
                return _trace(model, inputs, why), "trace"
    return scripted, capture


# torch.jit.script compiles classes into one global compilation unit, and warnings filters are process-wide: two
# threads capturing at once made scripting fail in one of them, which then silently fell back to tracing (CI,
# tests/python/test_concurrency.py). Capture is serialised; the conversion itself still runs in parallel.
_CAPTURE_LOCK = threading.Lock()


def _script_or_trace(model: torch.nn.Module, inputs: Tuple[Any, ...]) -> Tuple[torch.jit.ScriptModule, str]:
    capture = "script"
    forget_dead_quantized_decomposed_builtins()  # torch.ao or torchao may have loaded since torch_mp did
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


def _scripted_difference(model: torch.nn.Module, scripted: torch.jit.ScriptModule,
                         inputs: Tuple[Any, ...]) -> Optional[str]:
    """How the scripted model computes otherwise than the model on the example inputs (capture_check.output_mismatch:
    structure, dtypes, shapes, values), naming the graph's node that makes the output that differs; None where they
    agree, or where either fails to run (preparing the scripted model then tells) or the model differs from itself on
    a rerun (random ops). TorchScript compiles each call from the op's schema, whose defaults can differ from those of
    the Python binding the model calls: eagerly torch._C._nn.l1_loss(a, b) returns the elementwise loss, scripted the
    mean. Both run on copies of the inputs and of the buffers (the scripted module shares the model's), so a forward
    that writes into them leaves the model as it was."""
    with torch.no_grad():
        try:
            expected = _run_on_buffer_copies(model, inputs)
            actual = _run_on_buffer_copies(scripted, inputs)
        except Exception:  # noqa: BLE001 - the model's own failure: preparing it reports that
            return None
        mismatch = capture_check.output_mismatch(expected, actual)
        if mismatch is None or capture_check.output_mismatch(expected, _run_on_buffer_copies(model, inputs)):
            return None
    node = _output_producer(scripted.inlined_graph, mismatch.position)
    return f"{mismatch.text}; that output is made by {node}" if node else mismatch.text


def _run_on_buffer_copies(module: torch.nn.Module, inputs: Tuple[Any, ...]) -> Any:
    """module(*copies of inputs), each buffer replaced by a copy during the call."""
    owned = [(owner, name, buffer) for owner in module.modules()
             for name, buffer in owner.named_buffers(recurse=False)]
    try:
        for owner, name, buffer in owned:
            setattr(owner, name, buffer.clone())
        return module(*capture_check.copies(inputs))
    finally:
        for owner, name, buffer in owned:
            setattr(owner, name, buffer)


def _output_producer(graph: torch._C.Graph, position: Tuple[Any, ...]) -> Optional[str]:
    """The node of a TorchScript graph that makes the output at `position` (indices and keys through the tuples,
    lists and dicts the graph builds), with its source line: "aten::l1_loss at model.py:12"; None where it is a
    graph input or a constant."""
    value = next(graph.outputs())
    for key in position:
        node = value.node()
        parts = list(node.inputs())
        if node.kind() in ("prim::TupleConstruct", "prim::ListConstruct") and isinstance(key, int):
            value = parts[key]
        elif node.kind() == "prim::DictConstruct":
            keys = [part.toIValue() for part in parts[0::2]]
            if key not in keys:
                break
            value = parts[2 * keys.index(key) + 1]
        else:
            break
    node = value.node()
    if node.kind() in ("prim::Param", "prim::Constant"):
        return None
    place = re.search(r'File "([^"]+)", line (\d+)', node.sourceRange())
    return f"{node.kind()} at {place.group(1)}:{place.group(2)}" if place else node.kind()


class TraceWarning(torch.jit.TracerWarning):
    """torch_mp.convert traced the model and the tracer warned: the trace may hold only for inputs like the example's
    (a Python branch or number taken from a tensor's value is fixed in it). A TracerWarning, so that a filter on those
    covers it."""


def _trace(model: torch.nn.Module, inputs: Tuple[Any, ...], why_not_script: str, keywords: Tuple[str, ...] = ()
           ) -> torch.jit.ScriptModule:
    """The model traced with `inputs` (by the parameter names `keywords` where given), checked by _check_trace."""
    try:
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", torch.jit.TracerWarning)
            # strict=False: dict outputs (transformers' ModelOutput, detection heads) are traced as dicts
            if keywords:
                traced = jit_call(torch.jit.trace, model, example_kwarg_inputs=dict(zip(keywords, inputs)),
                                  check_trace=False, strict=False)
            else:
                traced = jit_call(torch.jit.trace, model, inputs, check_trace=False, strict=False)
    except Exception as trace_error:  # noqa: BLE001
        untraceable = _untraceable_output(model, inputs, keywords)
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
    finally:
        tracer_warnings = _reissue_all_but_tracer_warnings(caught)
    _check_trace(model, traced, inputs, why_not_script, tracer_warnings, keywords)
    if tracer_warnings:
        warnings.warn(
            f"torch_mp.convert traced {type(model).__name__} (it {why_not_script}), and the tracer warned: "
            f"{'; '.join(tracer_warnings)}. The trace computes what the model does on the example inputs and near "
            "them, but a Python branch, number or list taken there from a tensor's value is fixed in it: inputs that "
            "would take another branch get the example's. Where that can happen, make the model scriptable, write "
            "those lines with torch ops (torch.where instead of if), or use torch_mp.export (torch.export refuses such "
            "a branch instead of fixing it)", TraceWarning, stacklevel=user_stacklevel())
    return traced


def _call(model: torch.nn.Module, inputs: Tuple[Any, ...], keywords: Tuple[str, ...]) -> Any:
    """The model called on inputs, by the parameter names `keywords` where given."""
    return model(**dict(zip(keywords, inputs))) if keywords else model(*inputs)


def _reissue_all_but_tracer_warnings(caught) -> List[str]:
    """The tracer's warnings, each once ("at file:line: first sentence"); the other warnings warned again, as they
    were."""
    tracer = []
    for warning in caught:
        if issubclass(warning.category, torch.jit.TracerWarning):
            text = f"at {warning.filename}:{warning.lineno}: {str(warning.message).split('. ')[0].strip()}"
            if text not in tracer:
                tracer.append(text)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return tracer


def _check_trace(model: torch.nn.Module, traced: torch.jit.ScriptModule, inputs: Tuple[Any, ...],
                 why_not_script: str, tracer_warnings: List[str], keywords: Tuple[str, ...] = ()) -> None:
    """Refuses a trace that does not compute what the model does (capture_check): it is run, and the model, on the
    example inputs plus a little noise, and the outputs compared; a trace that ignores its inputs while the tracer
    warned is refused too (with only integer inputs, say token ids, there is no noise to add). A model that gives
    other outputs on the same inputs twice (random ops) cannot be compared: its trace is taken as it is."""
    near = capture_check.perturbed(inputs)
    with torch.no_grad():
        try:
            expected = _call(model, capture_check.copies(near), keywords)
        except Exception:  # noqa: BLE001 - the model fails near its example inputs: nothing to compare with
            return
        try:
            found = capture_check.non_finite_or_different(expected, traced(*capture_check.copies(near)))
        except Exception as error:  # noqa: BLE001
            found = f"the trace fails on them ({_first_line(error)})"
        again = None if found is None else _call(model, capture_check.copies(near), keywords)
        if found is not None and capture_check.non_finite_or_different(expected, again):
            return  # random: the model itself differs from its last run
    constant = capture_check.graph_ignores_inputs(traced.inlined_graph) if found or tracer_warnings else False
    if found is None and not (constant and tracer_warnings):
        return
    name = type(model).__name__
    what = [f"on the example inputs plus a little noise, {found}"] if found else []
    if constant:
        what.append("the traced graph does not depend on its inputs at all: it returns a constant")
    warned = "; ".join(tracer_warnings) if tracer_warnings else "nothing"
    raise ValueError(
        f"{name} {why_not_script}, and its trace does not compute what the model does: {'; '.join(what)}. The tracer "
        f"warned: {warned}. A trace records the tensor operations of one run: a numpy call, .item(), .tolist(), "
        "float(tensor) or a Python branch on a tensor's value becomes a constant in it. Make the model scriptable, "
        "rewrite those calls with torch ops, or pass a torch.jit.ScriptModule (the model scripted, or traced by "
        "torch.jit.trace if you know its trace holds for every input it will be given)"
    )


def _untraceable_output(model: torch.nn.Module, inputs: Tuple[Any, ...], keywords: Tuple[str, ...] = ()
                        ) -> Optional[Tuple[str, type]]:
    """Where the model's output holds something a trace cannot (anything but a tensor inside tuples, lists and
    dicts), and its type; None if nothing does or the model does not run on the inputs. Runs the model once, as
    tracing just did."""
    try:
        with torch.no_grad():
            output = _call(model, inputs, keywords)
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
