"""Random TorchScript models built from the ops in torch_mp's policy lists, and the check every conversion must pass.

A program is a sequence of statements over float tensors of shape [B, F] (plus an int input and bool masks):
low-precision ops (linear, matmul, bmm, conv1d), follow ops (activations, arithmetic, views, slices, cat, where), widest ops
(addcmul), fp32 ops (softmax, exp, log-sum, layer norm, mean), in-place ops on clones and on aliasing views,
integer and bool tensors, Python scalars, `if` and `for` blocks, and outputs packed into tuples, lists and dicts.

    python tests/python/graph_fuzzer.py --graphs 10000 --workers 2     # the long run
    python tests/python/graph_fuzzer.py --graphs 2000 --workers 2 --fronts   # both fronts decide alike
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import math
import os
import random
import sys
import tempfile
import textwrap
import time
import traceback
from typing import Callable, List, Sequence

import torch
from torch import nn

import torch_mp
from agreement import flatten_tensors

BATCH, FEATURES = 4, 8
UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


class Chooser:
    """Where the generator's decisions come from: a seeded Random, or hypothesis draws (which shrink)."""

    def __init__(self, integer: Callable[[int, int], int]):
        self.integer = integer

    def pick(self, options: Sequence):
        return options[self.integer(0, len(options) - 1)]

    @staticmethod
    def from_seed(seed: int) -> "Chooser":
        rng = random.Random(seed)
        return Chooser(rng.randint)


# Each op: (template, number of float inputs, depth it adds). {a}, {b}, {c} are float values; {p} a parameter index.
# `self.norm` normalises `{a} + x`: a layer norm of a nearly constant row divides rounding noise by a tiny standard
# deviation, an ill-conditioned program whose fp32 and fp16 answers differ whatever a converter does.
UNARY = [
    ("torch.relu({a})", 1), ("torch.tanh({a})", 1), ("torch.sigmoid({a})", 1),
    ("torch.nn.functional.gelu({a})", 1), ("{a}.clamp(-2.0, 2.0)", 1), ("({a} * 0.5 + 1.0)", 1),
    ("{a}.contiguous().view({B}, {F})", 1), ("{a}.transpose(0, 1).contiguous().transpose(0, 1)", 1), ("{a}.flatten().view({B}, {F})", 1),
    ("torch.softmax({a}, -1)", 1), ("torch.log_softmax({a}, -1)", 1), ("torch.exp({a}.clamp(max=3.0))", 1),
    ("({a} - {a}.mean(-1, keepdim=True))", 1), ("self.norm({a} + x)", 1), ("({a}.sum(-1, keepdim=True) * 0.1 + {a})", 1),
    ("torch.nn.functional.dropout({a}, 0.5, False)", 1), ("{a}.pow(2.0).clamp(max=4.0)", 1),
    # divisors that a 0 would turn into inf or NaN: a norm clamped to 1e-12 (F.normalize), an RMS with a 1e-12
    # epsilon, a learned scale of 1e-9; fp16 rounds each to 0
    ("torch.nn.functional.normalize({a}, dim=-1)", 1),
    ("({a} * torch.rsqrt({a}.pow(2.0).mean(-1, keepdim=True) + 1e-12))", 1),
    ("(({a} * 1e-9) / self.small)", 1),
]
LOW = [("self.lin{p}({a})", 1), ("torch.matmul({a}, self.w{p})", 1), ("torch.bmm({a}.unsqueeze(0), self.w{p}.unsqueeze(0))[0]", 1),
       ("self.conv({a}.unsqueeze(1)).squeeze(1)", 1)]
BINARY = [
    ("({a} + {b})", 2), ("({a} * {b})", 2), ("({a} - {b})", 2),
    ("torch.cat([{a}, {b}], 1)[:, 0:{F}]", 2), ("torch.stack([{a}, {b}], 0).sum(0)", 2),
    ("torch.where({a} > 0.0, {a}, {b})", 2), ("torch.maximum({a}, {b})", 2),
    ("torch.addcmul({a}, {b}, {b}, value=0.5)", 2),
]


def _fresh(names: List[str]) -> str:
    name = f"v{len(names)}"
    names.append(name)
    return name


def generate_program(choose: Chooser, max_statements: int = 10, control_flow: bool = True):
    """Returns (source of an nn.Module subclass named Fuzzed, the depth of each floating output's cone, in the order
    flatten_tensors gives the outputs). Without `control_flow`, no `if` on data and no loop over an input's value
    (torch.export captures neither): an expression stands in for them."""
    values, depth = ["x"], {"x": 0}
    lines: List[str] = []
    names: List[str] = ["x"]
    ints = ["i"]
    bools: List[str] = []

    def operand() -> str:
        # mostly the newest values, so that statements chain into deep graphs instead of dying as dead code
        return choose.pick(values[-3:]) if choose.integer(0, 3) else choose.pick(values)

    def expression():
        template, arity = choose.pick(choose.pick([LOW, UNARY, UNARY, BINARY]))
        inputs = [operand() for _ in range(arity)]
        text = template.format(a=inputs[0], b=inputs[-1], B=BATCH, F=FEATURES, p=choose.integer(0, 2))
        return text, 1 + max(depth[v] for v in inputs)

    for _ in range(choose.integer(1, max_statements)):
        kind = choose.integer(0, 9)
        if kind <= 5 or (kind in (7, 8) and not control_flow):
            text, d = expression()
            name = _fresh(names)
            lines.append(f"{name} = {text}")
        elif kind == 6:  # in place, on a clone and through an aliasing view
            source = operand()
            name = _fresh(names)
            other = operand()
            lines += [f"{name} = {source}.clone(memory_format=torch.contiguous_format)", f"{name}.add_({other})",
                      f"{name}.view(-1).mul_(0.5)"]
            d = 1 + max(depth[source], depth[other])
        elif kind == 7:  # if / else on data
            # decided on the fp32 input: a condition on a converted value near 0 would flip with rounding, and
            # the two programs would then legitimately differ
            column = choose.integer(0, FEATURES - 1)
            (then_text, d1), (else_text, d2) = expression(), expression()
            name = _fresh(names)
            lines += [f"if bool(x[0, {column}] > 0.0):", f"    {name} = {then_text}", "else:",
                      f"    {name} = {else_text}"]
            d = max(d1, d2)
        elif kind == 8:  # loop carrying a tensor
            source = operand()
            name = _fresh(names)
            template, _ = choose.pick(LOW[:2] + UNARY)
            body = template.format(a=name, B=BATCH, F=FEATURES, p=choose.integer(0, 2))
            # the trip count comes from the int input (at most 3), so freezing cannot unroll the loop
            lines += [f"{name} = {source}", f"for _ in range(int(i[0]) + 1):", f"    {name} = torch.tanh({body})"]
            d = depth[source] + 2 * 3
        else:  # integer and bool tensors
            source = operand()
            ints.append(f"k{len(ints)}")
            lines.append(f"{ints[-1]} = {source}.argmax(-1) + {choose.pick(ints[:-1])}")
            bools.append(f"m{len(bools)}")
            lines.append(f"{bools[-1]} = {source} > 0.0")
            name = _fresh(names)
            lines.append(f"{name} = {source}.masked_fill({bools[-1]}, 0.0)")
            d = depth[source] + 1
        values.append(name)
        depth[name] = d

    floats = [values[-1]] + [choose.pick(values) for _ in range(choose.integer(0, 2))]
    packing = choose.integer(0, 3)
    if packing == 0:
        result, annotation = f"({', '.join(floats)}, {ints[-1]})", "Tuple[" + ", ".join(["Tensor"] * (len(floats) + 1)) + "]"
    elif packing == 1:
        result, annotation = f"[{', '.join(floats)}]", "List[Tensor]"
    elif packing == 2:
        items = ", ".join(f"'out{n}': {v}" for n, v in enumerate(floats))
        result, annotation = f"{{{items}, 'index': {ints[-1]}}}", "Dict[str, Tensor]"
    else:
        floats = floats[:1]
        result, annotation = floats[0], "Tensor"
    body = "\n".join(lines + [f"return {result}"])
    source = textwrap.dedent(
        """
        class Fuzzed(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin0 = nn.Linear({F}, {F})
                self.lin1 = nn.Linear({F}, {F}, bias=False)
                self.lin2 = nn.Linear({F}, {F})
                self.w0 = nn.Parameter(torch.randn({F}, {F}) / {F} ** 0.5)
                self.w1 = nn.Parameter(torch.randn({F}, {F}) / {F} ** 0.5)
                self.w2 = nn.Parameter(torch.randn({F}, {F}) / {F} ** 0.5)
                self.norm = nn.LayerNorm({F})
                self.conv = nn.Conv1d(1, 1, 3, padding=1)
                self.small = nn.Parameter(torch.full(({F},), 1e-9))

            def forward(self, x: Tensor, i: Tensor) -> {annotation}:
        """
    ).format(F=FEATURES, annotation=annotation) + textwrap.indent(body, " " * 8) + "\n"
    return source, [depth[v] for v in floats]


_MODULE_DIR = tempfile.mkdtemp(prefix="torch_mp_fuzz_")


def build_module(source: str) -> nn.Module:
    """Imports the program from a file: torch.jit.script needs the class's source, which exec() would not keep."""
    name = "fuzzed_" + hashlib.sha1(source.encode()).hexdigest()[:16]
    path = os.path.join(_MODULE_DIR, name + ".py")
    with open(path, "w") as f:
        f.write("import torch\nfrom torch import nn, Tensor\nfrom typing import Dict, List, Tuple\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Fuzzed().eval()


def _inputs(scale: float = 1.0) -> torch.Tensor:
    """Random rows and a row of zeros (a padded token: norms of 0, divisors that only an epsilon keeps from 0)."""
    x = torch.randn(BATCH, FEATURES) * scale
    x[-1] = 0.0
    return x


def check_conversion(source: str, output_depths: List[int], dtype: torch.dtype, seed: int = 0) -> None:
    """Converts the program's module and checks: lint, runs, every output's dtype, no NaN or inf where fp32's output
    is finite, and the error bound |y - y_fp32| <= 4 * u * (depth + 1) * max(1, max|y_fp32|) per floating output, u
    the dtype's unit roundoff and depth that of the output's own cone (the ops it depends on), not the whole
    program's."""
    torch.manual_seed(seed)
    model = build_module(source)
    x, i = _inputs(), torch.randint(0, 3, (BATCH,))  # i[0] + 1 <= 3 loop trips
    converted = torch_mp.convert(model, (x, i), dtype)
    converted.graph.lint()
    for trial in range(2):
        fresh = _inputs(1 + trial)
        with torch.no_grad():
            reference = flatten_tensors(model(fresh, i))
            result = flatten_tensors(converted(fresh, i))
        assert [t.dtype for t in result] == [t.dtype for t in reference], "output dtypes changed"
        # integer outputs follow argmax, which ties may flip: only the floating ones are bounded
        floating = [(ref, out) for ref, out in zip(reference, result) if ref.is_floating_point()]
        assert len(floating) == len(output_depths), "one depth per floating output"
        for (ref, out), depth in zip(floating, output_depths):
            turned = (~torch.isfinite(out) & torch.isfinite(ref)).sum().item()
            assert turned == 0, f"{turned} outputs are NaN or inf where fp32's are finite"
            scale = max(1.0, ref.abs().max().item())
            bound = 4 * UNIT_ROUNDOFF[dtype] * (depth + 1) * scale
            error = (ref.double() - out.double()).abs().max().item()
            assert math.isfinite(error) and error <= bound, f"error {error:.3g} > bound {bound:.3g}"


def check_fronts_agree(source: str, dtype: torch.dtype, seed: int = 0) -> None:
    """Converts the program on both fronts and checks that they decided alike (front_parity.differences: the heavy
    ops' precisions, FLOPs, the rules keeping heavy ops fp32, weight ratios, report keys)."""
    from front_parity import differences

    torch.manual_seed(seed)
    model = build_module(source)
    inputs = (_inputs(), torch.randint(0, 3, (BATCH,)))
    convert = torch_mp.report_of(torch_mp.convert(model, inputs, dtype))
    export = torch_mp.report_of(torch_mp.export(model, inputs, dtype))
    found = differences(convert, export)
    assert not found, "the fronts decided differently:\n" + "\n".join(found)


def _run_one(seed: int, fronts: bool = False):
    source, output_depths = generate_program(Chooser.from_seed(seed), control_flow=not fronts)
    dtype = torch.float16 if seed % 2 else torch.bfloat16
    try:
        if fronts:
            check_fronts_agree(source, dtype, seed)
        else:
            check_conversion(source, output_depths, dtype, seed)
        return None
    except Exception:  # noqa: BLE001 - every failure is reported with its program
        return seed, str(dtype), source, traceback.format_exc(limit=3)


def _run_one_on_both_fronts(seed: int):
    return _run_one(seed, fronts=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", type=int, default=1000)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--fronts", action="store_true",
                        help="compare convert's and export's decisions (programs without control flow) instead of "
                             "checking convert's numerics")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    seeds = range(args.first_seed, args.first_seed + args.graphs)
    run = _run_one_on_both_fronts if args.fronts else _run_one
    start = time.perf_counter()
    if args.workers > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            failures = [f for f in pool.imap_unordered(run, seeds, chunksize=16) if f]
    else:
        failures = [f for f in map(run, seeds) if f]
    for seed, dtype, source, error in failures[:3]:
        print(f"--- seed {seed} ({dtype})\n{source}\n{error}")
    print("failed seeds:", sorted(f[0] for f in failures)[:50])
    print(f"{args.graphs} graphs (seeds {seeds.start}..{seeds.stop - 1}), {len(failures)} failures, "
          f"{time.perf_counter() - start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
