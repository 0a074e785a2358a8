"""The fast-kernel rule on this CPU: each model converted to fp16 and to bf16 with the default policy (which keeps the
heavy ops fp32 where the CPU has no fast kernels for the low dtype) and with the heavy ops forced low
(OpPolicy.default(target, cpu_features="all")), against the frozen fp32 TorchScript model, in one run: conversion
seconds, inference median (interleaved rounds), low-FLOP fraction.

    python benchmarks/cpu_fast_kernels.py [--threads 2] [--rounds 5] [--height 320 --width 640]

Models: a VGG-16 U-Net text detector (CRAFT-like: VGG-16-BN encoder, four upsample+concat decoder stages) at
1x3xHEIGHTxWIDTH (on a CPU without fp16 arithmetic its forced fp16 form takes minutes per call at 320x640), and an
LSTM tagger (2 layers, 256 wide, 64 tokens, batch 8). Writes benchmarks/results/CPU_FAST_KERNELS.md.
"""
import argparse
import os
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import torch_mp  # noqa: E402
from harness import RESULTS, Machine, command_line, markdown_table, page_header, publish, time_interleaved  # noqa: E402


def block(channels_in, channels_out, convolutions):
    layers = []
    for i in range(convolutions):
        layers += [nn.Conv2d(channels_in if i == 0 else channels_out, channels_out, 3, padding=1),
                   nn.BatchNorm2d(channels_out), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


class VggUNet(nn.Module):
    """CRAFT's shape: VGG-16-BN stages, each decoder stage upsamples, concatenates the skip and convolves."""

    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleList([block(3, 64, 2), block(64, 128, 2), block(128, 256, 3), block(256, 512, 3),
                                     block(512, 512, 3)])
        # each decoder reads the upsampled deeper output and the skip of its stage, concatenated
        self.decoders = nn.ModuleList([block(512 + 512, 256, 2), block(256 + 256, 128, 2), block(128 + 128, 64, 2),
                                       block(64 + 64, 32, 2)])
        self.head = nn.Conv2d(32, 2, 1)

    def forward(self, x):
        skips = []
        for i, stage in enumerate(self.stages):
            x = stage(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        y = skips[-1]
        for decoder, skip in zip(self.decoders, reversed(skips[:-1])):
            y = F.interpolate(y, size=skip.shape[2:], mode="bilinear", align_corners=False)
            y = decoder(torch.cat([y, skip], 1))
        return self.head(y)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(1000, 256)
        self.lstm = nn.LSTM(256, 256, num_layers=2, batch_first=True)
        self.out = nn.Linear(256, 40)

    def forward(self, tokens):
        return self.out(self.lstm(self.embed(tokens))[0])


def models(height, width):
    torch.manual_seed(0)
    yield f"VGG-16 U-Net 1x3x{height}x{width}", VggUNet().eval(), (torch.randn(1, 3, height, width),)
    yield "LSTM tagger 8x64 tokens", Tagger().eval(), (torch.randint(0, 1000, (8, 64)),)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--height", type=int, default=320)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--output", default=os.path.join(RESULTS, "CPU_FAST_KERNELS.md"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    os.environ.pop("TORCH_MP_CPU_FEATURES", None)  # this CPU's features decide the default policy

    table = []
    lines = [
        "# Low precision only where the CPU has fast kernels",
        "",
        page_header(Machine.this(), command_line(), f"{args.threads} threads"),
        "",
        "default: `convert(model, x, dtype)`; forced: `policy=OpPolicy.default(target, cpu_features=\"all\")` (the "
        "plan for a CPU with fast kernels, run here). Inference: median of interleaved rounds, speed-up against the "
        "frozen fp32 TorchScript model.",
        "",
    ]
    for name, model, inputs in models(args.height, args.width):
        with torch.no_grad():
            fp32 = torch.jit.freeze(torch.jit.trace(model, inputs))
        runs = {}
        for dtype_name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            target = torch_mp.target_for(torch.device("cpu"), dtype)
            for plan, policy in (("default", None), ("forced", torch_mp.OpPolicy.default(target, cpu_features="all"))):
                start = time.perf_counter()
                converted = torch_mp.convert(model, inputs, dtype, policy=policy)
                report = torch_mp.report_of(converted)
                seconds = time.perf_counter() - start
                runs[(dtype_name, plan)] = (converted, seconds, report.low_precision_flop_fraction)
                print(f"{name} {dtype_name} {plan}: converted in {seconds:.1f} s", flush=True)
        calls = {("fp32", "frozen TorchScript"): lambda: fp32(*inputs)}
        calls.update({key: (lambda module=module: module(*inputs)) for key, (module, _, _) in runs.items()})
        ms = {key: timing.median_ms for key, timing in time_interleaved(calls, args.rounds).items()}
        fp32_ms = ms[("fp32", "frozen TorchScript")]
        print(f"{name}: fp32 {fp32_ms:.1f} ms", flush=True)
        table.append([name, "fp32", "frozen TorchScript", "", "", f"{fp32_ms:.1f}", "1.00x"])
        for (dtype_name, plan), (_, convert_seconds, low) in runs.items():
            table.append([name, dtype_name, plan, f"{convert_seconds:.1f}", f"{low:.2f}", f"{ms[dtype_name, plan]:.1f}",
                          f"{fp32_ms / ms[dtype_name, plan]:.2f}x"])
    lines += [markdown_table(["model", "dtype", "plan", "conversion s", "low FLOPs", "inference ms", "vs fp32"], table),
              ""]
    publish("\n".join(lines), args.output, whole_page=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
