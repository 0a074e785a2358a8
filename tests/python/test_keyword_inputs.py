"""Keyword example inputs (example_kwarg_inputs=, torch.export's kwargs) on convert, export, onnx_export and the
command line (aoti_compile: tests/python/test_aoti.py): the model is captured with them, the observation and the
calibration runs pass them, and the converted model takes them by name."""
import os
import subprocess
import sys
from typing import Optional

import pytest
import torch
from torch import nn

import torch_mp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


POLICY_FP16 = torch_mp.OpPolicy.default("cpu_fp16", cpu_features="all")


class Scaled(nn.Module):
    """Token ids through an embedding and a linear layer, times an optional mask and an optional scale, then another
    linear layer: `scale` given without `mask` is a keyword input with an argument before it left out (as
    transformers' decoders take input_ids= and cache_position=)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(64, 16)
        self.proj = nn.Linear(16, 16)
        self.out = nn.Linear(16, 8)

    def forward(self, input_ids, mask: Optional[torch.Tensor] = None, scale: Optional[torch.Tensor] = None):
        hidden = self.proj(self.embed(input_ids))
        if mask is not None:
            hidden = hidden * mask
        if scale is not None:
            hidden = hidden * scale
        return self.out(hidden)


@pytest.fixture
def model_and_inputs():
    return Scaled().eval(), torch.randint(0, 64, (2, 5)), torch.rand(2, 5, 1) + 0.5


def scale_node(report):
    """The report's node of `hidden * scale` (the last mul), between two low linear layers."""
    return [node for node in report.nodes if node["op"] in ("aten::mul", "aten.mul.Tensor")][-1]


def test_export_takes_keyword_inputs_and_calibration_runs_pass_them(model_and_inputs):
    model, ids, scale = model_and_inputs
    program = torch_mp.export(model, (ids,), torch.float16, example_kwarg_inputs={"scale": scale},
                              policy=POLICY_FP16)
    report = torch_mp.report_of(program)
    assert [spec.arg.name for spec in program.graph_signature.input_specs if spec.kind.name == "USER_INPUT"] == \
        ["input_ids", "scale"]
    assert program.example_inputs[1].keys() == {"scale"}
    assert program.graph_signature.user_inputs and scale_node(report)["precision"] == "low"
    expected = model(ids, scale=scale)
    torch.testing.assert_close(program.module()(ids, scale=scale), expected, rtol=1e-2, atol=1e-2)
    # a calibration run with a scale 1e5 times larger drives the product past fp16's range: the range guard keeps it
    # fp32, so the calibration run was given its keyword input
    program = torch_mp.export(model, (ids,), torch.float16, example_kwarg_inputs={"scale": scale},
                              calibration_inputs=[((ids,), {"scale": scale * 1e5})], policy=POLICY_FP16)
    report = torch_mp.report_of(program)
    node = scale_node(report)
    assert node["precision"] == "fp32" and node["rule_kind"] == "range guard" and node["amax"] > 65504, node
    # keyword inputs only: a calibration input is then a dict
    program = torch_mp.export(model, None, torch.float16, example_kwarg_inputs={"input_ids": ids, "scale": scale},
                              calibration_inputs=[{"input_ids": ids, "scale": scale * 2}], policy=POLICY_FP16)
    torch.testing.assert_close(program.module()(input_ids=ids, scale=scale), expected, rtol=1e-2, atol=1e-2)


def test_a_program_exported_with_keyword_inputs_converts_with_its_own(model_and_inputs):
    model, ids, scale = model_and_inputs
    exported = torch.export.export(model, (ids,), {"scale": scale})
    program = torch_mp.export(exported, dtype=torch.float16, policy=POLICY_FP16)  # its saved (args, kwargs)
    torch.testing.assert_close(program.module()(ids, scale=scale), model(ids, scale=scale), rtol=1e-2, atol=1e-2)
    other = torch.rand(2, 5, 1)
    given = torch_mp.export(exported, (ids,), torch.float16, example_kwarg_inputs={"scale": other},
                            policy=POLICY_FP16)
    torch.testing.assert_close(given.module()(ids, scale=other), model(ids, scale=other), rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match=r"the program takes the keyword inputs \['scale'\] but "
                                         r"example_kwarg_inputs has \[\]"):
        torch_mp.export(exported, (ids,), torch.float16)
    with pytest.raises(ValueError, match=r"calibration input 0 has the keyword inputs \['mask'\], the example "
                                         r"\['scale'\]"):
        torch_mp.export(exported, dtype=torch.float16, calibration_inputs=[{"mask": scale}])
    with pytest.raises(TypeError, match="with example_kwarg_inputs each calibration input is a dict"):
        torch_mp.export(exported, dtype=torch.float16, calibration_inputs=[(ids,)])
    with pytest.raises(TypeError, match="example_kwarg_inputs must be a dict"):
        torch_mp.export(model, (ids,), torch.float16, example_kwarg_inputs=[scale])
    with pytest.raises(ValueError, match=r"forward does not take the 1 example inputs and the keyword inputs "
                                         r"\['scales'\]"):
        torch_mp.export(model, (ids,), torch.float16, example_kwarg_inputs={"scales": scale})


def test_convert_traces_keyword_inputs_by_name(model_and_inputs):
    model, ids, scale = model_and_inputs
    state = {name: value.clone() for name, value in model.state_dict().items()}
    converted = torch_mp.convert(model, (ids,), torch.float16, example_kwarg_inputs={"scale": scale},
                                 policy=POLICY_FP16)
    report = torch_mp.report_of(converted)
    assert report.data["capture"] == "trace"  # `mask` is left out: only a trace by name takes that call
    assert [a.name for a in converted.forward.schema.arguments[1:]] == ["input_ids", "scale"]
    expected = model(ids, scale=scale)
    torch.testing.assert_close(converted(input_ids=ids, scale=scale), expected, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(converted(ids, scale), expected, rtol=1e-2, atol=1e-2)
    assert scale_node(report)["precision"] == "low"
    assert all(torch.equal(value, state[name]) for name, value in model.state_dict().items())  # untouched
    for calibration in ([((ids,), {"scale": scale * 1e5})], [{"input_ids": ids, "scale": scale * 1e5}]):
        converted = torch_mp.convert(model, (ids,), torch.float16, example_kwarg_inputs={"scale": scale},
                                     calibration_inputs=calibration, policy=POLICY_FP16)
        report = torch_mp.report_of(converted)
        node = scale_node(report)
        assert node["precision"] == "fp32" and node["rule_kind"] == "range guard", node


def test_convert_takes_leading_keyword_inputs_as_positional_ones(model_and_inputs):
    model, ids, scale = model_and_inputs
    mask = torch.ones(2, 5, 1)
    converted = torch_mp.convert(model, None, torch.float16,
                                 example_kwarg_inputs={"mask": mask, "input_ids": ids}, policy=POLICY_FP16)
    report = torch_mp.report_of(converted)
    assert report.data["capture"] == "script"  # forward's first two parameters: scripted as without keywords
    torch.testing.assert_close(converted(ids, mask), model(ids, mask), rtol=1e-2, atol=1e-2)


def test_convert_refuses_keyword_inputs_it_cannot_take_and_names_export(model_and_inputs):
    model, ids, scale = model_and_inputs
    with pytest.raises(ValueError, match="ScriptModule, which torch_mp.convert runs with positional inputs only.*"
                                         "torch_mp.export"):
        torch_mp.convert(torch.jit.script(model), (ids,), torch.float16, example_kwarg_inputs={"scale": scale})

    class ItemInForward(nn.Module):
        def forward(self, x, unused: Optional[torch.Tensor] = None, scale: Optional[torch.Tensor] = None):
            return x * float(scale.max())  # a constant in any trace

    with pytest.raises(ValueError, match=r"is given keyword inputs \(x, scale\) with arguments before them left "
                                         r"out.*torch_mp.export takes keyword inputs without tracing"):
        torch_mp.convert(ItemInForward().eval(), (torch.randn(4),), torch.float16,
                         example_kwarg_inputs={"scale": torch.rand(4) + 1})

    class Variadic(nn.Module):
        def forward(self, x, **extra):
            return x * extra["scale"]

    with pytest.raises(ValueError, match=r"through \*extra, which a trace cannot name.*torch_mp.export"):
        torch_mp.convert(Variadic().eval(), (torch.randn(4),), torch.float16,
                         example_kwarg_inputs={"scale": torch.rand(4)})


def test_onnx_export_names_keyword_inputs(model_and_inputs, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    model, ids, scale = model_and_inputs
    path = torch_mp.onnx_export(model, (ids,), tmp_path / "scaled.onnx", example_kwarg_inputs={"scale": scale})
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "scale"]
    (output,) = session.run(None, {"input_ids": ids.numpy(), "scale": scale.numpy()})
    torch.testing.assert_close(torch.from_numpy(output), model(ids, scale=scale), rtol=1e-2, atol=1e-2)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "torch_mp", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT)


def test_the_command_line_keeps_and_uses_a_programs_keyword_inputs(model_and_inputs, tmp_path):
    model, ids, scale = model_and_inputs
    path, out = tmp_path / "fp32.pt2", tmp_path / "fp16.pt2"
    torch.export.save(torch.export.export(model, (ids,), {"scale": scale}), path)
    result = cli("export", path, "-o", out, "--dtype", "fp16")
    assert result.returncode == 0, result.stderr
    converted = torch.export.load(out)
    assert converted.example_inputs[1].keys() == {"scale"}
    torch.testing.assert_close(converted.module()(ids, scale=scale), model(ids, scale=scale), rtol=1e-2, atol=1e-2)
    # the --calib runs take the keyword inputs too: a 1e5 times larger scale is guarded in fp32
    calib, report = tmp_path / "calib.pt", tmp_path / "report.json"
    torch.save([((ids,), {"scale": scale * 1e5})], calib)
    result = cli("export", path, "-o", out, "--dtype", "fp16", "--calib", calib, "--report", report)
    assert result.returncode == 0, result.stderr
    assert scale_node(torch_mp.Report.from_json(report.read_text()))["rule_kind"] == "range guard"
    # an --inputs file of (args, kwargs), and one without the program's keyword input
    inputs = tmp_path / "inputs.pt"
    torch.save(((ids,), {"scale": scale * 2}), inputs)
    result = cli("export", path, "-o", out, "--dtype", "fp16", "--inputs", inputs)
    assert result.returncode == 0, result.stderr
    torch.save((ids,), inputs)
    result = cli("export", path, "-o", out, "--dtype", "fp16", "--inputs", inputs)
    assert result.returncode == 2 and "the program takes the keyword inputs ['scale']" in result.stderr
