"""The load-time pass (torch_mp.jit_pass): frozen fp32 TorchScript files run mixed precision under TorchScript's
graph executor once it has profiled them and (calibrating, the default) observed them on the inputs of a run, and
fp32 without the pass."""
import threading

import pytest
import torch
from torch import nn

import torch_mp
from torch_mp.models import ResNetIBN
from small_models import ControlFlowNet, LSTMTagger


@pytest.fixture(autouse=True)
def _pass_disabled_around_each_test():
    torch_mp.jit_pass.disable()
    yield
    torch_mp.jit_pass.disable()


def small_resnet():
    return ResNetIBN(layers=(1, 1, 1, 1), num_classes=10, width=16).eval()


class TransformerNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)
        self.norm = nn.LayerNorm(32)
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        h = self.embed(x)
        a, _ = self.attention(h, h, h, need_weights=False)
        h = self.norm(h + a)
        h = h + self.mlp(h)
        return self.head(h).softmax(-1)


def save_frozen(model, path, *inputs):
    frozen = torch.jit.freeze(torch.jit.script(model))
    torch.jit.save(frozen, path)
    return str(path)


def run_profiled(module, *inputs, calibrate=True):
    """The executor profiles on the first call and optimizes for the second, where the pass converts the graph, or
    (calibrating) has it record its inputs and converts it for the third: returns the last call's output."""
    with torch.no_grad():
        for _ in range(2 if calibrate else 1):
            module(*inputs)
        return module(*inputs)


def low_constants(graph, dtype):
    name = {torch.float16: "Half", torch.bfloat16: "BFloat16"}[dtype]
    return [node for node in graph.findAllNodes("prim::Constant") if node.output().type().str().startswith(name + "(")]


def casts_to(graph, dtype):
    code = {torch.float16: 5, torch.bfloat16: 15}[dtype]
    return [node for node in graph.findAllNodes("aten::to")
            if node.inputsAt(1).node().kind() == "prim::Constant" and node.inputsAt(1).toIValue() == code]


def test_enable_disable_and_context_manager_restore_the_previous_state():
    assert not torch_mp.jit_pass.is_enabled()
    with torch_mp.jit_pass(dtype=torch.bfloat16):
        assert torch_mp.jit_pass.is_enabled()
        with torch_mp.jit_pass(dtype=torch.float16):
            assert torch_mp.jit_pass.is_enabled()
        assert torch_mp.jit_pass.is_enabled()
        assert torch_mp.jit_pass._current[0].dtype == torch.bfloat16
    assert not torch_mp.jit_pass.is_enabled()
    torch_mp.jit_pass.enable(torch.float16)
    torch_mp.jit_pass.enable(torch.float16)  # twice is fine
    assert torch_mp.jit_pass.is_enabled()
    torch_mp.jit_pass.disable()
    assert not torch_mp.jit_pass.is_enabled()


def test_bad_options_are_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="float16 or torch.bfloat16"):
        torch_mp.jit_pass(dtype=torch.float32)
    policy = torch_mp.OpPolicy.default("cpu_bf16")
    policy.exclude("head.*")
    with pytest.raises(ValueError, match="a policy of op entries only"):
        torch_mp.jit_pass(dtype=torch.bfloat16, policy=policy)
    with pytest.raises(ValueError, match="planner"):
        torch_mp.jit_pass.enable(torch.bfloat16, planner="best")
    assert not torch_mp.jit_pass.is_enabled()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_frozen_resnet_file_runs_mixed_under_the_pass_and_fp32_without(tmp_path, dtype):
    model = small_resnet()
    x = torch.randn(2, 3, 32, 32)
    path = save_frozen(model, tmp_path / "resnet.pt")
    expected = model(x)

    module = torch.jit.load(path)  # the executor keeps only a weak reference to the last graph
    plain = run_profiled(module, x)
    plain_graph = torch.jit.last_executed_optimized_graph()
    assert not low_constants(plain_graph, dtype) and not casts_to(plain_graph, dtype)
    torch.testing.assert_close(plain, expected)

    before = torch_mp.jit_pass.activity()
    with torch_mp.jit_pass(dtype=dtype):
        module = torch.jit.load(path)
        mixed = run_profiled(module, x)
        outer = torch.jit.last_executed_optimized_graph()
    activity = torch_mp.jit_pass.activity()
    graph = activity.last_graph
    # the graph the executor runs records its inputs (nothing more, once taken) and calls the converted one
    assert outer.findAllNodes("torch_mp::record_calibration_inputs") and outer.findAllNodes("prim::CallFunction")
    assert activity.converted == before.converted + 1 and activity.last_outcome == "converted"
    assert activity.calibrating == before.calibrating + 1
    assert activity.last_report.data["ranges_observed"] is True
    convolutions = [n for n in activity.last_report.nodes if n["op"] == "aten::conv2d"]
    assert len(convolutions) == 17 and all(n["precision"] == "low" for n in convolutions)
    assert len(low_constants(graph, dtype)) >= 17  # every convolution's weight, pre-cast
    assert casts_to(graph, dtype) and graph.findAllNodes("prim::TypeCheck")
    assert mixed.dtype == torch.float32
    tolerance = 2e-3 if dtype == torch.float16 else 2e-2  # reached: 2.6e-4 and 2.5e-3 of the largest output
    torch.testing.assert_close(mixed, expected, rtol=0, atol=tolerance * expected.abs().max().item())
    assert not torch.equal(mixed, expected)


def test_pass_equals_convert_on_the_same_model(tmp_path):
    model = small_resnet()
    x = torch.randn(2, 3, 32, 32)
    path = save_frozen(model, tmp_path / "resnet.pt")
    converted = torch_mp.convert(model, (x,), torch.bfloat16)
    converted_report = torch_mp.report_of(converted)
    with torch_mp.jit_pass(dtype=torch.bfloat16):
        mixed = run_profiled(torch.jit.load(path), x)
    report = torch_mp.jit_pass.activity().last_report
    assert [n["precision"] for n in report.nodes if n["op"] == "aten::conv2d"] == \
        [n["precision"] for n in converted_report.nodes if n["op"] == "aten::conv2d"]
    # same plan, same kernels: equal up to the order ops are fused in (bf16 rounds each op's result)
    torch.testing.assert_close(mixed, converted(x), rtol=0, atol=1e-2 * mixed.abs().max().item())


def test_transformer_file_runs_mixed_under_the_pass(tmp_path):
    model = TransformerNet().eval()
    x = torch.randn(2, 7, 16)
    path = save_frozen(model, tmp_path / "transformer.pt")
    with torch_mp.jit_pass(dtype=torch.float16):
        module = torch.jit.load(path)
        mixed = run_profiled(module, x)
    activity = torch_mp.jit_pass.activity()
    report, graph = activity.last_report, activity.last_graph
    # the branches of MultiheadAttention the profiling run did not take are left alone, as convert() leaves them
    linears = [n for n in report.nodes if n["op"] == "aten::linear" and n["rule_kind"] != "unobserved"]
    assert len(linears) >= 4 and all(n["precision"] == "low" for n in linears)
    assert [n for n in report.nodes if n["op"] == "aten::layer_norm"][0]["precision"] == "fp32"
    assert low_constants(graph, torch.float16)
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, model(x), rtol=0, atol=5e-3)


def test_recurrent_layer_is_lowered_though_the_executor_profiles_its_result_only_where_a_branch_returns_it(tmp_path):
    # nn.LSTM's output is read only in `if not is_batched: output.squeeze(1)` (not taken) and returned by the other
    # branch; its hidden state is read by nothing: the pass types both from the profile around them
    model = LSTMTagger().eval()
    x = torch.randint(0, 1000, (4, 20))
    path = save_frozen(model, tmp_path / "lstm.pt")
    with torch_mp.jit_pass(dtype=torch.bfloat16):
        module = torch.jit.load(path)
        mixed = run_profiled(module, x)
    report = torch_mp.jit_pass.activity().last_report
    assert [n["precision"] for n in report.nodes if n["op"] == "aten::lstm"] == ["low"]
    assert report.data["unobserved_nodes"] == 0
    torch.testing.assert_close(mixed, model(x), rtol=0, atol=5e-2)


def test_integer_outputs_and_untaken_branches_keep_their_dtypes(tmp_path):
    model = ControlFlowNet().eval()
    x = torch.randn(4, 32) + 0.5
    path = save_frozen(model, tmp_path / "control.pt")
    expected = model(x)
    with torch_mp.jit_pass(dtype=torch.bfloat16):
        module = torch.jit.load(path)
        mixed = run_profiled(module, x)
        other = module(-x)  # the branch the profile did not see
    assert torch_mp.jit_pass.activity().last_outcome == "converted"
    for got, want in zip(mixed, expected):
        assert got.dtype == want.dtype
    for got, want in zip(other, model(-x)):
        assert got.dtype == want.dtype


class FlattensByBatchSize(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 5)

    def forward(self, x):
        if x.dim() == 3:
            x = x.unsqueeze(0)
        return self.fc(x.reshape(x.size(0), -1))


@pytest.mark.parametrize("calibrate", [True, False])
def test_other_batch_sizes_and_ranks_than_profiled_run_the_converted_graph(tmp_path, calibrate):
    # the guard checks dtype and device only: nothing may be folded from the profiled sizes (x.size(0), x.dim())
    model = FlattensByBatchSize().eval()
    path = save_frozen(model, tmp_path / "flatten.pt")
    with torch_mp.jit_pass(dtype=torch.bfloat16, calibrate=calibrate):
        module = torch.jit.load(path)
        run_profiled(module, torch.randn(4, 3, 4, 4), calibrate=calibrate)
        assert torch_mp.jit_pass.activity().last_outcome == "converted"
        converted = torch_mp.jit_pass.activity().converted
        with torch.no_grad():
            for shape in [(2, 3, 4, 4), (7, 3, 4, 4), (3, 4, 4)]:
                x = torch.randn(*shape)
                got, want = module(x), model(x)
                assert got.shape == want.shape
                torch.testing.assert_close(got, want, rtol=0, atol=5e-2)
        assert torch_mp.jit_pass.activity().converted == converted  # the converted graph ran them all


class CastsItsInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return self.linear(x.float()).relu()


def test_inputs_of_another_dtype_run_the_unconverted_graph(tmp_path):
    model = CastsItsInput().eval()
    path = save_frozen(model, tmp_path / "casts.pt")
    x = torch.randn(3, 8)
    with torch_mp.jit_pass(dtype=torch.bfloat16):
        module = torch.jit.load(path)
        mixed = run_profiled(module, x)
        with torch.no_grad():
            from_double = module(x.double())
    assert torch_mp.jit_pass.activity().last_outcome == "converted"
    assert not torch.equal(mixed, model(x))  # bf16 linear
    assert torch.equal(from_double, model(x.double()))  # the fallback: exactly fp32


def test_not_frozen_and_gradient_graphs_are_left_alone(tmp_path):
    model = CastsItsInput().eval()
    scripted_path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(model), scripted_path)
    x = torch.randn(3, 8)
    with torch_mp.jit_pass(dtype=torch.bfloat16):
        out = run_profiled(torch.jit.load(str(scripted_path)), x)
        assert torch_mp.jit_pass.activity().last_outcome.startswith("weights are read from module attributes")
        # with gradients the executor takes its autodiff path, which runs no pre-pass: nothing to convert
        converted = torch_mp.jit_pass.activity().converted
        module = torch.jit.load(save_frozen(model, tmp_path / "frozen.pt"))
        needs_grad = x.clone().requires_grad_()
        module(needs_grad)
        with_grad = module(needs_grad)
        assert torch_mp.jit_pass.activity().converted == converted
    assert torch.equal(out, model(x))
    assert torch.equal(with_grad, model(needs_grad))


def test_a_module_optimized_before_enabling_keeps_its_plan(tmp_path):
    model = CastsItsInput().eval()
    module = torch.jit.load(save_frozen(model, tmp_path / "frozen.pt"))
    x = torch.randn(3, 8)
    run_profiled(module, x)
    converted = torch_mp.jit_pass.activity().converted
    with torch_mp.jit_pass(dtype=torch.bfloat16):
        with torch.no_grad():
            out = module(x)
    assert torch.equal(out, model(x))
    assert torch_mp.jit_pass.activity().converted == converted


def test_a_disabled_pass_changes_no_graph(tmp_path):
    model = CastsItsInput().eval()
    path = save_frozen(model, tmp_path / "frozen.pt")
    torch_mp.jit_pass.enable(torch.bfloat16)
    torch_mp.jit_pass.disable()
    before = torch_mp.jit_pass.activity()
    x = torch.randn(3, 8)
    module = torch.jit.load(path)
    assert torch.equal(run_profiled(module, x), model(x))
    assert not casts_to(torch.jit.last_executed_optimized_graph(), torch.bfloat16)
    assert torch_mp.jit_pass.activity()[:2] == before[:2]


def test_two_threads_run_different_modules_under_the_pass(tmp_path):
    resnet, transformer = small_resnet(), TransformerNet().eval()
    paths = [save_frozen(resnet, tmp_path / "a.pt"), save_frozen(transformer, tmp_path / "b.pt")]
    inputs = [torch.randn(2, 3, 32, 32), torch.randn(2, 7, 16)]
    expected = [resnet(inputs[0]), transformer(inputs[1])]
    results, errors = [None, None], []

    def work(i):
        try:
            module = torch.jit.load(paths[i])
            for _ in range(3):
                results[i] = run_profiled(module, inputs[i])
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    before = torch_mp.jit_pass.activity().converted
    with torch_mp.jit_pass(dtype=torch.bfloat16):
        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors
    assert torch_mp.jit_pass.activity().converted == before + 2
    for got, want in zip(results, expected):
        assert got.dtype == torch.float32 and not torch.equal(got, want)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-1 * want.abs().max().item())


def test_cpp_example_runs_a_frozen_fp32_file_mixed(tmp_path, cpp_example):
    import re
    import subprocess

    model = small_resnet()
    path = save_frozen(model, tmp_path / "resnet.pt")
    result = subprocess.run([cpp_example, "run-mixed", path, "bf16", "2", "3", "32", "32"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "pass: converted" in result.stdout
    assert "output dtype=Float shape=[2, 10]" in result.stdout
    low, casts = map(int, re.search(r"low-precision nodes: (\d+), casts: (\d+)", result.stdout).groups())
    assert low >= 17 and casts >= 1
    difference = float(re.search(r"max difference against fp32: (\S+)", result.stdout).group(1))
    torch.manual_seed(0)
    assert 0 < difference < 0.1 * model(torch.randn(2, 3, 32, 32)).abs().max().item()


@pytest.mark.cuda
def test_cuda_file_runs_mixed_with_the_cuda_policy_and_channels_last(tmp_path):
    model = small_resnet().cuda()
    x = torch.randn(2, 3, 32, 32, device="cuda")
    path = save_frozen(model, tmp_path / "resnet.pt")
    with torch_mp.jit_pass(dtype=torch.float16):
        module = torch.jit.load(path)
        mixed = run_profiled(module, x)
    report = torch_mp.jit_pass.activity().last_report
    assert report.data["policy"] == "cuda_fp16"
    assert report.data["channels_last_convolutions"] == 17
    assert mixed.dtype == torch.float32 and mixed.is_cuda
    expected = model(x)
    torch.testing.assert_close(mixed, expected, rtol=0, atol=2e-2 * expected.abs().max().item())


class BeyondHalfRange(nn.Module):
    """Activations beyond float16's largest value (65504) in the middle, from weights and inputs within it,
    normalised before the head: what random weights often give, and what the observed range guard keeps in fp32."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 8)
        self.head = nn.Linear(8, 4)
        with torch.no_grad():
            self.up.weight.mul_(2e4)  # at most 5000

    def forward(self, x):
        h = self.down(self.up(x * 10.0).relu())
        return self.head(nn.functional.layer_norm(h, [8]))


def test_calibration_gives_the_range_guard_convert_applies_and_the_profile_alone_cannot(tmp_path):
    torch.manual_seed(0)
    model = BeyondHalfRange().eval()
    x = torch.randn(4, 16)
    assert model.up(x * 10.0).abs().max() > 1e5
    path = save_frozen(model, tmp_path / "beyond.pt")
    converted = torch_mp.convert(model, (x,), torch.float16)
    converted_report = torch_mp.report_of(converted)
    expected = converted(x)
    assert any(n["rule_kind"] == "range guard" for n in converted_report.nodes)

    with torch_mp.jit_pass(dtype=torch.float16, calibrate=False):
        uncalibrated = run_profiled(torch.jit.load(path), x, calibrate=False)
    assert torch_mp.jit_pass.activity().last_report.data["ranges_observed"] is False
    assert not uncalibrated.isfinite().all()  # the linear's fp16 output overflowed

    with torch_mp.jit_pass(dtype=torch.float16):
        module = torch.jit.load(path)
        mixed = run_profiled(module, x)
    activity = torch_mp.jit_pass.activity()
    report, graph = activity.last_report, activity.last_graph
    assert report.data["ranges_observed"] is True
    def aten(nodes):  # the executor hands the pass a graph returning a tuple: a prim::TupleConstruct more
        return [(n["op"], n["precision"]) for n in nodes if n["op"].startswith("aten::")]

    assert aten(report.nodes) == aten(converted_report.nodes)
    assert casts_to(graph, torch.float16)
    assert mixed.isfinite().all()
    torch.testing.assert_close(mixed, expected, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(mixed, model(x), rtol=0, atol=5e-2)


def test_a_plan_whose_outputs_turn_non_finite_on_the_recorded_inputs_leaves_the_graph_fp32(tmp_path):
    """Catastrophic cancellation (test_non_finite.Cancellation): in fp16 the divisor is 0 and the output inf. convert()
    repairs the plan; the pass, which cannot plan again inside the executor, leaves the graph fp32."""
    from test_non_finite import Cancellation

    torch.manual_seed(0)
    model = Cancellation().eval()
    x = torch.randn(16, 8)
    path = save_frozen(model, tmp_path / "cancellation.pt")
    before = torch_mp.jit_pass.activity()
    with torch_mp.jit_pass(dtype=torch.float16):
        output = run_profiled(torch.jit.load(path), x)
    activity = torch_mp.jit_pass.activity()
    assert activity.converted == before.converted and activity.skipped > before.skipped
    assert activity.last_report.data["non_finite"] == {"run": 0, "tensor": 0, "value": None}
    assert torch.isfinite(output).all()
    torch.testing.assert_close(output, model(x))
