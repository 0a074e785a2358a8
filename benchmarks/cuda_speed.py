"""CUDA inference speed of torch_mp against fp32 TorchScript, torch.autocast, whole-model low-precision TorchScript
and torch.compile, one command, every measurement written to a JSON file as soon as it is taken.

Measure (on the GPU machine):

    python benchmarks/cuda_speed.py --dtypes fp16 bf16 --batches 32 1 \\
        --models resnet50 bert_base resnet50_ibn_a vit_b_16 --out results.json [--deadline-s 400 --hard-deadline-s 540]

Render one or more result files (later files override earlier ones cell by cell; a skipped cell never overrides a
measured one) into markdown and a bar chart:

    python benchmarks/cuda_speed.py --render results1.json results2.json --md benchmarks/results/CUDA_SPEED.md \\
        --png benchmarks/results/cuda_speed.png
    python benchmarks/cuda_speed.py --summary results.json      # a short plain-text table and the targets

Smoke test of the whole logic on a CPU machine (tiny batches, few repeats, wall-clock timing, torch.compile only
on the small ConvBnNet):

    python benchmarks/cuda_speed.py --device cpu --smoke --out /tmp/smoke.json
    python -m pytest tests/python/test_cuda_speed_method.py   # GPU-time samples on a simulated GPU, trace reading

Models (random weights, eval, built by tests/zoo/registry.py where it has them): resnet50 (torchvision, 224x224),
resnet50_ibn_a (torch_mp.models, 384x128 as its author ran it), vit_b_16 (torchvision, 224x224), bert_base
(transformers BertModel from its default config, seq 128, input_ids + attention_mask with the last quarter padded),
convbnnet (tests/python/small_models.py's ConvBnNet, 32x32; for smoke runs).

Columns (each is one whole forward call on fp32 inputs, under torch.no_grad; median of N timed calls after warm-up,
inputs rotated among a few sets; CUDA events around each call, synchronised after each; every column after fp32_ts
is timed in windows alternating with it, and its speed-ups come from those windows, since the host's speed drifts):
  fp32_ts          torch.jit.freeze(torch.jit.trace(model, strict=False)); PyTorch's default TF32 settings
  autocast         eager model under torch.autocast(device, dtype)
  lowp_ts          model.half() / .bfloat16() (channels_last for conv nets), traced + frozen, inputs cast inside
  compile_default  torch.compile(model, dynamic=False) called under torch.autocast (inductor freezing on unless
                   --no-inductor-freezing)
  compile_ro       the same with mode="reduce-overhead" (CUDA graphs; batches from --ro-batches)
  torch_mp         torch_mp.convert(model, inputs, dtype) with its defaults
  torch_mp_plain   convert(..., channels_last=False, fuse_convolutions=False) where convert accepts them
  torch_mp_cudnn   convert(..., fuse_convolutions=True): conv (+add) +relu as cuDNN fused convolutions (the default
                   since 2026-11-27: then it converts as torch_mp does, and their difference is timing noise)
  torch_mp_fused   convert(..., kernels="fused")
  torch_mp_graphs  torch_mp.cuda_graphs(<the torch_mp_fused module>, inputs) where torch_mp has it
  torch_mp_load    the torch_mp module saved (torch.jit.save) and read back by torch_mp.load(path, device), which
                   replays CUDA graphs by default, where torch_mp has load
Each column's time above is its call time. Beside it, per cell (--gpu-samples, --no-profile):
  host enqueue     perf_counter around one call after a synchronize, none after it: the host's time to launch a
                   forward (on a CPU, the whole call)
  GPU time         the queue pre-filled: synchronize, torch.cuda._sleep (3x the host enqueue time), start event,
                   the call, end event; the GPU reaches the start event only after the host has enqueued the whole
                   forward, so start-to-end is the GPU's time alone. Each sample checks that the host finished
                   before the sleep did (else the sleep doubles and the sample is taken again) and the cell records
                   it. A TorchScript call's call time is max(host enqueue, GPU time) and drifts with the host
  kernels          one torch.profiler run of one forward after the timing: CUDA kernels, memcpy and memset events,
                   their summed durations (busy) and the union of their intervals; host ops (outermost aten/prim/
                   torch_mp ops) and graph launches. A replayed CUDA graph (torch_mp_graphs, torch_mp_load,
                   compile_ro) shows one cudaGraphLaunch on the host and its kernels on the device: kineto reports
                   graph kernels with the launch's correlation id, so they are counted like any others (graphs
                   recorded before the first profiler session could crash it: a CUDA run opens an empty session
                   first, torch.profiler._utils._init_for_cuda_graphs). TEARDOWN_CUPTI=1 unless set: else
                   CUPTI stays attached after the first profile and slows every later launch. On a CPU: host ops
Per row also: FLOPs of one forward (torch.utils.flop_counter on the fp32 eager model), achieved TFLOP/s per column,
the device's peak (an 8192^3 fp16/bf16 torch.mm, once per run), ratios vs fp32_ts / compile_default / compile_ro,
and accuracy against fp32 eager (TF32 off; --reference-precision) on a fresh input: cosine and max relative error
of the first output (BERT: last_hidden_state).

Order and limits: per dtype (in the order given), first every cheap column for every model and batch, then the
torch.compile columns; fp32_ts is measured once per model and batch and shared by the dtypes' rows. Each cell is
written to --out when it ends (and marked "running" while it runs). After --deadline-s, compile columns are skipped;
after --hard-deadline-s, everything. A failing column records its error and the run goes on; a crash (segfault)
leaves the "running" mark, and a rerun with --resume OUT --out OUT records it as crashed and carries on
(benchmarks/gpu_session.sh does this by itself).

benchmarks/harness/ times the calls (time_interleaved: warm-up by count and seconds, CUDA events on a GPU), limits a
compile's time, compares outputs, names the machine and the commit, writes the JSON whole and renders the tables.
This script keeps its cases and columns, the GPU time with the queue pre-filled, the profile's reading, and its one
JSON file per run (its rows and cells: what --resume, --render, --summary and gpu_session.sh read).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import importlib.metadata
import importlib.util
import inspect
import itertools
import json
import os
import platform
import signal
import socket
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# inductor reads these when it is imported: set before importing torch (an explicit environment wins)
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(os.cpu_count() or 1))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/torch_mp_inductor_cache")
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "triton"))
# kineto leaves CUPTI attached after a profiler session unless TEARDOWN_CUPTI is "1", and an attached CUPTI slows
# every later launch (pytorch #144455: 10-20%): each cell's profile would slow the cells timed after it. Teardown
# with CUDA graphs crashed before CUDA 12.6 (torch.compile's cudagraphs set "0" there themselves)
os.environ.setdefault("TEARDOWN_CUPTI", "1")
sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))  # registry.py and torchvision_shim.py
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # the tests' models and helpers
sys.path.append(ROOT)  # torch_mp from the checkout where it is not installed (an in-place build)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from harness import (command_line, compare, cpu_name, first, git_commit, markdown_table, nvidia_smi,  # noqa: E402
                     time_interleaved, time_limit, write_json)

PAIRED_WINDOWS = 5  # windows per cell, alternating with fp32_ts (time_paired)
SLEEP_FACTOR = 3.0  # GPU-time samples: the sleep before the start event, in host enqueue times
SLEEP_DOUBLINGS = 4  # a sample whose host outlasted the sleep is taken again with twice the sleep, this often
CHEAP_COLUMNS = ["fp32_ts", "autocast", "lowp_ts", "torch_mp", "torch_mp_plain", "torch_mp_cudnn", "torch_mp_fused",
                 "torch_mp_graphs", "torch_mp_load"]
COMPILE_COLUMNS = ["compile_default", "compile_ro"]
ALL_COLUMNS = ["fp32_ts", "autocast", "lowp_ts", "compile_default", "compile_ro", "torch_mp", "torch_mp_plain",
               "torch_mp_cudnn", "torch_mp_fused", "torch_mp_graphs", "torch_mp_load"]
TORCH_MP_COLUMNS = ["torch_mp", "torch_mp_plain", "torch_mp_cudnn", "torch_mp_fused", "torch_mp_graphs",
                    "torch_mp_load"]
DTYPE_NAMES = ("fp16", "bf16")


class ModelSpec(NamedTuple):
    label: str
    zoo: Optional[str]  # tests/zoo/registry.py entry
    kind: str  # "image" or "tokens"
    size: Tuple[int, ...]  # image (C, H, W) or (seq,)
    smoke_size: Tuple[int, ...]
    conv: bool  # channels_last for lowp_ts


MODELS: Dict[str, ModelSpec] = {
    "resnet50": ModelSpec("ResNet-50", "tv.resnet50", "image", (3, 224, 224), (3, 64, 64), True),
    "resnet50_ibn_a": ModelSpec("ResNet-50 IBN-a", "resnet50_ibn_a", "image", (3, 384, 128), (3, 96, 32), True),
    "vit_b_16": ModelSpec("ViT-B/16", "tv.vit_b_16", "image", (3, 224, 224), (3, 224, 224), False),
    "bert_base": ModelSpec("BERT-base", "hf.bert-base", "tokens", (128,), (32,), False),
    "convbnnet": ModelSpec("ConvBnNet", None, "image", (3, 32, 32), (3, 32, 32), True),
}
BERT_VOCAB = 30522  # BertConfig's default vocabulary

# The targets the render evaluates: (description, dtype, model, batch, column, baseline column, minimum ratio,
# measure). measure "call": the call times' ratio (paired with fp32_ts where both were, see derive); "gpu": the GPU
# times' (queue pre-filled), base / column, so ">= 1.0x" reads "GPU time <= the baseline's"
TARGETS = [
    ("ResNet-50 b32 fp16: torch_mp call >= 2.5x fp32_ts", "fp16", "resnet50", 32, "torch_mp", "fp32_ts", 2.5, "call"),
    ("ResNet-50 b32 fp16: torch_mp call >= 1.0x compile_default", "fp16", "resnet50", 32, "torch_mp",
     "compile_default", 1.0, "call"),
    ("ResNet-50 IBN-a b32 fp16: torch_mp call >= 2.0x fp32_ts", "fp16", "resnet50_ibn_a", 32, "torch_mp", "fp32_ts",
     2.0, "call"),
    ("ResNet-50 IBN-a b32 fp16: torch_mp GPU time <= compile_default's", "fp16", "resnet50_ibn_a", 32, "torch_mp",
     "compile_default", 1.0, "gpu"),
    ("ResNet-50 IBN-a b32 fp16: torch_mp GPU time <= compile_ro's", "fp16", "resnet50_ibn_a", 32, "torch_mp",
     "compile_ro", 1.0, "gpu"),
    ("BERT-base b32 fp16: torch_mp GPU time <= compile_default's", "fp16", "bert_base", 32, "torch_mp",
     "compile_default", 1.0, "gpu"),
    ("BERT-base b32 fp16: torch_mp call >= 1.0x compile_default", "fp16", "bert_base", 32, "torch_mp",
     "compile_default", 1.0, "call"),
    ("ResNet-50 b1 fp16: torch_mp_graphs call >= 1.0x compile_ro", "fp16", "resnet50", 1, "torch_mp_graphs",
     "compile_ro", 1.0, "call"),
    ("BERT-base b1 fp16: torch_mp_graphs call >= 1.0x compile_ro", "fp16", "bert_base", 1, "torch_mp_graphs",
     "compile_ro", 1.0, "call"),
]


def row_key(model: str, dtype: str, batch: int) -> str:
    return f"{model}|{dtype}|b{batch}"


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def short_error(error: BaseException) -> str:
    """Type and the first lines of the message (torch.compile wraps the cause after a 'raised:' line)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = " / ".join(lines[:4])
    return f"{type(error).__name__}: {text[:500]}"


# ----------------------------------------------------------------------------------------------------------------
# measuring


class Bench:
    """Everything one measuring run needs: arguments, device, clock, the JSON being written."""

    def __init__(self, args):
        import torch

        self.torch = torch
        self.args = args
        self.device = args.device
        self.cuda = args.device == "cuda"
        self.start = time.monotonic()
        self.run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
        self.data: Dict[str, Any] = {"format": "torch_mp cuda_speed 1", "runs": [], "peak": {}, "rows": {}}
        self.done: set = set()  # (row key, column) attempted in a --resume file: not measured again
        for path in args.resume or []:
            try:
                merge_into(self.data, load_json(path))
            except Exception as error:  # noqa: BLE001 - a bad resume file is reported, the run goes on
                print(f"cannot resume from {path}: {short_error(error)}", flush=True)
        self.profiler_sessions = 0  # torch.profiler runs so far in this process (see kernels_per_forward)
        self.profiler_crashed = False  # a --resume file holds a profiler run the process died in
        for key, row in self.data["rows"].items():
            for column, cell in row.get("columns", {}).items():
                status = cell.get("status")
                if status == "ok" or (status == "error" and not args.retry_errors):
                    self.done.add((key, column))
                if (cell.get("profile") or {}).get("status") == "running":
                    cell["profile"] = {"status": "crashed", "reason": "the process died in this profiler run"}
                    self.profiler_crashed = True
        self._cycles_per_ms: Optional[float] = None  # torch.cuda._sleep's rate, measured at the first GPU time
        self.models: Dict[str, Any] = {}
        self.shared: Dict[Tuple[str, int], Dict[str, Any]] = {}  # (model, batch): flops, reference, fp32_ts cell
        self.torch_mp = None
        self.torch_mp_error: Optional[str] = None
        try:
            import torch_mp

            self.torch_mp = torch_mp
        except Exception as error:  # noqa: BLE001 - baseline columns are still worth measuring
            self.torch_mp_error = "import torch_mp failed: " + short_error(error)
            print(self.torch_mp_error, flush=True)
        self.meta = self.collect_meta()
        self.data["runs"].append(self.meta)
        self.save()

    # -- clock -----------------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def past(self, limit: Optional[float]) -> bool:
        return limit is not None and self.elapsed() >= limit

    def log(self, text: str) -> None:
        print(f"[{self.elapsed():6.0f}s] {text}", flush=True)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    # -- metadata --------------------------------------------------------------------------------------------
    def collect_meta(self) -> Dict[str, Any]:
        torch = self.torch
        meta: Dict[str, Any] = {
            "run_id": self.run_id,
            "date": now_iso(),
            "argv": sys.argv,
            "command": command_line(),
            "host": socket.gethostname(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cpu_count": os.cpu_count(),
            "cpu": cpu_name(),
            "device": self.device,
            "smoke": bool(self.args.smoke),
            "grad_mode": self.args.grad_mode,
            "inductor_freezing": not self.args.no_inductor_freezing,
            "env": {k: os.environ.get(k) for k in ("TORCHINDUCTOR_COMPILE_THREADS", "TORCHINDUCTOR_CACHE_DIR",
                                                   "TRITON_CACHE_DIR", "CUDA_VISIBLE_DEVICES", "TEARDOWN_CUPTI",
                                                   "DISABLE_CUPTI_LAZY_REINIT")},
            "gpu_samples": self.args.gpu_samples,
            "profile": not self.args.no_profile,
            "inductor_cache_warm": dir_nonempty(os.environ["TORCHINDUCTOR_CACHE_DIR"]),
            "reference_precision": self.args.reference_precision,
            "torch_mp_import": self.torch_mp_error or "ok",
            "git": git_commit(ROOT),
        }
        try:
            meta["cudnn"] = torch.backends.cudnn.version()
        except Exception:  # noqa: BLE001
            meta["cudnn"] = None
        meta["tf32"] = {"cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                        "float32_matmul_precision": torch.get_float32_matmul_precision()}
        for library in ("torchvision", "transformers", "timm", "triton", "numpy"):
            try:  # installed versions, without the imports' seconds
                meta[library] = importlib.metadata.version(library)
            except Exception:  # noqa: BLE001
                meta[library] = "not installed"
        if self.torch_mp is not None:
            meta["torch_mp"] = getattr(self.torch_mp, "__version__", "?")
            meta["torch_mp_convert_kwargs"] = sorted(convert_fields(self.torch_mp))
            meta["torch_mp_has_cuda_graphs"] = hasattr(self.torch_mp, "cuda_graphs")
            meta["torch_mp_has_load"] = hasattr(self.torch_mp, "load")
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            meta["device_name"] = torch.cuda.get_device_name(0)
            meta["device_memory_gib"] = round(props.total_memory / 2**30, 1)
            meta["device_capability"] = f"{props.major}.{props.minor}"
            meta["sm_count"] = props.multi_processor_count
            meta["driver"] = nvidia_smi("driver_version")
            meta["nvidia_smi"] = nvidia_smi("name,driver_version,clocks.max.sm,power.limit,memory.total")
        else:
            meta["device_name"] = meta["cpu"]
            meta["driver"] = None
            meta["torch_threads"] = torch.get_num_threads()
        return meta

    # -- JSON ------------------------------------------------------------------------------------------------
    def save(self) -> None:
        self.meta["elapsed_s"] = round(self.elapsed(), 1)
        for row in self.data["rows"].values():
            derive(row)
        write_json(self.args.out, self.data)

    def row(self, model: str, dtype: str, batch: int) -> Dict[str, Any]:
        key = row_key(model, dtype, batch)
        row = self.data["rows"].setdefault(key, {"model": model, "dtype": dtype, "batch": batch, "columns": {}})
        spec = MODELS[model]
        row["label"] = spec.label
        row["input"] = describe_input(spec, batch, self.args.smoke)
        return row

    def record(self, model: str, dtype: str, batch: int, column: str, cell: Dict[str, Any]) -> None:
        cell.setdefault("run_id", self.run_id)
        cell.setdefault("date", now_iso())
        self.row(model, dtype, batch)["columns"][column] = cell
        self.save()
        status = cell["status"]
        if status == "ok":
            extra = ""
            acc = cell.get("accuracy") or {}
            if "cosine" in acc:
                extra += f"  cos {acc['cosine']:.6f} maxrel {acc['max_rel_error']:.2e}"
            for name in ("compile_s", "convert_s", "setup_s"):
                if name in cell:
                    extra += f"  {name} {cell[name]:.1f}"
                    break
            for name, tag in (("gpu_ms", "gpu"), ("host_ms", "host")):
                if cell.get(name) is not None:
                    extra += f"  {tag} {cell[name]:.3f} ms"
            if (cell.get("profile") or {}).get("status") == "ok":
                extra += "  " + kernel_text(cell["profile"])
            self.log(f"{model} {dtype} b{batch} {column}: {cell['ms']:.3f} ms{extra}")
        else:
            self.log(f"{model} {dtype} b{batch} {column}: {status.upper()} {cell.get('reason') or cell.get('error')}")

    # -- models and inputs -----------------------------------------------------------------------------------
    def model(self, name: str):
        if name not in self.models:
            self.log(f"building {name}")
            model, builder = build_model(name)
            self.models[name] = (model.to(self.device).eval(), builder)
        return self.models[name]

    def inputs(self, name: str, batch: int, seed: int) -> Tuple[Any, ...]:
        return make_inputs(self.torch, MODELS[name], batch, self.device, seed, self.args.smoke)

    def grad_ctx(self):
        return self.torch.inference_mode() if self.args.grad_mode == "inference_mode" else self.torch.no_grad()

    def repeats(self, batch: int) -> Tuple[int, int]:
        if self.args.smoke:
            return 1, 3
        if batch <= 4:
            return self.args.warmup_small, self.args.repeats_small
        return self.args.warmup_large, self.args.repeats_large

    # -- timing ----------------------------------------------------------------------------------------------
    def time_paired(self, fn: Callable, reference: Callable, sets: List[Tuple[Any, ...]], warmup: int,
                    repeats: int) -> Tuple[List[float], List[float]]:
        """(fn's times, reference's times), timed in alternating windows of a few calls each: a stretch where the
        host slows (BERT-base's TorchScript calls, launch-bound, went from 2.8 to 5.4 ms within a second on an
        H200, benchmarks/cuda_timing_probe.py) slows both alike, so their ratio holds where the times do not."""
        windows = max(1, min(PAIRED_WINDOWS, repeats))
        times: List[float] = []
        reference_times: List[float] = []
        self.time_calls(reference, sets, warmup, 0)
        for window in range(windows):
            calls = repeats // windows + (1 if window < repeats % windows else 0)
            times += self.time_calls(fn, sets, warmup if window == 0 else 0, calls, warm_s=window == 0)
            reference_times += self.time_calls(reference, sets, 0, calls, warm_s=False)
        return times, reference_times

    def time_calls(self, fn: Callable, sets: List[Tuple[Any, ...]], warmup: int, repeats: int,
                   warm_s: bool = True) -> List[float]:
        """ms of `repeats` calls of fn, the input sets in turn (CUDA events around each call on a GPU), after at
        least `warmup` calls and, with warm_s, --warmup-s seconds of them: with the count alone, one graph timed
        2.97-5.09 ms in one run (BERT-base b32 as torch_mp / _plain / _cudnn, H200, 2026-11-26), each right after a
        CPU-bound conversion that lets the GPU idle (its clocks drop from 1980 MHz to a few hundred when idle)."""
        turns = itertools.cycle(sets)
        with self.grad_ctx():
            timing = time_interleaved({"fn": lambda: fn(*next(turns))}, repeats, warmup=warmup, gpu_time=self.cuda,
                                      warmup_s=0.0 if self.args.smoke or not warm_s else self.args.warmup_s)
        return timing["fn"].samples_ms

    # -- host time and GPU time apart, kernels per forward -----------------------------------------------------
    def host_and_gpu_time(self, fn: Callable, sets: List[Tuple[Any, ...]], n: int, cell: Dict[str, Any]) -> None:
        """The cell's host enqueue times and (CUDA) GPU times, n of each; a failure is the cell's gpu_time_error."""
        if n <= 0:
            return
        try:
            with self.grad_ctx():
                host = self.enqueue_times(fn, sets, n)
                cell.update(host_ms=statistics.median(host), host_times_ms=[round(t, 4) for t in host])
                if self.cuda:
                    cell.update(self.gpu_times(fn, sets, n, cell["host_ms"]))
        except Exception as error:  # noqa: BLE001 - the call time stands
            cell["gpu_time_error"] = short_error(error)

    def enqueue_times(self, fn: Callable, sets: List[Tuple[Any, ...]], n: int) -> List[float]:
        """ms from the call to its return, a synchronize before each call and none inside: the host's time to
        enqueue one forward (on a CPU, the whole call)."""
        times = []
        for i in range(n):
            self.sync()
            t0 = time.perf_counter()
            fn(*sets[i % len(sets)])
            times.append(1e3 * (time.perf_counter() - t0))
        self.sync()
        return times

    def cycles_per_ms(self) -> float:
        """torch.cuda._sleep's spin cycles per ms on this GPU: the median of 5 sleeps of 10^6 cycles, once."""
        if self._cycles_per_ms is None:
            torch = self.torch
            rates = []
            for _ in range(5):
                start, end = timing_event(torch), timing_event(torch)
                start.record()
                torch.cuda._sleep(1_000_000)
                end.record()
                end.synchronize()
                rates.append(1_000_000 / start.elapsed_time(end))
            self._cycles_per_ms = statistics.median(rates)
            self.meta["sleep_cycles_per_ms"] = round(self._cycles_per_ms)
        return self._cycles_per_ms

    def prefilled_sample(self, fn: Callable, args: Tuple[Any, ...], sleep_ms: float) -> Tuple[float, float, float]:
        """(GPU ms, slept ms, host ms) of one call queued behind a GPU sleep of about sleep_ms. Events: `before`
        the sleep, `start` after it, `end` after the call. host ms runs from before `before` is enqueued to after
        `end` is: the GPU reaches `start` at least slept ms after that host start, so host ms < slept ms means the
        whole forward was enqueued before the GPU began it, and start-to-end is the GPU's time alone."""
        torch = self.torch
        cycles = int(sleep_ms * self.cycles_per_ms())
        before, start, end = timing_event(torch), timing_event(torch), timing_event(torch)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        before.record()
        torch.cuda._sleep(cycles)
        start.record()
        fn(*args)
        end.record()
        host_ms = 1e3 * (time.perf_counter() - t0)
        end.synchronize()
        return start.elapsed_time(end), before.elapsed_time(start), host_ms

    def gpu_times(self, fn: Callable, sets: List[Tuple[Any, ...]], n: int, host_ms: float) -> Dict[str, Any]:
        """n prefilled samples, inputs rotated, the sleep SLEEP_FACTOR host enqueue times; a sample whose host
        outlasted its sleep is taken again with the sleep doubled (kept for the rest), SLEEP_DOUBLINGS times per
        cell at most; after 3 such samples and none prefilled the cell stops trying (a forward that waits for the
        GPU, or one that fills the launch queue, is never prefilled). GPU time: the median of the prefilled ones."""
        sleep_ms = max(0.05, SLEEP_FACTOR * host_ms)
        prefilled, margins, redone, unfilled = [], [], 0, 0
        for i in range(n):
            while True:
                gpu_ms, slept_ms, sample_host_ms = self.prefilled_sample(fn, sets[i % len(sets)], sleep_ms)
                if sample_host_ms < slept_ms or redone == SLEEP_DOUBLINGS:
                    break
                sleep_ms *= 2
                redone += 1
            if sample_host_ms < slept_ms:
                prefilled.append(gpu_ms)
                margins.append(slept_ms - sample_host_ms)
            else:
                unfilled += 1
                if unfilled >= 3 and not prefilled:
                    break
        check = {"samples": len(prefilled) + unfilled, "prefilled": len(prefilled), "redone": redone,
                 "not_prefilled": unfilled, "sleep_factor": SLEEP_FACTOR, "final_sleep_ms": round(sleep_ms, 3),
                 "min_margin_ms": round(min(margins), 3) if margins else None}
        if not prefilled:
            return {"gpu_prefill": check, "gpu_time_error": f"the host outlasted every sleep (up to {sleep_ms:.1f} "
                                                             "ms): does the forward wait for the GPU?"}
        return {"gpu_ms": statistics.median(prefilled), "gpu_min_ms": min(prefilled),
                "gpu_times_ms": [round(t, 4) for t in prefilled], "gpu_prefill": check}

    def kernels_per_forward(self, fn: Callable, args: Tuple[Any, ...], row: Dict[str, Any], column: str,
                            cell: Dict[str, Any]) -> None:
        """cell["profile"]: one profiled forward (profile_forward). The cell goes to disk first, marked: a process
        that dies in the profiler keeps the cell's times, and a --resume run profiles nothing more."""
        if self.args.no_profile:
            return
        if self.profiler_crashed:
            cell["profile"] = {"status": "skipped", "reason": "a profiler run crashed an earlier process"}
            return
        row["columns"][column] = dict(cell, run_id=self.run_id, date=now_iso(), profile={"status": "running"})
        self.save()
        try:
            cell["profile"] = dict(self.profile_forward(fn, args), status="ok")
        except Exception as error:  # noqa: BLE001 - the times stand
            cell["profile"] = {"status": "error", "error": short_error(error)}

    def profile_forward(self, fn: Callable, args: Tuple[Any, ...]) -> Dict[str, Any]:
        """One torch.profiler run (CPU activity, and CUDA on a GPU) around one warm call, read from its chrome
        trace by summarize_trace. sessions_before: profiler runs earlier in this process (were CUPTI to stay
        attached after one, TEARDOWN_CUPTI not "1", it would slow the launches of every cell timed after it)."""
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        sessions_before = self.profiler_sessions
        self.profiler_sessions += 1
        t0 = time.perf_counter()
        with self.grad_ctx():
            self.sync()
            with profile(activities=activities) as prof:
                fn(*args)
                self.sync()
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "trace.json")
            prof.export_chrome_trace(path)
            events = load_json(path).get("traceEvents", [])
        return dict(summarize_trace(events), profile_s=round(time.perf_counter() - t0, 3),
                    sessions_before=sessions_before, activities=[str(a).split(".")[-1] for a in activities])

    def peak(self, dtype_name: str) -> None:
        torch = self.torch
        if self.data["peak"].get(dtype_name, {}).get("status") == "ok":  # this run's, or a --resume file's
            return
        n = self.args.peak_n or (8192 if self.cuda else 1024)
        dtype = dtype_map(torch)[dtype_name]
        entry: Dict[str, Any] = {"n": n, "run_id": self.run_id, "device": self.meta.get("device_name")}
        try:
            with self.grad_ctx():
                a = torch.randn(n, n, device=self.device, dtype=dtype)
                b = torch.randn(n, n, device=self.device, dtype=dtype)
                times = self.time_calls(lambda: torch.mm(a, b), [()], 3, 10 if self.cuda else 3)
            ms = statistics.median(times)
            entry.update(status="ok", ms=ms, tflops=2 * n**3 / (ms * 1e-3) / 1e12,
                         best_tflops=2 * n**3 / (min(times) * 1e-3) / 1e12, times_ms=[round(t, 4) for t in times])
            del a, b
        except Exception as error:  # noqa: BLE001
            entry.update(status="error", error=short_error(error))
        self.data["peak"][dtype_name] = entry
        self.save()
        if entry["status"] == "ok":
            self.log(f"peak {dtype_name} {n}^3 matmul: {entry['tflops']:.1f} TFLOP/s (median), "
                     f"{entry['best_tflops']:.1f} best")
        else:
            self.log(f"peak {dtype_name}: ERROR {entry['error']}")

    # -- per (model, batch) things shared by the dtypes --------------------------------------------------------
    def shared_for(self, name: str, batch: int) -> Dict[str, Any]:
        key = (name, batch)
        if key in self.shared:
            return self.shared[key]
        torch = self.torch
        model, builder = self.model(name)
        shared: Dict[str, Any] = {"builder": builder}
        shared["example"] = self.inputs(name, batch, 0)
        shared["sets"] = [shared["example"]] + [self.inputs(name, batch, s) for s in range(1, self.args.input_sets)]
        shared["fresh"] = self.inputs(name, batch, 1000)  # accuracy input: never used for tracing or conversion
        try:
            shared["flops"], shared["flops_by_op"] = count_flops(torch, model, shared["example"])
            shared["flops_method"] = (f"FlopCounterMode, fp32 eager, {self.device}, batch {batch}, attention through "
                                      "the math SDPA backend and MultiheadAttention's fast path off (both invisible "
                                      "to the counter otherwise)")
        except Exception as error:  # noqa: BLE001
            shared["flops"], shared["flops_by_op"] = None, None
            shared["flops_method"] = "failed: " + short_error(error)
        try:
            with torch.no_grad(), reference_precision(torch, self.args.reference_precision):
                shared["reference"] = first(model(*shared["fresh"])).detach().float().clone()
        except Exception as error:  # noqa: BLE001
            shared["reference"] = None
            shared["reference_error"] = short_error(error)
        self.shared[key] = shared
        return shared

    # -- one column ------------------------------------------------------------------------------------------
    def measure(self, name: str, dtype_name: str, batch: int, column: str, compile_phase: bool) -> None:
        torch = self.torch
        key = row_key(name, dtype_name, batch)
        if (key, column) in self.done:
            status = self.data["rows"][key]["columns"][column].get("status")
            self.log(f"{name} {dtype_name} b{batch} {column}: {status} in the --resume file, not run again")
            return
        if self.past(self.args.hard_deadline_s):
            self.record(name, dtype_name, batch, column,
                        {"status": "skipped", "reason": f"hard deadline {self.args.hard_deadline_s:.0f} s passed"})
            return
        if compile_phase and self.past(self.args.deadline_s):
            self.record(name, dtype_name, batch, column,
                        {"status": "skipped", "reason": f"deadline {self.args.deadline_s:.0f} s passed"})
            return
        in_torch_mp = column in TORCH_MP_COLUMNS
        family = [c for c in ALL_COLUMNS if (c in TORCH_MP_COLUMNS) == in_torch_mp]
        crashes = sum(1 for row in self.data["rows"].values() for c, cell in row.get("columns", {}).items()
                      if c in family and cell.get("phase") == "crashed")
        if crashes >= self.args.max_crashes:
            self.record(name, dtype_name, batch, column,
                        {"status": "skipped", "reason": f"{crashes} cells of this column family crashed the process "
                                                        f"(--max-crashes {self.args.max_crashes})"})
            return
        if column == "fp32_ts":
            cached = self.shared.get((name, batch), {}).get("fp32_ts_cell") or self.resumed_fp32_ts(name, batch)
            if cached is not None:  # the same measurement serves every dtype's row
                cell = dict(cached, copied_from=f"{cached.get('measured_in', '?')} row")
                self.record(name, dtype_name, batch, column, cell)
                return
        reason = self.unsupported(column)
        if reason is not None:
            self.record(name, dtype_name, batch, column, {"status": "unsupported", "reason": reason})
            return
        dtype = dtype_map(torch)[dtype_name]
        # on disk while it runs: a process that dies here (a segfault) leaves it, and --resume records the crash
        row = self.row(name, dtype_name, batch)
        row["columns"][column] = {"status": "running", "run_id": self.run_id, "date": now_iso()}
        self.save()
        try:
            model, _ = self.model(name)
            shared = self.shared_for(name, batch)
        except Exception as error:  # noqa: BLE001 - e.g. a library missing: this model's cells fail, others run
            self.record(name, dtype_name, batch, column, {"status": "error", "phase": "building the model",
                                                          "error": short_error(error),
                                                          "traceback": traceback.format_exc()[-1500:]})
            return
        for field in ("flops", "flops_method", "flops_by_op", "builder"):
            row[field] = shared[field]
        cell: Dict[str, Any] = {"status": "error"}
        phase = "setup"
        fn = None
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        try:
            t0 = time.perf_counter()
            fn, setup = self.build_column(column, model, dtype, shared["example"], name, dtype_name, batch)
            cell.update(setup)
            phase = "first call"
            if column.startswith("compile"):
                limit = self.args.compile_timeout_s
                if self.args.hard_deadline_s is not None:
                    limit = min(limit, max(1.0, self.args.hard_deadline_s - self.elapsed()))
                t1 = time.perf_counter()
                with time_limit(limit), self.grad_ctx():
                    for i in range(3 if column == "compile_ro" else 1):  # reduce-overhead records on call 2-3
                        fn(*shared["sets"][i % len(shared["sets"])])
                    self.sync()
                cell["compile_s"] = round(time.perf_counter() - t1, 2)
                shutdown_compile_workers()
            else:
                with self.grad_ctx():
                    fn(*shared["example"])
                    self.sync()
            cell["setup_s"] = round(time.perf_counter() - t0, 2)
            phase = "timing"
            warmup, repeats = self.repeats(batch)
            reference = shared.get("fp32_ts_fn") if column != "fp32_ts" else None
            if reference is not None:
                times, reference_times = self.time_paired(fn, reference, shared["sets"], warmup, repeats)
                cell["paired_fp32_ts_ms"] = statistics.median(reference_times)
                cell["paired_speedup"] = cell["paired_fp32_ts_ms"] / statistics.median(times)
            else:
                times = self.time_calls(fn, shared["sets"], warmup, repeats)
            ms = statistics.median(times)
            cell.update(status="ok", ms=ms, min_ms=min(times), mean_ms=statistics.fmean(times),
                        p90_ms=sorted(times)[min(len(times) - 1, int(0.9 * len(times)))], n=len(times),
                        warmup=warmup, input_sets=len(shared["sets"]), times_ms=[round(t, 4) for t in times])
            if shared["flops"]:
                cell["tflops"] = shared["flops"] / (ms * 1e-3) / 1e12
            if self.cuda:
                cell["peak_memory_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
            phase = "accuracy"
            try:
                if shared.get("reference") is None:
                    raise RuntimeError("no fp32 reference: " + shared.get("reference_error", "?"))
                with self.grad_ctx():
                    out = first(fn(*shared["fresh"])).detach().float().clone()
                cell["accuracy"] = compare(shared["reference"], out)
            except Exception as error:  # noqa: BLE001 - the timing stands
                cell["accuracy_error"] = short_error(error)
            phase = "host and GPU time"
            self.host_and_gpu_time(fn, shared["sets"], min(self.args.gpu_samples, repeats), cell)
            phase = "profile"  # last: the profiler may leave CUPTI attached (profile_forward)
            self.kernels_per_forward(fn, shared["example"], row, column, cell)
        except Exception as error:  # noqa: BLE001 - each column fails alone
            cell.update(status="error", phase=phase, error=short_error(error),
                        traceback=traceback.format_exc()[-1500:])
            if column.startswith("compile"):
                shutdown_compile_workers()
        except KeyboardInterrupt:
            if cell.get("status") == "ok":  # timed already: the call time stands
                self.record(name, dtype_name, batch, column, dict(cell, interrupted=f"at {phase}"))
            else:
                self.record(name, dtype_name, batch, column,
                            {"status": "skipped", "reason": f"interrupted (timeout or signal) at {phase}"})
            raise
        finally:
            if column == "torch_mp_fused" and fn is not None:
                self.shared[(name, batch)]["fused_" + dtype_name] = fn
            if column == "torch_mp" and fn is not None and "torch_mp_load" in self.args.columns:
                self.shared[(name, batch)]["torch_mp_" + dtype_name] = fn
            fp32_ts_fn = fn if column == "fp32_ts" else None  # every other column of the row is timed beside it
            del fn
        if column == "fp32_ts" and cell["status"] == "ok":
            cell["measured_in"] = dtype_name
            self.shared[(name, batch)]["fp32_ts_cell"] = cell
            self.shared[(name, batch)]["fp32_ts_fn"] = fp32_ts_fn
        self.record(name, dtype_name, batch, column, cell)
        if column.startswith("compile"):
            torch._dynamo.reset()
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def unsupported(self, column: str) -> Optional[str]:
        """Why the column cannot run in this process, or None (checked before anything is built)."""
        if column not in TORCH_MP_COLUMNS or self.torch_mp is None:
            return None  # an import failure is an error of each torch_mp cell, not 'unsupported'
        params = convert_fields(self.torch_mp)
        if column in ("torch_mp_plain", "torch_mp_cudnn"):
            missing = [k for k in ("channels_last", "fuse_convolutions") if k not in params]
            if missing:
                return f"torch_mp.convert has no {', '.join(missing)} argument"
        if column == "torch_mp_graphs":
            if not hasattr(self.torch_mp, "cuda_graphs"):
                return "torch_mp has no cuda_graphs"
            if not self.cuda:
                return "CUDA graphs need --device cuda"
        if column == "torch_mp_load" and not hasattr(self.torch_mp, "load"):
            return "torch_mp has no load"
        return None

    def resumed_fp32_ts(self, name: str, batch: int) -> Optional[Dict[str, Any]]:
        """An fp32_ts cell of another dtype's row in the --resume data, measured on this run's device."""
        devices = {run.get("run_id"): run.get("device_name") for run in self.data["runs"]}
        for row in self.data["rows"].values():
            cell = row.get("columns", {}).get("fp32_ts") or {}
            if (row.get("model") == name and row.get("batch") == batch and cell.get("status") == "ok"
                    and devices.get(cell.get("run_id")) == self.meta.get("device_name")):
                return dict(cell, measured_in=cell.get("measured_in", row.get("dtype")))
        return None

    def build_column(self, column, model, dtype, example, name, dtype_name, batch):
        """(callable on fp32 inputs, setup facts)."""
        torch = self.torch
        device_type = "cuda" if self.cuda else "cpu"
        if column == "fp32_ts":
            with torch.no_grad():
                module = torch.jit.freeze(torch.jit.trace(model, example, strict=False, check_trace=False).eval())
            return module, {}
        if column == "autocast":
            def autocast(*args):
                with torch.autocast(device_type, dtype=dtype):
                    return model(*args)
            return autocast, {}
        if column == "lowp_ts":
            channels_last = MODELS[name].conv
            low = copy.deepcopy(model).to(dtype)
            if channels_last:
                low = low.to(memory_format=torch.channels_last)
            wrapper = CastInputs(low, dtype, channels_last).eval()
            with torch.no_grad():
                module = torch.jit.freeze(torch.jit.trace(wrapper, example, strict=False, check_trace=False).eval())
            return module, {"channels_last": channels_last}
        if column in COMPILE_COLUMNS:
            import torch._inductor.config as inductor_config

            inductor_config.freezing = not self.args.no_inductor_freezing
            torch._dynamo.reset()
            mode = "reduce-overhead" if column == "compile_ro" else None
            compiled = torch.compile(model, mode=mode, dynamic=False)
            mark_step = getattr(torch.compiler, "cudagraph_mark_step_begin", None)

            def run(*args):
                if mode is not None and mark_step is not None:
                    mark_step()
                with torch.autocast(device_type, dtype=dtype):
                    return compiled(*args)
            return run, {"mode": mode or "default", "freezing": inductor_config.freezing}
        # torch_mp columns
        if self.torch_mp is None:
            raise RuntimeError(self.torch_mp_error)
        torch_mp = self.torch_mp
        params = convert_fields(torch_mp)
        kwargs: Dict[str, Any] = {"progress": False} if "progress" in params else {}
        if column == "torch_mp_plain":
            kwargs.update(channels_last=False, fuse_convolutions=False)
        if column == "torch_mp_cudnn":
            kwargs["fuse_convolutions"] = True
        if column == "torch_mp_fused":
            kwargs["kernels"] = "fused"
        if column == "torch_mp_graphs":
            fused = self.shared.get((name, batch), {}).pop("fused_" + dtype_name, None)
            setup: Dict[str, Any] = {}
            t0 = time.perf_counter()
            if fused is None:  # torch_mp_fused did not run in this process (or failed): convert here
                fused = torch_mp.convert(model, example, dtype, kernels="fused", **kwargs)
                setup["convert_s"] = round(time.perf_counter() - t0, 2)
                t0 = time.perf_counter()
            with self.grad_ctx():
                graphed = torch_mp.cuda_graphs(fused, example)
            setup["capture_s"] = round(time.perf_counter() - t0, 2)
            return graphed, setup
        if column == "torch_mp_load":
            module = self.shared.get((name, batch), {}).pop("torch_mp_" + dtype_name, None)
            setup = {}
            t0 = time.perf_counter()
            if module is None:  # the torch_mp column did not run in this process (or failed): convert here
                module = torch_mp.convert(model, example, dtype, **kwargs)
                setup["convert_s"] = round(time.perf_counter() - t0, 2)
            with tempfile.TemporaryDirectory() as directory:
                path = os.path.join(directory, "torch_mp.pt")
                torch.jit.save(module, path)
                t0 = time.perf_counter()
                loaded = torch_mp.load(path, self.device)
            setup["load_s"] = round(time.perf_counter() - t0, 2)
            return loaded, setup
        t0 = time.perf_counter()
        module = torch_mp.convert(model, example, dtype, **kwargs)
        setup = {"convert_s": round(time.perf_counter() - t0, 2),
                 "kwargs": {k: v for k, v in kwargs.items() if k != "progress"}}
        return module, setup

    # -- the run ---------------------------------------------------------------------------------------------
    def run(self) -> None:
        args = self.args
        torch = self.torch
        if self.cuda and not torch.cuda.is_available():
            raise SystemExit("--device cuda but torch.cuda.is_available() is False (use --device cpu --smoke)")
        if self.cuda and not args.no_profile:
            # a CUDA graph recorded before the process's first profiler session can crash a later one (pytorch
            # #75504, PR #100441): an empty session first, before torch_mp_graphs or compile_ro record any
            try:
                from torch.profiler._utils import _init_for_cuda_graphs

                _init_for_cuda_graphs()
            except Exception as error:  # noqa: BLE001 - recorded; the graph columns' profiles may then fail
                self.meta["profiler_init_error"] = short_error(error)
        if not args.no_peak:
            for dtype_name in args.dtypes:
                self.peak(dtype_name)
        compile_models = args.compile_models if args.compile_models is not None else args.models
        compile_dtypes = args.compile_dtypes if args.compile_dtypes is not None else args.dtypes
        cheap = [c for c in args.columns if c in CHEAP_COLUMNS]
        compiles = [c for c in args.columns if c in COMPILE_COLUMNS]
        # priority: per dtype in the order given, first every cheap column of every model and batch, then the
        # torch.compile columns (which --deadline-s cuts off)
        for dtype_name in args.dtypes:
            for name in args.models:
                for batch in args.batches:
                    for column in cheap:
                        self.measure(name, dtype_name, batch, column, compile_phase=False)
            for name in args.models:
                for batch in args.batches:
                    for column in compiles:
                        if name not in compile_models or dtype_name not in compile_dtypes:
                            reason = "not in --compile-models / --compile-dtypes"
                        elif column == "compile_ro" and batch not in args.ro_batches:
                            reason = f"batch not in --ro-batches {args.ro_batches}"
                        elif column == "compile_ro" and not self.cuda:
                            reason = "reduce-overhead (CUDA graphs) needs --device cuda"
                        else:
                            self.measure(name, dtype_name, batch, column, compile_phase=True)
                            continue
                        if (row_key(name, dtype_name, batch), column) not in self.done:
                            self.record(name, dtype_name, batch, column, {"status": "skipped", "reason": reason})
        self.meta["finished"] = now_iso()
        self.save()
        self.log(f"done; results in {args.out}")


# ----------------------------------------------------------------------------------------------------------------
# helpers used while measuring


def dtype_map(torch):
    return {"fp16": torch.float16, "bf16": torch.bfloat16}


def convert_fields(torch_mp) -> set:
    """The keyword arguments torch_mp.convert takes: its own, and ConversionOptions' fields where it passes
    **option_fields on to them (since its one options type: inspecting convert alone misses them)."""
    fields = set(inspect.signature(torch_mp.convert).parameters)
    options = getattr(torch_mp, "ConversionOptions", None)
    if options is not None and "option_fields" in fields:
        fields |= set(inspect.signature(options).parameters)
    return fields


def timing_event(torch):
    return torch.cuda.Event(enable_timing=True)


# chrome-trace categories (lower-cased; kineto's older names too) of device events and of CUDA API calls
DEVICE_EVENT_KINDS = {"kernel": "kernels", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset",
                      "memset": "memset"}
CUDA_API_CATEGORIES = ("cuda_runtime", "cuda_driver", "runtime", "driver")
# cuDNN's own layout conversions (an NCHW tensor into an NHWC convolution, or back): inside a chain that
# channels_last keeps NHWC there should be none; ATen's contiguous copies show as copy kernels (elementwise "copy")
LAYOUT_KERNEL_MARKS = ("nchwtonhwc", "nhwctonchw")
TOP_KERNELS = 12


def summarize_trace(events: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One profiled forward from its chrome-trace events (ts and dur in us): how many device kernels, memcpy and
    memset events ran, their summed durations (busy_ms), the union of their intervals (union_ms: below busy_ms
    where streams overlapped), first start to last end (span_ms: busy plus the GPU's idle gaps), the streams; on
    the host the outermost ops (host_ops) and the kernel and graph launches of the CUDA runtime and driver;
    categories: how many events of each category the trace held (to read a trace these rules miss); layout_kernels:
    cuDNN's NCHW <-> NHWC conversion kernels; top_kernels: [name, count, ms] of the kernels that took longest."""
    counts = {kind: 0 for kind in set(DEVICE_EVENT_KINDS.values())}
    categories: Dict[str, int] = {}
    by_name: Dict[str, List[float]] = {}  # kernel name -> [count, summed us]
    intervals, streams = [], set()
    launches = graph_launches = 0
    for e in events:
        category = str(e.get("cat", "")).lower()
        categories[category] = categories.get(category, 0) + 1
        kind = DEVICE_EVENT_KINDS.get(category)
        if kind is not None and e.get("ph") == "X":
            counts[kind] += 1
            intervals.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
            streams.add(str((e.get("args") or {}).get("stream")))
            if kind == "kernels":
                tally = by_name.setdefault(str(e.get("name", "")), [0, 0.0])
                tally[0] += 1
                tally[1] += float(e.get("dur", 0))
        elif category in CUDA_API_CATEGORIES:
            name = e.get("name", "")
            graph_launches += "GraphLaunch" in name
            launches += "LaunchKernel" in name
    top = sorted(by_name.items(), key=lambda item: -item[1][1])[:TOP_KERNELS]
    summary: Dict[str, Any] = dict(counts, host_ops=outermost_ops(events), kernel_launches=launches,
                                   graph_launches=graph_launches, streams=len(streams), categories=categories,
                                   layout_kernels=sum(count for name, (count, _) in by_name.items()
                                                      if any(mark in name.lower() for mark in LAYOUT_KERNEL_MARKS)),
                                   top_kernels=[[name[:120], count, round(us / 1e3, 4)] for name, (count, us) in top])
    if intervals:
        summary.update(busy_ms=sum(end - start for start, end in intervals) / 1e3,
                       union_ms=union_length(intervals) / 1e3,
                       span_ms=(max(end for _, end in intervals) - min(start for start, _ in intervals)) / 1e3)
    return summary


def outermost_ops(events: List[Dict[str, Any]]) -> int:
    """Host ops with a namespaced name (aten::, prim::, torch_mp::) not inside another such op of their thread:
    the ops a forward dispatches (a module's own record_function ranges, "forward", do not count)."""
    ops = sorted(((float(e["ts"]), float(e.get("dur", 0)), e.get("tid")) for e in events
                  if str(e.get("cat", "")).lower() == "cpu_op" and "::" in e.get("name", "")),
                 key=lambda op: (op[0], -op[1]))
    ends: Dict[Any, float] = {}  # per thread: where its current outermost op ends
    count = 0
    for start, duration, thread in ops:
        if start >= ends.get(thread, float("-inf")):
            count += 1
            ends[thread] = start + duration
    return count


def union_length(intervals: List[Tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def import_torchvision():
    from torchvision_shim import import_torchvision as shim

    return shim()


def shutdown_compile_workers() -> None:
    """Idle inductor compile workers would hold CPU while the next column is timed."""
    try:
        from torch._inductor.async_compile import shutdown_compile_workers as shutdown

        shutdown()
    except Exception:  # noqa: BLE001
        pass


def build_model(name: str):
    """(fp32 eval model, how it was built): tests/zoo/registry.py's entry where there is one, else direct."""
    import torch

    spec = MODELS[name]
    if spec.zoo is not None:
        try:
            import registry

            family = {"tv.": registry.torchvision_models, "hf.": registry.transformers_models}
            entries = next((f for prefix, f in family.items() if spec.zoo.startswith(prefix)), registry.own_models)()
            return registry.build_model(entries[spec.zoo]), f"tests/zoo/registry.py:{spec.zoo}"
        except Exception as error:  # noqa: BLE001 - e.g. torch_mp not built: registry imports torch_mp.models
            fallback = f"direct (registry failed: {short_error(error)[:120]})"
    else:
        fallback = "direct"
    torch.manual_seed(0)
    if name in ("resnet50", "vit_b_16"):
        model = getattr(import_torchvision().models, name)()
        with torch.no_grad():  # torchvision's ViT head is all zeros: random values, as the zoo does
            for parameter in model.parameters():
                if parameter.dim() >= 2 and not parameter.any():
                    parameter.normal_(0.0, 0.02)
    elif name == "bert_base":
        import_torchvision()
        import transformers as hf

        model = hf.BertModel(hf.BertConfig(torchscript=True, return_dict=False))
    elif name == "resnet50_ibn_a":
        model = load_file("torch_mp", "models.py").resnet50_ibn_a()
    else:
        model = load_file("tests", "python", "small_models.py").ConvBnNet()
    return model.eval(), fallback


def load_file(*path: str):
    """A Python file of this tree as a module, without importing the torch_mp package (which needs the built
    extension)."""
    spec = importlib.util.spec_from_file_location(path[-1][:-3], os.path.join(ROOT, *path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_inputs(torch, spec: ModelSpec, batch: int, device: str, seed: int, smoke: bool) -> Tuple[Any, ...]:
    generator = torch.Generator().manual_seed(seed)
    size = spec.smoke_size if smoke else spec.size
    if spec.kind == "tokens":
        seq = size[0]
        ids = torch.randint(0, BERT_VOCAB, (batch, seq), generator=generator)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[:, seq - seq // 4:] = 0  # a padded last quarter, as the zoo's inputs have
        return ids.to(device), mask.to(device)
    return (torch.randn(batch, *size, generator=generator).to(device),)


def describe_input(spec: ModelSpec, batch: int, smoke: bool) -> str:
    size = spec.smoke_size if smoke else spec.size
    if spec.kind == "tokens":
        return f"ids+mask {batch}x{size[0]} (last quarter padded)"
    return f"{batch}x{size[0]}x{size[1]}x{size[2]}"


def count_flops(torch, model, inputs) -> Tuple[int, Dict[str, int]]:
    """FLOPs of one fp32 eager forward (matmuls, convolutions, attention). The counter sees aten ops: fused kernels
    hide theirs (MultiheadAttention's fast path, the CPU flash-attention kernel), so those are switched off for the
    counting run (on CPU, ViT-B/16 counts 22.5 GFLOP with them, 35.1 without). Exactly linear in the batch for the
    four benchmark models (checked on CPU at batch 1 and 3)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    mha = getattr(torch.backends, "mha", None)
    fastpath = mha.get_fastpath_enabled() if mha is not None else None
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        math_sdpa = sdpa_kernel(SDPBackend.MATH)
    except Exception:  # noqa: BLE001
        math_sdpa = contextlib.nullcontext()
    try:
        if mha is not None:
            mha.set_fastpath_enabled(False)
        with torch.no_grad(), math_sdpa, counter:
            model(*inputs)
    finally:
        if mha is not None:
            mha.set_fastpath_enabled(fastpath)
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return int(counter.get_total_flops()), by_op


@contextlib.contextmanager
def reference_precision(torch, mode: str):
    """'strict': TF32 off for the fp32 reference forward only (restored after); 'default': PyTorch's settings."""
    if mode != "strict":
        yield
        return
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
        torch.set_float32_matmul_precision(saved[2])


def _cast_inputs_module():
    import torch

    class CastInputs(torch.nn.Module):
        """Takes fp32 inputs like the other columns: floating inputs cast to the model's dtype (4-d ones
        channels_last for conv nets), integer inputs as they are."""

        def __init__(self, model, dtype, channels_last: bool):
            super().__init__()
            self.model = model
            self.dtype = dtype
            self.channels_last = channels_last

        def forward(self, *args):
            cast = []
            for a in args:
                if a.is_floating_point():
                    a = a.to(self.dtype)
                    if self.channels_last and a.dim() == 4:
                        a = a.contiguous(memory_format=torch.channels_last)
                cast.append(a)
            return self.model(*cast)

    return CastInputs


def CastInputs(model, dtype, channels_last):  # noqa: N802
    return _cast_inputs_module()(model, dtype, channels_last)


def dir_nonempty(path: str) -> bool:
    try:
        return any(os.scandir(path))
    except OSError:
        return False


# ----------------------------------------------------------------------------------------------------------------
# JSON: writing, merging, derived numbers


def load_json(path: str) -> Dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def merge_into(merged: Dict[str, Any], data: Dict[str, Any]) -> None:
    """Later data overrides earlier, cell by cell; a skipped/unsupported cell never replaces a measured or
    failed one (a later run that skipped torch.compile keeps the earlier run's number)."""
    known = {run.get("run_id") for run in merged["runs"]}
    for run in data.get("runs", []):
        if run.get("run_id") not in known:
            merged["runs"].append(run)
    for dtype, peak in data.get("peak", {}).items():
        if peak.get("status") == "ok" or dtype not in merged["peak"]:
            merged["peak"][dtype] = peak
    for key, row in data.get("rows", {}).items():
        target = merged["rows"].setdefault(key, {"columns": {}})
        for field, value in row.items():
            if field not in ("columns", "ratios") and value is not None:
                target[field] = value
        for column, cell in row.get("columns", {}).items():
            if cell.get("status") == "running":  # the process died in this cell
                cell = dict(cell, status="error", phase="crashed",
                            error="the process died during this cell (segfault, abort or kill); not retried")
            old = target["columns"].get(column)
            weak = cell.get("status") in ("skipped", "unsupported")
            if old is not None and weak and old.get("status") in ("ok", "error"):
                continue
            target["columns"][column] = cell
        derive(target)


def derive(row: Dict[str, Any]) -> None:
    """Ratios of each column vs fp32_ts and vs compile_default (time_base / time_column: > 1 is faster). A cell timed
    in windows alternating with fp32_ts (paired_speedup) gives its ratio to fp32_ts from those windows, and two such
    cells compare through it; other cells by their medians."""
    columns = row.get("columns", {})
    ok = {c: cell for c, cell in columns.items() if cell.get("status") == "ok" and cell.get("ms")}
    paired = {c: cell["paired_speedup"] for c, cell in ok.items() if cell.get("paired_speedup")}
    if "fp32_ts" in ok:
        paired["fp32_ts"] = 1.0
    row["ratios"] = {}
    for base in ("fp32_ts", "compile_default", "compile_ro"):
        if base in ok:
            row["ratios"]["vs_" + base] = {
                c: paired[c] / paired[base] if c in paired and base in paired else ok[base]["ms"] / cell["ms"]
                for c, cell in ok.items()}


def merge_files(paths: List[str]) -> Dict[str, Any]:
    merged: Dict[str, Any] = {"format": "torch_mp cuda_speed 1", "runs": [], "peak": {}, "rows": {}}
    for path in paths:
        merge_into(merged, load_json(path))
    return merged


# ----------------------------------------------------------------------------------------------------------------
# rendering


def ordered_rows(data: Dict[str, Any], dtype: str) -> List[Dict[str, Any]]:
    order = list(MODELS)
    rows = [r for r in data["rows"].values() if r.get("dtype") == dtype]
    return sorted(rows, key=lambda r: (order.index(r["model"]) if r.get("model") in order else 99,
                                       -int(r.get("batch", 0))))


def present_columns(data: Dict[str, Any]) -> List[str]:
    seen = {c for r in data["rows"].values() for c in r.get("columns", {})}
    return [c for c in ALL_COLUMNS if c in seen] + sorted(seen - set(ALL_COLUMNS))


def ratio(row: Dict[str, Any], column: str, base: str) -> Optional[float]:
    return row.get("ratios", {}).get("vs_" + base, {}).get(column)


def cell_text(row: Dict[str, Any], column: str, with_ratio: bool = True) -> str:
    cell = row.get("columns", {}).get(column)
    if cell is None:
        return ""
    status = cell.get("status")
    if status == "ok":
        r = ratio(row, column, "fp32_ts")
        return f"{cell['ms']:.2f}" + (f" ({r:.2f}x)" if with_ratio and r is not None and column != "fp32_ts" else "")
    if status == "error":
        return "error"
    return status or "?"


def gpu_ratio(row: Dict[str, Any], column: str, base: str) -> Optional[float]:
    """base's GPU time / column's (> 1: the column's GPU time is shorter), where both cells have one."""
    cells = row.get("columns", {})
    times = [(cells.get(c) or {}).get("gpu_ms") for c in (column, base)]
    return times[1] / times[0] if all(times) else None


def target_value(row: Dict[str, Any], column: str, base: str, measure: str) -> Tuple[Optional[float], str, str]:
    """(ratio, how it was had, the other measure's ratio) of one target's cells: call times through derive's
    ratios, or GPU times."""
    cells = row["columns"]
    if measure == "gpu":
        value = gpu_ratio(row, column, base)
        if value is None:
            missing = [c for c in (column, base) if not cells[c].get("gpu_ms")]
            why = "; ".join(f"{c}: {cells[c].get('gpu_time_error') or 'not measured (older run or CPU)'}"
                            for c in missing)
            return None, f"no GPU time for {why}", ""
        return value, f"GPU time {column} {cells[column]['gpu_ms']:.3f} ms vs {base} {cells[base]['gpu_ms']:.3f} ms", \
            f"call time ratio {ratio(row, column, base) or float('nan'):.2f}x"
    value = ratio(row, column, base)
    how = ", both timed beside fp32_ts" if all(cells[c].get("paired_speedup") or c == "fp32_ts"
                                                for c in (column, base)) else ""
    gpu = gpu_ratio(row, column, base)
    return value, f"call {column} {cells[column]['ms']:.3f} ms vs {base} {cells[base]['ms']:.3f} ms{how}", \
        (f"GPU time ratio {gpu:.2f}x" if gpu is not None else "")


def evaluate_targets(data: Dict[str, Any]) -> List[Dict[str, Any]]:
    results = []
    for text, dtype, model, batch, column, base, minimum, measure in TARGETS:
        row = data["rows"].get(row_key(model, dtype, batch))
        entry = {"target": text, "status": "not measured", "detail": "", "measure": measure}
        if row is None:
            entry["detail"] = "row not in the results"
            results.append(entry)
            continue
        cells = row.get("columns", {})
        missing = [(c, cells.get(c)) for c in (column, base) if (cells.get(c) or {}).get("status") != "ok"]
        if missing:
            entry["detail"] = "; ".join(
                f"{c}: {(cell or {}).get('status', 'absent')}"
                + (f" ({(cell or {}).get('reason') or (cell or {}).get('error')})"
                   if cell and cell.get('status') != 'ok' else "") for c, cell in missing)
            results.append(entry)
            continue
        value, how, other = target_value(row, column, base, measure)  # rows come derived (merge_files)
        if value is None:
            entry["detail"] = how
        else:
            entry.update(status="met" if value >= minimum else "missed", value=value,
                         detail=f"{how}: {value:.2f}x (needs {minimum:.1f}x)" + (f"; {other}" if other else ""))
            ratio_of = gpu_ratio if measure == "gpu" else ratio
            # the other torch_mp columns for torch_mp; torch_mp.load's replay for the graphs targets
            rivals = {"torch_mp": TORCH_MP_COLUMNS, "torch_mp_graphs": ["torch_mp_load"]}.get(column, [])
            others = [(c, ratio_of(row, c, base)) for c in rivals
                      if c != column and (cells.get(c) or {}).get("status") == "ok"]
            others = [(c, r) for c, r in others if r is not None]
            if others:
                best = max(others, key=lambda item: item[1])
                entry["detail"] += f"; best other torch_mp column: {best[0]} {best[1]:.2f}x"
        results.append(entry)
    return results


def kernel_text(profile: Dict[str, Any]) -> str:
    """A profiled forward in a few words: "312 kernels (+2 memcpy), busy 3.21 ms, 1 graph launch", or on a CPU
    "57 host ops"."""
    if profile.get("status") != "ok":
        return f"profile {profile.get('status')}"
    device = profile.get("kernels", 0) + profile.get("memcpy", 0) + profile.get("memset", 0)
    if not device:
        traced_cuda = "CUDA" in profile.get("activities", [])
        return ("no kernels traced, " if traced_cuda else "") + f"{profile.get('host_ops')} host ops"
    text = f"{profile['kernels']} kernels"
    extra = [f"+{profile[k]} {k}" for k in ("memcpy", "memset") if profile.get(k)]
    if extra:
        text += f" ({', '.join(extra)})"
    if profile.get("layout_kernels"):
        text += f", {profile['layout_kernels']} cuDNN layout conversions"
    text += f", busy {profile['busy_ms']:.2f} ms"
    if profile.get("union_ms") is not None and profile["union_ms"] < 0.99 * profile["busy_ms"]:
        text += f" (union {profile['union_ms']:.2f}: streams overlapped)"
    if profile.get("graph_launches"):
        text += f", {profile['graph_launches']} graph launch" + ("es" if profile["graph_launches"] > 1 else "")
    return text


def split_text(cell: Dict[str, Any]) -> str:
    """Call time, GPU time and host enqueue time of a measured cell, and its kernels per forward."""
    if cell.get("status") != "ok":
        return cell.get("status") or ""
    parts = [f"call {cell['ms']:.2f}"]
    if cell.get("gpu_ms") is not None:
        check = cell.get("gpu_prefill") or {}
        parts.append(f"GPU {cell['gpu_ms']:.2f}" + ("*" if check.get("not_prefilled") else ""))
    elif cell.get("gpu_time_error"):
        parts.append("GPU error")
    if cell.get("host_ms") is not None:
        parts.append(f"host {cell['host_ms']:.2f}")
    text = " / ".join(parts)
    if cell.get("profile"):
        text += "; " + kernel_text(cell["profile"])
    return text


def render_markdown(data: Dict[str, Any], sources: List[str], png: Optional[str]) -> str:
    runs = data["runs"]
    lines = ["# CUDA inference speed", ""]
    lines.append("Generated by `python benchmarks/cuda_speed.py --render " + " ".join(sources) + "` from these runs:")
    lines.append("")
    for run in runs:
        device = run.get("device_name") or run.get("device")
        lines.append(f"- {run.get('date')}: {device}, driver {run.get('driver') or '-'}, torch {run.get('torch')}, "
                     f"CUDA {run.get('cuda') or '-'}, cuDNN {run.get('cudnn') or '-'}, "
                     f"torchvision {run.get('torchvision')}, transformers {run.get('transformers')}, "
                     f"{run.get('cpu_count')} CPU cores, torch_mp commit {run.get('git') or '?'}"
                     + (" (SMOKE run: tiny inputs, not a measurement)" if run.get("smoke") else ""))
        lines.append(f"  command: `{run.get('command')}`"
                     + (f" ({run['elapsed_s'] / 60:.1f} min)" if run.get("elapsed_s") else ""))
        tf32 = run.get("tf32") or {}
        lines.append(f"  TF32: cudnn {tf32.get('cudnn.allow_tf32')}, cuBLAS {tf32.get('cuda.matmul.allow_tf32')}; "
                     f"inductor freezing {run.get('inductor_freezing')}, compile cache "
                     f"{'warm' if run.get('inductor_cache_warm') else 'cold'} at start")
    lines.append("")
    for dtype, peak in sorted(data.get("peak", {}).items()):
        if peak.get("status") == "ok":
            lines.append(f"Peak ({dtype}): {peak['n']}^3 torch.mm, median of {len(peak.get('times_ms', []))}: "
                         f"{peak['tflops']:.0f} TFLOP/s ({peak['best_tflops']:.0f} best call).")
        else:
            lines.append(f"Peak ({dtype}): {peak.get('status')} {peak.get('error', '')}")
    lines += [
        "",
        "Method: median ms of one whole forward call on fp32 inputs, under torch.no_grad, after warm-up calls; "
        "CUDA events around each call and a synchronize after it (so launch overhead counts); inputs rotated among "
        "a few random sets. Random weights; BERT: seq 128 with the last quarter of each row padded. In parentheses: "
        "speed-up over fp32_ts; in runs from 2026-11-28 on, each cell is timed in 5 windows alternating with fp32_ts "
        "and its speed-ups (vs fp32_ts, and vs compile_* where both were so timed) come from those windows, "
        "which a slowing host slows alike (fp32_ts: fp32 "
        "frozen TorchScript of torch.jit.trace, PyTorch's default TF32 settings: "
        "cuDNN convolutions in TF32, matmuls in fp32). Columns: autocast = eager under torch.autocast; lowp_ts = "
        "whole model in fp16/bf16 (channels_last for conv nets) traced and frozen; compile_default / compile_ro = "
        "torch.compile (inductor, dynamic=False, mode default / reduce-overhead) under torch.autocast; torch_mp = "
        "torch_mp.convert defaults; torch_mp_plain = channels_last=False, fuse_convolutions=False; torch_mp_cudnn = "
        "fuse_convolutions=True (the default since 2026-11-27); torch_mp_fused = "
        "kernels=\"fused\"; torch_mp_graphs = torch_mp.cuda_graphs of the fused module; torch_mp_load = the "
        "torch_mp module saved and read back by torch_mp.load (CUDA graphs by default). FLOPs: "
        "torch.utils.flop_counter on the fp32 eager model (matmul/conv/attention FLOPs only).",
        "",
    ]
    columns = present_columns(data)
    dtypes = [d for d in DTYPE_NAMES if any(r.get("dtype") == d for r in data["rows"].values())]
    for dtype in dtypes:
        rows = ordered_rows(data, dtype)
        lines += [f"## {dtype}: ms per call (speed-up vs fp32_ts)", ""]
        lines.append(markdown_table(["model", "batch", "input"] + columns, [
            [row.get("label", row.get("model")), row.get("batch"), row.get("input", "")]
            + [cell_text(row, c) for c in columns] for row in rows]))
        lines += split_table(rows, columns, dtype)
        lines += ["", f"### {dtype}: vs compile_default and compile_ro, achieved TFLOP/s", "",
                  "cd: speed-up over compile_default, ro: over compile_ro (> 1 is faster); TF/s: FLOPs / median "
                  "time, in parentheses the share of the measured peak.", ""]
        peak = data.get("peak", {}).get(dtype, {}).get("tflops")
        table = []
        for row in rows:
            cells = []
            for c in columns:
                cell = row.get("columns", {}).get(c) or {}
                parts = []
                for base, tag in (("compile_default", "cd"), ("compile_ro", "ro")):
                    r = ratio(row, c, base)
                    if r is not None and c != base:
                        parts.append(f"{r:.2f}x {tag}")
                if cell.get("tflops") is not None:
                    parts.append(f"{cell['tflops']:.0f} TF/s"
                                 + (f" ({100 * cell['tflops'] / peak:.0f}%)" if peak else ""))
                cells.append(", ".join(parts))
            flops = row.get("flops")
            table.append([row.get("label"), row.get("batch"), f"{flops / 1e9:.1f}" if flops else "-",
                          f"{peak:.0f}" if peak else "-"] + cells)
        lines.append(markdown_table(["model", "batch", "GFLOP", "peak TFLOP/s"] + columns, table))
        strict = any(run.get("reference_precision") == "strict" for run in runs)
        lines += ["", f"### {dtype}: accuracy vs fp32 eager on a fresh input (cosine / max relative error of the "
                  "first output" + (", reference with TF32 off" if strict else "") + ") and setup cost", ""]
        acc_columns = [c for c in columns if c != "fp32_ts"] + (["fp32_ts"] if "fp32_ts" in columns else [])
        table = []
        for row in rows:
            cells = []
            for c in acc_columns:
                cell = row.get("columns", {}).get(c) or {}
                parts = []
                acc = cell.get("accuracy")
                if acc:
                    parts.append(f"{acc['cosine']:.6f} / {acc['max_rel_error']:.1e}"
                                 + ("" if acc.get("finite", True) else " NON-FINITE"))
                for name, tag in (("compile_s", "compile"), ("convert_s", "convert"), ("capture_s", "capture")):
                    if cell.get(name) is not None:
                        parts.append(f"{tag} {cell[name]:.1f} s")
                cells.append(", ".join(parts))
            table.append([row.get("label"), row.get("batch")] + cells)
        lines += [markdown_table(["model", "batch"] + acc_columns, table), ""]
    problems, grouped = [], {}
    for row in sorted(data["rows"].values(), key=lambda r: (r.get("dtype", ""), r.get("model", ""),
                                                             -int(r.get("batch", 0)))):
        for c, cell in row.get("columns", {}).items():
            where = f"{row.get('label')} {row.get('dtype')} b{row.get('batch')} {c}"
            if cell.get("status") == "error" or cell.get("accuracy_error"):
                why = cell.get("error") or ""
                if cell.get("accuracy_error"):
                    why += f" (accuracy: {cell['accuracy_error']})"
                problems.append(f"- {where}: {cell.get('status')}"
                                + (f" at {cell['phase']}" if cell.get("phase") else "") + f": {why.replace('|', '/')}")
            elif cell.get("status") in ("skipped", "unsupported"):
                grouped.setdefault((cell["status"], cell.get("reason") or ""), []).append(where)
    for (status, reason), cells in grouped.items():
        problems.append(f"- {status} ({reason.replace('|', '/')}): " + ", ".join(cells))
    lines += ["## Targets", ""]
    for t in evaluate_targets(data):
        lines.append(f"- **{t['status']}**: {t['target']}. {t['detail']}")
    lines.append("")
    if problems:
        lines += ["## Failed, skipped and unsupported cells", ""] + problems + [""]
    if png:
        lines += [f"![speed-up over fp32_ts]({os.path.basename(png)})", ""]
    return "\n".join(lines)


def split_table(rows: List[Dict[str, Any]], columns: List[str], dtype: str) -> List[str]:
    """Markdown lines: per cell its call, GPU and host enqueue times and kernels per forward (none for rows from
    runs before 2026-11-29, which measured call times only)."""
    def measured(cell):
        return any(k in cell for k in ("host_ms", "gpu_ms", "gpu_time_error", "profile"))

    if not any(measured(cell) for row in rows for cell in row.get("columns", {}).values()):
        return []
    lines = ["", f"### {dtype}: call time / GPU time / host enqueue time (ms); kernels per forward", "",
             "call: CUDA events around a call, synchronised after it (the table above); GPU: the same call queued "
             "behind a GPU sleep, so the GPU starts it only once the host has enqueued all of it (* some samples "
             "were not so queued and are left out); host: the call's return after a synchronize, none after it. "
             "Kernels: one torch.profiler run of one forward (memcpy/memset apart; busy: their summed durations). "
             "A CPU run has no GPU time and counts host ops. The CUDA-graph columns (torch_mp_graphs, "
             "torch_mp_load, compile_ro) launch one graph per forward: kineto reports the kernels the replay ran "
             "under that launch, and they are counted like the others (kineto #1165: CUPTI's records of graph "
             "replays were wrong before CUDA 13.1; their busy time should stay under their GPU time).", ""]
    lines.append(markdown_table(["model", "batch"] + columns, [
        [row.get("label", row.get("model")), row.get("batch")]
        + [split_text(row.get("columns", {}).get(c) or {}) for c in columns] for row in rows]))
    return lines


def render_png(data: Dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    columns = [c for c in present_columns(data) if c != "fp32_ts"]
    dtypes = [d for d in DTYPE_NAMES if any(r.get("dtype") == d for r in data["rows"].values())]
    if not dtypes:
        return
    groups = max(len(ordered_rows(data, d)) for d in dtypes)
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(max(8.0, 1.9 * groups + 2.5), 4.2 * len(dtypes)),
                             squeeze=False)
    width = 0.84 / max(1, len(columns))
    for ax, dtype in zip(axes[:, 0], dtypes):
        rows = ordered_rows(data, dtype)
        top = 1.0
        for j, row in enumerate(rows):
            for i, column in enumerate(columns):
                x = j + (i - (len(columns) - 1) / 2) * width
                value = ratio(row, column, "fp32_ts")
                if value is None:
                    cell = row.get("columns", {}).get(column)
                    mark = {"error": "x", "skipped": "s", "unsupported": "u"}.get((cell or {}).get("status"), "")
                    ax.text(x, 0.03, mark, ha="center", va="bottom", fontsize=7, color="red")
                    continue
                top = max(top, value)
                ax.bar(x, value, width, color=f"C{i}")
                ax.text(x, value, f"{value:.2f}", ha="center", va="bottom", fontsize=5.5, rotation=90)
        ax.axhline(1.0, color="gray", linewidth=0.8)
        if top > 12:  # a few huge ratios (noisy CPU smoke runs) would flatten the rest
            ax.set_yscale("log")
            ax.set_ylim(0.05, top * 2)
        else:
            ax.set_ylim(0, top * 1.15)
        ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_xticks(range(len(rows)), [f"{r.get('label')}\nbatch {r.get('batch')}" for r in rows], fontsize=8)
        ax.set_ylabel("speed-up vs fp32_ts")
        ax.set_title(f"{dtype} (markers: x error, s skipped, u unsupported)", fontsize=9)
    runs = data.get("runs", [])
    device = runs[-1].get("device_name") if runs else "?"
    fig.suptitle(f"Speed-up over fp32 frozen TorchScript; {device}, torch {runs[-1].get('torch') if runs else '?'}",
                 fontsize=10)
    fig.legend(handles=[Patch(color=f"C{i}", label=c) for i, c in enumerate(columns)], fontsize=8,
               ncol=min(len(columns), 5), loc="lower center")
    fig.tight_layout(rect=(0, 0.07 if len(columns) > 5 else 0.04, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def split_summary(rows: List[Dict[str, Any]], columns: List[str], abbrev: Dict[str, str], dtype: str) -> List[str]:
    """summary_text's second table: GPU ms / host enqueue ms / kernels (or host ops) per forward."""
    if not any("host_ms" in cell or "profile" in cell for row in rows for cell in row.get("columns", {}).values()):
        return []
    out = [f"-- {dtype}: GPU ms (* some samples not prefilled) / host enqueue ms / kernels (h: host ops)",
           f"{'model':<15}{'b':>3}" + "".join(f" {abbrev.get(c, c)[:15]:>15}" for c in columns)]
    for row in rows:
        cells = []
        for c in columns:
            cell = row.get("columns", {}).get(c) or {}
            gpu = "-" if cell.get("gpu_ms") is None else f"{cell['gpu_ms']:.2f}"
            if (cell.get("gpu_prefill") or {}).get("not_prefilled"):
                gpu += "*"
            host = "-" if cell.get("host_ms") is None else f"{cell['host_ms']:.2f}"
            profile = cell.get("profile") or {}
            kernels = "-"
            if profile.get("status") == "ok":
                kernels = str(profile["kernels"]) if profile.get("kernels") else f"h{profile.get('host_ops')}"
            cells.append(f" {gpu + '/' + host + '/' + kernels:>15}" if cell.get("status") == "ok" else f" {'-':>15}")
        out.append(f"{str(row.get('model'))[:15]:<15}{row.get('batch'):>3}" + "".join(cells))
    return out


def summary_text(data: Dict[str, Any]) -> str:
    """A compact plain-text table (ms and speed-up vs fp32_ts) and the targets, for a terminal tail."""
    columns = present_columns(data)
    abbrev = {"fp32_ts": "fp32ts", "autocast": "autocast", "lowp_ts": "lowp_ts", "compile_default": "comp",
              "compile_ro": "comp_ro", "torch_mp": "mp", "torch_mp_plain": "mp_plain", "torch_mp_cudnn": "mp_cudnn",
              "torch_mp_fused": "mp_fused", "torch_mp_graphs": "mp_graphs", "torch_mp_load": "mp_load"}
    out = []
    for run in data.get("runs", []):
        out.append(f"run {run.get('run_id')}: {run.get('device_name')}, driver {run.get('driver')}, torch "
                   f"{run.get('torch')}, CUDA {run.get('cuda')}, {run.get('elapsed_s')} s")
    for dtype, peak in sorted(data.get("peak", {}).items()):
        if peak.get("status") == "ok":
            out.append(f"peak {dtype}: {peak['tflops']:.0f} TFLOP/s")
    for dtype in DTYPE_NAMES:
        rows = ordered_rows(data, dtype)
        if not rows:
            continue
        out.append(f"-- {dtype}: ms (x vs fp32_ts)")
        header = f"{'model':<15}{'b':>3}" + "".join(f" {abbrev.get(c, c)[:13]:>13}" for c in columns)
        out.append(header)
        for row in rows:
            cells = []
            for c in columns:
                cell = row.get("columns", {}).get(c) or {}
                if cell.get("status") == "ok":
                    r = ratio(row, c, "fp32_ts")
                    digits = 2 if cell["ms"] < 1000 else 0
                    text = f"{cell['ms']:.{digits}f}" + (f"/{r:.2f}x" if r is not None and c != "fp32_ts" else "")
                else:
                    text = {"error": "ERR", "skipped": "skip", "unsupported": "n/a"}.get(cell.get("status"), "-")
                cells.append(f" {text:>13}")
            out.append(f"{str(row.get('model'))[:15]:<15}{row.get('batch'):>3}" + "".join(cells))
        out += split_summary(rows, columns, abbrev, dtype)
    errors = [f"{r.get('model')} {r.get('dtype')} b{r.get('batch')} {c}: {cell.get('error')}"
              for r in data["rows"].values() for c, cell in r.get("columns", {}).items()
              if cell.get("status") == "error"]
    if errors:
        out.append("-- errors")
        out += [e[:240] for e in errors[:20]]
    out.append("-- targets")
    for t in evaluate_targets(data):
        out.append(f"{t['status'].upper():<12} {t['target']}: {t['detail']}")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--smoke", action="store_true",
                        help="tiny inputs, 1 warm-up + 3 timed calls; default models convbnnet resnet50_ibn_a "
                             "bert_base, batches 2 1, torch.compile only on convbnnet")
    parser.add_argument("--models", nargs="+", choices=list(MODELS))
    parser.add_argument("--dtypes", nargs="+", choices=DTYPE_NAMES, default=["fp16", "bf16"])
    parser.add_argument("--batches", nargs="+", type=int)
    parser.add_argument("--columns", nargs="+", choices=ALL_COLUMNS, default=ALL_COLUMNS)
    parser.add_argument("--ro-batches", nargs="*", type=int, default=[1, 32],
                        help="batches at which compile_ro runs (default: 1 32)")
    parser.add_argument("--compile-models", nargs="*", choices=list(MODELS),
                        help="models torch.compile runs on (default: all --models)")
    parser.add_argument("--compile-dtypes", nargs="*", choices=DTYPE_NAMES, help="default: all --dtypes")
    parser.add_argument("--compile-timeout-s", type=float, default=300.0, help="per compile (SIGALRM)")
    parser.add_argument("--no-inductor-freezing", action="store_true")
    parser.add_argument("--deadline-s", type=float,
                        help="seconds after start past which torch.compile columns are skipped (recorded)")
    parser.add_argument("--hard-deadline-s", type=float,
                        help="seconds after start past which every remaining column is skipped (recorded)")
    parser.add_argument("--repeats-small", type=int, default=50, help="timed calls at batch <= 4")
    parser.add_argument("--repeats-large", type=int, default=25, help="timed calls at batch > 4")
    parser.add_argument("--warmup-small", type=int, default=10)
    parser.add_argument("--warmup-large", type=int, default=5)
    parser.add_argument("--warmup-s", type=float, default=1.0, help="warm-up calls go on at least this long")
    parser.add_argument("--input-sets", type=int, default=3, help="input sets the timed calls rotate among")
    parser.add_argument("--gpu-samples", type=int, default=10,
                        help="host enqueue and GPU-time samples per cell (at most the timed calls; 0: none)")
    parser.add_argument("--no-profile", action="store_true", help="no torch.profiler run (kernels per forward)")
    parser.add_argument("--grad-mode", choices=("no_grad", "inference_mode"), default="no_grad")
    parser.add_argument("--reference-precision", choices=("strict", "default"), default="strict",
                        help="accuracy reference: fp32 eager with TF32 off (strict) or PyTorch's default flags")
    parser.add_argument("--peak-n", type=int, help="matmul size for the peak (default 8192 on CUDA, 1024 on CPU)")
    parser.add_argument("--no-peak", action="store_true")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (CPU runs)")
    parser.add_argument("--out", default="cuda_speed.json", help="JSON results, rewritten after every cell")
    parser.add_argument("--resume", nargs="*",
                        help="earlier result files (may be --out itself): their cells are kept, and measured or failed "
                             "ones are not run again (a cell a crashed process left is recorded as crashed)")
    parser.add_argument("--max-crashes", type=int, default=3,
                        help="after this many crashed cells among the torch_mp columns (or among the others), the "
                             "rest of that family is skipped")
    parser.add_argument("--retry-errors", action="store_true", help="with --resume: run failed cells again")
    parser.add_argument("--render", nargs="+", metavar="JSON", help="render these result files instead of measuring")
    parser.add_argument("--md", help="with --render: markdown output")
    parser.add_argument("--png", help="with --render: bar chart output")
    parser.add_argument("--summary", nargs="+", metavar="JSON", help="print a plain-text summary of result files")
    args = parser.parse_args(argv)
    if args.smoke:
        args.models = args.models or ["convbnnet", "resnet50_ibn_a", "bert_base"]
        args.batches = args.batches or [2, 1]
        if args.compile_models is None:
            args.compile_models = ["convbnnet"]
    args.models = args.models or ["resnet50", "resnet50_ibn_a", "vit_b_16", "bert_base"]
    args.batches = args.batches or [32, 1]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    warnings.simplefilter("ignore")
    if args.render or args.summary:
        paths = args.render or args.summary
        data = merge_files(paths)
        if args.render:
            if args.png:
                try:
                    render_png(data, args.png)
                    print(f"wrote {args.png}")
                except Exception as error:  # noqa: BLE001 - the markdown still gets written
                    print(f"PNG failed: {short_error(error)}")
                    args.png = None
            text = render_markdown(data, paths, args.png)
            if args.md:
                with open(args.md, "w") as out:
                    out.write(text + "\n")
                print(f"wrote {args.md}")
            else:
                print(text)
        if args.summary:
            print(summary_text(data))
        return 0
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    bench = Bench(args)

    def terminate(signum, frame):  # `timeout` sends SIGTERM: leave through the finally clauses, JSON saved
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminate)
    try:
        bench.run()
    except KeyboardInterrupt as error:
        bench.meta["interrupted"] = f"{error} at {bench.elapsed():.0f} s"
        for row in bench.data["rows"].values():
            for column, cell in row.get("columns", {}).items():
                if cell.get("status") == "running" and cell.get("run_id") == bench.run_id:
                    row["columns"][column] = {"status": "skipped", "reason": "interrupted (timeout or signal)",
                                              "run_id": bench.run_id}
        bench.save()
        print(f"interrupted ({error}); results so far in {args.out}", flush=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
