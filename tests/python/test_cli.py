"""python -m torch_mp: convert and report on saved files; bad files and arguments give an error, never a crash."""
import os
import subprocess
import sys

import pytest
import torch

from torch_mp.models import ConvBnNet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args):
    return subprocess.run([sys.executable, "-m", "torch_mp", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT)


@pytest.fixture
def scripted(tmp_path):
    model = ConvBnNet().eval()
    path = tmp_path / "fp32.pt"
    torch.jit.save(torch.jit.script(model), path)
    return model, path


def test_convert_then_report(tmp_path, scripted):
    model, path = scripted
    out, report = tmp_path / "fp16.pt", tmp_path / "report.json"
    result = cli("convert", path, "-o", out, "--dtype", "fp16", "--input-shape", "2,3,16,16", "--report", report)
    assert result.returncode == 0, result.stderr
    assert "saved" in result.stdout and report.exists()
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(torch.jit.load(out)(x), model(x), rtol=0, atol=5e-3)
    summary = cli("report", out)
    assert summary.returncode == 0 and "torch_mp conversion to Half" in summary.stdout


def test_convert_with_inputs_file(tmp_path, scripted):
    _, path = scripted
    inputs = tmp_path / "inputs.pt"
    torch.save((torch.randn(2, 3, 16, 16),), inputs)
    result = cli("convert", path, "-o", tmp_path / "bf16.pt", "--dtype", "bf16", "--inputs", inputs)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_corrupt_files_are_errors(tmp_path, scripted, damage):
    _, path = scripted
    data = path.read_bytes()
    bad = tmp_path / "bad.pt"
    bad.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"not a model" * 100, "empty": b""}[damage])
    for args in (("convert", bad, "-o", tmp_path / "out.pt", "--input-shape", "1,3,16,16"), ("report", bad)):
        result = cli(*args)
        assert result.returncode == 2
        assert "is not a loadable TorchScript file" in result.stderr
        assert "Traceback" not in result.stderr


def test_missing_file_and_bad_arguments(tmp_path, scripted):
    _, path = scripted
    missing = cli("report", tmp_path / "missing.pt")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    no_inputs = cli("convert", path, "-o", tmp_path / "out.pt")
    assert no_inputs.returncode == 2 and "give the example inputs" in no_inputs.stderr
    bad_shape = cli("convert", path, "-o", tmp_path / "out.pt", "--input-shape", "1,x")
    assert bad_shape.returncode == 2 and "comma-separated integers" in bad_shape.stderr
    wrong_shape = cli("convert", path, "-o", tmp_path / "out.pt", "--input-shape", "1,5,16,16")
    assert wrong_shape.returncode == 2 and "running the model on the example inputs failed" in wrong_shape.stderr
    bad_dtype = cli("convert", path, "-o", tmp_path / "out.pt", "--dtype", "fp8", "--input-shape", "1,3,16,16")
    assert bad_dtype.returncode == 2 and "invalid choice" in bad_dtype.stderr
