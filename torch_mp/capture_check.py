"""Whether a captured model computes what the model does, checked before anything is planned from it.

A trace records the tensor operations of one run: a numpy call, `.item()`, `.tolist()` or a Python branch on a tensor
value becomes a constant in it, and the trace then returns what the model returned on the example inputs whatever it
is given (torch.jit.trace warns TracerWarning, and its own check is off). torch_mp.convert runs the trace and the model
once more each, on the example inputs plus a little noise (`perturbed`), and compares (`difference`). torch.export's
program can compute something else than the model too (code that runs otherwise under export): torch_mp.export
compares the program's fp32 outputs on the example inputs, which its observation computes, with the model's. A
scripted module can compute otherwise as well (TorchScript binds an op's schema defaults, which can differ from its
Python binding's): torch_mp.convert runs it and the model on the example inputs and compares structure, dtypes,
shapes and values (`output_mismatch`).
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch.utils import _pytree as pytree

NOISE = 1e-2  # the perturbation's standard deviation, relative to each floating input's mean magnitude
RTOL, ATOL = 1e-4, 1e-5  # two fp32 runs of one computation; atol relative to the output's largest magnitude
# a run of the model against one of its program after torch_mp's exact-in-arithmetic rewrites (batch norms folded into
# convolutions, constant subgraphs computed once): other fp32 roundings, which a deep net accumulates (ResNet-50 with
# batch-norm statistics of real data: 2.4e-5 x the output's largest magnitude)
FOLDED_RTOL, FOLDED_ATOL = 1e-3, 1e-4
CHUNK = 1 << 18  # values compared at a time (see chunks)


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


@contextlib.contextmanager
def buffers_kept(model: Any) -> Iterator[None]:
    """Puts back the values the module's buffers had on entry: a forward that writes into them (a static KV cache, a
    counter), run to capture or check the model, must leave the user's module as it was. The tensors are the
    module's own (not copies given to the run), so a write that reaches a buffer otherwise than through the module's
    attribute (transformers' StaticCache holds its layers' tensors, registered as buffers of its exporter) is put
    back too."""
    buffers = list(model.buffers()) if isinstance(model, torch.nn.Module) else []
    saved = [buffer.clone() for buffer in buffers]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in zip(buffers, saved):
                if not torch.equal(buffer, value):
                    buffer.copy_(value)


def difference(expected: Sequence[Any], actual: Sequence[Any], what: str = "the model's",
               rtol: Optional[float] = None, atol: Optional[float] = None) -> Optional[str]:
    """How the tensors `actual` differ from `expected` (pairwise, in order), in words; None where they agree
    (tensor_difference, within rtol and atol, default RTOL and ATOL)."""
    if len(expected) != len(actual):
        return f"it returns {len(actual)} tensors, {what} output {len(expected)}"
    for position, (reference, value) in enumerate(zip(expected, actual)):
        if not isinstance(reference, torch.Tensor) or not isinstance(value, torch.Tensor):
            continue
        found = tensor_difference(reference, value, f"output {position}" if len(expected) > 1 else "its output", what,
                                  rtol, atol)
        if found is not None:
            return found
    return None


def tensor_difference(reference: torch.Tensor, value: torch.Tensor, name: str, what: str,
                      rtol: Optional[float] = None, atol: Optional[float] = None) -> Optional[str]:
    """How the tensor `value` (named `name`) differs from `reference`, in words; None where they agree: equal shapes,
    NaN and inf where `reference` has them, and the rest within rtol and atol times the largest finite magnitude of
    `reference` (in a low floating dtype, 8 of its epsilons for either). Non-floating tensors are equal. Nested
    tensors are compared component by component."""
    reference, value = reference.detach(), value.detach().to(reference.device)
    if reference.is_nested or value.is_nested:
        if not (reference.is_nested and value.is_nested) or reference.size(0) != value.size(0):
            return f"{name} is {'not ' if reference.is_nested else ''}a nested tensor of another length than {what}"
        for index, (part, other) in enumerate(zip(reference.unbind(), value.unbind())):
            found = tensor_difference(part, other, f"{name}'s component {index}", what, rtol, atol)
            if found is not None:
                return found
        return None
    if reference.shape != value.shape:
        return f"{name} has shape {tuple(value.shape)}, {what} {tuple(reference.shape)}"
    if not reference.is_floating_point() or not value.is_floating_point():
        if not torch.equal(reference, value.to(reference.dtype)):
            return f"{name} differs from {what} in {int((reference != value).sum())} of {reference.numel()} values"
        return None
    if reference.numel() == 0:
        return None
    eps = max(torch.finfo(t.dtype).eps for t in (reference, value))
    rtol, atol = RTOL if rtol is None else rtol, ATOL if atol is None else atol  # read when called
    return floating_difference(reference, value, name, what, max(rtol, 8 * eps), max(atol, 8 * eps))


class Mismatch(NamedTuple):
    """Where a capture's output first differs from the model's, and how. `position`: the indices and keys from the
    output down to the value that differs (empty: the output itself)."""
    position: Tuple[Any, ...]
    text: str


def output_mismatch(expected: Any, actual: Any, what: str = "the model's") -> Optional[Mismatch]:
    """The first place where `actual`, a capture's output, differs from `expected`, the model's, walking both in
    order: tuples and lists alike (named or not; TorchScript returns its own tuple types) of one length, dicts with
    the same keys, tensors of one dtype then as tensor_difference compares them, other values equal (floats within
    RTOL). None where they agree."""
    return _mismatch(expected, actual, (), what)


def _mismatch(expected: Any, actual: Any, position: Tuple[Any, ...], what: str) -> Optional[Mismatch]:
    name = "its output" + "".join(f"[{key!r}]" for key in position)
    if isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor):
        if actual.dtype != expected.dtype:
            return Mismatch(position, f"{name} has dtype {actual.dtype}, {what} {expected.dtype}")
        found = tensor_difference(expected, actual, name, what)
        return None if found is None else Mismatch(position, found)
    if isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list)) and len(expected) == len(actual):
        pairs = enumerate(zip(expected, actual))
    elif isinstance(expected, dict) and isinstance(actual, dict) and set(expected) == set(actual):
        pairs = ((key, (value, actual[key])) for key, value in expected.items())
    elif type(expected) is type(actual) and _equal_values(expected, actual):
        return None
    else:
        return Mismatch(position, f"{name} is {_kind(actual)}, {what} {_kind(expected)}")
    for key, (inner, other) in pairs:
        found = _mismatch(inner, other, position + (key,), what)
        if found is not None:
            return found
    return None


def _equal_values(expected: Any, actual: Any) -> bool:
    if isinstance(expected, float):
        return math.isclose(expected, actual, rel_tol=RTOL) or (math.isnan(expected) and math.isnan(actual))
    return bool(expected == actual)


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    if isinstance(value, dict):
        return f"a dict of keys {sorted(map(str, value))}"
    return f"{type(value).__name__} {str(value)[:40]}"


def chunks(reference: torch.Tensor, value: torch.Tensor) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    """The two tensors' values, flat, CHUNK at a time in float64: a comparison's copies stay a few MiB whatever the
    outputs' size (a decoder's logits are hundreds of MiB in float64)."""
    reference, value = reference.reshape(-1), value.reshape(-1)
    for start in range(0, reference.numel(), CHUNK):
        yield reference[start:start + CHUNK].double(), value[start:start + CHUNK].double()


def floating_difference(reference: torch.Tensor, value: torch.Tensor, name: str, what: str, rtol: float,
                        atol: float) -> Optional[str]:
    """difference() of two floating tensors of one shape: one pass for the non-finite values and the scale, one for the
    error, chunk by chunk."""
    scale, turned, turned_nan, misplaced = 0.0, 0, False, False
    for expected, actual in chunks(reference, value):
        finite = torch.isfinite(expected)
        lost = finite & ~torch.isfinite(actual)
        if bool(lost.any()):
            turned += int(lost.sum())
            turned_nan = turned_nan or bool(torch.isnan(actual[lost]).any())
        nan = torch.isnan(expected)
        misplaced = misplaced or not torch.equal(nan, torch.isnan(actual)) or \
            not torch.equal(expected[~finite & ~nan], actual[~finite & ~nan])
        if bool(finite.any()):
            scale = max(scale, float(expected[finite].abs().max()))
    if turned:
        return (f"{name} is {'NaN' if turned_nan else 'inf'} in {turned} of {reference.numel()} values where {what} "
                f"is finite")
    if misplaced:
        return f"{name} has its NaN or inf in other places than {what}"
    atol *= scale or 1.0
    largest, exceeded = 0.0, False
    for expected, actual in chunks(reference, value):
        finite = torch.isfinite(expected)
        error = (actual[finite] - expected[finite]).abs()
        if error.numel():
            largest = max(largest, float(error.max()))
            exceeded = exceeded or bool((error > atol + rtol * expected[finite].abs()).any())
    if exceeded:
        return (f"{name} differs from {what} by up to {largest:.3g} (largest magnitude {scale:.3g}; allowed: "
                f"{atol:.2g} + {rtol:.2g} x |value|)")
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

