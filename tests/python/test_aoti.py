"""torch_mp.aoti_compile: AOTInductor packages of torch_mp.export's programs compute what the program does.

Each compile takes tens of seconds on a 2-core machine: this file holds the suite's only five. The C++ loader runs a
package in ctest (aoti_package, tests/aoti/check.sh).
"""
import warnings

import pytest
import torch

import torch_mp
from torch_mp._compat import INDUCTOR_CPU_ROUNDS_AT_CASTS


class RoundTrip(torch.nn.Module):
    """relu, planned low by the policy, between an fp32 input and an fp32 exp: its casts are an fp32 -> fp16 -> fp32
    round trip, which Inductor would compute in fp32 straight through inside one fused kernel."""

    def forward(self, x):
        return torch.exp(torch.relu(x))


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("aoti")
    policy = torch_mp.OpPolicy.default("cpu_fp16").set("aten::relu", "low", "the test's round trip")
    # 1 + 2^-12 and its neighbours: not float16 numbers, so the round trip changes them
    x = 1.0 + torch.arange(64, dtype=torch.float32).reshape(8, 8) * 2.0 ** -12
    paths, reports, warned = {}, {}, {}
    for emulate in (True, False):
        path = str(folder / f"round_trip_{emulate}.pt2")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            paths[emulate] = torch_mp.aoti_compile(
                RoundTrip().eval(), (x,), torch.float16, path, policy=policy,
                inductor_configs={"emulate_precision_casts": emulate})
            reports[emulate] = torch_mp.report_of(paths[emulate])
        warned[emulate] = [str(w.message) for w in caught if "round trip" in str(w.message)]
    program = torch_mp.export(RoundTrip().eval(), (x,), torch.float16, policy=policy)
    return x, program, paths, reports, warned


def test_the_package_rounds_where_the_program_casts(packages):
    x, program, paths, reports, warned = packages
    assert [n.kwargs["dtype"] for n in program.graph.nodes if n.target is torch.ops.aten._to_copy.default] == \
        [torch.float16, torch.float32]
    expected = program.module()(x)
    rounded = torch._inductor.aoti_load_package(paths[True])(x)
    # the casts are what makes the difference: without emulate_precision_casts the package skips the rounding
    unrounded = torch._inductor.aoti_load_package(paths[False])(x)
    assert not torch.allclose(unrounded, expected, rtol=1e-5, atol=0)
    torch.testing.assert_close(unrounded, torch.exp(x), rtol=1e-6, atol=0)
    assert reports[False].data["aoti_rounds_at_casts"] is False and not warned[False]
    if INDUCTOR_CPU_ROUNDS_AT_CASTS:
        torch.testing.assert_close(rounded, expected, rtol=1e-6, atol=0)
        assert reports[True].data["aoti_rounds_at_casts"] is True and not warned[True]
    else:  # torch < 2.13: the CPU kernel computes through the round trip, and aoti_compile says so
        torch.testing.assert_close(rounded, torch.exp(x), rtol=1e-6, atol=0)
        assert reports[True].data["aoti_rounds_at_casts"] is False and len(warned[True]) == 1


def test_package_path_must_be_a_pt2_file(tmp_path):
    with pytest.raises(ValueError, match=r"must end in \.pt2"):
        torch_mp.aoti_compile(RoundTrip().eval(), (torch.randn(2),), torch.float16, str(tmp_path / "model.so"))


@pytest.fixture(scope="module")
def dynamic_package(tmp_path_factory):
    """One package, dtype left to the device's choice, built at batch 8 with a dynamic batch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    path = torch_mp.aoti_compile(model, (torch.randn(8, 8),), package_path=str(tmp_path_factory.mktemp(
        "aoti") / "dynamic.pt2"), dynamic_shapes=({0: batch},))
    report = torch_mp.report_of(path)
    return model, torch._inductor.aoti_load_package(path), report


def test_dtype_defaults_to_the_devices_choice(dynamic_package):
    _, _, report = dynamic_package
    assert report.data["dtype"] == str(torch_mp.device_dtype(torch.device("cpu"))).replace("torch.", "")
    assert report.low_precision_flop_fraction == 1.0  # the linear runs low
    with pytest.raises(TypeError, match="needs package_path"):
        torch_mp.aoti_compile(RoundTrip().eval(), (torch.randn(2),))


def test_a_package_with_a_dynamic_batch_runs_at_other_batch_sizes(dynamic_package):
    model, package, _ = dynamic_package
    for size in (1, 8):
        x = torch.randn(size, 8)
        out = package(x)
        assert out.shape == (size, 8) and out.dtype == torch.float32
        with torch.no_grad():
            torch.testing.assert_close(out, model(x), rtol=2e-2, atol=2e-2)


def test_a_package_takes_keyword_inputs(tmp_path):
    """example_kwarg_inputs= reaches the export, and the package takes the keyword input by name."""

    class Shifted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, x, shift=None):
            return self.linear(x) + shift

    model, x, shift = Shifted().eval(), torch.randn(4, 8), torch.randn(4, 8)
    policy = torch_mp.OpPolicy.default("cpu_bf16", cpu_features="all")
    program = torch_mp.export(model, (x,), torch.bfloat16, example_kwarg_inputs={"shift": shift}, policy=policy)
    path = torch_mp.aoti_compile(model, (x,), torch.bfloat16, str(tmp_path / "shifted.pt2"),
                                 example_kwarg_inputs={"shift": shift}, policy=policy)
    package = torch._inductor.aoti_load_package(path)
    other = torch.randn(4, 8)
    expected = program.module()(x, shift=other)
    torch.testing.assert_close(package(x, shift=other), expected, rtol=1e-2, atol=1e-2)  # not the example shift
    with torch.no_grad():
        torch.testing.assert_close(expected, model(x, shift=other), rtol=2e-2, atol=2e-2)


def test_a_package_keeps_the_cache_its_program_writes(tmp_path):
    """A program whose forward writes its KV cache (test_state_writes.py's decoder): the package holds the buffer
    and its writes, step after step, and decodes fp32's greedy tokens."""
    import copy

    from test_state_writes import NEW_TOKENS, PROMPT, StaticCacheDecoder, greedy

    model = StaticCacheDecoder().eval()
    prompt = torch.randint(0, 64, (PROMPT,)).tolist()
    tokens = greedy(copy.deepcopy(model), prompt, NEW_TOKENS)
    path = torch_mp.aoti_compile(model, (torch.tensor([[1]]), torch.tensor([0])), torch.bfloat16,
                                 str(tmp_path / "decoder.pt2"),
                                 policy=torch_mp.OpPolicy.default("cpu_bf16", cpu_features="all"))
    assert len(set(tokens)) > 1
    assert greedy(torch._inductor.aoti_load_package(path), prompt, NEW_TOKENS) == tokens
    assert all(not bool(buffer.any()) for buffer in model.buffers())
