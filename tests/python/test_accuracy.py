"""Accuracy against fp32 on CPU for fp16 and bf16, per model, with the tolerances stated here.

Metrics (tests/python/agreement.py): cosine similarity of the flattened outputs, max relative error
max|y - y_fp32| / max|y_fp32|, top-1 agreement of argmax rows. bf16 keeps 8 mantissa bits against fp16's 11,
so its tolerances are wider.
"""
from typing import Callable, NamedTuple, Tuple

import pytest
import torch
from torch import nn

import torch_mp
from agreement import compare, flatten_tensors
from torch_mp.models import ResNetIBN, resnet50_ibn_a
from small_models import ControlFlowNet, ConvBnNet, LSTMTagger


class Case(NamedTuple):
    build: Callable[[], nn.Module]
    inputs: Callable[[], Tuple[torch.Tensor, ...]]
    cosine: dict  # dtype -> minimum cosine
    max_rel: dict  # dtype -> maximum max-relative-error
    top1: float  # minimum top-1 agreement (first output)


F16, BF16 = torch.float16, torch.bfloat16


def transformer():
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


CASES = {
    "convbn": Case(ConvBnNet, lambda: (torch.randn(16, 3, 32, 32),), {F16: 0.9999, BF16: 0.999},
                   {F16: 5e-3, BF16: 4e-2}, 0.9),
    "resnet50_ibn_a": Case(resnet50_ibn_a, lambda: (torch.randn(4, 3, 64, 64),), {F16: 0.9995, BF16: 0.999},
                           {F16: 2e-2, BF16: 8e-2}, 0.75),
    "transformer_encoder": Case(transformer, lambda: (torch.randn(4, 16, 64),), {F16: 0.9999, BF16: 0.999},
                                {F16: 5e-3, BF16: 4e-2}, 0.9),
    "lstm_tagger": Case(LSTMTagger, lambda: (torch.randint(0, 1000, (4, 20)),), {F16: 0.9999, BF16: 0.999},
                        {F16: 5e-3, BF16: 4e-2}, 0.95),
    "control_flow": Case(ControlFlowNet, lambda: (torch.randn(64, 32),), {F16: 0.9999, BF16: 0.999},
                         {F16: 5e-3, BF16: 4e-2}, 0.95),
}


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", list(CASES))
def test_accuracy_against_fp32(name, dtype):
    case = CASES[name]
    model = case.build().eval()
    inputs = case.inputs()
    converted = torch_mp.convert(model, inputs, dtype)
    report = torch_mp.report_of(converted)
    fresh = tuple(torch.randn_like(x) if x.is_floating_point() else x for x in inputs)
    with torch.no_grad():
        reference = flatten_tensors(model(*fresh))
        result = flatten_tensors(converted(*fresh))
    assert [t.dtype for t in result] == [t.dtype for t in reference]
    for ref, out in zip(reference, result):
        if not ref.is_floating_point():
            continue
        agreement = compare(ref, out)
        assert agreement.finite
        assert agreement.cosine >= case.cosine[dtype], agreement
        assert agreement.max_rel_error <= case.max_rel[dtype], agreement
    first = compare(reference[0], result[0])
    assert first.top1 >= case.top1, first
    assert report.weight_ratio <= 0.501  # every weight stored low but a norm's scale and shift (0.5002 for IBN-a)
    assert report.low_precision_flop_fraction == 1.0  # every heavy op runs low


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
def test_control_flow_integer_output_agrees(dtype):
    model = ControlFlowNet().eval()
    x = torch.randn(256, 32)
    converted = torch_mp.convert(model, (x,), dtype)
    scores, labels = converted(x)
    ref_scores, ref_labels = model(x)
    assert labels.dtype == torch.int64
    assert (labels == ref_labels).float().mean() >= 0.97


def test_resnet_ibn_structure():
    """The IBN model really mixes instance and batch norm, which stay fp32 while the convolutions go low."""
    model = ResNetIBN(layers=(1, 1, 1, 1), num_classes=10, width=16).eval()
    report = torch_mp.report_of(torch_mp.convert(model, (torch.randn(2, 3, 32, 32),), F16))
    fp32 = report.fp32_ops()
    assert fp32["aten::instance_norm"] >= 3 and fp32["aten::batch_norm"] >= 3 and fp32["aten::softmax"] == 1
    assert report.low_precision_ops()["aten::conv2d"] == 17  # 4 blocks x 3, 4 downsamples, the stem
