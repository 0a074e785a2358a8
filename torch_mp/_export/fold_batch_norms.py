"""Fold: a convolution whose one reader is an eval-mode batch norm (its inference op,
aten._native_batch_norm_legit_no_training, which inference_form.py gives) becomes one convolution with the norm
folded into its weight and bias, as torch.jit.freeze folds it for convert:

    w' = w * gamma / sqrt(var + eps)  (per output channel),   b' = (b - mean) * gamma / sqrt(var + eps) + beta

computed in float64, stored fp32 as lifted constants (the old tensors, read by nothing then, leave the program when
the plan is applied). The program then computes one op fewer per convolution and, in low precision, one rounding
fewer: the convolution's output is no longer rounded before its scale and shift. That rounding is what an
AOTInductor package keeps per op (emulate_precision_casts) and what made the CPU package of a ResNeXt-50 slower than
its peers (benchmarks/results/EXPORT_SPEED.md, "where the package's time goes").

Folded only where it changes nothing else: a convolution that is not transposed, whose output the norm alone reads
and whose weight (and bias) only it reads, no other stored name holding that tensor; the norm's statistics (and
scale and shift, if any) stored fp32 tensors; only the norm's output read, not its saved statistics.
"""
from __future__ import annotations

import operator
from typing import Any, Optional

import torch
from torch.export import ExportedProgram

from .inference_form import INFERENCE_BATCH_NORM
from .ir import (LiftedConstants, _stored_groups, _stored_tensor, _with_inputs, graph_module_copy,
                 rebuilt_program)

# The convolutions folded into: (input, weight, bias, ...) each; aten.convolution's transposed flag is argument 6.
CONVOLUTIONS = {torch.ops.aten.conv1d.default, torch.ops.aten.conv2d.default, torch.ops.aten.conv3d.default,
                torch.ops.aten.convolution.default}
_BIAS = 2  # the bias argument's position


def fold_batch_norms(program: ExportedProgram) -> ExportedProgram:
    """The program with each foldable convolution + batch norm pair folded: itself where there is none, else a new
    program (the given one, its tensors included, is not changed)."""
    stored = _StoredTensors(program)
    pairs = [(node.args[0], node) for node in program.graph.nodes if _foldable(node, stored)]
    if not pairs:
        return program
    module = graph_module_copy(program)
    graph = module.graph
    by_name = {node.name: node for node in graph.nodes}
    lifted = LiftedConstants(program, graph)
    for conv_original, norm_original in pairs:
        conv, norm = by_name[conv_original.name], by_name[norm_original.name]
        weight, bias = _folded(conv, norm, stored)
        inputs = [lifted.add(f"{conv.name}_folded_{suffix}", tensor, stored.fake(conv.args[1], tensor))
                  for suffix, tensor in (("weight", weight), ("bias", bias))]
        arguments = list(conv.args)
        arguments += [None] * (_BIAS + 1 - len(arguments))
        arguments[1], arguments[_BIAS] = inputs
        conv.args = tuple(arguments)
        for reader in list(norm.users):
            reader.replace_all_uses_with(conv)
            graph.erase_node(reader)
        graph.erase_node(norm)
    return rebuilt_program(program, module, _with_inputs(program.graph_signature, lifted.specs),
                           state_dict=dict(program.state_dict), constants=lifted.constants)


class _StoredTensors:
    """The program's fp32 stored placeholders (ir._stored_groups), their tensors, and the fake mode their values live
    in."""

    def __init__(self, program: ExportedProgram):
        self.program = program
        self.specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
        self._holders = {node.name: len(group) for group in _stored_groups(program).values() for node in group}
        self._fake_mode = torch._guards.detect_fake_mode(
            [node.meta.get("val") for node in program.graph.nodes if node.op == "placeholder"])

    def tensor(self, node: Any) -> Optional[torch.Tensor]:
        """A stored fp32 tensor's value, else None."""
        if not isinstance(node, torch.fx.Node) or node.name not in self._holders:
            return None
        return _stored_tensor(self.program, self.specs[node.name].target)

    def read_only_here(self, node: Any) -> bool:
        """Whether a stored fp32 tensor is read by one node alone, through this one name."""
        return self.tensor(node) is not None and len(node.users) == 1 and self._holders[node.name] == 1

    def fake(self, like: torch.fx.Node, tensor: torch.Tensor):
        """The meta value of a new placeholder holding `tensor`, on the device `like`'s has."""
        with self._fake_mode:
            return torch.empty(tensor.shape, dtype=tensor.dtype, device=like.meta["val"].device)


def _foldable(norm: torch.fx.Node, stored: _StoredTensors) -> bool:
    if norm.op != "call_function" or norm.target is not INFERENCE_BATCH_NORM:
        return False
    conv, gamma, beta, mean, var = norm.args[:5]
    if not isinstance(conv, torch.fx.Node) or conv.op != "call_function" or conv.target not in CONVOLUTIONS \
            or len(conv.users) != 1 or conv.kwargs:
        return False
    if conv.target is torch.ops.aten.convolution.default and conv.args[6]:
        return False  # transposed: its weight's channels are laid out otherwise
    bias = conv.args[_BIAS] if len(conv.args) > _BIAS else None
    return stored.read_only_here(conv.args[1]) and (bias is None or stored.read_only_here(bias)) \
        and all(stored.tensor(t) is not None for t in (mean, var)) \
        and all(t is None or stored.tensor(t) is not None for t in (gamma, beta)) \
        and all(user.target is operator.getitem and user.args[1] == 0 for user in norm.users)


def _folded(conv: torch.fx.Node, norm: torch.fx.Node, stored: _StoredTensors):
    """The folded weight and bias, computed in float64 from the stored fp32 tensors, stored fp32."""
    gamma, beta, mean, var = (None if t is None else stored.tensor(t).detach() for t in norm.args[1:5])
    eps = norm.args[6]
    weight = stored.tensor(conv.args[1]).detach().double()
    bias_node = conv.args[_BIAS] if len(conv.args) > _BIAS else None
    bias = stored.tensor(bias_node).detach().double() if bias_node is not None \
        else torch.zeros(weight.shape[0], dtype=torch.float64, device=weight.device)
    scale = torch.rsqrt(var.double() + eps)
    if gamma is not None:
        scale = scale * gamma.double()
    shift = -mean.double() * scale + (beta.double() if beta is not None else 0.0)
    folded_weight = weight * scale.reshape(-1, *([1] * (weight.dim() - 1)))
    folded_bias = bias * scale + shift
    return folded_weight.float().contiguous(), folded_bias.float().contiguous()
