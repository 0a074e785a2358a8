"""Peak memory of converting a model with about 1 GB of fp32 weights (issue target: peak RSS <= 1.6x model size).

    python benchmarks/memory.py [--gb 1.0] [--dtype fp16|bf16]

Runs in this process: RSS is measured before the model exists, after it is built, and at the peak of the whole
run (ru_maxrss); conversion's share is peak minus the before-model baseline, divided by the model's weight bytes.
"""
import argparse
import os
import resource
import sys
import time

import torch
from torch import nn

# plan as on a CPU with fast fp16 and bf16 kernels (the plan a GPU conversion makes), whichever CPU runs this
os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")

import torch_mp


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    args = parser.parse_args()
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    width = 4096
    layers = max(1, round(args.gb * 2**30 / (width * width * 4)))
    torch.manual_seed(0)
    x = torch.randn(1, width)
    baseline = rss_bytes()
    with torch.no_grad():
        model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)]).eval()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    built = rss_bytes()
    start = time.perf_counter()
    converted, report = torch_mp.convert(model, (x,), dtype, return_report=True)
    seconds = time.perf_counter() - start
    peak = peak_rss_bytes()
    print(f"torch {torch.__version__}; {layers} x Linear({width}, {width}); weights {weight_bytes / 2**30:.3f} GiB; "
          f"dtype {args.dtype}")
    print(f"RSS before model {baseline / 2**30:.3f} GiB, after building it {built / 2**30:.3f} GiB, "
          f"peak {peak / 2**30:.3f} GiB; conversion {seconds:.1f} s")
    print(f"peak over baseline / model size = {(peak - baseline) / weight_bytes:.2f}x "
          f"(converted weights {report.data['weight_bytes_after'] / 2**30:.3f} GiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
