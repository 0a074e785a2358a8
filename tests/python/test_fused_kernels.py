"""kernels="fused": chains of elementwise ops and casts become torch_mp::fused_pointwise calls; the saved model needs
the torch_mp library to load, and says so when it is missing."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_mp
from small_models import ConvInexactNumbers, ConvResidual, MlpBlock, fused_calls


@pytest.fixture
def model_and_input():
    torch.manual_seed(0)
    return MlpBlock().eval(), torch.randn(8, 16, 64)


def test_fused_output_matches_portable_output(model_and_input):
    model, x = model_and_input
    portable = torch_mp.convert(model, (x,), torch.bfloat16)
    portable_report = torch_mp.report_of(portable)
    fused = torch_mp.convert(model, (x,), torch.bfloat16, kernels="fused")
    report = torch_mp.report_of(fused)
    assert fused_calls(portable) == 0 and portable_report.data["fused_pointwise"] == 0
    # per block: the scaling of the gelu's output, the residual add and the upcast for the norm are one call
    assert fused_calls(fused) == report.data["fused_pointwise"] == 2
    assert not any(n.kind() in ("aten::mul", "aten::add") for n in fused.graph.nodes())
    assert report.fused_casts > portable_report.fused_casts
    with torch.no_grad():
        reference, out_portable, out_fused = model(x), portable(x), fused(x)
    assert out_fused.dtype == torch.float32
    assert torch.equal(out_fused, out_portable)  # each fused op rounds where the aten op it replaces does
    torch.testing.assert_close(out_fused, reference, rtol=0, atol=6e-2)


def test_fp16_conv_residual_chain_is_bit_exact():
    model, x = ConvResidual(8).eval(), torch.randn(2, 8, 12, 12)
    portable = torch_mp.convert(model, (x,), torch.float16)
    fused = torch_mp.convert(model, (x,), torch.float16, kernels="fused")
    assert fused_calls(fused) == 1
    with torch.no_grad():
        assert torch.equal(portable(x), fused(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_chain_with_inexact_numbers_is_bit_exact(dtype):
    model, x = ConvInexactNumbers().eval(), torch.randn(2, 8, 12, 12) * 40
    portable = torch_mp.convert(model, (x,), dtype)
    fused = torch_mp.convert(model, (x,), dtype, kernels="fused")
    assert fused_calls(fused) >= 1
    with torch.no_grad():
        for inputs in (x, torch.randn_like(x) * 40):
            assert torch.equal(portable(inputs), fused(inputs))


def run_fresh(script: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, cwd=cwd,
                          env=env)


def test_saved_fused_model_loads_with_torch_mp_and_names_it_without(model_and_input, tmp_path):
    model, x = model_and_input
    fused = torch_mp.convert(model, (x,), torch.bfloat16, kernels="fused")
    path = tmp_path / "fused.pt"
    torch.jit.save(fused, path)
    with torch.no_grad():
        torch.save({"x": x, "expected": fused(x)}, tmp_path / "data.pt")
    loaded = run_fresh(
        f"""
        import torch, torch_mp
        model = torch.jit.load({str(path)!r})
        data = torch.load({str(tmp_path / "data.pt")!r})
        assert torch.equal(model(data["x"]), data["expected"])
        print("ok")
        """,
        tmp_path,
    )
    assert loaded.returncode == 0 and loaded.stdout.strip() == "ok", loaded.stderr
    missing = run_fresh(f"import torch; torch.jit.load({str(path)!r})", tmp_path)
    assert missing.returncode != 0
    assert "torch_mp::fused_pointwise" in missing.stderr


def test_unknown_kernels_value_is_a_value_error(model_and_input):
    model, x = model_and_input
    with pytest.raises(ValueError, match="kernels must be one of"):
        torch_mp.convert(model, (x,), torch.bfloat16, kernels="triton")
