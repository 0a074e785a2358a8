"""Hands the memory the fp32 runs freed back to the operating system before convert stores its low copies.

torch_mp.convert runs the fp32 model (the capture check's eager and scripted runs, the observation) before it makes
the weights' fp16 / bf16 copies. Those runs free their activations into the C heap as holes between allocations that
stay alive (the observation's records, graph nodes, Python objects, TorchScript's executor); the copies do not all
fit the holes, and glibc keeps them, so the process's RSS peaks above the weights by part of what the runs used.
malloc_trim(0) returns the holes' whole pages (madvise), at no cost to what is alive (tens of microseconds). A 1 GiB
tied-embedding decoder converted from its nn.Module (benchmarks/memory.py memory --module, bf16, three runs each):
peak RSS over its fp32 weights 1.598-1.618x without, 1.584-1.592x with. The export front's peak did not move with it
(1.567-1.571x either way), so only convert calls it. Where the C library has no malloc_trim (macOS, Windows, musl)
this does nothing.
"""
from __future__ import annotations

import ctypes
from typing import Callable, Optional


def _find_malloc_trim() -> Optional[Callable[[int], int]]:
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)  # the process's own symbols: glibc's where it is used
    except (OSError, TypeError):  # no process handle to load (Windows)
        return None


_MALLOC_TRIM = _find_malloc_trim()


def release_freed_memory() -> None:
    """Returns the C heap's free pages to the operating system (glibc's malloc_trim(0)); nothing elsewhere."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
