"""The export front's stages one at a time, on tiny programs (torch.ao's checkGraphModuleNodes style): each test
exports a small model, cleans it up and observes it as torch_mp.export does, runs one stage on its records and checks
exactly what that stage hands on: decide (facts.py) a Decision's fields, plan (plan.py) the precision per node, apply
(apply.py) the casts and the converted graph's nodes, verify (verify.py) where a plan turns values non-finite."""
import pytest
import torch

from torch_mp._export.apply import apply_plan
from torch_mp._export.conversion import _clean_up
from torch_mp._export.facts import ProgramFacts
from torch_mp._export.ir import CAST, _op_name, stored_tensors
from torch_mp._export.observe import observe
from torch_mp._export.plan import plan_precision
from torch_mp._export.records import Cast, NonFinite, Plan, Weights
from torch_mp._export.verify import find_non_finite
from torch_mp._inputs import CallInputs, module_inputs
from torch_mp.options import ConversionOptions


class Scaled(torch.nn.Module):
    """linear -> relu -> (times `scale`) -> softmax."""

    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.scale = scale

    def forward(self, x):
        return torch.softmax(torch.relu(self.linear(x)) * self.scale, -1)


class Stages:
    """A model's program cleaned up and observed on `x` (what ProgramConversion holds), and its options' stages."""

    def __init__(self, model: torch.nn.Module, x: torch.Tensor, **options):
        self.program = _clean_up(torch.export.export(model.eval(), (x,)), type(model).__name__)
        self.runs = [CallInputs((x,), {})]
        self.observation = observe(self.program, self.runs)
        self.stored = stored_tensors(self.program)
        self.options = ConversionOptions.of(None, dtype=torch.float16, **options).for_device("cpu")
        self.bound = self.options.bind_request()

    def decide(self, keep_fp32=()):
        facts = ProgramFacts(self.program, self.observation, self.stored, self.options.policy, self.bound)
        return facts.decide(set(keep_fp32), set())

    def plan(self, keep_fp32=()):
        return plan_precision(self.program, self.decide(keep_fp32), self.observation, self.stored, self.options,
                              self.bound)

    def plan_of(self, precision, low_io=False):
        """A plan written by hand, over the decided nodes."""
        return Plan(self.decide(), precision, set(), torch.float16, low_io)


def calls(program):
    """(op, the names of the nodes it reads, its dtype argument) per call, in graph order."""
    return [(_op_name(node), [arg.name for arg in node.all_input_nodes], node.kwargs.get("dtype"))
            for node in program.graph.nodes if node.op == "call_function"]


X = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 12


def test_decide_gives_each_planned_node_its_op_module_and_the_policys_category():
    decisions = Stages(Scaled(), X).decide()
    assert [(d.node.name, d.op, d.scope, d.verdict.category, d.verdict.rule_kind) for d in decisions] == [
        ("linear", "aten::linear", "linear", "low", "policy"),
        ("relu", "aten::relu", "", "follow", "policy"),
        ("mul", "aten::mul", "", "follow", "policy"),
        ("softmax", "aten::softmax", "", "fp32", "policy"),
    ]


def test_decide_keeps_what_the_fallback_keeps_and_what_leaves_the_low_range_fp32():
    kept = Stages(Scaled(), X).decide(keep_fp32={"linear"})
    assert [(d.node.name, d.verdict.category, d.verdict.rule_kind) for d in kept][:2] == [
        ("linear", "fp32", "fallback"), ("relu", "follow", "policy")]
    guarded = {d.node.name: d.verdict for d in Stages(Scaled(1e6), X).decide()}
    assert (guarded["mul"].category, guarded["mul"].rule_kind) == ("fp32", "range guard")
    assert guarded["mul"].guard is not None
    assert (guarded["relu"].category, guarded["relu"].rule_kind) == ("follow", "policy")


def test_plan_runs_follow_nodes_where_they_cost_no_casts():
    stages = Stages(Scaled(), X)
    plan = stages.plan()
    assert plan.precision == {"linear": "low", "relu": "low", "mul": "low", "softmax": "fp32"}
    assert (plan.forced_fp32, plan.low_dtype, plan.low_io) == (set(), torch.float16, False)
    assert [d.node.name for d in plan.decisions] == ["linear", "relu", "mul", "softmax"]
    # the linear kept fp32: the follow nodes between it and the softmax stay fp32, with no cast at all
    assert stages.plan(keep_fp32={"linear"}).precision == {name: "fp32" for name in plan.precision}


def test_plan_with_low_precision_io_runs_the_follow_nodes_low_up_to_the_fp32_softmax():
    plan = Stages(Scaled(), X, keep_io_dtypes=False).plan()
    assert plan.low_io
    assert plan.precision == {"linear": "low", "relu": "low", "mul": "low", "softmax": "fp32"}


def test_apply_casts_each_value_once_where_its_reader_needs_another_dtype():
    stages = Stages(Scaled(), X)
    applied = apply_plan(stages.program, stages.plan_of({"linear": "low", "relu": "fp32", "mul": "fp32",
                                                         "softmax": "fp32"}),
                         stages.observation, stages.stored)
    assert calls(applied.program) == [
        ("aten::_to_copy", ["x"], torch.float16),
        ("aten::linear", ["_to_copy_default", "p_linear_weight", "p_linear_bias"], None),
        ("aten::_to_copy", ["linear"], torch.float32),
        ("aten::relu", ["_to_copy_default_1"], None),
        ("aten::mul", ["relu"], None),
        ("aten::softmax", ["mul"], None),
    ]
    assert applied.casts == [Cast("_to_copy_default", "x", "Float", "Half", 12 * 6),
                             Cast("_to_copy_default_1", "linear", "Half", "Float", 12 * 6)]
    assert [(item.name, item.reads, item.cast_index) for item in applied.graph] == [
        ("_to_copy_default", [], 0), ("linear", ["_to_copy_default"], -1), ("_to_copy_default_1", ["linear"], 1),
        ("relu", ["_to_copy_default_1"], -1), ("mul", ["relu"], -1), ("softmax", ["mul"], -1)]
    assert applied.weights == Weights(bytes_before=20 * 4, bytes_after=20 * 2, kept_fp32=[])
    assert {name: tensor.dtype for name, tensor in applied.program.state_dict.items()} == {
        "linear.weight": torch.float16, "linear.bias": torch.float16}


def test_apply_with_low_precision_io_takes_the_input_low_and_returns_the_output_low():
    stages = Stages(Scaled(), X)
    applied = apply_plan(stages.program, stages.plan_of({"linear": "low", "relu": "low", "mul": "low",
                                                         "softmax": "fp32"}, low_io=True),
                         stages.observation, stages.stored)
    assert [(cast.value, cast.source, cast.target) for cast in applied.casts] == [
        ("mul", "Half", "Float"), ("softmax", "Float", "Half")]
    assert [node.meta["val"].dtype for node in applied.program.graph.nodes if node.op == "placeholder"] == \
        [torch.float16] * 3
    assert sum(node.target is CAST for node in applied.program.graph.nodes) == 2
    output = applied.program.module()(X.half())
    assert output.dtype == torch.float16


@pytest.mark.parametrize("squares_low", [True, False])
def test_verify_finds_the_first_output_a_plan_turns_non_finite(squares_low):
    class Squares(torch.nn.Module):
        def forward(self, x):
            y = x * 1000.0
            return y * y  # up to 1e6: beyond fp16's 65504

    stages = Stages(Squares(), X)
    applied = apply_plan(stages.program, stages.plan_of({"mul": "low", "mul_1": "low" if squares_low else "fp32"}),
                         stages.observation, stages.stored)
    found = find_non_finite(applied.program, stages.runs, stages.observation,
                            lambda inputs: module_inputs(stages.options, inputs))
    assert found == (NonFinite(run=0, tensor=0, value="") if squares_low else None)
