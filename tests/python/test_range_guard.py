"""The observed range guard: for fp16, a node reading or writing a tensor observed (on the example inputs) above
half of fp16's max, or entirely below its smallest normal, keeps fp32; bf16, with fp32's range, needs no guard."""
import pytest
import torch
from torch import nn

import torch_mp
from torch_mp.models import ConvBnNet


class Scaled(nn.Module):
    """Linear layers around a tensor scaled by `scale`: the middle layer sees values of that magnitude."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.inner = nn.Linear(32, 32)
        self.outer = nn.Linear(32, 8)

    def forward(self, x):
        return self.outer(self.inner(x * self.scale) / self.scale)


class MaskedScores(nn.Module):
    """Attention-like scores with masked entries filled with `fill`, then a softmax."""

    def __init__(self, fill: float):
        super().__init__()
        self.fill = fill
        self.q = nn.Linear(16, 16)

    def forward(self, x, mask):
        scores = self.q(x) @ x.transpose(-1, -2)
        return scores.masked_fill(mask, self.fill).softmax(-1)


def guarded_ops(report):
    return sorted(n["op"] for n in report.nodes if n["rule"].startswith("range guard"))


@pytest.mark.parametrize("scale", [1e6, 1e-7], ids=["overflow", "underflow"])
def test_out_of_range_activations_keep_fp32_and_the_model_stays_accurate(scale):
    model = Scaled(scale).eval()
    x = torch.randn(16, 32)
    with torch.no_grad():
        reference = model(x)
        naive = model.half()(x.half()).float()
        model.float()
    # without the guard fp16 is useless here: inf (overflow) or values flushed towards 0 (underflow)
    naive_error = ((naive - reference).abs().max() / reference.abs().max()).item()
    assert not (naive_error < 0.05)

    converted, report = torch_mp.convert(model, (x,), torch.float16, return_report=True)
    assert "aten::linear" in guarded_ops(report)
    inner = [n for n in report.nodes if n["op"] == "aten::linear" and "range guard" in n["rule"]]
    assert all(n["precision"] == "fp32" for n in inner)
    assert "float16" in inner[0]["rule"]
    fresh = torch.randn(16, 32)
    out = converted(fresh)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, model(fresh), rtol=1e-2, atol=1e-2 * model(fresh).abs().max().item())


def test_guard_is_quiet_for_bf16_and_for_models_in_range():
    _, bf16 = torch_mp.convert(Scaled(1e6).eval(), (torch.randn(16, 32),), torch.bfloat16, return_report=True)
    assert guarded_ops(bf16) == []
    _, fp16 = torch_mp.convert(ConvBnNet().eval(), (torch.randn(4, 3, 32, 32),), torch.float16, return_report=True)
    assert guarded_ops(fp16) == []
    assert all(n["precision"] == "low" for n in fp16.nodes if n["op"] == "aten::conv2d")


def test_float32_min_masks_keep_fp32_in_bf16_too():
    """bf16's max (3.39e38) is below fp32's: transformers' masks of torch.finfo(torch.float32).min do not fit it
    (CUDA's masked_fill refuses the scalar: "cannot be converted to type c10::BFloat16 without overflow")."""

    model = MaskedScores(torch.finfo(torch.float32).min).eval()
    x, mask = torch.randn(2, 5, 16), torch.rand(2, 5, 5) > 0.5
    mask[..., 0] = False
    converted, report = torch_mp.convert(model, (x, mask), torch.bfloat16, return_report=True)
    fill = [n for n in report.nodes if n["op"] == "aten::masked_fill"]
    assert fill[0]["precision"] == "fp32" and fill[0]["rule"].startswith("range guard")
    assert [n["precision"] for n in report.nodes if n["op"] == "aten::linear"] == ["low"]
    out = converted(x, mask)
    assert (out[mask] == 0).all()
    torch.testing.assert_close(out, model(x, mask), rtol=0, atol=2e-2)
