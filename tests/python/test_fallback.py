"""The accuracy-driven fallback: a small set of fp32 nodes that brings a model within tolerance."""
import pytest
import torch

import torch_mp
from bisection import bisect_fallback
from torch_mp.fallback import relative_error
from small_models import CancellationNet


@pytest.fixture
def model():
    return CancellationNet().eval()


def batches(count=3):
    return [(torch.randn(16, 64),) for _ in range(count)]


def test_fallback_finds_the_sensitive_nodes_and_meets_the_tolerance(model):
    calibration = batches()
    plain = torch_mp.convert(model, calibration[0], torch.float16)
    assert relative_error(model(*calibration[0]), plain(*calibration[0])) > 0.05

    converted = torch_mp.convert(
        model, calibration[0], torch.float16, calibration_inputs=calibration, tolerance=5e-3,
        progress=False,
    )
    report = torch_mp.report_of(converted)
    fallback = report.data["fallback"]
    kept = fallback["kept_fp32"]
    assert 1 <= len(kept) <= 3, kept
    scopes = {n["scope"] for n in report.nodes if n["rule_kind"] == "fallback"}
    assert "offset" in scopes
    assert all(n["precision"] == "fp32" for n in report.nodes if n["rule_kind"] == "fallback")
    assert fallback["error_before"] > 0.05 and fallback["error_after"] <= 5e-3
    for inputs in batches(2):  # fresh inputs: the fix generalises
        assert relative_error(model(*inputs), converted(*inputs)) < 1e-2
    # everything else stays in low precision
    low_linear = [n for n in report.nodes if n["op"] == "aten::linear" and n["precision"] == "low"]
    assert len(low_linear) == 9


def test_fallback_within_tolerance_keeps_nothing(model):
    calibration = batches(1)
    report = torch_mp.report_of(torch_mp.convert(
        model, calibration[0], torch.float16, tolerance=10.0, progress=False
    ))
    assert report.data["fallback"]["kept_fp32"] == [] and report.data["fallback"]["conversions"] == 1


def test_fallback_with_a_metric_callable(model):
    calibration = batches(2)

    def max_relative_error(reference, output):
        return ((reference - output).abs().max() / reference.abs().max()).item()

    converted = torch_mp.convert(
        model, calibration[0], torch.float16, calibration_inputs=calibration, tolerance=5e-3,
        metric=max_relative_error, progress=False,
    )
    report = torch_mp.report_of(converted)
    fallback = report.data["fallback"]
    assert fallback["error_before"] > 5e-3  # the plain plan misses the tolerance: the search has work to do
    assert 1 <= len(fallback["kept_fp32"]) <= 3, fallback["kept_fp32"]
    with torch.no_grad():
        for inputs in calibration:
            assert max_relative_error(model(*inputs), converted(*inputs)) <= 5e-3


def test_bisection_baseline_reaches_the_tolerance_too(model):
    calibration = batches(2)
    from torch_mp._torchscript.conversion import Conversion

    options = torch_mp.TorchScriptOptions(dtype=torch.float16, policy=torch_mp.OpPolicy.default("cpu_fp16"),
                                          fuse_convolutions=False)
    job = Conversion(torch_mp.prepare(model, calibration[0]), options)
    kept, error, conversions = bisect_fallback(job, calibration, 5e-3)
    assert error <= 5e-3 and 1 <= len(kept) <= 3 and conversions > len(kept)


def test_fallback_arguments_are_checked(model):
    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="metric needs a tolerance"):
        torch_mp.convert(model, (x,), torch.float16, metric=relative_error)
    with pytest.raises(ValueError, match="tolerance must be"):
        torch_mp.convert(model, (x,), torch.float16, tolerance=-1)


def test_out_of_pruning_budget_the_smallest_set_tried_that_meets_the_tolerance_is_kept(model, monkeypatch):
    """With no budget the ranked prefix is kept; with a little, the pruning keeps the smallest set it tried that
    meets the tolerance, never more nodes."""
    import torch_mp.fallback as fallback

    calibration = batches(2)
    kept, pruning = {}, {}
    for budget in (0, 3):
        monkeypatch.setattr(fallback, "PRUNE_BUDGET", budget)
        converted = torch_mp.convert(model, calibration[0], torch.float16, calibration_inputs=calibration,
                                     tolerance=5e-3, progress=False)
        report = torch_mp.report_of(converted)
        summary = report.data["fallback"]
        kept[budget], pruning[budget] = summary["kept_fp32"], summary.get("pruning")
        assert summary["error_after"] <= 5e-3
        with torch.no_grad():
            assert max(relative_error(model(*b), converted(*b)) for b in calibration) <= 5e-3
        assert summary["conversion_seconds"] + summary["run_seconds"] <= summary["seconds"]
    assert pruning[0] or len(kept[0]) == 1  # without budget only a one-node prefix needs no pruning conversion
    assert len(kept[3]) <= len(kept[0])
