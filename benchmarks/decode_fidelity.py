"""Decode fidelity of torch_mp's export against torch.autocast (issue 59, item 5), on transformers' small Llama and
GPT-2 (random weights, decoders.py) in transformers' static-cache wrapper, one token per call.

    python benchmarks/decode_fidelity.py [--dtypes bf16 fp16] [--prompts 4] [--prompt-len 16] [--new-tokens 32]
                                         [--threads 2] [--out benchmarks/results/DECODE_FIDELITY.md]

Per model, dtype and prompt (random tokens), each of fp32, autocast (the eager wrapper under torch.autocast("cpu",
dtype)) and torch_mp (torch_mp.export of the wrapper, OpPolicy.default(target, cpu_features="all"), its module();
and with the token tables, or the adds, kept fp32 by the policy: POLICY_EDITS):
The autocast wrapper's caches stay fp32, the keys and values cast to fp32 as they are written (index_copy_ takes no
other dtype).
- free running: the prompt fed one token per call, then 32 greedy tokens; agreement is the share of those tokens equal
  to fp32's at the same position (first divergence: where the first differs, 32 if none);
- teacher forced: the prompt and fp32's 32 tokens fed, each call's logits against fp32's on the same tokens:
  relative error ||logits - fp32|| / ||fp32|| per call, averaged over the prompt's calls (prefill) and the generated
  tokens' calls (decode).
Weights: torch_mp's report (weight_bytes_after over weight_bytes_before, caches left out: mutable_buffers[]);
autocast stores fp32 weights and an fp32 cache.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import sys
import warnings
from typing import Callable, List

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decoders import DecoderShape, language_model, static_cache_step, for_autocast  # noqa: E402
from harness import Machine, command_line, markdown_table, page_header, publish  # noqa: E402

import torch_mp  # noqa: E402

SHAPE = DecoderShape(hidden=256, layers=2, heads=8, kv_heads=2, vocab=2048, max_len=64)
DTYPES = {"bf16": (torch.bfloat16, "cpu_bf16"), "fp16": (torch.float16, "cpu_fp16")}
# torch_mp's runs: the default policy, then each with one op class kept fp32 by the policy, to see which rounding the
# error comes from: the token tables stored low (embedding gathers rows of the low table), or the residual stream
# added low (add follows its low inputs)
POLICY_EDITS = {"torch_mp": {}, "torch_mp, tables fp32": {"aten::embedding": "fp32"},
                "torch_mp, adds fp32": {"aten::add": "fp32"}}


@dataclasses.dataclass
class Decoded:
    tokens: List[int]  # the generated ones
    logits: List[torch.Tensor]  # each call's last logits, fp32


def decode(step: Callable, prompt: List[int], new_tokens: int, forced: List[int] = None,
           context: Callable = contextlib.nullcontext) -> Decoded:
    """Feeds the prompt one token per call, then the argmax of each call's logits (or the `forced` tokens)."""
    tokens, logits = list(prompt), []
    with torch.no_grad(), context():
        for position in range(len(prompt) + new_tokens - 1):
            out = step(input_ids=torch.tensor([[tokens[position]]]), cache_position=torch.tensor([position]))
            logits.append(out[0, -1].float())
            if position >= len(prompt) - 1:
                tokens.append(forced[position - len(prompt) + 1] if forced else int(out[0, -1].argmax()))
    return Decoded(tokens[len(prompt):], logits)


@dataclasses.dataclass
class Fidelity:
    agreement: float
    first_divergence: float
    prefill_error: float
    decode_error: float


def fidelity(make_step: Callable[[], Callable], prompts, reference: List[Decoded], new_tokens: int,
             context=contextlib.nullcontext) -> Fidelity:
    agreement, divergence, prefill, decode_errors = [], [], [], []
    for prompt, fp32 in zip(prompts, reference):
        free = decode(make_step(), prompt, new_tokens, context=context)
        same = [a == b for a, b in zip(free.tokens, fp32.tokens)]
        agreement.append(sum(same) / len(same))
        divergence.append(same.index(False) if False in same else len(same))
        forced = decode(make_step(), prompt, new_tokens, forced=fp32.tokens, context=context)
        errors = [float((a - b).norm() / b.norm()) for a, b in zip(forced.logits, fp32.logits)]
        prefill.append(statistics.mean(errors[:len(prompt) - 1]))
        decode_errors.append(statistics.mean(errors[len(prompt) - 1:]))
    return Fidelity(statistics.mean(agreement), statistics.mean(divergence), statistics.mean(prefill),
                    statistics.mean(decode_errors))


HEADERS = ["model", "dtype", "run", "agreement", "first divergence", "prefill error", "decode error",
           "decode error / autocast's", "weights", "cache", "kept fp32"]


def measure(architecture: str, dtype_name: str, prompts, new_tokens: int) -> List[List[str]]:
    """The page's rows of one model in one dtype: autocast's, then one per POLICY_EDITS."""
    dtype, target = DTYPES[dtype_name]
    model = language_model(architecture, SHAPE)
    make_fp32 = lambda: static_cache_step(model, 1, SHAPE.max_len)  # noqa: E731
    reference = [decode(make_fp32(), prompt, new_tokens) for prompt in prompts]
    example = {"input_ids": torch.tensor([[1]]), "cache_position": torch.tensor([0])}
    autocast = fidelity(lambda: for_autocast(make_fp32()), prompts, reference, new_tokens,
                        context=lambda: torch.autocast("cpu", dtype=dtype))
    rows = [[architecture, dtype_name, "autocast", f"{autocast.agreement:.3f}", f"{autocast.first_divergence:.1f}",
             f"{autocast.prefill_error:.2e}", f"{autocast.decode_error:.2e}", "1.00", "1.000", "1.00", "-"]]
    for name, edits in POLICY_EDITS.items():
        policy = torch_mp.OpPolicy.default(target, cpu_features="all")
        for op, category in edits.items():
            policy.set(op, category, reason="decode_fidelity.py: which rounding the error comes from")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch_mp.export(make_fp32(), None, dtype, example_kwarg_inputs=example,
                                      policy=policy)
            report = torch_mp.report_of(program)
        caches = sum(b["fp32_bytes"] for b in report.data["mutable_buffers"])
        low_caches = sum(b["bytes"] for b in report.data["mutable_buffers"])
        weights = (report.data["weight_bytes_after"] - low_caches) / (report.data["weight_bytes_before"] - caches)
        ours = fidelity(program.module, prompts, reference, new_tokens)
        kept = ", ".join(f"{w['name']} ({w['rule_kind']})" for w in report.weights_kept_fp32) or "none"
        rows.append([architecture, dtype_name, name, f"{ours.agreement:.3f}", f"{ours.first_divergence:.1f}",
                     f"{ours.prefill_error:.2e}", f"{ours.decode_error:.2e}",
                     f"{ours.decode_error / autocast.decode_error:.2f}", f"{weights:.3f}", f"{low_caches / caches:.2f}",
                     kept])
    print(markdown_table(HEADERS, rows), flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--architectures", nargs="+", default=["llama", "gpt2"])
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None, help="write the results page here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, SHAPE.vocab, (args.prompt_len,), generator=generator).tolist()
               for _ in range(args.prompts)]
    rows = [row for architecture in args.architectures for dtype_name in args.dtypes
            for row in measure(architecture, dtype_name, prompts, args.new_tokens)]
    page = "\n".join([
        "# Decode fidelity: torch_mp's export against torch.autocast",
        "",
        page_header(Machine.this(), command_line(), f"{args.threads} threads",
                    f"transformers {sys.modules['transformers'].__version__}"),
        "Other processes shared the machine; this page measures accuracy, not time.",
        "",
        f"Models (random weights, seed 0): {SHAPE.describe('llama')}; {SHAPE.describe('gpt2')} (tied embeddings, "
        "initializer_range 0.2). transformers' static-cache wrapper, one token per call; "
        f"{args.prompts} random prompts of {args.prompt_len} tokens, {args.new_tokens} new tokens each.",
        "",
        "Agreement: share of the free-running greedy tokens equal to fp32's; first divergence: mean index of the first "
        "that differs. Errors: teacher forced on fp32's tokens, mean over calls of ||logits - fp32|| / ||fp32||; "
        "prefill over the prompt's calls, decode over the generated tokens'. Weights: stored bytes over fp32's, "
        "caches left out; cache: the caches' bytes over fp32's.",
        "",
        markdown_table(HEADERS, rows),
        ""])
    publish(page, args.out, whole_page=True)


if __name__ == "__main__":
    main()
