"""Small models more than one test module converts, and what those tests count in a converted graph."""
import torch
import torch.nn.functional as F
from torch import nn


class MlpBlock(nn.Module):
    """linear -> gelu -> residual add -> layer norm, twice: the transformer MLP pattern."""

    def __init__(self, width: int = 64):
        super().__init__()
        self.fc = nn.ModuleList([nn.Linear(width, width) for _ in range(2)])
        self.norm = nn.ModuleList([nn.LayerNorm(width) for _ in range(2)])

    def forward(self, x):
        for fc, norm in zip(self.fc, self.norm):
            x = norm(torch.nn.functional.gelu(fc(x)) * 0.5 + x)
        return x


class ConvResidual(nn.Module):
    """conv -> residual add -> relu -> scale: one fusible chain (add, relu, mul and the casts around them)."""

    def __init__(self, channels: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x) + x) * 0.5


def fused_calls(module) -> int:
    return sum(1 for n in module.graph.nodes() if n.kind() == "torch_mp::fused_pointwise")


class ConvInexactNumbers(nn.Module):
    """conv, then arithmetic with numbers fp16 / bf16 do not hold: ATen's CPU add and sub round such a number to the
    tensor's dtype first, its mul and div do not; the fused program must do the same."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return torch.relu(y + 0.1) / 3.0 - (y - 1 / 3) * 0.1


class MaskedScores(nn.Module):
    """Attention-like scores with masked entries filled with `fill`, then a softmax."""

    def __init__(self, fill: float):
        super().__init__()
        self.fill = fill
        self.q = nn.Linear(16, 16)

    def forward(self, x, mask):
        scores = self.q(x) @ x.transpose(-1, -2)
        return scores.masked_fill(mask, self.fill).softmax(-1)


class ScoresThenNorm(nn.Module):
    """A batched matmul whose result goes through a relu into a layer norm: the case for an fp32 matmul output."""

    def __init__(self):
        super().__init__()
        self.keys = nn.Parameter(torch.randn(4, 32, 16))
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(torch.relu(torch.matmul(x, self.keys)))


class CosineAttention(nn.Module):
    """Cosine attention as in Swin V2 (F.normalize: a norm clamped to 1e-12 divides)."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(32, 32)
        self.k = nn.Linear(32, 32, bias=False)

    def forward(self, x):
        q = F.normalize(self.q(x), dim=-1)
        k = F.normalize(self.k(x), dim=-1)
        return (q @ k.transpose(-2, -1)).softmax(-1)
