"""kernels="fused": instance / group norms, with a channel cat of them and eval batch norms and a following relu,
become torch_mp::fused_channel_norm calls (jit/rewrite/fuse_normalization); numerics against fp32 and save / load."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_mp
from torch_mp.models import IBN, resnet50_ibn_a

OP = "torch_mp::fused_channel_norm"


def norm_calls(module) -> int:
    return len(module.graph.findAllNodes(OP))


class IbnUnit(nn.Module):
    """conv -> split -> InstanceNorm2d / BatchNorm2d -> cat -> relu -> conv, as an IBN-a bottleneck's first half."""

    def __init__(self, channels: int = 16):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 1, bias=False)
        self.ibn = IBN(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)

    def forward(self, x):
        return self.conv2(torch.relu(self.ibn(self.conv1(x))))


class GroupNormBlock(nn.Module):
    def __init__(self, channels: int = 16):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.GroupNorm(4, channels)
        self.conv2 = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        return self.conv2(F.relu(self.norm(self.conv1(x))))


def trained(module: nn.Module) -> nn.Module:
    """Non-trivial norm parameters and running statistics, in eval mode."""
    torch.manual_seed(1)
    for m in module.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.InstanceNorm2d, nn.GroupNorm)) and m.weight is not None:
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.normal_()
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2.0)
    return module.eval()


def agreement(actual: torch.Tensor, reference: torch.Tensor):
    actual, reference = actual.double().flatten(), reference.double().flatten()
    cosine = F.cosine_similarity(actual, reference, dim=0).item()
    relative = ((actual - reference).abs().max() / reference.abs().max()).item()
    return cosine, relative


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_ibn_unit_fuses_and_matches_fp32(dtype):
    torch.manual_seed(0)
    model, x = trained(IbnUnit()), torch.randn(2, 16, 12, 10)
    portable = torch_mp.convert(model, (x,), dtype)
    portable_report = torch_mp.report_of(portable)
    fused = torch_mp.convert(model, (x,), dtype, kernels="fused")
    report = torch_mp.report_of(fused)
    assert norm_calls(portable) == portable_report.data["fused_normalizations"] == 0
    # the instance norm in its If branch, and the cast of the If's output + batch norm + cat + relu after it
    assert norm_calls(fused) == report.data["fused_normalizations"] == 2
    assert not fused.graph.findAllNodes("aten::cat") and not fused.graph.findAllNodes("aten::batch_norm")
    with torch.no_grad():
        reference, out_portable, out_fused = model(x), portable(x), fused(x)
    assert out_fused.dtype == out_portable.dtype == torch.float32
    cosine, relative = agreement(out_fused, reference)
    portable_cosine, portable_relative = agreement(out_portable, reference)
    assert cosine > 0.9999 and relative < (2e-2 if dtype == torch.bfloat16 else 4e-3)
    # no worse than ATen's kernels in the same precision, up to a rounding
    assert relative <= 1.5 * portable_relative + 1e-3


def test_group_norm_fuses_and_matches_fp32():
    torch.manual_seed(0)
    model, x = trained(GroupNormBlock()), torch.randn(2, 16, 12, 10)
    fused = torch_mp.convert(model, (x,), torch.float16, kernels="fused")
    report = torch_mp.report_of(fused)
    assert norm_calls(fused) == report.data["fused_normalizations"] == 1
    assert not fused.graph.findAllNodes("aten::group_norm")
    (call,) = fused.graph.findAllNodes(OP)
    assert call.output().type().scalarType() == "Half"  # the cast after the fp32 norm is the call's write
    with torch.no_grad():
        cosine, relative = agreement(fused(x), model(x))
    assert cosine > 0.9999 and relative < 4e-3


def test_saved_fused_norm_model_round_trips(tmp_path):
    torch.manual_seed(0)
    model, x = trained(IbnUnit()), torch.randn(2, 16, 12, 10)
    fused = torch_mp.convert(model, (x,), torch.float16, kernels="fused")
    path = tmp_path / "fused.pt"
    torch.jit.save(fused, path)
    loaded = torch.jit.load(path)
    assert norm_calls(loaded) == 2
    with torch.no_grad():
        for inputs in (x, torch.randn(3, 16, 7, 9)):
            assert torch.equal(loaded(inputs), fused(inputs))


def test_resnet50_ibn_a_fuses_every_ibn_unit():
    torch.manual_seed(0)
    model, x = trained(resnet50_ibn_a()), torch.randn(2, 3, 64, 32)
    fused = torch_mp.convert(model, (x,), torch.float16, kernels="fused")
    report = torch_mp.report_of(fused)
    units = sum(isinstance(m, IBN) for m in model.modules())
    assert units == 13  # stages 1-3: 3 + 4 + 6 bottlenecks
    assert norm_calls(fused) == report.data["fused_normalizations"] == 2 * units
    assert not fused.graph.findAllNodes("aten::cat")
    with torch.no_grad():
        out, reference = fused(x), model(x)
    cosine, relative = agreement(out, reference)
    assert cosine > 0.999, (cosine, relative)


def channel_norm(parts, groups, scales, shifts, relu, out_dtype):
    return torch.ops.torch_mp.fused_channel_norm(parts, groups, scales, shifts, 1e-5, relu, out_dtype)


# (rtol, atol) of the kernel against an fp32 result: fp32 within its statistics' rounding; fp16 / bf16 within one
# spacing of the dtype (2^-10 / 2^-7 of the value)
TOLERANCES = {torch.float32: (1e-5, 2e-6), torch.float16: (2 ** -10, 1e-5), torch.bfloat16: (2 ** -7, 1e-5)}


def layouts(whole: torch.Tensor):
    """16 channels of `whole` (N, 24, H, W) in each layout the kernels read in place."""
    return {
        "contiguous": whole[:, :16].contiguous(),
        "channels_last": whole[:, :16].contiguous(memory_format=torch.channels_last),
        "slice_of_channels_last": whole.contiguous(memory_format=torch.channels_last)[:, 4:20],
        "slice_of_contiguous": whole[:, 4:20],
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_cpu_kernel_matches_aten_in_every_layout(dtype):
    whole = (torch.randn(2, 24, 7, 9) * 3 + 1).to(dtype)
    y = (torch.randn(2, 8, 7, 9) * 2).to(dtype)
    w, b, scale, shift = torch.randn(16), torch.randn(16), torch.rand(8) + 0.5, torch.randn(8)
    for name, x in layouts(whole).items():
        for groups in (1, 2, -1):
            out = channel_norm([x, y], [groups, 0], [w, scale], [b, shift], True, dtype)
            expected = torch.relu(torch.cat([F.group_norm(x.float(), 16 if groups == -1 else groups, w, b, 1e-5),
                                             y.float() * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1)], 1))
            assert out.dtype == dtype
            assert out.is_contiguous(memory_format=torch.channels_last) == (x.stride(1) == 1), name
            # fp32: the statistics' rounding; fp16 / bf16: one rounding of ATen's fp32 result (the dtype's spacing)
            rtol, atol = TOLERANCES[dtype]
            torch.testing.assert_close(out.float(), expected, rtol=rtol, atol=atol, msg=f"{name} groups {groups}")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_cuda_kernel_matches_cpu_kernel(dtype):
    if not torch._C._dispatch_has_kernel_for_dispatch_key(OP, "CUDA"):
        pytest.skip("this build of torch_mp has no CUDA kernel")
    whole = (torch.randn(2, 24, 33, 17) * 3 + 1).to(dtype)
    y = (torch.randn(2, 8, 33, 17) * 2).to(dtype)
    w, b, scale, shift = torch.randn(16), torch.randn(16), torch.rand(8) + 0.5, torch.randn(8)
    for name, x in layouts(whole).items():
        for groups in (1, 2, -1):
            on_cpu = channel_norm([x, y], [groups, 0], [w, scale], [b, shift], True, dtype)
            on_cuda = channel_norm([x.cuda(), y.cuda()], [groups, 0], [w.cuda(), scale.cuda()],
                                   [b.cuda(), shift.cuda()], True, dtype)
            assert on_cuda.stride() == on_cpu.stride(), name
            # fp32 statistics summed in another order: one rounding of the low dtype apart at most
            rtol, atol = TOLERANCES[dtype]
            torch.testing.assert_close(on_cuda.cpu().float(), on_cpu.float(), rtol=rtol, atol=atol,
                                       msg=f"{name} groups {groups}")


@pytest.mark.cuda
def test_cuda_ibn_unit_fuses_and_matches_fp32():
    if not torch._C._dispatch_has_kernel_for_dispatch_key(OP, "CUDA"):
        pytest.skip("this build of torch_mp has no CUDA kernel")
    model, x = trained(IbnUnit()).cuda(), torch.randn(4, 16, 28, 20, device="cuda")
    fused = torch_mp.convert(model, (x,), torch.float16, kernels="fused")
    assert norm_calls(fused) == 2
    with torch.no_grad():
        cosine, relative = agreement(fused(x), model(x))
    assert cosine > 0.9999 and relative < 4e-3
