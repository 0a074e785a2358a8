"""Speed of torch_mp.export's program compiled by AOTInductor, beside what a user has today, timed side by side in one
process: results for benchmarks/results/EXPORT_SPEED.md.

    python benchmarks/export_speed.py [--device cpu|cuda] [--dtype bf16|fp16] [--batches 1 8]
                                      [--models resnet50 resnet50_ibn_a bert_base vit_b_16 resnext50 roberta_4l]
                                      [--out benchmarks/results/EXPORT_SPEED.md] [--cells FOLDER] [--deadline-min M]

Columns (median call time, the columns timed in turn, one call each per round; accuracy as cosine of the first output
against fp32):
  fp32         the fp32 model, eager
  autocast     torch.autocast eager
  compile      torch.compile of the model run under torch.autocast (and mode="reduce-overhead" on CUDA)
  aoti_amp     AOTInductor of the program exported with the forward run under torch.autocast (what a user does today;
               an autocast around torch.export.export is not captured)
  aoti_ours    AOTInductor of torch_mp.export's program (torch_mp.aoti_compile)
  torchscript  torch_mp.convert (the TorchScript front)
--cells writes each (model, batch) row as JSON when it is measured, and a rerun with the same folder measures only the
rows missing (benchmarks/harness/cells.py); --deadline-min starts no row after that many minutes.
Also: torch.export.export alone against torch_mp.export (capture and plan), the AOTInductor compile times and the
package sizes.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Dict, List

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # the tests' models and helpers

import torch_mp  # noqa: E402
from harness import (Machine, Session, command_line, cosine, interleaved_medians, markdown_table,  # noqa: E402
                     page_header, publish)
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


@dataclass(slots=True)  # slots: a misspelt field in measure's setattr is an error
class Row:
    model: str
    batch: int
    ms: Dict[str, float] = field(default_factory=dict)  # median per column
    cosine: Dict[str, float] = field(default_factory=dict)  # first output against fp32's, per column
    export_s: float = 0.0  # torch.export.export alone
    torch_mp_export_s: float = 0.0
    aoti_amp_compile_s: float = 0.0
    aoti_ours_compile_s: float = 0.0
    aoti_amp_mb: float = 0.0
    aoti_ours_mb: float = 0.0


def measure(name, batch, device, dtype, repeats, folder) -> Row:
    model, args = build(name, batch, device)
    with torch.no_grad():
        reference = model(*args)
    row = Row(name, batch)
    calls = {}

    def column(key, call):
        with torch.no_grad():
            row.cosine[key] = cosine(reference, call(*args))
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
    row.export_s = time.perf_counter() - start
    start = time.perf_counter()
    program = torch_mp.export(model, args, dtype)
    row.torch_mp_export_s = time.perf_counter() - start
    for key, exported in (("aoti_amp", torch.export.export(amp, args)), ("aoti_ours", program)):
        path = os.path.join(folder, f"{name}_{batch}_{key}.pt2")
        configs = torch_mp._export.package.INDUCTOR_CONFIGS if key == "aoti_ours" else {}
        start = time.perf_counter()
        torch._inductor.aoti_compile_and_package(exported, package_path=path, inductor_configs=configs)
        setattr(row, f"{key}_compile_s", time.perf_counter() - start)
        setattr(row, f"{key}_mb", os.path.getsize(path) / 1e6)
        column(key, torch._inductor.aoti_load_package(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        column("torchscript", torch_mp.convert(model, args, dtype))
    row.ms = interleaved_medians(calls, args, device, repeats)
    return row


COLUMNS = ["fp32", "autocast", "compile", "compile_ro", "aoti_amp", "aoti_ours", "torchscript"]


def table(rows: List[Row]) -> str:
    columns = [c for c in COLUMNS if any(c in r.ms for r in rows)]
    compared = [c for c in columns if c != "fp32"]
    speed = markdown_table(
        ["model", "batch"] + [f"{c} ms" for c in columns] +
        ["ours vs compile", "ours vs aoti_amp", "export s", "torch_mp.export s", "AOTI compile s (amp / ours)",
         "package MB (amp / ours)"],
        [[r.model, r.batch] + [f"{r.ms[c]:.1f}" if c in r.ms else "-" for c in columns] +
         [f"{r.ms['compile'] / r.ms['aoti_ours']:.2f}x", f"{r.ms['aoti_amp'] / r.ms['aoti_ours']:.2f}x",
          f"{r.export_s:.1f}", f"{r.torch_mp_export_s:.1f} ({r.torch_mp_export_s / r.export_s:.2f}x)",
          f"{r.aoti_amp_compile_s:.0f} / {r.aoti_ours_compile_s:.0f}", f"{r.aoti_amp_mb:.1f} / {r.aoti_ours_mb:.1f}"]
         for r in rows])
    accuracy = markdown_table(["model", "batch"] + compared,
                              [[r.model, r.batch] + [f"{r.cosine[c]:.6f}" if c in r.cosine else "-" for c in compared]
                               for r in rows])
    return speed + "\n\nCosine of the first output against fp32:\n\n" + accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default=None, choices=DTYPES)
    parser.add_argument("--batches", type=int, nargs="+", default=None)
    parser.add_argument("--models", nargs="+", default=["resnet50", "resnet50_ibn_a", "bert_base", "vit_b_16"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None, help="append the table to this markdown file")
    parser.add_argument("--cells", default=None,
                        help="folder for each (model, batch) row as JSON; a rerun with it skips the rows written")
    parser.add_argument("--deadline-min", type=float, default=None, help="start no row after this many minutes")
    args = parser.parse_args()
    dtype_name = args.dtype or ("bf16" if args.device == "cpu" else "fp16")
    batches = args.batches or ([1, 8] if args.device == "cpu" else [1, 32])
    session = Session(args.cells, None if args.deadline_min is None else 60 * args.deadline_min)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            for batch in batches:
                cell = session.run(f"{args.device}_{dtype_name}_{name}_b{batch}", lambda: asdict(
                    measure(name, batch, args.device, DTYPES[dtype_name], args.repeats, folder)))
                if cell is not None:
                    rows.append(Row(**cell))
                    print(rows[-1], "\n\n" + table(rows) + "\n", flush=True)  # the table so far
    header = f"## {args.device}, {dtype_name}\n\n" + page_header(Machine.this(args.device), command_line()) + "\n"
    note = session.page_note()
    publish(header + "\n" + (note + "\n\n" if note else "") + (table(rows) if rows else "No rows.") + "\n", args.out)


if __name__ == "__main__":
    main()
