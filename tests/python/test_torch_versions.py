"""What differs between torch releases (torch_mp._compat), checked in every CI stage (torch 2.13 and 2.15).

An extension whose compiled-in operator ids are another torch's makes cast nodes of the wrong kind (on torch 2.15's
release, an extension built against 2.15 headers ran on 2.14's libtorch and made aten::to_padded_tensor nodes where it
meant aten::to): every conversion that lowered anything failed, and one that lowered nothing passed. So the test
lowers something and checks that every node of the result is the operator it is meant to be.
"""
import pytest
import torch
from torch import nn

import torch_mp
from torch_mp import _C, _compat

LOW_TYPES = {torch.float16: "Half", torch.bfloat16: "BFloat16"}
DTYPE_CODES = {torch.float16: 5, torch.bfloat16: 15}


def test_the_extension_was_built_against_the_torch_that_runs_it():
    assert tuple(_C.BUILT_WITH_TORCH) == _compat.TORCH


def test_an_extension_of_another_torch_is_refused_by_name():
    major, minor, patch = _compat.TORCH
    with pytest.raises(ImportError, match=rf"built against torch {major}\.{minor + 1}\.{patch} but torch "):
        _compat.check_extension((major, minor + 1, patch))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_a_conversion_lowers_the_heavy_ops_with_real_casts(dtype):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 30 * 30, 10)).eval()
    x = torch.randn(2, 3, 32, 32)
    converted = torch_mp.convert(model, (x,), dtype)
    report = torch_mp.report_of(converted)
    planned = {node["op"]: node["precision"] for node in report.nodes}
    assert planned["aten::conv2d"] == "low" and planned["aten::linear"] == "low"
    graph = converted.graph
    casts = graph.findAllNodes("aten::to")
    assert sorted(cast.inputsAt(1).toIValue() for cast in casts) == sorted([DTYPE_CODES[dtype], 6])  # in, out
    low_weights = [node for node in graph.findAllNodes("prim::Constant")
                   if node.output().type().str().startswith(LOW_TYPES[dtype] + "(")]
    assert len(low_weights) >= 2  # the convolution's and the linear's weights, stored pre-cast
    for node in graph.nodes():
        if not node.kind().startswith("prim::"):
            node.schema()  # raises where the node's kind has no operator matching its inputs
    with torch.no_grad():
        torch.testing.assert_close(converted(x), model(x), atol=5e-2, rtol=5e-2)
