"""Inference speed, side by side in one run: fp32 TorchScript, torch_mp, torch.autocast eager, whole-model
low-precision TorchScript (.half() / .to(bfloat16)) and torch.compile with autocast, each checked against fp32.

    python benchmarks/inference_speed.py [--device cpu|cuda] [--models NAME ...] [--quick] [--threads N] [--kernels]

Writes benchmarks/inference_speed_<device>.md (the table, also printed) and inference_speed_<device>.png;
--kernels compares torch_mp's portable and fused output (kernels="fused") next to fp32 TorchScript instead, and
writes inference_kernels_<device>.*;
--quick (short timings, no torch.compile, small CPU inputs: a smoke run) writes inference_speed_<device>_quick.*.
Models come from the zoo (tests/zoo/registry.py) with random weights; inputs are the issue's sizes, not the zoo's.
"""
import argparse
import copy
import datetime
import os
import platform
import resource
import shlex
import signal
import statistics
import sys
import time
import warnings
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch._inductor.config
from torch._inductor.async_compile import shutdown_compile_workers
from torch.utils.benchmark import Timer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # the tests' models and helpers

import torch_mp  # noqa: E402
from registry import build_model, load_zoo  # noqa: E402

MODELS = {"tv.resnet50": "ResNet-50", "resnet50_ibn_a": "ResNet-50 IBN-a", "tv.vit_b_16": "ViT-B/16",
          "hf.bert-base": "BERT-base"}
LOW = {"cpu": torch.bfloat16, "cuda": torch.float16}  # autocast's and torch.compile's dtype per device
SHORT = {torch.float16: "fp16", torch.bfloat16: "bf16"}


class Settings(NamedTuple):
    batch: int
    seq: int
    # timing rounds of one call per variant, interleaved so that a neighbour's bursts of load hit every variant
    # alike: at least `rounds`, more until `timing_s` seconds have gone by
    rounds: int
    timing_s: float
    compile_timeout_s: Optional[int]  # None: torch.compile is skipped


FULL = {"cpu": Settings(batch=8, seq=128, rounds=7, timing_s=20, compile_timeout_s=180),
        "cuda": Settings(batch=32, seq=128, rounds=30, timing_s=20, compile_timeout_s=300)}
# inductor needs minutes per model on two cores: a quick run skips it
QUICK = {"cpu": Settings(batch=2, seq=64, rounds=3, timing_s=0, compile_timeout_s=None),
         "cuda": Settings(batch=32, seq=128, rounds=10, timing_s=0, compile_timeout_s=None)}


class Result(NamedTuple):
    variant: str
    ms: Optional[float]  # median; None when the variant failed
    min_ms: Optional[float]  # the least disturbed call, where a neighbour's load makes the median move
    cosine: Optional[float]
    note: str  # setup time, or why it failed


def make_inputs(name: str, settings: Settings, device: str) -> Tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    if name == "hf.bert-base":
        ids = torch.randint(0, 30522, (settings.batch, settings.seq), device=device)  # BertConfig's vocabulary
        mask = torch.ones_like(ids)
        mask[:, -settings.seq // 4:] = 0  # a padded quarter, as the zoo's inputs have
        return ids, mask
    return (torch.randn(settings.batch, 3, 224, 224, device=device),)


def capture(model: torch.nn.Module, inputs: Tuple[torch.Tensor, ...], how: str) -> torch.jit.ScriptModule:
    """Frozen TorchScript the way the zoo entry is captured (transformers' models trace, the others script)."""
    if how == "trace":
        module = torch.jit.trace(model, inputs, strict=False, check_trace=False)
    else:
        module = torch.jit.script(model)
    return torch.jit.freeze(module.eval())


# One function per variant: each returns the callable to time, taking the fp32 inputs.

def fp32_torchscript(model, inputs, how, device):
    return capture(model, inputs, how)


def torch_mp_variant(dtype, kernels="portable"):
    def build(model, inputs, how, device):
        return torch_mp.convert(model, inputs, dtype, kernels=kernels)
    return build


def autocast_eager(model, inputs, how, device):
    def run(*args):
        with torch.autocast(device, dtype=LOW[device]):
            return model(*args)
    return run


def whole_model_cast(dtype):
    """Every weight and floating input in `dtype`: the naive conversion, for speed and accuracy reference."""
    def build(model, inputs, how, device):
        low = copy.deepcopy(model).to(dtype)
        cast = lambda args: tuple(a.to(dtype) if a.is_floating_point() else a for a in args)  # noqa: E731
        module = capture(low, cast(inputs), how)
        return lambda *args: module(*cast(args))
    return build


def compile_autocast(model, inputs, how, device):
    torch._dynamo.reset()  # a fresh start per model: the recompilation limits count earlier models' frames
    # freezing lets inductor fold the weights into constants (and prepack them for oneDNN on CPU), as
    # torch.jit.freeze does for the TorchScript variants
    torch._inductor.config.freezing = True
    compiled = torch.compile(model)

    def run(*args):
        with torch.autocast(device, dtype=LOW[device]):
            return compiled(*args)
    return run


def variants(device: str) -> Dict[str, Callable]:
    low = LOW[device]
    table = {"fp32 TorchScript": fp32_torchscript, f"torch_mp {SHORT[low]}": torch_mp_variant(low)}
    if device == "cuda":
        table["torch_mp bf16"] = torch_mp_variant(torch.bfloat16)
    table[f"torch.autocast {SHORT[low]} eager"] = autocast_eager
    table[".half() TorchScript"] = whole_model_cast(torch.float16)
    if device == "cpu":
        table[".to(bfloat16) TorchScript"] = whole_model_cast(torch.bfloat16)
    table[f"torch.compile + autocast {SHORT[low]}"] = compile_autocast
    return table


def kernel_variants(device: str) -> Dict[str, Callable]:
    low = LOW[device]
    return {"fp32 TorchScript": fp32_torchscript,
            f"torch_mp {SHORT[low]} portable": torch_mp_variant(low),
            f"torch_mp {SHORT[low]} fused kernels": torch_mp_variant(low, "fused")}


class Timeout(Exception):
    pass


def with_timeout(seconds: Optional[int], fn: Callable):
    """fn() or Timeout after `seconds`: a compilation that runs away is recorded instead of stalling the run."""
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


def flat_output(output) -> torch.Tensor:
    """All floating tensors of an output (a tensor, a tuple, a dict), as one fp64 vector."""
    if isinstance(output, torch.Tensor):
        return output.detach().double().flatten() if output.is_floating_point() else output.new_empty(0).double()
    values = output.values() if isinstance(output, dict) else output
    return torch.cat([flat_output(v) for v in values])


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a, b, dim=0).item()


def benchmark_model(name: str, entry, device: str, settings: Settings, threads: int,
                    table: Dict[str, Callable]) -> List[Result]:
    model = build_model(entry).to(device)
    inputs = make_inputs(name, settings, device)
    built: Dict[str, Callable] = {}
    results: Dict[str, Result] = {}
    reference = None
    for variant, build in table.items():
        compiling = variant.startswith("torch.compile")
        if compiling and settings.compile_timeout_s is None:
            results[variant] = Result(variant, None, None, None, "skipped (--quick)")
            continue
        start = time.perf_counter()
        try:
            fn = build(model, inputs, entry.capture, device)
            # warm-up: the first calls profile and optimise (TorchScript) or compile (torch.compile)
            output = flat_output(with_timeout(settings.compile_timeout_s if compiling else None, lambda: fn(*inputs)))
            for _ in range(2):
                fn(*inputs)
        except Exception as error:  # noqa: BLE001 - a failing variant gets its row, the others still run
            message = str(error).strip().splitlines()[0][:150] if str(error).strip() else ""
            results[variant] = Result(variant, None, None, None, f"FAILED: {type(error).__name__}: {message}")
            print(f"  {variant}: {results[variant].note}", flush=True)
            continue
        finally:
            if compiling:  # idle (or, after a timeout, still busy) compile workers would load the CPUs during timing
                shutdown_compile_workers()
        if variant == "fp32 TorchScript":  # the first variant: the reference of the others
            reference = output
        built[variant] = fn
        results[variant] = Result(variant, None, None, cosine(output, reference) if reference is not None else None,
                                  f"setup + warm-up {time.perf_counter() - start:.0f} s")
    # Timer synchronises CUDA before reading the clock; it defaults to one thread, hence num_threads
    timers = {variant: Timer("fn(*inputs)", globals={"fn": fn, "inputs": inputs}, num_threads=threads)
              for variant, fn in built.items()}
    times: Dict[str, List[float]] = {variant: [] for variant in built}
    start, rounds = time.perf_counter(), 0
    while timers and (rounds < settings.rounds or time.perf_counter() - start < settings.timing_s):
        for variant, timer in timers.items():
            times[variant].append(timer.timeit(number=1).median)
        rounds += 1
    for variant, samples in times.items():
        r = results[variant]
        results[variant] = r._replace(ms=1e3 * statistics.median(samples), min_ms=1e3 * min(samples),
                                      note=f"{r.note}; {len(samples)} samples")
        print(f"  {variant}: {results[variant].ms:.1f} ms ({results[variant].note})", flush=True)
    return list(results.values())


def cpu_seconds() -> Tuple[float, float]:
    """CPU seconds spent busy since boot by all processes (/proc/stat), and by this one and its children."""
    with open("/proc/stat") as stat:
        user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in stat.readline().split()[1:9])
    everyone = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return everyone, sum(u.ru_utime + u.ru_stime for u in usage)


def machine(device: str) -> str:
    if device == "cuda":
        return f"{torch.cuda.get_device_name()}, {os.cpu_count()} CPU cores"
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu}, {os.cpu_count()} cores"


def markdown(all_results: Dict[str, List[Result]], device: str, settings: Settings, command: str, seconds: float,
             threads: int, others: float) -> str:
    sizes = (f"images batch {settings.batch} at 224x224, BERT batch {settings.batch} seq {settings.seq} "
             f"(last quarter padded)")
    lines = [
        f"# Inference speed ({device})",
        "",
        f"Machine: {machine(device)}; {threads} threads; date {datetime.date.today()}; torch {torch.__version__}.",
        f"Command: `{command}` ({seconds / 60:.1f} min). Random weights (tests/zoo/registry.py); {sizes}.",
        "Median ms of one call, over rounds that call every variant in turn (torch.utils.benchmark Timer.timeit; "
        "samples per model in the notes) after 3 warm-up calls, under torch.no_grad; min ms: the fastest call, the "
        "least disturbed by other processes. Speedup: median vs fp32 TorchScript's "
        "(torch.jit.freeze of script, or of trace(strict=False) for BERT). Cosine: all floating outputs vs fp32 "
        "TorchScript's on the same inputs.",
        "Variants: torch_mp.convert; the eager nn.Module under torch.autocast; the whole model and its floating "
        "inputs cast (.half(), .to(bfloat16)), then captured and frozen as fp32 is; torch.compile (inductor, default "
        "mode, freezing on) called under torch.autocast. Setup + warm-up: capture, conversion or compilation and 3 "
        "calls (torch.compile's shrinks when inductor's on-disk cache holds kernels of an earlier run). "
        "torch_mp fused kernels: convert(..., kernels=\"fused\"), chains of elementwise ops and casts as "
        "torch_mp::fused_pointwise calls.",
        "",
        f"Other processes share this machine's CPUs (during this run they kept {others:.1f} of its "
        f"{os.cpu_count()} cores busy on average): absolute times move between runs, compare ratios within one run.",
        "",
        "| model | variant | median ms | speedup | min ms | cosine vs fp32 | note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, results in all_results.items():
        base = results[0].ms
        for r in results:
            ms, min_ms = (f"{r.ms:.1f}", f"{r.min_ms:.1f}") if r.ms is not None else ("-", "-")
            speedup = f"{base / r.ms:.2f}x" if r.ms is not None and base is not None else "-"
            cos = f"{r.cosine:.6f}" if r.cosine is not None else "-"
            lines.append(f"| {MODELS[name]} | {r.variant} | {ms} | {speedup} | {min_ms} | {cos} | {r.note} |")
    return "\n".join(lines) + "\n"


def chart(all_results: Dict[str, List[Result]], device: str, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    names = list(all_results)
    labels = [r.variant for r in all_results[names[0]]]
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(2.4 * len(names) + 3, 4.5))
    for i, label in enumerate(labels):
        for j, name in enumerate(names):
            r = all_results[name][i]
            base = all_results[name][0].ms
            x = j + (i - (len(labels) - 1) / 2) * width
            if r.ms is None or base is None:  # failed: a marker instead of a bar
                ax.text(x, 0.05, "x", ha="center", color="red")
                continue
            ax.bar(x, base / r.ms, width, color=f"C{i}")
            ax.text(x, base / r.ms, f"{base / r.ms:.2f}", ha="center", va="bottom", fontsize=6)
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xticks(range(len(names)), [MODELS[n] for n in names])
    ax.set_ylabel("speedup vs fp32 TorchScript")
    ax.set_title(f"Inference speed ({device}, torch {torch.__version__}); x = failed or skipped")
    ax.legend(handles=[Patch(color=f"C{i}", label=label) for i, label in enumerate(labels)], fontsize=7,
              loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--models", nargs="*", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--quick", action="store_true", help="small inputs, short timings, no torch.compile")
    parser.add_argument("--kernels", action="store_true", help="portable vs fused torch_mp output only")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="intra-op threads (default: all cores; fewer where another process holds some)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    settings = (QUICK if args.quick else FULL)[args.device]
    torch.set_num_threads(args.threads)
    command = "python benchmarks/inference_speed.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    start, (everyone, own) = time.perf_counter(), cpu_seconds()
    zoo, all_results = load_zoo(), {}
    with torch.no_grad():
        for name in args.models:
            print(f"{MODELS[name]}:", flush=True)
            table = kernel_variants(args.device) if args.kernels else variants(args.device)
            all_results[name] = benchmark_model(name, zoo[name], args.device, settings, args.threads, table)
    seconds, (everyone_after, own_after) = time.perf_counter() - start, cpu_seconds()
    others = ((everyone_after - everyone) - (own_after - own)) / seconds
    table = markdown(all_results, args.device, settings, command.strip(), seconds, args.threads, others)
    print(table)
    stem = os.path.join(ROOT, "benchmarks", ("inference_kernels_" if args.kernels else "inference_speed_") + args.device
                        + ("_quick" if args.quick else ""))
    with open(stem + ".md", "w") as out:
        out.write(table)
    chart(all_results, args.device, stem + ".png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
