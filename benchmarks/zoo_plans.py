"""The zoo's plans, for comparing two versions of torch_mp: every model of tests/zoo converted to fp16 and bf16 (planned
for a CPU with fast kernels for both, as for a GPU), each node's precision and rule kind (with its guard), whether the
outputs on fresh inputs stay finite where fp32's are, and the weight ratio and low-FLOP share. --front export converts
with torch_mp.export instead of torch_mp.convert (nodes are then keyed by FX node name).

    python benchmarks/zoo_plans.py --out plans_new.json [--models NAME ...] [--front {convert,export}]
    python benchmarks/zoo_plans.py --out plans_new.json --compare plans_old.json   # prints what changed and why
"""
import argparse
import json
import os
import sys
import warnings

import torch

os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # the tests' models and helpers

import torch_mp  # noqa: E402
from agreement import flatten_tensors  # noqa: E402
from registry import build_model, load_zoo  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def plan_of(entry, dtype, front="convert"):
    model = build_model(entry)
    example = entry.inputs()
    converted = getattr(torch_mp, front)(model, example, dtype)
    report = torch_mp.report_of(converted)
    if front == "export":
        converted = converted.module()  # the ExportedProgram, run as a module
    turned = 0
    torch.manual_seed(1)
    for inputs in [example] + [entry.inputs() for _ in range(2)]:
        with torch.no_grad():
            reference, output = flatten_tensors(model(*inputs)), flatten_tensors(converted(*inputs))
        for ref, out in zip(reference, output):
            if ref.is_floating_point() and out.shape == ref.shape:
                turned += int((~torch.isfinite(out) & torch.isfinite(ref)).sum())
    nodes = {str(n["id"]): [n["op"], n["precision"], n["rule_kind"], (n.get("guard") or {}).get("kind")]
             for n in report.nodes}
    return {"nodes": nodes, "turned_non_finite": turned, "weight_ratio": report.weight_ratio,
            "low_flop_fraction": report.low_precision_flop_fraction,
            "non_finite_repair": report.data.get("non_finite_repair")}


def compare(old, new):
    for key in sorted(new):
        if key not in old:
            continue
        if "error" in old[key] or "error" in new[key]:
            print(f"{key}: error old: {old[key].get('error', '-')}; new: {new[key].get('error', '-')}")
            continue
        before, after = old[key]["nodes"], new[key]["nodes"]
        changed = [(node, before[node], after[node]) for node in after
                   if node in before and before[node][1] != after[node][1]]
        ruled = [(node, before[node], after[node]) for node in after
                 if node in before and before[node][1] == after[node][1] and before[node][2:] != after[node][2:]]
        only = {"old": [(n, before[n]) for n in before if n not in after],
                "new": [(n, after[n]) for n in after if n not in before]}
        if changed or ruled or only["old"] or only["new"] or old[key]["weight_ratio"] != new[key]["weight_ratio"]:
            print(f"{key}: {len(changed)} nodes changed precision, {len(ruled)} only rule kind or guard; weights {old[key]['weight_ratio']:.4f} -> "
                  f"{new[key]['weight_ratio']:.4f}, low FLOPs {old[key]['low_flop_fraction']:.4f} -> "
                  f"{new[key]['low_flop_fraction']:.4f}, non-finite outputs {old[key]['turned_non_finite']} -> "
                  f"{new[key]['turned_non_finite']}")
            for node, was, now in changed:
                print(f"    node {node} {now[0]}: {was[1]} -> {now[1]} ({now[2]}{', ' + now[3] if now[3] else ''})")
            for node, was, now in ruled:
                print(f"    node {node} {now[0]}: {now[1]}, {was[2:]} -> {now[2:]}")
            for side, nodes in only.items():
                if nodes:
                    print(f"    {len(nodes)} nodes only in the {side} plan: "
                          + ", ".join(f"{node} {record[0]}" for node, record in nodes[:10])
                          + (", ..." if len(nodes) > 10 else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--compare")
    parser.add_argument("--models", nargs="*")
    parser.add_argument("--front", choices=("convert", "export"), default="convert")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"torch_mp from {torch_mp.__file__}, front {args.front}", flush=True)
    zoo = load_zoo()
    plans = {}
    for name in args.models or sorted(zoo):
        for label, dtype in DTYPES.items():
            try:
                plans[f"{name} {label}"] = plan_of(zoo[name], dtype, args.front)
            except Exception as error:  # noqa: BLE001 - every model gets its entry
                plans[f"{name} {label}"] = {"error": f"{type(error).__name__}: {error}"[:300]}
            entry = plans[f"{name} {label}"]
            print(f"{name} {label}: " + (entry["error"] if "error" in entry else
                                          f"{entry['turned_non_finite']} non-finite, weights "
                                          f"{entry['weight_ratio']:.3f}"), flush=True)
    with open(args.out, "w") as f:
        json.dump(plans, f, indent=1)
    if args.compare:
        with open(args.compare) as f:
            old = json.load(f)
        compare(old, plans)
    return 0


if __name__ == "__main__":
    sys.exit(main())
