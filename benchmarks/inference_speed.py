"""Inference speed, side by side in one run: fp32 TorchScript, torch_mp, torch.autocast eager, whole-model
low-precision TorchScript (.half() / .to(bfloat16)) and torch.compile with autocast, each checked against fp32.

    python benchmarks/inference_speed.py [--device cpu|cuda] [--models NAME ...] [--quick] [--threads N] [--kernels]
                                         [--cells FOLDER] [--deadline-min M]

Writes benchmarks/results/inference_speed_<device>.md (the table, also printed) and inference_speed_<device>.png;
--kernels compares torch_mp's portable and fused output (kernels="fused") next to fp32 TorchScript instead, and
writes inference_kernels_<device>.*;
--quick (short timings, no torch.compile, small CPU inputs: a smoke run) writes inference_speed_<device>_quick.*;
--cells FOLDER writes each model's results as JSON when they are measured, and a rerun with the same folder measures
only the models missing (benchmarks/harness/cells.py); --deadline-min M starts no model after M minutes.
Models come from the zoo (tests/zoo/registry.py) with random weights; inputs are the issue's sizes, not the zoo's.
"""
import argparse
import copy
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, replace
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch._inductor.config
from torch._inductor.async_compile import shutdown_compile_workers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # the tests' models and helpers

import torch_mp  # noqa: E402
from harness import (RESULTS, Machine, NeighbourLoad, Session, command_line, cosine, flat_output,  # noqa: E402
                     machine_line, markdown_table, time_interleaved, with_timeout)
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


@dataclass(frozen=True)
class Result:
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
    # warmup=0: the three calls above warmed each variant up (and count in its setup time)
    timings = time_interleaved({variant: (lambda fn=fn: fn(*inputs)) for variant, fn in built.items()},
                               rounds=settings.rounds, min_seconds=settings.timing_s, warmup=0, threads=threads)
    for variant, timing in timings.items():
        r = results[variant]
        results[variant] = replace(r, ms=timing.median_ms, min_ms=timing.min_ms,
                                   note=f"{r.note}; {len(timing.samples_ms)} samples")
        print(f"  {variant}: {results[variant].ms:.1f} ms ({results[variant].note})", flush=True)
    return list(results.values())


def markdown(all_results: Dict[str, List[Result]], device: str, settings: Settings, command: str, seconds: float,
             threads: int, others: float, session_note: str) -> str:
    sizes = (f"images batch {settings.batch} at 224x224, BERT batch {settings.batch} seq {settings.seq} "
             f"(last quarter padded)")
    lines = [
        f"# Inference speed ({device})",
        "",
        machine_line(Machine.this(device), f"{threads} threads"),
        f"Command: `{command}` ({seconds / 60:.1f} min). Random weights (tests/zoo/registry.py); {sizes}.",
        "Median ms of one call, over rounds that call every variant in turn (benchmarks/harness/timing.py, on "
        "torch.utils.benchmark's clock; samples per model in the notes) "
        "after 3 warm-up calls, under torch.no_grad; min ms: the fastest call, the "
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
    ]
    if session_note:
        lines += [session_note, ""]
    rows = []
    for name, results in all_results.items():
        base = results[0].ms
        for r in results:
            ms, min_ms = (f"{r.ms:.1f}", f"{r.min_ms:.1f}") if r.ms is not None else ("-", "-")
            speedup = f"{base / r.ms:.2f}x" if r.ms is not None and base is not None else "-"
            cos = f"{r.cosine:.6f}" if r.cosine is not None else "-"
            rows.append([MODELS[name], r.variant, ms, speedup, min_ms, cos, r.note])
    headers = ["model", "variant", "median ms", "speedup", "min ms", "cosine vs fp32", "note"]
    return "\n".join(lines) + "\n" + markdown_table(headers, rows) + "\n"


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
    parser.add_argument("--cells", default=None,
                        help="folder for each model's results as JSON; a rerun with it skips the models written")
    parser.add_argument("--deadline-min", type=float, default=None, help="start no model after this many minutes")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    settings = (QUICK if args.quick else FULL)[args.device]
    torch.set_num_threads(args.threads)
    page = (("inference_kernels_" if args.kernels else "inference_speed_") + args.device
            + ("_quick" if args.quick else ""))
    session = Session(args.cells, None if args.deadline_min is None else 60 * args.deadline_min)
    load, zoo, all_results = NeighbourLoad(), load_zoo(), {}
    with torch.no_grad():
        for name in args.models:
            print(f"{MODELS[name]}:", flush=True)
            table = kernel_variants(args.device) if args.kernels else variants(args.device)
            cell = session.run(f"{page}_{name}", lambda: [asdict(r) for r in benchmark_model(
                name, zoo[name], args.device, settings, args.threads, table)])
            if cell is not None:
                all_results[name] = [Result(**r) for r in cell]
    table = markdown(all_results, args.device, settings, command_line(), load.seconds(), args.threads,
                     load.cores_busy(), session.page_note())
    print(table)
    stem = os.path.join(RESULTS, page)
    with open(stem + ".md", "w") as out:
        out.write(table)
    if all_results:  # none when the deadline came before the first model
        chart(all_results, args.device, stem + ".png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
