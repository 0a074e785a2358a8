"""The export front against the TorchScript front on the zoo: every model torch.export can capture, converted to fp16
and bf16 by torch_mp.export and by torch_mp.convert, measured against fp32 as the accuracy suite measures it (worst
cosine of the first output over the example batch and two fresh ones), with the share of heavy-op FLOPs run low, the
weight ratio, whether exporting the result again changes any node, and the time of export + plan against
torch.export.export alone (both after one warm-up export of the model). Writes benchmarks/results/ZOO_EXPORT.md.

    python benchmarks/zoo_export.py [--models NAME ...] [--out benchmarks/results/ZOO_EXPORT.md]
"""
import argparse
import datetime
import os
import sys
import warnings
from typing import Dict, Tuple

import torch

# plan as on a CPU with fast fp16 and bf16 kernels (the plan a GPU conversion makes), whichever CPU runs this
os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # the tests' models and helpers

import torch_mp  # noqa: E402
from evaluate import evaluate  # noqa: E402
from harness import RESULTS, cpu_name, time_interleaved  # noqa: E402
from registry import build_model, load_zoo  # noqa: E402
from test_zoo_export import NOT_EXPORTABLE  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def export_seconds(model, inputs) -> float:
    """torch.export.export alone, as torch_mp.export calls it (non-strict), the better of two warm runs."""
    timing = time_interleaved({"export": lambda: torch.export.export(model, inputs, strict=False)}, rounds=2, warmup=1)
    return timing["export"].min_ms / 1e3


def node_signature(program):
    return [(node.op, str(node.target), getattr(node.meta.get("val"), "dtype", None)) for node in program.graph.nodes]


def planning_seconds(phases: Dict[str, float]) -> float:
    """torch_mp.export's export + plan: its report's capture and plan phases (the model runs, observe and verify, left
    out)."""
    return phases["capture"] + phases["plan"]


def idempotent(model, inputs, dtype) -> Tuple[bool, float]:
    """Whether torch_mp.export of torch_mp.export's program changes no node (target and dtype, in order); and the
    export + plan seconds of that first torch_mp.export (a second sample of evaluate's)."""
    program = torch_mp.export(model, inputs, dtype)
    report = torch_mp.report_of(program)
    same = node_signature(torch_mp.export(program, inputs, dtype)) == node_signature(program)
    return same, planning_seconds(report.data["phases"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", help="zoo names (default: every exportable one)")
    parser.add_argument("--out", default=os.path.join(RESULTS, "ZOO_EXPORT.md"))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    zoo = load_zoo()
    names = args.models or sorted(set(zoo) - set(NOT_EXPORTABLE))
    rows, ratios, worst_gap = [], [], 0.0
    for name in names:
        entry = zoo[name]
        torch.manual_seed(0)
        alone = export_seconds(build_model(entry), entry.inputs())
        for label, dtype in DTYPES.items():
            torch.manual_seed(0)
            exported = evaluate(entry, dtype, front="export")
            torch.manual_seed(0)
            converted = evaluate(entry, dtype, front="convert")
            torch.manual_seed(0)
            same, planning_again = idempotent(build_model(entry), entry.inputs(), dtype)
            gap = converted.cosine - exported.cosine
            worst_gap = max(worst_gap, gap)
            phases = dict(exported.phases)
            planning = min(planning_seconds(phases), planning_again)  # the better of two, as for export alone
            ratios.append((planning / alone, exported.seconds / alone))
            rows.append(f"| {name} | {label} | {exported.cosine:.6f} | {converted.cosine:.6f} | {gap:+.1e} | "
                        f"{exported.low_flop_fraction:.1%} / {converted.low_flop_fraction:.1%} | "
                        f"{exported.weight_ratio:.3f} / {converted.weight_ratio:.3f} | "
                        f"{'yes' if exported.dtypes_kept else 'NO'} | {'yes' if same else 'NO'} | "
                        f"{alone:.2f} | {planning:.2f} ({planning / alone:.2f}x) | "
                        f"{phases['observe'] + phases['verify']:.2f} | {exported.seconds:.2f} "
                        f"({exported.seconds / alone:.2f}x) |")
            print(rows[-1], flush=True)
    machine = cpu_name()
    planning_ratios, whole_ratios = sorted(r[0] for r in ratios), sorted(r[1] for r in ratios)
    lines = [
        "# The zoo through torch_mp.export, beside torch_mp.convert",
        "",
        f"Machine: {machine}, {os.cpu_count()} CPU cores; date {datetime.date.today()}; torch {torch.__version__}.",
        "Command: `python benchmarks/zoo_export.py`. Inputs and weights: tests/zoo/registry.py. Planned for a CPU with "
        "fast fp16 and bf16 kernels (TORCH_MP_CPU_FEATURES=all), as on a GPU.",
        "",
        "Cosine: worst over the example batch and two fresh ones, first output, against the fp32 model (gap: convert's "
        "minus export's; positive means the program is further from fp32). Low FLOPs and weights: export / convert. "
        "Idempotent: torch_mp.export of the converted program changes no node. Seconds: torch.export.export alone "
        "(best of two warm runs); torch_mp.export's export + plan (its report's phases: capture, i.e. the export and "
        "the functional form, and plan, i.e. decisions, min-cut, applying the plan and the report; the better of two "
        "calls, as for export alone), its model runs "
        "(the fp32 observation run and the converted program's verification run, which cost what the model costs at "
        "the example's batch on this CPU) and the whole call; ratios against export alone.",
        "",
        "| model | dtype | cosine export | cosine convert | gap | low FLOPs | weights | dtypes kept | idempotent | "
        "export s | export + plan s | model runs s | whole s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        f"Largest cosine gap (convert minus export): {worst_gap:.1e}. Against export alone: export + plan median "
        f"{planning_ratios[len(ratios) // 2]:.2f}x, largest {planning_ratios[-1]:.2f}x; the whole call median "
        f"{whole_ratios[len(ratios) // 2]:.2f}x, largest {whole_ratios[-1]:.2f}x.",
        "",
    ]
    with open(args.out, "w") as out:
        out.write("\n".join(lines))
    print(lines[-2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
