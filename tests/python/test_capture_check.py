"""capture_check.difference: what two runs' outputs are compared by, chunk by chunk (its copies stay a few MiB)."""

import pytest
import torch

from torch_mp import capture_check


def outputs(n: int = 5000) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(n) * 3.0


CASES = {
    "equal": (lambda x: x.clone(), None),
    "within tolerance": (lambda x: x * (1 + 5e-5), None),
    "beyond tolerance": (lambda x: torch.cat([x[:4000], x[4000:] + 1.0]), "differs from the model's by up to 1"),
    "NaN where finite": (lambda x: torch.cat([x[:4500], torch.full((500,), float("nan"))]),
                         "is NaN in 500 of 5000 values where the model's is finite"),
    "inf where finite": (lambda x: torch.cat([torch.full((3,), float("inf")), x[3:]]),
                         "is inf in 3 of 5000 values where the model's is finite"),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("chunk", [7, 1 << 18])  # many chunks, one chunk: the same verdict, word for word
def test_difference_is_the_same_in_chunks(case, chunk, monkeypatch):
    monkeypatch.setattr(capture_check, "CHUNK", chunk)
    change, expected = CASES[case]
    reference = outputs()
    found = capture_check.difference([reference], [change(reference)])
    if expected is None:
        assert found is None
    else:
        assert found is not None and expected in found, found


def test_non_finite_values_in_other_places_are_found_in_a_late_chunk(monkeypatch):
    monkeypatch.setattr(capture_check, "CHUNK", 100)
    reference = outputs()
    reference[4990] = float("inf")
    moved = reference.clone()
    moved[4990], moved[10] = 1.0, float("inf")
    assert "is inf in 1 of 5000 values" in capture_check.difference([reference], [moved])
    reference[10] = float("nan")
    other = reference.clone()
    other[4990] = float("-inf")
    assert "has its NaN or inf in other places" in capture_check.difference([reference], [other])


def test_scale_is_the_largest_magnitude_over_all_chunks(monkeypatch):
    """atol is relative to the largest finite magnitude of the whole output, which here lies in the last chunk."""
    monkeypatch.setattr(capture_check, "CHUNK", 10)
    reference = torch.zeros(100)
    reference[-1] = 1e4
    close = reference.clone()
    close[0] = 0.05  # 5e-6 of the largest magnitude: within ATOL = 1e-5 of it
    assert capture_check.difference([reference], [close]) is None
    close[0] = 0.2  # 2e-5 of it
    assert "differs from the model's by up to 0.2" in capture_check.difference([reference], [close])


def test_low_precision_outputs_get_their_epsilon():
    reference = outputs().to(torch.bfloat16)
    near = (reference.float() * (1 + 2 ** -8)).to(torch.bfloat16)  # one bf16 rounding step away, within 8 eps
    assert capture_check.difference([reference], [near]) is None


def test_output_mismatch_walks_structure_dtypes_shapes_and_values():
    x = outputs(8)
    named = torch.return_types.max((x, x.long()))  # a named tuple: compared as the tuple it is
    assert capture_check.output_mismatch((x, {"a": x, "b": [x, 2, None]}), [x, {"b": (x, 2, None), "a": x}]) is None
    assert capture_check.output_mismatch(named, (x.clone(), x.long())) is None
    cases = [
        ((x, x), (x,), (), "its output is a tuple of 1, the model's a tuple of 2"),
        ({"a": x}, {"b": x}, (), "its output is a dict of keys ['b'], the model's a dict of keys ['a']"),
        ([x, {"a": x}], [x, {"a": x.double()}], (1, "a"),
         "its output[1]['a'] has dtype torch.float64, the model's torch.float32"),
        (x, x.sum(), (), "its output has shape (), the model's (8,)"),
        ((x, 0.5), (x, 0.6), (1,), "its output[1] is float 0.6, the model's float 0.5"),
        ([x], [x + 1.0], (0,), "its output[0] differs from the model's by up to 1"),
        (x, (x,), (), "its output is a tuple of 1, the model's a tensor of shape (8,)"),
    ]
    for expected, actual, position, text in cases:
        found = capture_check.output_mismatch(expected, actual)
        assert found is not None and found.position == position and found.text.startswith(text), (text, found)


def test_the_folded_tolerance_takes_the_roundings_of_folds_and_nothing_more():
    """export checks its program after batch norms and constant subgraphs are folded: a ResNet-50 with batch-norm
    statistics of real data differs from its model by up to 4.1e-5 at a largest magnitude of 1.88 (measured, torch
    2.13, 224x224), beyond two fp32 runs' tolerance; a capture that computes otherwise differs by far more."""
    torch.manual_seed(0)
    reference = torch.randn(1000) * 0.6
    reference[0] = 1.88
    folded = reference.clone()
    folded[1:] += 4.1e-5 * torch.sign(torch.randn(999))
    assert capture_check.difference([reference], [folded]) is not None
    assert capture_check.difference([reference], [folded], rtol=capture_check.FOLDED_RTOL,
                                    atol=capture_check.FOLDED_ATOL) is None
    wrong = reference.clone()
    wrong[5] += 0.01
    assert "differs from the model's by up to 0.01" in capture_check.difference(
        [reference], [wrong], rtol=capture_check.FOLDED_RTOL, atol=capture_check.FOLDED_ATOL)
