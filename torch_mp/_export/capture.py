"""Capture: the program to plan, from a module (torch.export.export, non-strict then strict; the module run once
eagerly on copies of its inputs and buffers, the reference its program is checked against, capture_check) or from a
given ExportedProgram (its input count checked), in its functional inference form (inference_form.py), its batch
norms after convolutions folded into them (fold_batch_norms.py). Neither the model nor a given program is changed."""
from __future__ import annotations

import inspect
from typing import Any, Tuple

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind

from .. import capture_check
from .._errors import ModelRunError
from .._inputs import CallInputs, _normalize_inputs, _normalize_kwargs
from .fold_batch_norms import fold_batch_norms
from .inference_form import inference_form


def _program_of(model: Any, example_inputs: Any, example_kwarg_inputs: Any, dynamic_shapes: Any
                ) -> Tuple[ExportedProgram, CallInputs, Any]:
    """The functional program to plan (a new one: the model's or the given program is never changed), the example
    inputs, and for a module its eager output on them (None for a program)."""
    eager = None
    if isinstance(model, ExportedProgram):
        if example_inputs is None and example_kwarg_inputs is None and model.example_inputs is not None:
            example_inputs, example_kwarg_inputs = model.example_inputs
        call = CallInputs(_normalize_inputs(example_inputs), _normalize_kwargs(example_kwarg_inputs))
        program = model
        if call.args or call.kwargs:
            _check_program_inputs(program, call)
    elif isinstance(model, torch.nn.Module):
        if model.training:
            raise ValueError(f"{type(model).__name__} is in training mode (dropout and batch-norm statistics would "
                             "be wrong); call model.eval() before exporting")
        call = CallInputs(_normalize_inputs(example_inputs), _normalize_kwargs(example_kwarg_inputs))
        if call.args or call.kwargs:
            eager = _run_eager(model, call)
        program = _export_module(model, call, dynamic_shapes)
    else:
        raise TypeError(f"expected a torch.nn.Module or torch.export.ExportedProgram, got {type(model).__name__}")
    if not call.args and not call.kwargs:
        raise ValueError("example_inputs are required: torch_mp runs the program to observe every value")
    return fold_batch_norms(inference_form(program)), call, eager


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


def _run_eager(model: torch.nn.Module, call: CallInputs) -> Any:
    """The model's output on (copies of) the example inputs, under no_grad, its buffers copies too so that a forward
    writing into them (a cache) leaves the model as it was: the reference the program is checked against. Inputs
    that do not bind to forward are a ValueError, as convert's; a model raising on them a ModelRunError."""
    try:
        inspect.signature(model.forward).bind(*call.args, **call.kwargs)
    except TypeError as error:
        raise ValueError(f"torch_mp: {type(model).__name__}.forward does not take the {len(call.args)} example inputs"
                         + (f" and the keyword inputs {sorted(call.kwargs)}" if call.kwargs else "")
                         + f" ({error})") from None
    except ValueError:  # no signature to read (a builtin forward): the call itself tells
        pass
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}
    try:
        with torch.no_grad():
            return torch.func.functional_call(model, buffers, capture_check.copies(call.args),
                                              capture_check.copies(call.kwargs), strict=False)
    except Exception as error:  # noqa: BLE001 - the model's own failure on its inputs
        raise ModelRunError(f"torch_mp: running the model on the example inputs failed: {_first_line(error)}") \
            from error


def _check_capture(model: torch.nn.Module, program: ExportedProgram, eager: Any, outputs: Any) -> None:
    """Refuses a program whose fp32 outputs on the example inputs (the observation's) are not the model's: NaN or
    inf where the model's are finite, or beyond two fp32 runs' tolerance (capture_check.difference)."""
    user = [i for i, spec in enumerate(program.graph_signature.output_specs) if spec.kind == OutputKind.USER_OUTPUT]
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    expected = torch.utils._pytree.tree_leaves(eager)
    if len(user) != len(outputs) or len(expected) != len(user):
        return  # outputs the program returns otherwise than as the model's leaves: nothing to pair them with
    found = capture_check.difference(expected, [outputs[i] for i in user])
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
    errors = []
    for strict in (False, True):  # non-strict traces Python as it runs; strict (TorchDynamo) where that fails
        try:
            with torch.no_grad():
                return torch.export.export(model, call.args, call.kwargs or None, dynamic_shapes=dynamic_shapes,
                                           strict=strict)
        except Exception as error:  # noqa: BLE001 - both modes failing is the error to report
            errors.append(f"{'strict' if strict else 'non-strict'}: {_first_line(error)}")
    raise ValueError(f"torch.export could not capture {type(model).__name__}: " + "; ".join(errors))


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
