"""Runs Python in a fresh process: to load a saved converted model without torch_mp and check its output, or to see
what a process prints (warnings shown once per process need one)."""
import os
import subprocess
import sys
import textwrap

import torch


def assert_runs_without_torch_mp(model_path, x, expected, tmp_path, check: str = "") -> None:
    """Runs torch.jit.load(model_path)(x) in a new interpreter; the output must equal `expected` exactly and keep its
    dtype. `check` is one more Python statement run there with `model` loaded."""
    data_path = tmp_path / "fresh_process_data.pt"
    torch.save({"x": x, "expected": expected}, data_path)
    script = textwrap.dedent(
        f"""
        import sys, torch
        model = torch.jit.load({str(model_path)!r})
        {check}
        data = torch.load({str(data_path)!r})
        out = model(data["x"])
        assert out.dtype == data["expected"].dtype, out.dtype
        assert torch.equal(out, data["expected"]), (out - data["expected"]).abs().max()
        assert "torch_mp" not in sys.modules
        print("ok")
        """
    )
    result = run_python("-c", script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def run_python(*args, cwd) -> subprocess.CompletedProcess:
    """`python ARGS` in a new interpreter in `cwd`, without this process's PYTHONPATH and PYTHONWARNINGS."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONWARNINGS")}
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env)
