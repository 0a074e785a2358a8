"""dtype=torch.int8 on the export front: the int8 planner's choices in the program (exact Q/DQ), int8 weights, numerics
against fp32, Inductor's oneDNN int8 kernels in the compiled code, the cost model leaving an isolated small linear
float, the accuracy fallback reverting a sensitive node, and every bad input refused or warned about."""
import copy
import re

import pytest
import torch
import torch._inductor.config as inductor_config
from torch._inductor.utils import run_and_get_code

import torch_mp
from torch_mp import ConversionOptions, Int8Warning

QUANTIZE = torch.ops.quantized_decomposed.quantize_per_tensor.default
DEQUANTIZE = torch.ops.quantized_decomposed.dequantize_per_tensor.default
DEQUANTIZE_PER_CHANNEL = torch.ops.quantized_decomposed.dequantize_per_channel.default


class ConvNet(torch.nn.Module):
    """conv-bn-relu, a residual conv (+add, relu), max pool, conv-relu, mean, a small linear head."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 32, 3, padding=1)
        self.b1 = torch.nn.BatchNorm2d(32)
        self.c2 = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(2)
        self.c3 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.c2(y) + y)
        y = torch.relu(self.c3(self.pool(y)))
        return self.fc(y.mean((2, 3)))


class Mlp(torch.nn.Module):
    def __init__(self, width=512):
        super().__init__()
        self.up = torch.nn.Linear(256, width)
        self.down = torch.nn.Linear(width, 256)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def _calls(program, target):
    return [n for n in program.graph.nodes if n.op == "call_function" and n.target == target]


def _relative_error(reference, output):
    return ((output - reference).norm() / reference.norm()).item()


@pytest.fixture
def conv_net():
    torch.manual_seed(0)
    model = ConvNet().eval()
    with torch.no_grad():  # a trained-like batch norm, not the identity
        model.b1.running_mean.uniform_(-0.5, 0.5)
        model.b1.running_var.uniform_(0.5, 2.0)
    return model, torch.randn(4, 3, 32, 32), [(torch.randn(4, 3, 32, 32),) for _ in range(3)]


def test_a_conv_net_runs_its_convolutions_int8_with_exact_qdq(conv_net):
    model, x, calibration = conv_net
    before = copy.deepcopy(model.state_dict())
    program = torch_mp.export(model, (x,), torch.int8, calibration_inputs=calibration)
    report = torch_mp.report_of(program)
    int8 = {n["id"]: n for n in report.nodes if n["precision"] == "int8"}
    convolutions = [n for n in report.nodes if n["op"] == "aten::conv2d"]
    assert len(convolutions) == 3 and all(n["precision"] == "int8" and n["rule_kind"] == "int8" for n in convolutions)
    assert all(n["int8"]["reason"] == "int8" for n in int8.values())
    # the max pool between two int8 convolutions runs on uint8: it spares the quantize of its output
    assert next(n for n in report.nodes if n["op"] == "aten::max_pool2d")["precision"] == "int8"
    # one quantize -> dequantize per value the int8 nodes read (the input, the first block's relu, the pool's input and
    # output), one dequantize_per_channel per int8 weight, each read by its convolution; the residual add reads the
    # relu through a dequantize of its own (the sum post-op writes into it)
    quantizes, dequantizes = _calls(program, QUANTIZE), _calls(program, DEQUANTIZE)
    assert len(quantizes) == 4 and len(dequantizes) == 5
    assert all(d.args[0] in quantizes and d.args[1:] == d.args[0].args[1:] for d in dequantizes)
    add = next(n for n in program.graph.nodes if n.target == torch.ops.aten.add.Tensor)
    residual = add.args[1]
    assert residual.target == DEQUANTIZE and list(residual.users) == [add]
    assert residual.args[0].args[0].target == torch.ops.aten.relu.default
    quant_max = 127 if torch_mp._C.Int8CostModel.reduced_range() else 255  # without VNNI, the reduced range
    assert all(q.args[3:] == (0, quant_max, torch.uint8) for q in _calls(program, QUANTIZE))
    per_channel = _calls(program, DEQUANTIZE_PER_CHANNEL)
    assert len(per_channel) == 3
    assert {user.target for d in per_channel for user in d.users} == {torch.ops.aten.conv2d.default}
    # the int8 weights are int8 constants; the fp32 convolution weights are gone
    weights = [program.constants[d.args[0].name] for d in per_channel]
    assert all(w.dtype == torch.int8 for w in weights)
    assert not any(name.endswith(("c2.weight", "c3.weight")) for name in program.state_dict)
    assert report.data["weight_bytes_after"] < 0.35 * report.data["weight_bytes_before"]
    # numerics: within int8's error of fp32, outputs fp32; the model untouched
    with torch.no_grad():
        reference, output = model(x), program.module()(x)
    assert output.dtype == torch.float32
    assert _relative_error(reference, output) < 0.02
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_inductor_lowers_the_plan_to_onednn_int8_kernels(conv_net):
    model, x, calibration = conv_net
    program = torch_mp.export(model, (x,), torch.int8, calibration_inputs=calibration)
    mlp = Mlp().eval()
    tokens = torch.randn(64, 256)
    mlp_program = torch_mp.export(mlp, (tokens,), torch.int8, calibration_inputs=[(torch.randn(64, 256),)])
    report = torch_mp.report_of(mlp_program)
    assert [n["precision"] for n in report.nodes if n["op"] == "aten::linear"] == ["int8", "int8"]
    # three convolutions, one with the residual add as oneDNN's sum post-op; two linears
    for converted, inputs, kernels in ((program, x, {"qconv_pointwise": 2, "qconv2d_pointwise.binary": 1}),
                                       (mlp_program, tokens, {"qlinear_pointwise": 2})):
        torch._dynamo.reset()
        with torch.no_grad(), inductor_config.patch(freezing=True):
            compiled, codes = run_and_get_code(torch.compile(converted.module()), inputs)
            expected = converted.module()(inputs)
        code = "\n".join(codes)
        calls = {kernel: len(re.findall(rf"torch\.ops\.onednn\.{re.escape(kernel)}[\w.]*\(", code)) for kernel in kernels}
        assert calls == kernels, code
        assert _relative_error(expected, compiled) < 0.01


def test_an_isolated_small_linear_stays_float_because_its_quantize_costs_more():
    class SmallHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 16)

        def forward(self, x):
            return torch.softmax(self.fc(torch.tanh(x)), -1)

    x = torch.randn(1, 16)
    with pytest.warns(Int8Warning, match="no node of SmallHead runs int8.*1 costs_more"):
        program = torch_mp.export(SmallHead().eval(), (x,), torch.int8, calibration_inputs=[(x * 2,)])
        report = torch_mp.report_of(program)
    linear = next(n for n in report.nodes if n["op"] == "aten::linear")
    assert linear["precision"] != "int8"
    assert linear["int8"]["reason"] == "costs_more"
    assert linear["int8"]["saved_seconds"] < linear["int8"]["quantize_seconds"]
    assert not _calls(program, QUANTIZE)


class _Sensitive(torch.nn.Module):
    """Three convolutions; the third reads an input whose calibration range is 1000x its typical values, which int8
    rounds away."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(8, 32, 3, padding=1)
        self.b = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.c = torch.nn.Conv2d(8, 32, 3, padding=1)

    def forward(self, x, spiky):
        return self.b(torch.relu(self.a(x))) + self.c(spiky)


def _sensitive_inputs():
    spiky = torch.randn(2, 8, 24, 24)
    spiky[0, 0, 0, 0] = 1000.0
    return torch.randn(2, 8, 24, 24), spiky


def test_the_fallback_reverts_the_node_int8_hurts_most():
    """With a tolerance the fallback takes the spiky input's convolution out of int8; the others stay. Where it goes
    is the float plan's precision on this CPU: low where that runs convolutions low (kept_float), else fp32."""
    torch.manual_seed(0)
    model = _Sensitive().eval()
    example, calibration = _sensitive_inputs(), [_sensitive_inputs() for _ in range(2)]
    plain_program = torch_mp.export(model, example, torch.int8, calibration_inputs=calibration)
    plain = torch_mp.report_of(plain_program)
    assert {n["id"] for n in plain.nodes if n["precision"] == "int8"} >= {"conv2d", "conv2d_1", "conv2d_2"}
    program = torch_mp.export(model, example, torch.int8, calibration_inputs=calibration, tolerance=0.05,
                              progress=False)
    report = torch_mp.report_of(program)
    precision = {n["id"]: n["precision"] for n in report.nodes}
    fallback = report.data["fallback"]
    assert precision["conv2d"] == precision["conv2d_1"] == "int8"
    assert fallback["kept_fp32"] + fallback["kept_float"] == ["conv2d_2"]
    assert precision["conv2d_2"] == ("low" if fallback["kept_float"] else "fp32")
    # one spike in 9,216 elements costs more clipped than kept: the spiky input's range reaches it (to a bin or two)
    (spiky,) = [n for n in plain_program.graph.nodes if n.target == QUANTIZE and n.args[0].name == "spiky"]
    assert spiky.args[1] > 990.0 / 255
    with torch.no_grad():
        for batch in calibration:
            assert _relative_error(model(*batch), program.module()(*batch)) <= 0.05


@pytest.mark.parametrize("tolerance, kept_float, kept_fp32, rounds", [
    (0.01, ["conv2d_2"], [], 1),  # int8 -> bf16 is enough (bf16's error here about 2e-3)
    (1e-3, [], ["conv2d_2"], 2),  # bf16 is not: a second round moves it on to fp32
])
def test_the_fallback_moves_int8_to_low_float_then_to_fp32(tolerance, kept_float, kept_fp32, rounds):
    """The float plan forced to run convolutions in bf16 (cpu_features="all"): the sensitive int8 convolution moves
    one step at a time, int8 -> bf16 -> fp32, as far as the tolerance needs and no further."""
    torch.manual_seed(0)
    model = _Sensitive().eval()
    example, calibration = _sensitive_inputs(), [_sensitive_inputs() for _ in range(2)]
    program = torch_mp.export(
        model, example, torch.int8, calibration_inputs=calibration, tolerance=tolerance, progress=False,
        int8_float_dtype=torch.bfloat16,
        policy=torch_mp.OpPolicy.default("cpu_bf16", cpu_features="all"))
    report = torch_mp.report_of(program)
    fallback = report.data["fallback"]
    assert (fallback["kept_float"], fallback["kept_fp32"], fallback["rounds"]) == (kept_float, kept_fp32, rounds)
    precision = {n["id"]: n["precision"] for n in report.nodes}
    assert precision["conv2d_2"] == ("low" if kept_float else "fp32")
    assert precision["conv2d"] == precision["conv2d_1"] == "int8"
    assert fallback["error_before"] > 0.05 >= tolerance >= fallback["error_after"]
    with torch.no_grad():
        for batch in calibration:
            assert _relative_error(model(*batch), program.module()(*batch)) <= tolerance


def test_a_rare_outlier_over_millions_of_elements_is_clipped_out_of_the_range():
    """Three elements of 100 among 6M of a unit normal: min/max would spend the 255 steps on them (scale 0.41, a
    rounding error larger than most values); clipping them costs less squared error, so the input's range is clipped
    (core/activation_clipping), and the error on outlier-free inputs drops accordingly. The least squared error over
    the calibration inputs still weighs the three: their bound is about 23 (a range of 28, moving each by 77), not the
    normal values' 5.5 (moving each by 94.5). The fallback test's spike (1 in 9,216 elements) is kept: see
    test_the_fallback_reverts_the_node_int8_hurts_most."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1)).eval()
    example = (torch.randn(8, 16, 128, 128),)
    calibration = [(torch.randn(8, 16, 128, 128),) for _ in range(2)]
    calibration[0][0].view(-1)[[5, 50_000, 500_000]] = 100.0
    program = torch_mp.export(model, example, torch.int8, calibration_inputs=calibration)
    report = torch_mp.report_of(program)
    assert report.data["int8"]["clipped_values"] == 1
    (quantize,) = [n for n in program.graph.nodes if n.target == QUANTIZE and n.args[0].op == "placeholder"]
    scale = quantize.args[1]
    assert 24.0 / 255 < scale < 32.0 / 255  # not 100's range (105)
    held_out = torch.randn(8, 16, 128, 128)
    with torch.no_grad():
        # about 0.032 (int8 weights and the 0.11 step); min/max's step, 0.41, would round every input by 0.12 rms
        assert _relative_error(model(held_out), program.module()(held_out)) < 0.05


def test_a_long_thin_tail_is_clipped_where_the_error_is_least():
    """A Student-t input (3 degrees of freedom): most elements within +-3, a thin tail reaching past +-100 over 1.3M
    elements. The histogram's least-error range clips the tail (core/activation_clipping) to less than half of
    min/max, and held-out inputs lose less to int8."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1)).eval()
    student = torch.distributions.StudentT(3.0)
    example, *calibration = [(student.sample((4, 16, 64, 64)),) for _ in range(5)]
    program = torch_mp.export(model, example, torch.int8, calibration_inputs=calibration)
    report = torch_mp.report_of(program)
    assert report.data["int8"]["clipped_values"] == 1
    (quantize,) = [n for n in program.graph.nodes if n.target == QUANTIZE and n.args[0].op == "placeholder"]
    seen = torch.cat([batch[0].flatten() for batch in [example, *calibration]])
    assert quantize.args[1] < (seen.max() - seen.min()).item() / 255 / 2
    held_out = student.sample((4, 16, 64, 64))
    with torch.no_grad():
        # about 0.10 (scale 0.53); min/max's scale, 1.74, rounds the input alone to a 0.29 error of the output
        assert _relative_error(model(held_out), program.module()(held_out)) < 0.15


def test_the_fallback_runs_an_int8_program_as_its_module_computes_it(conv_net):
    """int8_simulation: each quantize -> dequantize pair one fake_quantize, each int8 weight dequantized once; the
    outputs are module()'s up to the rare element that 1/scale's float rounding puts one step over (a relative error
    under 1e-3, where int8 itself is about 1e-2 from fp32); the weights dequantized once are bit for bit."""
    from torch_mp._export.int8_simulation import simulated

    model, example, calibration = conv_net
    program = torch_mp.export(model, example, torch.int8, calibration_inputs=calibration)
    pairs, weights = len(_calls(program, DEQUANTIZE)), len(_calls(program, DEQUANTIZE_PER_CHANNEL))
    assert pairs >= 3 and weights >= 3
    module = simulated(program.module())
    targets = [n.target for n in module.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.fake_quantize_per_tensor_affine) == pairs
    assert not {QUANTIZE, DEQUANTIZE, DEQUANTIZE_PER_CHANNEL} & set(targets)
    dequantized = [n for n in module.graph.nodes if n.op == "get_attr" and n.target.startswith("_dequantized_")]
    assert len(dequantized) == weights
    reference_weights = [n for n in program.module().graph.nodes if n.target == DEQUANTIZE_PER_CHANNEL]
    assert all(torch.equal(getattr(module, n.target), DEQUANTIZE_PER_CHANNEL(*[
        getattr(program.module(), a.target) if isinstance(a, torch.fx.Node) else a for a in r.args]))
        for n, r in zip(dequantized, reference_weights))
    with torch.no_grad():
        for (batch,) in [(example,)] + calibration:
            reference = program.module()(batch)
            assert _relative_error(reference, module(batch)) < 1e-3
            assert _relative_error(model(batch), reference) > 1e-3  # int8's own error is larger: the check can fail


def test_int8_without_calibration_warns_that_ranges_come_from_one_batch(conv_net):
    model, x, _ = conv_net
    with pytest.warns(Int8Warning, match="no calibration_inputs"):
        torch_mp.export(model, (x,), torch.int8)


def test_int8_refuses_non_finite_calibration_data(conv_net):
    model, x, _ = conv_net
    bad = torch.randn(4, 3, 32, 32)
    bad[0, 0, 0, 0] = float("nan")
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match="calibration input 1 hold NaN or inf"):
        torch_mp.export(model, (x,), torch.int8, calibration_inputs=[(x,), (bad,)])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_constant_activation_keeps_its_reader_float_by_the_range_guard():
    model = Mlp().eval()
    constant = torch.ones(64, 256)
    program = torch_mp.export(model, (constant,), torch.int8, calibration_inputs=[(constant,)])
    report = torch_mp.report_of(program)
    up, down = (next(n for n in report.nodes if n["id"] == name) for name in ("linear", "linear_1"))
    assert up["int8"]["reason"] == "range_guard" and up["precision"] != "int8"
    assert down["precision"] == "int8"  # its input varies by feature
    # the one quantized value is the relu's (cast to fp32 where the float plan ran the first linear and relu low)
    read = [q.args[0] for q in _calls(program, QUANTIZE)]
    assert [r.args[0].name if r.target == torch.ops.aten._to_copy.default else r.name for r in read] == ["relu"]


def test_int8_on_a_model_without_an_int8_kernel_warns_and_gives_the_float_plan():
    class Norms(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.layer_norm(x, (32,)).softmax(-1)

    x = torch.randn(4, 32)
    with pytest.warns(Int8Warning, match="no op with an int8 kernel"):
        program = torch_mp.export(Norms().eval(), (x,), torch.int8, calibration_inputs=[(x,)])
    assert not _calls(program, QUANTIZE)


@pytest.mark.parametrize("front", ["convert", "onnx_export"])
def test_fronts_without_an_int8_path_refuse_it_naming_export(front, conv_net, tmp_path):
    model, x, _ = conv_net
    with pytest.raises(ValueError, match=r"does not convert to int8.*torch_mp\.export"):
        if front == "convert":
            torch_mp.convert(model, (x,), torch.int8)
        else:
            torch_mp.onnx_export(model, (x,), tmp_path / "m.onnx", torch.int8)


def test_int8_options_refuse_cuda():
    with pytest.raises(ValueError, match="int8 converts for x86 CPUs.*cuda"):
        ConversionOptions(dtype=torch.int8).for_device("cuda")
    chosen = ConversionOptions(dtype=torch.int8).for_device("cpu")
    assert chosen.int8 and chosen.int8_float_dtype in (torch.float16, torch.bfloat16)
    assert chosen.float_plan().dtype == chosen.int8_float_dtype and not chosen.float_plan().int8
    with pytest.raises(ValueError, match="int8_float_dtype goes with dtype=torch.int8"):
        ConversionOptions(dtype=torch.float16, int8_float_dtype=torch.bfloat16)


def test_the_reduced_range_without_vnni(conv_net, monkeypatch):
    monkeypatch.setenv("TORCH_MP_CPU_FEATURES", "none")
    model, x, calibration = conv_net
    program = torch_mp.export(model, (x,), torch.int8, calibration_inputs=calibration)
    assert all(q.args[3:] == (0, 127, torch.uint8) for q in _calls(program, QUANTIZE))
    with torch.no_grad():
        assert _relative_error(model(x), program.module()(x)) < 0.04


def test_aoti_compile_int8_freezes_and_its_package_calls_the_int8_kernels(tmp_path):
    torch.manual_seed(0)
    model, tokens = Mlp().eval(), torch.randn(64, 256)
    calibration = [(torch.randn(64, 256),)]
    path = torch_mp.aoti_compile(model, (tokens,), torch.int8, tmp_path / "mlp_int8.pt2",
                                 calibration_inputs=calibration)
    report = torch_mp.report_of(path)
    assert report.data["aoti_int8_kernels"] == {"aten::linear": {"planned": 2, "in_package": 2}}
    program = torch_mp.export(model, (tokens,), torch.int8, calibration_inputs=calibration)
    runner = torch._inductor.aoti_load_package(path)
    with torch.no_grad():
        expected, packaged, reference = program.module()(tokens), runner(tokens), model(tokens)
    assert packaged.dtype == torch.float32
    assert _relative_error(expected, packaged) < 0.01  # oneDNN's int8 kernels against the dequantized reference
    assert _relative_error(reference, packaged) < 0.02


def test_the_picture_colours_int8_nodes(conv_net):
    from torch_mp import visualize  # noqa: PLC0415  (graphviz, the picture's dependency)

    model, x, calibration = conv_net
    report = torch_mp.report_of(torch_mp.export(model, (x,), torch.int8, calibration_inputs=calibration))
    dot = visualize.to_dot(report)
    int8 = [n["id"] for n in report.nodes if n["precision"] == "int8"]
    filled = {name: re.search(r'fillcolor="?([#\w]+)', line).group(1)
              for line in dot.splitlines()
              for name in [re.match(r'\s*"?([\w/]+)"? \[', line)] if name and "fillcolor" in line
              for name in [name.group(1)]}
    coloured = [name for name, colour in filled.items() if colour == visualize.COLORS["int8"]]
    assert "legend/int8" in coloured and len(coloured) == len(int8) + 1, (coloured, int8)
    assert f"{len(int8)} int8 nodes" in dot


def test_int8_on_integer_calibration_data_for_a_float_model_names_the_failure(conv_net):
    model, x, _ = conv_net
    with pytest.raises(torch_mp.ModelRunError, match="calibration inputs failed"):
        torch_mp.export(model, (x,), torch.int8, calibration_inputs=[(torch.zeros(4, 3, 32, 32, dtype=torch.int64),)])


def test_int8_leaves_inductors_pre_grad_pass_as_the_user_set_it():
    """torchao's quantizer module sets torch._inductor.config.pre_grad_custom_pass on import; torch_mp's int8 path
    lowers through PyTorch's own Inductor passes and imports no torchao."""
    def users_pass(graph):
        return graph

    model, tokens = Mlp().eval(), torch.randn(64, 256)
    with inductor_config.patch(pre_grad_custom_pass=users_pass):
        program = torch_mp.export(model, (tokens,), torch.int8, calibration_inputs=[(tokens * 2,)])
        assert inductor_config.pre_grad_custom_pass is users_pass
    assert _calls(program, QUANTIZE)
