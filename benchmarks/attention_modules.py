"""PyTorch's own attention modules, converted: weights stored, casts per inference, saved size, accuracy.

    python benchmarks/attention_modules.py [--no-write]

nn.TransformerEncoder / nn.MultiheadAttention are what many users' transformers are built from, and their
scripted forward is unlike a hand-written one: a fast path (one fused kernel per layer, on a nested tensor when a
padding mask is given) beside the decomposed slow path, chosen at run time; weights that freezing keeps as
attributes (in_proj_weight, handed to has_torch_function by the fast-path check); and branches on arguments
(need_weights, masks) that the example inputs take one way. Per model and dtype: weights (MB, before -> after,
constants and folded attributes), the casts that ran on the example inputs and the MB they move, the size of the
torch.jit.save file next to the fp32 frozen model's, and cosine similarity to fp32. Writes
benchmarks/results/ATTENTION_MODULES.md.
"""
from __future__ import annotations

import argparse
import datetime
import io
import os
import platform
import sys

import torch
from torch import nn

# plan as on a CPU with fast fp16 and bf16 kernels (the plan a GPU conversion makes), whichever CPU runs this
os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")

import torch_mp

HERE = os.path.dirname(os.path.abspath(__file__))


class PaddedEncoder(nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True), layers,
                                             enable_nested_tensor=True)

    def forward(self, x, padding):
        return self.encoder(x, src_key_padding_mask=padding)


class Encoder(PaddedEncoder):
    def forward(self, x):
        return self.encoder(x)


class AttentionWithWeights(nn.Module):
    """nn.MultiheadAttention called with its defaults (need_weights=True: the slow path), then a projection."""

    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(256, 8, batch_first=True)
        self.projection = nn.Linear(256, 256)

    def forward(self, x):
        y, weights = self.attention(x, x, x)
        return self.projection(y), weights


def models():
    padding = torch.zeros(4, 64, dtype=torch.bool)
    padding[1, 40:] = True
    padding[3, 10:] = True
    x = torch.randn(4, 64, 256)
    return [
        ("nn.TransformerEncoder, 4 layers, padding mask (nested fast path)", PaddedEncoder(4), (x, padding)),
        ("nn.TransformerEncoder, 4 layers, no mask (fused layers)", Encoder(4), (x,)),
        ("nn.Transformer, 2+2 layers (decoder: slow path)", nn.Transformer(256, 8, 2, 2, 1024, batch_first=True),
         (x, torch.randn(4, 32, 256))),
        ("nn.MultiheadAttention, need_weights=True (slow path)", AttentionWithWeights(), (x,)),
    ]


def distinct_layers(model: nn.Module) -> nn.Module:
    """nn.TransformerEncoder / Decoder deep-copy one layer: every copy starts with equal weights, which a saved file
    stores once. Noise makes them distinct, as trained layers are."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.01)
    return model


def saved_megabytes(module) -> float:
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    return len(buffer.getvalue()) / 1e6


def first_tensor(output):
    return output[0] if isinstance(output, tuple) else output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    for name, model, inputs in models():
        model = distinct_layers(model).eval()
        with torch.no_grad():
            reference = first_tensor(model(*inputs))
            fp32_saved = saved_megabytes(torch.jit.freeze(torch.jit.script(model)))
        for dtype in (torch.float16, torch.bfloat16):
            converted = torch_mp.convert(model, inputs, dtype, progress=False)
            report = torch_mp.report_of(converted)
            with torch.no_grad():
                output = first_tensor(converted(*inputs))
            cosine = nn.functional.cosine_similarity(reference.double().flatten(), output.double().flatten(), dim=0)
            row = (f"| {name} | {str(dtype)[6:]} | {report.data['weight_bytes_before'] / 1e6:.2f} -> "
                   f"{report.data['weight_bytes_after'] / 1e6:.2f} | {report.reached_casts} | "
                   f"{report.cast_bytes / 1e6:.3f} | {fp32_saved:.2f} -> {saved_megabytes(converted):.2f} | "
                   f"{report.low_precision_flop_fraction * 100:.0f}% | {cosine.item():.6f} |")
            print(row, flush=True)
            rows.append(row)
    if args.no_write:
        return
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    with open(os.path.join(HERE, "results", "ATTENTION_MODULES.md"), "w") as f:
        f.write("# PyTorch's attention modules, converted\n\n")
        f.write(f"Command: `python benchmarks/attention_modules.py`. Date: {datetime.date.today()}. Machine: {cpu}, "
                f"{os.cpu_count()} cores. torch {torch.__version__}, Python {sys.version.split()[0]}. "
                "Inputs: batch 4, 64 tokens of width 256 (the decoder: 32 tokens); random weights, made distinct per "
                "layer.\n\n")
        f.write("Weights: tensor constants of the frozen graph (tensor attributes freezing kept are folded into "
                "constants first), before -> after. Casts: those that "
                "ran on the example inputs, and the MB they read and write per inference. Saved: `torch.jit.save` "
                "file of the fp32 frozen model -> of the converted one.\n\n")
        f.write("| model | dtype | weights MB | casts | cast MB/inference | saved MB | heavy FLOPs low | cosine |\n")
        f.write("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
