"""No converted model returns NaN or inf where the fp32 model is finite.

The underflow-to-zero guard keeps fp32 what a 0 would turn into inf or NaN (a divisor, rsqrt, log, a negative power)
where the value reaching it can be below the low dtype's smallest number; verification catches what no guard foresaw
(catastrophic cancellation) and repairs it by keeping the nodes responsible fp32. The suite plans for a CPU with fp16
kernels (conftest.py), as for a GPU.
"""
import pytest
import torch

import torch_mp
from small_models import CosineAttention

FP16_SMALLEST = 2.0**-24


def _nodes(report, op):
    return [node for node in report.nodes if node["op"] == op]


def _assert_finite_and_close(model, converted, inputs, atol):
    with torch.no_grad():
        reference, result = model(*inputs), converted(*inputs)
    assert torch.isfinite(reference).all()
    assert torch.isfinite(result).all(), f"{(~torch.isfinite(result)).sum().item()} non-finite outputs"
    torch.testing.assert_close(result, reference, atol=atol, rtol=0)


def _padded_tokens(seed=0):
    torch.manual_seed(seed)
    x = torch.randn(2, 16, 32)
    x[:, -4:] = 0  # padded tokens: k is exactly 0 there
    return x


def test_cosine_attention_fp16_keeps_the_normalising_division_fp32():
    torch.manual_seed(0)
    model = CosineAttention().eval()
    x = _padded_tokens()
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    for op in ("aten::clamp_min", "aten::expand_as", "aten::div"):
        for node in _nodes(report, op):
            assert node["precision"] == "fp32", node
            assert node["rule_kind"] == "range guard"
            guard = node["guard"]
            assert guard["kind"] == "underflow to zero"
            assert guard["seen"] == pytest.approx(1e-12, rel=1e-6)
            assert guard["limit"] == FP16_SMALLEST
    assert [node["precision"] for node in _nodes(report, "aten::matmul")] == ["low"]
    assert all(node["precision"] == "low" for node in _nodes(report, "aten::linear"))
    assert report.data["non_finite"] is None
    for inputs in ((x,), (_padded_tokens(1),)):
        _assert_finite_and_close(model, converted, inputs, atol=5e-3)


def test_cosine_attention_bf16_divides_low():
    """bf16 holds 1e-12: no guard fires, the division stays low (the non-firing case)."""
    torch.manual_seed(0)
    model = CosineAttention().eval()
    x = _padded_tokens()
    converted = torch_mp.convert(model, (x,), torch.bfloat16)
    report = torch_mp.report_of(converted)
    assert all(node["precision"] == "low" and node["guard"] is None for node in _nodes(report, "aten::div"))
    _assert_finite_and_close(model, converted, (x,), atol=3e-2)


class RmsNorm(torch.nn.Module):
    def __init__(self, eps):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)
        self.eps = eps

    def forward(self, x):
        h = self.lin(x)
        return self.lin(h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps))


def test_rsqrt_of_a_tiny_epsilon_stays_fp32_in_fp16():
    torch.manual_seed(0)
    model = RmsNorm(1e-12).eval()
    x = torch.randn(4, 16)
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    (rsqrt,) = _nodes(report, "aten::rsqrt")
    assert rsqrt["precision"] == "fp32" and rsqrt["guard"]["kind"] == "underflow to zero"
    _assert_finite_and_close(model, converted, (x,), atol=5e-2)


def test_a_comfortable_divisor_stays_low():
    """x * rsqrt(mean + 1e-3): 1e-3 is well inside fp16, the mean is observed large: no guard fires."""
    torch.manual_seed(0)
    model = RmsNorm(1e-3).eval()
    x = torch.randn(4, 16)
    report = torch_mp.report_of(torch_mp.convert(model, (x,), torch.float16))
    assert all(node["guard"] is None for node in report.nodes)
    assert all(node["precision"] == "low" for node in _nodes(report, "aten::linear"))


class LogOfSmall(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(torch.log(torch.relu(self.lin(x)) + 1e-10))


def test_log_of_a_tiny_offset_is_finite():
    torch.manual_seed(0)
    model = LogOfSmall().eval()
    x = torch.randn(16, 8)
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    (add,) = _nodes(report, "aten::add")
    assert add["precision"] == "fp32" and add["guard"]["kind"] in ("underflow to zero", "lost scalar")
    _assert_finite_and_close(model, converted, (x,), atol=5e-2)


class SmallScale(torch.nn.Module):
    """A division by a small learned scale (a constant after freezing): 1e-9 is 0 in fp16."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.scale = torch.nn.Parameter(torch.full((8,), 1e-9))

    def forward(self, x):
        return self.lin(self.lin(x) * 1e-9 / self.scale)


def test_division_by_a_small_learned_scale_stays_fp32():
    torch.manual_seed(0)
    model = SmallScale().eval()
    x = torch.randn(4, 8)
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    (div,) = _nodes(report, "aten::div")
    # the numerator is tiny too: which guard speaks first depends on classification order, the division stays fp32
    assert div["precision"] == "fp32" and div["guard"]["kind"] in ("observed tiny", "underflow to zero")
    _assert_finite_and_close(model, converted, (x,), atol=5e-2)


class Cancellation(torch.nn.Module):
    """Two values near 1000 whose difference divides: fp16 rounds both to the same number (its spacing there is
    0.5), the difference to 0, and the quotient to inf. No guard sees it coming: every value is in range."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        difference = (self.a(x) + 1000.0) - (self.b(x) + 1000.0)
        return x / difference


def test_verification_repairs_what_no_guard_foresaw():
    torch.manual_seed(0)
    model = Cancellation().eval()
    x = torch.randn(16, 8)
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    repair = report.data["non_finite_repair"]
    assert repair["kept_fp32"] and repair["rounds"] >= 1
    kept = {node["id"] for node in report.nodes if node["rule_kind"] == "non-finite"}
    assert kept == set(repair["kept_fp32"])
    assert all(node["precision"] == "fp32" for node in report.nodes if node["id"] in kept)
    assert report.data["non_finite"] is None
    with torch.no_grad():
        assert torch.isfinite(converted(x)).all()
    # the same plan without verification returns inf: the repair is what made it finite
    unverified = torch_mp.convert(model, (x,), torch.float16, verify=False)
    with torch.no_grad():
        assert not torch.isfinite(unverified(x)).all()


def test_verification_covers_calibration_inputs():
    """Finite on the example inputs, inf on a calibration input: repaired too."""
    torch.manual_seed(0)
    model = Cancellation().eval()
    calm = torch.randn(16, 8) * 1e-3  # differences of 1e-3-sized outputs near 1000 still round to 0 in fp16
    x = torch.randn(16, 8)
    converted = torch_mp.convert(model, (x,), torch.float16, calibration_inputs=[calm])
    report = torch_mp.report_of(converted)
    assert report.data["non_finite"] is None
    with torch.no_grad():
        for inputs in (x, calm):
            assert torch.isfinite(converted(inputs)).all()
