"""CUDA: the cuda_fp16 / cuda_bf16 policies on a GPU, outputs and weights on the device, save/load there."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import torch_mp
from agreement import compare
from torch_mp.models import ResNetIBN
from small_models import ConvBnNet
from small_models import ScoresThenNorm

pytestmark = pytest.mark.cuda

TOLERANCE = {torch.float16: (0.9999, 5e-3), torch.bfloat16: (0.999, 4e-2)}  # (min cosine, max relative error)


def transformer():
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=8, dim_feedforward=256, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


MODELS = {
    "convbn": (ConvBnNet, lambda: torch.randn(16, 3, 32, 32)),
    "resnet_ibn": (lambda: ResNetIBN(layers=(1, 1, 1, 1), num_classes=100, width=32), lambda: torch.randn(8, 3, 64, 64)),
    "transformer": (transformer, lambda: torch.randn(8, 32, 128)),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_cuda_conversion_accuracy(name, dtype):
    build, make_input = MODELS[name]
    model = build().eval().cuda()
    x = make_input().cuda()
    converted = torch_mp.convert(model, (x,), dtype)
    report = torch_mp.report_of(converted)
    assert report.data["policy"] == ("cuda_fp16" if dtype == torch.float16 else "cuda_bf16")
    fresh = torch.randn_like(x)
    with torch.no_grad():
        reference, result = model(fresh), converted(fresh)
    assert result.device.type == "cuda" and result.dtype == torch.float32
    agreement = compare(reference, result)
    min_cosine, max_rel = TOLERANCE[dtype]
    assert agreement.finite and agreement.cosine >= min_cosine and agreement.max_rel_error <= max_rel, agreement
    weights = [
        n.output().toIValue() for n in converted.graph.findAllNodes("prim::Constant")
        if isinstance(n.output().toIValue(), torch.Tensor)
    ]
    assert all(w.device.type == "cuda" for w in weights)
    assert report.weight_ratio < 0.6


def test_cuda_model_saves_and_loads_in_a_fresh_process(tmp_path):
    """Channels_last weights and cuDNN fused convolutions are stock aten: plain torch loads and runs them."""
    model = ResNetIBN(layers=(1, 1, 1, 1), num_classes=100, width=32).eval().cuda()
    x = torch.randn(4, 3, 64, 64, device="cuda")
    converted = torch_mp.convert(model, (x,), torch.float16)
    assert "aten::cudnn_convolution_add_relu" in [n.kind() for n in converted.graph.nodes()]
    path, data = tmp_path / "mp.pt", tmp_path / "data.pt"
    torch.jit.save(converted, path)
    torch.save({"x": x.cpu(), "expected": converted(x).cpu()}, data)
    script = textwrap.dedent(
        f"""
        import sys, torch
        model = torch.jit.load({str(path)!r})
        d = torch.load({str(data)!r})
        out = model(d["x"].cuda())
        assert out.is_cuda and out.dtype == torch.float32
        torch.testing.assert_close(out.cpu(), d["expected"], rtol=0, atol=1e-6)
        assert "torch_mp" not in sys.modules
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr


def test_cuda_low_fp32_output_matmul_is_one_bmm_dtype_kernel():
    model, x = ScoresThenNorm().eval().cuda(), torch.randn(4, 8, 32, device="cuda")
    policy = torch_mp.OpPolicy.default("cuda_fp16").set("aten::matmul", "low_fp32_output")
    converted = torch_mp.convert(model, (x,), torch.float16, policy=policy)
    report = torch_mp.report_of(converted)
    (product,) = [n for n in converted.graph.nodes() if n.kind() in ("aten::matmul", "aten::bmm")]
    assert product.kind() == "aten::bmm" and len(list(product.inputs())) == 3  # bmm.dtype(a, b, out_dtype)
    assert product.output().type().dtype() == torch.float32
    assert [use.user.kind() for use in product.output().uses()] == ["aten::relu"]  # in fp32, then the norm
    assert report.data["fused_casts"] >= 1
    with torch.no_grad():
        torch.testing.assert_close(converted(x), model(x), rtol=0, atol=2e-2)
