"""Converts one zoo model and measures it against fp32: what the accuracy suite asserts and the table shows.

Metrics are tests/python/agreement.py's (cosine and max relative error of the first output, top-1 agreement of its
argmax rows), taken on fresh inputs: the example batch the conversion observed plus `batches` new ones.
"""
from __future__ import annotations

import time
import warnings
from typing import List, NamedTuple, Optional, Tuple

import torch

import torch_mp
from registry import Entry, build_model  # first: it puts tests/python on the path

from agreement import compare, flatten_tensors  # noqa: E402 (tests/python)


class Result(NamedTuple):
    capture: str  # how torch_mp.convert captured the model ("script" or "trace")
    cosine: float  # worst over the batches
    max_rel_error: float  # worst over the batches
    top1: float  # over all rows of all batches
    finite: bool
    dtypes_kept: bool  # every output has its fp32 model's dtype
    weight_ratio: float
    casts: int  # casts that ran on the example inputs
    cast_bytes: int
    low_flop_fraction: float
    seconds: float  # torch_mp.convert, capture included
    # per fp32 weight over 64 KB the result keeps: the kind of rule that kept it and the ops reading it
    fp32_weights: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    phases: Tuple[Tuple[str, float], ...] = ()  # the report's (name, seconds) parts of the conversion
    report: Optional[torch_mp.Report] = None  # the conversion's report


def evaluate(entry: Entry, dtype: torch.dtype, batches: int = 2, device: str = "cpu", front: str = "convert",
             example: Optional[Tuple[torch.Tensor, ...]] = None) -> Result:
    """`front`: "convert" (a TorchScript module) or "export" (torch_mp.export's program, run by its module());
    `example`: the example inputs (default: new ones from the entry)."""
    model = build_model(entry).to(device)
    example = _to(entry.inputs() if example is None else example, device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        if front == "export":
            program = torch_mp.export(model, example, dtype)
            report = torch_mp.report_of(program)
            converted = program.module()
        else:
            converted = torch_mp.convert(model, example, dtype)
            report = torch_mp.report_of(converted)
        seconds = time.perf_counter() - start
    cosines: List[float] = []
    errors: List[float] = []
    agree = rows = 0
    finite = dtypes_kept = True
    torch.manual_seed(1)
    for inputs in [example] + [_to(entry.inputs(), device) for _ in range(batches)]:
        with torch.no_grad():
            reference = flatten_tensors(model(*inputs))
            output = flatten_tensors(converted(*inputs))
        dtypes_kept &= [t.dtype for t in output] == [t.dtype for t in reference]
        finite &= all(bool(torch.isfinite(t).all()) for t in output if t.is_floating_point())
        agreement = compare(reference[0], output[0])
        cosines.append(agreement.cosine)
        errors.append(agreement.max_rel_error)
        batch_rows = reference[0].numel() // max(reference[0].shape[-1], 1) if reference[0].dim() else 1
        agree += round(agreement.top1 * batch_rows)
        rows += batch_rows
    return Result(report.capture, min(cosines), max(errors), agree / rows, finite, dtypes_kept, report.weight_ratio,
                  report.reached_casts, report.cast_bytes, report.low_precision_flop_fraction, seconds,
                  tuple((w["rule_kind"], tuple(sorted(set(w["readers"])))) for w in report.weights_kept_fp32),
                  tuple(report.data.get("phases", {}).items()), report)



def _to(inputs, device):
    return tuple(x.to(device) for x in inputs)
