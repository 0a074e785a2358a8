"""The bad-input matrix (docs/BAD_INPUTS.md): each row gets a clear exception or a correct model, never a crash,
a half-converted module or a mutated input module. Rows already covered in test_errors.py are not repeated."""
import pytest
import torch
from torch import nn

import torch_mp
from small_models import MaskedScores
from small_models import ConvBnNet


def constants_of(module):
    values = [n.output().toIValue() for n in module.graph.findAllNodes("prim::Constant")]
    return [v for v in values if isinstance(v, torch.Tensor)]


def test_parameters_requiring_grad_give_a_model_without_autograd():
    model = ConvBnNet().eval()
    assert all(p.requires_grad for p in model.parameters())
    x = torch.randn(2, 3, 16, 16)
    converted = torch_mp.convert(model, (x,), torch.float16)
    out = converted(x)
    assert not out.requires_grad
    assert all(not t.requires_grad for t in constants_of(converted))


def test_already_fp16_model_is_left_as_it_is():
    model = ConvBnNet().eval().half()
    x = torch.randn(2, 3, 16, 16).half()
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    assert report.casts == [] and report.fp32_ops() == {}  # reported as what they run in: fp16, left as it is
    assert {n["rule_kind"] for n in report.nodes} == {"not fp32"} and report.low_precision_flop_fraction == 1.0
    out = converted(x)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, model(x), rtol=0, atol=1e-3)  # only conv+bn folding differs


def test_partly_fp16_model_keeps_its_fp16_part_and_converts_the_rest():
    class Partly(nn.Module):
        def __init__(self):
            super().__init__()
            self.fp32 = nn.Linear(8, 8)
            self.fp16 = nn.Linear(8, 8).half()

        def forward(self, x):
            return self.fp16(self.fp32(x).half()).float().softmax(-1)

    model = Partly().eval()
    x = torch.randn(4, 8)
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    assert report.low_precision_ops()["aten::linear"] == 2  # the fp32 linear, converted; the fp16 one, as it was
    assert all(t.dtype == torch.float16 for t in constants_of(converted))
    out = converted(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, model(x), rtol=0, atol=2e-3)


def test_double_model_is_left_in_double():
    model = ConvBnNet().eval().double()
    x = torch.randn(2, 3, 16, 16, dtype=torch.float64)
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    assert report.casts == [] and report.low_precision_ops() == {}
    assert all(t.dtype == torch.float64 for t in constants_of(converted))
    torch.testing.assert_close(converted(x), model(x), rtol=1e-12, atol=1e-12)


def test_example_inputs_on_another_device_than_the_model():
    with pytest.raises(torch_mp.ModelRunError):
        torch_mp.convert(ConvBnNet().eval(), (torch.randn(2, 3, 16, 16, device="meta"),))


def test_example_inputs_of_the_wrong_dtype():
    with pytest.raises(torch_mp.ModelRunError):
        torch_mp.convert(ConvBnNet().eval(), (torch.randint(0, 3, (2, 3, 16, 16)),))


def test_attention_mask_beyond_fp16_range_keeps_its_meaning():
    model = MaskedScores(-1e9).eval()
    x, mask = torch.randn(2, 5, 16), torch.rand(2, 5, 5) > 0.5
    mask[..., 0] = False  # every row keeps one unmasked entry
    converted = torch_mp.convert(model, (x, mask), torch.float16)
    report = torch_mp.report_of(converted)
    guarded = {n["op"]: n for n in report.nodes if n["rule_kind"] == "range guard"}
    # the fill writes -1e9 (beyond fp16's range) and the softmax reads it: both keep fp32
    assert set(guarded) == {"aten::masked_fill", "aten::softmax"}
    assert all(n["precision"] == "fp32" for n in guarded.values())
    out = converted(x, mask)
    assert torch.isfinite(out).all()
    assert (out[mask] == 0).all()
    torch.testing.assert_close(out, model(x, mask), rtol=0, atol=5e-3)


def test_weight_beyond_fp16_range_keeps_its_layer_in_fp32():
    class Big(nn.Module):
        def __init__(self):
            super().__init__()
            self.small = nn.Linear(4, 4)
            self.large = nn.Linear(4, 4)
            with torch.no_grad():
                self.large.weight[0, 0] = 1e5

        def forward(self, x):
            return self.large(self.small(x)) * 1e-3

    model = Big().eval()
    x = torch.randn(3, 4)
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    precision = {n["output"]: n["precision"] for n in report.nodes if n["op"] == "aten::linear"}
    assert sorted(precision.values()) == ["fp32", "low"]
    assert torch.isfinite(converted(x)).all()
    torch.testing.assert_close(converted(x), model(x), rtol=5e-3, atol=1e-2)  # fp16 rounding of `small`, x1e5
    # bf16 has fp32's range: no guard needed
    bf16 = torch_mp.report_of(torch_mp.convert(model, (x,), torch.bfloat16))
    assert not any(n["rule_kind"] == "range guard" for n in bf16.nodes)


def test_nan_and_inf_in_example_inputs_still_give_a_correct_model():
    model = ConvBnNet().eval()
    x = torch.randn(2, 3, 16, 16)
    x[0, 0, 0, 0], x[1, 1, 1, 1] = float("nan"), float("inf")
    converted = torch_mp.convert(model, (x,), torch.float16)
    fresh = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(converted(fresh), model(fresh), rtol=0, atol=5e-3)


def test_empty_graph():
    class Identity(nn.Module):
        def forward(self, x):
            return x

    converted = torch_mp.convert(Identity().eval(), (torch.randn(3),), torch.float16)
    report = torch_mp.report_of(converted)
    assert report.casts == [] and report.nodes == []
    x = torch.randn(3)
    assert converted(x) is x or torch.equal(converted(x), x)


def test_output_that_is_an_input():
    class PassThrough(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x):
            return x, self.linear(x)

    converted = torch_mp.convert(PassThrough().eval(), (torch.randn(3, 4),), torch.float16)
    x = torch.randn(3, 4)
    same, projected = converted(x)
    assert torch.equal(same, x) and same.dtype == torch.float32 and projected.dtype == torch.float32


def test_undefined_tensor_outputs_of_ops_are_handled():
    """nn.MultiheadAttention with need_weights=False returns an undefined weights tensor from its fused kernel."""

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, x):
            out, _ = self.attention(x, x, x, need_weights=False)
            return out

    model = Attention().eval()
    x = torch.randn(2, 5, 16)
    converted = torch_mp.convert(model, (x,), torch.float16)
    with torch.no_grad():
        torch.testing.assert_close(converted(x), model(x), rtol=0, atol=5e-3)


def test_accuracy_metrics_work_at_tiny_magnitudes():
    from agreement import compare

    reference = torch.randn(64, dtype=torch.float64) * 1e-14
    agreement = compare(reference, reference * (1 + 1e-4))
    assert agreement.cosine > 0.999999 and agreement.max_rel_error < 2e-4
