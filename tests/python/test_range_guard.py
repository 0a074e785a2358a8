"""The observed range guard: for fp16, a node reading or writing a tensor observed (on the example inputs) above
half of fp16's max, or entirely below its smallest normal, keeps fp32; bf16, with fp32's range, needs no range
guard. For both, a node reading or writing integers beyond those the low dtype holds exactly (256 for bf16, 2048 for
fp16: positions, indices, coordinates) keeps fp32."""
import pytest
import torch
from torch import nn

import torch_mp
from small_models import MaskedScores
from agreement import compare
from small_models import ConvBnNet


class Scaled(nn.Module):
    """Linear layers around a tensor scaled by `scale`: the middle layer sees values of that magnitude."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.inner = nn.Linear(32, 32)
        self.outer = nn.Linear(32, 8)

    def forward(self, x):
        return self.outer(self.inner(x * self.scale) / self.scale)


def guarded_ops(report):
    return sorted(n["op"] for n in report.nodes if n["rule_kind"] == "range guard")


@pytest.mark.parametrize("scale", [1e6, 1e-7], ids=["overflow", "underflow"])
def test_out_of_range_activations_keep_fp32_and_the_model_stays_accurate(scale):
    model = Scaled(scale).eval()
    x = torch.randn(16, 32)
    with torch.no_grad():
        reference = model(x)
        naive = model.half()(x.half()).float()
        model.float()
    # without the guard fp16 is useless here: inf (overflow) or values flushed towards 0 (underflow)
    naive_error = ((naive - reference).abs().max() / reference.abs().max()).item()
    assert not (naive_error < 0.05)

    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    assert "aten::linear" in guarded_ops(report)
    inner = [n for n in report.nodes if n["op"] == "aten::linear" and n["rule_kind"] == "range guard"]
    assert all(n["precision"] == "fp32" for n in inner)
    assert inner[0]["guard"]["kind"] == ("observed overflow" if scale > 1 else "observed tiny")
    fresh = torch.randn(16, 32)
    out = converted(fresh)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, model(fresh), rtol=1e-2, atol=1e-2 * model(fresh).abs().max().item())


def test_guard_is_quiet_for_bf16_and_for_models_in_range():
    bf16 = torch_mp.report_of(torch_mp.convert(Scaled(1e6).eval(), (torch.randn(16, 32),), torch.bfloat16))
    assert guarded_ops(bf16) == []
    fp16 = torch_mp.report_of(torch_mp.convert(ConvBnNet().eval(), (torch.randn(4, 3, 32, 32),), torch.float16))
    assert guarded_ops(fp16) == []
    assert all(n["precision"] == "low" for n in fp16.nodes if n["op"] == "aten::conv2d")


def test_float32_min_masks_keep_fp32_in_bf16_too():
    """bf16's max (3.39e38) is below fp32's: transformers' masks of torch.finfo(torch.float32).min do not fit it
    (CUDA's masked_fill refuses the scalar: "cannot be converted to type c10::BFloat16 without overflow")."""

    model = MaskedScores(torch.finfo(torch.float32).min).eval()
    x, mask = torch.randn(2, 5, 16), torch.rand(2, 5, 5) > 0.5
    mask[..., 0] = False
    converted = torch_mp.convert(model, (x, mask), torch.bfloat16)
    report = torch_mp.report_of(converted)
    fill = [n for n in report.nodes if n["op"] == "aten::masked_fill"]
    assert (fill[0]["precision"], fill[0]["rule_kind"], fill[0]["guard"]["kind"]) == \
        ("fp32", "range guard", "observed overflow")
    assert [n["precision"] for n in report.nodes if n["op"] == "aten::linear"] == ["low"]
    out = converted(x, mask)
    assert (out[mask] == 0).all()
    torch.testing.assert_close(out, model(x, mask), rtol=0, atol=2e-2)


class CoordinateFeatures(nn.Module):
    """Pixel coordinates (integers up to the image width) fed to a linear layer, a low op by policy."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(2, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, coords):
        return self.head(torch.relu(self.embed(coords)))


def pixel_grid(width: int) -> torch.Tensor:
    ys, xs = torch.meshgrid(torch.arange(8.0), torch.arange(float(width)), indexing="ij")
    return torch.stack([xs, ys], dim=-1).reshape(-1, 2)


@pytest.mark.parametrize("dtype, width, guarded", [
    (torch.bfloat16, 1000, True), (torch.float16, 4000, True),  # coordinates beyond 256 / 2048
    (torch.bfloat16, 250, False), (torch.float16, 2000, False),  # every coordinate exact in the low dtype
])
def test_integers_beyond_the_exact_range_keep_fp32(dtype, width, guarded):
    torch.manual_seed(0)
    model = CoordinateFeatures().eval()
    coords = pixel_grid(width)
    converted = torch_mp.convert(model, (coords,), dtype)
    report = torch_mp.report_of(converted)
    embed = next(n for n in report.nodes if n["op"] == "aten::linear")
    assert (embed["precision"] == "fp32") == guarded
    assert (embed["guard"] is not None and embed["guard"]["kind"] == "observed integers") == guarded
    if guarded:
        with torch.no_grad():
            agreement = compare(model(coords), converted(coords))
        assert agreement.cosine > 0.9999, agreement


class RotaryAngles(nn.Module):
    """Rotary position embedding as GPT-NeoX and the first LLaMA wrote it: an einsum of positions and inverse
    frequencies (an outer product), then cos/sin of the angles."""

    def __init__(self, dim: int = 32):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))
        self.q = nn.Linear(dim, dim)

    def forward(self, x):
        positions = torch.arange(x.size(1), dtype=torch.float32)
        angles = torch.einsum("i,j->ij", positions, self.inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        q = self.q(x)
        q1, q2 = q.chunk(2, dim=-1)
        return q * angles.cos() + torch.cat((-q2, q1), dim=-1) * angles.sin()


@pytest.mark.parametrize("front", ["convert", "export"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("length", [64, 1024])
def test_outer_products_follow_so_rotary_angles_stay_fp32(dtype, length, front):
    """einsum is a low op, but one that sums nothing only rounds its inputs: it follows, and with fp32 positions and
    fp32 readers (cos, sin) it stays fp32. Low, it gave cosine 0.955 at 1024 positions in bf16."""
    torch.manual_seed(0)
    model = RotaryAngles().eval()
    x = torch.randn(1, length, 32)
    if front == "convert":
        converted = torch_mp.convert(model, (x,), dtype)
        report = torch_mp.report_of(converted)
    else:
        program = torch_mp.export(model, (x,), dtype)
        report = torch_mp.report_of(program)
        converted = program.module()
    (einsum,) = [n for n in report.nodes if n["op"] == "aten::einsum"]
    # (at 1024 positions in bf16 the integer guard speaks first: positions beyond 256)
    assert einsum["precision"] == "fp32"
    assert einsum["rule_kind"] == "sums nothing" or (length > 256 and einsum["guard"]["kind"] == "observed integers")
    assert [n["precision"] for n in report.nodes if n["op"] == "aten::linear"] == ["low"]
    with torch.no_grad():
        agreement = compare(model(x), converted(x))
    assert agreement.cosine > 0.9999, agreement


class WideReluRsqrt(nn.Module):
    """A relu (exact zeros) of a tensor of 3 x 131072 elements (several chunks of the observer's one-pass scan), its
    transpose (a strided view) doubled, and rsqrt of that (a zero-sensitive read)."""

    def forward(self, x):
        return torch.rsqrt(torch.relu(x).transpose(0, 1) * 2.0)


@pytest.mark.parametrize("front", ["convert", "export"])
def test_wide_activations_observe_the_largest_and_smallest_magnitudes_of_every_run(front):
    """The largest finite magnitude over every run (an inf ignored), the smallest non-zero one (zeros ignored), on
    tensors laid out in several chunks and on strided views: what the observer's scan reads in one pass."""
    x = torch.rand(3, 131072) + 0.5
    x[0, :1000] = -1.0  # zeros after the relu
    x[1, 7] = float("inf")
    x[2, 131000] = 1e-9  # doubled: 2e-9, below fp16's smallest subnormal (6e-8)
    calibration = x.clone()
    calibration[2, 100000] = 300.0  # the largest finite magnitude, in a later chunk, on the calibration input only
    call = torch_mp.convert if front == "convert" else torch_mp.export
    report = torch_mp.report_of(call(WideReluRsqrt().eval(), (x,), torch.float16, calibration_inputs=[(calibration,)]))
    mul = next(n for n in report.nodes if n["op"] == "aten::mul")
    assert mul["amax"] == 600.0
    rsqrt = next(n for n in report.nodes if n["op"] == "aten::rsqrt")
    assert rsqrt["precision"] == "fp32"
    assert rsqrt["guard"]["kind"] == "underflow to zero"
    assert rsqrt["guard"]["seen"] == pytest.approx(2e-9, rel=1e-6)
