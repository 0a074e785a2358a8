"""PyTorch's autocast op lists as a test of both fronts (issue 58, 7.3): every entry that applies on a CPU, a one-op
fp32 model (autocast_lists.py), converted by torch_mp.convert and torch_mp.export in fp16 and bf16, under the default
CPU policy and a CUDA policy (planned on this CPU, run here). Each result returns what the model returns: the same
structure, shapes and dtypes, values within 8 epsilons of the low dtype relative to the output's largest magnitude
(the inputs and the output rounded once each, and a low op's accumulation); or the front refuses it with a clear
error, only where REFUSED names it. Never a model that silently computes something else: before issue 58, convert
returned TorchScript's scalar mean for 16 of these entries (torch._C._nn.l1_loss(a, b) and the other losses called
without their reduction, which eagerly return the elementwise loss)."""
from __future__ import annotations

import pytest
import torch

import torch_mp
from autocast_lists import one_op_models
from torch_mp import capture_check

# (front, the call's op) -> why the front refuses it; a refusal not named here fails the test
REFUSED = {
    ("export", "torch.equal"): "returns a Python bool computed from tensor values: torch.export cannot capture it",
}

POLICIES = {
    "default": lambda dtype: None,  # the CPU's default, planned for a CPU with fast kernels for both (conftest)
    "cuda": lambda dtype: torch_mp.OpPolicy.default("cuda_fp16" if dtype == torch.float16 else "cuda_bf16",
                                                    cuda_capability=(9, 0)),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    found = one_op_models(str(tmp_path_factory.mktemp("autocast")))
    # torch 2.13's lists: 176 entries, of which 123 differ once fp32 and run on a CPU; a torch that drops many of
    # them (or a change that makes them not run) would shrink the test silently
    assert len(found) >= 100, len(found)
    return found


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("front", ["convert", "export"])
def test_every_entry_converts_to_what_it_computes_or_is_refused(models, front, dtype, policy, monkeypatch):
    failures = []
    for model in models:
        with torch.no_grad():
            expected = model.module(*model.inputs)
        try:
            result = getattr(torch_mp, front)(model.module, model.inputs, dtype, policy=POLICIES[policy](dtype))
        except (ValueError, TypeError, torch_mp.ConversionError) as error:
            if (front, model.call.partition("(")[0]) not in REFUSED:
                failures.append(f"{model.name}: {model.call} refused: {type(error).__name__}: {error}")
            continue
        runnable = result.module() if front == "export" else result
        with torch.no_grad():
            got = runnable(*model.inputs)
        with monkeypatch.context() as patch:  # the low dtype's tolerance, for this comparison only
            eps = torch.finfo(dtype).eps
            patch.setattr(capture_check, "RTOL", 8 * eps)
            patch.setattr(capture_check, "ATOL", 8 * eps)
            mismatch = capture_check.output_mismatch(expected, got)
        if mismatch is not None:
            failures.append(f"{model.name}: {model.call}: {mismatch.text}")
    assert not failures, "\n".join(failures)
