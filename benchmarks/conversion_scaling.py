"""Conversion time vs graph size: torch_mp.convert against torch.jit.freeze on synthetic models of 1k to 100k nodes.

    python benchmarks/conversion_scaling.py [--sizes 1000,2000,...] [--repeats 3] [--no-write]

Models. A generated Python module (written to a temporary file so TorchScript can read its source) whose forward
chains N small blocks on an 8x16 fp32 tensor; the blocks cycle through what the converter sees in real models:
  mlp      linear (low) -> gelu (follow) -> residual add (follow; a diamond: x feeds the linear and the add)
  attn     matmul(x, x^T) (low) -> mul -> softmax (fp32) -> matmul (low) -> residual add
  norm     layer_norm (fp32) with its own weight and bias
  shuffle  slice, slice, mul, cat, view, reshape (follow)
  gate     exp (fp32), sum (fp32), div, mul, relu, add of a long skip connection (fan-out over several blocks)
  mm       mm with a 16x16 weight (low) -> relu
and every 40th block a data-dependent prim::If with one op per branch. Blocks are grouped 50 to a method
(`chunk_k`); freezing inlines them. Weights are parameters, so the frozen graph holds them as constants; the blocks
reuse 64 sets of them (--distinct-weights: one set per block). Why: PyTorch's own freezing compares same-shaped
tensor constants with each other (common-subexpression elimination and constant pooling hash a tensor constant by
its type, so equal-shaped weights share a bucket), which is quadratic in their number and would make
torch.jit.freeze, and with it the conversion, time that instead of the graph size.

Node count. All nodes of the graph that torch.jit.freeze returns for the scripted model (that is, after PyTorch's
frozen-graph optimisations, which is also where torch_mp's own fp32 clean-up starts), counted recursively through
the blocks of prim::If, prim::Constant nodes included, the graph's param and return nodes excluded. The block
count for a target size comes from a linear fit of node count vs block count measured on two small models.

Timings, each the median of --repeats runs (--repeats-large above 20k nodes) on the same scripted module
(scripting is not timed):
  freeze     torch.jit.freeze(scripted): clone, inline, fold attributes into constants, and PyTorch's frozen-graph
             optimisations (OptimizeFrozenGraph). It does not run the model.
  convert    wall time of torch_mp.convert(scripted, (x,), torch.float16): the same freeze
             (freeze_module, in C++), the conversion pipeline (which runs OptimizeFrozenGraph again, runs the model
             twice: once to observe every value, once to verify the result), wrapping the result as a
             Python module and parsing the JSON report.
  pipeline   report.data["seconds"]: the C++ pipeline alone (everything in convert after freezing), with its phases
             from report.data["phases"] when the build reports them.
  walk       the fastest of 5 walks over the converted graph's nodes (through blocks) reading the type of every value
             each reads and writes (graph_walk.cpp, built once per run with torch.utils.cpp_extension): the floor
             under any pass that touches every node, which grows per node as the graph outgrows the caches.
Fit: time = a * nodes^b by least squares on log(time) vs log(nodes); the exponent b is printed with the us/node at
the largest size. Writes benchmarks/results/conversion_scaling.png and benchmarks/results/CONVERSION_SCALING.md.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import math
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import warnings

import torch

# plan as on a CPU with fast fp16 and bf16 kernels (the plan a GPU conversion makes), whichever CPU runs this
os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")

import torch_mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import RESULTS, cpu_name  # noqa: E402
DEFAULT_SIZES = (1000, 2000, 5000, 10000, 20000, 50000, 100000)
BLOCKS_PER_METHOD = 50
IF_EVERY = 40
WEIGHT_SETS = 64  # blocks reuse 64 sets of weights (--distinct-weights: one set per block)
KINDS = ("mlp", "attn", "norm", "shuffle", "gate", "mm", "mlp", "shuffle", "attn", "gate")


def block_source(i: int, params: list) -> list:
    """Source lines of block i (indented for a method body); appends the parameters it needs to `params`."""
    w = i % WEIGHT_SETS
    if i % IF_EVERY == IF_EVERY - 1:
        return [
            "if bool(x.mean() > 1000.0):",
            "    x = x * 0.5",
            "else:",
            "    x = torch.relu(x)",
        ]
    kind = KINDS[i % len(KINDS)]
    if kind == "mlp":
        params += [(f"w{w}", (16, 16)), (f"b{w}", (16,))]
        return [
            f"h = torch.nn.functional.linear(x, self.w{w}, self.b{w})",
            "h = torch.nn.functional.gelu(h)",
            "x = x + h",
        ]
    if kind == "attn":
        return [
            "s = torch.matmul(x, x.t()) * 0.25",
            "p = torch.softmax(s, -1)",
            "x = x + torch.matmul(p, x)",
        ]
    if kind == "norm":
        params += [(f"g{w}", (16,)), (f"n{w}", (16,))]
        return [f"x = torch.layer_norm(x, [16], self.g{w}, self.n{w})"]
    if kind == "shuffle":
        return [
            "a = x[:, :8]",
            "c = x[:, 8:]",
            "x = torch.cat([c, a * 0.5], 1).view(4, 32).reshape(8, 16)",
        ]
    if kind == "gate":
        return [
            "t = torch.exp(x * 0.1)",
            "x = torch.relu(x * (t / t.sum(-1, keepdim=True))) + skip",
            "skip = x * 0.5",
        ]
    if kind == "mm":
        params += [(f"m{w}", (16, 16))]
        return [f"x = torch.relu(torch.mm(x, self.m{w}))"]
    raise AssertionError(kind)


def model_source(blocks: int) -> str:
    params: list = []
    methods = []
    chunks = 0
    for start in range(0, blocks, BLOCKS_PER_METHOD):
        body = []
        for i in range(start, min(blocks, start + BLOCKS_PER_METHOD)):
            body += block_source(i, params)
        methods.append(
            f"    def chunk{chunks}(self, x: torch.Tensor, skip: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:\n"
            + "".join(f"        {line}\n" for line in body)
            + "        return x, skip\n"
        )
        chunks += 1
    forward = ["    def forward(self, x: torch.Tensor) -> torch.Tensor:", "        skip = x"]
    forward += [f"        x, skip = self.chunk{k}(x, skip)" for k in range(chunks)]
    forward += ["        return x + skip"]
    init = ["    def __init__(self):", "        super().__init__()", "        g = torch.Generator().manual_seed(0)"]
    params = list(dict.fromkeys(params))
    init += [f"        for name, shape in {params!r}:"]
    init += ["            scale = 0.25 if len(shape) == 2 else 1.0"]
    init += ["            w = torch.randn(shape, generator=g) * scale"]
    init += ["            if name[0] == 'g':"]
    init += ["                w = 1.0 + 0.1 * w"]
    init += ["            self.register_parameter(name, torch.nn.Parameter(w))"]
    return (
        "import torch\nfrom typing import Tuple\n\n\nclass Synthetic(torch.nn.Module):\n"
        + "\n".join(init) + "\n\n" + "\n".join(forward) + "\n\n" + "\n".join(methods)
    )


def build_model(blocks: int, workdir: str) -> torch.nn.Module:
    path = os.path.join(workdir, f"synthetic_{blocks}.py")
    with open(path, "w") as f:
        f.write(model_source(blocks))
    spec = importlib.util.spec_from_file_location(f"synthetic_{blocks}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # TorchScript resolves the class's globals through its module
    spec.loader.exec_module(module)
    return module.Synthetic().eval()


def count_nodes(block) -> int:
    total = 0
    for node in block.nodes():
        total += 1
        for sub in node.blocks():
            total += count_nodes(sub)
    return total


def script(model: torch.nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.script(model)


def timed(fn):
    """(wall seconds, result); the process CPU seconds of the call go to timed.cpu (robust on a loaded machine)."""
    cpu = time.process_time()
    start = time.perf_counter()
    result = fn()
    timed.cpu = time.process_time() - cpu
    return time.perf_counter() - start, result


def fit_power(nodes, seconds):
    """Least squares on log(seconds) = log(a) + b log(nodes); returns (a, b)."""
    xs = [math.log(n) for n in nodes]
    ys = [math.log(s) for s in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return math.exp(my - b * mx), b


def graph_walk():
    """The compiled graph_walk.cpp (built on first use)."""
    if not hasattr(graph_walk, "module"):
        from torch.utils.cpp_extension import load

        graph_walk.module = load("torch_mp_graph_walk", [os.path.join(HERE, "graph_walk.cpp")], extra_cflags=["-O2"])
    return graph_walk.module


def measure(blocks: int, repeats: int, workdir: str, x: torch.Tensor) -> dict:
    model = build_model(blocks, workdir)
    script_s, scripted = timed(lambda: script(model))
    freeze_times, freeze_cpu = [], []
    frozen = None
    for _ in range(repeats):
        seconds, frozen = timed(lambda: torch.jit.freeze(scripted))
        freeze_times.append(seconds)
        freeze_cpu.append(timed.cpu)
    nodes = count_nodes(frozen.graph)
    with torch.no_grad():
        expected = frozen(x)
    assert torch.isfinite(expected).all(), "the synthetic fp32 model overflows"
    convert_times, convert_cpu, pipeline_times, phases = [], [], [], []
    graphs = set()
    for _ in range(repeats):
        seconds, converted = timed(lambda: torch_mp.convert(scripted, (x,), torch.float16))
        report = torch_mp.report_of(converted)
        convert_times.append(seconds)
        convert_cpu.append(timed.cpu)
        pipeline_times.append(report.data["seconds"])
        phases.append(report.data.get("phases", {}))
        graphs.add(re.sub(r"___torch_mangle_\d+", "", str(converted.graph)))  # each clone gets a new class name
    with torch.no_grad():
        got = converted(x)
    assert got.dtype == torch.float32 and torch.isfinite(got).all(), "converted model gives a bad output"
    assert len(graphs) == 1, "repeated conversions of one model gave different graphs"
    cosine = torch.nn.functional.cosine_similarity(got.flatten(), expected.flatten(), dim=0).item()
    median_phases = {}
    for name in phases[0]:
        median_phases[name] = statistics.median(p[name] for p in phases)
    return {
        "blocks": blocks,
        "nodes": nodes,
        "script": script_s,
        "freeze": statistics.median(freeze_times),
        "convert": statistics.median(convert_times),
        "freeze_cpu": statistics.median(freeze_cpu),
        "convert_cpu": statistics.median(convert_cpu),
        "pipeline": statistics.median(pipeline_times),
        "phases": median_phases,
        "low": sum(n["precision"] == "low" for n in report.nodes),
        "planned": len(report.nodes),
        "casts": len(report.casts),
        "cosine": cosine,
        "walk": graph_walk().walk_seconds(converted.graph, 5),
    }


def calibrate(workdir: str):
    """Nodes per block and fixed nodes, from two small models (the pattern repeats every 200 blocks)."""
    counts = []
    for blocks in (200, 400):
        frozen = torch.jit.freeze(script(build_model(blocks, workdir)))
        counts.append(count_nodes(frozen.graph))
    per_block = (counts[1] - counts[0]) / 200
    return per_block, counts[0] - 200 * per_block


def table(rows) -> str:
    phase_names = list(rows[-1]["phases"])
    head = ["nodes", "blocks", "torch.jit.freeze s", "torch_mp.convert s", "pipeline s", "convert us/node",
            "convert / freeze", "freeze CPU s", "convert CPU s"] + [f"{p} s" for p in phase_names] + [
            "own us/node", "walk us/node", "own / walk"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [f"{r['nodes']}", f"{r['blocks']}", f"{r['freeze']:.3f}", f"{r['convert']:.3f}",
                 f"{r['pipeline']:.3f}", f"{1e6 * r['convert'] / r['nodes']:.1f}",
                 f"{r['convert'] / r['freeze']:.2f}", f"{r['freeze_cpu']:.3f}", f"{r['convert_cpu']:.3f}"]
        cells += [f"{r['phases'].get(p, float('nan')):.3f}" for p in phase_names]
        own = own_seconds(r)
        cells += [f"{1e6 * own / r['nodes']:.2f}", f"{1e6 * r['walk'] / r['nodes']:.3f}", f"{own / r['walk']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The phases that are torch_mp's own work (issue 14's conversion target): all but PyTorch's freezing and clean-up
# passes (`cleanup`, `tidy`) and the model runs (`observe`, `verify`).
OWN_PHASES = ("plan", "apply", "cancel", "kernels", "report")


def own_seconds(row) -> float:
    return sum(row["phases"].get(p, 0.0) for p in OWN_PHASES)


def fits_text(rows) -> str:
    nodes = [r["nodes"] for r in rows]
    lines = ["| timing | a | exponent b | us/node at the largest size |", "| --- | --- | --- | --- |"]
    for key, label in (("freeze", "torch.jit.freeze"), ("convert", "torch_mp.convert (wall)"),
                       ("pipeline", "torch_mp pipeline (report seconds)"), ("freeze_cpu", "torch.jit.freeze (CPU)"),
                       ("convert_cpu", "torch_mp.convert (CPU)")):
        a, b = fit_power(nodes, [r[key] for r in rows])
        lines.append(f"| {label} | {a:.3g} | {b:.3f} | {1e6 * rows[-1][key] / rows[-1]['nodes']:.2f} |")
    for phase in rows[-1]["phases"]:
        values = [r["phases"].get(phase, 0.0) for r in rows]
        if min(values) > 0:
            a, b = fit_power(nodes, values)
            lines.append(f"| phase {phase} | {a:.3g} | {b:.3f} | {1e6 * values[-1] / rows[-1]['nodes']:.2f} |")
    own = [own_seconds(r) for r in rows]
    if min(own) > 0:
        a, b = fit_power(nodes, own)
        lines.append(f"| torch_mp's own stages ({' + '.join(OWN_PHASES)}) | {a:.3g} | {b:.3f} | "
                     f"{1e6 * own[-1] / rows[-1]['nodes']:.2f} |")
    a, b = fit_power(nodes, [r["walk"] for r in rows])
    lines.append(f"| one walk over the converted graph (graph_walk.cpp) | {a:.3g} | {b:.3f} | "
                 f"{1e6 * rows[-1]['walk'] / rows[-1]['nodes']:.3f} |")
    return "\n".join(lines)


def plot(rows, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = [r["nodes"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 5))
    for key, label, style in (("convert", "torch_mp.convert (wall)", "o-"),
                              ("pipeline", "torch_mp pipeline (report seconds)", "s-"),
                              ("freeze", "torch.jit.freeze", "^-")):
        seconds = [r[key] for r in rows]
        a, b = fit_power(nodes, seconds)
        line, = ax.plot(nodes, seconds, style, label=f"{label}: {a:.2g} n^{b:.2f}")
        ax.plot(nodes, [a * n**b for n in nodes], "--", color=line.get_color(), alpha=0.5)
    ax.plot(nodes, [5e-6 * n for n in nodes], ":", color="gray", label="target 5 us/node")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes of the frozen graph")
    ax.set_ylabel("seconds (median)")
    ax.set_title("Conversion time vs graph size (fp16, CPU)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--repeats-large", type=int, default=1, help="runs per size above 20k nodes")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write the .md and .png")
    parser.add_argument("--distinct-weights", action="store_true",
                        help="one weight set per block instead of 64 shared ones (PyTorch's freeze is then quadratic)")
    args = parser.parse_args()
    global WEIGHT_SETS
    if args.distinct_weights:
        WEIGHT_SETS = 10**9
    sizes = [int(s) for s in args.sizes.split(",")]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(8, 16)
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        per_block, fixed = calibrate(workdir)
        print(f"calibration: {per_block:.2f} nodes per block + {fixed:.0f}", flush=True)
        for size in sizes:
            blocks = max(1, round((size - fixed) / per_block))
            row = measure(blocks, args.repeats if size <= 20000 else args.repeats_large, workdir, x)
            rows.append(row)
            print(f"{row['nodes']:>7} nodes ({blocks} blocks; scripting {row['script']:.1f} s): "
                  f"freeze {row['freeze']:.3f} s, convert {row['convert']:.3f} s, pipeline {row['pipeline']:.3f} s "
                  f"{ {k: round(v, 3) for k, v in row['phases'].items()} } "
                  f"low {row['low']}/{row['planned']} casts {row['casts']} cosine {row['cosine']:.4f}", flush=True)
    total = time.perf_counter() - started
    text = table(rows)
    fits = fits_text(rows)
    print()
    print(text)
    print()
    print(fits)
    print(f"\ntotal benchmark time {total:.0f} s")
    if args.no_write:
        return 0
    plot(rows, os.path.join(RESULTS, "conversion_scaling.png"))
    largest = rows[-1]
    md = f"""# Conversion time vs graph size

Command: `python benchmarks/conversion_scaling.py` (sizes {args.sizes}; median of {args.repeats} runs up to 20k
nodes, {args.repeats_large} above;
{total:.0f} s in all). Date: {datetime.date.today().isoformat()}. Machine: {cpu_name()}, {os.cpu_count()} cores
(torch uses 1 thread; "CPU s" is the process's CPU time, steadier than wall time when other jobs share the
machine). torch {torch.__version__}, Python {platform.python_version()}.

Models: synthetic chains of small blocks on an 8x16 fp32 tensor (linear/matmul/mm, gelu/relu/add/mul/slice/cat/
view/reshape, softmax/layer_norm/exp/sum, residual diamonds, a long skip connection, a data-dependent `prim::If`
every 40 blocks; the blocks reuse 64 sets of weights, `--distinct-weights` gives each block its own); see the
script's docstring. **Nodes**: all nodes of the graph `torch.jit.freeze` returns, counted
through `prim::If` blocks, constants included, the graph's param/return nodes excluded.

**What is timed.** `torch.jit.freeze`: freezing only (clone, inline, fold attributes, PyTorch's frozen-graph
optimisations); it never runs the model. `torch_mp.convert`: wall time of the whole call, which also freezes (in
C++, `freeze_module`) and runs PyTorch's frozen-graph optimisations (its `cleanup` phase), **runs the model twice** (once to observe every
value's dtype, size and range, once to verify the converted outputs), plans, applies, and builds the report
(parsed into Python). `pipeline`: `report.data["seconds"]`, the C++ pipeline after freezing; its phases are
`report.data["phases"]` (`tidy`: the clean-up passes run between torch_mp's stages: mutation removal, dead code, constant pooling and CSE). "torch_mp's own
stages" below: {' + '.join(OWN_PHASES)}, everything but PyTorch's freezing and clean-up passes and the model runs.
`walk`: the fastest of 5 walks over the converted graph's nodes and the types of the values they read and write
(`graph_walk.cpp`), the floor under any pass that touches every node; "own / walk": the own stages in such walks.

{text}

Fit `time = a * nodes^b` (least squares on log-log over all sizes):

{fits}

At {largest['nodes']} nodes: torch_mp.convert {largest['convert']:.3f} s
({1e6 * largest['convert'] / largest['nodes']:.2f} us/node), torch.jit.freeze {largest['freeze']:.3f} s,
ratio {largest['convert'] / largest['freeze']:.2f}.

![conversion time vs graph size](conversion_scaling.png)
"""
    path = os.path.join(RESULTS, "CONVERSION_SCALING.md")
    begin, end = "<!-- conversion_scaling.py: begin -->", "<!-- conversion_scaling.py: end -->"
    section = f"{begin}\n{md.split(chr(10), 2)[2].strip()}\n{end}"
    text_now = open(path).read() if os.path.exists(path) else ""
    if begin in text_now and end in text_now:  # replace the measured section, keep the prose around it
        text_now = text_now[: text_now.index(begin)] + section + text_now[text_now.index(end) + len(end):]
    else:
        text_now = "# Conversion time vs graph size\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text_now)
    print("wrote benchmarks/results/CONVERSION_SCALING.md and benchmarks/results/conversion_scaling.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
