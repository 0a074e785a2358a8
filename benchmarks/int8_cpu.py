"""torch_mp's int8 plan on this CPU (issue 60) beside fp32 and torchao's PT2E flow, in interleaved rounds in one process.

    python benchmarks/int8_cpu.py [--models resnet50 mobilenet_v2 vit_b_16 bert_4l] [--batches 1 8] [--repeats 10]
                                  [--calibration 8] [--tolerance 0.05] [--threads N]
                                  [--out benchmarks/results/INT8_CPU.md]

An AVX2-only CPU on a newer one: ATEN_CPU_CAPABILITY=avx2 (ATen's kernels), ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN's: no
VNNI, no AMX) and TORCH_MP_CPU_FEATURES=none (torch_mp's plan: no fast float kernels, no VNNI, the reduced range);
with ATEN_CPU_CAPABILITY=avx2 Inductor's generated code is held to 256-bit vectors too. The page's header records them.

Columns (median ms of interleaved rounds, after two warm-up calls each):
- fp32: the model compiled by torch.compile with Inductor's freezing;
- pt2e: torchao's PT2E flow as its docs give it (X86InductorQuantizer's default config: static, per-channel weights),
  calibrated on the same batches, compiled with freezing;
- ours: torch_mp.export(model, args, torch.int8, calibration_inputs=..., tolerance=...) compiled with freezing (the
  fallback's moves and seconds in the notes);
- ours_aoti: the same program packaged as torch_mp.aoti_compile packages it (freezing, under no_grad), loaded with
  torch._inductor.aoti_load_package.
Per row also: speed as ratios to fp32 and to PT2E; cosine to the fp32 model's output and top-1 agreement (classifiers:
argmax over the last dim; the encoder: each token's nearest neighbour among the batch's tokens, by cosine) on a held-out
batch; the share of the heavy ops' FLOPs in int8; weight bytes against fp32. A PT2E failure is a row's note.
Models come from their definitions with random weights, which calibrate unlike trained ones (the page says so); the
conv nets' batch-norm statistics are those of random inputs (with_settled_batch_norms).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
import tempfile
import warnings
from typing import Dict, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "zoo"))
from harness import command_line, cosine, cpu_name, first, interleaved_medians, publish  # noqa: E402

from torch_mp.fallback import relative_error  # noqa: E402

import torch_mp  # noqa: E402
from torch_mp._export.package import write_package  # noqa: E402

MODELS = ("resnet50", "mobilenet_v2", "vit_b_16", "bert_4l")


class EncoderOutput(torch.nn.Module):
    """A transformers encoder as a tensor-to-tensor module: token ids in, the last hidden state out."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).last_hidden_state


def build(name: str, batch: int, seed: int):
    """The model and `count` input batches of it (random images, or random token ids)."""
    torch.manual_seed(0)
    if name == "bert_4l":
        from transformers import BertConfig, BertModel  # noqa: PLC0415

        config = BertConfig(num_hidden_layers=4, hidden_size=768, intermediate_size=3072, num_attention_heads=12)
        model = EncoderOutput(BertModel(config)).eval()
        generator = torch.Generator().manual_seed(seed)
        return model, lambda: (torch.randint(0, config.vocab_size, (batch, 128), generator=generator),)
    from torchvision_shim import import_torchvision  # noqa: PLC0415

    model = with_settled_batch_norms(getattr(import_torchvision().models, name)())
    if name == "vit_b_16":  # torchvision initialises its head with zeros: every output would be 0
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    generator = torch.Generator().manual_seed(seed)
    return model, lambda: (torch.randn(batch, 3, 224, 224, generator=generator),)


def with_settled_batch_norms(model: torch.nn.Module) -> torch.nn.Module:
    """The model in eval mode with its batch norms' running statistics those of random inputs: with torchvision's
    initial statistics (mean 0, variance 1) a random-weight MobileNetV2's activations shrink layer by layer to 1e-9 at
    its output, which no precision can be judged on; a trained model's statistics keep them about 1."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the batches below
    model.train()
    generator = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for _ in range(4 if norms else 0):
            model(torch.randn(8, 3, 224, 224, generator=generator))
    return model.eval()


def agreement(reference, output) -> float:
    """Top-1 agreement for logits; for hidden states, how often each token's nearest other token is the same."""
    reference, output = first(reference).float(), first(output).float()
    if reference.dim() == 2:
        return (reference.argmax(-1) == output.argmax(-1)).float().mean().item()

    def neighbours(states):
        flat = torch.nn.functional.normalize(states.flatten(0, -2), dim=-1)
        similarity = flat @ flat.T
        similarity.fill_diagonal_(-2.0)
        return similarity.argmax(-1)

    return (neighbours(reference) == neighbours(output)).float().mean().item()


@dataclasses.dataclass
class Pt2e:
    """torchao's PT2E result: the converted module, how many of its convolutions and linears hold int8 weights, and
    which capture it quantized."""
    module: torch.nn.Module
    int8_layers: int
    layers: int
    capture: str

    def note(self) -> str:
        return f"PT2E: {self.int8_layers} of {self.layers} conv/linear int8 ({self.capture} export)"


def pt2e(model, args, calibration) -> Pt2e:
    """torchao's PT2E flow with X86InductorQuantizer's default config, calibrated on `calibration`. Captured by a
    strict export where it can be: the quantizer finds convolutions by their source module, which a non-strict
    export records only for exact nn.Conv2d / nn.Linear classes (EfficientNet-Lite0's Conv2dStaticSamePadding
    subclasses stayed fp32: 1 of its 50 layers int8)."""
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq  # noqa: PLC0415
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: PLC0415

    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
    try:
        captured, capture = torch.export.export(model, args, strict=True), "strict"
    except Exception:  # noqa: BLE001 - a model strict export cannot capture is quantized from the non-strict one
        captured, capture = torch.export.export(model, args), "non-strict"
    prepared = prepare_pt2e(captured.module(), quantizer)
    with torch.no_grad():
        for batch in calibration:
            prepared(*batch)
    converted = convert_pt2e(prepared)
    targets = [node.target for node in converted.graph.nodes if node.op == "call_function"]
    layers = sum(target in (torch.ops.aten.conv2d.default, torch.ops.aten.linear.default) for target in targets)
    int8_layers = targets.count(torch.ops.quantized_decomposed.dequantize_per_channel.default)
    return Pt2e(converted, int8_layers, layers, capture)


def measure(name, batch, repeats, calibration_count, tolerance, folder):
    model, next_batch = build(name, batch, seed=batch)
    args = next_batch()
    calibration = [next_batch() for _ in range(calibration_count)]
    held_out = next_batch()
    row = {"model": name, "batch": batch, "notes": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch_mp.export(model, args, torch.int8, calibration_inputs=calibration, tolerance=tolerance,
                                  progress=False)
        report = torch_mp.report_of(program)
        # what torch_mp.aoti_compile does after its export, on the same program
        path = write_package(program, os.path.join(folder, f"{name}_{batch}.pt2"), report)
    heavy = sum(n["flops"] for n in report.nodes)
    row["int8_flops"] = sum(n["flops"] for n in report.nodes if n["precision"] == "int8") / max(heavy, 1)
    row["weights"] = report.data["weight_bytes_after"] / report.data["weight_bytes_before"]
    if "fallback" in report.data:
        fallback = report.data["fallback"]
        row["notes"].append(f"fallback: error {fallback['error_before']:.3g} -> {fallback['error_after']:.3g}, "
                            f"{len(fallback['kept_float'])} int8 -> low, {len(fallback['kept_fp32'])} -> fp32, "
                            f"{fallback['conversions']} conversions, {fallback['seconds']:.0f} s")
    calls = {}
    with torch.no_grad(), torch._inductor.config.patch(freezing=True):
        calls["fp32"] = torch.compile(model)
        try:
            peer = pt2e(model, args, calibration)
            row["notes"].append(peer.note())
            calls["pt2e"] = torch.compile(peer.module)
        except Exception as error:  # noqa: BLE001 - the peer's own failure is a result of the row
            row["notes"].append(f"PT2E failed: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
        calls["ours"] = torch.compile(program.module())
        calls["ours_aoti"] = torch._inductor.aoti_load_package(path)
        row["ms"] = interleaved_medians(calls, args, "cpu", repeats)
        reference = model(*held_out)
        for key, call in calls.items():
            if key != "fp32":
                output = call(*held_out)
                row[f"cos_{key}"] = cosine(reference, output)
                row[f"agree_{key}"] = agreement(reference, output)
                row[f"error_{key}"] = relative_error(reference, output)
    return row


def table(rows) -> str:
    lines = ["| model | batch | fp32 ms | PT2E ms | ours ms | ours AOTI ms | ours / fp32 | ours / PT2E | AOTI / fp32 "
             "| cosine PT2E | cosine ours | rel. error PT2E | rel. error ours | agreement PT2E | agreement ours "
             "| int8 FLOPs | weights | notes |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
             "| --- |"]
    for r in rows:
        ms = r["ms"]
        pt2e_ms = ms.get("pt2e")

        def fmt(value, spec):
            return "-" if value is None else format(value, spec)

        lines.append(
            f"| {r['model']} | {r['batch']} | {ms['fp32']:.1f} | {fmt(pt2e_ms, '.1f')} | {ms['ours']:.1f} | "
            f"{ms['ours_aoti']:.1f} | {ms['fp32'] / ms['ours']:.2f}x | "
            f"{fmt(pt2e_ms / ms['ours'] if pt2e_ms else None, '.2f')}{'x' if pt2e_ms else ''} | "
            f"{ms['fp32'] / ms['ours_aoti']:.2f}x | "
            f"{fmt(r.get('cos_pt2e'), '.4f')} | {r['cos_ours']:.4f} | {fmt(r.get('error_pt2e'), '.3g')} | "
            f"{r['error_ours']:.3g} | {fmt(r.get('agree_pt2e'), '.3f')} | "
            f"{r['agree_ours']:.3f} | {r['int8_flops']:.2f} | {r['weights']:.3f} | {'; '.join(r['notes'])} |")
    return "\n".join(lines)


EMULATION = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "TORCH_MP_CPU_FEATURES")


def int8_parser(description: str, models, tolerance: Optional[float],
                tolerance_help: str) -> argparse.ArgumentParser:
    """The options the int8 pages share (int8_trained.py adds none of its own): models, batches, rounds, threads,
    torch_mp's tolerance, the page."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(models), choices=models)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--tolerance", type=float, default=tolerance, help=tolerance_help)
    parser.add_argument("--out", default=None, help="append the results to this markdown file")
    return parser


def emulated_cpu(args) -> Dict[str, str]:
    """Sets the threads asked for, holds Inductor's code to 256-bit vectors where ATen's are (an AVX2-only CPU
    emulated on a newer one), and gives the emulation's environment variables that are set, for the page."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "avx2":
        torch._inductor.config.cpp.simdlen = 256
    return {name: os.environ[name] for name in EMULATION if name in os.environ}


def main():
    parser = int8_parser(__doc__, MODELS, None, "torch_mp's accuracy target (default: none)")
    parser.add_argument("--calibration", type=int, default=8, help="calibration batches (default 8)")
    args = parser.parse_args()
    emulation = emulated_cpu(args)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            for batch in args.batches:
                rows.append(measure(name, batch, args.repeats, args.calibration, args.tolerance, folder))
                print(table(rows[-1:]), flush=True)
    header = (f"\n## {datetime.date.today()}: {cpu_name()}, cpu_features {torch_mp.cpu_features()}, "
              f"{torch.get_num_threads()} threads, torch {torch.__version__}"
              + (f", environment {emulation}" if emulation else "") + "\n\n"
              f"`{command_line()}`; random weights; "
              f"{args.calibration} calibration batches, agreement on a held-out batch.\n")
    publish(header + "\n" + table(rows), args.out)


if __name__ == "__main__":
    main()
