"""The torch.jit calls torch_mp makes on the user's behalf, without torch's deprecation warnings for them.

torch 2.14 and 2.15 warn FutureWarning (torch 2.13: DeprecationWarning, hidden by default) on every torch.jit.script / trace /
save / load. Those warnings are attributed to torch's own modules (torch.jit._script, ...), so a filter on the module
cannot tell torch_mp's calls from the user's; a warnings filter whose message test holds only in a thread inside
jit_call can. It is thread-local, so it needs no lock around the calls, and a user's own torch.jit calls, in any
thread, still warn as torch does. torch_mp emits one warning of its own instead, once per process.
"""
import os
import re
import sys
import threading
import warnings

import torch

from .._compat import JIT_CALLS_WARN


class TorchScriptDeprecationWarning(FutureWarning):
    """torch_mp's output is TorchScript, which PyTorch deprecates (torch 2.14 warns on each torch.jit call)."""


MESSAGE = (
    "torch_mp converts to TorchScript, which PyTorch deprecates: since torch 2.14, torch.jit.script, trace, save and "
    "load warn FutureWarning (torch.compile and torch.export are PyTorch's replacements). torch_mp hides those "
    "warnings for the torch.jit calls it makes on your behalf (your own torch.jit calls still warn). Its output, a "
    "frozen TorchScript module, keeps working through torch 2.15, the newest torch torch_mp is tested with. "
    "See \"TorchScript's status\" in torch_mp's README.md."
)


REPORT_FILE = "torch_mp_report.json"  # the report's name among a saved module's extra files

_thread = threading.local()  # depth: how many jit_call frames this thread is inside
_lock = threading.Lock()
_warned = False


class _InsideJitCall:
    """The message test of the filter below: torch.jit's deprecation messages, in a thread inside jit_call only."""

    messages = re.compile(r"`torch\.jit\.\w+` is (deprecated|not supported)")

    def match(self, text: str) -> bool:
        return getattr(_thread, "depth", 0) > 0 and self.messages.match(text) is not None


_FILTER = ("ignore", _InsideJitCall(), Warning, re.compile(r"torch\.jit\."), 0)


def jit_call(function, *args, **kwargs):
    """function(*args, **kwargs), a torch.jit function torch_mp calls for the user, without torch's deprecation
    warning; warns TorchScriptDeprecationWarning instead, the first time in the process where torch would warn."""
    if JIT_CALLS_WARN:
        _warn_once()
    with _lock:
        # first in the list, each time: filters added since (pytest's "always" for DeprecationWarning, a user's
        # "error", a catch_warnings that dropped it on exit) must not turn these warnings back on. Outside jit_call
        # it matches nothing, so its place changes no other warning.
        filters = warnings.filters
        if not filters or filters[0] is not _FILTER:
            if _FILTER in filters:
                filters.remove(_FILTER)
            filters.insert(0, _FILTER)
    _thread.depth = getattr(_thread, "depth", 0) + 1
    try:
        return function(*args, **kwargs)
    finally:
        _thread.depth -= 1


def load_file(path, map_location=None, extra_files=None) -> torch.jit.ScriptModule:
    """torch.jit.load(path) through jit_call. FileNotFoundError where there is no file, ValueError naming the file
    (and torch's first line) where torch cannot load it."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist")
    try:
        return jit_call(torch.jit.load, path, map_location=map_location, _extra_files=extra_files or {})
    except TorchScriptDeprecationWarning:
        raise  # torch_mp's warning turned into an error by a filter: the file is fine
    except Exception as error:  # noqa: BLE001 - any load failure means the file is not usable
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{path} is not a loadable TorchScript file (corrupt, truncated or another format): "
                         f"{first}") from error


def save(module: torch.jit.ScriptModule, path, report=None) -> None:
    """torch.jit.save(module, path) without torch's deprecation warning (jit_call), with `report` (default: the one
    the module carries, torch_mp.report_of(module)) stored inside the file as REPORT_FILE: torch.jit.load ignores it;
    torch_mp.report_of(path) and `python -m torch_mp report` read it."""
    from ..report import report_of  # here: report.py imports this module

    report = report if report is not None else report_of(module)
    extra = {REPORT_FILE: report.to_json(indent=None)} if report is not None else {}
    jit_call(torch.jit.save, module, path, _extra_files=extra)


def _warn_once() -> None:
    global _warned
    with _lock:
        if _warned:
            return
        _warned = True
    warnings.warn(MESSAGE, TorchScriptDeprecationWarning, stacklevel=user_stacklevel())


def user_stacklevel() -> int:
    """The stacklevel, for a warnings.warn called right in the caller's frame, of the first frame outside torch_mp:
    the user's code, or the command line's __main__."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "torch_mp":
        level, frame = level + 1, frame.f_back
    return level
