"""What every stage of the export front asks of an FX graph (as csrc/jit/ir is for the TorchScript passes): the cast
op, the kinds of stored inputs, a node's value and op name, its module path, whether it is a view, the nodes holding
its tensors, the program's stored tensors with the placeholders that hold each, new lifted constants in a copy of its
graph, and a signature with constants added."""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, Dict, List

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

from .._inputs import tensors_of


CAST = torch.ops.aten._to_copy.default
_STORED = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


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


def _stored_groups(program: ExportedProgram) -> Dict[int, List[torch.fx.Node]]:
    """The fp32 stored tensors (parameters, buffers, lifted constants) of the program, each with the placeholders that
    hold it: tied weights are one tensor held by several placeholders."""
    specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
    groups: Dict[int, List[torch.fx.Node]] = {}
    for node in program.graph.nodes:
        if node.op == "placeholder" and specs[node.name].kind in _STORED and _fp32_tensor(node):
            groups.setdefault(id(_stored_tensor(program, specs[node.name].target)), []).append(node)
    return groups


def _stored_tensor(program: ExportedProgram, target: str) -> Any:
    """The tensor a stored input spec's target names: a parameter or buffer, else a lifted constant."""
    return program.state_dict[target] if target in program.state_dict else program.constants[target]


def _with_inputs(signature, added: Dict[str, InputSpec]):
    """The signature with the `added` constants' input specs before its user inputs, in the graph's order."""
    if not added:
        return signature
    specs = list(signature.input_specs)
    first_user = next((i for i, spec in enumerate(specs) if spec.kind == InputKind.USER_INPUT), len(specs))
    return dataclasses.replace(signature, input_specs=specs[:first_user] + list(added.values()) + specs[first_user:])


class LiftedConstants:
    """New lifted constants of a program, added to a copy of its graph: each a placeholder before the user inputs
    (where torch.export puts its constants), with its tensor in `constants` (the program's own, and these) and its
    input spec in `specs`, in the graph's order, for _with_inputs."""

    def __init__(self, program: ExportedProgram, graph: torch.fx.Graph):
        kinds = {spec.arg.name: spec.kind for spec in program.graph_signature.input_specs}
        placeholders = [node for node in graph.nodes if node.op == "placeholder"]
        self._graph = graph
        self._first_user = next((n for n in placeholders if kinds.get(n.name) == InputKind.USER_INPUT), None)
        self._last = placeholders[-1] if placeholders else None
        self.constants: Dict[str, Any] = dict(program.constants)
        self.specs: Dict[str, InputSpec] = {}

    def add(self, name: str, tensor: torch.Tensor, value: Any) -> torch.fx.Node:
        """A placeholder (named `name`, made unique) holding `tensor`, its meta value `value`."""
        if self._first_user is not None:
            with self._graph.inserting_before(self._first_user):
                holder = self._graph.placeholder(name)
        else:
            with self._graph.inserting_after(self._last):
                holder = self._graph.placeholder(name)
            self._last = holder
        holder.meta["val"] = value
        self.constants[holder.name] = tensor
        self.specs[holder.name] = InputSpec(kind=InputKind.CONSTANT_TENSOR, arg=TensorArgument(name=holder.name),
                                            target=holder.name)
        return holder
