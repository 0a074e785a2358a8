"""Verification that a conversion never returns NaN or inf where the fp32 model returns finite values, and its repair.

The pipeline's verification runs the converted model on the example and calibration inputs and reports the first
output tensor holding NaN or inf where the fp32 model's is finite, or else the first intermediate value that does
where fp32's was finite on every run (`report.data["non_finite"]`). Such a conversion is not done. `repair_non_finite` finds the nodes responsible, keeps them fp32 and plans again:

1. The conversion runs once more with its node ids kept, and every planned node's value is read on the failing inputs
   (job.probe), beside the fp32 graph's value of the same node (job.probe_reference, as the accuracy fallback probes).
2. The nodes whose values hold NaN or inf where fp32's are finite, and none of whose inputs do, are the first ones.
   A first node that ran low is kept fp32. One that ran fp32 was handed a value it could not use (a divisor rounded
   to 0): the nearest low nodes it reads from, through casts and other fp32 nodes, are kept fp32.
3. Plan again with those kept (rule kind "non-finite" in the report), and verify again; at most MAX_ROUNDS times.

If that cannot make the outputs finite, ConversionError names the nodes (or the output) it could not repair.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Sequence, Set, Tuple

import torch

from ._errors import ConversionError
from .fallback import producers_read
from .report import Report

if TYPE_CHECKING:  # for the annotations only: _job.run_job imports this module
    from ._job import ConversionJob

MAX_ROUNDS = 8


def repair_non_finite(job: ConversionJob, module, report: Report, runs: Sequence[Tuple[Any, ...]]
                      ) -> Tuple[Any, Report]:
    """The conversion, planned again with the nodes responsible for non-finite outputs kept fp32 until the outputs on
    every run (the example inputs first, then the calibration inputs) are finite where fp32's are. `job` is the
    conversion (a ConversionJob, on either front) that made `module` and `report`; its kept set grows."""
    where = report.data["non_finite"]
    if where is None:
        return module, report
    first_found: List[int] = []
    for rounds in range(1, MAX_ROUNDS + 1):
        inputs = runs[where["run"]]
        culprits, keep = _responsible_nodes(job, inputs)
        if not culprits:
            raise ConversionError(
                f"torch_mp: the converted model computes NaN or inf ({_where(where)}) on "
                f"{_which_inputs(where['run'])} where the fp32 model's values are finite, and no planned node's value "
                "shows where it starts (inside an if or a loop?); exclude the module it comes from (policy.exclude) "
                "or convert with the other low dtype")
        first_found.extend(node for node in culprits if node not in first_found)
        new = keep - job.keep_non_finite
        if not new:
            raise ConversionError(
                f"torch_mp: the converted model returns NaN or inf where the fp32 model's values are finite, starting "
                f"at {_describe(report, culprits)} on {_which_inputs(where['run'])}, and keeping it and the nodes "
                "it reads from in fp32 does not repair it; exclude its module (policy.exclude) or convert with the "
                "other low dtype")
        job.keep_non_finite |= new
        module, report = job.run()
        where = report.data["non_finite"]
        if where is None:
            report.annotate("non_finite_repair", {"kept_fp32": sorted(job.keep_non_finite),
                                                  "first_non_finite": first_found, "rounds": rounds})
            return module, report
    raise ConversionError(
        f"torch_mp: after {MAX_ROUNDS} rounds of keeping the nodes whose outputs turned NaN or inf in fp32 "
        f"({len(job.keep_non_finite)} nodes), {_where(where)} on {_which_inputs(where['run'])} is still non-finite "
        "where the fp32 model's is finite; convert with the other low dtype")


def _responsible_nodes(job: ConversionJob, inputs: Tuple[Any, ...]) -> Tuple[List[int], Set[int]]:
    """The first nodes whose values turn non-finite (by id), and the low nodes to keep fp32 for them."""
    probed, report = job.run(keep_node_ids=True, verify=False)
    ids = [node["id"] for node in report.nodes]
    with torch.no_grad():
        values = job.probe(probed, inputs, ids)
        references = job.probe_reference(inputs, ids)
    bad = {node for node, value, reference in zip(ids, values, references) if _turned_non_finite(value, reference)}
    producers = _producers(report)
    first = sorted(node for node in bad if not any(p in bad for p in producers.get(node, ())))
    low = {node["id"] for node in report.nodes if node["precision"] == "low"}
    keep: Set[int] = set()
    for node in first:
        keep |= {node} if node in low else _nearest_low(node, producers, low)
    return first, keep


def _turned_non_finite(value, reference) -> bool:
    """Whether a probed value holds NaN or inf where the fp32 graph's value of the same node is finite."""
    if value is None or reference is None or not value.is_floating_point() or value.is_nested \
            or value.shape != reference.shape:
        return False
    return bool((~torch.isfinite(value) & torch.isfinite(reference.to(value.device))).any())


def _producers(report: Report) -> Dict[int, List[int]]:
    """For each item of the report's graph, the planned nodes whose values it reads, looking through casts."""
    return producers_read(report, {item["id"] for item in report.data["graph"]})


def _nearest_low(node: int, producers: Dict[int, List[int]], low: Set[int]) -> Set[int]:
    """The low nodes `node` reads from, through casts and fp32 nodes."""
    found: Set[int] = set()
    seen = {node}
    pending = list(producers.get(node, ()))
    while pending:
        producer = pending.pop()
        if producer in seen:
            continue
        seen.add(producer)
        if producer in low:
            found.add(producer)
        else:
            pending.extend(producers.get(producer, ()))
    return found


def _where(where: Dict[str, Any]) -> str:
    return f"output tensor {where['tensor']}" if where["tensor"] is not None else f"value %{where['value']}"


def _which_inputs(run: int) -> str:
    return "the example inputs" if run == 0 else f"calibration input {run - 1}"


def _describe(report: Report, nodes: Sequence[int]) -> str:
    described = {node["id"]: node for node in report.nodes}
    parts = []
    for node in nodes:
        entry = described.get(node)
        parts.append(f"node {node}" if entry is None else
                     f"{entry['op']} (node {node}, output %{entry['output']}, module '{entry['scope']}')")
    return ", ".join(parts)
