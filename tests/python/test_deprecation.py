"""torch 2.14 deprecates TorchScript with a FutureWarning on each torch.jit call. The calls torch_mp makes for the user
warn no more; torch_mp warns once per process instead, and only where torch warns. The user's own calls still warn.

Each test runs a fresh process (a warning shown once per process needs one; pyproject.toml's pytest filters, which
ignore torch's messages, do not reach it), mostly with `-W always`: any warning that gets through shows."""
import json
import os
import textwrap
import warnings

import pytest
import torch

from fresh_process import run_python
from small_models import ConvBnNet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_JIT_WARNING = "` is deprecated. Please "  # torch's message for every torch.jit API: "`torch.jit.save` is ..."
OURS = "TorchScriptDeprecationWarning"


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


with warnings.catch_warnings(record=True) as _caught:
    warnings.simplefilter("always")
    torch.jit.script(_identity)
TORCH_WARNS = any(issubclass(w.category, FutureWarning) for w in _caught)  # torch 2.14: FutureWarning, 2.13: not
needs_torch_2_14 = pytest.mark.skipif(not TORCH_WARNS, reason=f"torch {torch.__version__} does not warn FutureWarning "
                                      "on torch.jit calls (torch 2.14 is the first that does)")
before_torch_2_14 = pytest.mark.skipif(TORCH_WARNS, reason=f"torch {torch.__version__} warns on torch.jit calls")

# Records every warning shown (category, message, file, thread) and prints them as JSON, one list per phase.
SCENARIO = textwrap.dedent(
    """
    import io, json, threading, warnings
    from concurrent.futures import ThreadPoolExecutor
    import torch, torch_mp
    import sys
    sys.path.insert(0, 'tests/python')  # the tests' models (cwd: the repository)
    from small_models import ConvBnNet

    shown = []
    warnings.showwarning = lambda message, category, filename, *_: shown.append(
        [category.__name__, str(message), filename, threading.current_thread().name])

    class Unscriptable(torch.nn.Module):  # a generator expression: torch_mp traces it
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return sum(t for t in (self.conv(x), self.conv(x)))

    x = torch.randn(2, 3, 16, 16)
    net = ConvBnNet().eval()
    with torch.no_grad():
        mine = [torch.jit.script(net), torch.jit.trace(net, (x,))]
    phases = {"user_before": shown[:]}
    shown.clear()
    captures = [torch_mp.report_of(torch_mp.convert(model, (x,), torch.float16)).capture
                for model in [net, Unscriptable().eval(), *mine]]
    phases["convert"] = shown[:]
    shown.clear()
    with ThreadPoolExecutor(max_workers=8) as pool:
        jobs = [pool.submit(torch_mp.convert, ConvBnNet().eval(), (x,), torch.bfloat16) for _ in range(8)]
        saves = 0
        while saves == 0 or not all(job.done() for job in jobs):  # the user's own calls, during the conversions
            torch.jit.save(mine[0], io.BytesIO())
            saves += 1
        [job.result() for job in jobs]
    phases["threads"] = shown[:]
    shown.clear()
    torch.jit.script(net)
    phases["user_after"] = shown[:]
    print(json.dumps({"phases": phases, "saves": saves, "captures": captures}))
    """
)


@pytest.fixture(scope="module")
def scenario():
    result = run_python("-W", "always", "-c", SCENARIO, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def torch_jit_warnings(shown, thread=None):
    """[(category, API)] of torch's torch.jit deprecation warnings in `shown` (from `thread` only, if given)."""
    return [(w[0], w[1].split("`")[1]) for w in shown if TORCH_JIT_WARNING in w[1] and thread in (None, w[3])]


USERS_CATEGORY = "FutureWarning" if TORCH_WARNS else "DeprecationWarning"


def test_conversions_let_no_torch_jit_warning_through(scenario):
    # this process shows torch's warnings: the user's own script and trace warned
    assert {api for _, api in torch_jit_warnings(scenario["phases"]["user_before"])} >= {"torch.jit.script",
                                                                                          "torch.jit.trace"}
    # converting a module that torch_mp scripts, one it traces, and the user's ScriptModules
    assert scenario["captures"] == ["script", "trace", "scriptmodule", "scriptmodule"]
    assert torch_jit_warnings(scenario["phases"]["convert"]) == []
    # 8 threads converting while the user saves: only the user's saves warn
    threads = scenario["phases"]["threads"]
    assert torch_jit_warnings(threads) == torch_jit_warnings(threads, "MainThread")


def test_the_users_own_torch_jit_calls_still_warn(scenario):
    # every save the user made while 8 threads converted warned, as torch does: the filter is per thread
    saves = torch_jit_warnings(scenario["phases"]["threads"], "MainThread")
    assert saves == [(USERS_CATEGORY, "torch.jit.save")] * scenario["saves"]
    assert torch_jit_warnings(scenario["phases"]["user_after"]) == [(USERS_CATEGORY, "torch.jit.script")]


@needs_torch_2_14
def test_one_torch_mp_warning_per_process(scenario):
    ours = [w for phase in scenario["phases"].values() for w in phase if w[0] == OURS]
    assert len(ours) == 1, ours
    _, message, filename, _ = ours[0]
    assert "deprecates" in message and "through torch 2.15" in message and "TorchScript's status" in message
    assert filename == "<string>"  # attributed to the user's convert call, not to torch_mp's insides


@before_torch_2_14
def test_no_torch_mp_warning_where_torch_does_not_warn(scenario):
    assert not [w for phase in scenario["phases"].values() for w in phase if w[0] == OURS]


@needs_torch_2_14
def test_default_filters_show_ours_once_and_the_users_call():
    """What a user sees: no -W options, so each warning shows once per place it comes from."""
    script = textwrap.dedent(
        """
        import torch, torch_mp
        import sys
        sys.path.insert(0, 'tests/python')  # the tests' models (cwd: the repository)
        from small_models import ConvBnNet
        net, x = ConvBnNet().eval(), torch.randn(2, 3, 16, 16)
        torch_mp.convert(net, (x,), torch.float16)
        torch_mp.convert(net, (x,), torch.bfloat16)
        torch.jit.script(net)
        """
    )
    result = run_python("-c", script, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(OURS) == 1, result.stderr
    # torch_mp's own scripting did not use up the user's warning (it is shown once per place in torch)
    assert result.stderr.count(TORCH_JIT_WARNING) == 1 and "`torch.jit.script` is deprecated" in result.stderr


def test_warnings_as_errors():
    """With -W error, torch's warnings in torch_mp's calls stay hidden (a scripting failure would trace instead);
    torch_mp's own warning is an error where torch would warn."""
    script = textwrap.dedent(
        """
        import torch, torch_mp
        import sys
        sys.path.insert(0, 'tests/python')  # the tests' models (cwd: the repository)
        from small_models import ConvBnNet
        net, x = ConvBnNet().eval(), torch.randn(2, 3, 16, 16)
        try:
            torch_mp.convert(net, (x,), torch.float16)
        except torch_mp.TorchScriptDeprecationWarning:
            print("raised")
        print(torch_mp.report_of(torch_mp.convert(net, (x,), torch.float16)).capture)
        """
    )
    result = run_python("-W", "error", "-c", script, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    # stderr says why, where the capture was a trace (it was, in 1 process of about 12: test_builtin_table.py)
    assert result.stdout.split() == (["raised", "script"] if TORCH_WARNS else ["script"]), result.stderr


def test_command_line(tmp_path):
    fp32, fp16 = tmp_path / "fp32.pt", tmp_path / "fp16.pt"
    torch.jit.save(torch.jit.script(ConvBnNet().eval()), fp32)
    for args in (("convert", fp32, "-o", fp16, "--input-shape", "2,3,16,16"), ("report", fp16)):
        result = run_python("-W", "always", "-m", "torch_mp", *args, cwd=ROOT)
        assert result.returncode == 0, result.stderr
        assert TORCH_JIT_WARNING not in result.stderr, result.stderr
        assert result.stderr.count(OURS) == (1 if TORCH_WARNS else 0), result.stderr
