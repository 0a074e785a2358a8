"""torch_mp.report_of: the Report of what each front returns (a ScriptModule, an ExportedProgram, the path of a file
torch_mp wrote), where it survives (copies, saved files) and where it does not; return_report=True still returns the
pair, with a FutureWarning that names report_of."""
import copy
import json
import warnings

import pytest
import torch

import torch_mp
from small_models import ConvBnNet


@pytest.fixture(scope="module")
def model_and_input():
    torch.manual_seed(0)
    return ConvBnNet().eval(), torch.randn(2, 3, 16, 16)


def test_a_converted_module_carries_its_report(tmp_path, model_and_input):
    model, x = model_and_input
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    assert isinstance(report, torch_mp.Report) and report.capture == "script" and report.data["dtype"] == "float16"
    prepared = torch_mp.prepare(model, (x,))
    assert torch_mp.report_of(prepared.convert(torch.bfloat16)).data["dtype"] == "bfloat16"
    # saved by torch_mp.save, the file holds it; torch.jit.load's module and a deep copy carry none
    path = tmp_path / "fp16.pt"
    torch_mp.save(converted, path)
    assert torch_mp.report_of(path).data == json.loads(report.to_json())
    assert torch_mp.report_of(str(path)).nodes == report.nodes
    assert torch_mp.report_of(torch.jit.load(path)) is None
    assert torch_mp.report_of(copy.deepcopy(converted)) is None
    torch.jit.save(converted, tmp_path / "plain.pt")  # no report inside: report_of says so
    assert torch_mp.report_of(tmp_path / "plain.pt") is None


def test_a_converted_program_carries_its_report(tmp_path, model_and_input):
    model, x = model_and_input
    program = torch_mp.export(model, (x,), torch.bfloat16)
    report = torch_mp.report_of(program)
    assert report.capture == "export" and report.data["dtype"] == "bfloat16"
    # a deep copy keeps it (a Report copies as its data); torch.export.save does not write it
    assert torch_mp.report_of(copy.deepcopy(program)).data == report.data
    torch.export.save(program, tmp_path / "bf16.pt2")
    assert torch_mp.report_of(torch.export.load(tmp_path / "bf16.pt2")) is None


def test_an_onnx_file_holds_its_report(tmp_path, model_and_input):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    model, x = model_and_input
    path = torch_mp.onnx_export(model, (x,), tmp_path / "fp16.onnx")
    report = torch_mp.report_of(path)
    assert report.data["onnx"]["opset"] == 20 and report.data["dtype"] == "float16"


def test_report_of_refuses_what_no_conversion_returns(tmp_path, model_and_input):
    model, _ = model_and_input
    with pytest.raises(TypeError, match="report_of takes what a conversion returned"):
        torch_mp.report_of(model)
    with pytest.raises(FileNotFoundError):
        torch_mp.report_of(tmp_path / "missing.pt")
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ValueError, match="none of the files torch_mp writes"):
        torch_mp.report_of(tmp_path / "notes.txt")


@pytest.mark.parametrize("front", ["convert", "export", "PreparedModel.convert"])
def test_return_report_still_returns_the_pair_with_a_future_warning(model_and_input, front):
    model, x = model_and_input
    call = {"convert": lambda **kw: torch_mp.convert(model, (x,), torch.float16, **kw),
            "export": lambda **kw: torch_mp.export(model, (x,), torch.float16, **kw),
            "PreparedModel.convert": lambda **kw: torch_mp.prepare(model, (x,)).convert(torch.float16, **kw)}[front]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        converted, report = call(return_report=True)
    future = [w for w in caught if issubclass(w.category, FutureWarning) and "return_report" in str(w.message)]
    assert len(future) == 1 and "torch_mp.report_of" in str(future[0].message)
    assert future[0].filename == __file__  # the caller's line, not torch_mp's
    assert report is torch_mp.report_of(converted)
