"""Makes a graph's in-place writes functional without a retrace, where it can tell that doing so is exact.

Contract: `make_writes_functional(graph)` either rewrites the graph so that it writes nothing in place and computes
what it computed, and returns True, or leaves it untouched and returns False (the caller then retraces the program
with run_decompositions). A write is made functional when the tensor it writes is fresh: made by a call of the graph
that returns no view (not an input, a buffer or a view of either), written directly (`y.add_(1)`) or through a chain
of the views in VIEW_SCATTERS (`mask[a:b, c:d] = k`, Swin's attention masks), and its op has an out-of-place twin
(`add_` -> `add`). Then, in graph order:

- a direct write becomes its out-of-place op on the tensor's value so far, and that is the tensor's value from then;
- a write through views becomes its out-of-place op on the same views taken of the value so far, put back into it
  by the views' scatter ops (slice_scatter, select_scatter): the tensor's value from then;
- every other reader of the tensor (or of a direct write's result, which is the tensor) reads its value at that point.

What it refuses, where the rewrite would not be exact: a written tensor that is not fresh; an out-of-place op whose
result's dtype differs from the written tensor's (type promotion, which the in-place op does not do); a view of the
chain or a write through views whose result something else reads (it would alias the tensor); another view of the
tensor (a reshape, a permute) created before a write to the tensor and read after it (it would see the write).
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Dict, List, Optional

import torch

# The views a write may go through, each with the op that puts a new value of the view back into the viewed tensor:
# the pair that functionalization (run_decompositions) writes for them.
VIEW_SCATTERS = {
    torch.ops.aten.slice.Tensor: torch.ops.aten.slice_scatter.default,  # basic indexing, x[a:b] = v
    torch.ops.aten.select.int: torch.ops.aten.select_scatter.default,  # integer indexing, x[i] = v
}


@dataclasses.dataclass
class _Write:
    node: torch.fx.Node
    out_of_place: torch._ops.OpOverload
    views: List[torch.fx.Node]  # from the written tensor outward; empty for a write into the tensor itself
    tensor: torch.fx.Node  # the fresh tensor written
    result: torch.Tensor  # the out-of-place op's fake result on the write's own arguments


def writes(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
        and node.target._schema.is_mutable


def makes_view(node: torch.fx.Node) -> bool:
    """Whether the node's result may share an input's memory without writing it: a view, or an element of a call's
    list of views (split's); an unknown call may."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return isinstance(node.args[0], torch.fx.Node) and makes_view(node.args[0])
    if not isinstance(node.target, torch._ops.OpOverload):
        return True
    schema = node.target._schema
    return not schema.is_mutable and any(ret.alias_info is not None for ret in schema.returns)


def make_writes_functional(graph: torch.fx.Graph) -> bool:
    planned = _planned_writes(graph)
    if planned is None:
        return False
    _rewrite(graph, planned)
    return True


def _out_of_place(node: torch.fx.Node) -> Optional[torch._ops.OpOverload]:
    """The out-of-place op of an in-place op that writes only its first argument and returns it."""
    schema = node.target._schema
    name = schema.name.split("::")[1]
    written = [i for i, argument in enumerate(schema.arguments) if argument.alias_info and argument.alias_info.is_write]
    if not name.endswith("_") or name.endswith("__") or written != [0] or not node.args:
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    overload = getattr(packet, node.target._overloadname, None) if packet is not None else None
    return overload if isinstance(overload, torch._ops.OpOverload) and not overload._schema.is_mutable else None


def _written_tensor(node: torch.fx.Node) -> torch.fx.Node:
    """The tensor a value is: a direct write's result is the tensor it wrote."""
    while writes(node) and node.args and isinstance(node.args[0], torch.fx.Node) \
            and node.args[0].target not in VIEW_SCATTERS:
        node = node.args[0]
    return node


def _planned_writes(graph: torch.fx.Graph) -> Optional[Dict[torch.fx.Node, _Write]]:
    """Each write with what the rewrite needs, or None where some write cannot be made functional exactly."""
    position = {node: index for index, node in enumerate(graph.nodes)}
    planned: Dict[torch.fx.Node, _Write] = {}
    for node in graph.nodes:
        if not writes(node):
            continue
        out_of_place = _out_of_place(node)
        if out_of_place is None or not isinstance(node.args[0], torch.fx.Node):
            return None
        views, target = [], node.args[0]
        while target.op == "call_function" and target.target in VIEW_SCATTERS and isinstance(target.args[0],
                                                                                            torch.fx.Node):
            views.insert(0, target)
            target = target.args[0]
        tensor = _written_tensor(target)
        if tensor.op != "call_function" or makes_view(tensor) or writes(tensor) or (views and node.users):
            return None
        result = fake_result(out_of_place, node.args, node.kwargs)
        if not _keeps_dtype(node.args[0], result):
            return None  # `half.add_(float)` stays half; its out-of-place op would promote
        planned[node] = _Write(node, out_of_place, views, tensor, result)
    chained = {view for write in planned.values() for view in write.views}
    for view in chained:
        if any(user not in chained and (user not in planned or user.args[0] is not view) for user in view.users):
            return None  # read other than through the chain: it would alias the tensor
    of_tensor: Dict[torch.fx.Node, List[_Write]] = {}
    for write in planned.values():
        of_tensor.setdefault(write.tensor, []).append(write)
    for tensor, its_writes in of_tensor.items():
        written_at = [position[w.node] for w in its_writes]
        for value in [tensor] + [w.node for w in its_writes if not w.views]:
            for alias in value.users:
                if alias in chained or alias in planned or not makes_view(alias):
                    continue
                last_read = max(position[reader] for reader in _readers_through_views(alias))
                if any(position[alias] < at <= last_read for at in written_at):
                    return None  # a view made before a write and read after it would see the write
    return planned


def _keeps_dtype(target: torch.fx.Node, result) -> bool:
    written = target.meta.get("val")
    return isinstance(written, torch.Tensor) and isinstance(result, torch.Tensor) and result.dtype == written.dtype


def _readers_through_views(node: torch.fx.Node) -> List[torch.fx.Node]:
    found, pending = [node], [node]
    while pending:
        for user in pending.pop().users:
            found.append(user)
            if makes_view(user) or writes(user):
                pending.append(user)
    return found


def _rewrite(graph: torch.fx.Graph, planned: Dict[torch.fx.Node, _Write]) -> None:
    tensor_of = {}  # the written tensors and the direct writes' results (the same tensors) -> the tensor
    for write in planned.values():
        tensor_of[write.tensor] = write.tensor
        if not write.views:
            tensor_of[write.node] = write.tensor
    now: Dict[torch.fx.Node, torch.fx.Node] = {}  # a written tensor -> the node holding its value at this point
    chained = {view for write in planned.values() for view in write.views}
    for node in list(graph.nodes):
        if node in chained:
            continue
        for read in node.all_input_nodes:
            if read in tensor_of and now.get(tensor_of[read], read) is not read:
                node.replace_input_with(read, now[tensor_of[read]])
        write = planned.get(node)
        if write is None:
            continue
        value = now.get(write.tensor, write.tensor)
        if not write.views:
            node.target = write.out_of_place
            node.meta["val"] = write.result  # its arguments' values are those it was planned with
            now[write.tensor] = node
            continue
        with graph.inserting_before(node):
            taken = [value]
            for view in write.views:
                taken.append(_call(graph, view.target, (taken[-1],) + tuple(view.args[1:]), view.kwargs, node.meta))
            new = _call(graph, write.out_of_place, (taken[-1],) + tuple(node.args[1:]), node.kwargs, node.meta)
            for view, viewed in zip(reversed(write.views), reversed(taken[:-1])):
                new = _call(graph, VIEW_SCATTERS[view.target], (viewed, new) + tuple(view.args[1:]), view.kwargs,
                            node.meta)
        now[write.tensor] = new
        graph.erase_node(node)
    for node in reversed(list(graph.nodes)):
        if node in chained and not node.users:
            graph.erase_node(node)


def _call(graph: torch.fx.Graph, target, args, kwargs, meta) -> torch.fx.Node:
    node = graph.call_function(target, args, dict(kwargs))
    node.meta = {**meta, "val": fake_result(target, args, kwargs)}
    return node


def fake_result(target, args, kwargs):
    """The op run on its inputs' fake values (meta["val"]): a new node's metadata."""
    def val(value):
        return value.meta.get("val") if isinstance(value, torch.fx.Node) else value

    return target(*torch.fx.node.map_aggregate(args, val), **torch.fx.node.map_aggregate(kwargs, val))
