"""benchmarks/cuda_speed.py's measurements that only a GPU run would otherwise exercise, run on a CPU: the GPU time
with the queue pre-filled (Bench.gpu_times / prefilled_sample) against a simulated GPU whose host and device clocks
are virtual, through a stand-in torch.cuda of Event, synchronize and _sleep; and the reading of a profiled forward's
chrome trace (summarize_trace) on a hand-made trace with kernels, a memcpy, two streams and a graph launch. Exact
numbers: the simulated clocks have no noise.
"""
import importlib
import os
import sys
import types

import pytest
import torch

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")


@pytest.fixture(scope="module")
def cuda_speed():
    """The benchmark module, imported without leaving its environment defaults (inductor's caches, TEARDOWN_CUPTI)
    in this process."""
    saved = dict(os.environ)
    sys.path.insert(0, BENCHMARKS)
    try:
        return importlib.import_module("cuda_speed")
    finally:
        sys.path.remove(BENCHMARKS)
        os.environ.clear()
        os.environ.update(saved)


class SimulatedGpu:
    """One stream: the host's clock, and when the GPU will have done all it was given (seconds)."""

    def __init__(self, cycles_per_s: float = 1.98e9):
        self.host = 0.0
        self.busy_until = 0.0
        self.cycles_per_s = cycles_per_s

    def run(self, seconds: float) -> None:  # one launch: enqueued now, runs after all before it
        self.busy_until = max(self.busy_until, self.host) + seconds

    def synchronize(self) -> None:
        self.host = max(self.host, self.busy_until)

    def cuda(self):
        gpu = self

        class Event:
            def __init__(self, enable_timing=True):
                self.at = None

            def record(self):
                gpu.run(0.0)
                self.at = gpu.busy_until

            def elapsed_time(self, end):
                return (end.at - self.at) * 1e3

            def synchronize(self):
                gpu.host = max(gpu.host, self.at)

        def sleep(cycles):
            gpu.host += 5e-6  # the launch
            gpu.run(cycles / gpu.cycles_per_s)

        return types.SimpleNamespace(Event=Event, synchronize=self.synchronize, _sleep=sleep)

    def forward(self, kernels: int, host_s: float, gpu_s: float, sync_after: int = -1):
        """A forward of `kernels` launches, each host_s on the host and gpu_s on the GPU; it waits for the GPU after
        launch number sync_after (as .item() would)."""
        def fn(*args):
            for k in range(kernels):
                self.host += host_s
                self.run(gpu_s)
                if k == sync_after:
                    self.synchronize()
        return fn


@pytest.fixture
def simulated(cuda_speed, monkeypatch):
    """A simulated GPU and a Bench with only what the GPU-time methods read, timed by the simulated host clock."""
    gpu = SimulatedGpu()
    monkeypatch.setattr(cuda_speed, "time", types.SimpleNamespace(perf_counter=lambda: gpu.host,
                                                                  monotonic=lambda: gpu.host))

    def bench():
        made = object.__new__(cuda_speed.Bench)
        made.torch = types.SimpleNamespace(cuda=gpu.cuda(), no_grad=torch.no_grad, inference_mode=torch.inference_mode)
        made.cuda, made._cycles_per_ms, made.meta = True, None, {}
        made.args = types.SimpleNamespace(grad_mode="no_grad")
        return made

    return gpu, bench


SETS = [(), (), ()]


def test_host_bound_forward_gets_its_gpu_time_and_host_time_apart(simulated):
    gpu, bench = simulated
    made, cell = bench(), {}
    made.host_and_gpu_time(gpu.forward(200, 20e-6, 5e-6), SETS, 10, cell)  # 4 ms on the host, 1 ms on the GPU
    assert cell["host_ms"] == pytest.approx(4.0, abs=1e-6)
    assert cell["gpu_ms"] == pytest.approx(1.0, abs=1e-6)
    assert cell["gpu_prefill"]["prefilled"] == 10
    # the sleep's own launch (5 us) counts into its calibration
    assert made.meta["sleep_cycles_per_ms"] == pytest.approx(1.98e6, rel=0.02)


def test_gpu_bound_forward_gets_its_gpu_time(simulated):
    gpu, bench = simulated
    cell = {}
    bench().host_and_gpu_time(gpu.forward(100, 5e-6, 80e-6), SETS, 10, cell)  # 0.5 ms host, 8 ms GPU
    assert cell["gpu_ms"] == pytest.approx(8.0, abs=1e-6)


def test_a_sleep_shorter_than_the_host_doubles_until_the_host_finishes_first(simulated):
    gpu, bench = simulated
    # the host takes 12 ms where its enqueue time said 1.2: the sleep goes 3.6 -> 7.2 -> 14.4 ms
    result = bench().gpu_times(gpu.forward(200, 60e-6, 5e-6), SETS, 10, host_ms=1.2)
    assert result["gpu_prefill"]["redone"] == 2
    assert result["gpu_ms"] == pytest.approx(1.0, abs=1e-6)


def test_a_forward_that_waits_for_the_gpu_gets_no_gpu_time(simulated):
    gpu, bench = simulated
    cell = {}
    bench().host_and_gpu_time(gpu.forward(100, 20e-6, 5e-6, sync_after=50), SETS, 10, cell)
    assert "gpu_ms" not in cell
    assert cell["gpu_prefill"]["not_prefilled"] == 3
    assert "outlasted" in cell["gpu_time_error"]


def test_trace_summary_counts_kernels_copies_streams_and_busy_time(cuda_speed):
    events = [
        {"cat": "cpu_op", "name": "forward", "ts": 0, "dur": 30, "tid": 1, "ph": "X"},
        {"cat": "cpu_op", "name": "aten::conv2d", "ts": 0, "dur": 10, "tid": 1, "ph": "X"},
        {"cat": "cpu_op", "name": "aten::convolution", "ts": 1, "dur": 8, "tid": 1, "ph": "X"},
        {"cat": "cpu_op", "name": "aten::relu", "ts": 12, "dur": 3, "tid": 1, "ph": "X"},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2, "dur": 1, "ph": "X"},
        {"cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 20, "dur": 1, "ph": "X"},
        {"cat": "kernel", "name": "k1", "ts": 100, "dur": 10, "ph": "X", "args": {"stream": 7}},
        {"cat": "kernel", "name": "void cudnn::nchwToNhwcKernel<__half>", "ts": 105, "dur": 10, "ph": "X",
         "args": {"stream": 8}},
        {"cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 130, "dur": 2, "ph": "X", "args": {"stream": 7}},
        {"cat": "ac2g", "name": "ac2g", "ts": 2, "ph": "s"},
    ]
    summary = cuda_speed.summarize_trace(events)
    assert (summary["kernels"], summary["memcpy"], summary["memset"], summary["streams"]) == (2, 1, 0, 2)
    # the outermost host ops under the forward (conv2d, relu), one kernel launch, one graph launch
    assert (summary["host_ops"], summary["kernel_launches"], summary["graph_launches"]) == (2, 1, 1)
    # busy 22 us, union 17 us (the two kernels overlap 5 us), span 32 us
    assert summary["busy_ms"] == pytest.approx(0.022, abs=1e-9)
    assert summary["union_ms"] == pytest.approx(0.017, abs=1e-9)
    assert summary["span_ms"] == pytest.approx(0.032, abs=1e-9)
    assert summary["layout_kernels"] == 1  # cuDNN's NCHW -> NHWC conversion
    assert [name for name, _, _ in summary["top_kernels"]] == ["k1", "void cudnn::nchwToNhwcKernel<__half>"]
