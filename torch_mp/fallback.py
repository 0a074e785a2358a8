"""Accuracy-driven fallback: the fewest nodes to move up in precision so the converted model meets a tolerance.

    mp = torch_mp.convert(model, (x,), torch.float16, calibration_inputs=batches, tolerance=1e-3)
    torch_mp.report_of(mp).data["fallback"]  # what was moved (kept_fp32, kept_float), the errors, conversions

Search (`search_fallback`):
1. Convert; if the error on every calibration input is within tolerance, done.
2. Rank the low-precision and int8 nodes by the error each one adds, from one instrumented run: the same calibration
   input runs through the conversion and through the fp32 graph it was made from (a node has the same id in
   both); a node's score is the error of its output minus the largest error among the values it reads (its inputs
   in the report's graph, looking through casts). A node that turns accurate inputs into an inaccurate output
   scores high; one that only passes on its inputs' error scores about 0. Errors are measured two ways and the
   larger increase counts: relative to the value's norm, and relative to its spread around its mean (a layer whose
   output is 1000 + a small signal keeps a small error of the first kind while rounding the signal away: the second
   kind sees it).
3. Each ranked node gets a move one step up (`Move`): a low-precision node to fp32, an int8 node to the float plan's
   precision (low where the float plan runs it low, else fp32). Make the top 1, 2, 4, ... moves until the tolerance
   is met; bisect the count between the last two tries. Where all of them are not enough, a next round ranks what
   is still below fp32 in that conversion (int8 nodes now low) and moves those on to fp32, the same way.
4. Drop the moves the tolerance does not need (bisection within the kept set, at most `PRUNE_BUDGET` conversions:
   where the error is spread over many nodes, pruning them one by one would cost more than it saves; out of budget,
   the smallest set tried that meets the tolerance is kept).
The model is prepared (frozen, cleaned up, observed) once; each step plans and applies on that preparation and runs
the calibration inputs, stopping at the first one beyond the tolerance (a step only asks whether it is met).
tests/python/bisection.py holds the plain search without the ranking, for comparison.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from ._errors import ConversionError
from ._inputs import tensors_of
from .report import Report

if TYPE_CHECKING:  # for the annotations only: _job.run_job imports this module
    from ._job import ConversionJob

Metric = Callable[[Any, Any], float]
PRUNE_BUDGET = 24  # conversions the pruning step may spend
BELOW_FP32 = ("low", "int8")  # the report's precisions the fallback may move up: int8 -> the float plan, low -> fp32


class OutOfBudget(Exception):
    pass


@dataclasses.dataclass(frozen=True, order=True)
class Move:
    """One step of the search: a node (by id) moved up from the precision it has: an int8 node to the float plan's
    precision (`to_fp32` False), a low-precision node to fp32."""

    node: Any
    to_fp32: bool


@dataclasses.dataclass(frozen=True)
class Moves:
    """Moves as a conversion takes them: the nodes run fp32, and the int8 nodes run in the float plan's precision."""

    fp32: Tuple[Any, ...]
    float_plan: Tuple[Any, ...]

    @classmethod
    def of(cls, moves: Iterable[Move]) -> "Moves":
        moves = list(moves)
        fp32 = sorted({move.node for move in moves if move.to_fp32})
        return cls(tuple(fp32), tuple(sorted({move.node for move in moves if not move.to_fp32} - set(fp32))))


def floating_tensors(value: Any) -> List[torch.Tensor]:
    """Every floating tensor in a (nested) output, in order."""
    return [t for t in tensors_of(value) if t.is_floating_point()]


def relative_error(reference: Any, output: Any) -> float:
    """||output - reference|| / ||reference|| over all floating tensors of an output, in fp64 (the default metric).
    Non-finite values count as an infinite error."""
    ref = floating_tensors(reference)
    out = floating_tensors(output)
    if len(ref) != len(out):
        raise ValueError(f"the outputs hold {len(out)} floating tensors where the fp32 model's hold {len(ref)}")
    if not ref:
        return 0.0
    r = torch.cat([t.detach().double().flatten() for t in ref])
    o = torch.cat([t.detach().double().flatten() for t in out])
    if not torch.isfinite(o).all():
        return float("inf")
    return ((o - r).norm() / r.norm().clamp_min(1e-30)).item()


class Progress:
    """A one-line progress bar on stderr (when it is a terminal): steps done, the error, the nodes kept in fp32."""

    def __init__(self, enabled: bool, total: int):
        self.enabled = enabled and total > 0 and sys.stderr.isatty()
        self.total = total
        self.done = 0

    def step(self, message: str) -> None:
        self.done += 1
        if self.enabled:
            width = 24
            filled = min(width, width * self.done // max(self.total, 1))
            sys.stderr.write(f"\rtorch_mp fallback [{'#' * filled}{'.' * (width - filled)}] {self.done} {message}   ")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


class Evaluator:
    """Converts with a set of nodes kept in fp32 and measures the worst error over the calibration inputs."""

    def __init__(self, job: ConversionJob, calibration: Sequence[Tuple[Any, ...]], tolerance: float,
                 metric: Optional[Metric]):
        self.job = job
        self.calibration = list(calibration)
        self.tolerance = tolerance
        self.metric = metric or relative_error
        with torch.no_grad():
            self.references = [job.reference(inputs) for inputs in self.calibration]
        self.conversions = 0
        self.converting = 0.0  # seconds spent converting and running converted models
        self.running = 0.0

    def error(self, keep_fp32: Sequence[Any], exact: bool = False, keep_float: Sequence[Any] = ()) \
            -> Tuple[float, Any, Report]:
        """Converts keeping `keep_fp32` in fp32 (and the int8 nodes in `keep_float` in the float plan's precision) and
        returns the worst error over the calibration inputs, or, unless `exact`, the first error beyond the tolerance
        (the search only asks whether it is met: the other inputs are not run). The runs check the outputs' dtypes,
        so the conversion itself skips its verification run."""
        start = time.perf_counter()
        module, report = self.job.run(keep_fp32, verify=False, keep_float=keep_float)
        self.conversions += 1
        self.converting += time.perf_counter() - start
        start = time.perf_counter()
        worst = 0.0
        with torch.no_grad():
            for inputs, reference in zip(self.calibration, self.references):
                output = self.job.call(module, inputs)
                self._check_dtypes(reference, output)
                worst = max(worst, float(self.metric(reference, output)))
                if not exact and not self.meets(worst):
                    break
        self.running += time.perf_counter() - start
        return worst, module, report

    def _check_dtypes(self, reference: Any, output: Any) -> None:
        """What the conversion's verification run checks: every output tensor has the fp32 model's dtype (with
        low-precision IO an fp32 output may be low)."""
        low = None if self.job.options.keep_io_dtypes else self.job.options.dtype
        expected = [t.dtype for t in tensors_of(reference)]
        actual = [torch.float32 if t.dtype == low else t.dtype for t in tensors_of(output)]
        if actual != expected:
            raise ConversionError(f"torch_mp internal error: converted outputs have dtypes {actual} instead of "
                                  f"{expected}")

    def meets(self, error: float) -> bool:
        return error <= self.tolerance


def rank_by_added_error(job: ConversionJob, report: Report, inputs: Tuple[Any, ...], moved: "Moves") \
        -> List[Tuple[int, float]]:
    """Low-precision and int8 nodes (by id) of the conversion `report` describes (the one with `moved`) with the
    relative error each adds, highest first."""
    low = [n["id"] for n in report.nodes if n["precision"] in BELOW_FP32]
    module, _ = job.run(moved.fp32, keep_node_ids=True, verify=False, keep_float=moved.float_plan)  # its nodes numbered
    readers = producers_read(report, set(low))
    ids = sorted(set(low) | {node for reads in readers.values() for node in reads})
    with torch.no_grad():
        low_values = job.probe(module, inputs, ids)
        reference_values = job.probe_reference(inputs, ids)
    errors: Dict[int, Tuple[float, float]] = {}
    for node, value, reference in zip(ids, low_values, reference_values):
        # a nested tensor (rows of different lengths) has no flat form to compare
        if value is not None and reference is not None and value.is_floating_point() and not value.is_nested \
                and value.numel():
            errors[node] = _errors(reference, value)
    scores = []
    for node in low:
        if node not in errors:
            continue
        read = [errors[r] for r in readers.get(node, ()) if r in errors]
        added = max(errors[node][kind] - max((e[kind] for e in read), default=0.0) for kind in (0, 1))
        scores.append((node, added))
    scores.sort(key=lambda item: -item[1])
    return scores


def producers_read(report: Report, nodes: set) -> Dict[int, List[int]]:
    """For each node id in `nodes`, the ids of the nodes whose values it reads in the converted graph (the report's
    `graph`), looking through the conversion's casts."""
    items = {item["id"]: item for item in report.data["graph"]}

    def producers(item_id: int) -> List[int]:
        item = items[item_id]
        if item["kind"] != "cast":
            return [item_id]
        return [p for source in item["inputs"] for p in producers(source)]

    return {node: [p for source in items[node]["inputs"] for p in producers(source)]
            for node in nodes if node in items}


def _errors(reference: torch.Tensor, value: torch.Tensor) -> Tuple[float, float]:
    """The error of a value relative to its norm and relative to its spread around its mean."""
    r, v = reference.detach().double().flatten(), value.detach().double().flatten()
    if not torch.isfinite(v).all():
        return float("inf"), float("inf")
    difference = (v - r).norm().item()
    return difference / max(r.norm().item(), 1e-30), difference / max((r - r.mean()).norm().item(), 1e-30)


def search_fallback(job: ConversionJob, calibration, tolerance: float, metric: Optional[Metric], progress: bool):
    """Ranked search (module docstring); returns (module, report) with report.data["fallback"]."""
    start = time.perf_counter()
    evaluator = Evaluator(job, calibration, tolerance, metric)
    error, module, report = evaluator.error((), exact=True)
    summary = {"tolerance": tolerance, "error_before": error, "method": "ranked", "ranking": [], "rounds": 0}
    kept: List[Move] = []
    if not evaluator.meets(error):
        bar = None
        tried: Dict[Tuple[Move, ...], float] = {(): error}  # errors only: a converted model per set would add up
        latest = {(): (error, module, report)}

        def attempt(moves) -> float:
            key = tuple(sorted(moves))  # one conversion per set, however the search reached it
            if key not in tried:
                moved = Moves.of(key)
                result = evaluator.error(moved.fp32, keep_float=moved.float_plan)
                tried[key] = result[0]
                latest.clear()
                latest[key] = result
                bar.step(f"{len(key)} nodes moved up: error {result[0]:.3g} (tolerance {tolerance:.3g})")
            return tried[key]

        # Rounds: each ranks the nodes still below fp32 in the conversion with every move so far (the first, the
        # plan as it is), appends a move up for each, and searches the shortest prefix of the moves that meets the
        # tolerance. An int8 node moves to the float plan's precision first; only where all those moves are not
        # enough does a later round move it on to fp32.
        order: List[Move] = []
        while True:
            ranking = rank_by_added_error(job, report, evaluator.calibration[0], Moves.of(order))
            described = {n["id"]: n for n in report.nodes}
            if not order:
                summary["ranking"] = [{"id": node, "op": described[node]["op"], "scope": described[node]["scope"],
                                       "precision": described[node]["precision"], "added_error": score}
                                      for node, score in ranking[:20]]
            ranked = {node for node, _ in ranking}
            # nodes the probe cannot read (inside if/loop blocks) come last, in graph order
            unranked = [n["id"] for n in report.nodes if n["precision"] in BELOW_FP32 and n["id"] not in ranked]
            new = [Move(node, described[node]["precision"] != "int8") for node in [n for n, _ in ranking] + unranked]
            new = [move for move in new if move not in order]
            if not new:
                if bar is not None:
                    bar.close()
                raise ValueError(
                    f"the fallback moved all {len(set(move.node for move in order))} nodes below fp32 to fp32 and the "
                    f"error is still {tried[tuple(sorted(order))]:.3g} > tolerance {tolerance:.3g}: is the metric "
                    "comparing the right outputs?")
            summary["rounds"] += 1
            if bar is None:
                bar = Progress(progress, total=2 * max(1, len(new)).bit_length() + 4)
            first = len(order)
            order += new
            # 1. double the count of new moves until the tolerance is met, 2. bisect between the last two counts
            low_count, count = first, first + 1
            while count < len(order) and not evaluator.meets(attempt(order[:count])):
                low_count, count = count, min(first + 2 * (count - first), len(order))
            high = count
            if not evaluator.meets(attempt(order[:high])):  # every move of this round is not enough
                report = latest[tuple(sorted(order))][2]  # the conversion with all of them: the next round's
                continue
            while high - low_count > 1:
                middle = (low_count + high) // 2
                if evaluator.meets(attempt(order[:middle])):
                    high = middle
                else:
                    low_count = middle
            kept = order[:high]
            break
        # 3. drop moves the tolerance does not need, within the budget; out of it, the smallest set tried that
        #    meets the tolerance is kept
        budget = evaluator.conversions + PRUNE_BUDGET
        smallest = list(kept)

        def meets_within_budget(moves) -> bool:
            nonlocal smallest
            if tuple(sorted(moves)) not in tried and evaluator.conversions >= budget:
                raise OutOfBudget
            met = evaluator.meets(attempt(moves))
            if met and len(moves) < len(smallest):
                smallest = list(moves)
            return met

        try:
            kept = needed(kept, [], meets_within_budget)
        except OutOfBudget:
            kept = smallest
            summary["pruning"] = (f"stopped after {PRUNE_BUDGET} conversions; the smallest set tried that meets the "
                                  "tolerance is kept")
        final = tuple(sorted(kept))
        if final in latest:
            error, module, report = latest[final]
        else:
            moved = Moves.of(final)
            error, module, report = evaluator.error(moved.fp32, exact=True, keep_float=moved.float_plan)
        bar.close()
    # where each moved node ended: int8 nodes the float plan runs low stay low; every other moved node runs fp32
    precision = {n["id"]: n["precision"] for n in report.nodes}
    moved_nodes = list(dict.fromkeys(move.node for move in kept))
    kept_float = [node for node in moved_nodes if precision.get(node) == "low" and Move(node, True) not in kept]
    summary.update(kept_fp32=[node for node in moved_nodes if node not in kept_float], kept_float=kept_float,
                   error_after=error, conversions=evaluator.conversions, seconds=time.perf_counter() - start,
                   conversion_seconds=evaluator.converting, run_seconds=evaluator.running)
    report.annotate("fallback", summary)
    return module, report


def needed(candidates: List[int], base: List[int], meets: Callable[[List[int]], bool]) -> List[int]:
    """The part of `candidates` that, kept in fp32 with `base`, the tolerance needs, by bisection; assumes that
    base + candidates meets it. About 2 k log2(n) tests for k needed nodes among n."""
    if meets(base):
        return []
    if len(candidates) == 1:
        return list(candidates)
    half = len(candidates) // 2
    first, second = candidates[:half], candidates[half:]
    from_first = needed(first, base + second, meets)
    return from_first + needed(second, base + from_first, meets)
