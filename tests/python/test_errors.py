"""Bad input gets a clear exception naming the problem; the user's module is never modified."""

import inspect
import warnings

import pytest
import torch
from torch import nn

import torch_mp
from small_models import ConvBnNet


def small():
    return ConvBnNet().eval(), torch.randn(2, 3, 16, 16)


class Unscriptable(nn.Module):
    """Scripting fails on the lambda; tracing works."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return (lambda t: torch.relu(t))(self.linear(x))


class Untraceable(Unscriptable):
    """Scripting fails on the lambda; tracing fails on the string output."""

    def forward(self, x):
        return (lambda t: t)(self.linear(x)), "label"


def test_training_mode_is_refused():
    model, x = small()
    model.train()
    with pytest.raises(ValueError, match="training mode"):
        torch_mp.convert(model, (x,))


def test_scripted_training_mode_is_refused():
    model, x = small()
    with pytest.raises(ValueError, match="training mode"):
        torch_mp.convert(torch.jit.script(model.train()), (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.uint8, torch.int64])
def test_target_dtype_must_be_low_precision_floating(dtype):
    model, x = small()
    with pytest.raises(ValueError, match="low-precision floating dtype"):
        torch_mp.convert(model, (x,), dtype)


def test_target_dtype_must_be_a_dtype():
    model, x = small()
    with pytest.raises(TypeError, match="dtype must be"):
        torch_mp.convert(model, (x,), "fp16")


@pytest.mark.parametrize("front", ["convert", "export"])
def test_conversion_under_autocast_is_refused_naming_the_front(front):
    model, x = small()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match=rf"torch_mp\.{front} was called inside an active torch\.autocast"):
            getattr(torch_mp, front)(model, (x,))


def test_unscriptable_module_without_example_inputs():
    with pytest.raises(ValueError, match="cannot be scripted.*pass example_inputs"):
        torch_mp.convert(Unscriptable().eval())


def test_unscriptable_module_is_traced_with_example_inputs():
    model = Unscriptable().eval()
    x = torch.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch_mp.TraceWarning)  # the tracer warned nothing: neither does torch_mp
        converted = torch_mp.convert(model, (x,), torch.float16)
    assert converted(x).dtype == torch.float32
    torch.testing.assert_close(converted(x), model(x), rtol=0, atol=5e-3)


class WeightNormed(nn.Module):
    """torch.nn.utils.parametrize scripts, then raises when the scripted forward runs."""

    def __init__(self):
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(8, 8, 3, padding=1))

    def forward(self, x):
        return self.conv(x)


def test_module_that_scripts_but_fails_to_run_scripted_is_traced():
    model = WeightNormed().eval()
    x = torch.randn(2, 8, 16)
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    assert report.data["capture"] == "trace"
    assert report.low_precision_flop_fraction == 1.0  # the weight-normed convolution runs in fp16
    with torch.no_grad():
        torch.testing.assert_close(converted(x), model(x), rtol=0, atol=5e-3)


def test_module_that_neither_scripts_nor_traces():
    with pytest.raises(ValueError, match="cannot be scripted .* and cannot be traced"):
        torch_mp.convert(Untraceable().eval(), (torch.randn(2, 8),))


class ThroughNumpy(Unscriptable):
    """Scripting fails on .numpy(); tracing records the numpy round trip's result as a constant."""

    def forward(self, x):
        return torch.from_numpy(self.linear(x).detach().numpy() * 2.0) + 1.0


class ThroughItem(Unscriptable):
    """Scripting fails on the lambda; tracing records the .item() as a constant: only the scale is wrong."""

    def forward(self, x):
        return (lambda t: t * t.abs().sum().item())(self.linear(x))


class EmbeddingThroughNumpy(nn.Module):
    """Integer inputs only (no noise to add): the trace returns a constant."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(10, 8)

    def forward(self, ids):
        return torch.from_numpy(self.embedding(ids).detach().numpy().copy()).sum(-1)


def test_a_trace_that_returns_a_constant_is_refused():
    torch.manual_seed(0)
    model = ThroughNumpy().eval()
    with pytest.raises(ValueError) as caught:
        torch_mp.convert(model, (torch.randn(4, 8),), torch.float16)
    message = str(caught.value)
    assert "ThroughNumpy cannot be scripted" in message and "its trace does not compute what the model does" in message
    assert "its output differs from the model's by up to" in message  # on the perturbed inputs
    assert "does not depend on its inputs at all: it returns a constant" in message
    assert "Converting a tensor to a NumPy array" in message  # the tracer's own warning, with its place
    assert "test_errors.py:" in message
    assert "rewrite those calls with torch ops" in message and "torch.jit.ScriptModule" in message


def test_a_trace_with_an_item_constant_is_refused():
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=r"differs from the model's by up to .* Converting a tensor to a Python "
                                         r"number") as caught:
        torch_mp.convert(ThroughItem().eval(), (torch.randn(4, 8),), torch.float16)
    assert "returns a constant" not in str(caught.value)  # the graph reads x: only the scale is a constant


def test_a_constant_trace_of_integer_inputs_is_refused():
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    with pytest.raises(ValueError, match="does not depend on its inputs at all: it returns a constant"):
        torch_mp.convert(EmbeddingThroughNumpy().eval(), (ids,), torch.float16)


class TracesRight(nn.Module):
    """Does not script (the lambda); its trace holds near the example: eval dropout, a branch on a value that the
    noise does not flip (with a TracerWarning), a random op."""

    def __init__(self, noise: bool):
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.dropout = nn.Dropout(0.5)
        self.noise = noise

    def forward(self, x):
        y = (lambda t: self.dropout(t))(self.linear(x))
        y = y * 2.0 if bool(x.abs().sum() > 0) else y
        return y + torch.randn_like(y) if self.noise else y


@pytest.mark.parametrize("noise", [False, True])
def test_traces_that_hold_near_the_example_are_taken_passing_the_tracer_warning_on(noise):
    """Issue 58, 7.1: the trace follows the branch the example took, which the check near the example cannot see; the
    tracer's warning, with its line, comes to the caller as a torch_mp.TraceWarning."""
    torch.manual_seed(0)
    model = TracesRight(noise).eval()
    x = torch.randn(4, 8)
    with pytest.warns(torch_mp.TraceWarning) as caught:
        converted = torch_mp.convert(model, (x,), torch.float16)
        report = torch_mp.report_of(converted)
    assert report.data["capture"] == "trace"
    lines, first = inspect.getsourcelines(TracesRight.forward)
    branch = first + next(i for i, line in enumerate(lines) if "bool(" in line)
    message = str(caught[0].message)
    assert (f"torch_mp.convert traced TracesRight (it cannot be scripted (Lambda aren't supported:)), and the tracer "
            f"warned: at {__file__}:{branch}: Converting a tensor to a Python boolean might cause the trace to be "
            "incorrect. ") in message
    assert "inputs that would take another branch get the example's" in message and "torch_mp.export" in message
    assert caught[0].filename == __file__  # attributed to the caller's line
    assert issubclass(torch_mp.TraceWarning, torch.jit.TracerWarning)
    if not noise:
        with torch.no_grad():
            torch.testing.assert_close(converted(x), model(x), rtol=0, atol=1e-2)
            zero = torch.zeros(4, 8)  # takes the other branch: the trace still doubles, as the warning says
            torch.testing.assert_close(converted(zero), 2 * model(zero), rtol=0, atol=1e-2)


class DefaultReduction(nn.Module):
    """Eagerly torch._C._nn.l1_loss(a, b) is the elementwise (8, 8) loss; scripted, TorchScript binds the schema's
    default reduction, mean, and returns a scalar. Its trace records the call as it ran."""

    def forward(self, a, b):
        return torch._C._nn.l1_loss(a, b)


class DefaultReductionThroughFloat(nn.Module):
    """As DefaultReduction, and its trace holds float(a.abs().sum()) as a constant: neither capture computes it."""

    def forward(self, a, b):
        return torch._C._nn.l1_loss(a * float(a.abs().sum()), b)


class Noisy(nn.Module):
    """Scripts alike, but adds fresh noise at every call: the scripted and eager runs differ as two eager runs do."""

    def forward(self, x):
        return x + torch.randn_like(x)


class CountsCalls(nn.Module):
    """Scripts alike; its forward writes into a buffer."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1.0)
        return self.linear(x) + self.calls


def test_a_scripted_capture_that_computes_otherwise_is_traced_instead():
    model, a, b = DefaultReduction().eval(), torch.randn(8, 8), torch.randn(8, 8)
    converted = torch_mp.convert(model, (a, b), torch.float16)
    report = torch_mp.report_of(converted)
    assert report.data["capture"] == "trace"
    with torch.no_grad():
        expected, got = model(a, b), converted(a, b)
    assert expected.shape == got.shape == (8, 8) and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0, atol=0)  # |a - b| of fp32 inputs: one op, kept fp32


def test_a_scripted_capture_that_computes_otherwise_and_no_trace_is_refused_naming_the_op():
    model = DefaultReductionThroughFloat().eval()
    with pytest.raises(ValueError) as caught:
        torch_mp.convert(model, (torch.randn(8, 8), torch.randn(8, 8)), torch.bfloat16)
    message = str(caught.value)
    assert ("DefaultReductionThroughFloat computes otherwise scripted than eagerly on the example inputs (its output "
            "has shape (), the model's (8, 8); that output is made by aten::l1_loss at ") in message
    assert "test_errors.py:" in message and "pass every argument explicitly" in message
    assert "its trace does not compute what the model does" in message
    assert "Converting a tensor to a Python float" in message  # the tracer's warning on float()


@pytest.mark.parametrize("model", [Noisy(), CountsCalls()], ids=["random op", "writes a buffer"])
def test_scripted_captures_that_agree_stay_scripted_and_leave_the_model_as_it_was(model):
    model = model.eval()
    snapshot = _snapshot(model)
    report = torch_mp.report_of(torch_mp.convert(model, (torch.randn(4, 8),), torch.float16))
    assert report.data["capture"] == "script"
    _assert_same_state(model, snapshot)  # the check ran both on copies of the buffers


class Box:
    """A plain Python object: TorchScript cannot hold it."""

    def __init__(self, value):
        self.value = value


class ReturnsObject(Unscriptable):
    """Scripting fails on the lambda; tracing fails on the Box inside the output's dict."""

    def forward(self, x):
        y = (lambda t: t)(self.linear(x))
        return y, {"logits": y, "state": Box(y)}


class ReturnsMixedList(Unscriptable):
    """Only tensors, but a list of a tensor and a tuple: the tracer refuses it, printing the tensors."""

    def forward(self, x):
        y = (lambda t: t)(self.linear(x))
        return y, [y, (y,)]


def test_output_torchscript_cannot_hold_is_named_by_position_and_type():
    model = ReturnsObject().eval()
    snapshot = _snapshot(model)
    with pytest.raises(ValueError) as caught:
        torch_mp.convert(model, (torch.randn(2, 8),))
    message = str(caught.value)
    assert "cannot be scripted" in message
    assert f"its output[1]['state'] is of type {__name__}.Box, which TorchScript cannot hold" in message
    assert "Make forward return tensors, or tuples, lists or dicts of tensors" in message
    assert "use_cache" not in message  # the transformers hint is for transformers models
    assert "tensor(" not in message
    _assert_same_state(model, snapshot)
    assert not model.training


def test_tracer_message_shows_no_tensor_values():
    with pytest.raises(ValueError, match="cannot be traced with the example inputs") as caught:
        torch_mp.convert(ReturnsMixedList().eval(), (torch.randn(2, 8),))
    assert "tensor(" not in str(caught.value) and "<tensor>" in str(caught.value)


def test_scriptable_module_without_example_inputs():
    model, _ = small()
    with pytest.raises(ValueError, match="example_inputs are required"):
        torch_mp.convert(model)


def test_wrong_number_of_example_inputs():
    model, x = small()
    with pytest.raises(ValueError, match="forward takes 1 inputs but example_inputs has 2"):
        torch_mp.convert(model, (x, x))


def test_example_input_of_wrong_type():
    model, _ = small()
    with pytest.raises(TypeError, match="example input 0 .* does not fit type Tensor"):
        torch_mp.convert(model, ("not a tensor",))


def test_example_inputs_that_do_not_run_the_model():
    model, _ = small()
    with pytest.raises(torch_mp.ModelRunError):
        torch_mp.convert(model, (torch.randn(2, 5, 16, 16),))


def test_example_inputs_must_be_a_tuple():
    model, x = small()
    with pytest.raises(TypeError, match="example_inputs must be"):
        torch_mp.convert(model, {"x": x})


def test_not_a_module():
    with pytest.raises(TypeError, match="expected a torch.nn.Module"):
        torch_mp.convert(lambda t: t, (torch.randn(2),))


def test_bad_planner_and_policy():
    model, x = small()
    with pytest.raises(ValueError, match="planner"):
        torch_mp.convert(model, (x,), planner="fastest")
    with pytest.raises(TypeError, match="OpPolicy"):
        torch_mp.convert(model, (x,), policy={"aten::conv2d": "low"})


def _snapshot(model):
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def _assert_same_state(model, snapshot):
    state = model.state_dict()
    assert state.keys() == snapshot.keys()
    for name, tensor in snapshot.items():
        assert state[name].dtype == tensor.dtype, name
        assert torch.equal(state[name], tensor), name


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_user_module_is_not_modified(dtype):
    model, x = small()
    snapshot = _snapshot(model)
    expected = model(x)
    torch_mp.convert(model, (x,), dtype)
    _assert_same_state(model, snapshot)
    assert not model.training
    torch.testing.assert_close(model(x), expected, rtol=0, atol=0)


def test_user_script_module_is_not_modified():
    model, x = small()
    scripted = torch.jit.script(model)
    graph_before = str(scripted.graph)
    snapshot = _snapshot(scripted)
    torch_mp.convert(scripted, (x,), torch.float16)
    assert str(scripted.graph) == graph_before
    _assert_same_state(scripted, snapshot)


def test_example_inputs_are_not_modified():
    class AddsInPlace(nn.Module):
        def forward(self, x):
            x.add_(1.0)
            return x * 2

    x = torch.randn(3)
    original = x.clone()
    torch_mp.convert(AddsInPlace().eval(), (x,), torch.float16)
    assert torch.equal(x, original)


class _FailingExtension:
    """torch_mp._C, but its conversion fails inside."""

    def __getattr__(self, name):
        return getattr(torch_mp._C, name)

    @staticmethod
    def prepare_module(*args, **kwargs):
        raise RuntimeError("simulated internal failure")


def test_internal_failure_raises_conversion_error_and_leaves_model(monkeypatch):
    model, x = small()
    snapshot = _snapshot(model)
    monkeypatch.setattr(torch_mp._torchscript.conversion, "_C", _FailingExtension())
    with pytest.raises(torch_mp.ConversionError, match="could not convert ConvBnNet: simulated internal failure"):
        torch_mp.convert(model, (x,))
    _assert_same_state(model, snapshot)


def test_real_failure_in_the_converted_graph_is_a_conversion_error():
    """A policy that forces an op without a CPU fp16 kernel into fp16: the verification run catches it."""

    class Inverts(nn.Module):
        def forward(self, x):
            return torch.linalg.inv(x)

    x = torch.randn(2, 4, 4) + 4 * torch.eye(4)
    policy = torch_mp.OpPolicy.default("cpu_fp16").set("aten::linalg_inv", "low")
    model = Inverts().eval()
    with pytest.raises(torch_mp.ConversionError, match="could not convert Inverts"):
        torch_mp.convert(model, (x,), torch.float16, policy=policy)
