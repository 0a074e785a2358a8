"""What the converted graph looks like: exact casts, constants, IO dtypes, policy edits, idempotency, report."""
import json

import pytest
import torch
from torch import nn
from torch.testing import FileCheck

import torch_mp
from small_models import ControlFlowNet, ConvOneD, NestedOutputNet

LOW = [torch.float16, torch.bfloat16]
CODE = {torch.float16: 5, torch.bfloat16: 15, torch.float32: 6}  # c10::ScalarType values in aten::to


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), dim=-1)


def canonical(module):
    """The graph's nodes in order, constants described by content where they are read: value numbering, constant
    placement and the module type's mangled name do not matter."""
    names = {}
    lines = []

    def describe(value):
        if value.node().kind() == "prim::Constant":
            constant = value.toIValue()
            if isinstance(constant, torch.Tensor):
                return f"tensor({constant.dtype}, {tuple(constant.shape)}, {constant.double().sum().item():.6g})"
            return repr(constant)
        return names[value]

    def visit(block, indent):
        for value in block.inputs():
            names[value] = f"v{len(names)}"
        for node in block.nodes():
            if node.kind() == "prim::Constant":
                continue
            for output in node.outputs():
                names[output] = f"v{len(names)}"
            inputs = ", ".join(describe(v) for v in node.inputs())
            outputs = ", ".join(names[v] for v in node.outputs())
            lines.append(f"{indent}{outputs} = {node.kind()}({inputs})")
            for sub in node.blocks():
                visit(sub, indent + "  ")
                lines.append(f"{indent}  -> ({', '.join(describe(v) for v in sub.outputs())})")
    visit(module.graph, "")
    lines.append(f"return ({', '.join(describe(v) for v in module.graph.outputs())})")
    return "\n".join(lines)


def casts_in(module):
    return [n for n in module.graph.findAllNodes("aten::to")]


def cast_targets(module):
    return sorted(n.inputsAt(1).toIValue() for n in casts_in(module))


@pytest.mark.parametrize("fuse_casts", [False, True])
@pytest.mark.parametrize("dtype", LOW)
def test_mlp_has_exactly_one_cast_in_and_one_out(dtype, fuse_casts):
    model = Mlp().eval()
    x = torch.randn(4, 16)
    converted = torch_mp.convert(model, (x,), dtype, fuse_casts=fuse_casts)
    low = str(dtype).split(".")[1]
    low = {"float16": "Half", "bfloat16": "BFloat16"}[low]
    check = FileCheck().check(f"{low}Tensor = aten::to(%x").check("aten::linear").check("aten::relu").check(
        "aten::linear"
    )
    if fuse_casts:  # the way out is softmax's dtype=float32
        assert cast_targets(converted) == [CODE[dtype]]
        check.check_not("aten::to").check("FloatTensor = aten::softmax").run(str(converted.graph))
        (softmax,) = [n for n in converted.graph.nodes() if n.kind() == "aten::softmax"]
        assert softmax.inputsAt(2).toIValue() == CODE[torch.float32]
    else:
        assert cast_targets(converted) == sorted([CODE[dtype], CODE[torch.float32]])
        check.check("FloatTensor = aten::to").check("aten::softmax").run(str(converted.graph))
    out = converted(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, model(x), rtol=0, atol=2e-2 if dtype == torch.bfloat16 else 2e-3)


@pytest.mark.parametrize("dtype", LOW)
def test_weights_are_stored_pre_cast(dtype):
    model = Mlp().eval()
    converted = torch_mp.convert(model, (torch.randn(4, 16),), dtype)
    report = torch_mp.report_of(converted)
    constants = [n.output().toIValue() for n in converted.graph.findAllNodes("prim::Constant")]
    tensors = [c for c in constants if isinstance(c, torch.Tensor)]
    assert len(tensors) == 4 and all(t.dtype == dtype for t in tensors)
    assert report.weight_ratio == pytest.approx(0.5)


def test_fp32_only_model_gets_no_cast():
    class Fp32Only(nn.Module):
        def forward(self, x):
            return torch.log_softmax(torch.exp(x).sum(-1, keepdim=True) * x, dim=-1)

    converted = torch_mp.convert(Fp32Only().eval(), (torch.randn(3, 5),), torch.float16)
    report = torch_mp.report_of(converted)
    assert casts_in(converted) == []
    assert all(node["precision"] == "fp32" for node in report.nodes)


def test_integer_inputs_and_outputs_are_never_cast():
    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(50, 16)
            self.head = nn.Linear(16, 5)

        def forward(self, tokens, offsets):
            scores = self.head(self.embedding(tokens))
            return scores, scores.argmax(-1) + offsets

    tokens = torch.randint(0, 50, (3, 7))
    offsets = torch.arange(3).unsqueeze(1)
    converted = torch_mp.convert(Tagger().eval(), (tokens, offsets), torch.float16)
    for cast in casts_in(converted):
        assert cast.inputsAt(0).debugName() not in ("tokens", "offsets")
    scores, labels = converted(tokens, offsets)
    assert scores.dtype == torch.float32 and labels.dtype == torch.int64


@pytest.mark.parametrize("dtype", LOW)
def test_nested_outputs_keep_their_dtypes(dtype):
    model = NestedOutputNet().eval()
    x, lengths = torch.randn(4, 16), torch.tensor([1, 2, 3])
    converted = torch_mp.convert(model, (x, lengths), dtype)
    logits, (hidden, probs), extra = converted(x, lengths)
    assert logits.dtype == hidden.dtype == probs.dtype == extra["hidden"].dtype == torch.float32
    assert extra["lengths"].dtype == torch.int64
    assert torch.equal(extra["lengths"], lengths + 1)


@pytest.mark.parametrize("dtype", LOW)
def test_converting_a_converted_model_changes_nothing(dtype):
    model = ControlFlowNet().eval()
    x = torch.randn(4, 32)
    once = torch_mp.convert(model, (x,), dtype)
    twice = torch_mp.convert(once, (x,), dtype)
    report = torch_mp.report_of(twice)
    assert canonical(twice) == canonical(once)
    # freezing folds the upcasts of weights read by the branch the example never takes into fp32 constants; the
    # second conversion stores them low again and re-inserts those upcasts, and nothing else
    assert all(cast["to"] == "Float" and cast["bytes"] == 0 for cast in report.casts)
    torch.testing.assert_close(twice(x), once(x), rtol=0, atol=0)


def test_frozen_and_scripted_modules_are_accepted():
    model = Mlp().eval()
    x = torch.randn(4, 16)
    from_nn = torch_mp.convert(model, (x,))
    from_script = torch_mp.convert(torch.jit.script(model), (x,))
    from_frozen = torch_mp.convert(torch.jit.freeze(torch.jit.script(model)), (x,))
    for converted in (from_script, from_frozen):
        assert cast_targets(converted) == cast_targets(from_nn)
        torch.testing.assert_close(converted(x), from_nn(x), rtol=0, atol=0)


def test_policy_edit_keeps_linear_in_fp32():
    model = Mlp().eval()
    x = torch.randn(4, 16)
    policy = torch_mp.OpPolicy.default("cpu_fp16").set("aten::linear", "fp32", reason="test")
    converted = torch_mp.convert(model, (x,), torch.float16, policy=policy)
    report = torch_mp.report_of(converted)
    assert casts_in(converted) == []
    assert report.data["policy"] == "cpu_fp16+edits"
    torch.testing.assert_close(converted(x), model(x), rtol=1e-6, atol=1e-6)


def test_policy_removal_makes_an_op_unknown_and_fp32():
    model = Mlp().eval()
    x = torch.randn(4, 16)
    policy = torch_mp.OpPolicy.default("cpu_fp16").remove("aten::relu")
    converted = torch_mp.convert(model, (x,), torch.float16, policy=policy)
    report = torch_mp.report_of(converted)
    assert report.unknown_ops == ["aten::relu"]
    relu = [n for n in report.nodes if n["op"] == "aten::relu"]
    assert relu[0]["precision"] == "fp32" and relu[0]["rule_kind"] == "unknown op"
    # relu in fp32 between two fp16 linears: one cast out of fc1, one into fc2, one in; the one before softmax is
    # fused into softmax's dtype= (it is in the report as fused)
    assert len(casts_in(converted)) == 3
    assert len(report.casts) == 3 and report.fused_casts == 1


def test_policy_api():
    policy = torch_mp.OpPolicy.default("cuda_fp16")
    assert policy.category("aten::conv2d") == "low"
    assert policy.category("aten::softmax") == "fp32"
    assert policy.category("aten::relu") == "follow"
    assert policy.category("aten::index_put") == "widest"
    assert policy.category("aten::made_up") == "fp32"
    assert "aten::lstm" in policy.ops("low")
    # the targets share one table, but for the norms cuda_fp16 lets follow an fp16 input
    cpu = torch_mp.OpPolicy.default("cpu_fp16", cpu_features="all").entries()
    entries = policy.entries()
    assert {op for op in entries if cpu[op] != entries[op]} == {
        "aten::layer_norm", "aten::native_layer_norm", "aten::group_norm", "aten::native_group_norm"}
    assert policy.category("aten::layer_norm") == "follow" and cpu["aten::layer_norm"].category == "fp32"
    edited = policy.copy().add("low", ["aten::gelu", "aten::silu"])
    assert edited.category("aten::gelu") == "low" and policy.category("aten::gelu") == "follow"
    with pytest.raises(ValueError, match="unknown category"):
        policy.set("aten::gelu", "fast")
    with pytest.raises(ValueError, match="qualified"):
        policy.set("gelu", "low")
    with pytest.raises(KeyError):
        policy.remove("aten::made_up")
    with pytest.raises(ValueError, match="unknown policy target"):
        torch_mp.OpPolicy.default("tpu_fp8")
    assert all(reason for _, _, reason in policy.rows())


def test_min_cut_never_casts_more_than_greedy():
    model = ControlFlowNet().eval()
    x = torch.randn(8, 32)
    greedy = torch_mp.report_of(torch_mp.convert(model, (x,), torch.float16, planner="greedy"))
    exact = torch_mp.report_of(torch_mp.convert(model, (x,), torch.float16))
    assert exact.cast_bytes <= greedy.cast_bytes


def test_cast_placed_inside_the_branch_that_reads_it():
    """The untaken else-branch reads h in fp32: its cast lives in that branch, not before the prim::If, and so does
    the cast of its result to the If's low output, so the path taken casts only at the model's edges."""
    model = ControlFlowNet().eval()
    x = torch.randn(4, 32).abs()  # mean > 0: the then-branch runs
    converted = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(converted)
    branch = converted.graph.findNode("prim::If")
    else_block = list(branch.blocks())[1]
    first = next(iter(else_block.nodes()))
    assert first.kind() == "aten::to" and first.inputsAt(1).toIValue() == CODE[torch.float32]
    last = list(else_block.nodes())[-1]
    assert last.kind() == "aten::to" and last.inputsAt(1).toIValue() == CODE[torch.float16]
    assert branch.output().type().dtype() == torch.float16
    # the example inputs skipped that branch: its casts (h and the branch's low weights in, its result out) moved
    # no bytes; the path taken casts the input and the scores
    skipped = [cast for cast in report.casts if not cast["reached"]]
    assert sorted((cast["value"].startswith("self.negative."), cast["to"]) for cast in skipped) == [
        (False, "Float"), (False, "Half"), (True, "Float"), (True, "Float")]
    assert all(cast["bytes"] == 0 for cast in skipped)
    assert sorted((cast["from"], cast["to"]) for cast in report.casts if cast["reached"]) == [
        ("Float", "Half"), ("Half", "Float")]
    assert "4 on paths the example inputs did not take" in report.summary()
    negative = -x
    torch.testing.assert_close(converted(negative)[0], model(negative)[0], rtol=0, atol=1e-2)


def test_report_json_and_table():
    model = Mlp().eval()
    report = torch_mp.report_of(torch_mp.convert(model, (torch.randn(4, 16),), torch.float16))
    data = json.loads(report.to_json())
    assert data["dtype"] == "float16" and data["planner"] == "min-cut"
    linear = [n for n in data["nodes"] if n["op"] == "aten::linear"]
    assert len(linear) == 2 and all(n["precision"] == "low" for n in linear)
    # the cast into fc1 stays; the one before softmax is fused into softmax's dtype= and counted apart
    assert [c["to"] for c in data["casts"]] == ["Half"]
    assert sum(c["bytes"] for c in data["casts"]) == data["cast_bytes"] == 4 * 16 * 6
    assert data["fused_casts"] == 1 and data["fused_cast_bytes"] == 4 * 8 * 6
    text = str(report)
    assert "aten::linear" in text and "1 more fused into their readers" in text
    assert "Float -> Half" not in text  # the per-cast list is cast_table(), apart
    assert report.cast_table() == f"casts:\n  {data['casts'][0]['value']}: Float -> Half  {4 * 16 * 6} bytes"


def test_input_specs_replace_example_tensors():
    model = Mlp().eval()
    converted = torch_mp.convert(model, (torch_mp.InputSpec((4, 16)),), torch.float16)
    x = torch.randn(2, 16)
    torch.testing.assert_close(converted(x), model(x), rtol=0, atol=2e-3)


def test_policy_doc_matches_the_cpp_defaults():
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    generated = subprocess.run(
        [sys.executable, "-m", "torch_mp", "policy"], capture_output=True, text=True, check=True, cwd=root
    ).stdout
    with open(os.path.join(root, "docs", "OP_POLICY.md")) as f:
        assert f.read() == generated, "docs/OP_POLICY.md is stale: python -m torch_mp policy > docs/OP_POLICY.md"


@pytest.mark.parametrize("dtype", LOW)
def test_lstm_shape_checks_and_dtype_queries_cost_no_casts(dtype):
    """nn.LSTM's scripted forward has an untaken `unsqueeze` branch and reads `input.dtype` for its zero state:
    the branch's view inherits its input's dtype and the query is answered from the observation, so only the
    zero state is cast (the head's output goes to log_softmax as its dtype=float32 argument)."""
    from small_models import LSTMTagger

    tokens = torch.randint(0, 1000, (4, 20))
    converted = torch_mp.convert(LSTMTagger().eval(), (tokens,), dtype)
    report = torch_mp.report_of(converted)
    assert converted.graph.findAllNodes("prim::dtype") == []
    low = {torch.float16: "Half", torch.bfloat16: "BFloat16"}[dtype]
    # the head's output is read by log_softmax with dtype=float32: that cast is fused
    assert [(c["from"], c["to"]) for c in report.casts] == [("Float", low)]
    assert report.fused_casts == 1
    assert report.weight_ratio == pytest.approx(0.5, abs=1e-3)


class PaddedEncoder(nn.Module):
    """nn.TransformerEncoder called with a padding mask: in eval mode under no_grad PyTorch turns the batch into a
    nested tensor (rows without their padding) and runs each layer as one _transformer_encoder_layer_fwd."""

    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)

    def forward(self, x, padding):
        return self.encoder(x, src_key_padding_mask=padding)


@pytest.mark.parametrize("dtype", LOW)
def test_nested_tensor_fast_path_runs_in_low_precision(dtype):
    model = PaddedEncoder().eval()
    x = torch.randn(3, 10, 32)
    padding = torch.zeros(3, 10, dtype=torch.bool)
    padding[1, 6:] = True  # padding at the end of rows: the layout the fast path takes
    padding[2, 3:] = True
    converted = torch_mp.convert(model, (x, padding), dtype)
    report = torch_mp.report_of(converted)
    layers = [n for n in report.nodes if n["op"] == "aten::_transformer_encoder_layer_fwd" and n["flops"]]
    assert len(layers) == 2 and all(n["precision"] == "low" for n in layers)
    # on the path taken the nested tensor is cast into the first layer and out of the last, never in between
    # (the slow paths beside the fast one read casts of their own, in their branches)
    name = {torch.float16: "Half", torch.bfloat16: "BFloat16"}[dtype]
    assert [(c["from"], c["to"]) for c in report.casts if c["reached"]] == [("Float", name), (name, "Float")]
    FileCheck().check("aten::_nested_tensor_from_mask").check(f"{name}Tensor = aten::to(") \
        .check(f"{name}Tensor = aten::_transformer_encoder_layer_fwd") \
        .check(f"{name}Tensor = aten::_transformer_encoder_layer_fwd") \
        .check("FloatTensor = aten::to(").check("aten::to_padded_tensor").run(str(converted.graph))
    # the layers' packed attention weights, which freezing leaves as attributes, are stored pre-cast too
    assert report.weight_ratio == pytest.approx(0.5, abs=1e-3)
    assert report.low_precision_flop_fraction == 1.0
    with torch.no_grad():
        expected, actual = model(x, padding), converted(x, padding)
    assert actual.dtype == torch.float32
    tolerance = {torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    assert (actual - expected).abs().max() <= tolerance * expected.abs().max()


def test_summary_says_when_no_heavy_op_ran():
    class Elementwise(nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2

    report = torch_mp.report_of(torch_mp.convert(Elementwise().eval(), torch.randn(4, 4), torch.float16))
    assert "no heavy op with a FLOP estimate ran" in report.summary()
    report = torch_mp.report_of(torch_mp.convert(Mlp().eval(), torch.randn(4, 16), torch.float16))
    assert "100.0% of the heavy ops' FLOPs in low precision" in report.summary()


class RunningTotal(nn.Module):
    """Keeps state in a buffer that forward writes in place."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.register_buffer("total", torch.zeros(16))

    def forward(self, x):
        self.total.add_(x.sum(0))
        return self.fc(x) + self.total


def test_state_written_in_place_carries_over_calls_and_stays_the_converted_models_own():
    model = RunningTotal().eval()
    reference = RunningTotal().eval()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(8, 16)
    converted = torch_mp.convert(model, (x,), torch.float16)
    with torch.no_grad():
        for _ in range(3):  # the total grows by the same amount per call in both
            torch.testing.assert_close(converted(x), reference(x), rtol=0, atol=2e-2)
    assert torch.equal(model.total, torch.zeros(16))  # neither converting nor running the result wrote into it



def test_cuda_layout_passes_leave_cpu_models_alone():
    """channels_last and cuDNN fusion only touch convolutions observed on a CUDA device (their IR tests give CUDA
    observations as data); on the CPU the converted graph has no layout copies and the same numbers either way."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1)).eval()
    x = torch.randn(2, 3, 16, 16)
    converted = torch_mp.convert(model, (x,), torch.bfloat16, fuse_convolutions=True)
    report = torch_mp.report_of(converted)
    plain = torch_mp.convert(model, (x,), torch.bfloat16, channels_last=False, fuse_convolutions=False)
    assert report.data["channels_last_convolutions"] == 0 and report.data["fused_convolutions"] == 0
    kinds = [node.kind() for node in converted.graph.nodes()]
    assert "aten::contiguous" not in kinds and not any(kind.startswith("aten::cudnn") for kind in kinds)
    with torch.no_grad():
        assert torch.equal(converted(x), plain(x))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error where no GPU exists")
def test_cuda_graphs_without_a_gpu_says_so():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        torch_mp.cuda_graphs(torch.jit.script(nn.ReLU()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_cpu_matmul_weights_are_stored_column_major_and_stay_so_when_saved(dtype, tmp_path):
    """A low weight that a CPU GEMM multiplies as its right-hand matrix is stored column-major (nn.Linear's layout;
    row-major is 25-30x slower without oneDNN's kernels); the table of the embedding and fp32 weights keep theirs."""
    model = nn.Sequential(ConvOneD(64, 96), nn.GELU(), ConvOneD(96, 32)).eval()
    embedded = nn.Sequential(nn.Embedding(50, 64), model).eval()
    ids = torch.randint(0, 50, (2, 16))
    converted = torch_mp.convert(embedded, (ids,), dtype)
    report = torch_mp.report_of(converted)
    assert report.data["column_major_matmul_weights"] == 2

    def weights(module):
        return {tuple(t.shape): (t.dtype, t.stride()) for node in module.graph.nodes()
                if node.kind() == "prim::Constant" and isinstance(t := node.output().toIValue(), torch.Tensor)
                and t.dim() == 2}

    expected = {(64, 96): (dtype, (1, 64)), (96, 32): (dtype, (1, 96)), (50, 64): (dtype, (64, 1))}
    assert weights(converted) == expected
    path = tmp_path / "model.pt"
    torch.jit.save(converted, str(path))
    loaded = torch.jit.load(str(path))
    assert weights(loaded) == expected
    with torch.no_grad():
        reference = embedded(ids)
        assert torch.equal(loaded(ids), converted(ids))
        torch.testing.assert_close(converted(ids), reference, rtol=0, atol=0.05 * reference.abs().max().item())
