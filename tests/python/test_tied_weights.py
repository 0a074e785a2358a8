"""Tied weights on the export front (issue 59, item 5: GPT-2's lm_head shares its token table): a strict capture lifts
one placeholder for the tied tensor, and the state_dict keeps its other name without one. Both names must hold the
one low tensor: the fp32 original left under the other name made the program store more than fp32 did (GPT-2's
static-cache wrapper: weights 0.626 of fp32's)."""
import torch
from torch import nn

import torch_mp


class TiedHead(nn.Module):
    """A token table read by the embedding and, tied, by the output layer (as GPT-2's wte and lm_head)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(256, 32)
        self.proj = nn.Linear(32, 32, bias=False)
        self.head = nn.Linear(32, 256, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.proj(self.embed(ids)))


def test_a_tied_name_without_a_placeholder_names_the_low_tensor():
    model, ids = TiedHead().eval(), torch.randint(0, 256, (2, 5))
    exported = torch.export.export(model, (ids,), strict=True)
    assert [spec.target for spec in exported.graph_signature.input_specs if spec.target] == \
        ["embed.weight", "proj.weight"]  # head.weight has no placeholder: it is only in the state_dict
    program = torch_mp.export(exported, dtype=torch.bfloat16,
                              policy=torch_mp.OpPolicy.default("cpu_bf16", cpu_features="all"))
    report = torch_mp.report_of(program)
    state = program.state_dict
    assert state["head.weight"] is state["embed.weight"] and state["embed.weight"].dtype == torch.bfloat16
    fp32_bytes = (256 * 32 + 32 * 32) * 4
    assert (report.data["weight_bytes_before"], report.data["weight_bytes_after"]) == (fp32_bytes, fp32_bytes // 2)
    assert model.embed.weight.dtype == torch.float32  # the model's own table is untouched
    expected = model(ids)
    torch.testing.assert_close(program.module()(ids), expected, rtol=0, atol=0.05 * float(expected.abs().max()))
