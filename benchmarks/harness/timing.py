"""Interleaved timing: every callable is called once per round, in turn, so that a neighbour's burst of load or the
machine's drift falls on every column alike instead of on whichever was being timed then.

time_interleaved(calls, rounds, ...) warms each callable up (`warmup` calls, and for `warmup_s` seconds: a GPU whose
clocks dropped while the host was busy needs time, not a count, to come back), then runs rounds until there are
`rounds` of them and `min_seconds` have gone by, and gives each callable's Timing (all samples; median and min).
Calls run under torch.no_grad. A sample is one call read on torch.utils.benchmark's clock, which synchronises the
accelerator before reading, so a CUDA call's queued kernels count; gpu_time=True reads CUDA events around the call
instead (time on the GPU's stream, without the host's launch gaps).
"""
import contextlib
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


def _warm_up(call: Callable[[], object], calls: int, seconds: float) -> None:
    """At least `calls` calls and `seconds` seconds of them; the clock is read (and the accelerator synchronised) only
    once the count is done, so a count alone queues its calls as a real caller would."""
    deadline = benchmark_clock() + seconds
    done = 0
    while done < calls or (seconds > 0 and benchmark_clock() < deadline):
        call()
        done += 1


def time_interleaved(calls: Dict[str, Callable[[], object]], rounds: int, min_seconds: float = 0.0, warmup: int = 2,
                     threads: Optional[int] = None, gpu_time: bool = False,
                     warmup_s: float = 0.0) -> Dict[str, Timing]:
    """Timing of each of `calls` (callables without arguments), keyed as `calls` is. `threads`: intra-op threads
    while timing (None: as set)."""
    sample = _gpu_ms if gpu_time else _wall_ms
    samples: Dict[str, List[float]] = {key: [] for key in calls}
    # Timer.timeit(number=1) would do the same per sample but with two warm-up calls of its own each time, which
    # triples a round's cost on models that take a second a call
    with torch.no_grad(), set_torch_threads(threads or torch.get_num_threads()):
        for call in calls.values():
            _warm_up(call, warmup, warmup_s)
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


@contextlib.contextmanager
def time_limit(seconds: Optional[float]):
    """Raises Timeout in the block after `seconds` (None or <= 0: no limit; at least 1 s): a compilation that runs
    away is recorded instead of stalling the run. Main thread only (SIGALRM)."""
    if seconds is None or seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(signum, frame):
        raise Timeout(f"no result after {seconds:.0f} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(1.0, float(seconds)))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def with_timeout(seconds: Optional[float], fn: Callable[[], object]):
    """fn() under time_limit(seconds)."""
    with time_limit(seconds):
        return fn()
