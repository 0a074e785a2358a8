"""Low precision only where the device has fast kernels for it: on a CPU without fp16 (or bf16) arithmetic, or a GPU
without tensor cores for the low dtype, the default policy keeps convolutions, matrix products and RNNs fp32 and the
report says why; the user can still force them. conftest.py plans the rest of the suite for a CPU with every fast
kernel; these tests name the CPU or GPU planned for."""
import os

import pytest
import torch
import torch.nn as nn

import torch_mp

NO_FP16_ARITHMETIC = "avx512_bf16"  # an AMD EPYC (Zen 4) or Intel Cooper Lake: bf16 kernels, fp16 reference loops


class ConvLstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.lstm = nn.LSTM(16, 32, batch_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        features = torch.relu(self.conv(x)).mean(dim=2).transpose(1, 2)  # (batch, width, channels)
        sequence, _ = self.lstm(features)
        return self.head(sequence)


@pytest.fixture
def model_and_input():
    torch.manual_seed(0)
    return ConvLstm().eval(), torch.randn(2, 3, 8, 12)


HEAVY = {"aten::conv2d", "aten::lstm", "aten::linear"}


def heavy_nodes(report):
    nodes = [n for n in report.nodes if n["op"] in HEAVY]
    assert {n["op"] for n in nodes} == HEAVY
    return nodes


def test_fp16_without_fp16_arithmetic_keeps_heavy_ops_fp32_and_says_why(monkeypatch, model_and_input):
    monkeypatch.setenv("TORCH_MP_CPU_FEATURES", NO_FP16_ARITHMETIC)
    model, x = model_and_input
    converted, report = torch_mp.convert(model, (x,), torch.float16, return_report=True)
    for node in heavy_nodes(report):
        assert (node["precision"], node["rule_kind"]) == ("fp32", "no fast kernel")
    assert report.low_precision_flop_fraction == 0.0
    assert report.weight_ratio == 1.0 and report.casts == []
    assert "3 heavy ops kept fp32: this CPU has none of avx512_fp16" in report.summary()
    with torch.no_grad():
        expected = model(x)
        actual = converted(x)
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)  # an fp32 model: fp32 rounding only


def test_forcing_low_on_request(monkeypatch, model_and_input):
    monkeypatch.setenv("TORCH_MP_CPU_FEATURES", NO_FP16_ARITHMETIC)
    model, x = model_and_input
    forced = torch_mp.OpPolicy.default("cpu_fp16").set("aten::conv2d", "low", reason="deployed where fp16 is fast")
    _, report = torch_mp.convert(model, (x,), torch.float16, policy=forced, return_report=True)
    precision = {n["op"]: n["precision"] for n in heavy_nodes(report)}
    assert precision == {"aten::conv2d": "low", "aten::lstm": "fp32", "aten::linear": "fp32"}
    assert "heavy ops kept fp32" in report.summary()  # the two left alone

    planned_elsewhere = torch_mp.OpPolicy.default("cpu_fp16", cpu_features=["avx512_fp16"])
    assert planned_elsewhere.slow_kernels is None
    _, report = torch_mp.convert(model, (x,), torch.float16, policy=planned_elsewhere, return_report=True)
    assert all(n["precision"] == "low" for n in heavy_nodes(report))
    assert report.low_precision_flop_fraction == 1.0
    assert "heavy ops kept fp32" not in report.summary()


def test_bf16_needs_bf16_arithmetic(monkeypatch, model_and_input):
    model, x = model_and_input
    monkeypatch.setenv("TORCH_MP_CPU_FEATURES", "none")  # an Intel Xeon without AVX512-BF16 or AMX
    _, report = torch_mp.convert(model, (x,), torch.bfloat16, return_report=True)
    for node in heavy_nodes(report):
        assert (node["precision"], node["rule_kind"]) == ("fp32", "no fast kernel")
    monkeypatch.setenv("TORCH_MP_CPU_FEATURES", "amx_bf16")
    _, report = torch_mp.convert(model, (x,), torch.bfloat16, return_report=True)
    assert all(n["precision"] == "low" for n in heavy_nodes(report))


def test_cuda_policies_need_no_cpu_feature():
    for target in ("cuda_fp16", "cuda_bf16"):
        policy = torch_mp.OpPolicy.default(target, cpu_features="none", cuda_capability=(9, 0))
        assert policy.category("aten::conv2d") == "low" and policy.slow_kernels is None


def test_bf16_on_a_gpu_without_bf16_tensor_cores_keeps_heavy_ops_fp32(model_and_input):
    t4 = (7, 5)
    assert torch_mp.OpPolicy.default("cuda_fp16", cuda_capability=t4).slow_kernels is None
    policy = torch_mp.OpPolicy.default("cuda_bf16", cuda_capability=t4)
    assert "this GPU's compute capability 7.5 is below 8.0" in policy.slow_kernels
    for op in HEAVY:
        assert policy.category(op) == "fp32" and "bfloat16 tensor cores came with Ampere" in policy.reason(op)
    # the policy is data: planned here, on the CPU, it gives the plan the T4 would get
    model, x = model_and_input
    converted, report = torch_mp.convert(model, (x,), torch.bfloat16, policy=policy, return_report=True)
    assert all(n["precision"] == "fp32" for n in heavy_nodes(report)) and report.casts == []
    assert "3 heavy ops kept fp32: this GPU's compute capability 7.5" in report.summary()
    with pytest.raises(ValueError, match=r"cuda_capability must be a \(major, minor\) pair of ints"):
        torch_mp.OpPolicy.default("cuda_bf16", cuda_capability="7.5")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_conversion_plans_for_the_gpu_the_inputs_are_on():
    capability = torch.cuda.get_device_capability()
    layer = nn.Linear(64, 64).cuda().eval()
    _, report = torch_mp.convert(layer, (torch.randn(8, 64, device="cuda"),), torch.bfloat16, return_report=True)
    expected = "low" if capability >= (8, 0) else "fp32"
    assert [n["precision"] for n in report.nodes if n["op"] == "aten::linear"] == [expected]


def test_detected_features_match_the_kernel_flags(monkeypatch):
    monkeypatch.delenv("TORCH_MP_CPU_FEATURES")
    if not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no /proc/cpuinfo to compare with (not Linux)")
    with open("/proc/cpuinfo") as cpuinfo:
        flags = set()
        for line in cpuinfo:
            if line.startswith(("flags", "Features")):
                flags.update(line.split(":", 1)[1].split())
    known = {"avx512_fp16", "amx_fp16", "avx512_bf16", "amx_bf16", "asimdhp", "bf16", "avx512_vnni", "avx_vnni", "amx_int8"}
    assert set(torch_mp.cpu_features()) == flags & known


def test_unknown_feature_name_is_a_clear_error(monkeypatch, model_and_input):
    model, x = model_and_input
    before = {k: v.clone() for k, v in model.state_dict().items()}
    monkeypatch.setenv("TORCH_MP_CPU_FEATURES", "avx512-fp16")
    with pytest.raises(ValueError, match="TORCH_MP_CPU_FEATURES='avx512-fp16' names an unknown CPU feature"):
        torch_mp.convert(model, (x,), torch.float16)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="unknown CPU feature in 'sse9'"):
        torch_mp.OpPolicy.default("cpu_bf16", cpu_features=["sse9"])
