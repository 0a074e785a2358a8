"""Whether a captured model computes what the model does, checked before anything is planned from it.

A trace records the tensor operations of one run: a numpy call, `.item()`, `.tolist()` or a Python branch on a tensor
value becomes a constant in it, and the trace then returns what the model returned on the example inputs whatever it
is given (torch.jit.trace warns TracerWarning, and its own check is off). torch_mp.convert runs the trace and the model
once more each, on the example inputs plus a little noise (`perturbed`), and compares (`difference`). torch.export's
program can compute something else than the model too (code that runs otherwise under export): torch_mp.export
compares the program's fp32 outputs on the example inputs, which its observation computes, with the model's.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import torch
from torch.utils import _pytree as pytree

NOISE = 1e-2  # the perturbation's standard deviation, relative to each floating input's mean magnitude
RTOL, ATOL = 1e-4, 1e-5  # two fp32 runs of one computation; atol relative to the output's largest magnitude


def perturbed(inputs: Any, seed: int = 0) -> Any:
    """A copy of the inputs, floating tensors plus Gaussian noise of NOISE times their mean finite magnitude (their
    NaN and inf kept); integer, bool and other values as they are (a token id or an index has no neighbour)."""
    generator = torch.Generator().manual_seed(seed)

    def perturb(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        value = value.detach().clone()
        if not value.is_floating_point() or value.numel() == 0 or value.is_nested:
            return value
        finite = torch.isfinite(value)
        magnitude = float(value[finite].abs().double().mean()) if bool(finite.any()) else 0.0
        noise = torch.randn(value.shape, generator=generator, dtype=torch.float32).to(value)
        return value + noise * (NOISE * (magnitude or 1.0))

    return pytree.tree_map(perturb, inputs)


def copies(inputs: Any) -> Any:
    """The inputs with every tensor cloned: what a run that may write into its inputs is given."""
    return pytree.tree_map(lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v, inputs)


def difference(expected: Sequence[Any], actual: Sequence[Any], what: str = "the model's") -> Optional[str]:
    """How the tensors `actual` differ from `expected` (pairwise, in order), in words; None where they agree: equal
    shapes, NaN and inf where `expected` has them, and the rest within RTOL and ATOL times the largest finite
    magnitude of `expected` (in a low floating dtype, 8 of its epsilons for either). Non-floating tensors are equal.
    """
    if len(expected) != len(actual):
        return f"it returns {len(actual)} tensors, {what} output {len(expected)}"
    for position, (reference, value) in enumerate(zip(expected, actual)):
        if not isinstance(reference, torch.Tensor) or not isinstance(value, torch.Tensor):
            continue
        name = f"output {position}" if len(expected) > 1 else "its output"
        reference, value = reference.detach(), value.detach().to(reference.device)
        if reference.shape != value.shape:
            return f"{name} has shape {tuple(value.shape)}, {what} {tuple(reference.shape)}"
        if not reference.is_floating_point() or not value.is_floating_point():
            if not torch.equal(reference, value.to(reference.dtype)):
                return f"{name} differs from {what} in {int((reference != value).sum())} of {reference.numel()} values"
            continue
        if reference.numel() == 0:
            continue
        reference, value = reference.double(), value.double()
        finite = torch.isfinite(reference)
        turned = finite & ~torch.isfinite(value)
        if bool(turned.any()):
            kind = "NaN" if bool(torch.isnan(value[turned]).any()) else "inf"
            return f"{name} is {kind} in {int(turned.sum())} of {reference.numel()} values where {what} is finite"
        if not torch.equal(torch.isnan(reference), torch.isnan(value)) or \
                not torch.equal(reference[~finite & ~torch.isnan(reference)], value[~finite & ~torch.isnan(reference)]):
            return f"{name} has its NaN or inf in other places than {what}"
        eps = max(torch.finfo(t.dtype).eps for t in (expected[position], actual[position]))
        rtol = max(RTOL, 8 * eps)
        scale = float(reference[finite].abs().max()) if bool(finite.any()) else 0.0
        atol = max(ATOL, 8 * eps) * (scale or 1.0)
        error = (value[finite] - reference[finite]).abs()
        allowed = atol + rtol * reference[finite].abs()
        if bool((error > allowed).any()):
            return (f"{name} differs from {what} by up to {float(error.max()):.3g} (largest magnitude "
                    f"{scale:.3g}; allowed: {atol:.2g} + {rtol:.2g} x |value|)")
    return None


def tensors(value: Any) -> List[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def graph_ignores_inputs(graph: torch._C.Graph) -> bool:
    """Whether no output of a TorchScript graph depends on its inputs (but the module itself, its first input): it
    returns a constant. Dependence follows the values' dataflow; a graph that writes in place into a value computed
    from an input, or has blocks, counts as depending on its inputs (this reading cannot tell)."""
    dependent = {value.unique() for value in list(graph.inputs())[1:]}
    if not dependent:
        return False
    for node in graph.nodes():
        if any(True for _ in node.blocks()):
            return False
        if any(value.unique() in dependent for value in node.inputs()):
            schema = node.schema() if node.kind().startswith("aten::") else ""
            if node.kind().endswith("_") or "!" in schema:
                return False
            dependent.update(value.unique() for value in node.outputs())
    return not any(value.unique() in dependent for value in graph.outputs())


def non_finite_or_different(expected: Any, actual: Any) -> Optional[str]:
    """difference() of two outputs' tensors in pytree order."""
    return difference(tensors(expected), tensors(actual))

