"""python -m torch_mp: convert and report on saved files; bad files and arguments give an error, never a crash."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from small_models import ConvResidual
from torch_mp import __main__
from small_models import ConvBnNet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# one line of the per-cast list: "  x.1: Float -> BFloat16  589824 bytes"
CAST_LINE = re.compile(r"^  \S+: \w+ -> \w+  \d+ bytes$", re.MULTILINE)


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
    assert summary.returncode == 0 and "torch_mp conversion to float16" in summary.stdout
    casts = len(json.loads(report.read_text())["casts"])
    assert casts > 0 and not CAST_LINE.search(summary.stdout)
    listed = cli("report", out, "--casts")
    assert listed.returncode == 0 and len(CAST_LINE.findall(listed.stdout)) == casts


def test_demo_prints_the_summary_and_the_table_by_op(capsys):
    # 33 lines today (summary, 22 table rows, the closing lines); 45 leaves room for a few more op kinds while the
    # per-cast list (66 lines for this ResNet-50, most of them 0 bytes) could not fit
    assert __main__.main(["demo", "--size", "64", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("torch_mp conversion to bfloat16")
    assert re.search(r"^op +count  precision  rule$", out, re.MULTILINE)
    assert re.search(r"^aten::conv2d +\d+  low ", out, re.MULTILINE)
    assert "top-1 agreement" in out
    assert len(out.splitlines()) < 45 and not CAST_LINE.search(out)
    casts = int(re.search(r"^  casts: (\d+) moving", out, re.MULTILINE).group(1))
    assert __main__.main(["demo", "--size", "64", "--batch", "1", "--casts"]) == 0
    listed = capsys.readouterr().out
    assert len(CAST_LINE.findall(listed)) == casts > 0


def test_convert_with_fused_kernels_then_report(tmp_path):
    model, path, out = ConvResidual().eval(), tmp_path / "fp32.pt", tmp_path / "fused.pt"
    torch.jit.save(torch.jit.script(model), path)
    result = cli("convert", path, "-o", out, "--dtype", "bf16", "--input-shape", "2,3,16,16", "--kernels", "fused")
    assert result.returncode == 0, result.stderr
    assert re.search(r"\d+ fused pointwise kernels", result.stdout), result.stdout
    x = torch.randn(2, 3, 16, 16)
    fused = torch.jit.load(out)  # this process imported torch_mp, which registers the op
    assert any(n.kind() == "torch_mp::fused_pointwise" for n in fused.graph.nodes())
    torch.testing.assert_close(fused(x), model(x), rtol=0, atol=5e-2)
    summary = cli("report", out)
    assert summary.returncode == 0 and "fused pointwise kernels" in summary.stdout


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
    assert wrong_shape.returncode == 1 and wrong_shape.stderr.count("error:") == 1  # the model failed, not the CLI
    bad_dtype = cli("convert", path, "-o", tmp_path / "out.pt", "--dtype", "fp8", "--input-shape", "1,3,16,16")
    assert bad_dtype.returncode == 2 and "invalid choice" in bad_dtype.stderr


# --- conversion options: --exclude, --calib, --tolerance, --low-precision-io, --svg -----------------------------


@pytest.fixture
def cancellation(tmp_path):
    """CancellationNet: fp16 rounds its signal away unless `offset` runs in fp32; it has a `head` module."""
    from small_models import CancellationNet

    model = CancellationNet().eval()
    path = tmp_path / "cancel.pt"
    torch.jit.save(torch.jit.trace(model, torch.randn(16, 64)), path)  # its __init__ does not script
    calib = tmp_path / "calib.pt"
    torch.save([(torch.randn(16, 64),) for _ in range(2)] + [torch.randn(16, 64)], calib)
    return model, path, calib


def stored_report(path):
    import json

    extra = {"torch_mp_report.json": ""}
    torch.jit.load(path, _extra_files=extra)
    return json.loads(extra["torch_mp_report.json"])


def test_exclude_keeps_the_modules_in_fp32(tmp_path, cancellation):
    _, path, _ = cancellation
    out = tmp_path / "out.pt"
    result = cli("convert", path, "-o", out, "--input-shape", "16,64", "--exclude", "head", "--exclude", "body.1?")
    assert result.returncode == 0, result.stderr
    nodes = stored_report(out)["nodes"]
    head = [n for n in nodes if n["scope"] == "head" or n["scope"] in ("body.10", "body.14")]
    assert len(head) == 3 and all(n["precision"] == "fp32" and n["rule_kind"] == "exclusion" for n in head)
    assert any(n["precision"] == "low" for n in nodes if n["scope"] == "body.0")


@pytest.mark.parametrize("glob, message", [
    ("", "a module-path glob must not be empty"),
    ("haed", "--exclude 'haed' matches no module of the model"),
])
def test_bad_exclude_is_an_error(tmp_path, cancellation, glob, message):
    _, path, _ = cancellation
    result = cli("convert", path, "-o", tmp_path / "out.pt", "--input-shape", "16,64", "--exclude", glob)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert [line for line in result.stderr.splitlines() if "error:" in line] == [result.stderr.strip().splitlines()[-1]]
    assert "Traceback" not in result.stderr and not (tmp_path / "out.pt").exists()


def test_device_and_dtype_choose_the_policy(tmp_path, scripted):
    _, path = scripted
    cpu, cuda = tmp_path / "cpu.pt", tmp_path / "cuda.pt"
    # no --dtype: the device's choice (this suite plans for a CPU with fast kernels in both: bf16, as autocast)
    assert cli("convert", path, "-o", cpu, "--input-shape", "2,3,16,16").returncode == 0
    assert (stored_report(cpu)["dtype"], stored_report(cpu)["policy"]) == ("bfloat16", "cpu_bf16")
    # planned for CUDA's kernels, on this machine's CPU where it has no GPU
    result = cli("convert", path, "-o", cuda, "--device", "cuda", "--input-shape", "2,3,16,16")
    assert result.returncode == 0, result.stderr
    assert (stored_report(cuda)["dtype"], stored_report(cuda)["policy"]) == ("float16", "cuda_fp16")


def test_an_exclude_typo_is_found_before_converting(tmp_path, cancellation):
    _, path, _ = cancellation
    # these inputs do not run the model: the glob is refused first, before the model runs (exit 2, not 1)
    result = cli("convert", path, "-o", tmp_path / "out.pt", "--input-shape", "16,65", "--exclude", "haed")
    assert result.returncode == 2 and "--exclude 'haed'" in result.stderr


def test_calib_feeds_the_range_guard(tmp_path, cancellation):
    _, path, _ = cancellation
    calib = tmp_path / "calib.pt"
    torch.save([torch.randn(16, 64) * 1e5], calib)  # values beyond half of fp16's max: the guard keeps fp32
    plain, guarded = tmp_path / "plain.pt", tmp_path / "guarded.pt"
    assert cli("convert", path, "-o", plain, "--dtype", "fp16", "--input-shape", "16,64").returncode == 0
    result = cli("convert", path, "-o", guarded, "--dtype", "fp16", "--input-shape", "16,64", "--calib", calib)
    assert result.returncode == 0, result.stderr
    kinds = [n["rule_kind"] for n in stored_report(guarded)["nodes"]]
    assert "range guard" in kinds and "range guard" not in [n["rule_kind"] for n in stored_report(plain)["nodes"]]


@pytest.mark.parametrize("content, message", [
    ("missing", "--calib file"),
    (b"garbage" * 50, "is not readable by torch.load"),
    ({"x": 1}, "must hold a non-empty list of inputs"),
    ((torch.randn(16, 64),), "must hold a non-empty list of inputs"),
    ([], "must hold a non-empty list of inputs"),
    ([torch.randn(16, 64), 3], "item 1 is of type int"),
])
def test_bad_calib_file_is_an_error(tmp_path, cancellation, content, message):
    _, path, _ = cancellation
    calib = tmp_path / "bad_calib.pt"
    if isinstance(content, bytes):
        calib.write_bytes(content)
    elif content != "missing":
        torch.save(content, calib)
    result = cli("convert", path, "-o", tmp_path / "out.pt", "--input-shape", "16,64", "--calib", calib)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stderr.count("error:") == 1 and "Traceback" not in result.stderr


def test_tolerance_runs_the_fallback(tmp_path, cancellation):
    model, path, calib = cancellation
    out = tmp_path / "out.pt"
    result = cli("convert", path, "-o", out, "--input-shape", "16,64", "--calib", calib, "--tolerance", "5e-3")
    assert result.returncode == 0, result.stderr
    assert "accuracy fallback (tolerance 0.005)" in result.stdout and "kept in fp32" in result.stdout
    fallback = stored_report(out)["fallback"]
    assert fallback["error_after"] <= 5e-3 < fallback["error_before"]
    x = torch.randn(16, 64)
    y = torch.jit.load(out)(x)
    assert ((y - model(x)).norm() / model(x).norm()).item() < 1e-2


@pytest.mark.parametrize("value", ["-1", "abc", "nan"])
def test_bad_tolerance_is_an_error(tmp_path, cancellation, value):
    _, path, _ = cancellation
    result = cli("convert", path, "-o", tmp_path / "out.pt", "--input-shape", "16,64", f"--tolerance={value}")
    assert result.returncode == 2 and "tolerance must be" in result.stderr, result.stderr


def test_low_precision_io(tmp_path, cancellation):
    _, path, _ = cancellation
    kept, low = tmp_path / "kept.pt", tmp_path / "low.pt"
    assert cli("convert", path, "-o", kept, "--dtype", "fp16", "--input-shape", "16,64").returncode == 0
    result = cli("convert", path, "-o", low, "--dtype", "fp16", "--input-shape", "16,64", "--low-precision-io")
    assert result.returncode == 0, result.stderr
    x = torch.randn(16, 64)
    assert torch.jit.load(kept)(x).dtype == torch.float32
    assert torch.jit.load(low)(x.half()).dtype == torch.float16
    bad = cli("convert", path, "-o", low, "--input-shape", "16,64", "--low-precision-io=yes")
    assert bad.returncode == 2 and "ignored explicit argument" in bad.stderr


def test_svg_from_convert_and_from_report(tmp_path, cancellation):
    if shutil.which("dot") is None:
        pytest.fail("Graphviz's `dot` is not installed: apt-get install graphviz (CI installs it)")
    _, path, _ = cancellation
    out, first, second = tmp_path / "out.pt", tmp_path / "convert.svg", tmp_path / "report.svg"
    result = cli("convert", path, "-o", out, "--input-shape", "16,64", "--exclude", "head", "--svg", first)
    assert result.returncode == 0, result.stderr
    assert f"wrote {first}" in result.stdout
    summary = cli("report", out, "--svg", second)
    assert summary.returncode == 0, summary.stderr
    for svg in (first, second):
        text = svg.read_text()
        assert text.startswith("<?xml") or text.startswith("<svg")
        assert "fp32: excluded" in text  # the legend
    # the loaded file's graph has other value names: the report's nodes are still found, same colours
    assert sorted(re.findall(r'fill="(#[0-9a-f]{6})"', first.read_text())) == sorted(
        re.findall(r'fill="(#[0-9a-f]{6})"', second.read_text()))


def test_svg_errors(tmp_path, scripted):
    _, path = scripted
    plain = cli("report", path, "--svg", tmp_path / "x.svg")  # a model not saved by `convert`: no report inside
    assert plain.returncode == 2 and "holds no report" in plain.stderr and "Traceback" not in plain.stderr
    out = tmp_path / "out.pt"
    no_dot = subprocess.run([sys.executable, "-m", "torch_mp", "convert", str(path), "-o", str(out),
                             "--input-shape", "1,3,16,16", "--svg", str(tmp_path / "x.svg")],
                            capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PATH": str(tmp_path)})
    assert no_dot.returncode == 2 and "apt-get install graphviz" in no_dot.stderr
    assert not out.exists()  # checked before converting


@pytest.fixture
def saved_program(tmp_path):
    model = ConvBnNet().eval()
    x = torch.randn(2, 3, 16, 16)
    path = tmp_path / "fp32.pt2"
    torch.export.save(torch.export.export(model, (x,)), path)
    return model, x, path


def test_export_converts_a_saved_program(tmp_path, saved_program):
    model, x, path = saved_program
    out, report = tmp_path / "bf16.pt2", tmp_path / "report.json"
    result = cli("export", path, "-o", out, "--dtype", "bf16", "--report", report)  # the program's example inputs
    assert result.returncode == 0, result.stderr
    program = torch.export.load(out)
    assert {t.dtype for t in program.state_dict.values() if t.is_floating_point()} == {torch.bfloat16}
    data = json.loads(report.read_text())
    assert data["dtype"] == "bfloat16" and data["low_precision_flop_fraction"] == 1.0
    torch.testing.assert_close(program.module()(x), model(x), rtol=5e-2, atol=5e-2)
    # an exclusion that matches no module is refused before anything is written
    result = cli("export", path, "-o", tmp_path / "typo.pt2", "--exclude", "no_such_module")
    assert result.returncode == 2 and "matches no module" in result.stderr
    assert not (tmp_path / "typo.pt2").exists()


def test_export_and_aoti_refuse_bad_files(tmp_path, saved_program):
    _, _, path = saved_program
    (tmp_path / "junk.pt2").write_bytes(b"not a program")
    result = cli("export", tmp_path / "junk.pt2", "-o", tmp_path / "out.pt2")
    assert result.returncode == 2 and "not a program saved by torch.export.save" in result.stderr
    result = cli("aoti", path, "-o", tmp_path / "model.so")
    assert result.returncode == 2 and "ends in .pt2" in result.stderr


def run_main(capsys, *args):
    """python -m torch_mp in this process (no torch import per call): (exit status, stdout, stderr)."""
    status = __main__.main([str(a) for a in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_output_paths_are_checked_before_any_work(tmp_path, scripted, saved_program, capsys, monkeypatch):
    _, path = scripted
    _, _, program = saved_program
    missing = tmp_path / "no_such_folder"
    monkeypatch.setattr(__main__, "load_torchscript", None)  # no file is read: the paths are checked first
    monkeypatch.setattr(__main__, "load_program", None)
    for args in (("convert", path, "-o", missing / "out.pt", "--input-shape", "1,3,16,16"),
                 ("convert", path, "-o", tmp_path / "out.pt", "--input-shape", "1,3,16,16", "--report",
                  missing / "report.json"),
                 ("export", program, "-o", missing / "out.pt2"),
                 ("aoti", program, "-o", missing / "package.pt2"),  # not after the compile (tens of seconds)
                 ("report", path, "--svg", missing / "graph.svg")):
        status, out, err = run_main(capsys, *args)
        assert status == 2, (args, err)
        assert err.count("error:") == 1 and f"the folder {missing} does not exist" in err and not out
    status, _, err = run_main(capsys, "convert", path, "-o", tmp_path, "--input-shape", "1,3,16,16")
    assert status == 2 and "is a folder" in err
    # as a command: one line on stderr, no traceback
    result = cli("aoti", program, "-o", missing / "package.pt2")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_export_of_a_torchscript_file_says_to_convert_it(tmp_path, scripted, capsys):
    _, path = scripted
    line = (f"{path} is a TorchScript file (saved by torch.jit.save), not a program saved by torch.export.save: "
            "convert it with `python -m torch_mp convert`")
    result = cli("export", path, "-o", tmp_path / "out.pt2")  # as a command: torch logs nothing before the line
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"python -m torch_mp export: error: {line}"]
    status, _, err = run_main(capsys, "aoti", path, "-o", tmp_path / "out.pt2")
    assert status == 2 and err.strip() == f"python -m torch_mp aoti: error: {line}"
    junk = tmp_path / "state.pt2"  # a zip, but neither TorchScript nor a program: one line too, not torch's log
    torch.save({"w": torch.ones(2)}, junk)
    result = cli("export", junk, "-o", tmp_path / "out.pt2")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "not a program saved by torch.export.save" in result.stderr and "warnings above" not in result.stderr


def test_input_dtype_has_help_and_report_names_missing_weights(scripted, capsys):
    _, path = scripted
    with pytest.raises(SystemExit):
        __main__.main(["convert", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    assert "--input-dtype {float32,float64,int64,int32} dtype of every --input-shape input" in helped
    status, out, _ = run_main(capsys, "report", path)  # scripted, not frozen: its weights are attributes
    assert status == 0 and "weight bytes by dtype: none (the file holds no constant weights: not frozen?" in out


def test_inputs_the_model_cannot_run_exit_1_and_a_wrong_number_of_inputs_exits_2(tmp_path, scripted,
                                                                                   saved_program, capsys):
    _, path = scripted
    _, x, program = saved_program
    two = tmp_path / "two.pt"
    torch.save((x, x), two)
    for command, model, out in (("convert", path, "out.pt"), ("export", program, "out.pt2")):
        status, _, err = run_main(capsys, command, model, "-o", tmp_path / out, "--input-shape", "2,5,16,16")
        assert status == 1 and err.count("error:") == 1 and "on the example inputs failed" in err, err
        status, _, err = run_main(capsys, command, model, "-o", tmp_path / out, "--inputs", two)
        assert status == 2 and "takes 1 inputs but example_inputs has 2" in err, err


def test_the_command_line_calls_only_public_api():
    # the CLI is a user of torch_mp like any other: every torch_mp name it imports or reads is public
    import ast

    tree = ast.parse(open(__main__.__file__).read())
    private = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch_mp"):
            private += [f"{node.module}.{alias.name}" for alias in node.names
                        if alias.name.startswith("_") or any(part.startswith("_") for part in node.module.split("."))]
        elif isinstance(node, ast.Import):
            private += [alias.name for alias in node.names
                        if alias.name.startswith("torch_mp") and any(p.startswith("_") for p in alias.name.split("."))]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch_mp" \
                and node.attr.startswith("_"):
            private.append(f"torch_mp.{node.attr}")
    assert private == []
