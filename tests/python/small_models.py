"""Small models more than one test module converts (and the zoo and benchmarks), and what those tests count in a
converted graph.

- ConvBnNet: a small conv net with batch norm.
- LSTMTagger: embedding -> bidirectional LSTM -> linear -> log_softmax over tags.
- ControlFlowNet: scripted data-dependent if and loop, returning scores and an integer argmax.
- NestedOutputNet: outputs nested in tuples, lists and dicts.
- CancellationNet: an MLP with one layer fp16 cannot represent (for the accuracy fallback's tests and benchmark).
"""
from typing import List, Tuple

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


class ConvBnNet(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(32, num_classes)
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


class LSTMTagger(nn.Module):
    def __init__(self, vocab: int = 1000, embed: int = 64, hidden: int = 128, tags: int = 17):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, tags)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        states, _ = self.lstm(self.embedding(tokens))
        return torch.log_softmax(self.head(states), dim=-1)


class ControlFlowNet(nn.Module):
    """Data-dependent control flow: a branch on the input's mean, a loop refining features, an argmax output."""

    def __init__(self, features: int = 32, classes: int = 8, steps: int = 3):
        super().__init__()
        self.steps = steps
        self.encode = nn.Linear(features, features)
        self.refine = nn.Linear(features, features)
        self.negative = nn.Linear(features, features)
        self.head = nn.Linear(features, classes)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.encode(x))
        if bool(x.mean() > 0):
            h = h + self.refine(h)
        else:
            h = h - self.negative(h)
        for _ in range(self.steps):
            h = torch.tanh(self.refine(h)) + h
        scores = self.head(h)
        return scores, torch.argmax(scores, dim=-1)


class NestedOutputNet(nn.Module):
    """Outputs nested in tuples, lists and dicts, with an integer tensor among them."""

    def __init__(self, features: int = 16):
        super().__init__()
        self.a = nn.Linear(features, features)
        self.b = nn.Linear(features, 4)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor):
        h = self.a(x)
        logits = self.b(torch.relu(h))
        out: List[torch.Tensor] = [h, logits.softmax(-1)]
        return (logits, out, {"lengths": lengths + 1, "hidden": h})


class CancellationNet(nn.Module):
    """`depth` ordinary linear+relu layers, then `offset`, which adds 1000 that the next op subtracts again: fp16
    spaces numbers near 1000 by 0.5, so the small signal riding on top is rounded away unless `offset` and the
    subtraction run in fp32. No range guard catches it (1000 is far inside fp16's range)."""

    def __init__(self, width: int = 64, depth: int = 8, classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())])
        self.offset = nn.Linear(width, width)
        with torch.no_grad():
            for layer in self.body[::2]:  # He initialisation: activations keep their scale through the depth
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                layer.bias.zero_()
            self.offset.weight.mul_(0.05)
            self.offset.bias.fill_(1000.0)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.offset(self.body(x)) - 1000.0)


class ConvOneD(nn.Module):
    """Hugging Face's Conv1D (GPT-2): `addmm(bias, x, weight)` with a row-major [in, out] weight."""

    def __init__(self, inputs: int, outputs: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(inputs, outputs) / inputs ** 0.5)
        self.bias = nn.Parameter(torch.randn(outputs))

    def forward(self, x):
        return torch.addmm(self.bias, x.view(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)
