"""Policy control from Python: module-path exclusions, per-node rules, calibration inputs, low-precision IO. Each
control is tested where it changes the result and where it must not."""
import pytest
import torch
from torch import nn

import torch_mp
from small_models import ScoresThenNorm
from small_models import ConvBnNet


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        return self.softmax(torch.relu(self.fc(x))) + x


class Net(nn.Module):
    """body (two blocks) and head: module paths body.0.fc, body.1.softmax, head, ..."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(Block(32), Block(32))
        self.head = nn.Linear(32, 8)

    def forward(self, x):
        return self.head(self.body(x))


class TwoConvs(nn.Module):
    """A conv with 3 input channels, then one with 32."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, padding=1)
        self.conv = nn.Conv2d(32, 32, 3, padding=1, groups=2)

    def forward(self, x):
        return self.conv(torch.relu(self.stem(x)))


def precisions(report, op):
    """{module path: precision} of the nodes of `op`."""
    return {n["scope"]: n["precision"] for n in report.nodes if n["op"] == op}


def convert(model, inputs, policy=None, **kwargs):
    converted = torch_mp.convert(model, inputs, torch.float16, policy=policy, **kwargs)
    return converted, torch_mp.report_of(converted)


@pytest.fixture
def policy():
    return torch_mp.OpPolicy.default("cpu_fp16")


@pytest.mark.parametrize("capture", ["script", "trace"])
def test_report_names_each_nodes_module_path(capture):
    model, x = Net().eval(), torch.randn(4, 32)
    if capture == "trace":
        model = torch.jit.trace(model, (x,)).eval()
    _, report = convert(model, (x,))
    assert precisions(report, "aten::linear") == {"body.0.fc": "low", "body.1.fc": "low", "head": "low"}
    assert {n["scope"] for n in report.nodes if n["op"] == "aten::softmax"} == {"body.0.softmax", "body.1.softmax"}
    assert {n["rule_kind"] for n in report.nodes if n["op"] == "aten::linear"} == {"policy"}


@pytest.mark.parametrize(
    "pattern, excluded",
    [
        ("head", {"head"}),
        ("body.1", {"body.1.fc"}),
        ("body.*.fc", {"body.0.fc", "body.1.fc"}),
        ("*.fc", {"body.0.fc", "body.1.fc"}),
    ],
)
def test_exclusion_by_module_glob_keeps_exactly_those_nodes_fp32(policy, pattern, excluded):
    model, x = Net().eval(), torch.randn(4, 32)
    converted, report = convert(model, (x,), policy.exclude(pattern))
    linear = precisions(report, "aten::linear")
    assert {scope for scope, p in linear.items() if p == "fp32"} == excluded
    assert {scope for scope, p in linear.items() if p == "low"} == {"body.0.fc", "body.1.fc", "head"} - excluded
    rules = {n["scope"]: n for n in report.nodes if n["op"] == "aten::linear"}
    for scope in excluded:
        assert rules[scope]["rule_kind"] == "exclusion" and repr(pattern) in rules[scope]["rule"]
    torch.testing.assert_close(converted(x), model(x), atol=2e-2, rtol=2e-2)


def test_exclusion_that_matches_nothing_is_refused(policy):
    model, x = Net().eval(), torch.randn(4, 32)
    with pytest.raises(ValueError, match=r"policy.exclude\('tail.\*'\) matches no node of the model; .*body.0.fc"):
        convert(model, (x,), policy.exclude("tail.*", "*.attn"))


def test_exclusion_restricted_to_ops(policy):
    model, x = Net().eval(), torch.randn(4, 32)
    _, report = convert(model, (x,), policy.exclude("body.0", ops=["aten::relu"]))
    relu = {n["scope"]: n for n in report.nodes if n["op"] == "aten::relu"}
    assert relu["body.0"]["precision"] == "fp32" and relu["body.0"]["rule_kind"] == "exclusion"
    assert relu["body.1"]["rule_kind"] != "exclusion"
    assert precisions(report, "aten::linear")["body.0.fc"] == "low"


def test_exclusion_does_not_touch_the_policy_it_was_copied_from(policy):
    edited = policy.copy().exclude("head")
    assert policy.exclusions == [] and len(edited.exclusions) == 1
    assert edited.name == "cpu_fp16+edits"


def test_node_rule_sees_shapes_dtypes_and_constants(policy):
    seen = {}

    def keep_narrow_convs_fp32(node):
        if node.op == "aten::conv2d":
            seen[node.scope] = node
            return "fp32" if node.input_shapes[0][1] < 16 else None
        return None

    model, x = TwoConvs().eval(), torch.randn(2, 3, 16, 16)
    converted, report = convert(model, (x,), policy.add_rule(keep_narrow_convs_fp32))
    assert precisions(report, "aten::conv2d") == {"stem": "fp32", "conv": "low"}
    stem = next(n for n in report.nodes if n["scope"] == "stem" and n["op"] == "aten::conv2d")
    assert stem["rule_kind"] == "callable" and "keep_narrow_convs_fp32" in stem["rule"]
    assert seen["stem"].input_shapes[0] == (2, 3, 16, 16) and seen["stem"].input_dtypes[0] == torch.float32
    assert seen["conv"].constants["groups"] == 2 and list(seen["conv"].constants["padding"]) == [1, 1]
    assert seen["stem"].id == stem["id"]  # the rule and the report name the node alike
    torch.testing.assert_close(converted(x), model(x), atol=1e-2, rtol=1e-2)


def test_node_rule_returning_none_changes_nothing(policy):
    model, x = TwoConvs().eval(), torch.randn(2, 3, 16, 16)
    _, default = convert(model, (x,))
    _, ruled = convert(model, (x,), policy.add_rule(lambda node: None))
    assert [n["precision"] for n in ruled.nodes] == [n["precision"] for n in default.nodes]


def test_node_rule_with_reason_and_low_category(policy):
    # a rule may also put an op the table keeps in fp32 into low precision
    model, x = Net().eval(), torch.randn(4, 32)
    rule = lambda node: ("low", "softmax is safe here") if node.op == "aten::softmax" else None  # noqa: E731
    _, report = convert(model, (x,), policy.add_rule(rule))
    softmax = [n for n in report.nodes if n["op"] == "aten::softmax"]
    assert all(n["precision"] == "low" and n["rule"] == "low: softmax is safe here" for n in softmax)


@pytest.mark.parametrize(
    "rule, message",
    [(lambda node: "bogus", "expected one of"), (lambda node: 1 / 0, "division by zero")],
    ids=["bad category", "raises"],
)
def test_bad_node_rule_is_a_clear_error_and_the_model_is_untouched(policy, rule, message):
    model, x = Net().eval(), torch.randn(4, 32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=message) as error:
        convert(model, (x,), policy.add_rule(rule))
    assert "node rule failed on aten::" in str(error.value)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_policy_controls_reject_bad_arguments(policy):
    with pytest.raises(ValueError, match="at least one"):
        policy.exclude()
    with pytest.raises(TypeError, match="callable"):
        policy.add_rule("fp32")
    with pytest.raises(TypeError, match="single string"):
        policy.exclude("head", ops="aten::linear")


class Amplifier(nn.Module):
    """The middle linear layer sees its input times 1000: beyond fp16's range once inputs reach ~100."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(16, 16)
        self.outer = nn.Linear(16, 4)

    def forward(self, x):
        return self.outer(self.inner(x * 1000.0) / 1000.0)


def test_calibration_inputs_guard_ranges_the_example_inputs_never_reach():
    model = Amplifier().eval()
    small, large = torch.rand(8, 16) * 0.01, torch.randn(8, 16) * 100
    unguarded = torch_mp.convert(model, (small,), torch.float16)
    assert not torch.isfinite(unguarded(large)).all()  # 1e5 overflows fp16 inside the model

    converted, report = convert(model, (small,), calibration_inputs=[(large,), large * 0.5])
    out = converted(large)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, model(large), atol=1e-2, rtol=1e-2)
    guarded = [n for n in report.nodes if n["rule_kind"] == "range guard"]
    assert "aten::linear" in {n["op"] for n in guarded}
    inner = next(n for n in report.nodes if n["scope"] == "inner" and n["op"] == "aten::linear")
    assert inner["precision"] == "fp32" and inner["amax"] > 65504 / 2


def test_calibration_within_range_changes_nothing():
    model = Amplifier().eval()
    small = torch.rand(8, 16) * 0.01
    _, plain = convert(model, (small,))
    _, calibrated = convert(model, (small,), calibration_inputs=[(small * 0.5,)])
    assert [n["precision"] for n in calibrated.nodes] == [n["precision"] for n in plain.nodes]


def test_calibration_inputs_are_checked():
    model, x = Amplifier().eval(), torch.randn(8, 16)
    with pytest.raises(TypeError, match="list of inputs"):
        torch_mp.convert(model, (x,), torch.float16, calibration_inputs=x)
    with pytest.raises(ValueError, match=r"calibration_inputs\[1\]"):
        torch_mp.convert(model, (x,), torch.float16, calibration_inputs=[(x,), (x, x)])


class TupleOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = ConvBnNet()

    def forward(self, x):
        y = self.conv(x)
        return y, (y.argmax(-1), y.softmax(-1))


def test_low_precision_io_takes_and_returns_the_low_dtype():
    model, x = TupleOut().eval(), torch.randn(2, 3, 32, 32)
    converted, report = convert(model, (x,), keep_io_dtypes=False)
    y, (index, probabilities) = converted(x.half())
    assert (y.dtype, index.dtype, probabilities.dtype) == (torch.float16, torch.int64, torch.float16)
    reference, (reference_index, reference_probabilities) = model(x)
    torch.testing.assert_close(y.float(), reference, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(probabilities.float(), reference_probabilities, atol=2e-3, rtol=2e-2)
    # the first conv reads the fp16 input directly: no cast at the input
    first_conv = next(n for n in converted.graph.nodes() if n.kind() == "aten::conv2d")
    assert first_conv.inputsAt(0).debugName() == list(converted.graph.inputs())[1].debugName()


def test_default_io_keeps_dtypes():
    model, x = TupleOut().eval(), torch.randn(2, 3, 32, 32)
    y, (index, probabilities) = torch_mp.convert(model, (x,), torch.float16)(x)
    assert (y.dtype, index.dtype, probabilities.dtype) == (torch.float32, torch.int64, torch.float32)


def kinds_after(graph, op):
    """The kinds of the nodes after the first `op` node, in order."""
    kinds = [n.kind() for n in graph.nodes() if n.kind() != "prim::Constant"]
    return kinds[kinds.index(op) + 1:]


def test_low_fp32_output_writes_the_product_in_fp32(policy):
    model, x = ScoresThenNorm().eval(), torch.randn(4, 8, 32)
    plain, _ = convert(model, (x,), policy)
    assert kinds_after(plain.graph, "aten::matmul")[:2] == ["aten::relu", "aten::to"]  # relu in fp16, then upcast
    converted, report = convert(model, (x,), policy.copy().set("aten::matmul", "low_fp32_output", "feeds a norm"))
    # the product is cast once, right after the matmul (no CPU out_dtype kernel), and the relu runs in fp32
    assert kinds_after(converted.graph, "aten::matmul")[:3] == ["aten::to", "aten::relu", "aten::layer_norm"]
    matmul = next(n for n in converted.graph.nodes() if n.kind() == "aten::matmul")
    assert {i.type().dtype() for i in matmul.inputs()} == {torch.float16}
    (decision,) = [n for n in report.nodes if n["op"] == "aten::matmul"]
    assert decision["precision"] == "low" and decision["rule"] == "low_fp32_output: feeds a norm"
    assert precisions(report, "aten::relu") == {"": "fp32"}
    with torch.no_grad():
        torch.testing.assert_close(converted(x), model(x), rtol=0, atol=2e-2)


def test_low_fp32_output_from_a_node_rule_only_where_it_says(policy):
    model, x = Net().eval(), torch.randn(4, 32)
    rule = lambda node: "low_fp32_output" if node.scope == "body.1.fc" else None  # noqa: E731
    converted, report = convert(model, (x,), policy.copy().add_rule(rule, "fp32 product"))
    linears = [n for n in converted.graph.nodes() if n.kind() == "aten::linear"]
    assert len(linears) == 3 and all(n.output().type().dtype() == torch.float16 for n in linears)
    readers = [[use.user.kind() for use in n.output().uses()] for n in linears]
    # body.0.fc feeds its relu in fp16; body.1.fc (the rule's) is cast up at once; the head's output is cast as
    # every fp32 model output is
    assert readers == [["aten::relu"], ["aten::to"], ["aten::to"]]
    assert precisions(report, "aten::relu") == {"body.0": "low", "body.1": "fp32"}
    kinds = {n["scope"]: n["rule_kind"] for n in report.nodes if n["op"] == "aten::linear"}
    assert kinds == {"body.0.fc": "policy", "body.1.fc": "callable", "head": "policy"}
    with torch.no_grad():
        torch.testing.assert_close(converted(x), model(x), rtol=0, atol=2e-2)


def test_unknown_category_names_the_choices(policy):
    with pytest.raises(ValueError, match="low_fp32_output"):
        policy.set("aten::matmul", "fp32_out")


class LoudHead(nn.Module):
    """Values near 4e4 reach `head`: beyond half of fp16's largest number, within it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.fc(x) + 40000.0)


@pytest.mark.parametrize("front", ["convert", "export"])
def test_force_low_overrides_the_range_guard_and_says_so(front):
    model, x = LoudHead().eval(), torch.randn(8, 16)
    policy = torch_mp.OpPolicy.default("cpu_fp16", cpu_features="all")

    def heavy_nodes(policy):
        """The heavy node of `fc` and of `head`, and the converted model."""
        if front == "convert":
            converted = torch_mp.convert(model, x, torch.float16, policy=policy)
            report = torch_mp.report_of(converted)
        else:
            program = torch_mp.export(model, (x,), torch.float16, policy=policy)
            report = torch_mp.report_of(program)
            converted = program.module()
        [fc] = [n for n in report.nodes if n["scope"] == "fc" and n["flops"] > 0]
        [head] = [n for n in report.nodes if n["scope"] == "head" and n["flops"] > 0]
        return fc, head, converted

    def head_of(policy):
        _, head, converted = heavy_nodes(policy)
        return head, converted

    fc, guarded, _ = heavy_nodes(policy)
    assert (guarded["precision"], guarded["rule_kind"], guarded["guard"]["kind"]) == \
        ("fp32", "range guard", "observed overflow")
    forced, converted = head_of(policy.copy().force_low("head", reason="checked on our data"))
    assert (forced["precision"], forced["rule_kind"], forced["guard"]["kind"]) == \
        ("low", "forced low", "observed overflow")
    torch.testing.assert_close(converted(x), model(x), rtol=0, atol=64.0)  # fp16 spacing near 4e4 is 32
    # non-firing: a rule for another module leaves the guard in place
    other, _ = head_of(policy.copy().force_low("fc"))
    assert other["rule_kind"] == "range guard"
    # by node: the id the report gave the guarded head (an int for convert, the FX node's name for export)
    by_node, converted = head_of(policy.copy().force_low_nodes(guarded["id"]))
    assert (by_node["precision"], by_node["rule_kind"], by_node["guard"]["kind"]) == \
        ("low", "forced low", "observed overflow")
    torch.testing.assert_close(converted(x), model(x), rtol=0, atol=64.0)
    other_node, _ = head_of(policy.copy().force_low_nodes(fc["id"]))
    assert other_node["rule_kind"] == "range guard"


def test_force_low_arguments_are_checked(policy):
    with pytest.raises(ValueError):
        policy.force_low()
    for bad in [(), (True,), (1.5,), ("",)]:
        with pytest.raises(ValueError):
            policy.force_low_nodes(*bad)
    assert policy.copy().force_low_nodes(3, "linear_1").forced_low_nodes == {"3": "node 3", "linear_1": "node linear_1"}
    with pytest.raises(TypeError):
        policy.force_low("head", ops="aten::linear")
    with pytest.raises(ValueError):
        torch_mp.jit_pass(torch.float16, policy=policy.copy().force_low("head"))
