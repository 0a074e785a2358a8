"""Hypothesis drives the graph fuzzer (graph_fuzzer.py): every random program converts to fp16 and bf16, lints,
runs, keeps its output dtypes and stays within the error bound derived from each output's depth. The long run is
`python tests/python/graph_fuzzer.py --graphs 10000`."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_fuzzer import Chooser, check_conversion, check_fronts_agree, generate_program


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_convert_correctly(dtype, data):
    chooser = Chooser(lambda low, high: data.draw(st.integers(low, high)))
    source, output_depths = generate_program(chooser)
    check_conversion(source, output_depths, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_are_decided_alike_on_both_fronts(dtype, data):
    """The differential fuzz, small (the long run: graph_fuzzer.py --fronts, benchmarks/results/RESULTS.md)."""
    chooser = Chooser(lambda low, high: data.draw(st.integers(low, high)))
    source, _ = generate_program(chooser, control_flow=False)
    check_fronts_agree(source, dtype)
