"""torch_mp.export: the plan applied to torch.export programs as explicit casts (FX-level, small programs)."""
import functools
import io

import pytest
import torch

import torch_mp
from torch.export import ExportedProgram
from torch.fx.node import map_arg
from torch_mp._export import apply as export_apply
from torch_mp._export.conversion import ProgramConversion
from torch_mp._export.ir import _val
from torch_mp._compat import EXPORT_LSTM_STATE_META_RIGHT
from torch_mp._export.inference_form import inference_form
from small_models import CosineAttention

CAST = torch.ops.aten._to_copy.default


def convnet():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 6 * 6, 10)).eval()


def casts(program):
    """(what is cast, to which dtype) per cast node, in graph order."""
    return [(node.args[0].name, node.kwargs["dtype"]) for node in program.graph.nodes if node.target is CAST]


def node_named(program, name):
    return next(node for node in program.graph.nodes if node.name == name)


def check_meta(program, inputs):
    """meta['val'] of every call and placeholder has the dtype and shape the program computes."""
    checked = []

    class Check(torch.fx.Interpreter):
        def run_node(self, node):
            value = super().run_node(node)
            meta = node.meta.get("val")
            if isinstance(value, torch.Tensor):
                assert meta.dtype == value.dtype, (node.name, meta.dtype, value.dtype)
                assert tuple(meta.shape) == tuple(value.shape), node.name
                checked.append(node.name)
            return value

    Check(program.graph_module).run(*program._graph_module_flat_inputs(inputs, {}))
    return checked


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_conv_linear_casts_weights_and_numerics(dtype):
    model = convnet()
    x = torch.randn(2, 3, 8, 8)
    program = torch_mp.export(model, (x,), dtype)
    report = torch_mp.report_of(program)
    assert isinstance(program, torch.export.ExportedProgram)
    # one cast in (x to the low dtype before the convolution), one out (the linear's result back to fp32)
    assert casts(program) == [("input", dtype), ("linear", torch.float32)]
    cast_in = next(n for n in program.graph.nodes if n.target is CAST)
    assert list(cast_in.users)[0].target is torch.ops.aten.conv2d.default
    low = {n["op"] for n in report.nodes if n["precision"] == "low"}
    assert low == {"aten::conv2d", "aten::relu", "aten::flatten", "aten::linear"}
    # every weight stored once, in the low dtype, parameters staying parameters
    for name in ("0.weight", "0.bias", "3.weight", "3.bias"):
        assert program.state_dict[name].dtype == dtype
        assert isinstance(program.state_dict[name], torch.nn.Parameter)
    assert report.data["weight_bytes_after"] * 2 == report.data["weight_bytes_before"]
    assert report.low_precision_flop_fraction == 1.0
    assert [c["bytes"] for c in report.casts] == [2 * 3 * 8 * 8 * (4 + 2), 2 * 10 * (2 + 4)]
    program.validate()
    assert len(check_meta(program, (x,))) > 8
    out = program.module()(x)
    reference = model(x)
    assert out.dtype == torch.float32
    tolerance = 2e-2 if dtype == torch.float16 else 8e-2
    torch.testing.assert_close(out, reference, rtol=tolerance, atol=tolerance * reference.abs().max().item())
    # the user's model is untouched
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_save_load_and_decompositions():
    model = convnet()
    x = torch.randn(2, 3, 8, 8)
    program = torch_mp.export(model, (x,), torch.float16)
    out = program.module()(x)
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    assert torch.equal(loaded.module()(x), out)
    assert loaded.state_dict["0.weight"].dtype == torch.float16
    decomposed = program.run_decompositions()
    ops = {n.target for n in decomposed.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.convolution.default in ops and CAST in ops
    assert torch.equal(decomposed.module()(x), out)


def test_a_program_is_taken_and_left_as_it_was():
    model = convnet()
    x = torch.randn(2, 3, 8, 8)
    exported = torch.export.export(model, (x,))
    nodes = [(n.name, n.target) for n in exported.graph.nodes]
    program = torch_mp.export(exported, None, torch.bfloat16)  # its own example inputs
    assert [(n.name, n.target) for n in exported.graph.nodes] == nodes
    assert all(t.dtype == torch.float32 for t in exported.state_dict.values())
    assert casts(program) == [("input", torch.bfloat16), ("linear", torch.float32)]


def test_exporting_the_result_again_changes_no_node():
    x = torch.randn(2, 3, 8, 8)
    program = torch_mp.export(convnet(), (x,), torch.float16)
    again = torch_mp.export(program, (x,), torch.float16)
    report = torch_mp.report_of(again)
    def listing(graph):
        return [(n.name, n.target, str(n.args), str(n.kwargs)) for n in graph.nodes]

    assert listing(again.graph) == listing(program.graph)
    assert report.casts == []
    assert {n["rule_kind"] for n in report.nodes} == {"not fp32"}


def test_in_place_writes_are_made_functional():
    class Writes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(16, 16)

        def forward(self, x):
            y = self.linear(x)
            y.add_(1.0)
            return y.relu()

    model = Writes().eval()
    x = torch.randn(4, 16)
    program = torch_mp.export(model, (x,), torch.bfloat16)
    ops = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.add_.Tensor not in ops and torch.ops.aten.add.Tensor in ops
    assert casts(program) == [("x", torch.bfloat16), ("relu", torch.float32)]
    torch.testing.assert_close(program.module()(x), model(x), rtol=5e-2, atol=5e-2)


def test_an_eval_mode_in_place_dropout_is_removed_without_a_retrace(monkeypatch):
    # EfficientNet's classifier: nn.Dropout(inplace=True) on a view (flatten), which the in-place rewrite cannot make
    # functional; in eval mode it writes nothing, so its readers read its input and the program needs no retrace
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Dropout(0.2, inplace=True), torch.nn.Linear(48, 4)).eval()
    x = torch.randn(2, 3, 4, 4)
    exported = torch.export.export(model, (x,))
    assert torch.ops.aten.dropout_.default in [n.target for n in exported.graph.nodes]
    retraced = retraces(monkeypatch)
    form = inference_form(exported)
    assert retraced == [] and torch.ops.aten.dropout_.default not in [n.target for n in form.graph.nodes]
    [linear] = [n for n in form.graph.nodes if n.target is torch.ops.aten.linear.default]
    assert linear.args[0].target is torch.ops.aten.flatten.using_ints  # the flatten, read directly
    assert torch.equal(form.module()(x), model(x))


class SwinMask(torch.nn.Module):
    """Swin's shifted-window attention mask: a fresh tensor written through slices (`mask[a:b, c:d] = k`, export's
    slice, slice, fill_), a row written by integer indexing and a column in place, then read through a reshape."""

    def forward(self, x):
        mask = x.new_zeros(6, 6)
        count = 0
        for rows in ((0, 2), (2, 4), (4, None)):
            for columns in ((0, 3), (3, None)):
                mask[rows[0]:rows[1], columns[0]:columns[1]] = count
                count += 1
        mask[5] = 9.0
        mask[:, 1].mul_(2.0)
        return x + mask.reshape(36).view(6, 6)


class ViewReadAfterWrite(torch.nn.Module):
    def forward(self, x):
        mask = x.new_zeros(6, 6)
        flat = mask.view(36)  # made before the write, read after it: it sees the write
        mask[0:2] = 1.0
        return x + flat.view(6, 6)


class SliceReadAfterWrite(torch.nn.Module):
    def forward(self, x):
        mask = x.new_zeros(6, 6)
        rows = mask[0:2]
        rows.fill_(3.0)
        return x + rows.sum() + mask


class SplitWritten(torch.nn.Module):
    def forward(self, x):
        y = x * 2.0
        first, _ = y.split(3)  # views of y, reached through getitem
        first.add_(1.0)
        return y


class PromotingWrite(torch.nn.Module):
    def forward(self, x):
        y = (x * 2.0).half()
        y.add_(x)  # stays half; add(half, float) would be float
        return y


def calls_of(program, packet):
    """How many calls the program makes to any overload of the op."""
    return sum(getattr(n.target, "overloadpacket", None) is packet for n in program.graph.nodes)


def retraces(monkeypatch):
    """The programs run_decompositions is called on (it still runs)."""
    called, original = [], ExportedProgram.run_decompositions

    def recorded(program, *args, **kwargs):
        called.append(program)
        return original(program, *args, **kwargs)

    monkeypatch.setattr(ExportedProgram, "run_decompositions", recorded)
    return called


def test_writes_through_slices_of_a_fresh_tensor_become_scatters_without_a_retrace(monkeypatch):
    x = torch.randn(6, 6)
    exported = torch.export.export(SwinMask().eval(), (x,))
    assert calls_of(exported, torch.ops.aten.fill_) == 7  # fill_.Tensor of a lifted constant, or fill_.Scalar (2.15)
    called = retraces(monkeypatch)
    form = inference_form(exported)
    targets = [n.target for n in form.graph.nodes]
    assert called == [] and not any(n.op == "call_function" and n.target._schema.is_mutable
                                    for n in form.graph.nodes if isinstance(n.target, torch._ops.OpOverload))
    # each block: slice, slice, fill, slice_scatter, slice_scatter; the row: select, fill, select_scatter; the column:
    # select, mul, select_scatter
    assert targets.count(torch.ops.aten.slice_scatter.default) == 6 * 2
    assert targets.count(torch.ops.aten.select_scatter.default) == 2
    assert calls_of(form, torch.ops.aten.fill) == 7 and calls_of(form, torch.ops.aten.mul) == 1
    assert torch.equal(form.module()(x), SwinMask()(x))
    check_meta(form, (x,))
    program = torch_mp.export(SwinMask().eval(), (x,), torch.bfloat16)
    assert torch.equal(program.module()(x), SwinMask()(x))  # mask values and the add are kept fp32 exactly


@pytest.mark.parametrize("model", [ViewReadAfterWrite, SliceReadAfterWrite, SplitWritten, PromotingWrite])
def test_a_write_that_a_view_would_see_is_left_to_run_decompositions(monkeypatch, model):
    x = torch.randn(6, 6)
    exported = torch.export.export(model().eval(), (x,))
    called = retraces(monkeypatch)
    form = inference_form(exported)
    assert called == [exported]
    result = form.module()(x)
    assert result.dtype == model()(x).dtype and torch.equal(result, model()(x))


def positive(t):
    return t.relu()


def negative(t):
    return t.sigmoid()


def test_the_functional_form_is_a_copy_with_the_subgraphs_the_program_reads():
    class NormThenBranch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.BatchNorm1d(8)

        def forward(self, x):
            y = self.norm(x)
            return torch.cond(y.sum() > 0, positive, negative, (y,))

    model = NormThenBranch().eval()
    x = torch.randn(2, 8)
    exported = torch.export.export(model, (x,))
    nodes, owner = [(n.name, n.target) for n in exported.graph.nodes], exported.graph.owning_module
    form = inference_form(exported)  # the batch norm is rewritten on a copy of the graph and of its branches
    assert torch.ops.aten._native_batch_norm_legit_no_training.default in [n.target for n in form.graph.nodes]
    assert [(n.name, n.target) for n in exported.graph.nodes] == nodes and exported.graph.owning_module is owner
    for branch in ("true_graph_0", "false_graph_0"):
        assert isinstance(getattr(form.graph_module, branch), torch.fx.GraphModule)
        assert getattr(form.graph_module, branch) is not getattr(exported.graph_module, branch)
    for inputs in (x, -x - 10):  # both branches
        assert torch.equal(form.module()(inputs), model(inputs))


def test_a_program_with_torch_cond_plans_around_its_branches():
    """The branches stay fp32 (control flow): a low value that reaches the cond is cast back to fp32 for it; the cond's
    own result is recomputed with its branch modules (it failed, reading their missing values)."""
    class LinearBranchLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            y = self.a(x)
            return self.b(torch.cond(y.sum() > 0, positive, negative, (y,)))

    torch.manual_seed(0)
    model, x = LinearBranchLinear().eval(), torch.randn(4, 8)
    program = torch_mp.export(model, (x,), torch.bfloat16)
    report = torch_mp.report_of(program)
    assert [(n["op"], n["precision"], n["rule_kind"]) for n in report.nodes] == [
        ("aten::linear", "low", "policy"), ("aten::sum", "fp32", "policy"), ("aten::gt", "fp32", "policy"),
        ("cond", "fp32", "control flow"), ("aten::linear", "low", "policy")]
    [cond] = [n for n in program.graph.nodes if n.target is torch.ops.higher_order.cond]
    operands = cond.args[3]
    assert all(_val(o).dtype == torch.float32 for o in operands)
    assert _val(cond)[0].dtype == torch.float32
    for inputs in (x, -x):  # both branches
        with torch.no_grad():
            expected, actual = model(inputs), program.module()(inputs)
            assert (model.a(inputs).sum() > 0) == (inputs is not x)
        assert actual.dtype == torch.float32
        torch.testing.assert_close(actual, expected, rtol=0, atol=0.05)  # bf16: 8 bits of mantissa, two linears


RNN_OPS = {torch.ops.aten.lstm.input, torch.ops.aten.gru.input, torch.ops.aten.rnn_tanh.input,
           torch.ops.aten.rnn_relu.input}


class Recurrent(torch.nn.Module):
    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn(12, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        states, _ = self.rnn(x)
        return self.head(states)


@pytest.mark.parametrize("rnn", [torch.nn.LSTM, torch.nn.GRU, functools.partial(torch.nn.RNN, nonlinearity="tanh"),
                                 functools.partial(torch.nn.RNN, nonlinearity="relu")])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_low_rnn_takes_its_fp32_layouts_without_a_fake_run(monkeypatch, rnn, dtype):
    # the fake-tensor run of an RNN op unrolls every time step; its low value is its fp32 value's layouts, low
    taken = []
    relabelled = export_apply._rnn_result_in_new_dtype

    def spy(node, before):
        result = relabelled(node, before)
        taken.append((node.name, result is not None))
        return result

    monkeypatch.setattr(export_apply, "_rnn_result_in_new_dtype", spy)
    model = Recurrent(rnn).eval()
    x = torch.randn(3, 7, 12)
    program = torch_mp.export(model, (x,), dtype)
    [node] = [n for n in program.graph.nodes if n.target in RNN_OPS]
    # before torch 2.13 an LSTM takes the fake run: export's fp32 value of its states has another shape there
    relabelled_here = node.target is not torch.ops.aten.lstm.input or EXPORT_LSTM_STATE_META_RIGHT
    assert taken == ([(node.name, True)] if relabelled_here else [])
    assert all(t.dtype == dtype for t in node.meta["val"])
    with torch._guards.detect_fake_mode([n.meta["val"] for n in program.graph.nodes if n.op == "placeholder"]):
        unrolled = node.target(*map_arg(node.args, lambda a: a.meta["val"]))

    def layouts(values):
        return [(t.shape, t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad) for t in values]

    assert layouts(node.meta["val"]) == layouts(unrolled)
    assert len(check_meta(program, (x,))) > 8
    torch.testing.assert_close(program.module()(x), model(x), rtol=5e-2, atol=5e-2)


@torch.library.custom_op("torch_mp_test::columns_first_when_low", mutates_args=())
def columns_first_when_low(x: torch.Tensor) -> torch.Tensor:
    """A copy of a matrix, laid out column-major in a low dtype: a kernel whose result's layout depends on the dtype."""
    return x.clone() if x.dtype == torch.float32 else x.t().contiguous().t()


@columns_first_when_low.register_fake
def _(x):
    return x.clone() if x.dtype == torch.float32 else x.t().contiguous().t()


def test_a_view_the_low_layout_does_not_allow_becomes_a_reshape():
    class Flattened(torch.nn.Module):
        def forward(self, x):
            return columns_first_when_low(x).view(-1)

    policy = torch_mp.OpPolicy.default("cpu_fp16").set("torch_mp_test::columns_first_when_low", "low", "the test's")
    x = torch.randn(3, 4)
    program = torch_mp.export(Flattened().eval(), (x,), torch.float16, policy=policy)
    ops = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.view.default not in ops and torch.ops.aten.reshape.default in ops
    assert torch.equal(program.module()(x), x.half().float().view(-1))  # the fp32 output, through fp16
    assert len(check_meta(program, (x,))) >= 3


class Scaled(torch.nn.Module):
    """A linear whose result is scaled up: an overflow of fp16 the range guard sees on the observed value."""

    def __init__(self, scale):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.scale = scale

    def forward(self, x):
        return self.linear(x) * self.scale


def test_range_guard_fires_on_an_observed_overflow():
    x = torch.ones(2, 8)
    model = Scaled(1e5).eval()
    program = torch_mp.export(model, (x,), torch.float16)
    report = torch_mp.report_of(program)
    mul = next(n for n in report.nodes if n["op"] == "aten::mul")
    assert (mul["precision"], mul["rule_kind"], mul["guard"]["kind"]) == ("fp32", "range guard", "observed overflow")
    assert mul["guard"]["value"] == "mul" and mul["guard"]["limit"] == 65504 / 2
    assert mul["guard"]["seen"] == pytest.approx(model(x).abs().max().item())
    assert torch.isfinite(program.module()(x)).all()
    # bf16 holds it: no guard
    report = torch_mp.report_of(torch_mp.export(model, (x,), torch.bfloat16))
    assert all(n["guard"] is None for n in report.nodes)


def test_range_guard_sees_the_calibration_inputs():
    model = Scaled(100.0).eval()
    small, large = torch.full((2, 8), 0.01), torch.full((2, 8), 1000.0)
    report = torch_mp.report_of(torch_mp.export(model, (small,), torch.float16))
    assert all(n["guard"] is None for n in report.nodes)
    report = torch_mp.report_of(torch_mp.export(model, (small,), torch.float16, calibration_inputs=[(large,)]))
    assert {n["op"] for n in report.nodes if n["rule_kind"] == "range guard"} >= {"aten::mul"}


def test_underflow_guard_keeps_the_divisor_fp32():
    x = torch.randn(2, 16, 32)
    x[:, -4:] = 0  # padded tokens: k is exactly 0 there, its norm is clamped to 1e-12
    model = CosineAttention().eval()
    program = torch_mp.export(model, (x,), torch.float16)
    report = torch_mp.report_of(program)
    guarded = [n for n in report.nodes if n["guard"] and n["guard"]["kind"] == "underflow to zero"]
    assert {n["op"] for n in guarded} >= {"aten::div", "aten::clamp_min"}
    assert all(n["precision"] == "fp32" for n in guarded)
    out = program.module()(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, model(x), rtol=1e-2, atol=1e-2)
    # without zeros nothing underflows fp16's 6e-8, and bf16 keeps fp32's range
    report = torch_mp.report_of(torch_mp.export(model, (torch.randn(2, 16, 32),), torch.bfloat16))
    assert not any(n["guard"] for n in report.nodes)


def test_exclusion_by_module_path():
    x = torch.randn(2, 3, 8, 8)
    policy = torch_mp.OpPolicy.default("cpu_bf16").exclude("3", reason="head stays fp32")
    program = torch_mp.export(convnet(), (x,), torch.bfloat16, policy=policy)
    report = torch_mp.report_of(program)
    linear = next(n for n in report.nodes if n["op"] == "aten::linear")
    assert (linear["precision"], linear["rule_kind"], linear["scope"]) == ("fp32", "exclusion", "3")
    assert program.state_dict["3.weight"].dtype == torch.float32
    assert program.state_dict["0.weight"].dtype == torch.bfloat16
    # a pattern that matches no module is refused, naming it (a typo would otherwise change nothing)
    policy = torch_mp.OpPolicy.default("cpu_bf16").exclude("head*")
    with pytest.raises(ValueError, match=r"policy.exclude\('head\*'\) matches no node of the model"):
        torch_mp.export(convnet(), (x,), torch.bfloat16, policy=policy)


def test_low_precision_io():
    x = torch.randn(2, 3, 8, 8)
    program = torch_mp.export(convnet(), (x,), torch.float16, keep_io_dtypes=False)
    assert casts(program) == []
    assert node_named(program, "input").meta["val"].dtype == torch.float16
    out = program.module()(x.half())
    assert out.dtype == torch.float16


def test_a_weight_read_by_fp32_and_low_nodes_stays_fp32_once():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(50, 16)
            self.head = torch.nn.Linear(16, 50, bias=False)
            self.head.weight = self.embedding.weight

        def forward(self, ids):
            return self.head(torch.layer_norm(self.embedding(ids), (16,)))

    model = Tied().eval()
    ids = torch.randint(0, 50, (2, 5))
    program = torch_mp.export(model, (ids,), torch.float16)
    report = torch_mp.report_of(program)
    # the one table (two state-dict names) is stored once, low: embedding and head both run low
    assert report.data["weight_bytes_after"] * 2 == report.data["weight_bytes_before"]
    assert program.state_dict["head.weight"] is program.state_dict["embedding.weight"]
    torch.testing.assert_close(program.module()(ids), model(ids), rtol=2e-2, atol=2e-2)


def test_an_unexportable_model_is_a_clear_error():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum().item() > 0 else x

    with pytest.raises(ValueError, match="torch.export could not capture DataDependent"):
        torch_mp.export(DataDependent().eval(), (torch.randn(3),), torch.float16)


class ExportsOtherwise(torch.nn.Module):
    """Computes otherwise under torch.export than eagerly (as numpy code in an autograd.Function can): the program is
    NaN where the model is finite."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        return torch.log(y - 100.0) if torch.compiler.is_exporting() else torch.exp(y)


def test_a_program_that_does_not_compute_what_the_model_does_is_refused(monkeypatch):
    torch.manual_seed(0)
    planned = []
    monkeypatch.setattr(ProgramConversion, "run", lambda *a, **k: planned.append(a))
    with pytest.raises(ValueError) as caught:
        torch_mp.export(ExportsOtherwise().eval(), (torch.randn(2, 4),), torch.float16)
    message = str(caught.value)
    assert "the program torch.export captured of ExportsOtherwise does not compute what the model does" in message
    assert "its output is NaN in 8 of 8 values where the model's is finite" in message
    assert "rewrite it with torch ops" in message and "pass the ExportedProgram" in message
    assert not planned  # refused before planning


def test_inputs_that_do_not_run_the_model_or_program_are_a_model_run_error():
    model, x = convnet(), torch.randn(2, 3, 8, 8)
    program = torch.export.export(model, (x,))
    for given in (model, program):
        with pytest.raises(torch_mp.ModelRunError, match="running the (model|program) on the example inputs failed"):
            torch_mp.export(given, (torch.randn(2, 5, 8, 8),), torch.float16)
    with pytest.raises(torch_mp.ModelRunError, match="shape"):  # the program is specialised to batch 2
        torch_mp.export(program, (torch.randn(3, 3, 8, 8),), torch.float16)
    assert issubclass(torch_mp.ModelRunError, ValueError)  # what export raised before
    for given in (model, program):  # the wrong number of inputs is refused before running, as convert does
        with pytest.raises(ValueError, match="forward does not take the 2 example inputs|the program takes 1 "
                                             "inputs but example_inputs has 2") as caught:
            torch_mp.export(given, (x, x), torch.float16)
        assert not isinstance(caught.value, torch_mp.ModelRunError)


def test_bad_arguments():
    with pytest.raises(ValueError, match="training mode"):
        torch_mp.export(convnet().train(), (torch.randn(2, 3, 8, 8),), torch.float16)
    with pytest.raises(ValueError, match="low-precision floating dtype"):
        torch_mp.export(convnet(), (torch.randn(2, 3, 8, 8),), torch.float64)
    with pytest.raises(TypeError, match="nn.Module or torch.export.ExportedProgram"):
        torch_mp.export(lambda x: x, (torch.randn(2),), torch.float16)


def test_the_fallback_keeps_nodes_by_fx_name():
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(4)]).eval()
    x = torch.randn(8, 32)
    program = torch_mp.export(model, (x,), torch.bfloat16, tolerance=1e-3, progress=False)
    report = torch_mp.report_of(program)
    kept = report.data["fallback"]["kept_fp32"]
    assert kept and all(isinstance(name, str) for name in kept)
    out = program.module()(x)
    reference = model(x)
    assert ((out - reference).norm() / reference.norm()).item() <= 1e-3
    assert {n["id"] for n in report.nodes if n["rule_kind"] == "fallback"} == set(kept)


def test_a_node_rule_decides_by_fx_name_and_shapes():
    seen = []

    def head_in_fp32(node):
        seen.append(node)
        return ("fp32", "head stays fp32") if node.op == "aten::linear" else None

    policy = torch_mp.OpPolicy.default("cpu_fp16").add_rule(head_in_fp32)
    x = torch.randn(2, 3, 8, 8)
    program = torch_mp.export(convnet(), (x,), torch.float16, policy=policy)
    report = torch_mp.report_of(program)
    linear = next(n for n in report.nodes if n["op"] == "aten::linear")
    assert (linear["precision"], linear["rule_kind"], linear["rule"]) == ("fp32", "callable", "fp32: head stays fp32")
    conv = next(node for node in seen if node.op == "aten::conv2d")
    assert conv.id == "conv2d" and conv.input_shapes[0] == (2, 3, 8, 8) and conv.input_dtypes[0] == torch.float32
    assert conv.constants["groups"] == 1
    assert program.state_dict["3.weight"].dtype == torch.float32 and program.state_dict["0.weight"].dtype == \
        torch.float16


def test_dynamic_batch():
    x = torch.randn(2, 3, 8, 8)
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch_mp.export(convnet(), (x,), torch.bfloat16, dynamic_shapes=({0: batch},))
    assert casts(program) == [("input", torch.bfloat16), ("linear", torch.float32)]
    for size in (1, 5):
        y = torch.randn(size, 3, 8, 8)
        assert program.module()(y).shape == (size, 10)
