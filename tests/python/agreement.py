"""Accuracy of a converted model against its fp32 original, as the tests, the zoo and the benchmarks measure it.

max_rel_error is max |y - y_fp32| / max |y_fp32| over an output (relative to the output's scale; elementwise
relative error is meaningless near zero). cosine is the cosine similarity of the flattened outputs in float64.
top1 is the fraction of rows whose argmax over the last dimension agrees.
"""
from __future__ import annotations

from typing import Any, List, NamedTuple

import torch
from torch.utils import _pytree as pytree


class Agreement(NamedTuple):
    cosine: float
    max_rel_error: float
    top1: float
    finite: bool


def flatten_tensors(value: Any) -> List[torch.Tensor]:
    """The tensors of a (nested) output, in pytree order."""
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def compare(reference: torch.Tensor, output: torch.Tensor) -> Agreement:
    ref = reference.detach().double().flatten()
    out = output.detach().double().flatten()
    finite = bool(torch.isfinite(output).all())
    scale = ref.abs().max().clamp_min(1e-12)
    max_rel = ((ref - out).abs().max() / scale).item()
    norms = ref.norm() * out.norm()
    # computed directly: cosine_similarity's eps would turn outputs of magnitude 1e-10 (random-weight nets) into 0
    cosine = (ref @ out / norms).item() if norms > 0 else float(ref.norm() == out.norm())
    if reference.dim() >= 1 and reference.shape[-1] > 1:
        top1 = (reference.argmax(-1) == output.argmax(-1)).double().mean().item()
    else:
        top1 = 1.0
    return Agreement(cosine, max_rel, top1, finite)
