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
import datetime
import os
import platform
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch_mp  # noqa: E402
from cpu_matmul_dtypes import median_seconds  # noqa: E402  (this folder is sys.path[0])


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
    parser.add_argument("--output", default=os.path.join(HERE, "results", "CPU_FAST_KERNELS.md"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    os.environ.pop("TORCH_MP_CPU_FEATURES", None)  # this CPU's features decide the default policy

    lines = [
        "# Low precision only where the CPU has fast kernels",
        "",
        f"`python benchmarks/cpu_fast_kernels.py --threads {args.threads} --rounds {args.rounds} "
        f"--height {args.height} --width {args.width}`, "
        f"{datetime.date.today()}, torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{args.threads} threads; detected CPU features: {', '.join(torch_mp.cpu_features()) or 'none'}.",
        "",
        "default: `convert(model, x, dtype)`; forced: `policy=OpPolicy.default(target, cpu_features=\"all\")` (the "
        "plan for a CPU with fast kernels, run here). Inference: median of interleaved rounds, speed-up against the "
        "frozen fp32 TorchScript model.",
        "",
        "| model | dtype | plan | conversion s | low FLOPs | inference ms | vs fp32 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, model, inputs in models(args.height, args.width):
        with torch.no_grad():
            fp32 = torch.jit.freeze(torch.jit.trace(model, inputs))
        runs = {}
        for dtype_name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            target = torch_mp.target_for(torch.device("cpu"), dtype)
            for plan, policy in (("default", None), ("forced", torch_mp.OpPolicy.default(target, cpu_features="all"))):
                start = time.perf_counter()
                converted, report = torch_mp.convert(model, inputs, dtype, policy=policy, return_report=True)
                seconds = time.perf_counter() - start
                runs[(dtype_name, plan)] = (converted, seconds, report.low_precision_flop_fraction)
                print(f"{name} {dtype_name} {plan}: converted in {seconds:.1f} s", flush=True)
        keys = list(runs)

        def call(module):
            def run():
                with torch.no_grad():
                    module(*inputs)
            return run

        times = median_seconds([call(fp32)] + [call(runs[key][0]) for key in keys], args.rounds)
        print(f"{name}: fp32 {times[0] * 1e3:.1f} ms", flush=True)
        lines.append(f"| {name} | fp32 | frozen TorchScript | | | {times[0] * 1e3:.1f} | 1.00x |")
        for key, seconds in zip(keys, times[1:]):
            _, convert_seconds, low = runs[key]
            lines.append(f"| {name} | {key[0]} | {key[1]} | {convert_seconds:.1f} | {low:.2f} | {seconds * 1e3:.1f} | "
                         f"{times[0] / seconds:.2f}x |")
    with open(args.output, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
