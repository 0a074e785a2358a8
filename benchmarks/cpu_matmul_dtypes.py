"""What the CPU's kernels give each dtype: the GEMMs of BERT-base and the convolutions of ResNet-50 in fp32, bf16 and
fp16, side by side in one run (interleaved rounds, medians), as achieved GFLOP/s and as speed relative to fp32.

    python benchmarks/cpu_matmul_dtypes.py [--threads 2] [--rounds 15]

Why: a mixed-precision model can only beat fp32 by as much as its low-precision GEMMs and convolutions beat fp32 ones
on the machine. This separates the kernels' own speed from anything a converter does. Shapes: BERT-base at batch 8,
sequence 128 (1024 rows: QKV/output 768x768, FFN 768x3072 and 3072x768, attention scores and context as batched
matmuls over 96 heads x 128 x 64); ResNet-50 at batch 8, 224x224 (a 3x3 and a 1x1 convolution of stage 1 and 3).
Writes benchmarks/results/cpu_matmul_dtypes.md.
"""
import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def gemms():
    """(name, flops, function of dtype returning a callable) for each shape."""
    rows = 8 * 128

    def linear(k, n):
        def make(dtype):
            x, w, b = torch.randn(rows, k, dtype=dtype), torch.randn(n, k, dtype=dtype), torch.randn(n, dtype=dtype)
            return lambda: torch.nn.functional.linear(x, w, b)
        return f"BERT linear {rows}x{k} -> {n}", 2 * rows * k * n, make

    def bmm(m, k, n):
        def make(dtype):
            a, b = torch.randn(96, m, k, dtype=dtype), torch.randn(96, k, n, dtype=dtype)
            return lambda: torch.bmm(a, b)
        return f"BERT bmm 96x{m}x{k} @ {k}x{n}", 2 * 96 * m * k * n, make

    def conv(channels_in, channels_out, kernel, size):
        def make(dtype):
            x = torch.randn(8, channels_in, size, size, dtype=dtype)
            w = torch.randn(channels_out, channels_in, kernel, kernel, dtype=dtype)
            return lambda: torch.nn.functional.conv2d(x, w, padding=kernel // 2)
        flops = 2 * 8 * channels_out * size * size * channels_in * kernel * kernel
        return f"ResNet-50 conv {kernel}x{kernel} {channels_in}->{channels_out} @ {size}x{size}", flops, make

    return [linear(768, 768), linear(768, 3072), linear(3072, 768), bmm(128, 64, 128), bmm(128, 128, 64),
            conv(64, 64, 3, 56), conv(256, 64, 1, 56), conv(256, 256, 3, 14), conv(1024, 256, 1, 14)]


def median_seconds(functions, rounds):
    """Median seconds per call of each function, timed in interleaved rounds after two warm-up calls each."""
    for function in functions:
        function()
        function()
    samples = [[] for _ in functions]
    for _ in range(rounds):
        for function, times in zip(functions, samples):
            start = time.perf_counter()
            function()
            times.append(time.perf_counter() - start)
    return [statistics.median(times) for times in samples]


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as info:
            flags = next(line for line in info if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    wanted = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_tile")
    return ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in wanted)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name, flops, make in gemms():
        seconds = median_seconds([make(dtype) for dtype in DTYPES.values()], args.rounds)
        rows.append((name, flops, seconds))
        print(name, " ".join(f"{label} {s * 1e3:.2f} ms" for label, s in zip(DTYPES, seconds)), flush=True)
    total = [sum(row[2][i] for row in rows) for i in range(len(DTYPES))]
    lines = [
        "# CPU kernels per dtype: GEMMs and convolutions",
        "",
        f"Command: `python benchmarks/cpu_matmul_dtypes.py --threads {args.threads} --rounds {args.rounds}`. "
        f"Date: {datetime.date.today()}. Machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores; CPU flags: {cpu_flags()}. torch {torch.__version__}, {args.threads} threads; "
        f"oneDNN ISA seen by torch: {torch.backends.cpu.get_cpu_capability()}. Median of {args.rounds} interleaved "
        "rounds.",
        "",
        "| op | fp32 ms | bf16 ms | fp16 ms | fp32 GFLOP/s | bf16 GFLOP/s | fp16 GFLOP/s | bf16 vs fp32 | fp16 vs fp32 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, flops, seconds in rows:
        ms = " | ".join(f"{s * 1e3:.2f}" for s in seconds)
        rates = " | ".join(f"{flops / s / 1e9:.0f}" for s in seconds)
        lines.append(f"| {name} | {ms} | {rates} | {seconds[0] / seconds[1]:.2f}x | {seconds[0] / seconds[2]:.2f}x |")
    lines.append(f"| all of the above | {' | '.join(f'{t * 1e3:.1f}' for t in total)} | | | | "
                 f"{total[0] / total[1]:.2f}x | {total[0] / total[2]:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(HERE, "results", "cpu_matmul_dtypes.md"), "w") as out:
        out.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
