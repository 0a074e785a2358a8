"""torch_mp._memory.release_freed_memory, which convert calls between its fp32 runs and its low copies: on glibc it
hands the free pages of the C heap's holes back (RSS drops by about the holes' size, what is alive untouched)."""
import platform
import resource

import pytest
import torch

from torch_mp import _memory


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's; elsewhere the call does nothing")
def test_the_heaps_holes_go_back_and_what_is_alive_stays():
    kept, freed = [], []
    for index in range(2000):  # 100 KB each: heap chunks, under glibc's mmap threshold, every other one freed
        (kept if index % 2 else freed).append(torch.full((25_000,), float(index)))
    del freed
    before = _rss()
    _memory.release_freed_memory()
    assert before - _rss() > 50 * 2**20  # of the 100 MB of holes (some pages hold a live chunk's header)
    assert all(bool((tensor == 2 * i + 1).all()) for i, tensor in enumerate(kept))
