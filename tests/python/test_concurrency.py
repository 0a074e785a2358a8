"""Conversions in 8 threads give the same results as serial ones; a converted model runs from several threads."""
from concurrent.futures import ThreadPoolExecutor

import torch

import torch_mp
from small_models import ControlFlowNet, ConvBnNet, LSTMTagger, NestedOutputNet


def build_models():
    torch.manual_seed(0)
    return [
        (ConvBnNet().eval(), (torch.randn(2, 3, 16, 16),)),
        (ControlFlowNet().eval(), (torch.randn(8, 32),)),
        (LSTMTagger(vocab=100, embed=16, hidden=16).eval(), (torch.randint(0, 100, (2, 6)),)),
        (NestedOutputNet().eval(), (torch.randn(4, 16), torch.tensor([1, 2]))),
    ] * 2  # eight conversions


def convert(job):
    (model, inputs), dtype = job
    converted = torch_mp.convert(model, inputs, dtype)
    report = torch_mp.report_of(converted)
    return converted, report


def summary(converted, report, inputs):
    outputs = converted(*inputs)
    flat = outputs if isinstance(outputs, tuple) else (outputs,)
    first = flat[0]
    return (
        report.capture,  # scripting in one thread while another scripts must not fall back to tracing
        [(n["op"], n["precision"]) for n in report.nodes],
        [(c["value"], c["to"], c["bytes"]) for c in report.casts],
        first.dtype,
        first.detach().double().sum().item(),
    )


def test_eight_threads_convert_like_one():
    models = build_models()
    jobs = [(m, torch.float16 if i % 2 else torch.bfloat16) for i, m in enumerate(models)]
    serial = [summary(*convert(job), job[0][1]) for job in jobs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = list(pool.map(convert, jobs))
    assert [summary(c, r, job[0][1]) for (c, r), job in zip(parallel, jobs)] == serial


def test_a_converted_model_runs_from_several_threads():
    model = ConvBnNet().eval()
    converted = torch_mp.convert(model, (torch.randn(2, 3, 16, 16),), torch.float16)
    inputs = [torch.randn(2, 3, 16, 16) for _ in range(16)]
    expected = [converted(x) for x in inputs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(converted, inputs))
    for got, want in zip(results, expected):
        assert torch.equal(got, want)
