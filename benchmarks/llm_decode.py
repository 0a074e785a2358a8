"""Greedy decoding speed and memory of a small Llama on this CPU (issue 59): fp32 eager, autocast eager,
torch.compile under autocast, torch_mp's program (module() eager and torch.compile'd) and its AOTInductor package,
side by side in interleaved rounds in one process.

    python benchmarks/llm_decode.py [--batches 1 4] [--prompt 128] [--new-tokens 128] [--rounds 3] [--threads 2]
                                    [--dtype bf16] [--out benchmarks/results/LLM_DECODE.md]

The model is transformers' Llama from its config (random weights, decoders.py) in transformers' static-cache
wrapper (TorchExportableModuleWithStaticCache): one token per call, the prompt fed token by token as the wrapper
takes it (its export has one static input shape), then the argmax of each call's logits. Per run:
- decode tokens/s: batch x new tokens over the seconds of the generated tokens' calls; prompt ms: the prompt's calls;
- weights and cache: the bytes the run stores (parameters / the program's constants; the key and value caches).
  autocast keeps the fp32 weights; its cache is fp32,
  the keys and values cast to fp32 as they are written (index_copy_ takes no other dtype).
Every run decodes the same prompts; the page also gives the share of each run's tokens equal to fp32's.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Callable, Dict, List

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decoders import DecoderShape, cache_bytes, for_autocast, language_model, static_cache_step  # noqa: E402
from harness import Machine, command_line, markdown_table, page_header, publish  # noqa: E402

import torch_mp  # noqa: E402
from torch_mp._export.package import write_package  # noqa: E402

WARM_DECODES = 8
DTYPES = {"bf16": (torch.bfloat16, "cpu_bf16"), "fp16": (torch.float16, "cpu_fp16")}
HEADERS = ["batch", "run", "decode tokens/s", "x fp32", "prompt ms", "weights MB", "cache MB", "weights + cache MB",
           "tokens = fp32's"]


@dataclasses.dataclass
class Run:
    """One way of decoding: its step callable, the context its calls run in, the bytes it stores."""
    step: Callable
    context: Callable[[], contextlib.AbstractContextManager]
    weight_bytes: int
    cache_bytes: int
    prompt_ms: List[float] = dataclasses.field(default_factory=list)
    tokens_per_second: List[float] = dataclasses.field(default_factory=list)
    tokens: torch.Tensor = None


def generate(run: Run, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Feeds the prompt (batch x length) one position per call, then the argmax of each call's logits; records the
    prompt's milliseconds and the generated tokens' rate; returns the generated tokens."""
    batch, length = prompt.shape
    tokens = [prompt[:, i:i + 1] for i in range(length)]
    with torch.no_grad(), run.context():
        start = time.perf_counter()
        for position in range(length + new_tokens - 1):
            logits = run.step(input_ids=tokens[position], cache_position=torch.tensor([position]))
            if position == length - 1:
                prompt_done = time.perf_counter()
            if position >= length - 1:
                tokens.append(logits[:, -1].argmax(-1, keepdim=True))
        end = time.perf_counter()
    run.prompt_ms.append((prompt_done - start) * 1e3)
    run.tokens_per_second.append(batch * (new_tokens - 1) / (end - prompt_done))
    return torch.cat(tokens[length:], dim=1)


def stored_bytes(tensors) -> int:
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def runs_for(model: torch.nn.Module, shape: DecoderShape, batch: int, dtype_name: str, folder: str,
             notes: List[str]) -> Dict[str, Run]:
    dtype, target = DTYPES[dtype_name]
    autocast = lambda: torch.autocast("cpu", dtype=dtype)  # noqa: E731
    plain = contextlib.nullcontext
    fp32_step = static_cache_step(model, batch, shape.max_len)
    weights = stored_bytes(model.parameters())
    fp32_cache = cache_bytes(fp32_step)
    runs = {
        "fp32 eager": Run(fp32_step, plain, weights, fp32_cache),
        "autocast eager": Run(for_autocast(static_cache_step(model, batch, shape.max_len)), autocast, weights,
                              fp32_cache),
        "compile, autocast": Run(torch.compile(for_autocast(static_cache_step(model, batch, shape.max_len))),
                                 autocast, weights, fp32_cache),
    }
    example = {"input_ids": torch.zeros(batch, 1, dtype=torch.long), "cache_position": torch.tensor([0])}
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch_mp.export(static_cache_step(model, batch, shape.max_len), None, dtype,
                                  example_kwarg_inputs=example,
                                  policy=torch_mp.OpPolicy.default(target, cpu_features="all"))
        report = torch_mp.report_of(program)
    notes.append(f"batch {batch}: torch_mp.export took {time.perf_counter() - start:.1f} s; weights "
                 f"{report.weight_ratio:.3f}x fp32's with the caches, low precision FLOPs "
                 f"{report.low_precision_flop_fraction:.3f}")
    low_cache = sum(b["bytes"] for b in report.data["mutable_buffers"] if "cache" in b["name"])
    ours_weights = report.data["weight_bytes_after"] - sum(b["bytes"] for b in report.data["mutable_buffers"])
    runs["torch_mp module()"] = Run(program.module(), plain, ours_weights, low_cache)
    runs["torch_mp compiled"] = Run(torch.compile(program.module()), plain, ours_weights, low_cache)
    try:
        start = time.perf_counter()
        path = write_package(program, os.path.join(folder, f"llama_{batch}.pt2"), report)
        notes.append(f"batch {batch}: the AOTInductor package took {time.perf_counter() - start:.1f} s to compile")
        runs["torch_mp AOTInductor"] = Run(torch._inductor.aoti_load_package(path), plain, ours_weights, low_cache)
    except Exception as error:  # noqa: BLE001 - the page says what refused
        notes.append(f"batch {batch}: AOTInductor refused the program: {type(error).__name__}: "
                     f"{str(error).splitlines()[0]}")
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--out", default=None, help="write the results page here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shape = DecoderShape(hidden=args.hidden, layers=args.layers, heads=8, kv_heads=2, vocab=args.vocab,
                         max_len=args.prompt + args.new_tokens)
    model = language_model("llama", shape)
    began = time.perf_counter()
    rows, notes = [], []
    with tempfile.TemporaryDirectory() as folder:
        for i, batch in enumerate(args.batches):
            runs = runs_for(model, shape, batch, args.dtype, folder, notes)
            prompt = torch.randint(0, shape.vocab, (batch, args.prompt), generator=torch.Generator().manual_seed(1))
            warm = prompt[:, :4]
            for name, run in runs.items():
                start = time.perf_counter()
                generate(run, warm, 4)
                if name.startswith("compile") or name.endswith("compiled"):
                    notes.append(f"batch {batch}: {name}: first calls (compiling) {time.perf_counter() - start:.1f} s")
                # short decodes until the rate settles: a tiny Llama compiled under autocast took 0.45 s a call for
                # its first 11 calls after compiling, then 1.4 ms
                for _ in range(WARM_DECODES):
                    generate(run, warm, 4)
                    if run.tokens_per_second[-1] < 1.25 * run.tokens_per_second[-2]:
                        break
                run.prompt_ms.clear()
                run.tokens_per_second.clear()
            for _ in range(args.rounds):
                for run in runs.values():
                    run.tokens = generate(run, prompt, args.new_tokens)
            reference = runs["fp32 eager"]
            fp32_rate = statistics.median(reference.tokens_per_second)
            for name, run in runs.items():
                rate = statistics.median(run.tokens_per_second)
                agreement = float((run.tokens == reference.tokens).float().mean())
                rows.append([batch, name, f"{rate:.1f}", f"{rate / fp32_rate:.2f}",
                             f"{statistics.median(run.prompt_ms):.0f}", f"{run.weight_bytes / 1e6:.1f}",
                             f"{run.cache_bytes / 1e6:.1f}", f"{(run.weight_bytes + run.cache_bytes) / 1e6:.1f}",
                             f"{agreement:.3f}"])
                print(markdown_table(HEADERS, rows[-1:]), flush=True)
            write_page(args, shape, rows, notes, (time.perf_counter() - began) / 60, args.batches[:i + 1],
                       i + 1 == len(args.batches))


def write_page(args, shape: DecoderShape, rows: List[list], notes: List[str], minutes: float, batches: List[int],
               done: bool) -> None:
    """The results page (written after each batch, so that a run cut short leaves what it measured)."""
    page = "\n".join([
        "# Decoding a small Llama on the CPU: tokens per second and memory",
        "",
        page_header(Machine.this(), command_line(), f"{args.threads} threads",
                    f"transformers {sys.modules['transformers'].__version__}"),
        "Other processes shared the machine during the run, so absolute rates are low and noisy; the runs were timed "
        f"in {args.rounds} interleaved rounds (medians). The run took {minutes:.1f} minutes"
        + ("." if done else f" until here: batches {batches} measured, the others not yet."),
        "",
        f"Model: transformers' Llama, random weights: {shape.describe('llama')}, intermediate {shape.hidden * 8 // 3}. "
        f"Prompt {args.prompt} tokens fed one per call, then {args.new_tokens} greedy tokens; low dtype "
        f"{args.dtype}; torch_mp: `torch_mp.export(..., policy=OpPolicy.default('{DTYPES[args.dtype][1]}', "
        "cpu_features='all'))` of transformers' static-cache wrapper.",
        "",
        "Columns: decode tokens/s (batch x generated tokens per second of their calls) and its ratio to fp32 eager; "
        "prompt ms (the prompt's calls); weights and cache in MB as stored (autocast keeps fp32 weights and an fp32 "
        "cache); tokens equal to fp32's (share of all generated tokens, same position).",
        "",
        markdown_table(HEADERS, rows),
        "",
        "Notes from the run:",
        "",
        *[f"- {note}" for note in notes],
        ""])
    publish(page, args.out, whole_page=True)


if __name__ == "__main__":
    main()
