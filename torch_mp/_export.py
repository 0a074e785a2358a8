"""torch_mp.export: convert's planner and policy on a torch.export program, applied as explicit casts.

The program (exported here, or given) is made functional where it writes in place, observed on the example and
calibration inputs by an FX interpreter, and each call to an ATen op is decided by the rule order convert's
decisions come from too (core/classify_node, one call over the facts of every node gathered here). The guards' limits
and verdicts, the op facts, the policy and the min-cut planner are the C++ core's (torch_mp._C), the same ones
convert asks. The plan is applied as `aten._to_copy` casts where a
reader needs another dtype than its producer writes, one per value and dtype; a parameter, buffer or lifted constant
that only low nodes read is stored once in the low dtype. Node ids in the report are FX node names.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import operator
import time
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, OutputKind, TensorArgument
from torch.fx.node import map_arg

from . import _C, capture_check
from ._compat import EXPORT_LSTM_STATE_META_RIGHT
from ._convert import (ConversionError, ModelRunError, _device_of, _normalize_calibration, _normalize_inputs,
                       _refuse_autocast, module_inputs, tensors_of)
from .inference_form import graph_module_copy, inference_form, quiet_spec_copies, renamed_outputs
from .options import ConversionOptions
from .policy import check_rules_match
from .report import Report

CAST = torch.ops.aten._to_copy.default
_STORED = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
_KEPT_FP32_LISTED_BYTES = 64 * 1024  # the report lists fp32 weights over this size (conversion_report.h's)
_SOURCE, _SINK = 0, 1  # the dataflow nodes for the program's inputs and outputs


def export(
    model: Any,
    example_inputs: Any = None,
    dtype: Optional[torch.dtype] = None,
    *,
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
            example inputs.
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
    _refuse_autocast()
    start = time.perf_counter()
    program, inputs, eager = _program_of(model, example_inputs, dynamic_shapes)
    calibration = _normalize_calibration(calibration_inputs)
    chosen = chosen.for_device(_device_of(inputs, None))
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
            from .fallback import search_fallback

            converted, report = search_fallback(job, calibration or [inputs], chosen.tolerance, chosen.metric,
                                                chosen.progress)
        if report.data["non_finite"] is not None:
            from .finite_outputs import repair_non_finite

            converted, report = repair_non_finite(job, converted, report, [inputs] + list(calibration))
    except (ValueError, TypeError, ConversionError):
        raise
    except Exception as error:  # noqa: BLE001 - an internal failure: the user's model and program are untouched
        name = type(model).__name__
        raise ConversionError(f"torch_mp could not convert the program of {name}: {_first_line(error)}") from error
    report.annotate("capture", "export")
    if chosen.policy.slow_kernels:
        report.annotate("slow_kernels", chosen.policy.slow_kernels)
    report.annotate("seconds", time.perf_counter() - start)
    return (converted.program, report) if return_report else converted.program


def _program_of(model: Any, example_inputs: Any, dynamic_shapes: Any) -> Tuple[ExportedProgram, Tuple[Any, ...],
                                                                             Any]:
    """The functional program to plan (a new one: the model's or the given program is never changed), the example
    inputs, and for a module its eager output on them (None for a program)."""
    eager = None
    if isinstance(model, ExportedProgram):
        if example_inputs is None and model.example_inputs is not None:
            args, kwargs = model.example_inputs
            if kwargs:
                raise ValueError("the program's example inputs hold keyword arguments; pass example_inputs")
            example_inputs = args
        inputs = _normalize_inputs(example_inputs)
        program = model
        if inputs:
            _check_input_count(program, inputs)
    elif isinstance(model, torch.nn.Module):
        if model.training:
            raise ValueError(f"{type(model).__name__} is in training mode (dropout and batch-norm statistics would "
                             "be wrong); call model.eval() before exporting")
        inputs = _normalize_inputs(example_inputs)
        if inputs:
            eager = _run_eager(model, inputs)
        program = _export_module(model, inputs, dynamic_shapes)
    else:
        raise TypeError(f"expected a torch.nn.Module or torch.export.ExportedProgram, got {type(model).__name__}")
    if not inputs:
        raise ValueError("example_inputs are required: torch_mp runs the program to observe every value")
    return inference_form(program), inputs, eager


def _check_input_count(program: ExportedProgram, inputs: Tuple[Any, ...]) -> None:
    """A program given other than as many positional inputs as it takes: a ValueError, as convert's."""
    spec = program.call_spec.in_spec
    if spec is None:
        return
    args_spec = spec.child(0) if hasattr(spec, "child") else spec.children_specs[0]  # torch < 2.10: no child()
    if args_spec.num_children != len(inputs):
        raise ValueError(f"torch_mp: the program takes {args_spec.num_children} inputs but example_inputs has "
                         f"{len(inputs)}")


def _run_eager(model: torch.nn.Module, inputs: Tuple[Any, ...]) -> Any:
    """The model's output on (copies of) the example inputs, under no_grad, its buffers copies too so that a forward
    writing into them (a cache) leaves the model as it was: the reference the program is checked against. Inputs
    that do not bind to forward are a ValueError, as convert's; a model raising on them a ModelRunError."""
    try:
        inspect.signature(model.forward).bind(*inputs)
    except TypeError as error:
        raise ValueError(f"torch_mp: {type(model).__name__}.forward does not take the {len(inputs)} example inputs "
                         f"({error})") from None
    except ValueError:  # no signature to read (a builtin forward): the call itself tells
        pass
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}
    try:
        with torch.no_grad():
            return torch.func.functional_call(model, buffers, capture_check.copies(inputs), strict=False)
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


def _export_module(model: torch.nn.Module, inputs: Tuple[Any, ...], dynamic_shapes: Any) -> ExportedProgram:
    errors = []
    for strict in (False, True):  # non-strict traces Python as it runs; strict (TorchDynamo) where that fails
        try:
            with torch.no_grad():
                return torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes, strict=strict)
        except Exception as error:  # noqa: BLE001 - both modes failing is the error to report
            errors.append(f"{'strict' if strict else 'non-strict'}: {_first_line(error)}")
    raise ValueError(f"torch.export could not capture {type(model).__name__}: " + "; ".join(errors))


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class ConvertedProgram:
    """A converted program and its runnable module (made on first call): what job.run returns to the fallback and
    the repair, which call it."""

    def __init__(self, program: ExportedProgram):
        self.program = program
        self._module = None

    def __call__(self, *args):
        if self._module is None:
            self._module = self.program.module()
        return self._module(*args)


class _Seen:
    """What the runs showed of one value: its dtype, and for an fp32 tensor its size and the statistics the
    TorchScript front's observer keeps (_C.value_statistics, the one C++ function both fronts observe with): the
    largest finite and smallest finite non-zero magnitudes, integrality, finiteness."""

    __slots__ = ("dtype", "shape", "numel", "largest", "smallest", "only_integers", "finite")

    def __init__(self, tensor: torch.Tensor):
        self.dtype = tensor.dtype
        self.shape = None if tensor.is_nested else list(tensor.shape)  # on the example inputs
        self.numel = tensor.numel()
        self.largest, self.smallest, self.only_integers, self.finite = 0.0, float("inf"), True, True
        self.add(tensor)

    def add(self, tensor: torch.Tensor) -> None:
        if self.dtype != torch.float32 or tensor.is_nested or tensor.numel() == 0:
            return
        largest, smallest, only_integers, finite = _C.value_statistics(tensor.detach(), self.only_integers)
        self.largest, self.smallest = max(self.largest, largest), min(self.smallest, smallest)
        self.only_integers, self.finite = self.only_integers and only_integers, self.finite and finite


class _Recorder(torch.fx.Interpreter):
    """Runs a program's graph module, calling `record(node, value)` for every placeholder and call."""

    def __init__(self, module: torch.fx.GraphModule, record: Callable[[torch.fx.Node, Any], None]):
        super().__init__(module)
        self.record = record

    def run_node(self, node: torch.fx.Node) -> Any:
        value = super().run_node(node)
        if node.op in ("placeholder", "call_function"):
            self.record(node, value)
        return value


def _flat_inputs(program: ExportedProgram, inputs: Tuple[Any, ...]) -> List[Any]:
    """The graph module's arguments for the program's forward(*inputs): its parameters, buffers and constants, then
    the inputs, flat."""
    return program._graph_module_flat_inputs(inputs, {})


def _observe(program: ExportedProgram, runs: Sequence[Tuple[Any, ...]]):
    """What each run showed of every floating value, by node name, and each run's outputs."""
    seen: Dict[str, _Seen] = {}

    def record(node: torch.fx.Node, value: Any) -> None:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            if node.name in seen:
                seen[node.name].add(value)
            else:
                seen[node.name] = _Seen(value)

    outputs = []
    with torch.no_grad():
        for inputs in runs:
            outputs.append(_Recorder(program.graph_module, record).run(*_flat_inputs(program, inputs)))
    return seen, outputs


def _probe(program: ExportedProgram, inputs: Tuple[Any, ...], ids: Sequence[str]) -> List[Optional[torch.Tensor]]:
    """The first tensor each named node computes on `inputs` (None where it computes none)."""
    wanted, values = set(ids), {}

    def record(node: torch.fx.Node, value: Any) -> None:
        if node.name in wanted:
            first = next(iter(tensors_of(value)), None)
            values[node.name] = None if first is None else first.detach().clone()

    with torch.no_grad():
        _Recorder(program.graph_module, record).run(*_flat_inputs(program, inputs))
    return [values.get(name) for name in ids]


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _floating_dtypes(value: Any) -> List[torch.dtype]:
    return [t.dtype for t in tensors_of(value) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _fp32_tensor(node: Any) -> bool:
    value = _val(node)
    return isinstance(value, torch.Tensor) and value.dtype == torch.float32


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    return target._schema.name if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


def _scope(node: torch.fx.Node) -> str:
    """The module path of the innermost module the node ran in ("layer1.0.conv1"), as named_modules() names it."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    for prefix in ("L['self'].", "L__self__."):  # strict export's spelling
        path = path[len(prefix):] if path.startswith(prefix) else path
    return path.replace("['", ".").replace("']", "").replace("[", ".").replace("]", "")


class _Decision(NamedTuple):
    category: str
    rule_kind: str
    rule: str
    guard: Optional[Dict[str, Any]] = None


class _Planned(NamedTuple):
    """One record per planned node."""

    node: torch.fx.Node
    op: str
    scope: str
    decision: _Decision
    index: int  # in the dataflow graph


class ProgramConversion:
    """A functional program, its observations and the options of its conversions; run() converts it, keeping given
    nodes (by FX name) in fp32 (what the accuracy fallback varies), and always those in `keep_non_finite`. The job
    interface of torch_mp.fallback and torch_mp.finite_outputs, as _convert.Conversion for TorchScript."""

    def __init__(self, program: ExportedProgram, inputs, calibration, options: ConversionOptions):
        self.program = program
        self.options = options
        self.dtype_name = options.dtype_name
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
            self.seen, self.reference_outputs = _observe(program, self.runs)
        except Exception as error:  # noqa: BLE001 - the program's own failure on its inputs (their shapes, ...)
            which = "example or calibration inputs" if calibration else "example inputs"
            raise ModelRunError(f"torch_mp: running the program on the {which} failed: {_first_line(error)}") \
                from error
        self.observed_seconds = time.perf_counter() - start
        self._reference_module = None
        self._underflow = _underflow_to_zero(program.graph, self.seen, self.dtype_name)

    # --- the job interface ------------------------------------------------------------------------------------

    def scripted(self, *inputs):
        """The fp32 program's output (the fallback's reference)."""
        if self._reference_module is None:
            self._reference_module = self.program.module()
        return self._reference_module(*inputs)

    def module_inputs(self, inputs: Tuple[Any, ...]) -> Tuple[Any, ...]:
        return module_inputs(self.options, inputs)

    def probe(self, converted: ConvertedProgram, inputs: Tuple[Any, ...], ids: Sequence[str]):
        return _probe(converted.program, self.module_inputs(inputs), ids)

    def probe_reference(self, inputs: Tuple[Any, ...], ids: Sequence[str]):
        return _probe(self.program, inputs, ids)

    def run(self, keep_fp32: Iterable[str] = (), keep_node_ids: bool = False, in_place: bool = False,
            verify: bool = True) -> Tuple[ConvertedProgram, Report]:
        """Plans and applies; FX node names stay as they are, so `keep_node_ids` and `in_place` change nothing."""
        start = time.perf_counter()
        planned = self._decide(set(keep_fp32))
        precision, forced = self._plan(planned)
        program, casts, weights, graph = _apply(self.program, planned, precision, self.options.dtype,
                                                not self.options.keep_io_dtypes, self.seen, self._stored_readers)
        converted = ConvertedProgram(program)
        applied = time.perf_counter()
        non_finite = self._verify(converted) if verify and self.options.verify else None
        phases = {"capture": self.captured_seconds, "observe": self.observed_seconds, "plan": applied - start,
                  "verify": time.perf_counter() - applied}
        report = self._report(planned, precision, forced, casts, weights, graph, non_finite, phases)
        if not self._rules_checked:
            check_rules_match(self.policy, report.nodes)
            self._rules_checked = True
        return converted, report

    # --- deciding and planning -------------------------------------------------------------------------------

    def _decide(self, keep_fp32: Set[str]) -> List[_Planned]:
        """The decision per planned node: core::classifyNode (the rule order both fronts share) over the facts
        gathered here, in one call."""
        nodes = []
        for node in self.program.graph.nodes:
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            reads_tensor = any(isinstance(_val(i), torch.Tensor) for i in node.all_input_nodes)
            if not reads_tensor and not list(tensors_of(_val(node))):
                continue  # arithmetic on sizes
            nodes.append((node, _op_name(node), _scope(node)))
        node_rule = self.policy.node_rule()
        ask = None if node_rule is None else (lambda i: self._ask_node_rule(node_rule, *nodes[i]))
        decisions = _C.classify_nodes([self._facts(*entry, keep_fp32) for entry in nodes], self.policy._c,
                                      self.dtype_name, ask)
        return [_Planned(node, op, scope, _Decision(*decision), index + 2)
                for index, ((node, op, scope), decision) in enumerate(zip(nodes, decisions))]

    def _facts(self, node, op, scope, keep_fp32) -> Dict[str, Any]:
        """What core::NodeFacts needs of one node. A program's nodes were all observed, and a tensor list an FX
        node returns is read item by item (getitem), each cast on its own, so `unobserved` and
        `writes_tensor_list` never apply here."""
        outputs = _outputs_of(node)
        floating = [d for i in node.all_input_nodes for d in _floating_dtypes(_val(i))] + \
            [d for o in outputs for d in _floating_dtypes(_val(o))]
        return {
            "op": op, "scope": scope, "id": node.name,
            "not_fp32": any(d != torch.float32 for d in floating),
            "opaque_subgraphs": not isinstance(node.target, torch._ops.OpOverload),  # a higher-order op
            "kept_non_finite": node.name in self.keep_non_finite, "kept_by_fallback": node.name in keep_fp32,
            "observed_range": self._observed_guard(node, outputs),
            "underflow_to_zero": self._underflow.get(node.name),
            "constant_range": self._constant_guard(node),
            "lost_scalar": self._lost_scalar(node),
            "reads_table_stored_low": bool(_C.op_facts(op)["table_lookup"]) and self._table_stored_low(node),
            "sums_nothing": self._sums_nothing(node, op),
        }

    def _ask_node_rule(self, node_rule, node, op, scope) -> Optional[Tuple[str, str]]:
        """The user's per-node callable on one node, given what convert's NodeDescription gives it."""
        tensors = [_val(a) if isinstance(_val(a), torch.Tensor) else None for a in node.args]
        shapes = tuple(tuple(self.seen[a.name].shape) if t is not None and a.name in self.seen else None
                       for a, t in zip(node.args, tensors))
        dtypes = tuple(t.dtype if t is not None else None for t in tensors)
        constants = {}  # as the schema names them, defaults included (a TorchScript node spells every argument)
        for position, argument in enumerate(node.target._schema.arguments):
            if position < len(node.args):
                value = node.args[position]
            elif argument.name in node.kwargs:
                value = node.kwargs[argument.name]
            elif argument.has_default_value():
                value = argument.default_value
            else:
                continue
            if not any(isinstance(v, torch.fx.Node) for v in (value if isinstance(value, (list, tuple)) else [value])):
                constants[argument.name] = value
        return node_rule(node.name, op, scope, node.name, shapes, dtypes, constants)

    def _sums_nothing(self, node, op) -> bool:
        """convert's demotion of a product that sums nothing (core::sumsNothing): it follows. A tensor list an FX
        node returns is read item by item (getitem), each cast on its own, so convert's other demotion (a
        low_fp32_output op writing a tensor list keeps fp32) has nothing to do here."""
        first = node.args[0] if node.args else None
        equation = first if op == "aten::einsum" and isinstance(first, str) else None
        seen = self.seen.get(first.name) if isinstance(first, torch.fx.Node) else None
        return _C.sums_nothing(op, equation, list(seen.shape) if seen is not None and seen.shape is not None else None)

    def _lost_scalar(self, node) -> Optional[Dict[str, Any]]:
        for position, scalar in enumerate(list(node.args) + list(node.kwargs.values())):
            if isinstance(scalar, float):
                verdict = _C.lost_scalar_verdict(scalar, self.dtype_name, f"{node.name}[{position}]")
                if verdict:
                    return verdict
        return None

    def _observed_guard(self, node, outputs) -> Optional[Dict[str, Any]]:
        for value in list(node.all_input_nodes) + outputs:
            seen = self.seen.get(value.name)
            if seen is None or seen.dtype != torch.float32 or self._stored(value):
                continue  # constants are checked by _constant_guard: a tiny bias is harmless
            verdict = _C.observed_range_verdict(seen.largest, seen.only_integers, self.dtype_name, value.name)
            if verdict:
                return verdict
        return None

    def _constant_guard(self, node) -> Optional[Dict[str, Any]]:
        """A stored tensor or a float scalar the node reads beyond the low dtype's max (jit/plan/numeric_guards'
        constantOutOfRange: in a frozen TorchScript graph both are constants)."""
        limit = _C.largest_finite(self.dtype_name)
        for value in node.all_input_nodes:
            seen = self.seen.get(value.name)
            if self._stored(value) and seen is not None and seen.largest > limit:
                return {"kind": "constant range", "value": value.name, "seen": seen.largest, "limit": limit}
        for position, scalar in enumerate(list(node.args) + list(node.kwargs.values())):
            if isinstance(scalar, float) and math.isfinite(scalar) and abs(scalar) > limit:
                return {"kind": "constant range", "value": f"{node.name}[{position}]", "seen": abs(scalar),
                        "limit": limit}
        return None

    def _table_stored_low(self, lookup: torch.fx.Node) -> bool:
        """Whether a lookup's table is a stored tensor that can be stored once, low (core::OpPolicy::storesTableLow, as
        convert asks it): every node reading it is a lookup of it or one the policy runs low. A view of the table (a
        tied head's `t()`) is followed to its readers: convert's frozen graph folds it into a constant sharing the
        table's storage, whose readers it asks about."""
        readers = self._stored_readers.get(lookup.args[0].name) if lookup.args and self._stored(lookup.args[0]) \
            else None
        if readers is None:
            return False
        aliases = {name for name, group in self._stored_readers.items() if group is readers}
        reached, pending = [], list(readers)
        while pending:
            reader = pending.pop(0)
            if _is_view(reader):
                aliases.add(reader.name)
                pending.extend(user for user in reader.users if user not in pending)
            elif reader not in reached:
                reached.append(reader)
        reads_first = [bool(r.args) and isinstance(r.args[0], torch.fx.Node) and r.args[0].name in aliases
                       for r in reached]
        return self.policy._c.stores_table_low([(_op_name(r), first) for r, first in zip(reached, reads_first)])

    def _stored(self, node: Any) -> bool:
        """Whether a node is a parameter, buffer or lifted constant of the program."""
        return isinstance(node, torch.fx.Node) and node.op == "placeholder" and node.name in self._stored_names

    def _plan(self, planned: List[_Planned]) -> Tuple[Dict[str, str], Set[str]]:
        """The core's min-cut over the program's castable fp32 values: the precision per planned node's name, and
        the nodes its constraints forced to fp32."""
        io = "fp32" if self.options.keep_io_dtypes else "low"
        categories = [io, io] + [p.decision.category for p in planned]
        index = {p.node.name: p.index for p in planned}
        values = []
        for node in self.program.graph.nodes:
            if node.op == "placeholder" and not self._stored(node):
                producer = _SOURCE
            elif node.op == "call_function" and node.target is operator.getitem:
                producer = index.get(node.args[0].name)
            else:
                producer = index.get(node.name)
            if producer is None or not _fp32_tensor(node):
                continue
            consumers = sorted({_SINK if user.op == "output" else index[user.name] for user in node.users
                                if user.op == "output" or user.name in index})
            seen = self.seen.get(node.name)
            numel = seen.numel if seen is not None else 0
            values.append((producer, numel * (4 + self.options.dtype.itemsize), consumers))
        precision, forced = _C.plan_dataflow(categories, values, self.options.planner)
        return {p.node.name: precision[p.index] for p in planned}, {p.node.name for p in planned if forced[p.index]}

    # --- verification and report -----------------------------------------------------------------------------

    def _weights_kept_fp32(self, planned: List[_Planned], kept: List[_KeptFp32]) -> List[Dict[str, Any]]:
        """The report's weights_kept_fp32: each fp32 stored tensor over 64 KB (convert's kKeptFp32ListedBytes),
        largest first, with its readers' ops and the rule of its first reader the plan decided."""
        decided = {p.node.name: p.decision for p in planned}
        listed = []
        for weight in sorted((w for w in kept if w.bytes > _KEPT_FP32_LISTED_BYTES), key=lambda w: -w.bytes):
            first = next((r.name for r in weight.readers if r.name in decided), None)
            listed.append({"name": weight.name, "bytes": weight.bytes,
                           "readers": [_op_name(r) for r in weight.readers if r.op == "call_function"],
                           "decided_by": first, "rule": decided[first].rule if first else "",
                           "rule_kind": decided[first].rule_kind if first else None})
        return listed

    def _verify(self, converted: ConvertedProgram) -> Optional[Dict[str, Any]]:
        """Where the converted program computes NaN or inf where the fp32 one is finite: the first output tensor, or
        else the first intermediate value the fp32 runs saw finite; None when nowhere."""
        for run, inputs in enumerate(self.runs):
            bad: List[str] = []

            def record(node, value, bad=bad):
                seen = self.seen.get(node.name)
                if not bad and seen is not None and seen.finite and isinstance(value, torch.Tensor) \
                        and value.is_floating_point() and value.numel() and not _C.all_finite(value):
                    bad.append(node.name)

            with torch.no_grad():
                outputs = _Recorder(converted.program.graph_module, record).run(
                    *_flat_inputs(converted.program, self.module_inputs(inputs)))
            pairs = [(o, r) for o, r in zip(tensors_of(outputs), tensors_of(self.reference_outputs[run]))
                     if o.is_floating_point()]
            for position, (output, reference) in enumerate(pairs):
                if not _C.all_finite(output) and bool((~torch.isfinite(output) & torch.isfinite(reference)).any()):
                    return {"run": run, "tensor": position, "value": ""}
            if bad:
                return {"run": run, "tensor": None, "value": bad[0]}
        return None

    def _report(self, planned, precision, forced, casts, weights, graph, non_finite, phases) -> Report:
        flops = {p.node.name: _flops(p, self.seen) for p in planned}
        heavy = sum(flops.values())
        low_flops = sum(f for name, f in flops.items() if precision[name] == "low")
        nodes = []
        for p in planned:
            outputs = _outputs_of(p.node)
            seen = self.seen.get(outputs[0].name) if outputs else None
            nodes.append({
                "id": p.node.name, "op": p.op, "output": p.node.name, "scope": p.scope,
                "precision": precision[p.node.name], "category": p.decision.category,
                "forced_to_fp32": p.node.name in forced,
                "rule": p.decision.rule, "rule_kind": p.decision.rule_kind,
                "amax": seen.largest if seen is not None and seen.dtype == torch.float32 else None,
                "flops": flops[p.node.name], "guard": p.decision.guard,
            })
        data = {
            "dtype": self.dtype_name, "policy": self.policy.name, "planner": self.options.planner,
            "seconds": sum(phases.values()),
            "phases": phases,
            "nodes": nodes, "casts": casts, "cast_bytes": sum(c["bytes"] for c in casts),
            "weight_bytes_before": weights[0], "weight_bytes_after": weights[1],
            "weight_bytes_kept_fp32": sum(w.bytes for w in weights[2]),
            "weights_kept_fp32": self._weights_kept_fp32(planned, weights[2]),
            "unknown_ops": sorted({p.op for p in planned if p.decision.rule_kind == "unknown op"}),
            # 1 without heavy ops, as convert's ConversionReport::lowPrecisionFlopFraction
            "unobserved_nodes": 0, "low_precision_flop_fraction": low_flops / heavy if heavy else 1.0,
            "fused_casts": 0, "fused_cast_bytes": 0, "non_finite": non_finite,
            # what convert's kernel and layout passes count; the export front leaves kernels and layouts to the
            # compiler that runs its program (AOTInductor), so none of these happen here
            "fused_pointwise": 0, "fused_normalizations": 0, "column_major_matmul_weights": 0,
            "channels_last_convolutions": 0, "fused_convolutions": 0,
            "ranges_observed": True,  # the FX interpreter observes every value on the example and calibration inputs
            "graph": graph,
        }
        return Report(data)


def _is_view(node: torch.fx.Node) -> bool:
    """Whether a call returns a view of its first input (its schema's result aliases it, unwritten: t, view,
    permute, ...)."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    if schema is None or len(schema.returns) != 1 or not schema.arguments:
        return False
    returned, first = schema.returns[0].alias_info, schema.arguments[0].alias_info
    return returned is not None and not returned.is_write and first is not None and \
        returned.before_set == first.before_set


def _outputs_of(node: torch.fx.Node) -> List[torch.fx.Node]:
    """The nodes holding a call's tensors: itself, or for one returning several, the getitems that take them."""
    if isinstance(_val(node), (tuple, list)):
        return [user for user in node.users if user.target is operator.getitem]
    return [node]


def _underflow_to_zero(graph: torch.fx.Graph, seen: Dict[str, _Seen], dtype: str) -> Dict[str, Dict[str, Any]]:
    """The underflow-to-zero verdict by node name (core/underflow_to_zero, as convert's numeric guards ask it) over
    the FX graph's view: its ATen calls, the tensor values each reads, the float scalars each reads."""
    calls = [node for node in graph.nodes
             if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)]
    call_index = {node.name: i for i, node in enumerate(calls)}
    values: List[Tuple[str, int, float]] = []
    value_index: Dict[str, int] = {}

    def index_of(value: torch.fx.Node) -> int:
        if value.name not in value_index:
            observed = seen.get(value.name)
            smallest = observed.smallest if observed is not None and observed.dtype == torch.float32 else math.inf
            value_index[value.name] = len(values)
            values.append((value.name, call_index.get(value.name, -1), smallest))
        return value_index[value.name]

    nodes = []
    for node in calls:
        arguments = list(node.args) + list(node.kwargs.values())
        exponent = node.args[1] if len(node.args) > 1 else None
        nodes.append((node.target._schema.name,
                      [index_of(a) if isinstance(a, torch.fx.Node) and isinstance(_val(a), torch.Tensor) else -1
                       for a in node.args],
                      [abs(a) for a in arguments if isinstance(a, float) and a],
                      not (isinstance(exponent, (int, float)) and exponent >= 0)))
    return {calls[i].name: verdict for i, verdict in _C.underflow_to_zero(nodes, values, dtype).items()}


def _flops(planned: _Planned, seen: Dict[str, _Seen]) -> int:
    """Multiply-add FLOPs of a heavy op at the example inputs' sizes (core/flop_formulas, as convert counts them)."""
    node = planned.node

    def sizes(value: Any) -> Optional[List[int]]:
        observed = seen.get(value.name)
        return observed.shape if observed is not None else None

    outputs = _outputs_of(node)
    inputs = [sizes(a) if isinstance(a, torch.fx.Node) else None for a in node.args]
    transposed = node.args[6] if len(node.args) > 6 and isinstance(node.args[6], bool) else None
    integers = [a if isinstance(a, int) and not isinstance(a, bool) else None for a in node.args]
    weights = []
    if isinstance(node.target, torch._ops.OpOverload):
        names = [argument.name for argument in node.target._schema.arguments]
        position = names.index(_C.RECURRENT_WEIGHTS_ARGUMENT) if _C.RECURRENT_WEIGHTS_ARGUMENT in names else None
        listed = node.args[position] if position is not None and position < len(node.args) else ()
        weights = [sizes(t) for t in listed if isinstance(t, torch.fx.Node) and sizes(t) is not None]
    first = sizes(node.args[0]) if node.args and isinstance(node.args[0], torch.fx.Node) else None
    return _C.estimate_flops(planned.op, inputs, sizes(outputs[0]) if outputs else None, transposed, weights,
                             integers, math.prod(first) if first is not None else None)


_DTYPE_NAMES = {torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float64: "Double"}


def _apply(program: ExportedProgram, planned: List[_Planned], precision: Dict[str, str], low: torch.dtype,
           low_io: bool, seen: Dict[str, _Seen], stored_readers: Dict[str, List[torch.fx.Node]]):
    """A new program with the plan applied: a cast wherever a reader needs another dtype than its producer writes
    (low nodes read the low dtype where the fp32 program had fp32, every other reader what the fp32 program had), made
    once per value and dtype before its first reader; the stored tensors only low nodes read, in the low dtype
    (`stored_readers`: each fp32 stored placeholder's name -> the readers of its tensor, ProgramConversion's).
    Returns (program, casts as the report lists them, (weight bytes before, after), the report's graph)."""
    module = graph_module_copy(program)
    graph = module.graph
    before = {node.name: _val(node) for node in graph.nodes}
    fake_mode = torch._guards.detect_fake_mode([before[n.name] for n in graph.nodes if n.op == "placeholder"])
    low_nodes = {name for name, chosen in precision.items() if chosen == "low"}
    specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
    state_dict, constants = dict(program.state_dict), dict(program.constants)

    def table_of(name: str) -> Dict[str, Any]:
        return state_dict if specs[name].target in state_dict else constants

    # how each stored tensor is kept is core/stored_weights' rule, from who reads it; one tensor may be held by
    # several placeholders (tied weights)
    stored_low, stored_both = _storing(stored_readers, low_nodes, lambda name: table_of(name)[specs[name].target])
    low_copies, copy_specs = _low_copy_placeholders(graph, specs, stored_both, low, fake_mode)
    specs.update(copy_specs)

    def wanted(value: torch.fx.Node, reader_low: bool) -> Optional[torch.dtype]:
        original = before.get(value.name)
        if not isinstance(original, torch.Tensor) or not original.is_floating_point():
            return None
        return low if reader_low and original.dtype == torch.float32 else original.dtype

    casts: List[Dict[str, Any]] = []
    made: Dict[Tuple[str, torch.dtype], torch.fx.Node] = {}

    def read(value: Any, reader: torch.fx.Node, reader_low: bool) -> Any:
        if not isinstance(value, torch.fx.Node) or not isinstance(_val(value), torch.Tensor):
            return value
        dtype = wanted(value, reader_low)
        if dtype is None or _val(value).dtype == dtype:
            return value
        if dtype == low and value.name in low_copies:  # stored in both dtypes
            return low_copies[value.name]
        key = (value.name, dtype)
        if key not in made:
            with graph.inserting_before(reader):
                cast = graph.call_function(CAST, (value,), {"dtype": dtype})
            with fake_mode:
                cast.meta["val"] = CAST(_val(value), dtype=dtype)
            made[key] = cast
            numel = seen[value.name].numel if value.name in seen else 0
            casts.append({"id": cast.name, "value": value.name, "from": _DTYPE_NAMES.get(_val(value).dtype, "?"),
                          "to": _DTYPE_NAMES.get(dtype, "?"),
                          "bytes": numel * (_val(value).dtype.itemsize + dtype.itemsize), "reached": True})
        return made[key]

    for node in list(graph.nodes):
        if node.op == "placeholder":
            if node in low_copies.values():
                continue
            if node.name in stored_low or (low_io and specs[node.name].kind == InputKind.USER_INPUT
                                           and _fp32_tensor(node)):
                with fake_mode:
                    node.meta["val"] = CAST(_val(node), dtype=low)
            continue
        if node.op not in ("call_function", "output"):
            continue
        if node.op == "output":  # with low-precision IO, fp32 outputs are read as a low node reads them
            node.args = map_arg(node.args, lambda v: read(v, node, low_io))
            continue
        if node.target is not operator.getitem:  # a getitem takes what its call made
            reader_low = node.name in low_nodes
            node.args = map_arg(node.args, lambda v: read(v, node, reader_low))
            node.kwargs = map_arg(node.kwargs, lambda v: read(v, node, reader_low))
        if any(_val(i) is not before.get(i.name) for i in node.all_input_nodes):  # a cast, or a dtype changed
            with fake_mode:
                node.meta["val"] = _recomputed(node, before)

    read_before = _read_state(program, specs, graph)
    lowered: Dict[int, torch.Tensor] = {}  # one low tensor per fp32 one
    for name in sorted(stored_low):
        table, target = table_of(name), specs[name].target
        tensor = table[target]
        if id(tensor) not in lowered:
            copy_ = tensor.detach().to(low)
            lowered[id(tensor)] = torch.nn.Parameter(copy_, requires_grad=tensor.requires_grad) \
                if isinstance(tensor, torch.nn.Parameter) else copy_
        table[target] = lowered[id(tensor)]
    for name, copy_node in low_copies.items():  # the low copy beside the fp32 tensor, one per tensor
        tensor = table_of(name)[specs[name].target]
        lowered.setdefault(id(tensor), tensor.detach().to(low))
        constants[copy_node.name] = lowered[id(tensor)]
    signature = _with_inputs(program.graph_signature, copy_specs)
    signature = _without_unread_state(signature, specs, graph, state_dict, constants)
    weights = (_stored_bytes(*read_before), _stored_bytes(state_dict, constants),
               _kept_fp32(program, state_dict, constants, stored_readers))
    with quiet_spec_copies():
        converted = program._update(module, renamed_outputs(signature, graph), state_dict=state_dict,
                                    constants=constants)
    return converted, casts, weights, _graph_items(graph, planned, made)


def _storing(stored_readers: Dict[str, List[torch.fx.Node]], low_nodes: Set[str],
             tensor_of: Callable[[str], torch.Tensor]) -> Tuple[Set[str], Set[str]]:
    """The stored placeholders kept low, and those kept in both dtypes, by core/stored_weights' rule over each fp32
    tensor (the placeholders of tied weights share one list of readers)."""
    groups: Dict[int, Tuple[List[torch.fx.Node], List[str]]] = {}
    for name, readers in stored_readers.items():
        groups.setdefault(id(readers), (readers, []))[1].append(name)
    entries = list(groups.values())
    how = _C.storing_of([(tensor_of(names[0]).untyped_storage().nbytes(), True,
                          any(r.name in low_nodes for r in readers), any(r.name not in low_nodes for r in readers))
                         for readers, names in entries])
    stored_low = {name for (_, names), kept in zip(entries, how) if kept == "low" for name in names}
    stored_both = {name for (_, names), kept in zip(entries, how) if kept == "both" for name in names}
    return stored_low, stored_both


def _low_copy_placeholders(graph: torch.fx.Graph, specs, stored_both: Set[str], low: torch.dtype, fake_mode):
    """A lifted constant placeholder for the low copy of each stored placeholder in `stored_both`, before the
    program's user inputs (where torch.export puts its constants): {fp32 placeholder's name: the copy's node} and the
    copies' input specs by name, in the graph's order."""
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    first_user = next((node for node in placeholders if specs[node.name].kind == InputKind.USER_INPUT), None)
    last = placeholders[-1] if placeholders else None
    copies: Dict[str, torch.fx.Node] = {}
    copy_specs: Dict[str, InputSpec] = {}
    for node in placeholders:
        if node.name not in stored_both:
            continue
        with graph.inserting_before(first_user) if first_user is not None else graph.inserting_after(last):
            copy_node = graph.placeholder(f"{node.name}_{_DTYPE_NAMES[low].lower()}")
        last = copy_node
        with fake_mode:
            copy_node.meta["val"] = CAST(_val(node), dtype=low)
        copies[node.name] = copy_node
        copy_specs[copy_node.name] = InputSpec(kind=InputKind.CONSTANT_TENSOR,
                                               arg=TensorArgument(name=copy_node.name), target=copy_node.name)
    return copies, copy_specs


def _with_inputs(signature, added: Dict[str, InputSpec]):
    """The signature with the `added` constants' input specs before its user inputs, in the graph's order."""
    if not added:
        return signature
    specs = list(signature.input_specs)
    first_user = next((i for i, spec in enumerate(specs) if spec.kind == InputKind.USER_INPUT), len(specs))
    return dataclasses.replace(signature, input_specs=specs[:first_user] + list(added.values()) + specs[first_user:])


def _unread_state(specs, graph: torch.fx.Graph, state_dict: Dict[str, Any], constants: Dict[str, Any]
                  ) -> List[torch.fx.Node]:
    """The placeholders of parameters, buffers and lifted constants that nothing in the graph reads, but those holding
    a tensor another placeholder is read through (a tied weight's second name costs nothing)."""
    def tensor_of(node):
        target = specs[node.name].target
        return state_dict.get(target, constants.get(target))

    stored = [node for node in graph.nodes if node.op == "placeholder" and specs[node.name].kind in _STORED]
    read = {id(tensor_of(node)) for node in stored if node.users}
    return [node for node in stored if not node.users and id(tensor_of(node)) not in read]


def _read_state(program: ExportedProgram, specs, graph: torch.fx.Graph) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The program's state_dict and constants without the tensors nothing reads."""
    unread = {specs[node.name].target
              for node in _unread_state(specs, graph, program.state_dict, program.constants)}
    return ({k: v for k, v in program.state_dict.items() if k not in unread},
            {k: v for k, v in program.constants.items() if k not in unread})


def _without_unread_state(signature, specs, graph: torch.fx.Graph, state_dict: Dict[str, Any],
                          constants: Dict[str, Any]):
    """Drops the stored tensors nothing reads from the graph, `state_dict`, `constants` and the signature, as
    freezing drops them from a TorchScript module: the converted program carries no dead weights (a module's unused
    parameters) and its weight bytes are those convert counts."""
    unread = _unread_state(specs, graph, state_dict, constants)
    names = {node.name for node in unread}
    for node in unread:
        graph.erase_node(node)
    kept = [spec for spec in signature.input_specs if spec.arg.name not in names]
    still_read = {spec.target for spec in kept if spec.kind in _STORED}
    for spec in signature.input_specs:
        if spec.arg.name in names and spec.target not in still_read:
            (state_dict if spec.target in state_dict else constants).pop(spec.target, None)
    return dataclasses.replace(signature, input_specs=kept)


def _stored_groups(program: ExportedProgram) -> Dict[int, List[torch.fx.Node]]:
    """The fp32 stored tensors (parameters, buffers, lifted constants) of the program, each with the placeholders that
    hold it: tied weights are one tensor held by several placeholders."""
    specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
    groups: Dict[int, List[torch.fx.Node]] = {}
    for node in program.graph.nodes:
        if node.op == "placeholder" and specs[node.name].kind in _STORED and _fp32_tensor(node):
            target = specs[node.name].target
            tensor = program.state_dict[target] if target in program.state_dict else program.constants[target]
            groups.setdefault(id(tensor), []).append(node)
    return groups


def _recomputed(node: torch.fx.Node, before: Dict[str, Any]) -> Any:
    """The node's value for its inputs' new values (under the program's fake mode), `before` holding the fp32
    program's values by name. A low kernel may lay its result out otherwise than the fp32 one did (attention's output),
    and a view the fp32 layout allowed may then be impossible: such a view becomes a reshape (the same values; a copy
    where the layout needs one)."""
    if node.target in _RNNS:
        result = _rnn_result_in_new_dtype(node, before)
        if result is not None:
            return result
    args, kwargs = map_arg(node.args, _value_or_module), map_arg(node.kwargs, _value_or_module)
    if node.target is torch.ops.aten.view.default:
        try:
            return node.target(*args, **kwargs)
        except (RuntimeError, ValueError):  # the new layout allows no view
            node.target = torch.ops.aten.reshape.default
    return node.target(*args, **kwargs)


def _value_or_module(node: torch.fx.Node) -> Any:
    """What the node gives its readers: its value, or for a submodule (a torch.cond or while_loop branch) the module."""
    if node.op == "get_attr":
        return operator.attrgetter(node.target)(node.graph.owning_module)
    return _val(node)


# The RNN ops torch.export keeps whole. Their fake-tensor run unrolls every time step (the GRU classifier's: most of
# its plan), and their results' shapes and strides do not depend on the dtype they are computed in (test_export
# checks each against that run). An LSTM's fp32 value is right from torch 2.13 only (_compat); before, its fake run
# gives the right one.
_RNNS = {torch.ops.aten.gru.input, torch.ops.aten.rnn_tanh.input, torch.ops.aten.rnn_relu.input} | \
    ({torch.ops.aten.lstm.input} if EXPORT_LSTM_STATE_META_RIGHT else set())


def _rnn_result_in_new_dtype(node: torch.fx.Node, before: Dict[str, Any]) -> Optional[Tuple[torch.Tensor, ...]]:
    """An RNN's value where its inputs changed only their dtype, all to one: its fp32 value's tensors in that dtype
    (None where they changed otherwise)."""
    # an input not in `before` is a cast made by _apply, of the value the node read in the fp32 program
    new = [_val(i) for i in node.all_input_nodes]
    old = [before[i.name] if i.name in before else before.get(i.args[0].name) for i in node.all_input_nodes]
    dtypes = {value.dtype for value in new if isinstance(value, torch.Tensor)}
    if len(dtypes) != 1 or not all(isinstance(n, torch.Tensor) and isinstance(o, torch.Tensor) and n.shape == o.shape
                                   and n.stride() == o.stride() and n.storage_offset() == o.storage_offset()
                                   for n, o in zip(new, old)):
        return None
    result = before[node.name]
    if not all(t.dtype == old[0].dtype and t.storage_offset() == 0 for t in result):
        return None
    dtype = dtypes.pop()
    requires_grad = torch.is_grad_enabled() and any(value.requires_grad for value in new)  # as autograd sets it
    return tuple(torch.empty_strided(t.shape, t.stride(), dtype=dtype, device=t.device, requires_grad=requires_grad)
                 for t in result)


class _KeptFp32(NamedTuple):
    """A stored fp32 tensor of the converted program: its first name (state_dict or constants key), its bytes and
    the nodes that read it (of the fp32 program)."""
    name: str
    bytes: int
    readers: List[torch.fx.Node]


def _kept_fp32(program: ExportedProgram, state_dict: Dict[str, Any], constants: Dict[str, Any],
               stored_readers: Dict[str, List[torch.fx.Node]]) -> List[_KeptFp32]:
    """The converted program's fp32 stored tensors (the report's weight_bytes_kept_fp32 and weights_kept_fp32), one
    per storage, with the readers of every placeholder holding it, in graph order."""
    holders: Dict[str, List[str]] = {}
    for spec in program.graph_signature.input_specs:
        if spec.kind in _STORED:
            holders.setdefault(spec.target, []).append(spec.arg.name)
    kept: Dict[int, _KeptFp32] = {}
    for table in (state_dict, constants):
        for target, tensor in table.items():
            if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32:
                continue
            storage = tensor.untyped_storage()
            weight = kept.setdefault(storage.data_ptr(), _KeptFp32(target, storage.nbytes(), []))
            for holder in holders.get(target, []):
                weight.readers.extend(r for r in stored_readers.get(holder, []) if r not in weight.readers)
    return list(kept.values())


def _stored_bytes(*tables: Dict[str, Any]) -> int:
    storages = {}
    for table in tables:
        for tensor in table.values():
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def _graph_items(graph: torch.fx.Graph, planned: List[_Planned], made) -> List[Dict[str, Any]]:
    """The report's graph: planned nodes and casts by id, each with the ids of the items whose values it reads
    (through getitems, to the call that computed the value)."""
    casts = {cast.name: index for index, cast in enumerate(made.values())}
    names = {p.node.name for p in planned}

    def source(node: torch.fx.Node) -> Optional[str]:
        while node.target is operator.getitem:
            node = node.args[0]
        return node.name if node.name in names or node.name in casts else None

    items = []
    for node in graph.nodes:
        if node.name in names or node.name in casts:
            reads = [source(i) for i in node.all_input_nodes]
            item = {"id": node.name, "kind": "cast" if node.name in casts else "node", "op": _op_name(node),
                    "inputs": [r for r in reads if r is not None]}
            if node.name in casts:
                item["cast"] = casts[node.name]
            items.append(item)
    return items
