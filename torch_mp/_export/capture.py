"""Capture: the program to plan, from a module (torch.export.export, non-strict then strict; the module run once
eagerly on copies of its inputs and buffers, the reference its program is checked against, capture_check) or from a
given ExportedProgram (its input count checked); hands on a Capture record (records.py), which conversion.py cleans
up. Neither the model nor a given program is changed."""
from __future__ import annotations

import inspect
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from .. import capture_check
from .._errors import ModelRunError
from .._inputs import CallInputs, _normalize_inputs, _normalize_kwargs
from .functional_writes import makes_view, writes
from .records import Capture


def capture(model: Any, example_inputs: Any, example_kwarg_inputs: Any, dynamic_shapes: Any) -> Capture:
    """The program of a module (torch.export's), or the program given; the example inputs; and for a module its
    eager output on them (None for a program)."""
    eager = None
    if isinstance(model, ExportedProgram):
        if example_inputs is None and example_kwarg_inputs is None and model.example_inputs is not None:
            example_inputs, example_kwarg_inputs = model.example_inputs
        call = CallInputs(_normalize_inputs(example_inputs), _normalize_kwargs(example_kwarg_inputs))
        program = model
        if call.args or call.kwargs:
            _check_program_inputs(program, call)
        lost = _writes_into_constants(program)
        if lost:
            raise ValueError(f"the program given writes into tensors torch.export lifted as constants: {lost}. "
                             f"{LOST_WRITES_REMEDY}")
    elif isinstance(model, torch.nn.Module):
        if model.training:
            raise ValueError(f"{type(model).__name__} is in training mode (dropout and batch-norm statistics would "
                             "be wrong); call model.eval() before exporting")
        call = CallInputs(_normalize_inputs(example_inputs), _normalize_kwargs(example_kwarg_inputs))
        if call.args or call.kwargs:
            _check_binding(model, call)
            # exported before its eager run: a capture refused for writes it would lose (into a tensor the model
            # holds outside its buffers, which no run could put back) never runs the model
            try:
                program = _export_module(model, call, dynamic_shapes)
            except CaptureError as error:
                if not error.lost_writes:
                    _run_eager(model, call)  # the model's own failure on its inputs (a ModelRunError) comes first
                raise
            eager = _run_eager(model, call)
    else:
        raise TypeError(f"expected a torch.nn.Module or torch.export.ExportedProgram, got {type(model).__name__}")
    if not call.args and not call.kwargs:
        raise ValueError("example_inputs are required: torch_mp runs the program to observe every value")
    return Capture(program, call, eager)


def _check_program_inputs(program: ExportedProgram, call: CallInputs) -> None:
    """A program given other positional inputs than it takes (their number) or other keyword inputs (their names):
    a ValueError, as convert's."""
    spec = program.call_spec.in_spec
    if spec is None:
        return
    children = [spec.child(0), spec.child(1)] if hasattr(spec, "child") else spec.children_specs  # torch < 2.10
    args_spec, kwargs_spec = children
    if args_spec.num_children != len(call.args):
        raise ValueError(f"torch_mp: the program takes {args_spec.num_children} inputs but example_inputs has "
                         f"{len(call.args)}")
    keywords = list(kwargs_spec.context or [])
    if sorted(keywords) != sorted(call.kwargs):
        raise ValueError(f"torch_mp: the program takes the keyword inputs {sorted(keywords)} but "
                         f"example_kwarg_inputs has {sorted(call.kwargs)}")


def _check_binding(model: torch.nn.Module, call: CallInputs) -> None:
    """Inputs that do not bind to forward: a ValueError, as convert's."""
    try:
        inspect.signature(model.forward).bind(*call.args, **call.kwargs)
    except TypeError as error:
        raise ValueError(f"torch_mp: {type(model).__name__}.forward does not take the {len(call.args)} example inputs"
                         + (f" and the keyword inputs {sorted(call.kwargs)}" if call.kwargs else "")
                         + f" ({error})") from None
    except ValueError:  # no signature to read (a builtin forward): the call itself tells
        pass


def _run_eager(model: torch.nn.Module, call: CallInputs) -> Any:
    """The model's output on (copies of) the example inputs, under no_grad, its buffers put back after it so that a
    forward writing into them (a cache) leaves the model as it was: the reference the program is checked against. A
    model raising on them: a ModelRunError."""
    try:
        with torch.no_grad(), capture_check.buffers_kept(model):
            return capture_check.copies(model(*capture_check.copies(call.args), **capture_check.copies(call.kwargs)))
    except Exception as error:  # noqa: BLE001 - the model's own failure on its inputs
        raise ModelRunError(f"torch_mp: running the model on the example inputs failed: {_first_line(error)}") \
            from error


def _check_capture(model: torch.nn.Module, program: ExportedProgram, eager: Any, outputs: Any) -> None:
    """Refuses a program whose fp32 outputs on the example inputs (the observation's, of the program with its batch
    norms and constant subgraphs folded) are not the model's: NaN or inf where the model's are finite, or beyond
    the tolerance of those folds' other roundings (capture_check.difference, FOLDED_RTOL and FOLDED_ATOL)."""
    user = [i for i, spec in enumerate(program.graph_signature.output_specs) if spec.kind == OutputKind.USER_OUTPUT]
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    expected = torch.utils._pytree.tree_leaves(eager)
    if len(user) != len(outputs) or len(expected) != len(user):
        return  # outputs the program returns otherwise than as the model's leaves: nothing to pair them with
    found = capture_check.difference(expected, [outputs[i] for i in user], rtol=capture_check.FOLDED_RTOL,
                                     atol=capture_check.FOLDED_ATOL)
    if found is None:
        return
    name = type(model).__name__
    raise ValueError(
        f"the program torch.export captured of {name} does not compute what the model does: on the example inputs, "
        f"{found}. Code that runs otherwise under torch.export than eagerly (numpy calls, .item(), "
        "torch.compiler.is_exporting() branches, an autograd.Function's forward) is the usual cause: rewrite it with "
        "torch ops, or export the model yourself, check program.module() against the model, and pass the "
        "ExportedProgram"
    )


def _export_module(model: torch.nn.Module, call: CallInputs, dynamic_shapes: Any) -> ExportedProgram:
    """torch.export's program of the model: non-strict, else strict. A non-strict program that writes into lifted
    constants lost those writes (below) and is not taken: strict capture (TorchDynamo) follows a tensor the model
    holds in a plain object (transformers' StaticCache layers) to the buffer it is registered as, and keeps the
    writes as buffer mutations."""
    errors, lost_writes = [], False
    for strict in (False, True):  # non-strict traces Python as it runs; strict (TorchDynamo) where that fails
        mode = "strict" if strict else "non-strict"
        try:
            with torch.no_grad():
                program = torch.export.export(model, call.args, call.kwargs or None, dynamic_shapes=dynamic_shapes,
                                              strict=strict)
        except Exception as error:  # noqa: BLE001 - both modes failing is the error to report
            errors.append(f"{mode}: {_first_line(error)}")
            continue
        lost = _writes_into_constants(program)
        if not lost:
            return program
        lost_writes = True
        errors.append(f"{mode}: it writes into tensors the capture lifted as constants, so the writes would be lost: "
                      f"{lost}")
    raise CaptureError(f"torch.export could not capture {type(model).__name__}: " + "; ".join(errors)
                       + (f". {LOST_WRITES_REMEDY}" if lost_writes else ""), lost_writes)


class CaptureError(ValueError):
    """torch.export could not capture the model in either mode; `lost_writes`: a capture wrote into lifted
    constants (the model's own run could write into them too: it is not run)."""

    def __init__(self, message: str, lost_writes: bool):
        super().__init__(message)
        self.lost_writes = lost_writes


LOST_WRITES_REMEDY = (
    "A tensor the forward writes in place (a KV cache, a counter) must be state of the program: register it as a "
    "buffer (module.register_buffer) and have forward reach it through the module, or export the model with "
    "torch.export.export(..., strict=True), which follows a tensor held in another object (transformers' StaticCache) "
    "to the buffer it is registered as, and pass the ExportedProgram")


def _writes_into_constants(program: ExportedProgram) -> str:
    """The lifted constant tensors the program writes in place (directly or through views), each with the op, the
    module and the source line that write it; "" when none. torch.export lifts a tensor the model holds outside its
    parameters and buffers as a constant: a write into it changes that constant only, not state the program keeps
    (non-strict capture of a cache held in a plain Python object)."""
    constants = {spec.arg.name: spec.target for spec in program.graph_signature.input_specs
                 if spec.kind == InputKind.CONSTANT_TENSOR}
    found = []
    for node in program.graph.nodes:
        if not writes(node):
            continue
        schema = node.target._schema
        for argument, value in zip(schema.arguments, node.args):
            if argument.alias_info is None or not argument.alias_info.is_write or not isinstance(value, torch.fx.Node):
                continue
            while makes_view(value) and value.args and isinstance(value.args[0], torch.fx.Node):
                value = value.args[0]
            if value.name in constants:
                found.append(f"{constants[value.name]} (by {node.target._schema.name}{_where(node)})")
    return "; ".join(found[:4]) + (f"; and {len(found) - 4} more" if len(found) > 4 else "")


def _where(node: torch.fx.Node) -> str:
    """ in module PATH (Type), at FILE:LINE `code`: where a node comes from, as far as its metadata tells."""
    text = ""
    stack = node.meta.get("nn_module_stack")
    if stack:
        path, kind = list(stack.values())[-1]
        text += f" in module {path or '<top>'} ({getattr(kind, '__name__', str(kind).rsplit('.', 1)[-1])})"
    trace = [line.strip() for line in (node.meta.get("stack_trace") or "").strip().splitlines()]
    if len(trace) >= 2 and trace[-2].startswith("File "):
        text += f", at {trace[-2][5:]}: `{trace[-1]}`"
    return text


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
