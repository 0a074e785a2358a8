"""Low precision only where the device has fast kernels for it: on a CPU without fp16 (or bf16) arithmetic, or a GPU
without tensor cores for the low dtype, the default policy keeps convolutions, matrix products and RNNs fp32 and the
report says why; the user can still force them. conftest.py plans the rest of the suite for a CPU with every fast
kernel; these tests name the CPU or GPU planned for."""
import os
import warnings

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
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
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
    report = torch_mp.report_of(torch_mp.convert(model, (x,), torch.float16, policy=forced))
    precision = {n["op"]: n["precision"] for n in heavy_nodes(report)}
    assert precision == {"aten::conv2d": "low", "aten::lstm": "fp32", "aten::linear": "fp32"}
    assert "heavy ops kept fp32" in report.summary()  # the two left alone

    planned_elsewhere = torch_mp.OpPolicy.default("cpu_fp16", cpu_features=["avx512_fp16"])
    assert planned_elsewhere.slow_kernels is None
    report = torch_mp.report_of(torch_mp.convert(model, (x,), torch.float16, policy=planned_elsewhere))
    assert all(n["precision"] == "low" for n in heavy_nodes(report))
    assert report.low_precision_flop_fraction == 1.0
    assert "heavy ops kept fp32" not in report.summary()


def test_bf16_needs_bf16_arithmetic(monkeypatch, model_and_input):
    model, x = model_and_input
    monkeypatch.setenv("TORCH_MP_CPU_FEATURES", "none")  # an Intel Xeon without AVX512-BF16 or AMX
    report = torch_mp.report_of(torch_mp.convert(model, (x,), torch.bfloat16))
    for node in heavy_nodes(report):
        assert (node["precision"], node["rule_kind"]) == ("fp32", "no fast kernel")
    monkeypatch.setenv("TORCH_MP_CPU_FEATURES", "amx_bf16")
    report = torch_mp.report_of(torch_mp.convert(model, (x,), torch.bfloat16))
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
    converted = torch_mp.convert(model, (x,), torch.bfloat16, policy=policy)
    report = torch_mp.report_of(converted)
    assert all(n["precision"] == "fp32" for n in heavy_nodes(report)) and report.casts == []
    assert "3 heavy ops kept fp32: this GPU's compute capability 7.5" in report.summary()
    with pytest.raises(ValueError, match=r"cuda_capability must be a \(major, minor\) pair of ints"):
        torch_mp.OpPolicy.default("cuda_bf16", cuda_capability="7.5")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_conversion_plans_for_the_gpu_the_inputs_are_on():
    capability = torch.cuda.get_device_capability()
    layer = nn.Linear(64, 64).cuda().eval()
    report = torch_mp.report_of(torch_mp.convert(layer, (torch.randn(8, 64, device="cuda"),), torch.bfloat16))
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


class TokensAndPositions(nn.Module):
    """GPT-2's input: a token table and a position table, read by lookups only, then a linear head."""

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(100, 32)
        self.positions = nn.Embedding(16, 32)
        self.head = nn.Linear(32, 100)

    def forward(self, ids):
        return self.head(self.tokens(ids) + self.positions(torch.arange(ids.shape[1])))


def slow_kernel_warnings(caught):
    return [str(w.message) for w in caught if issubclass(w.category, torch_mp.SlowKernelsWarning)]


@pytest.mark.parametrize("front", ["convert", "export"])
def test_an_explicit_dtype_without_fast_kernels_warns_once_and_stores_nothing_low(monkeypatch, front):
    """Issue 59, item 4: bf16 asked for on a CPU without bf16 arithmetic would run no heavy op low, yet stored the
    tables, which lookups alone read, in bf16: accuracy lost for no speed, silently. It warns once, naming the
    policy and the remedy, and the model stays fp32: tables, casts and outputs."""
    monkeypatch.setenv("TORCH_MP_CPU_FEATURES", "none")
    model, ids = TokensAndPositions().eval(), torch.randint(0, 100, (2, 16))
    convert = getattr(torch_mp, front)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        converted = convert(model, (ids,), torch.bfloat16)
        report = torch_mp.report_of(converted)
    [message] = slow_kernel_warnings(caught)
    assert "dtype=torch.bfloat16 runs nothing heavy low here: the policy cpu_bf16 keeps the heavy ops fp32" in message
    assert 'policy=torch_mp.OpPolicy.default("cpu_bf16", cpu_features="all")' in message
    assert report.data["slow_kernels"] and "this CPU has none of avx512_bf16" in report.data["slow_kernels"]
    assert report.weight_ratio == 1.0 and report.casts == [] and report.low_precision_flop_fraction == 0.0
    assert all(node["precision"] == "fp32" for node in report.nodes)
    rule_kinds = {node["op"].replace("aten.", "aten::").split(".")[0]: node["rule_kind"] for node in report.nodes}
    assert rule_kinds["aten::linear"] == "no fast kernel" and rule_kinds["aten::embedding"] == "policy"
    assert "fp32 with the heavy ops, which have no fast kernels here" in \
        next(n["rule"] for n in report.nodes if "embedding" in n["op"])
    if front == "export":
        assert {t.dtype for t in converted.state_dict.values()} == {torch.float32}
        converted = converted.module()
    with torch.no_grad():
        torch.testing.assert_close(converted(ids), model(ids), rtol=1e-5, atol=1e-6)  # fp32 rounding only


@pytest.mark.parametrize("front", ["convert", "export"])
def test_no_warning_where_something_heavy_runs_low(monkeypatch, front):
    """The policy of a CPU with the kernels, or one forcing a heavy op low here, stores the tables low, silently;
    dtype=None warns once (device_dtype's warning), not twice."""
    monkeypatch.setenv("TORCH_MP_CPU_FEATURES", "none")
    model, ids = TokensAndPositions().eval(), torch.randint(0, 100, (2, 16))
    convert = getattr(torch_mp, front)
    fast = torch_mp.OpPolicy.default("cpu_bf16", cpu_features="all")
    forced = torch_mp.OpPolicy.default("cpu_bf16").set("aten::linear", "low", "deployed where bf16 is fast")
    for policy in (fast, forced):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = torch_mp.report_of(convert(model, (ids,), torch.bfloat16, policy=policy))
        assert not slow_kernel_warnings(caught)
        assert report.low_precision_flop_fraction == 1.0
        assert all(n["precision"] == "low" for n in report.nodes if "embedding" in n["op"])
        assert report.weight_ratio < 0.51  # both tables and the head's weight in bf16
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = torch_mp.report_of(convert(model, (ids,)))
    assert len(slow_kernel_warnings(caught)) == 1 and "no low-precision dtype has fast kernels" in \
        slow_kernel_warnings(caught)[0]
    assert report.weight_ratio == 1.0 and report.casts == []
