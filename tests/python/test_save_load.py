"""Saved files: about half the size, load and run without torch_mp (fresh Python, and C++ torch::jit::load)."""
import os
import re
import subprocess

import pytest
import torch

import torch_mp
from small_models import ConvBnNet, NestedOutputNet

from fresh_process import assert_runs_without_torch_mp
from small_models import ConvResidual


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_saved_file_is_about_half_and_loads_without_torch_mp(tmp_path, dtype):
    model = ConvBnNet().eval()
    x = torch.randn(4, 3, 32, 32)
    converted = torch_mp.convert(model, (x,), dtype)
    fp32_path, mp_path = tmp_path / "fp32.pt", tmp_path / "mp.pt"
    torch.jit.save(torch.jit.freeze(torch.jit.script(model)), fp32_path)
    torch.jit.save(converted, mp_path)
    assert os.path.getsize(mp_path) < 0.6 * os.path.getsize(fp32_path)

    assert_runs_without_torch_mp(mp_path, x, converted(x), tmp_path)


def test_nested_outputs_survive_save_and_load(tmp_path):
    model = NestedOutputNet().eval()
    x, lengths = torch.randn(4, 16), torch.tensor([1, 2, 3])
    path = tmp_path / "nested.pt"
    torch.jit.save(torch_mp.convert(model, (x, lengths), torch.float16), path)
    logits, (hidden, probs), extra = torch.jit.load(path)(x, lengths)
    assert logits.dtype == hidden.dtype == probs.dtype == torch.float32
    assert extra["lengths"].dtype == torch.int64


def _parse_outputs(stdout):
    return [
        (m.group(1), m.group(2), float(m.group(3)))
        for m in re.finditer(r"output dtype=(\w+) shape=\[([^\]]*)\] sum=(\S+)", stdout)
    ]


def run_in_cpp_example(cpp_example, converted, tmp_path):
    """Saves `converted`, runs it with `torch_mp_example run` on torch.randn(2, 3, 16, 16) after seed 0, and returns
    the C++ output's (dtype, shape, sum) with the sum of Python's output on the same input."""
    path = tmp_path / "mp.pt"
    torch.jit.save(converted, path)
    result = subprocess.run([cpp_example, "run", str(path), "2", "3", "16", "16"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    torch.manual_seed(0)
    expected = converted(torch.randn(2, 3, 16, 16))
    [(dtype_name, shape, total)] = _parse_outputs(result.stdout)
    return dtype_name, shape, total, expected.double().sum().item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpp_example_loads_and_runs_a_converted_model(tmp_path, cpp_example, dtype):
    converted = torch_mp.convert(ConvBnNet().eval(), (torch.randn(2, 3, 16, 16),), dtype)
    dtype_name, shape, total, expected = run_in_cpp_example(cpp_example, converted, tmp_path)
    assert dtype_name == "Float" and shape == "2, 10"
    assert total == pytest.approx(expected, rel=1e-4, abs=1e-4)


def test_cpp_example_links_libtorch_mp_and_runs_a_fused_model(tmp_path, cpp_example):
    converted = torch_mp.convert(ConvResidual().eval(), (torch.randn(2, 3, 16, 16),), torch.bfloat16, kernels="fused")
    assert any(n.kind() == "torch_mp::fused_pointwise" for n in converted.graph.nodes())
    dtype_name, shape, total, expected = run_in_cpp_example(cpp_example, converted, tmp_path)
    assert dtype_name == "Float" and shape == "2, 3, 16, 16"
    assert total == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_cpp_example_converts_in_cpp(tmp_path, cpp_example):
    model = ConvBnNet().eval()
    scripted_path, out_path = tmp_path / "fp32.pt", tmp_path / "fp16.pt"
    torch.jit.save(torch.jit.script(model), scripted_path)
    result = subprocess.run(
        [cpp_example, "convert", str(scripted_path), str(out_path), "fp16", "2", "3", "16", "16"],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    report = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert report["dtype"] == "float16" and report["policy"] == "cpu_fp16"
    assert int(report["low-precision nodes"]) > 0
    assert int(report["weight bytes after"]) < 0.6 * int(report["weight bytes before"])
    loaded = torch.jit.load(out_path)
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=5e-3)
    python_converted = torch_mp.convert(model, (x,), torch.float16)
    torch.testing.assert_close(loaded(x), python_converted(x), rtol=0, atol=0)


def test_cpp_example_reports_a_missing_file(tmp_path, cpp_example):
    result = subprocess.run([cpp_example, "run", str(tmp_path / "missing.pt"), "1"], capture_output=True, text=True)
    assert result.returncode == 1
    assert "torch_mp_example:" in result.stderr
