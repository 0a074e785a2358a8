"""The accuracy fallback's plain search without ranking (delta debugging over the nodes in graph order, as ORT's
search does), to compare torch_mp.fallback's ranked search with (tests/python/test_fallback.py,
benchmarks/fallback_search.py)."""
from typing import Dict, Optional

from torch_mp.fallback import Evaluator, Metric, OutOfBudget, needed


def bisect_fallback(job, calibration, tolerance: float, metric: Optional[Metric] = None,
                    max_conversions: Optional[int] = None):
    """Plain bisection without ranking (what ORT's search does, in delta-debugging form): returns
    (kept node ids, error, conversions), or (None, None, conversions) when it needed more than
    `max_conversions`."""
    evaluator = Evaluator(job, calibration, tolerance, metric)
    error, _, report = evaluator.error((), exact=True)
    if evaluator.meets(error):
        return [], error, evaluator.conversions
    order = [n["id"] for n in report.nodes if n["precision"] == "low"]
    cache: Dict[frozenset, bool] = {}

    def meets(nodes) -> bool:
        key = frozenset(nodes)
        if key not in cache:
            if max_conversions is not None and evaluator.conversions >= max_conversions:
                raise OutOfBudget
            cache[key] = evaluator.meets(evaluator.error(sorted(key))[0])
        return cache[key]

    try:
        kept = needed(order, [], meets)
    except OutOfBudget:
        return None, None, evaluator.conversions
    return kept, evaluator.error(sorted(kept))[0], evaluator.conversions
