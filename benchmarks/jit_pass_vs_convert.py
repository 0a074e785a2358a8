"""The load-time pass against convert(): every scriptable zoo model, frozen and saved in fp32, loaded and run under
torch_mp.jit_pass, compared with the same model converted by torch_mp.convert (same dtype, default policy, the same
example inputs). Writes benchmarks/results/JIT_PASS.md.

    python benchmarks/jit_pass_vs_convert.py [--models NAME ...] [--dtypes fp16 bf16]

Per model and dtype: what the pass did, low-precision nodes and casts of both plans, and the first output's cosine
and max relative error (|a - b| / max |b|) of the pass against convert() and of convert() against fp32. The target:
the pass's distance to convert() within the low dtype's rounding, i.e. no larger than convert()'s own distance to
fp32, on every row where both plans agree.
"""
import argparse
import datetime
import os
import platform
import sys
import tempfile
import warnings

import torch

# plan as on a CPU with fast fp16 and bf16 kernels (the plan a GPU conversion makes), whichever CPU runs this
os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # the tests' models and helpers

import torch_mp  # noqa: E402
from agreement import compare, flatten_tensors  # noqa: E402
from registry import build_model, load_zoo  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _low_nodes(report):
    return sum(node["precision"] == "low" for node in report.nodes) if report else 0


def run_under_pass(path, inputs, dtype):
    with torch_mp.jit_pass(dtype=dtype), torch.no_grad():
        module = torch.jit.load(path)
        module(*inputs)  # the executor profiles
        module(*inputs)  # and optimizes: the pass has the graph record its inputs
        output = module(*inputs)  # and optimizes that graph: the pass converts it, observed on what it recorded
    return output, torch_mp.jit_pass.activity()


def measure(name, entry, dtype, folder):
    model = build_model(entry)
    torch.manual_seed(0)
    inputs = entry.inputs()
    with torch.no_grad():
        reference = flatten_tensors(model(*inputs))[0]
        converted = torch_mp.convert(model, inputs, dtype)
        report = torch_mp.report_of(converted)
        ahead = flatten_tensors(converted(*inputs))[0]
    path = os.path.join(folder, name + ".pt")
    torch.jit.save(torch.jit.freeze(torch.jit.script(model)), path)
    before = torch_mp.jit_pass.activity().converted
    output, activity = run_under_pass(path, inputs, dtype)
    at_load = flatten_tensors(output)[0]
    rewritten = activity.converted > before
    pass_report = activity.last_report if rewritten else None
    to_convert = compare(ahead.float(), at_load.float())
    to_fp32 = compare(reference.float(), ahead.float())
    return dict(
        outcome=activity.last_outcome if not rewritten else "converted",
        low=(_low_nodes(pass_report), _low_nodes(report)),
        casts=(len(pass_report.casts) if pass_report else 0, len(report.casts)),
        dtype_kept=at_load.dtype == reference.dtype,
        cosine=to_convert.cosine, error=to_convert.max_rel_error,
        convert_cosine=to_fp32.cosine, convert_error=to_fp32.max_rel_error,
        within=to_convert.max_rel_error <= max(to_fp32.max_rel_error, 1e-6),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", help="zoo names (default: every scriptable one)")
    parser.add_argument("--dtypes", nargs="*", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--output", default=os.path.join(ROOT, "benchmarks", "results", "JIT_PASS.md"))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    zoo = load_zoo()
    names = args.models or sorted(name for name, entry in zoo.items() if entry.capture == "script")
    lines = [
        "# The load-time pass against convert()",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores; date "
        f"{datetime.date.today()}; torch {torch.__version__}. Command: `python benchmarks/jit_pass_vs_convert.py`.",
        "Each scriptable zoo model frozen and saved in fp32, loaded and run three times under `torch_mp.jit_pass`",
        "(the executor profiles; the pass has the graph record its inputs; it converts, observed on them), against",
        "`torch_mp.convert` of the same model on the same inputs. Low",
        "nodes and casts: pass / convert. Cosine and max rel error of the first output: pass against convert, and",
        "convert against fp32. Within: the pass's error against convert no larger than convert's against fp32.",
        "",
        "| model | dtype | pass | low nodes | casts | dtype kept | cosine to convert | max rel error to convert "
        "| convert's cosine to fp32 | convert's max rel error | within |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            for dtype_name in args.dtypes:
                try:
                    row = measure(name, zoo[name], DTYPES[dtype_name], folder)
                except Exception as error:  # noqa: BLE001 (a row says what failed)
                    failures += 1
                    lines.append(f"| {name} | {dtype_name} | error: {str(error).splitlines()[0][:120]} |"
                                 + " |" * 8)
                    print(name, dtype_name, "error", error, flush=True)
                    continue
                failures += not (row["within"] and row["dtype_kept"])
                line = (f"| {name} | {dtype_name} | {row['outcome']} | {row['low'][0]} / {row['low'][1]} | "
                        f"{row['casts'][0]} / {row['casts'][1]} | {'yes' if row['dtype_kept'] else 'NO'} | "
                        f"{row['cosine']:.6f} | {row['error']:.2e} | {row['convert_cosine']:.6f} | "
                        f"{row['convert_error']:.2e} | {'yes' if row['within'] else 'NO'} |")
                lines.append(line)
                print(line, flush=True)
    with open(args.output, "w") as out:
        out.write("\n".join(lines) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
