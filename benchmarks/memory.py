"""Peak memory of a conversion, and the cost of each calibration input, on both fronts (issue 47, item 5).

    python benchmarks/memory.py memory [--model decoder|linears] [--front convert export] [--dtype bf16|fp16] [--module]
    python benchmarks/memory.py calibration [--inputs 4] [--repeats 3] [--front convert export]

memory: the model is built in a fresh process per front (the decoder: a 32000 x 1024 token table tied with the head,
18 pre-norm blocks of causal attention and a 4x MLP, batch 1 x 128 tokens, ~1 GiB of fp32 weights; or 16 x
Linear(4096, 4096)), then converted once. The peak RSS over the RSS before the model existed (ru_maxrss) is divided
by the fp32 weight bytes: the user's model stays alive beside the low copy, so 1.5x is the floor for fp16 / bf16.
The front's first call costs memory whatever the model (torch.export's imports: ~95 MB): each child converts a
Linear(4, 4) with its front before the baseline, and prints the ratio with that cost counted too.
A second process samples the converting process's RSS every millisecond; each stage's peak is the sample maximum
within the stage's window, laid out from the report's phase seconds (contiguous C++ stages; convert is given the
module already scripted, so its stages start at the call; with --module it is given the nn.Module, and its capture,
scripting and the capture check's runs, is the call's seconds the stages leave).

calibration: an 8-layer conv net (64 channels, batch-norm, relu; inputs 8 x 64 x 56 x 56), converted by each front
with 0 and with N calibration inputs, interleaved with plain fp32 eager forwards of the same input, `repeats`
times; the cost of one calibration input is (seconds with N - seconds with 0) / N, shown as a multiple of the
median eager forward (observation and verification included: each calibration input is observed once in fp32 and
run once more converted).

Plans as on a CPU with fast fp16 and bf16 kernels (TORCH_MP_CPU_FEATURES=all), whichever CPU runs this.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import torch_mp  # noqa: E402

GIB = 2**30


# --- models -----------------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.attention_norm = RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.mlp_norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        batch, tokens, width = x.shape
        q, k, v = self.qkv(self.attention_norm(x)).split(width, dim=-1)
        q, k, v = (t.reshape(batch, tokens, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, tokens, width))
        return x + self.down(F.gelu(self.up(self.mlp_norm(x))))


class Decoder(nn.Module):
    def __init__(self, vocabulary: int = 32000, width: int = 1024, blocks: int = 18, heads: int = 16):
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(blocks)])
        self.norm = RMSNorm(width)
        self.head = nn.Linear(width, vocabulary, bias=False)
        self.head.weight = self.embedding.weight  # tied

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def conv_net(channels: int = 64, layers: int = 8) -> nn.Module:
    body = []
    for _ in range(layers):
        body += [nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU()]
    return nn.Sequential(*body, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10)).eval()


def build(model: str):
    torch.manual_seed(0)
    with torch.no_grad():
        if model == "decoder":
            return Decoder().eval(), (torch.randint(0, 32000, (1, 128)),)
        return nn.Sequential(*[nn.Linear(4096, 4096, bias=False) for _ in range(16)]).eval(), (torch.randn(1, 4096),)


# --- RSS --------------------------------------------------------------------------------------------------------

def rss_bytes(pid: str = "self") -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# (monotonic seconds, RSS bytes) of process argv[1] every millisecond into argv[2] until argv[2].stop exists; no
# torch import, so it starts at once (argv[2].started says it has)
SAMPLER = """
import json, os, resource, sys, time
pid, out = sys.argv[1], sys.argv[2]
page, samples = resource.getpagesize(), []
open(out + ".started", "w").close()
while not os.path.exists(out + ".stop"):
    with open(f"/proc/{pid}/statm") as f:
        samples.append((time.monotonic(), int(f.read().split()[1]) * page))
    time.sleep(0.001)
json.dump(samples, open(out, "w"))
"""


def stage_peaks(samples, start: float, phases, baseline: int):
    """The peak RSS over `baseline` within each phase's window, the phases laid out one after the other from
    `start`; the last window runs to the end of the samples."""
    peaks, at = [], start
    for index, (name, seconds) in enumerate(phases):
        end = at + seconds if index + 1 < len(phases) else float("inf")
        window = [rss for t, rss in samples if at <= t < end]
        peaks.append((name, seconds, (max(window) - baseline) if window else None))
        at = end
    return peaks


# --- memory -----------------------------------------------------------------------------------------------------

def first_use_bytes(front: str, dtype: torch.dtype) -> int:
    """What the front's first call costs whatever the model (torch.export's imports and caches: ~95 MB; TorchScript's
    compiler): the RSS a conversion of a Linear(4, 4) adds. A process that has converted anything has paid it."""
    before = rss_bytes()
    tiny, inputs = nn.Linear(4, 4).eval(), (torch.randn(2, 4),)
    if front == "convert":
        torch_mp.convert(torch.jit.script(tiny), inputs, dtype)
    else:
        torch_mp.export(tiny, inputs, dtype)
    return rss_bytes() - before


def memory_child(args) -> dict:
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    first_use = first_use_bytes(args.front, dtype)
    baseline = rss_bytes()
    model, inputs = build(args.model)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())  # parameters(): tied ones once
    with torch.no_grad():
        model(*inputs)  # the user ran it: its allocator caches are not the conversion's
    scripted = torch.jit.script(model) if args.front == "convert" and not args.module else None
    built = rss_bytes()
    out = f"/tmp/torch_mp_memory_{os.getpid()}.json"
    sampler = subprocess.Popen([sys.executable, "-c", SAMPLER, str(os.getpid()), out])
    while not os.path.exists(out + ".started"):
        time.sleep(0.01)
    start = time.monotonic()
    if args.front == "convert":
        converted = torch_mp.convert(model if args.module else scripted, inputs, dtype,
                                     verify=not args.no_verify)
        report = torch_mp.report_of(converted)
    else:
        converted = torch_mp.export(model, inputs, dtype, verify=not args.no_verify)
        report = torch_mp.report_of(converted)
    seconds = time.monotonic() - start
    after = rss_bytes()
    time.sleep(0.05)
    open(out + ".stop", "w").close()
    sampler.wait()
    with open(out) as f:
        samples = json.load(f)
    os.remove(out)
    os.remove(out + ".stop")
    os.remove(out + ".started")
    phases = [(k, v) for k, v in report.data["phases"].items()] if isinstance(report.data["phases"], dict) \
        else list(report.data["phases"])
    if args.front == "export":
        phases = [(k, v) for k, v in phases if k != "capture"]
        phases.insert(0, ("capture", report.data["phases"]["capture"]))
    elif args.module:  # scripting and the capture check come before the stages the report times
        phases.insert(0, ("capture", max(0.0, seconds - sum(v for _, v in phases))))
    peak = peak_rss_bytes()
    return {
        "front": args.front, "model": args.model, "dtype": args.dtype, "weight_bytes": weight_bytes,
        "baseline": baseline, "built": built, "peak": peak, "after": after, "seconds": seconds,
        "ratio": (peak - baseline) / weight_bytes, "after_ratio": (after - baseline) / weight_bytes,
        "first_use": first_use, "ratio_with_first_use": (peak - baseline + first_use) / weight_bytes,
        "converted_weight_bytes": report.data["weight_bytes_after"],
        "stages": stage_peaks(samples, start, phases, baseline),
    }


def run_memory(args) -> None:
    print(f"torch {torch.__version__}; cpu features {torch_mp.cpu_features()} (planned as "
          f"TORCH_MP_CPU_FEATURES={os.environ['TORCH_MP_CPU_FEATURES']}); model {args.model}; dtype {args.dtype}")
    for front in args.front:
        command = [sys.executable, __file__, "_memory_child", "--model", args.model, "--dtype", args.dtype,
                   "--front", front] + (["--no-verify"] if args.no_verify else []) + (["--module"] if args.module else [])
        result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        w = result["weight_bytes"]
        print(f"\n{front}: fp32 weights {w / GIB:.3f} GiB (converted {result['converted_weight_bytes'] / GIB:.3f} GiB); "
              f"RSS before model {result['baseline'] / GIB:.3f} GiB, model built {result['built'] / GIB:.3f} GiB, "
              f"peak {result['peak'] / GIB:.3f} GiB, after {result['after'] / GIB:.3f} GiB; {result['seconds']:.1f} s")
        print(f"  peak over baseline / fp32 weights = {result['ratio']:.2f}x (after the conversion "
              f"{result['after_ratio']:.2f}x); counting the front's first-use cost too "
              f"({result['first_use'] / 2**20:.0f} MB, paid before the baseline): {result['ratio_with_first_use']:.2f}x")
        print("  | stage | seconds | peak RSS over baseline / fp32 weights |")
        print("  |---|---:|---:|")
        for name, seconds, peak in result["stages"]:
            print(f"  | {name} | {seconds:.2f} | {'-' if peak is None else f'{peak / w:.2f}x'} |")


# --- calibration ------------------------------------------------------------------------------------------------

def run_calibration(args) -> None:
    torch.set_num_threads(args.threads)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    model = conv_net()
    low_model = conv_net().to(dtype)
    low_model.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in model.state_dict().items()})
    torch.manual_seed(1)
    example = torch.randn(8, 64, 56, 56)
    calibration = [torch.randn(8, 64, 56, 56) for _ in range(args.inputs)]
    print(f"torch {torch.__version__}; {torch.get_num_threads()} threads; conv net 8 x (conv 64->64 3x3, bn, relu); "
          f"inputs 8x64x56x56; {args.dtype}; {args.inputs} calibration inputs; {args.repeats} interleaved repeats")

    def eager(net, x) -> float:
        start = time.perf_counter()
        with torch.no_grad():
            net(x)
        return time.perf_counter() - start

    def conversion(front: str, extra):
        call = torch_mp.convert if front == "convert" else torch_mp.export
        start = time.perf_counter()
        report = torch_mp.report_of(call(model, example, dtype, calibration_inputs=extra or None))
        phases = dict(report.data["phases"])
        return time.perf_counter() - start, phases.get("observe", 0.0), phases.get("verify", 0.0)

    eager(model, example)
    for front in args.front:
        conversion(front, [])  # warm-up: scripting's and export's caches
    times = {"eager": [], "low eager": []}
    for front in args.front:
        times[(front, 0)], times[(front, args.inputs)] = [], []
    for _ in range(args.repeats):
        for front in args.front:
            times["eager"].append(eager(model, example))
            times["low eager"].append(eager(low_model, example.to(dtype)))
            times[(front, 0)].append(conversion(front, []))
            times["eager"].append(eager(model, example))
            times[(front, args.inputs)].append(conversion(front, calibration))
    forward, low_forward = statistics.median(times["eager"]), statistics.median(times["low eager"])
    print(f"plain fp32 eager forward: {forward:.3f} s (median of {len(times['eager'])}); the same net in "
          f"{args.dtype}, eager: {low_forward:.3f} s ({low_forward / forward:.2f}x: the floor of one verification run "
          "on this CPU)")
    print("| front | no calibration (s) | with N (s) | per calibration input (s) | / fp32 forward | of which observe "
          "/ fp32 forward | of which verify / low eager forward |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for front in args.front:
        none = [statistics.median(t[i] for t in times[(front, 0)]) for i in range(3)]
        some = [statistics.median(t[i] for t in times[(front, args.inputs)]) for i in range(3)]
        each, observe, verify = ((b - a) / args.inputs for a, b in zip(none, some))
        print(f"| {front} | {none[0]:.2f} | {some[0]:.2f} | {each:.3f} | {each / forward:.2f}x | "
              f"{observe / forward:.2f}x | {verify / low_forward:.2f}x |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("memory", "calibration", "_memory_child"))
    parser.add_argument("--model", choices=("decoder", "linears"), default="decoder")
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="bf16")
    parser.add_argument("--front", nargs="+", default=["convert", "export"])
    parser.add_argument("--no-verify", action="store_true", help="memory: convert with verify=False")
    parser.add_argument("--module", action="store_true",
                        help="memory: convert is given the nn.Module, as a user gives it: its capture (scripting, "
                             "the capture check's runs) is in the peak, before the stages")
    parser.add_argument("--inputs", type=int, default=4, help="calibration: calibration inputs")
    parser.add_argument("--repeats", type=int, default=3, help="calibration: interleaved repeats")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    if args.what == "_memory_child":
        args.front = args.front[0]
        print(json.dumps(memory_child(args)))
    elif args.what == "memory":
        run_memory(args)
    else:
        run_calibration(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
