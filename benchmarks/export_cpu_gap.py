"""Where the CPU time of torch_mp.export's AOTInductor package goes, against its two peers (issue 49, item 6): the
package as shipped beside the same program compiled without emulate_precision_casts (Inductor then computes an
fp32 -> low -> fp32 round trip inside a fused kernel in fp32: faster, but no longer what the program computes) and
beside a program whose fp32 choices (norms, softmax, reductions the policy keeps fp32) follow their inputs instead
(a diagnostic, not a plan to ship). All columns timed in interleaved rounds in one process.

    python benchmarks/export_cpu_gap.py [--models resnext50 roberta_4l] [--batches 1 8] [--repeats 10] [--out FILE]

Columns (median ms): compile (torch.compile under autocast), aoti_amp (AOTInductor of the autocast export),
ours (torch_mp.aoti_compile), ours_no_emulate, ours_follow; per row also the plan's casts and their MB per call, the
fp32 nodes by op, and each package's largest difference from the output of the program torch_mp.export returned
(not 0 even with emulate_precision_casts: Inductor's GEMM and convolution kernels are not ATen's; what the emulation
keeps is the rounding after each op the program computes in the low dtype).
"""
from __future__ import annotations

import argparse
import collections
import datetime
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_speed import UnderAutocast, build  # noqa: E402
from harness import cosine, cpu_name, first, interleaved_medians, publish  # noqa: E402

import torch_mp  # noqa: E402
from torch_mp._export.package import INDUCTOR_CONFIGS  # noqa: E402

COLUMNS = ["compile", "aoti_amp", "ours", "ours_no_emulate", "ours_follow"]


def follow_policy(report, base):
    """The policy with every op the plan kept fp32 by the policy's table set to follow its inputs."""
    policy = base.copy()
    for op in sorted({n["op"] for n in report.nodes if n["precision"] == "fp32" and n["rule_kind"] == "policy"}):
        policy.set(op, "follow", "export_cpu_gap: the fp32 choice made to follow")
    return policy


def measure(name, batch, dtype, repeats, folder):
    model, args = build(name, batch, "cpu")
    with torch.no_grad():
        reference = model(*args)
    base = torch_mp.OpPolicy.default("cpu_bf16" if dtype == torch.bfloat16 else "cpu_fp16")
    program = torch_mp.export(model, args, dtype, policy=base)
    report = torch_mp.report_of(program)
    followed = torch_mp.export(model, args, dtype, policy=follow_policy(report, base))
    with torch.no_grad():
        planned = first(program.module()(*args))
    amp = UnderAutocast(model, "cpu", dtype).eval()
    packages = {"aoti_amp": (torch.export.export(amp, args), {}),
                "ours": (program, INDUCTOR_CONFIGS),
                "ours_no_emulate": (program, {**INDUCTOR_CONFIGS, "emulate_precision_casts": False}),
                "ours_follow": (followed, INDUCTOR_CONFIGS)}
    calls = {"compile": torch.compile(amp)}
    for key, (exported, configs) in packages.items():
        path = os.path.join(folder, f"{name}_{batch}_{key}.pt2")
        torch._inductor.aoti_compile_and_package(exported, package_path=path, inductor_configs=configs)
        calls[key] = torch._inductor.aoti_load_package(path)
    row = {"model": name, "batch": batch, "casts": len(report.casts), "cast_mb": report.cast_bytes / 1e6,
           "fp32_ops": collections.Counter(n["op"] for n in report.nodes if n["precision"] == "fp32"),
           "cosine": {}, "from_program": {}}
    with torch.no_grad():
        for key, call in calls.items():
            output = first(call(*args))
            row["cosine"][key] = cosine(reference, output)
            row["from_program"][key] = (output.float() - planned.float()).abs().max().item()
    row["ms"] = interleaved_medians(calls, args, "cpu", repeats)
    return row


def table(rows):
    lines = ["| model | batch | " + " | ".join(f"{c} ms" for c in COLUMNS) +
             " | ours vs best peer | no_emulate vs best peer | follow vs best peer | casts (MB) |",
             "| --- | --- | " + " | ".join("---" for _ in COLUMNS) + " | --- | --- | --- | --- |"]
    for r in rows:
        ms = r["ms"]
        peer = min(ms["compile"], ms["aoti_amp"])
        lines.append(f"| {r['model']} | {r['batch']} | " + " | ".join(f"{ms[c]:.1f}" for c in COLUMNS) +
                     f" | {peer / ms['ours']:.2f}x | {peer / ms['ours_no_emulate']:.2f}x"
                     f" | {peer / ms['ours_follow']:.2f}x | {r['casts']} ({r['cast_mb']:.2f}) |")
    lines += ["", "Cosine of the first output against fp32, and the largest difference from torch_mp.export's "
              "program:", "", "| model | batch | " + " | ".join(COLUMNS) + " |",
              "| --- | --- | " + " | ".join("---" for _ in COLUMNS) + " |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['batch']} | " + " | ".join(
            f"{r['cosine'][c]:.6f} / {r['from_program'][c]:.2g}" for c in COLUMNS) + " |")
    lines += ["", "fp32 nodes of the plan, by op:", ""]
    for r in rows:
        ops = ", ".join(f"{op} {count}" for op, count in r["fp32_ops"].most_common())
        lines.append(f"- {r['model']} batch {r['batch']}: {ops or 'none'}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["resnext50", "roberta_4l"])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default=None, help="append the table to this markdown file")
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            for batch in args.batches:
                rows.append(measure(name, batch, dtype, args.repeats, folder))
                print(table(rows) + "\n", flush=True)
    publish(f"## cpu, {args.dtype}: where the package's time goes\n\nMachine: {cpu_name()} "
            f"({', '.join(torch_mp.cpu_features()) or 'no fast low-precision kernels'}), {os.cpu_count()} CPU cores; "
            f"date {datetime.date.today()}; torch {torch.__version__}.\nCommand: `python benchmarks/export_cpu_gap.py "
            + " ".join(sys.argv[1:]) + "`\n\n" + table(rows) + "\n", args.out)


if __name__ == "__main__":
    main()
