"""Apply: a new program with the plan in it, as explicit `aten._to_copy` casts (one per value and dtype, before its
first reader that needs it), each node's value recomputed where its inputs' dtypes changed (an RNN's from its fp32
layouts, without a fake run); the stored tensors (parameters, buffers, lifted constants) kept low, fp32 or in both
by core/stored_weights' rule (_C.storing_of), a low copy beside an fp32 one as a lifted constant; the stored
tensors nothing reads dropped, as freezing drops them; the buffers the program writes copied (its own), stored low
only where a cache write writes them (CACHE_WRITES) and written back in the dtype they are stored in. Takes the fp32
program, its Plan, Observation and StoredTensors (records.py); hands on an Applied record: the program, its casts,
its weight bytes and fp32 weights, the report's graph, by FX node name."""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, OutputKind, TensorArgument
from torch.fx.node import map_arg

from .. import _C
from .._compat import EXPORT_LSTM_STATE_META_RIGHT
from .ir import (CAST, _STORED, _fp32_tensor, _op_name, _read_state, _val, _with_inputs, _without_unread_state,
                 graph_module_copy, rebuilt_program)
from .records import Applied, Cast, GraphItem, KeptFp32, Observation, Plan, StoredTensors, Weights


_DTYPE_NAMES = {torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float64: "Double"}


def apply_plan(program: ExportedProgram, plan: Plan, observation: Observation, stored: StoredTensors) -> Applied:
    """A new program with the plan applied: a cast wherever a reader needs another dtype than its producer writes
    (low nodes read the low dtype where the fp32 program had fp32, every other reader what the fp32 program had), made
    once per value and dtype before its first reader; the stored tensors only low nodes read, in the low dtype."""
    low, low_io, seen = plan.low_dtype, plan.low_io, observation.values
    module = graph_module_copy(program)
    graph = module.graph
    before = {node.name: _val(node) for node in graph.nodes}
    fake_mode = torch._guards.detect_fake_mode([before[n.name] for n in graph.nodes if n.op == "placeholder"])
    low_nodes = {name for name in plan.precision if plan.runs_low(name)}
    specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
    state_dict, constants = dict(program.state_dict), dict(program.constants)

    def table_of(name: str) -> Dict[str, Any]:
        return state_dict if specs[name].target in state_dict else constants

    # how each stored tensor is kept is core/stored_weights' rule, from who reads it; one tensor may be held by
    # several placeholders (tied weights)
    stored_low, stored_both = _storing(stored.readers, low_nodes, lambda name: table_of(name)[specs[name].target])
    _keep_state_fp32(program, graph, specs, stored_low, stored_both)
    low_copies, copy_specs = _low_copy_placeholders(graph, specs, stored_both, low, fake_mode)
    buffers_low = {specs[name].target for name in stored_low if specs[name].kind == InputKind.BUFFER}
    specs.update(copy_specs)

    def wanted(value: torch.fx.Node, reader_low: bool) -> Optional[torch.dtype]:
        original = before.get(value.name)
        if not isinstance(original, torch.Tensor) or not original.is_floating_point():
            return None
        return low if reader_low and original.dtype == torch.float32 else original.dtype

    casts: List[Cast] = []
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
            casts.append(Cast(cast.name, value.name, _DTYPE_NAMES.get(_val(value).dtype, "?"),
                              _DTYPE_NAMES.get(dtype, "?"), numel * (_val(value).dtype.itemsize + dtype.itemsize)))
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
            # a buffer's new value goes back in the dtype the buffer is stored in: a cache stored low is written low
            written_low = {i for i, spec in enumerate(program.graph_signature.output_specs)
                           if spec.kind == OutputKind.BUFFER_MUTATION and spec.target in buffers_low}
            (outputs,) = node.args
            node.args = (type(outputs)(read(v, node, low_io or i in written_low) for i, v in enumerate(outputs)),)
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
    # a tied tensor's other name (GPT-2's lm_head.weight beside wte's) is in the state_dict without a placeholder:
    # it names the low tensor too, or the program would hold the fp32 one beside it
    held = {spec.target for spec in specs.values() if spec.kind in _STORED}
    for table in (state_dict, constants):
        table.update({target: lowered[id(tensor)] for target, tensor in table.items()
                      if target not in held and id(tensor) in lowered})
    for name, copy_node in low_copies.items():  # the low copy beside the fp32 tensor, one per tensor
        tensor = table_of(name)[specs[name].target]
        lowered.setdefault(id(tensor), tensor.detach().to(low))
        constants[copy_node.name] = lowered[id(tensor)]
    for target in set(program.graph_signature.buffers_to_mutate.values()):
        # a buffer the program writes (a cache, a counter) is its own: running it must not write into the tensor
        # of the model or program it was converted from, which torch.export shares
        table = state_dict if target in state_dict else constants
        if table[target] is program.state_dict.get(target, program.constants.get(target)):
            table[target] = table[target].clone()
    signature = _with_inputs(program.graph_signature, copy_specs)
    signature = _without_unread_state(signature, specs, graph, state_dict, constants)
    weights = Weights(_stored_bytes(*read_before), _stored_bytes(state_dict, constants),
                      _kept_fp32(program, state_dict, constants, stored.readers))
    converted = rebuilt_program(program, module, signature, state_dict=state_dict, constants=constants)
    return Applied(converted, casts, weights, _graph_items(graph, plan, made))


def rewritten(applied: Applied, program: ExportedProgram, fp32_program: ExportedProgram, stored: StoredTensors
              ) -> Applied:
    """`applied` for `program`, a rewrite of its program (quantize's Q/DQ): the same casts and graph, the weights after
    counted again."""
    weights = Weights(applied.weights.bytes_before, _stored_bytes(program.state_dict, program.constants),
                      _kept_fp32(fp32_program, program.state_dict, program.constants, stored.readers))
    return dataclasses.replace(applied, program=program, weights=weights)


# The ops that write a buffer's new value by moving data only (a KV cache's writes), and why a buffer they write may
# be stored low: any other write computes (a counter's add, a running mean), and stored low it would accumulate the
# low dtype's rounding step after step.
CACHE_WRITES = {
    "aten::index_copy": "writes rows of its source at the positions given: exact in the low dtype",
    "aten::copy": "copies its source, converted to the buffer's dtype: exact in the low dtype",
    "aten::slice_scatter": "writes its source into a slice: exact in the low dtype",
    "aten::select_scatter": "writes its source into a row: exact in the low dtype",
}


def _keep_state_fp32(program: ExportedProgram, graph: torch.fx.Graph, specs: Dict[str, InputSpec],
                     stored_low: Set[str], stored_both: Set[str]) -> None:
    """Takes out of `stored_low` and `stored_both` the buffers the program writes that must stay fp32: one written by
    anything but a cache write (CACHE_WRITES), and any kept in both dtypes (a low copy beside it would not see the
    writes)."""
    writers = {spec.target: spec.arg.name for spec in program.graph_signature.output_specs
               if spec.kind == OutputKind.BUFFER_MUTATION}
    nodes = {node.name: node for node in graph.nodes}
    for name in list(stored_low | stored_both):
        target = specs[name].target
        if specs[name].kind == InputKind.BUFFER and target in writers:
            if name in stored_both or _op_name(nodes[writers[target]]) not in CACHE_WRITES:
                stored_low.discard(name)
                stored_both.discard(name)


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


def _kept_fp32(program: ExportedProgram, state_dict: Dict[str, Any], constants: Dict[str, Any],
               stored_readers: Dict[str, List[torch.fx.Node]]) -> List[KeptFp32]:
    """The converted program's fp32 stored tensors (the report's weight_bytes_kept_fp32 and weights_kept_fp32), one
    per storage, with the readers of every placeholder holding it, in graph order."""
    holders: Dict[str, List[str]] = {}
    for spec in program.graph_signature.input_specs:
        if spec.kind in _STORED:
            holders.setdefault(spec.target, []).append(spec.arg.name)
    kept: Dict[int, KeptFp32] = {}
    for table in (state_dict, constants):
        for target, tensor in table.items():
            if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32:
                continue
            storage = tensor.untyped_storage()
            weight = kept.setdefault(storage.data_ptr(), KeptFp32(target, storage.nbytes(), []))
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


def _graph_items(graph: torch.fx.Graph, plan: Plan, made) -> List[GraphItem]:
    """The report's graph: planned nodes and casts, in graph order."""
    casts = {cast.name: index for index, cast in enumerate(made.values())}
    names = set(plan.precision)

    def source(node: torch.fx.Node) -> Optional[str]:
        while node.target is operator.getitem:
            node = node.args[0]
        return node.name if node.name in names or node.name in casts else None

    items = []
    for node in graph.nodes:
        if node.name in names or node.name in casts:
            reads = [source(i) for i in node.all_input_nodes]
            items.append(GraphItem(node.name, node.name in casts, _op_name(node), [r for r in reads if r is not None],
                                   casts.get(node.name, -1)))
    return items
