"""What every stage of the export front asks of an FX graph and does to a program (as csrc/jit/ir is for the
TorchScript passes). Questions: the cast op, the kinds of stored inputs, a node's value and op name, its module path,
whether it is a view, the nodes holding its tensors, the program's stored tensors (with the placeholders that hold
each, and their readers: StoredTensors). Program surgery, each on a copy, never on the program given: a copy of its
graph module to rewrite, new lifted constants in it, a signature with constants added, the stored tensors nothing
reads dropped, and the program made of the rewritten copy."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import operator
import warnings
from typing import Any, Dict, List, Tuple

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

from .._compat import LazyGraphModule
from .._inputs import tensors_of
from .records import StoredTensors


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


def stored_tensors(program: ExportedProgram) -> StoredTensors:
    """The program's stored placeholders, and for each fp32 one the readers of its tensor (one list per tensor)."""
    names = frozenset(spec.arg.name for spec in program.graph_signature.input_specs if spec.kind in _STORED)
    readers: Dict[str, List[torch.fx.Node]] = {}
    for group in _stored_groups(program).values():
        shared = [user for holder in group for user in holder.users]
        readers.update((holder.name, shared) for holder in group)
    return StoredTensors(names, readers)


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


# --- program surgery ------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def quiet_spec_copies():
    """torch's own copies of a program's pytree specs warn of its deprecated LeafSpec (torch >= 2.13): not the
    user's to act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
        yield


def graph_module_copy(program: ExportedProgram) -> torch.fx.GraphModule:
    """A copy of the program's graph module to rewrite (its graph and the attributes the graph reads), its nodes named
    as the program's signature names them. Its Python code is left ungenerated (a lazy module): the program made of it
    (rebuilt_program) generates its own module's from the rewritten graph, and deepcopying the graph module would
    generate it once more."""
    with quiet_spec_copies():
        graph = copy.deepcopy(program.graph)
        held = copy.deepcopy({node.target: operator.attrgetter(node.target)(program.graph_module)
                              for node in graph.nodes if node.op in ("get_attr", "call_module")})
    for original, copied in zip(program.graph.nodes, graph.nodes):
        copied.name = original.name  # deepcopy renames those that shadow builtins ("input")
    return LazyGraphModule(held, graph)


def renamed_outputs(signature, graph: torch.fx.Graph):
    """The signature with each tensor output named by the node the graph now returns (a rewrite or a cast may have
    replaced it)."""
    returned = list(graph.output_node().args[0])
    specs = [dataclasses.replace(spec, arg=TensorArgument(name=node.name))
             if isinstance(spec.arg, TensorArgument) and isinstance(node, torch.fx.Node) else spec
             for spec, node in zip(signature.output_specs, returned)]
    return dataclasses.replace(signature, output_specs=specs)


def rebuilt_program(program: ExportedProgram, module: torch.fx.GraphModule, signature,
                    state_dict: Dict[str, Any] = None, constants: Dict[str, Any] = None) -> ExportedProgram:
    """The program made of `module` (a rewritten graph_module_copy of `program`'s) and `signature`, its outputs named
    as the rewritten graph returns them; with `state_dict` and `constants` where given, else the program's."""
    with quiet_spec_copies():
        return program._update(module, renamed_outputs(signature, module.graph), state_dict=state_dict,
                               constants=constants)


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
