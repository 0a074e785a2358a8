"""What of a model's output a benchmark compares: its first tensor, or all its floating tensors as one vector; and
how close an output comes to the reference's (fp32's on the same inputs): the cosine, the largest error."""
from typing import Dict

import torch


def first(output) -> torch.Tensor:
    """The first tensor of a tensor, or of (nested) tuples, lists and dicts of them; of a dict (a transformers
    ModelOutput) its last_hidden_state where it has one, else its first value."""
    while isinstance(output, (tuple, list, dict)):
        if isinstance(output, dict):
            output = output["last_hidden_state"] if "last_hidden_state" in output else next(iter(output.values()))
        else:
            output = output[0]
    return output


def flat_output(output) -> torch.Tensor:
    """All floating tensors of an output (a tensor, a tuple, a dict), as one fp64 vector."""
    if isinstance(output, torch.Tensor):
        return output.detach().double().flatten() if output.is_floating_point() else output.new_empty(0).double()
    values = output.values() if isinstance(output, dict) else output
    return torch.cat([flat_output(v) for v in values])


def cosine(reference, output) -> float:
    """Cosine of the first tensor of `output` against the first of `reference`, in fp64 over all elements."""
    a, b = first(reference).detach().double().flatten(), first(output).detach().double().flatten()
    return (a @ b / (a.norm() * b.norm())).item()


def compare(reference: torch.Tensor, output: torch.Tensor) -> Dict[str, object]:
    """As torch_mp.accuracy.compare: cosine of the flattened tensors in fp64, max |y - y_ref| / max |y_ref|, and
    whether the output is finite everywhere."""
    ref = reference.double().flatten()
    out = output.double().flatten().to(ref.device)
    if ref.shape != out.shape:
        raise ValueError(f"output shape {tuple(output.shape)} != reference {tuple(reference.shape)}")
    scale = ref.abs().max().clamp_min(1e-12)
    norms = ref.norm() * out.norm()
    cosine_value = (ref @ out / norms).item() if norms > 0 else float(ref.norm() == out.norm())
    return {"cosine": cosine_value, "max_rel_error": ((ref - out).abs().max() / scale).item(),
            "finite": bool(out.isfinite().all())}
