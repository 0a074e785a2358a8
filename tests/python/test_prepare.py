"""Prepare once, convert many times: torch_mp.prepare freezes, cleans up and observes a model once; each
PreparedModel.convert equals a conversion from scratch, leaves the preparation as it was, and names nodes by the same
ids."""
import fnmatch
import re

import pytest
import torch

import torch_mp
from torch_mp.fallback import relative_error

from small_models import MlpBlock


def graph_text(module):
    """The graph's text, its unnamed values numbered in order of appearance and no mangled class names: two graphs of
    the same nodes made apart read the same."""
    text = re.sub(r"___torch_mangle_[0-9]+\.", "", str(module.graph))
    numbers = {}
    return re.sub(r"%[0-9]+\b", lambda m: numbers.setdefault(m.group(0), f"%v{len(numbers)}"), text)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return MlpBlock().eval()


def test_each_conversion_of_a_preparation_equals_one_from_scratch(model):
    x = torch.randn(8, 64)
    prepared = torch_mp.prepare(model, (x,))
    for dtype in (torch.float16, torch.bfloat16, torch.float16):
        converted = prepared.convert(dtype)
        report = torch_mp.report_of(converted)
        scratch = torch_mp.convert(model, (x,), dtype)
        scratch_report = torch_mp.report_of(scratch)
        assert graph_text(converted) == graph_text(scratch)
        assert [(n["id"], n["op"], n["precision"]) for n in report.nodes] == \
            [(n["id"], n["op"], n["precision"]) for n in scratch_report.nodes]
        assert len(report.casts) == len(scratch_report.casts)
        with torch.no_grad():
            assert torch.equal(converted(x), scratch(x))
    assert list(prepared.seconds) == ["freeze", "cleanup", "observe"]
    assert list(report.data["phases"])[:4] == ["freeze", "cleanup", "observe", "clone"]


def test_a_preparation_serves_policies_and_the_model_is_untouched(model):
    x = torch.randn(8, 64)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prepared = torch_mp.prepare(model, (x,))
    plain = prepared.convert(torch.float16)
    plain_report = torch_mp.report_of(plain)
    fp32_linears = torch_mp.OpPolicy.default("cpu_fp16").set("aten::linear", "fp32")
    kept = prepared.convert(torch.float16, policy=fp32_linears)
    kept_report = torch_mp.report_of(kept)
    linears = [n for n in kept_report.nodes if n["op"] == "aten::linear"]
    assert linears and all(n["precision"] == "fp32" for n in linears)
    assert all(n["precision"] == "low" for n in plain_report.nodes if n["op"] == "aten::linear")
    assert kept_report.data["policy"] == "cpu_fp16+edits" and plain_report.data["policy"] == "cpu_fp16"
    again = prepared.convert(torch.float16)  # the first conversions changed nothing of the preparation
    assert graph_text(again) == graph_text(plain)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_preparation_runs_the_accuracy_fallback(model):
    torch.manual_seed(1)
    batches = [(torch.randn(8, 64) * 30,) for _ in range(2)]
    prepared = torch_mp.prepare(model, batches[0], calibration_inputs=batches)
    converted = prepared.convert(torch.float16, tolerance=1e-4, progress=False)
    report = torch_mp.report_of(converted)
    fallback = report.data["fallback"]
    assert fallback["error_after"] <= 1e-4 < fallback["error_before"]
    ids = {n["id"]: n for n in report.nodes}
    assert fallback["kept_fp32"] and all(ids[k]["rule_kind"] == "fallback" for k in fallback["kept_fp32"])


def test_bad_inputs_fail_in_preparation_as_a_model_run_error(model):
    with pytest.raises(torch_mp.ModelRunError):
        torch_mp.prepare(model, (torch.randn(8, 5),))
    with pytest.raises(ValueError, match="dtype must be a low-precision"):
        torch_mp.prepare(model, (torch.randn(8, 64),)).convert(torch.float32)


@pytest.mark.parametrize("pattern", ["head", "head.*", "*.attn", "blocks.1?.mlp", "blocks.[0-2].*", "blocks.[!0]*",
                                     "*", "blocks", "b*s.1*", "[bh]*", "blocks.1[]]x", "x[", "*proj*"])
def test_exclusion_globs_match_as_fnmatch_does(pattern):
    """Exclusions are matched in C++ (core::globMatches); they must mean what Python's fnmatch means. The top
    module's own nodes (path "") are matched by a pattern that matches the empty path: "*"."""
    paths = ["head", "head.fc", "blocks.0.attn", "blocks.12.mlp", "blocks.1.mlp", "blocks.3.attn.proj", "blocks",
             "blocks.1]x", "x[", "encoder.layers.2.self_attn.out_proj", ""]
    policy = torch_mp.OpPolicy().exclude(pattern)
    for path in paths:
        parts = path.split(".") if path else []
        expected = any(fnmatch.fnmatchcase(".".join(parts[:i]), pattern) for i in range(len(parts), 0, -1)) \
            if parts else fnmatch.fnmatchcase("", pattern)
        assert policy.excludes("aten::relu", path) == expected, (pattern, path)


def test_exclusions_of_some_ops_only():
    policy = torch_mp.OpPolicy().exclude("head", ops=["aten::softmax"])
    assert policy.excludes("aten::softmax", "head.fc") and not policy.excludes("aten::relu", "head.fc")
    assert policy.exclusions == [torch_mp.policy.Exclusion("head", ("aten::softmax",), "module path matches 'head'")]


def test_the_policy_is_a_view_of_the_cpp_one():
    policy = torch_mp.OpPolicy.default("cuda_fp16")
    edited = policy.copy().set("aten::gelu", "fp32", reason="large activations").exclude("head")
    assert policy.category("aten::gelu") == "follow" and edited.category("aten::gelu") == "fp32"
    assert edited.reason("aten::gelu") == "large activations"
    assert policy.exclusions == [] and len(edited.exclusions) == 1
    assert edited.name == "cuda_fp16+edits" and policy.name == "cuda_fp16"
    assert edited.category("aten::unknown_op") == "fp32" and "aten::unknown_op" not in edited
    assert len(edited) == len(policy)
