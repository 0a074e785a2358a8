"""CUDA: channels_last convolutions, cuDNN fused convolutions and the CUDA-graph runner, on a GPU (skipped elsewhere).

Tolerances: fused and NHWC convolutions accumulate in fp32 like the plain ones but may round and order sums
differently (another cuDNN algorithm), so they are compared with the unfused NCHW conversion within the low dtype's
rounding of the output scale; the CUDA-graph replay runs the same kernels and must be bit for bit equal.
"""
import pytest
import torch
from torch import nn

import torch_mp
from torch_mp.models import IBN, ResNetIBN

pytestmark = pytest.mark.cuda

# max |difference| relative to max |reference|, per dtype (a few units in the last place of fp16 / bf16)
RELATIVE_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 5e-2}


def small_resnet():
    return ResNetIBN(layers=(1, 1, 1, 1), num_classes=100, width=32).eval().cuda()


def ops_of(module):
    return [node.kind() for node in module.graph.nodes()]


def close(reference, result, dtype):
    scale = reference.abs().max().item()
    return (reference.double() - result.double()).abs().max().item() <= RELATIVE_TOLERANCE[dtype] * scale


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_channels_last_and_fused_convolutions_match_plain_conversion(dtype):
    model, x = small_resnet(), torch.randn(8, 3, 64, 64, device="cuda")
    plain = torch_mp.convert(model, (x,), dtype, channels_last=False, fuse_convolutions=False)
    nhwc = torch_mp.convert(model, (x,), dtype, fuse_convolutions=False)
    report = torch_mp.report_of(nhwc)
    fused = torch_mp.convert(model, (x,), dtype)
    fused_report = torch_mp.report_of(fused)
    assert report.data["channels_last_convolutions"] == sum(isinstance(m, nn.Conv2d) for m in model.modules())
    assert "aten::cudnn_convolution_add_relu" in ops_of(fused) and "aten::cudnn_convolution_relu" in ops_of(fused)
    assert fused_report.data["fused_convolutions"] > 0
    assert not any(op.startswith("aten::cudnn") for op in ops_of(plain) + ops_of(nhwc))
    fresh = torch.randn_like(x)
    with torch.no_grad():
        expected, by_nhwc, by_fused = plain(fresh), nhwc(fresh), fused(fresh)
    for result in (by_nhwc, by_fused):
        assert result.dtype == torch.float32 and result.shape == expected.shape
        assert result.is_contiguous()
        assert close(expected, result, dtype)


def nodes_in(block):
    for node in block.nodes():
        yield node
        for sub in node.blocks():
            yield from nodes_in(sub)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_ibn_units_stay_nhwc_through_split_copies_and_instance_norm(dtype):
    """No NCHW copy inside an IBN unit's conv chain: the split halves are read as NHWC views, the model's contiguous
    copies go, the instance norm is fp32 statistics and one scale-and-shift pass in stock ops, and the input cast
    writes NHWC for the first convolution; the only copy left at the top level is the pooled [N, C, 1, 1] features'
    before torch.flatten (a view), which is no copy at all (size-1 dims)."""
    model, x = small_resnet(), torch.randn(4, 3, 64, 64, device="cuda")
    plain = torch_mp.convert(model, (x,), dtype, channels_last=False, fuse_convolutions=False)
    converted = torch_mp.convert(model, (x,), dtype)
    units = sum(isinstance(module, IBN) for module in model.modules())
    kinds = [node.kind() for node in nodes_in(converted.graph)]
    assert units > 0 and kinds.count("aten::var_mean") == units
    assert ops_of(converted).count("aten::contiguous") == 1
    first_cast = next(node for node in converted.graph.nodes() if node.kind() == "aten::to")
    assert first_cast.inputsAt(4).toIValue() == 2  # torch.channels_last's MemoryFormat value
    fresh = torch.randn_like(x)
    with torch.no_grad():
        expected, result = plain(fresh), converted(fresh)
    assert result.dtype == torch.float32 and result.is_contiguous()
    assert close(expected, result, dtype)


def test_channels_last_output_keeps_the_fp32_layout():
    """A model returning a feature map returns it contiguous (NCHW), as the fp32 model does."""
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1)).eval().cuda()
    x = torch.randn(2, 3, 32, 32, device="cuda")
    converted = torch_mp.convert(model, (x,), torch.float16)
    with torch.no_grad():
        out = converted(x)
    assert out.is_contiguous() and not out.is_contiguous(memory_format=torch.channels_last)
    assert close(model(x), out, torch.float16)


class ResidualConvNet(nn.Module):
    """A stem and two residual blocks (the second strided, with a 1x1 projection) into a linear head: every op between
    its first and last convolution runs in the low dtype under the CUDA policies, so a copy there converts a layout."""

    def __init__(self):
        super().__init__()

        def conv_bn(cin, cout, kernel, stride=1):
            return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout))

        self.stem = nn.Sequential(conv_bn(3, 32, 3), nn.ReLU())
        self.block1 = nn.Sequential(conv_bn(32, 32, 3), nn.ReLU(), conv_bn(32, 32, 3))
        self.block2 = nn.Sequential(conv_bn(32, 64, 3, 2), nn.ReLU(), conv_bn(64, 64, 3))
        self.projection = conv_bn(32, 64, 1, 2)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(self.block1(x) + x)
        x = torch.relu(self.block2(x) + self.projection(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


CONVOLUTIONS = ("aten::conv2d", "aten::_convolution", "aten::cudnn_convolution_relu", "aten::cudnn_convolution_add_relu")


def layout_copies(module, x):
    """(aten::copy_ calls between the end of the first convolution and the start of the last one, names of the CUDA
    kernels cuDNN transposes NCHW / NHWC with) in one forward."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.no_grad():
        module(x)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=activities) as profile:
            module(x)
            torch.cuda.synchronize()
    events = list(profile.events())
    convolutions = sorted((e for e in events if e.name in CONVOLUTIONS), key=lambda e: e.time_range.start)
    assert len(convolutions) >= 2, [e.name for e in events]
    first_end, last_start = convolutions[0].time_range.end, convolutions[-1].time_range.start
    copies = [e for e in events if e.name == "aten::copy_" and first_end <= e.time_range.start < last_start]
    transposes = [e.name for e in events if e.device_type == torch.autograd.DeviceType.CUDA
                  and ("nchwToNhwc" in e.name or "nhwcToNchw" in e.name)]
    return copies, transposes


@pytest.mark.parametrize("fuse_convolutions", [True, False], ids=["cudnn_fused", "unfused"])
def test_no_layout_conversions_between_convolutions(fuse_convolutions):
    model, x = ResidualConvNet().eval().cuda(), torch.randn(8, 3, 64, 64, device="cuda")
    converted = torch_mp.convert(model, (x,), torch.float16, fuse_convolutions=fuse_convolutions)
    kinds = ops_of(converted)
    assert sum(kind in CONVOLUTIONS for kind in kinds) == 6
    assert ("aten::cudnn_convolution_relu" in kinds) == fuse_convolutions
    copies, transposes = layout_copies(converted, x)
    # the NCHW input is converted where the chain starts (inside the first convolution); nothing in between copies
    assert copies == [], [(e.name, e.input_shapes) for e in copies]
    assert len(transposes) <= 1, transposes
    with torch.no_grad():
        assert close(model(x), converted(x), torch.float16)


def test_cuda_graphs_replay_equals_plain_module_and_records_per_shape():
    model = small_resnet()
    x = torch.randn(4, 3, 64, 64, device="cuda")
    converted = torch_mp.convert(model, (x,), torch.float16)
    runner = torch_mp.cuda_graphs(converted, (x,))
    assert runner.recorded_signatures == 1
    for batch in (4, 2, 4):
        fresh = torch.randn(batch, 3, 64, 64, device="cuda")
        with torch.no_grad():
            expected = converted(fresh)
        result = runner(fresh)
        assert torch.equal(result, expected)
    assert runner.recorded_signatures == 2
    first = runner(x)
    second = runner(torch.randn_like(x))
    assert not torch.equal(first, second)  # outputs are copies, not the buffer the next replay overwrites


class SyncsWithHost(nn.Module):
    def forward(self, x):
        if bool(x.sum() > 0):  # reads a device value on the host
            return x * 2
        return x


def test_cuda_graphs_refuses_a_forward_that_synchronises():
    scripted = torch.jit.script(SyncsWithHost().eval())
    with pytest.raises(torch_mp.CudaGraphCaptureError, match="synchronises with the host"):
        torch_mp.cuda_graphs(scripted, (torch.randn(4, device="cuda"),))


def test_cuda_graphs_needs_cuda_inputs():
    with pytest.raises(ValueError, match="CUDA device"):
        torch_mp.cuda_graphs(torch.jit.script(SyncsWithHost().eval()), (torch.randn(4),))
