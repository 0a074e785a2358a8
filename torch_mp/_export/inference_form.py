"""The export front's first pass: a program in its functional inference form, without a retrace where it can.

Planning needs a program that writes nothing in place (a cast between a write and a reader of the written tensor
would hide the write) and that names eval-mode batch norm as what it is, a per-channel scale and shift with stored
statistics (aten::_native_batch_norm_legit_no_training, not aten::batch_norm, which may compute statistics).
`ExportedProgram.run_decompositions({})` gives that form by tracing the program again, which costs as much as the
export itself. Most programs need only these rewrites, done here on a copy:

- an in-place op (`relu_`, `add_`, ...) writing a fresh tensor, directly or through slices (`mask[a:b] = k`),
  becomes its functional form, and the readers after it read its result (functional_writes.py says when);
- `aten.batch_norm(..., training=False, ...)` becomes `aten._native_batch_norm_legit_no_training(...)[0]`, the op
  run_decompositions({}) gives for it (the same kernel);
- a dropout with train=False (EVAL_IDENTITIES: `nn.Dropout` in eval mode, in place or not, even on a view)
  changes nothing: its readers read its input;
- a call whose result nothing reads (and that writes nothing) goes, as freezing removes it from a TorchScript
  module: it would be planned, counted and cast for nothing;
- a call repeating an earlier one (the same op on the same values and arguments, and neither writing nor random)
  is that one, as TorchScript's common subexpression elimination makes it.

A program with any other write (into an input, a buffer, a reshaped view) is traced again with run_decompositions({}).
"""
from __future__ import annotations

import operator

import torch
from torch.export import ExportedProgram

from .functional_writes import fake_result, make_writes_functional, writes
from .ir import graph_module_copy, quiet_spec_copies, rebuilt_program

BATCH_NORM = torch.ops.aten.batch_norm.default
INFERENCE_BATCH_NORM = torch.ops.aten._native_batch_norm_legit_no_training.default
# In-place ops that change nothing in eval mode (their `train` argument False), and why.
EVAL_IDENTITIES = {
    torch.ops.aten.dropout_.default: "dropout zeroes nothing when not training",
    torch.ops.aten.feature_dropout_.default: "dropout zeroes nothing when not training",
    torch.ops.aten.alpha_dropout_.default: "alpha dropout changes nothing when not training",
    torch.ops.aten.feature_alpha_dropout_.default: "alpha dropout changes nothing when not training",
    # their functional forms too: as random ops they are impure, so dead code elimination would keep them (and
    # what they read) where nothing reads their result
    torch.ops.aten.dropout.default: "dropout zeroes nothing when not training",
    torch.ops.aten.feature_dropout.default: "dropout zeroes nothing when not training",
    torch.ops.aten.alpha_dropout.default: "alpha dropout changes nothing when not training",
    torch.ops.aten.feature_alpha_dropout.default: "alpha dropout changes nothing when not training",
}


def inference_form(program: ExportedProgram) -> ExportedProgram:
    """The program, functional and with eval-mode batch norms in their inference op: itself where it already is,
    else a new program (the given one is not changed)."""
    if not _repeated_calls(program.graph) and not any(
            writes(node) or _eval_batch_norm(node) or _eval_identity(node) or _dead(node)
            for node in program.graph.nodes):
        return program
    module = graph_module_copy(program)
    graph = module.graph
    for node in list(graph.nodes):
        if _eval_identity(node):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
    if not make_writes_functional(graph):
        with quiet_spec_copies():
            return program.run_decompositions({})
    for node in list(graph.nodes):
        if _eval_batch_norm(node):
            x, weight, bias, mean, var, _training, momentum, eps = node.args[:8]
            with graph.inserting_before(node):
                computed = graph.call_function(INFERENCE_BATCH_NORM, (x, weight, bias, mean, var, momentum, eps))
                result = graph.call_function(operator.getitem, (computed, 0))
            computed.meta = {**node.meta, "val": fake_result(INFERENCE_BATCH_NORM, computed.args, {})}
            result.meta = {**node.meta, "val": computed.meta["val"][0]}
            node.replace_all_uses_with(result)
            graph.erase_node(node)
    for repeated, first in _repeated_calls(graph):
        repeated.replace_all_uses_with(first)
        graph.erase_node(repeated)
    graph.eliminate_dead_code()
    return rebuilt_program(program, module, program.graph_signature)


def _repeated_calls(graph: torch.fx.Graph):
    """(call, the earlier identical call) pairs: pure ATen calls on the same nodes with equal arguments (floats by
    their repr, so that 0.0 and -0.0 differ)."""
    def key_of(value):
        if isinstance(value, (list, tuple)):
            return tuple(key_of(v) for v in value)
        if isinstance(value, float):
            return ("float", repr(value))
        if isinstance(value, dict):
            return tuple(sorted((k, key_of(v)) for k, v in value.items()))
        hash(value)  # TypeError where a value cannot be a key
        return value

    seen, pairs = {}, []
    for node in graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) or node.is_impure() \
                or node.target._schema.is_mutable:
            continue
        try:
            key = (node.target, key_of(node.args), key_of(node.kwargs))
        except TypeError:
            continue
        if key in seen:
            pairs.append((node, seen[key]))
        else:
            seen[key] = node
    return pairs


def _dead(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and not node.users and not node.is_impure()


def _eval_identity(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in EVAL_IDENTITIES and len(node.args) >= 3 \
        and node.args[2] is False


def _eval_batch_norm(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is BATCH_NORM and len(node.args) >= 8 \
        and node.args[5] is False and all(isinstance(a, torch.fx.Node) for a in node.args[3:5]) \
        and all(a is None or isinstance(a, torch.fx.Node) for a in node.args[1:3])  # without affine: None
