"""torch_mp.onnx_export: the plan written as a typed ONNX graph by torch.onnx.export (ONNX-level, small models).

Every export here goes through torch.onnx.export (about 2-3 s each on a 2-core machine after the first): the models
are the smallest that show each property, and one export serves several tests where it can.
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import torch_mp
from torch_mp._export import onnx_writer

FP16, FP32, BF16 = TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.BFLOAT16


class Block(torch.nn.Module):
    """linear (low) -> layer norm (fp32) -> relu -> linear (low) -> softmax (fp32): four precision boundaries."""

    def __init__(self):
        super().__init__()
        self.a, self.norm, self.b = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return torch.softmax(self.b(torch.relu(self.norm(self.a(x)))), -1)


class RoundTrip(torch.nn.Module):
    """relu planned low between an fp32 input and an fp32 exp: an fp32 -> fp16 -> fp32 rounding pair."""

    def forward(self, x):
        return torch.exp(torch.relu(x))


def session(path):
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def run(path, *inputs):
    s = session(path)
    return s.run(None, {i.name: x.numpy() for i, x in zip(s.get_inputs(), inputs)})


def cosine(a, b):
    a, b = torch.as_tensor(a).double().flatten(), torch.as_tensor(b).double().flatten()
    return float(a @ b / (a.norm() * b.norm()))


def ops_with_types(model):
    """(op, input element types, output element types) per node, in graph order, after type inference."""
    _, types = onnx_writer._element_types(model)
    return [(n.op_type, [types.get(i) for i in n.input], [types.get(o) for o in n.output]) for n in model.graph.node]


def initializer_types(model):
    return {t.name: t.data_type for t in model.graph.initializer}


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    torch.manual_seed(0)
    model = Block().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 16)
    path = tmp_path_factory.mktemp("onnx") / "block.onnx"
    written = torch_mp.onnx_export(model, (x,), path, torch.float16)
    report = torch_mp.report_of(written)
    return model, before, x, written, report


def test_casts_exactly_at_the_boundaries(block):
    _, _, _, path, report = block
    model = onnx.load(path)
    assert ops_with_types(model) == [
        ("Cast", [FP32], [FP16]),
        ("Gemm", [FP16, FP16, FP16], [FP16]),
        ("Cast", [FP16], [FP32]),
        ("LayerNormalization", [FP32, FP32, FP32], [FP32]),
        ("Cast", [FP32], [FP16]),
        ("Relu", [FP16], [FP16]),
        ("Gemm", [FP16, FP16, FP16], [FP16]),
        ("Cast", [FP16], [FP32]),
        ("Softmax", [FP32], [FP32]),
    ]
    # each weight stored once, in the dtype its reader computes in
    assert initializer_types(model) == {"a.weight": FP16, "a.bias": FP16, "norm.weight": FP32, "norm.bias": FP32,
                                        "b.weight": FP16, "b.bias": FP16}
    info = report.data["onnx"]
    assert info["casts"] == 4 and info["opset"] == 20 and info["external_data"] is None
    assert info["initializer_bytes"] == {"float": 2 * 32 * 4, "float16": (32 * 16 + 32 + 8 * 32 + 8) * 2}
    assert report.data["policy"] == "onnx_fp16" and info["notes"] == []
    assert model.opset_import[0].version == 20
    assert torch_mp.onnx_typing_problems(model) == []
    onnx.checker.check_model(model, full_check=True)


def test_inputs_and_outputs_keep_their_dtypes_and_onnxruntime_agrees(block):
    model, before, x, path, _ = block
    graph = onnx.load(path).graph
    assert [i.type.tensor_type.elem_type for i in graph.input] == [FP32]
    assert [o.type.tensor_type.elem_type for o in graph.output] == [FP32]
    fresh = torch.randn(4, 16)
    (y,) = run(path, fresh)
    expected = model(fresh)
    assert y.dtype == np.float32
    # fp16 weights and activations with fp32 norm and softmax: softmax outputs within 2e-3, direction within 1e-5
    assert np.abs(y - expected.detach().numpy()).max() < 2e-3
    assert cosine(y, expected.detach()) > 1 - 1e-5
    # the user's module is not changed
    assert all(torch.equal(before[k], v) and v.dtype == torch.float32 for k, v in model.state_dict().items())


def test_low_precision_io(tmp_path):
    path = torch_mp.onnx_export(Block().eval(), (torch.randn(4, 16),), tmp_path / "low_io.onnx",
                                keep_io_dtypes=False)
    model = onnx.load(path)
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [FP16]
    assert [o.type.tensor_type.elem_type for o in model.graph.output] == [FP16]
    # the input is fp16 already: no Cast in front of the first Gemm; softmax is fp32, so its result is cast down
    ops = ops_with_types(model)
    assert ops[0] == ("Gemm", [FP16, FP16, FP16], [FP16]) and ops[-1] == ("Cast", [FP32], [FP16])
    assert sum(op == "Cast" for op, _, _ in ops) == 4
    assert torch_mp.onnx_typing_problems(model) == []


def test_a_rounding_pair_is_kept(tmp_path):
    policy = torch_mp.OpPolicy.default("cpu_fp16", cpu_features="all").set("aten::relu", "low", "the test's pair")
    # 1 + k 2^-12: not float16 numbers, so the pair changes them
    x = 1.0 + torch.arange(64, dtype=torch.float32).reshape(8, 8) * 2.0 ** -12
    path = torch_mp.onnx_export(RoundTrip().eval(), (x,), tmp_path / "pair.onnx", policy=policy)
    model = onnx.load(path)
    assert ops_with_types(model) == [("Cast", [FP32], [FP16]), ("Relu", [FP16], [FP16]), ("Cast", [FP16], [FP32]),
                                     ("Exp", [FP32], [FP32])]
    rounded = torch.exp(x.half().float())
    (y,) = ReferenceEvaluator(model).run(None, {"x": x.numpy()})  # the graph's own semantics: it rounds
    np.testing.assert_allclose(y, rounded.numpy(), rtol=1e-6, atol=0)
    assert not np.allclose(y, torch.exp(x).numpy(), rtol=1e-5, atol=0)
    # onnxruntime's CPU provider has no fp16 Relu: it computes the Relu in fp32 and removes the pair around it,
    # at every optimisation level (docs/ONNX.md); the graph is right, the CPU provider computes through it
    (through,) = run(path, x)
    np.testing.assert_allclose(through, torch.exp(x).numpy(), rtol=1e-6, atol=0)


def test_a_dropped_cast_is_refused(tmp_path, monkeypatch):
    policy = torch_mp.OpPolicy.default("cpu_fp16", cpu_features="all").set("aten::relu", "low", "the test's pair")
    written = onnx_writer.program_to_onnx

    def drop_the_pair(program, opset):  # what an optimizer that folds Cast(Cast(x)) would write: x -> Relu -> Exp
        model = written(program, opset)
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["relu"]), helper.make_node("Exp", ["relu"],
                                   [model.graph.output[0].name])], "g", list(model.graph.input),
                                  list(model.graph.output))
        return helper.make_model(graph, opset_imports=list(model.opset_import))

    monkeypatch.setattr(onnx_writer, "program_to_onnx", drop_the_pair)
    path = tmp_path / "dropped.onnx"
    with pytest.raises(torch_mp.ConversionError, match=r"dropped casts of the plan .*: float -> float16: 1 in "
                                                       r"the program, 0 in the graph; float16 -> float: 1 in the "
                                                       r"program, 0 in the graph$"):
        torch_mp.onnx_export(RoundTrip().eval(), (torch.randn(8, 8),), path, policy=policy)
    assert not path.exists()


class Recurrent(torch.nn.Module):
    """A GRU (low) whose zero initial state torch builds inside forward: its cast to fp16 depends on no input."""

    def __init__(self):
        super().__init__()
        self.gru, self.head = torch.nn.GRU(8, 16, batch_first=True), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.gru(x)[1][-1])


def test_a_cast_of_a_constant_value_is_folded_not_lost(tmp_path):
    model = Recurrent().eval()
    x = torch.randn(2, 5, 8)
    program = torch_mp.export(model, (x,), torch.float16, policy=onnx_writer.onnx_policy(torch.float16))
    constant_casts = [n for n in program.graph.nodes if n.target is torch.ops.aten._to_copy.default
                      and n.args[0].op == "call_function" and n.args[0].target is torch.ops.aten.zeros.default]
    assert len(constant_casts) == 1  # the state, built from nothing, cast to fp16
    path = torch_mp.onnx_export(model, (x,), tmp_path / "gru.onnx")
    model_proto = onnx.load(path)
    # the exporter folds that cast into an fp16 constant; what remains: the input's and the output's Casts
    assert [(op, i[:1], o) for op, i, o in ops_with_types(model_proto) if op == "Cast"] == \
        [("Cast", [FP32], [FP16]), ("Cast", [FP16], [FP32])]
    (y,) = run(path, x)
    assert np.abs(y - model(x).detach().numpy()).max() < 5e-3


def mixed_graph():
    """A hand-made graph with each problem: Add of fp16 and fp32, a Cast of an initializer, a weight stored twice."""
    weight = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    inits = [onnx.numpy_helper.from_array(weight, "w"), onnx.numpy_helper.from_array(weight.astype(np.float16), "w16"),
             onnx.numpy_helper.from_array(np.ones(8, np.float32), "bias")]
    nodes = [helper.make_node("MatMul", ["x", "w16"], ["h"], name="matmul"),
             helper.make_node("Cast", ["bias"], ["bias16"], to=FP16, name="cast_bias"),
             helper.make_node("Add", ["h", "bias16"], ["h2"], name="add_ok"),
             helper.make_node("Cast", ["x"], ["x32"], to=FP32, name="up"),
             helper.make_node("MatMul", ["x32", "w"], ["g"], name="matmul32"),
             helper.make_node("Add", ["h2", "g"], ["y"], name="add_mixed")]
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", FP16, [2, 4])],
                              [helper.make_tensor_value_info("y", FP16, [2, 8])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_the_typing_check_fires_on_a_mixed_graph():
    problems = torch_mp.onnx_typing_problems(mixed_graph())
    assert len(problems) == 3, problems
    assert problems[0].startswith("node 'add_mixed' (Add): its operands 'h2' (float16), 'g' (float) are bound to one "
                                  "type T")
    assert problems[1].startswith("node 'cast_bias' (Cast): a Cast of the initializer 'bias' (float -> float16)")
    assert problems[2] == "initializer 'w' (float) is stored again as 'w16' (float16): one weight in two precisions"


def test_the_typing_check_does_not_fire_on_a_typed_graph():
    model = mixed_graph()
    typed = helper.make_graph([n for n in model.graph.node if n.name in ("matmul",)]
                              + [helper.make_node("Cast", ["h"], ["y"], to=FP16)], "typed", list(model.graph.input),
                              list(model.graph.output), initializer=[model.graph.initializer[1]])
    assert torch_mp.onnx_typing_problems(helper.make_model(typed, opset_imports=list(model.opset_import))) == []
    # equal small constants in two precisions are the exporter's scalars, and tensors of one value throughout (zero
    # biases of a norm and of a linear) are alike by chance: neither is a weight stored twice
    small = [onnx.numpy_helper.from_array(np.ones(4, np.float32), "one"),
             onnx.numpy_helper.from_array(np.ones(4, np.float16), "one16"),
             onnx.numpy_helper.from_array(np.zeros(64, np.float32), "norm_bias"),
             onnx.numpy_helper.from_array(np.zeros(64, np.float16), "linear_bias")]
    scalars = helper.make_graph([helper.make_node("Add", ["x", "one16"], ["y"])], "scalars",
                                [helper.make_tensor_value_info("x", FP16, [4])],
                                [helper.make_tensor_value_info("y", FP16, [4])], initializer=small)
    assert torch_mp.onnx_typing_problems(helper.make_model(scalars, opset_imports=list(model.opset_import))) == []


def test_a_graph_with_problems_is_not_written(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_writer, "program_to_onnx", lambda program, opset: mixed_graph())
    path = tmp_path / "mixed.onnx"
    with pytest.raises(torch_mp.ConversionError, match=r"not typed \(3 problems; nothing written to .*mixed.onnx\): "
                                                       r"node 'add_mixed' \(Add\)"):
        torch_mp.onnx_export(Block().eval(), (torch.randn(4, 16),), path)
    assert not path.exists()


def test_dynamic_batch_from_an_exported_program(tmp_path):
    model = Block().eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(model, (torch.randn(4, 16),), dynamic_shapes=({0: batch},))
    path = torch_mp.onnx_export(program, (torch.randn(4, 16),), tmp_path / "dynamic.onnx")
    graph = onnx.load(path).graph
    dims = graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and not dims[0].HasField("dim_value") and dims[1].dim_value == 16
    assert graph.output[0].type.tensor_type.shape.dim[0].dim_param == dims[0].dim_param
    for n in (1, 7, 33):
        x = torch.randn(n, 16)
        (y,) = run(path, x)
        assert y.shape == (n, 8) and np.abs(y - model(x).detach().numpy()).max() < 2e-3


def test_external_data_above_the_threshold(tmp_path):
    model = Block().eval()
    x = torch.randn(4, 16)
    weights = sum(p.numel() for name, p in model.named_parameters() if not name.startswith("norm")) * 2 + 64 * 4
    path = torch_mp.onnx_export(model, (x,), tmp_path / "external.onnx", external_data_threshold=weights - 1)
    report = torch_mp.report_of(path)
    data = tmp_path / "external.onnx.data"
    assert report.data["onnx"]["external_data"] == "external.onnx.data" and data.exists()
    stored = onnx.load(path, load_external_data=False)
    # tensors of 1 KiB and more go outside (onnx's size_threshold): a.weight, 32 x 16 fp16
    assert {t.name for t in stored.graph.initializer if t.data_location == TensorProto.EXTERNAL} == {"a.weight"}
    assert os.path.getsize(data) == 32 * 16 * 2
    (y,) = run(path, x)
    assert np.abs(y - model(x).detach().numpy()).max() < 2e-3
    # at the threshold exactly: one file
    path = torch_mp.onnx_export(model, (x,), tmp_path / "inline.onnx", external_data_threshold=weights)
    assert not (tmp_path / "inline.onnx.data").exists()


def test_bf16_is_typed_and_onnxruntime_cpu_has_no_kernels(tmp_path):
    model = Block().eval()
    path = torch_mp.onnx_export(model, (torch.randn(4, 16),), tmp_path / "bf16.onnx", torch.bfloat16)
    report = torch_mp.report_of(path)
    stored = onnx.load(path)
    assert initializer_types(stored) == {"a.weight": BF16, "a.bias": BF16, "norm.weight": FP32, "norm.bias": FP32,
                                         "b.weight": BF16, "b.bias": BF16}
    assert [op for op, _, _ in ops_with_types(stored)].count("Cast") == 4
    assert torch_mp.onnx_typing_problems(stored) == []
    assert report.data["policy"] == "onnx_bf16" and report.data["onnx"]["notes"] == [onnx_writer.BF16_CPU_NOTE]
    with pytest.raises(Exception, match="NOT_IMPLEMENTED.*Gemm"):
        session(path)


def test_bad_arguments(tmp_path):
    x = (torch.randn(4, 16),)
    with pytest.raises(ValueError, match=r"must end in \.onnx"):
        torch_mp.onnx_export(Block().eval(), x, tmp_path / "block.pt2")
    with pytest.raises(ValueError, match="the folder .* does not exist"):
        torch_mp.onnx_export(Block().eval(), x, tmp_path / "missing" / "block.onnx")
    with pytest.raises(ValueError, match="opset must be an int >= 17"):
        torch_mp.onnx_export(Block().eval(), x, tmp_path / "block.onnx", opset=13)
    with pytest.raises(ValueError, match="external_data_threshold must be"):
        torch_mp.onnx_export(Block().eval(), x, tmp_path / "block.onnx", external_data_threshold=-1)
    with pytest.raises(ValueError, match="training mode"):
        torch_mp.onnx_export(Block().train(), x, tmp_path / "block.onnx")
    assert not list(tmp_path.iterdir())


def test_the_command_line_writes_a_typed_graph_and_its_report(tmp_path, capsys):
    from torch_mp import __main__

    saved = tmp_path / "block.pt2"
    torch.export.save(torch.export.export(Block().eval(), (torch.randn(4, 16),)), saved)
    out, report = tmp_path / "block.onnx", tmp_path / "report.json"
    assert __main__.main(["onnx", str(saved), "-o", str(out), "--report", str(report), "--exclude", "b"]) == 0
    assert f"saved {out}" in capsys.readouterr().out
    model = onnx.load(out)
    assert torch_mp.onnx_typing_problems(model) == []
    # b excluded: its Gemm and weights stay fp32, so the graph has two Casts (around the first Gemm)
    assert initializer_types(model)["b.weight"] == FP32 and initializer_types(model)["a.weight"] == FP16
    assert onnx_writer.cast_count(model) == 2
    written = json.loads(report.read_text())
    assert written["policy"] == "onnx_fp16+edits" and written["onnx"]["casts"] == 2
    # bad output paths are refused (status 2) before the input is read
    for bad, says in ((tmp_path / "block.pt2out", "must end in .onnx"),
                      (tmp_path / "missing" / "x.onnx", "does not exist")):
        assert __main__.main(["onnx", str(tmp_path / "no_such.pt2"), "-o", str(bad)]) == 2
        assert says in capsys.readouterr().err
    assert __main__.main(["onnx", str(tmp_path / "no_such.pt2"), "-o", str(tmp_path / "x.onnx")]) == 2
    assert "no_such.pt2 does not exist" in capsys.readouterr().err


def test_without_onnxscript_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if not installed
    with pytest.raises(ImportError, match="needs the onnx and onnxscript packages .*: pip install onnx onnxscript"):
        torch_mp.onnx_export(Block().eval(), (torch.randn(4, 16),), tmp_path / "block.onnx")
    assert not list(tmp_path.iterdir())
