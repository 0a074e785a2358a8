"""The export front folds an eval-mode batch norm into the convolution before it (torch_mp/_export/fold_batch_norms.py),
as torch.jit.freeze folds it for convert: the program computes what the model does (fp32, within float rounding),
its folded weight and bias are w * gamma / sqrt(var + eps) and (b - mean) * gamma / sqrt(var + eps) + beta, and
nothing is folded where the convolution's output or weight has another reader, or where the convolution is
transposed."""
import pytest
import torch
from torch import nn

import torch_mp
from torch_mp._export.fold_batch_norms import fold_batch_norms
from torch_mp._export.inference_form import INFERENCE_BATCH_NORM, inference_form


def _random_statistics(norm: nn.BatchNorm2d) -> nn.BatchNorm2d:
    with torch.no_grad():
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2.0)
        if norm.affine:
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-1, 1)
    return norm


def _calls(program):
    return [node.target for node in program.graph.nodes if node.op == "call_function"]


@pytest.mark.parametrize("bias, affine", [(False, True), (True, True), (True, False)])
def test_a_convolution_and_its_batch_norm_become_one_convolution(bias, affine):
    conv = nn.Conv2d(3, 8, 3, bias=bias)
    model = nn.Sequential(conv, _random_statistics(nn.BatchNorm2d(8, affine=affine)), nn.ReLU()).eval()
    x = torch.randn(2, 3, 12, 12)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    folded = fold_batch_norms(inference_form(torch.export.export(model, (x,))))
    assert _calls(folded) == [torch.ops.aten.conv2d.default, torch.ops.aten.relu.default]
    torch.testing.assert_close(folded.module()(x), model(x), rtol=1e-5, atol=1e-5)
    norm = model[1]
    scale = norm.running_var.double().add(norm.eps).rsqrt() * (norm.weight.double() if affine else 1.0)
    shift = (norm.bias.double() if affine else 0.0) - norm.running_mean.double() * scale
    [weight] = [t for name, t in folded.constants.items() if name.endswith("folded_weight")]
    [folded_bias] = [t for name, t in folded.constants.items() if name.endswith("folded_bias")]
    assert torch.equal(weight, (conv.weight.double() * scale.reshape(-1, 1, 1, 1)).float())
    assert torch.equal(folded_bias, ((conv.bias.double() if bias else 0.0) * scale + shift).float())
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())  # the model as it was


def test_the_exported_low_program_has_no_batch_norm_and_stores_only_the_folded_weights():
    model = nn.Sequential(nn.Conv2d(3, 16, 3, bias=False), _random_statistics(nn.BatchNorm2d(16)), nn.ReLU()).eval()
    x = torch.randn(2, 3, 12, 12)
    program = torch_mp.export(model, (x,), torch.bfloat16)
    report = torch_mp.report_of(program)
    assert INFERENCE_BATCH_NORM not in _calls(program)
    assert {n["op"] for n in report.nodes} == {"aten::conv2d", "aten::relu"}
    assert report.weight_ratio == 0.5  # the folded weight and bias, bf16; the norm's tensors are gone
    cosine = torch.nn.functional.cosine_similarity(program.module()(x).flatten(), model(x).flatten(), dim=0)
    assert cosine > 0.999


class ConvReadTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.norm = _random_statistics(nn.BatchNorm2d(8))

    def forward(self, x):
        y = self.conv(x)
        return self.norm(y) + y


class SharedWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.norm = _random_statistics(nn.BatchNorm2d(8))

    def forward(self, x):
        return self.norm(self.conv(x)) + self.conv(x * 2.0)


@pytest.mark.parametrize("model", [
    ConvReadTwice(),
    SharedWeight(),
    nn.Sequential(nn.ConvTranspose2d(3, 8, 3), _random_statistics(nn.BatchNorm2d(8))),
    nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), _random_statistics(nn.BatchNorm2d(8))),
], ids=["output read twice", "weight read twice", "transposed", "not right after"])
def test_nothing_is_folded_where_the_pair_is_not_alone(model):
    x = torch.randn(2, 3 if not isinstance(model, SharedWeight) else 8, 12, 12)
    program = inference_form(torch.export.export(model.eval(), (x,)))
    assert fold_batch_norms(program) is program
    assert INFERENCE_BATCH_NORM in _calls(program)
