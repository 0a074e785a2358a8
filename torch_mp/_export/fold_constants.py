"""Fold: what a program computes from its stored tensors alone becomes a lifted constant, computed once here, as
torch.jit.freeze's constant propagation folds it for convert (issue 58, 7.2: Swin V2's continuous position bias MLP
ran on its constant coordinate table at every call, planned where convert has a constant: +1.1% FLOPs for
Swin V2-T at 128x128).

A call is constant where it is an ATen op whose every input node is a stored tensor (parameter, buffer, lifted
constant; not one the program writes, which is state) or a constant call, and it is neither random (tagged
nondeterministic) nor without defined values (UNDEFINED: `empty`), whose fold would fix one run's values, nor
writing anything (mutable schema, impure). A constant call read by a call that is not constant is a fold's result:
it is computed eagerly from the stored tensors (in their dtype, fp32 for an fp32 model; torch_mp's planning casts it
afterwards like any constant) and stored as a lifted constant, which its readers read instead; the calls only it
needed, and the stored tensors only they read, leave the program.

Not folded: a result only views and copies make (view, permute, slice, clone, lift_fresh_copy, ...: nothing computed
to save, and a fp32 weight's view stays that weight, which the plan stores once); a result the program returns (it
stays computed from its stored tensors, as an output that is a weight is returned by convert); a call without any
stored tensor under it (a factory such as arange: it costs its size, not a computation, and stays as exported).
The numerics are the program's, bit for bit: the same ops on the same tensors, run once.
"""
from __future__ import annotations

import operator
from typing import Any, Dict, List, Set

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputSpec

from .ir import (_STORED, LiftedConstants, _is_view, _stored_tensor, _with_inputs, graph_module_copy,
                 rebuilt_program)

# Calls that compute nothing but a copy of their input, and why: a fold made of them and views alone saves nothing.
COPIES = {
    torch.ops.aten.clone.default: "a copy",
    torch.ops.aten.lift_fresh_copy.default: "a copy of a constant, as torch.export lifts torch.tensor(...)",
    torch.ops.aten.alias.default: "the same tensor",
    torch.ops.aten.detach.default: "the same values",
    torch.ops.aten._to_copy.default: "a copy, or a cast the plan makes anyway",
}
# Tags of ops whose result is not a function of their inputs.
NONDETERMINISTIC = (torch.Tag.nondeterministic_seeded, torch.Tag.nondeterministic_bitwise)
# Ops whose result has no defined values, untagged, and why.
UNDEFINED = {
    torch.ops.aten.empty.memory_format: "uninitialized memory",
    torch.ops.aten.empty_like.default: "uninitialized memory",
    torch.ops.aten.empty_strided.default: "uninitialized memory",
    torch.ops.aten.new_empty.default: "uninitialized memory",
    torch.ops.aten.new_empty_strided.default: "uninitialized memory",
}


def fold_constants(program: ExportedProgram) -> ExportedProgram:
    """The program with each computation on stored tensors alone folded into a lifted constant: itself where there is
    none, else a new program (the given one, its tensors included, is not changed)."""
    signature = program.graph_signature
    written = set(signature.buffers_to_mutate.values()) | set(getattr(signature, "parameters_to_mutate", {}).values())
    # a tensor the program writes is state, another value at each call: not a constant
    specs = {spec.arg.name: spec for spec in signature.input_specs
             if spec.kind not in _STORED or spec.target not in written}
    constant = _constant_nodes(program.graph, specs)
    results = [node for node in program.graph.nodes if _folds_into(node, constant, specs)]
    if not results:
        return program
    values = _evaluate(program, results, specs)
    module = graph_module_copy(program)
    graph = module.graph
    by_name = {node.name: node for node in graph.nodes}
    lifted = LiftedConstants(program, graph)
    for result in results:
        node = by_name[result.name]
        node.replace_all_uses_with(lifted.add(f"{node.name}_folded", values[result.name], node.meta["val"]))
    graph.eliminate_dead_code()
    return rebuilt_program(program, module, _with_inputs(signature, lifted.specs), state_dict=dict(program.state_dict),
                           constants=lifted.constants)


def _stored(node: torch.fx.Node, specs: Dict[str, InputSpec]) -> bool:
    return node.op == "placeholder" and node.name in specs and specs[node.name].kind in _STORED


def _constant_nodes(graph: torch.fx.Graph, specs: Dict[str, InputSpec]) -> Dict[torch.fx.Node, bool]:
    """Each node that computes from stored tensors alone, with whether it or a call under it computes more than views
    and copies (COPIES); stored placeholders with False."""
    constant: Dict[torch.fx.Node, bool] = {}
    for node in graph.nodes:
        if _stored(node, specs):
            constant[node] = False
        elif _foldable_call(node) and all(n in constant for n in node.all_input_nodes) and node.all_input_nodes:
            computes = not (node.target is operator.getitem or _is_view(node) or node.target in COPIES)
            constant[node] = computes or any(constant[n] for n in node.all_input_nodes)
    return constant


def _foldable_call(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True  # one result of a multi-result call
    if not isinstance(node.target, torch._ops.OpOverload) or node.target._schema.is_mutable or node.is_impure():
        return False
    return node.target not in UNDEFINED and not any(tag in node.target.tags for tag in NONDETERMINISTIC)


def _folds_into(node: torch.fx.Node, constant: Dict[torch.fx.Node, bool], specs: Dict[str, InputSpec]) -> bool:
    """Whether `node` is a fold's result: a constant call computing more than views and copies, holding a tensor, read
    by a call that is not constant and not by the output."""
    if not constant.get(node) or _stored(node, specs) or not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    users = list(node.users)
    return all(user.op != "output" for user in users) and any(user not in constant for user in users)


def _evaluate(program: ExportedProgram, results: List[torch.fx.Node],
              specs: Dict[str, InputSpec]) -> Dict[str, torch.Tensor]:
    """The results' values, by node name: the calls under them run eagerly, in the graph's order, on the stored
    tensors; a result that is a view of a value computed here is copied (the constant owns its memory)."""
    needed: Set[torch.fx.Node] = set()
    pending = list(results)
    while pending:
        node = pending.pop()
        if node not in needed:
            needed.add(node)
            pending.extend(node.all_input_nodes)
    values: Dict[torch.fx.Node, Any] = {}
    with torch.no_grad():
        for node in program.graph.nodes:
            if node not in needed:
                continue
            if _stored(node, specs):
                values[node] = _stored_tensor(program, specs[node.name].target)
                continue
            args, kwargs = torch.fx.map_arg((node.args, node.kwargs), lambda n: values[n])
            values[node] = node.target(*args, **kwargs)
    return {node.name: _owned(values[node]) for node in results}


def _owned(value: torch.Tensor) -> torch.Tensor:
    return value.clone() if value._base is not None else value
