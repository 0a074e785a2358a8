"""Built-in models for the demo and the tests, defined here so that nothing needs downloading.

- resnet50_ibn_a: ResNet-50 "IBN-a" (Pan et al., 2018): bottlenecks in stages 1-3 whose first norm splits channels
  into an InstanceNorm2d half and a BatchNorm2d half; ends in a softmax classifier.
- ConvBnNet: a small conv net with batch norm.
- LSTMTagger: embedding -> bidirectional LSTM -> linear -> log_softmax over tags.
- ControlFlowNet: scripted data-dependent if and loop, returning scores and an integer argmax.
- CancellationNet: an MLP with one layer fp16 cannot represent (for the accuracy fallback's tests and benchmark).
"""
from __future__ import annotations

from typing import List, Tuple

import torch
from torch import nn


class IBN(nn.Module):
    """Instance-batch normalization: InstanceNorm2d on the first half of the channels, BatchNorm2d on the rest."""

    def __init__(self, planes: int, ratio: float = 0.5):
        super().__init__()
        self.half = int(planes * ratio)
        self.IN = nn.InstanceNorm2d(self.half, affine=True)
        self.BN = nn.BatchNorm2d(planes - self.half)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        split = torch.split(x, self.half, 1)
        return torch.cat((self.IN(split[0].contiguous()), self.BN(split[1].contiguous())), 1)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, ibn: bool, stride: int = 1, downsample: nn.Module = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = IBN(planes) if ibn else nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample if downsample is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.downsample(x))


class ResNetIBN(nn.Module):
    def __init__(self, layers=(3, 4, 6, 3), num_classes: int = 1000, width: int = 64):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(width, layers[0], stride=1, ibn=True)
        self.layer2 = self._make_layer(width * 2, layers[1], stride=2, ibn=True)
        self.layer3 = self._make_layer(width * 4, layers[2], stride=2, ibn=True)
        self.layer4 = self._make_layer(width * 8, layers[3], stride=2, ibn=False)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width * 8 * Bottleneck.expansion, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, (nn.BatchNorm2d, nn.InstanceNorm2d)):
                nn.init.uniform_(module.weight, 0.5, 1.5)
                nn.init.uniform_(module.bias, -0.1, 0.1)
        for module in self.modules():  # random running statistics, as a trained model has
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 2.0)

    def _make_layer(self, planes: int, blocks: int, stride: int, ibn: bool) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * Bottleneck.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * Bottleneck.expansion),
            )
        layers = [Bottleneck(self.inplanes, planes, ibn and planes != 512, stride, downsample)]
        self.inplanes = planes * Bottleneck.expansion
        layers += [Bottleneck(self.inplanes, planes, ibn and planes != 512) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return torch.softmax(self.fc(x), dim=1)


def resnet50_ibn_a(num_classes: int = 1000) -> ResNetIBN:
    return ResNetIBN((3, 4, 6, 3), num_classes)


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
