"""Why cuda_speed.py's TorchScript columns disagree: on an H200 (2026-11-26 and -27) one and the same torch_mp graph
of BERT-base timed 2.8 to 5.3 ms at batch 1 in different columns. This converts each model twice with the same
options and times the two modules and .half() TorchScript in alternating rounds, as cuda_speed.py times a column
(CUDA events around each call, synchronised after each), and reports per round the median of the events and of the
host's wall clock per call, and the fusion groups of the graph TorchScript's executor last ran. One module slower
in every round means per-module state (the executor's specialisation); all drifting together means the machine.

    python benchmarks/cuda_timing_probe.py [--models bert_base] [--batches 1 32] [--rounds 3] [--window-s 0.4]

Run by gpu_session.sh; prints one line per module and round, then one summary line per model."""
import argparse
import copy
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cuda_speed  # noqa: E402

FUSION_GROUPS = ("prim::TensorExprGroup", "prim::FusionGroup", "prim::CudaFusionGroup", "prim::DifferentiableGraph")


def fusion_groups() -> int:
    graph = torch.jit.last_executed_optimized_graph()
    return sum(1 for node in graph.nodes() if node.kind() in FUSION_GROUPS)


def timed_window(module, inputs, window_s: float):
    """(median ms by CUDA events, median ms by the host's clock, calls) over `window_s` of calls, after half as long
    of warm-up."""
    events, wall = [], []
    warm_until = time.perf_counter() + window_s / 2
    while time.perf_counter() < warm_until:
        module(*inputs)
    torch.cuda.synchronize()
    until = time.perf_counter() + window_s
    while time.perf_counter() < until:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        module(*inputs)
        end.record()
        end.synchronize()
        wall.append(1e3 * (time.perf_counter() - t0))
        events.append(start.elapsed_time(end))
    return statistics.median(events), statistics.median(wall), len(events)


def probe(name: str, batch: int, rounds: int, window_s: float) -> None:
    import torch_mp

    model, _ = cuda_speed.build_model(name)
    model = model.cuda().eval()
    spec = cuda_speed.MODELS[name]
    example = cuda_speed.make_inputs(torch, spec, batch, "cuda", 0, False)
    low = copy.deepcopy(model).half()
    if spec.conv:
        low = low.to(memory_format=torch.channels_last)
    modules = {}
    with torch.no_grad():
        modules["torch_mp A"] = torch_mp.convert(model, example, torch.float16, progress=False)
        modules["torch_mp B"] = torch_mp.convert(model, example, torch.float16, progress=False)
        half = cuda_speed.CastInputs(low, torch.float16, spec.conv).eval()
        modules[".half() TS"] = torch.jit.freeze(torch.jit.trace(half, example, strict=False, check_trace=False))
        medians = {label: [] for label in modules}
        for round_ in range(rounds):
            for label, module in modules.items():
                event_ms, wall_ms, calls = timed_window(module, example, window_s)
                medians[label].append(event_ms)
                print(f"{name} b{batch} round {round_} {label}: {event_ms:.3f} ms (host {wall_ms:.3f} ms, "
                      f"{calls} calls, {fusion_groups()} fusion groups)", flush=True)
    print(f"{name} b{batch} per-round medians: "
          + "; ".join(f"{label} {' '.join(f'{m:.2f}' for m in ms)}" for label, ms in medians.items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bert_base"], choices=list(cuda_speed.MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=0.4)
    args = parser.parse_args()
    print(f"timing probe: torch {torch.__version__}, {torch.cuda.get_device_name()}, texpr fuser "
          f"{torch._C._jit_texpr_fuser_enabled()}", flush=True)
    for name in args.models:
        for batch in args.batches:
            probe(name, batch, args.rounds, args.window_s)


if __name__ == "__main__":
    main()
