"""What the CPU's kernels give each dtype: the GEMMs of BERT-base and the convolutions of ResNet-50 in fp32, bf16 and
fp16, side by side in one run (interleaved rounds, medians), as achieved GFLOP/s and as speed relative to fp32.

    python benchmarks/cpu_matmul_dtypes.py [--threads 2] [--rounds 15] [--out benchmarks/results/cpu_matmul_dtypes.md]

Why: a mixed-precision model can only beat fp32 by as much as its low-precision GEMMs and convolutions beat fp32 ones
on the machine. This separates the kernels' own speed from anything a converter does. Shapes: BERT-base at batch 8,
sequence 128 (1024 rows: QKV/output 768x768, FFN 768x3072 and 3072x768, attention scores and context as batched
matmuls over 96 heads x 128 x 64); ResNet-50 at batch 8, 224x224 (a 3x3 and a 1x1 convolution of stage 1 and 3).
Writes benchmarks/results/cpu_matmul_dtypes.md.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import RESULTS, Machine, command_line, markdown_table, page_header, publish, time_interleaved  # noqa: E402

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
    parser.add_argument("--out", default=os.path.join(RESULTS, "cpu_matmul_dtypes.md"), help="the page it writes")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    table = []
    totals = dict.fromkeys(DTYPES, 0.0)
    for name, flops, make in gemms():
        timings = time_interleaved({label: make(dtype) for label, dtype in DTYPES.items()}, args.rounds)
        ms = {label: timing.median_ms for label, timing in timings.items()}
        print(name, " ".join(f"{label} {ms[label]:.2f} ms" for label in DTYPES), flush=True)
        table.append([name] + [f"{ms[label]:.2f}" for label in DTYPES]
                     + [f"{flops / ms[label] / 1e6:.0f}" for label in DTYPES]
                     + [f"{ms['fp32'] / ms['bf16']:.2f}x", f"{ms['fp32'] / ms['fp16']:.2f}x"])
        totals = {label: totals[label] + ms[label] for label in DTYPES}
    table.append(["all of the above"] + [f"{totals[label]:.1f}" for label in DTYPES] + ["", "", ""]
                 + [f"{totals['fp32'] / totals['bf16']:.2f}x", f"{totals['fp32'] / totals['fp16']:.2f}x"])
    headers = (["op"] + [f"{label} ms" for label in DTYPES] + [f"{label} GFLOP/s" for label in DTYPES]
               + ["bf16 vs fp32", "fp16 vs fp32"])
    page = "\n".join([
        "# CPU kernels per dtype: GEMMs and convolutions",
        "",
        page_header(Machine.this(), command_line(), f"{args.threads} threads", f"CPU flags: {cpu_flags()}",
                    f"oneDNN ISA seen by torch: {torch.backends.cpu.get_cpu_capability()}",
                    f"median of {args.rounds} interleaved rounds"),
        "",
        markdown_table(headers, table),
        ""])
    publish(page, args.out, whole_page=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
