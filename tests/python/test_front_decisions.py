"""Both fronts take their decisions from one rule order (core/classify_node): the divergences their two copies of it
had are gone, and what still differs comes from what the IRs are (a TorchScript prim::If's blocks are planned, a
torch.export higher-order op's subgraphs are not)."""
import ast
import inspect
import textwrap

import pytest
import torch

import torch_mp
from torch_mp import _C
from torch_mp._export import facts as export_facts


def _reports(model, inputs, dtype, **options):
    return {front: torch_mp.report_of(getattr(torch_mp, front)(model, inputs, dtype, **options))
            for front in ("convert", "export")}


def _nodes(report, op):
    return [n for n in report.nodes if n["op"] == op]


class ClampedProduct(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(x).clamp(min=-1e9)  # a float scalar beyond fp16's max, 65504, in a value that stays small


def test_a_float_scalar_beyond_the_low_dtypes_max_is_the_constant_range_guard_on_both_fronts():
    """convert's frozen graph holds -1e9 as a constant, which its constant-range guard checks; export checked it only
    as a lost scalar, after the user's choices (so an exclusion hid the guard)."""
    reports = _reports(ClampedProduct().eval(), (torch.randn(4, 16),), torch.float16,
                       policy=torch_mp.OpPolicy.default("cpu_fp16"))
    for front, report in reports.items():
        [clamp] = _nodes(report, "aten::clamp")
        assert clamp["precision"] == "fp32", front
        assert clamp["rule_kind"] == "range guard", front
        assert clamp["guard"]["kind"] == "constant range", front
        assert clamp["guard"]["seen"] == 1e9 and clamp["guard"]["limit"] == 65504.0, front
    # in bfloat16 -1e9 is a number like any other: the guard does not fire
    for front, report in _reports(ClampedProduct().eval(), (torch.randn(4, 16),), torch.bfloat16).items():
        [clamp] = _nodes(report, "aten::clamp")
        assert clamp["guard"] is None, front


class Branching(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.fc(t).relu(), lambda t: self.fc(t), (x,))


def test_control_flow_is_one_rule_on_both_fronts_and_its_category_follows_from_the_ir():
    """TorchScript plans a prim::If's blocks with the graph (the If follows, its boundaries share one precision);
    torch.export's cond keeps its subgraphs as they are, so what crosses them keeps fp32. Same rule kind."""
    x = torch.randn(2, 8)
    program = torch_mp.report_of(torch_mp.export(Branching().eval(), (x,), torch.bfloat16))
    [cond] = _nodes(program, "cond")
    assert (cond["category"], cond["rule_kind"], cond["precision"]) == ("fp32", "control flow", "fp32")

    class Scripted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            if bool(x.sum() > 0):
                return self.fc(x).relu()
            return self.fc(x)

    converted = torch_mp.report_of(torch_mp.convert(torch.jit.script(Scripted().eval()), (x,), torch.bfloat16))
    [branch] = _nodes(converted, "prim::If")
    assert (branch["category"], branch["rule_kind"]) == ("follow", "control flow")


def test_the_export_front_asks_the_node_rule_only_where_the_rule_order_reaches_it():
    """The callable is asked by the core's rule order, as on convert: not for a node a guard keeps fp32."""
    asked = []

    def rule(node):
        asked.append(node.op)
        return None

    policy = torch_mp.OpPolicy.default("cpu_fp16").add_rule(rule)
    reports = _reports(ClampedProduct().eval(), (torch.randn(4, 16),), torch.float16, policy=policy)
    assert "aten::clamp" not in asked and "aten::linear" in asked
    for report in reports.values():
        [linear] = _nodes(report, "aten::linear")
        assert linear["rule_kind"] != "callable"


def _linear_facts(**facts):
    """The facts of a plain aten::linear node, `facts` changed."""
    fields = dict(op="aten::linear", scope="", id="", boundary=_C.Boundary.none, unobserved=False, not_fp32=False,
                  control_flow=_C.ControlFlow.none, kept_non_finite=False, kept_by_fallback=False, runs_int8=False,
                  observed_range=None, underflow_to_zero=None, constant_range=None, lost_scalar=None,
                  reads_table_stored_low=False, writes_tensor_list=False, sums_nothing=False)
    fields.update(facts)
    return _C.NodeFacts(**fields)


def _numbers(observed=(), constants=(), scalars=()):
    return _C.RangeGuardNumbers(
        observed=[_C.ObservedNumber(name=n, largest_magnitude=m, only_integers=i) for n, m, i in observed],
        constants=[_C.NamedNumber(name=n, value=v) for n, v in constants],
        scalars=[_C.NamedNumber(name=n, value=v) for n, v in scalars])


def _judged(options, **numbers):
    """The facts of a linear node whose numbers are these, judged by core/range_guards in the options' dtype."""
    ranges = _C.judge_ranges(_numbers(**numbers), options)
    return _linear_facts(observed_range=ranges.observed_range, constant_range=ranges.constant_range,
                         lost_scalar=ranges.lost_scalar)


@pytest.mark.parametrize("fact, value, kind", [
    ("not_fp32", True, "not fp32"),
    ("unobserved", True, "unobserved"),
    ("control_flow", _C.ControlFlow.opaque_subgraphs, "control flow"),
    ("kept_non_finite", True, "non-finite"),
    ("kept_by_fallback", True, "fallback"),
    ("sums_nothing", True, "sums nothing"),
    ("scalars", [("clamp[1]", 1e-50)], "range guard"),
    ("constants", [("mask", 1e39)], "range guard"),
    ("observed", [("x", 3e38, False)], "range guard"),
])
def test_classify_nodes_takes_every_fact_the_export_front_gives(fact, value, kind):
    options = torch_mp.ConversionOptions(dtype=torch.bfloat16, policy=torch_mp.OpPolicy.default("cpu_bf16")).bind_request()
    facts = _judged(options, **{fact: value}) if fact in ("scalars", "constants", "observed") else \
        _linear_facts(**{fact: value})
    [plain, decided] = _C.classify_nodes([_linear_facts(), facts], options)
    assert (plain.category, plain.rule_kind, plain.guard) == ("low", "policy", None)
    assert plain.reason == torch_mp.OpPolicy.default("cpu_bf16")._c.entry("aten::linear")[1]
    assert decided.rule_kind == kind


@pytest.mark.parametrize("fact, value, dtype, guard", [
    ("scalars", [("clamp[1]", 1e-8)], torch.float16, "lost scalar"),
    ("constants", [("mask", 1e9)], torch.float16, "constant range"),
    ("observed", [("x", 40000.0, False)], torch.float16, "observed overflow"),
    ("observed", [("pos", 300.0, True)], torch.bfloat16, "observed integers"),
])
def test_the_range_guards_judge_the_numbers_in_the_options_dtype(fact, value, dtype, guard):
    """core/range_guards, not the front, decides whether a number fits: the same numbers pass in the other dtype."""
    def decide(low):
        target = "cpu_fp16" if low == torch.float16 else "cpu_bf16"
        options = torch_mp.ConversionOptions(dtype=low, policy=torch_mp.OpPolicy.default(target)).bind_request()
        return _C.classify_nodes([_judged(options, **{fact: value})], options)[0]

    decided = decide(dtype)
    assert decided.rule_kind == "range guard" and decided.guard["kind"] == guard
    assert decided.guard["value"] == value[0][0]
    assert decide(torch.bfloat16 if dtype == torch.float16 else torch.float16).rule_kind != "range guard"


def _node_facts_fields():
    return {name for name, attribute in vars(_C.NodeFacts).items() if isinstance(attribute, property)}


def test_node_facts_refuses_a_misspelt_or_missing_field():
    """The seam is typed: a misspelt fact is an error, not a fact silently false on the export front only."""
    with pytest.raises(TypeError):
        _linear_facts(kept_by_fallbak=True)
    for field in _node_facts_fields():
        fields = {name: getattr(_linear_facts(), name) for name in _node_facts_fields() - {field}}
        with pytest.raises(TypeError):
            _C.NodeFacts(**fields)
    facts = _linear_facts()
    with pytest.raises(AttributeError):
        facts.kept_by_fallbak = True


def test_the_export_front_sets_every_field_node_facts_has(monkeypatch):
    """facts.py names every field of the bound core::NodeFacts (as its constructor requires), and the facts it
    gathers of a program are NodeFacts."""
    source = textwrap.dedent(inspect.getsource(export_facts.ProgramFacts._facts))
    [call] = [node for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Call) and ast.unparse(node.func) == "_C.NodeFacts"]
    assert {keyword.arg for keyword in call.keywords} == _node_facts_fields()

    gathered = []
    classify_nodes = _C.classify_nodes

    def recording(nodes, *rest):
        gathered.extend(nodes)
        return classify_nodes(nodes, *rest)

    monkeypatch.setattr(_C, "classify_nodes", recording)
    torch_mp.export(ClampedProduct().eval(), (torch.randn(4, 16),), torch.float16)
    assert gathered and all(isinstance(facts, _C.NodeFacts) for facts in gathered)
    linear = next(facts for facts in gathered if facts.op == "aten::linear")
    assert linear.scope == "fc" and linear.control_flow == _C.ControlFlow.none


class RecurrentClassifier(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(12, 16, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


@pytest.mark.parametrize("cell, gates", [(torch.nn.LSTM, 4), (torch.nn.GRU, 3)])
def test_a_recurrent_op_counts_the_same_flops_on_both_fronts(cell, gates):
    """One formula (core/flop_formulas): every 2-D weight once per step and batch row. Export counted an LSTM 0
    FLOPs, and convert a GRU 0 (it read the GRU's hx as its weights list)."""
    batch, steps = 2, 7
    weights = gates * 16 * 12 + gates * 16 * 16 + 2 * gates * 16 * 16  # layer 0: input and hidden; layer 1: both 16
    reports = _reports(RecurrentClassifier(cell).eval(), (torch.randn(batch, steps, 12),), torch.bfloat16)
    op = "aten::lstm" if cell is torch.nn.LSTM else "aten::gru"
    for front, report in reports.items():
        [rnn] = _nodes(report, op)
        assert rnn["flops"] == 2 * batch * steps * weights, front
    assert reports["convert"].low_precision_flop_fraction == pytest.approx(
        reports["export"].low_precision_flop_fraction, abs=1e-9)


class DeadWeight(torch.nn.Module):
    """An unused parameter, a branch whose result nothing reads, a functional dropout in eval mode."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.unused = torch.nn.Linear(16, 64)
        self.side = torch.nn.Linear(16, 32)

    def forward(self, x):
        self.side(x).relu()  # nothing reads it
        return torch.nn.functional.dropout(self.fc(x), 0.5, self.training)


def test_export_drops_what_nothing_reads_as_freezing_does_and_counts_the_same_weights():
    """convert's frozen module holds only what its graph reads; the exported program kept unused parameters fp32
    (weight ratio 0.83 against convert's 0.50 here), planned and counted the FLOPs of calls whose results nothing
    reads, and a dropout that changes nothing in eval mode."""
    model, x = DeadWeight().eval(), torch.randn(4, 16)
    program = torch_mp.export(model, (x,), torch.bfloat16)
    export = torch_mp.report_of(program)
    convert = torch_mp.report_of(torch_mp.convert(model, (x,), torch.bfloat16))
    assert set(program.state_dict) == {"fc.weight", "fc.bias"}
    assert [n["op"] for n in export.nodes] == ["aten::linear"]
    assert export.data["weight_bytes_before"] == convert.data["weight_bytes_before"] == (16 * 16 + 16) * 4
    assert export.weight_ratio == pytest.approx(convert.weight_ratio) == pytest.approx(0.5)
    assert [n["flops"] for n in export.nodes] == [n["flops"] for n in convert.nodes if n["op"] == "aten::linear"]
    torch.testing.assert_close(program.module()(x), model(x), atol=0.05, rtol=0.05)
    assert set(dict(model.named_parameters())) == {"fc.weight", "fc.bias", "unused.weight", "unused.bias",
                                                   "side.weight", "side.bias"}  # the user's module is untouched


def test_a_program_without_heavy_ops_has_all_its_heavy_flops_low_on_both_fronts():
    """The low-FLOP share of a graph without heavy ops is 1 (ConversionReport::lowPrecisionFlopFraction); export
    said 0."""
    model, x = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh()).eval(), torch.randn(4, 8)
    for front, report in _reports(model, (x,), torch.bfloat16).items():
        assert report.low_precision_flop_fraction == 1.0, front


class SharedScale(torch.nn.Module):
    """One parameter read by a low matmul and by an fp32 layer norm, and a larger weight only a low linear reads."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16) / 4)
        self.fc = torch.nn.Linear(16, 64, bias=False)

    def forward(self, x):
        return self.fc(torch.nn.functional.layer_norm(x @ self.w, (16,), self.w[0], None))


def test_a_weight_read_in_both_precisions_is_stored_as_convert_stores_it():
    """core/stored_weights: w stored fp32 and low (1024 + 512 bytes), which keeps the weights below the fp32 model's
    (5120 bytes) since fc's weight is stored low (2048): weight ratio 0.7 on both fronts. Export stored w once, fp32,
    its low reader casting it per call (0.6)."""
    model, x = SharedScale().eval(), torch.randn(4, 16)
    program = torch_mp.export(model, (x,), torch.bfloat16)
    export = torch_mp.report_of(program)
    convert = torch_mp.report_of(torch_mp.convert(model, (x,), torch.bfloat16))
    assert export.weight_ratio == pytest.approx(convert.weight_ratio) == pytest.approx(3584 / 5120)
    low_copies = [name for name, tensor in program.constants.items() if tensor.dtype == torch.bfloat16]
    assert len(low_copies) == 1 and program.state_dict["w"].dtype == torch.float32
    assert program.state_dict["fc.weight"].dtype == torch.bfloat16
    [matmul] = [n for n in program.graph.nodes if n.target == torch.ops.aten.matmul.default]
    assert matmul.args[1].name == low_copies[0]  # no cast per call
    torch.testing.assert_close(program.module()(x), model(x), atol=0.1, rtol=0.05)


class Twice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(x).relu() + self.fc(x) * 0.5 + self.fc(x) * 0.25


def test_a_call_repeated_on_the_same_values_runs_once_on_both_fronts():
    """TorchScript's common subexpression elimination merges the three self.fc(x); the exported program computed
    (and counted, 3x the FLOPs) each. Calls whose arguments differ (the two products) stay apart."""
    model, x = Twice().eval(), torch.randn(4, 16)
    program = torch_mp.export(model, (x,), torch.bfloat16)
    export = torch_mp.report_of(program)
    convert = torch_mp.report_of(torch_mp.convert(model, (x,), torch.bfloat16))
    for report in (convert, export):
        assert [n["op"] for n in report.nodes].count("aten::linear") == 1
        assert [n["op"] for n in report.nodes].count("aten::mul") == 2
    torch.testing.assert_close(program.module()(x), model(x), atol=0.1, rtol=0.05)


def test_the_planner_option_plans_both_fronts_alike():
    """planner= reaches export's planner call too (it refused anything but min-cut); both fronts plan alike with either."""
    class Alternating(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

        def forward(self, x):
            return self.fc2(torch.softmax(self.fc1(x), -1).relu() + x)

    model, x = Alternating().eval(), torch.randn(4, 16)
    for planner in ("min-cut", "greedy"):
        reports = _reports(model, (x,), torch.bfloat16, planner=planner)
        for front, report in reports.items():
            assert report.data["planner"] == planner, front
        assert [n["precision"] for n in reports["convert"].nodes if n["op"] in ("aten::add", "aten::relu")] == \
            [n["precision"] for n in reports["export"].nodes if n["op"] in ("aten::add", "aten::relu")], planner
