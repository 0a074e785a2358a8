"""What of a model's output a benchmark compares: its first tensor, or all its floating tensors as one vector; and
the cosine of an output against the reference's (fp32's on the same inputs)."""
import torch


def first(output) -> torch.Tensor:
    """The first tensor of a tensor, or of (nested) tuples and lists of them."""
    while isinstance(output, (tuple, list)):
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
