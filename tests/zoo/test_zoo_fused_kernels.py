"""kernels="fused" on real architectures: the fused output is bit for bit the portable output (each fused op rounds
where the aten op it replaces does), on the zoo models with the most fusible chains (residual add + relu in
ResNets and RegNets, DenseNet's norm-relu chains, GPT-2's residual adds and casts; BERT has none left since its
layer norms read and write the low residual sums on CPU)."""
import pytest
import torch

import torch_mp
from evaluate import build_model, flatten_tensors
from registry import load_zoo

ZOO = load_zoo()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", ["tv.resnet50", "tv.densenet121", "timm.regnetx_002", "hf.gpt2"])
def test_fused_output_is_the_portable_output(name, dtype):
    entry = ZOO[name]
    model, inputs = build_model(entry), entry.inputs()
    portable = torch_mp.convert(model, inputs, dtype)
    fused = torch_mp.convert(model, inputs, dtype, kernels="fused")
    report = torch_mp.report_of(fused)
    calls = sum(1 for n in fused.graph.nodes() if n.kind() == "torch_mp::fused_pointwise")
    assert calls == report.data["fused_pointwise"] >= 12
    with torch.no_grad():
        expected, actual = flatten_tensors(portable(*inputs)), flatten_tensors(fused(*inputs))
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual):
        assert e.dtype == a.dtype and torch.equal(e, a)
