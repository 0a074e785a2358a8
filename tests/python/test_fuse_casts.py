"""Cast fusion on a real attention block: the softmax reads the low-precision scores with dtype=float32 (no cast
node), the report counts the fused cast apart, accuracy holds, and the saved file loads in a fresh Python without
torch_mp (only stock aten ops)."""
import math

import pytest
import torch
from torch import nn

import torch_mp
from agreement import compare

from fresh_process import assert_runs_without_torch_mp


class Attention(nn.Module):
    def __init__(self, dim: int = 64):
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.scale = 1.0 / math.sqrt(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(self.q(x), self.k(x).transpose(-2, -1)) * self.scale
        probs = torch.softmax(scores, dim=-1)
        return self.out(torch.matmul(probs, self.v(x)))


def _softmax_nodes(graph):
    return [node for node in graph.nodes() if node.kind() == "aten::softmax"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_reads_low_scores_with_dtype_float(dtype):
    torch.manual_seed(0)
    model = Attention().eval()
    x = torch.randn(2, 16, 64)
    converted = torch_mp.convert(model, (x,), dtype)
    report = torch_mp.report_of(converted)
    (softmax,) = _softmax_nodes(converted.graph)
    scores, _, dtype_argument = softmax.inputs()
    assert scores.type().dtype() == dtype  # reads the low matmul's scores directly ...
    assert dtype_argument.toIValue() == 6  # ... as torch.float32 (ScalarType 6) inside the kernel
    assert scores.node().kind() != "aten::to"
    torch.testing.FileCheck().check("aten::matmul").check_not("aten::to").check("aten::softmax").run(
        str(converted.graph)
    )

    unfused = torch_mp.convert(model, (x,), dtype, fuse_casts=False)
    plain = torch_mp.report_of(unfused)
    assert report.fused_casts >= 1 and plain.fused_casts == 0
    assert len(report.casts) + report.fused_casts == len(plain.casts)
    assert report.cast_bytes + report.fused_cast_bytes == plain.cast_bytes
    assert report.cast_bytes < plain.cast_bytes
    assert "fused into their readers" in report.summary()

    with torch.no_grad():
        for inputs in [x, torch.randn(2, 16, 64), torch.randn(3, 16, 64)]:
            agreement = compare(model(inputs), converted(inputs))
            assert agreement.cosine > 0.9999, agreement
            assert agreement.max_rel_error < (2e-3 if dtype == torch.float16 else 2e-2), agreement
            # softmax(x, dtype=float32) upcasts as the cast node did: fusion changes no bit
            assert torch.equal(converted(inputs), unfused(inputs))


def test_fusion_off_keeps_the_cast_before_softmax():
    model = Attention().eval()
    converted = torch_mp.convert(model, (torch.randn(2, 16, 64),), torch.float16, fuse_casts=False)
    (softmax,) = _softmax_nodes(converted.graph)
    assert softmax.inputsAt(0).node().kind() == "aten::to"
    assert softmax.inputsAt(2).toIValue() is None


def test_fused_model_loads_without_torch_mp(tmp_path):
    torch.manual_seed(0)
    model = Attention().eval()
    x = torch.randn(2, 16, 64)
    converted = torch_mp.convert(model, (x,), torch.float16)
    path = tmp_path / "attention_fp16.pt"
    torch.jit.save(converted, path)
    check = 'assert any(n.kind() == "aten::softmax" and n.inputsAt(2).toIValue() == 6 for n in model.graph.nodes())'
    assert_runs_without_torch_mp(path, x, converted(x), tmp_path, check)


class PostNormBlock(nn.Module):
    """BERT's layer: the residual sum of two low linears is normalised, then read by another linear."""

    def __init__(self, dim: int = 64):
        super().__init__()
        self.inner = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.outer = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.inner(x) + x)
        return self.outer(h) + h


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_on_cpu_reads_and_writes_the_low_residual(dtype):
    torch.manual_seed(0)
    model = PostNormBlock().eval()
    x = torch.randn(2, 16, 64)
    converted = torch_mp.convert(model, (x,), dtype)
    report = torch_mp.report_of(converted)
    (norm,) = [node for node in converted.graph.nodes() if node.kind() == "aten::layer_norm"]
    data, _, weight, bias, _, _ = norm.inputs()
    assert data.node().kind() == "aten::add" and data.type().dtype() == dtype  # no upcast before ...
    assert norm.output().type().dtype() == dtype  # ... nor downcast after: the CPU kernel computes in fp32 inside
    assert weight.type().dtype() == torch.float32 and bias.type().dtype() == torch.float32
    assert all(use.user.kind() != "aten::to" for use in norm.output().uses())

    plain = torch_mp.report_of(torch_mp.convert(model, (x,), dtype, fuse_casts=False))
    assert len(report.casts) + report.fused_casts == len(plain.casts)
    assert report.fused_casts >= 2
    with torch.no_grad():
        for inputs in [x, torch.randn(3, 8, 64) * 10]:
            agreement = compare(model(inputs), converted(inputs))
            assert agreement.cosine > 0.9999, agreement
            assert agreement.max_rel_error < (2e-3 if dtype == torch.float16 else 2e-2), agreement


class SqueezedScale(nn.Module):
    """A low linear times an fp32 per-row scale whose rank depends on the batch: [B] after squeeze, 0-dim at B = 1."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = x.mean(dim=1, keepdim=True).squeeze()
        return self.linear(x).t() * scale


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_product_with_a_squeezed_operand_stays_fp32_at_every_batch(dtype):
    torch.manual_seed(0)
    model = SqueezedScale().eval()
    converted = torch_mp.convert(model, (torch.randn(16, 16),), dtype)
    for batch in (16, 1):
        x = torch.randn(batch, 16)
        with torch.no_grad():
            expected, actual = model(x), converted(x)
        assert actual.dtype == expected.dtype == torch.float32
        assert compare(expected, actual).cosine > 0.999
