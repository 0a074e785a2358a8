"""One options type from the API to the pipeline: ConversionOptions is checked when made (before any capture), the
same options given whole or as keywords make the same conversion, each front refuses what it cannot do, and dtype=None
is the device's choice (a SlowKernelsWarning where the device has no fast kernels for either low dtype)."""
import warnings

import pytest
import torch
from torch import nn

import torch_mp


class MatmulNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(self.fc(x))


@pytest.fixture
def model():
    torch.manual_seed(0)
    return MatmulNorm().eval()


@pytest.mark.parametrize("fields, error", [
    (dict(dtype=torch.float32), ValueError),
    (dict(dtype="float16"), TypeError),
    (dict(planner="best"), ValueError),
    (dict(kernels="fast"), ValueError),
    (dict(verify=1), TypeError),
    (dict(tolerance=-1.0), ValueError),
    (dict(metric=lambda a, b: 0.0), ValueError),
    (dict(policy="cpu_fp16"), TypeError),
])
def test_bad_options_fail_when_made(fields, error):
    with pytest.raises(error):
        torch_mp.ConversionOptions(**fields)


def test_an_unknown_keyword_names_the_options(model):
    with pytest.raises(TypeError, match="unknown option fused_kernels; the options are dtype, policy"):
        torch_mp.convert(model, torch.randn(4, 16), torch.float16, fused_kernels=True)


def test_options_are_checked_before_the_model_is_captured(model, monkeypatch):
    captured = []
    monkeypatch.setattr(torch_mp._torchscript.conversion, "_capture", lambda *args: captured.append(args))
    with pytest.raises(ValueError):
        torch_mp.convert(model, torch.randn(4, 16), torch.float16, kernels="fast")
    assert captured == []


def test_options_whole_or_as_keywords_make_the_same_conversion(model):
    x = torch.randn(4, 16)
    options = torch_mp.TorchScriptOptions(dtype=torch.bfloat16, keep_io_dtypes=False, fuse_casts=False)
    whole = torch_mp.convert(model, x, options=options)
    keywords = torch_mp.convert(model, x, torch.bfloat16, keep_io_dtypes=False, fuse_casts=False)
    body = lambda module: str(module.graph).split("\n", 1)[1]  # noqa: E731 - the first line names the module's class
    assert body(whole) == body(keywords)
    # keywords replace the fields of the options given
    replaced = torch_mp.convert(model, x, torch.float16, options=options)
    report = torch_mp.report_of(replaced)
    assert report.data["dtype"] == "float16" and replaced(x.half()).dtype == torch.float16


def test_export_refuses_the_torchscript_fronts_options(model):
    with pytest.raises(ValueError, match="kernels='fused'"):
        torch_mp.export(model, (torch.randn(4, 16),), torch.float16, kernels="fused")
    # by type: a ConversionOptions has none of TorchScriptOptions' knobs, and export takes no TorchScriptOptions
    with pytest.raises(ValueError, match="fuse_casts=False is an option of the TorchScript front only .*TorchScriptOptions"):
        torch_mp.ConversionOptions(fuse_casts=False)
    with pytest.raises(TypeError, match="must be a torch_mp.ConversionOptions, got TorchScriptOptions"):
        torch_mp.export(model, (torch.randn(4, 16),), options=torch_mp.TorchScriptOptions(dtype=torch.float16))
    # convert takes either: a ConversionOptions is a TorchScriptOptions with the knobs at their defaults
    chosen = torch_mp.TorchScriptOptions.of(torch_mp.ConversionOptions(dtype=torch.float16), kernels="fused")
    assert type(chosen) is torch_mp.TorchScriptOptions and chosen.dtype == torch.float16 and chosen.kernels == "fused"


def test_the_load_time_pass_refuses_what_it_cannot_do():
    with pytest.raises(ValueError):
        torch_mp.jit_pass(torch.float16, keep_io_dtypes=False)
    with pytest.raises(ValueError):
        torch_mp.jit_pass(torch.float16, tolerance=1e-3)
    with pytest.raises(ValueError):
        torch_mp.jit_pass(None)
    assert not torch_mp.jit_pass.is_enabled()


@pytest.mark.parametrize("features, expected", [
    ("all", torch.bfloat16),           # autocast's CPU choice where both are fast
    ("avx512_fp16", torch.float16),    # only fp16 kernels
    ("avx512_bf16", torch.bfloat16),
])
def test_no_dtype_is_the_cpus_choice(model, monkeypatch, features, expected):
    monkeypatch.setenv("TORCH_MP_CPU_FEATURES", features)
    assert torch_mp.device_dtype("cpu") == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch_mp.SlowKernelsWarning)
        converted = torch_mp.convert(model, torch.randn(4, 16))
        report = torch_mp.report_of(converted)
        program = torch_mp.export(model, (torch.randn(4, 16),))
        export_report = torch_mp.report_of(program)
    name = {torch.float16: "float16", torch.bfloat16: "bfloat16"}[expected]
    assert report.data["dtype"] == name and export_report.data["dtype"] == name
    assert report.low_precision_flop_fraction == 1.0


def test_no_dtype_on_a_cpu_without_fast_kernels_warns_and_keeps_the_heavy_ops_fp32(model, monkeypatch):
    monkeypatch.setenv("TORCH_MP_CPU_FEATURES", "none")
    with pytest.warns(torch_mp.SlowKernelsWarning):
        converted = torch_mp.convert(model, torch.randn(4, 16))
        report = torch_mp.report_of(converted)
    assert report.data["dtype"] == "bfloat16"
    assert report.low_precision_flop_fraction == 0.0 and report.data["slow_kernels"]


def test_no_dtype_planned_for_cuda_is_fp16(model):
    assert torch_mp.device_dtype("cuda") == torch.float16


def test_the_vocabularies_are_the_ones_the_cpp_options_parse(model):
    """torch_mp.options' PLANNERS and KERNELS are _C's (one table in csrc/python/bindings.cpp, which parses them):
    each name converts, and a name outside them is refused by C++ too, naming the vocabulary."""
    from torch_mp import _C
    from torch_mp.options import KERNELS, PLANNERS

    assert PLANNERS == _C.PLANNERS == ("min-cut", "greedy") and KERNELS == _C.KERNELS == ("portable", "fused")
    x = torch.randn(4, 16)
    for planner in PLANNERS:
        assert torch_mp.report_of(torch_mp.convert(model, (x,), torch.bfloat16, planner=planner)) \
            .data["planner"] == planner
    for kernels in KERNELS:
        torch_mp.convert(model, (x,), torch.bfloat16, kernels=kernels)
    with pytest.raises(ValueError, match="planner must be one of 'min-cut', 'greedy', got 'best'"):
        _C.ConversionRequest(dtype="bfloat16", policy=torch_mp.OpPolicy()._c, planner="best", verify=True,
                             keep_io_dtypes=True)
