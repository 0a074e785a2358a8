"""The zoo through torch_mp.export: every model torch.export can capture converts, keeps its outputs' dtypes and
stays within the accuracy suite's tolerances of fp32 (test_zoo_accuracy.py's, the same per-model exceptions), and
both fronts decide alike on it (tests/python/front_parity.py: the heavy ops' precisions by module path, FLOPs,
the rules keeping heavy ops fp32, weight ratios, report keys)."""
import pytest
import torch

import torch_mp
from evaluate import evaluate
from front_parity import differences
from registry import build_model, load_zoo
from test_zoo_accuracy import BF16, F16, assert_within_tolerances

ZOO = load_zoo()
# Models torch.export cannot capture, and why.
NOT_EXPORTABLE = {
    "control_flow": "branches on a tensor's value in Python (`if x.sum() > 0`): torch.export needs torch.cond there",
}

# The exported program meets convert's tolerances on every model (test_zoo_accuracy.TOLERANCES and their
# per-model entries): LeViT's index buffers and IBN-a's batch norms, which kept it wider, are folded or dropped as
# freezing does (fold_batch_norms.py, the unread state apply drops).


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(set(ZOO) - set(NOT_EXPORTABLE)))
def test_exported_zoo_model_against_fp32_and_convert(name, dtype):
    entry = ZOO[name]
    model = build_model(entry)
    example = entry.inputs()  # drawn after the model's initialisation, as evaluate draws its own
    result = evaluate(entry, dtype, front="export", example=example)
    assert result.capture == "export"
    assert_within_tolerances(result, entry, name, dtype)
    convert = torch_mp.report_of(torch_mp.convert(model, example, dtype))
    assert differences(convert, result.report) == []


@pytest.mark.parametrize("name", sorted(NOT_EXPORTABLE))
def test_a_model_export_cannot_capture_is_a_clear_error(name):
    entry = ZOO[name]
    with pytest.raises(ValueError, match=f"torch.export could not capture {type(build_model(entry)).__name__}"):
        torch_mp.export(build_model(entry), entry.inputs(), torch.float16)
