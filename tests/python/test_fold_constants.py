"""The export front folds what a program computes from its stored tensors alone into lifted constants
(torch_mp/_export/fold_constants.py), as freezing's constant propagation folds it for convert (issue 58, 7.2): the
exact calls before and after on a hand-built module shaped like Swin V2's continuous position bias, the folded
constants and the program's outputs bit-equal to the unfolded program's, the given program and the model untouched;
nothing folded where a call is random, reads a tensor the program writes, is only views and copies, is
returned, or reads no stored tensor."""
import pytest
import torch
from torch import nn
from torch.export.graph_signature import InputKind

import torch_mp
from torch_mp._export.fold_constants import fold_constants
from torch_mp._export.inference_form import inference_form

aten = torch.ops.aten


class PositionBias(nn.Module):
    """Swin V2's attention bias in small: an MLP on a constant coordinate table, gathered by a constant index,
    16 * sigmoid; a clamped, exponentiated logit scale; then the input's own linear reads both."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(1, 5, 5, 2))
        self.register_buffer("index", torch.randint(0, 25, (16,)))
        self.mlp = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2, bias=False))
        self.logit_scale = nn.Parameter(torch.randn(2, 1, 1))
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        bias = self.mlp(self.table).view(-1, 2)[self.index].view(4, 4, 2).permute(2, 0, 1)
        scale = torch.clamp(self.logit_scale, max=4.0).exp()
        return self.proj(x) * scale + 16 * torch.sigmoid(bias)


def _calls(program):
    return [node.target for node in program.graph.nodes if node.op == "call_function"]


def _constants(program):
    return {spec.arg.name for spec in program.graph_signature.input_specs if spec.kind == InputKind.CONSTANT_TENSOR}


def test_the_position_bias_mlp_and_the_logit_scale_become_two_constants():
    model = PositionBias().eval()
    x = torch.randn(2, 4, 4)
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    program = inference_form(torch.export.export(model, (x,)))
    assert _calls(program) == [aten.linear.default, aten.relu.default, aten.linear.default, aten.view.default,
                               aten.index.Tensor, aten.view.default, aten.permute.default, aten.clamp.default,
                               aten.exp.default, aten.linear.default, aten.mul.Tensor, aten.sigmoid.default,
                               aten.mul.Tensor, aten.add.Tensor]
    before = _calls(program)
    folded = fold_constants(program)
    assert _calls(program) == before  # the given program is not changed
    assert _calls(folded) == [aten.linear.default, aten.mul.Tensor, aten.add.Tensor]  # only what reads x
    assert _constants(folded) == {"exp_folded", "mul_1_folded"}
    linear, scaled, added = [node for node in folded.graph.nodes if node.op == "call_function"]
    assert [a.name for a in scaled.args] == ["linear_2", "exp_folded"]
    assert [a.name for a in added.args] == ["mul", "mul_1_folded"]
    with torch.no_grad():
        mlp = model.mlp(model.table).view(-1, 2)[model.index].view(4, 4, 2).permute(2, 0, 1)
        assert torch.equal(folded.constants["mul_1_folded"], 16 * torch.sigmoid(mlp))
        assert torch.equal(folded.constants["exp_folded"], torch.clamp(model.logit_scale, max=4.0).exp())
        assert folded.constants["mul_1_folded"].dtype == torch.float32
        assert torch.equal(folded.module()(x), program.module()(x))  # bit-equal: the same ops on the same tensors
    assert all(torch.equal(state[name], tensor) for name, tensor in model.state_dict().items())


class RandomOnWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return x @ (self.weight + torch.rand_like(self.weight))  # a fresh draw at each call


class ViewsOfWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return x @ self.weight.t().reshape(4, 4).clone()  # nothing computed: the plan stores the weight once


class ReturnsComputedWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return x @ self.weight, self.weight * 2.0  # the second output stays computed from the weight


class CountsCalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1.0)
        return x + self.calls * 2.0  # the buffer is state: another value at each call


class FactoryOnly(nn.Module):
    def forward(self, x):
        return x + torch.arange(4, dtype=torch.float32).exp()  # no stored tensor under it


@pytest.mark.parametrize("model", [RandomOnWeight(), ViewsOfWeight(), ReturnsComputedWeight(), CountsCalls(),
                                   FactoryOnly()],
                         ids=["random", "views and copies", "returned", "a written buffer", "no stored tensor"])
def test_nothing_is_folded_where_it_must_not_be(model):
    program = inference_form(torch.export.export(model.eval(), (torch.randn(3, 4),)))
    assert fold_constants(program) is program


def test_the_exported_low_program_plans_no_node_of_the_folded_mlp():
    model = PositionBias().eval()
    x = torch.randn(2, 4, 4)
    program = torch_mp.export(model, (x,), torch.bfloat16)
    report = torch_mp.report_of(program)
    assert [(n["op"], n["scope"]) for n in report.nodes] == [("aten::linear", "proj"), ("aten::mul", ""),
                                                            ("aten::add", "")]
    cosine = torch.nn.functional.cosine_similarity(program.module()(x).flatten(), model(x).flatten(), dim=0)
    assert cosine > 0.999
