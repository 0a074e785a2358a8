"""The zoo's accuracy table: every model of tests/zoo converted to fp16 and bf16 and measured against fp32, as the
accuracy suite (tests/zoo/test_zoo_accuracy.py) measures it. Writes benchmarks/results/ZOO_<device>.md.

    python benchmarks/zoo_table.py [--device cpu|cuda] [--models NAME ...]
"""
import argparse
import datetime
import os
import platform
import sys
import warnings

import torch

# plan as on a CPU with fast fp16 and bf16 kernels (the plan a GPU conversion makes), whichever CPU runs this
os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # the tests' models and helpers

from evaluate import evaluate  # noqa: E402
from registry import load_zoo  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--models", nargs="*", help="zoo names (default: all)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    zoo = load_zoo()
    names = args.models or sorted(zoo)
    machine = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine()
    lines = [
        f"# Zoo accuracy ({args.device})",
        "",
        f"Machine: {machine}, {os.cpu_count()} CPU cores; date {datetime.date.today()}; torch {torch.__version__}.",
        f"Command: `python benchmarks/zoo_table.py --device {args.device}`. Inputs and weights: tests/zoo/registry.py;"
        " metrics over the example batch and two fresh ones (worst cosine and max relative error, top-1 over all"
        " rows; top-1 only for classifiers). Low FLOPs: share of the heavy ops' multiply-adds run in low precision.",
        "",
        "| model | capture | dtype | cosine | max rel error | top-1 | weights after/before | casts | cast MB | "
        "low FLOPs | convert s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    print("\n".join(lines), flush=True)
    failures = 0
    for name in names:
        entry = zoo[name]
        for label, dtype in DTYPES.items():
            try:
                r = evaluate(entry, dtype, device=args.device)
                top1 = f"{r.top1 * 100:.1f}%" if entry.classifier else "-"
                finite = "" if r.finite and r.dtypes_kept else " (NOT FINITE or dtypes changed)"
                row = (f"| {name} | {r.capture} | {label} | {r.cosine:.6f}{finite} | {r.max_rel_error:.2e} | {top1} | "
                       f"{r.weight_ratio:.3f} | {r.casts} | {r.cast_bytes / 1e6:.2f} | "
                       f"{r.low_flop_fraction * 100:.1f}% | {r.seconds:.2f} |")
            except Exception as error:  # noqa: BLE001 - every model gets its row
                failures += 1
                row = f"| {name} | {entry.capture} | {label} | FAILED: {type(error).__name__}: " \
                      f"{str(error).strip().splitlines()[0][:160]} |"
            lines.append(row)
            print(row, flush=True)
    with open(os.path.join(ROOT, "benchmarks", "results", f"ZOO_{args.device}.md"), "w") as out:
        out.write("\n".join(lines) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
