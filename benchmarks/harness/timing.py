"""Interleaved timing: every callable is called once per round, in turn, so that a neighbour's burst of load or the
machine's drift falls on every column alike instead of on whichever was being timed then.

time_interleaved(calls, rounds, ...) warms each callable up, then runs rounds until there are `rounds` of them and
`min_seconds` have gone by, and gives each callable's Timing (all samples; median and min). Calls run under
torch.no_grad. A sample is one call read on torch.utils.benchmark's clock, which synchronises the accelerator
before reading, so a CUDA call's queued kernels count; gpu_time=True reads CUDA events around the call instead
(time on the GPU's stream, without the host's launch gaps).
"""
import signal
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import torch
from torch.utils.benchmark.utils.common import set_torch_threads
from torch.utils.benchmark.utils.timer import timer as benchmark_clock


@dataclass(frozen=True)
class Timing:
    samples_ms: List[float]  # one per round, in round order

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        """The least disturbed call, where a neighbour's load makes the median move."""
        return min(self.samples_ms)


def _wall_ms(call: Callable[[], object]) -> float:
    start = benchmark_clock()
    call()
    return (benchmark_clock() - start) * 1e3


def _gpu_ms(call: Callable[[], object]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def time_interleaved(calls: Dict[str, Callable[[], object]], rounds: int, min_seconds: float = 0.0, warmup: int = 2,
                     threads: Optional[int] = None, gpu_time: bool = False) -> Dict[str, Timing]:
    """Timing of each of `calls` (callables without arguments), keyed as `calls` is. `threads`: intra-op threads
    while timing (None: as set)."""
    sample = _gpu_ms if gpu_time else _wall_ms
    samples: Dict[str, List[float]] = {key: [] for key in calls}
    # Timer.timeit(number=1) would do the same per sample but with two warm-up calls of its own each time, which
    # triples a round's cost on models that take a second a call
    with torch.no_grad(), set_torch_threads(threads or torch.get_num_threads()):
        for call in calls.values():
            for _ in range(warmup):
                call()
        start, done = time.perf_counter(), 0
        while calls and (done < rounds or time.perf_counter() - start < min_seconds):
            for key, call in calls.items():
                samples[key].append(sample(call))
            done += 1
    return {key: Timing(values) for key, values in samples.items()}


def interleaved_medians(calls: Dict[str, Callable], args, device: str, repeats: int) -> Dict[str, float]:
    """Median ms of each of `calls` applied to `args`: `repeats` rounds after two warm-up calls each (the form the
    export and int8 scripts use)."""
    bound = {key: (lambda call=call: call(*args)) for key, call in calls.items()}
    del device  # the clock synchronises whichever accelerator is there
    return {key: timing.median_ms for key, timing in time_interleaved(bound, repeats).items()}


class Timeout(Exception):
    pass


def with_timeout(seconds: Optional[int], fn: Callable[[], object]):
    """fn() or Timeout after `seconds` (None: no limit): a compilation that runs away is recorded instead of stalling
    the run. Main thread only (SIGALRM)."""
    if seconds is None:
        return fn()

    def expire(signum, frame):
        raise Timeout(f"no result after {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        return fn()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
