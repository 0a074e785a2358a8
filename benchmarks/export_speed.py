"""Speed of torch_mp.export's program compiled by AOTInductor, beside what a user has today, timed side by side in one
process: results for benchmarks/EXPORT_SPEED.md.

    python benchmarks/export_speed.py [--device cpu|cuda] [--dtype bf16|fp16] [--batches 1 8]
                                      [--models resnet50 resnet50_ibn_a bert_base vit_b_16 resnext50 roberta_4l]
                                      [--out EXPORT_SPEED.md]

Columns (median call time, the columns timed in turn, one call each per round; accuracy as cosine of the first output
against fp32):
  fp32         the fp32 model, eager
  autocast     torch.autocast eager
  compile      torch.compile of the model run under torch.autocast (and mode="reduce-overhead" on CUDA)
  aoti_amp     AOTInductor of the program exported with the forward run under torch.autocast (what a user does today;
               an autocast around torch.export.export is not captured)
  aoti_ours    AOTInductor of torch_mp.export's program (torch_mp.aoti_compile)
  torchscript  torch_mp.convert (the TorchScript front)
Also: torch.export.export alone against torch_mp.export (capture and plan), the AOTInductor compile times and the
package sizes.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # the tests' models and helpers

import torch_mp  # noqa: E402
from registry import Entry, build_model  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def build(name: str, batch: int, device: str):
    """The model (random weights as the zoo gives them: all-zero matrices made random, so that a zero-initialised
    classifier head does not make every output 0) and its inputs."""
    model, inputs = definition(name, batch, device)
    return build_model(Entry("", "", lambda: model, lambda: inputs)).to(device), inputs


def definition(name: str, batch: int, device: str):
    torch.manual_seed(0)
    if name == "resnet50":
        from torchvision_shim import import_torchvision

        return import_torchvision().models.resnet50().eval().to(device), (torch.randn(batch, 3, 224, 224, device=device),)
    if name == "resnet50_ibn_a":
        from torch_mp.models import resnet50_ibn_a

        return resnet50_ibn_a().eval().to(device), (torch.randn(batch, 3, 384, 128, device=device),)
    if name == "vit_b_16":
        from torchvision_shim import import_torchvision

        return import_torchvision().models.vit_b_16().eval().to(device), (torch.randn(batch, 3, 224, 224, device=device),)
    if name == "resnext50":
        from torchvision_shim import import_torchvision

        return (import_torchvision().models.resnext50_32x4d().eval().to(device),
                (torch.randn(batch, 3, 224, 224, device=device),))
    if name == "roberta_4l":  # a 4-layer RoBERTa-like encoder, base width
        from torchvision_shim import import_torchvision

        import_torchvision()  # transformers imports torchvision where it is installed
        from transformers import RobertaConfig, RobertaModel

        model = RobertaModel(RobertaConfig(num_hidden_layers=4, attn_implementation="sdpa")).eval().to(device)
        return Returning(model), (torch.randint(3, 50265, (batch, 128), device=device),)
    if name == "bert_base":
        from torchvision_shim import import_torchvision

        import_torchvision()
        from transformers import BertConfig, BertModel

        model = BertModel(BertConfig(attn_implementation="sdpa")).eval().to(device)
        ids = torch.randint(0, 30522, (batch, 128), device=device)
        return Returning(model), (ids,)
    raise ValueError(name)


class Returning(torch.nn.Module):
    """A transformers model's last hidden state as a plain tensor."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).last_hidden_state


class UnderAutocast(torch.nn.Module):
    def __init__(self, model, device, dtype):
        super().__init__()
        self.model, self.device, self.dtype = model, device, dtype

    def forward(self, *args):
        with torch.autocast(self.device, dtype=self.dtype):
            return self.model(*args)


def first(output):
    while isinstance(output, (tuple, list)):
        output = output[0]
    return output


def interleaved_medians(calls, args, device, repeats):
    """Median ms of each call, timed in rounds of one call of each (after two warm-up calls each), so that the
    machine's drift during the run falls on every column alike instead of on whichever was timed then."""
    times = {key: [] for key in calls}
    with torch.no_grad():
        for call in calls.values():
            for _ in range(2):
                call(*args)
        for _ in range(repeats):
            for key, call in calls.items():
                if device == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                call(*args)
                if device == "cuda":
                    torch.cuda.synchronize()
                times[key].append((time.perf_counter() - start) * 1e3)
    return {key: statistics.median(values) for key, values in times.items()}


def cosine(reference, output):
    a, b = first(reference).double().flatten(), first(output).double().flatten()
    return (a @ b / (a.norm() * b.norm())).item()


def measure(name, batch, device, dtype, repeats, folder):
    model, args = build(name, batch, device)
    with torch.no_grad():
        reference = model(*args)
    row = {"model": name, "batch": batch, "cosine": {}}
    calls = {}

    def column(key, call):
        with torch.no_grad():
            row["cosine"][key] = cosine(reference, call(*args))
        calls[key] = call

    column("fp32", model)
    amp = UnderAutocast(model, device, dtype).eval()
    column("autocast", amp)
    compiled = torch.compile(amp)
    column("compile", compiled)
    if device == "cuda":
        column("compile_ro", torch.compile(amp, mode="reduce-overhead"))
    start = time.perf_counter()
    torch.export.export(model, args)
    row["export_s"] = time.perf_counter() - start
    start = time.perf_counter()
    program = torch_mp.export(model, args, dtype)
    row["torch_mp_export_s"] = time.perf_counter() - start
    for key, exported in (("aoti_amp", torch.export.export(amp, args)), ("aoti_ours", program)):
        path = os.path.join(folder, f"{name}_{batch}_{key}.pt2")
        configs = torch_mp._export.package.INDUCTOR_CONFIGS if key == "aoti_ours" else {}
        start = time.perf_counter()
        torch._inductor.aoti_compile_and_package(exported, package_path=path, inductor_configs=configs)
        row[f"{key}_compile_s"] = time.perf_counter() - start
        row[f"{key}_mb"] = os.path.getsize(path) / 1e6
        column(key, torch._inductor.aoti_load_package(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        column("torchscript", torch_mp.convert(model, args, dtype))
    row["ms"] = interleaved_medians(calls, args, device, repeats)
    return row


COLUMNS = ["fp32", "autocast", "compile", "compile_ro", "aoti_amp", "aoti_ours", "torchscript"]


def table(rows, device):
    columns = [c for c in COLUMNS if any(c in r["ms"] for r in rows)]
    lines = ["| model | batch | " + " | ".join(f"{c} ms" for c in columns) +
             " | ours vs compile | ours vs aoti_amp | export s | torch_mp.export s | AOTI compile s (amp / ours) | "
             "package MB (amp / ours) |",
             "| --- | --- | " + " | ".join("---" for _ in columns) + " | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ms = r["ms"]
        lines.append(
            f"| {r['model']} | {r['batch']} | " + " | ".join(f"{ms[c]:.1f}" if c in ms else "-" for c in columns) +
            f" | {ms['compile'] / ms['aoti_ours']:.2f}x | {ms['aoti_amp'] / ms['aoti_ours']:.2f}x"
            f" | {r['export_s']:.1f} | {r['torch_mp_export_s']:.1f} ({r['torch_mp_export_s'] / r['export_s']:.2f}x)"
            f" | {r['aoti_amp_compile_s']:.0f} / {r['aoti_ours_compile_s']:.0f}"
            f" | {r['aoti_amp_mb']:.1f} / {r['aoti_ours_mb']:.1f} |")
    lines += ["", "Cosine of the first output against fp32:", "",
              "| model | batch | " + " | ".join(c for c in columns if c != "fp32") + " |",
              "| --- | --- | " + " | ".join("---" for c in columns if c != "fp32") + " |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['batch']} | " +
                     " | ".join(f"{r['cosine'][c]:.6f}" if c in r["cosine"] else "-" for c in columns if c != "fp32")
                     + " |")
    return "\n".join(lines)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default=None, choices=DTYPES)
    parser.add_argument("--batches", type=int, nargs="+", default=None)
    parser.add_argument("--models", nargs="+", default=["resnet50", "resnet50_ibn_a", "bert_base", "vit_b_16"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None, help="append the table to this markdown file")
    args = parser.parse_args()
    dtype_name = args.dtype or ("bf16" if args.device == "cpu" else "fp16")
    batches = args.batches or ([1, 8] if args.device == "cpu" else [1, 32])
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            for batch in batches:
                rows.append(measure(name, batch, args.device, DTYPES[dtype_name], args.repeats, folder))
                print(rows[-1], "\n\n" + table(rows, args.device) + "\n", flush=True)  # the table so far
    machine = torch.cuda.get_device_name() if args.device == "cuda" else cpu_name()
    header = (f"## {args.device}, {dtype_name}\n\nMachine: {machine}, {os.cpu_count()} CPU cores; date "
              f"{datetime.date.today()}; torch {torch.__version__}.\nCommand: `python benchmarks/export_speed.py "
              + " ".join(sys.argv[1:]) + "`\n")
    publish(header + "\n" + table(rows, args.device) + "\n", args.out)


def publish(text: str, out) -> None:
    """Prints the results and appends them to the markdown file `out` (if given)."""
    print(text)
    if out:
        with open(out, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
