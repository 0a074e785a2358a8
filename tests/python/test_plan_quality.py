"""Plan quality outside the zoo: heavy ops stay low through in-place writes and containers, weights are stored once
in the low dtype (tables a lookup reads included), what stays fp32 is reported, and one model gives one graph in
every process."""
import os
import subprocess
import sys
import textwrap
from typing import Dict, List

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_mp


class TreeBlock(nn.Module):
    """DLA / Res2Net style: convolutions whose outputs are written in place (residual add_, relu_), gathered in a
    list with an fp32 member (a softmax over channels) and concatenated."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.left = nn.Conv2d(channels, channels, 3, padding=1)
        self.right = nn.Conv2d(channels, channels, 3, padding=1)
        self.root = nn.Conv2d(3 * channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stem = F.relu(self.stem(x), inplace=True)
        left = self.left(stem)
        left += stem
        right = F.relu(self.right(left), inplace=True)
        children: List[torch.Tensor] = []
        children.append(left)
        children.append(right)
        children.append(torch.softmax(stem, dim=1))
        return self.root(torch.cat(children, 1))


def test_in_place_writes_and_lists_leave_every_convolution_low():
    torch.manual_seed(0)
    model = TreeBlock().eval()
    x = torch.randn(2, 3, 16, 16)
    for capture in (torch.jit.script(model), model):  # scripted keeps the list and the writes; traced unrolls them
        converted = torch_mp.convert(capture, (x,), torch.bfloat16)
        report = torch_mp.report_of(converted)
        assert report.low_precision_flop_fraction == 1.0
        convolutions = [n for n in report.nodes if n["op"] == "aten::conv2d"]
        assert len(convolutions) == 4 and all(n["precision"] == "low" for n in convolutions)
        assert not any(n["forced_to_fp32"] for n in convolutions)
        assert report.unknown_ops == []
        reference = model(x)
        assert torch.nn.functional.cosine_similarity(converted(x).flatten(), reference.flatten(), dim=0) > 0.999


class TiedLanguageModel(nn.Module):
    """An embedding whose table is also the output head (h @ table.T), with fp32-bound ops (layer_norm) between."""

    def __init__(self, vocab: int = 4000, width: int = 64):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(64, width)
        self.mix = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        h = self.norm(self.tokens(ids) + self.positions(positions))
        h = self.norm(h + F.gelu(self.mix(h)))
        return h @ self.tokens.weight.t()


def test_tied_embedding_table_is_stored_once_low(tmp_path):
    torch.manual_seed(0)
    model = TiedLanguageModel().eval()
    ids = torch.randint(0, 4000, (2, 16))
    converted = torch_mp.convert(model, (ids,), torch.float16)
    report = torch_mp.report_of(converted)
    frozen = torch.jit.freeze(torch.jit.trace(model, (ids,)))
    torch.jit.save(frozen, tmp_path / "fp32.pt")
    torch.jit.save(converted, tmp_path / "fp16.pt")
    ratio = os.path.getsize(tmp_path / "fp16.pt") / os.path.getsize(tmp_path / "fp32.pt")
    assert ratio <= 0.52, ratio
    assert report.weight_ratio <= 0.51
    lookups = [n for n in report.nodes if n["op"] == "aten::embedding"]
    # follow in the op table: low only by the constant-table rule
    assert len(lookups) == 2 and all((n["precision"], n["rule_kind"]) == ("low", "policy") for n in lookups)
    assert report.weights_kept_fp32 == []
    assert report.data["weight_bytes_kept_fp32"] < 4096  # the norm's scale and shift, the linear's bias
    expected = model(ids)
    assert torch.nn.functional.cosine_similarity(converted(ids).flatten(), expected.flatten(), dim=0) > 0.999


@pytest.mark.parametrize("front", ["convert", "export"])
def test_a_tied_table_its_head_reads_through_a_view_is_stored_once_low_on_both_fronts(front):
    # export sees the head's h @ table.t() as a t() view reading the table; it follows the view to the low matmul, as
    # convert's frozen graph (the view folded into a constant of the table's storage) does (export was 0.984)
    torch.manual_seed(0)
    model, ids = TiedLanguageModel().eval(), torch.randint(0, 4000, (2, 16))
    report = torch_mp.report_of(getattr(torch_mp, front)(model, (ids,), torch.float16))
    assert report.weight_ratio <= 0.501 and report.weights_kept_fp32 == []
    assert [n["precision"] for n in report.nodes if n["op"] == "aten::embedding"] == ["low", "low"]


@pytest.mark.parametrize("front", ["convert", "export"])
def test_no_conversion_grows_the_weights_of_a_tied_table_its_output_layer_reads_in_fp32(front):
    # With the output matmul kept fp32 (here by the policy; a CPU without fp16 kernels keeps it so, and then, running
    # nothing heavy low, the whole model: test_fast_kernels.py) the table it shares with the token lookup stays fp32,
    # stored once, and so does that lookup (stored low as well, the weights were 1.47x the fp32 model's); the
    # position table, which only its lookup reads, is stored low.
    torch.manual_seed(0)
    model = TiedLanguageModel().eval()
    ids = torch.randint(0, 4000, (2, 16))
    policy = torch_mp.OpPolicy.default("cpu_fp16", cpu_features="all").set("aten::matmul", "fp32", "the test's fp32 "
                                                                              "output layer")
    if front == "convert":
        converted = torch_mp.convert(model, (ids,), torch.float16, policy=policy)
        report = torch_mp.report_of(converted)
    else:
        program = torch_mp.export(model, (ids,), torch.float16, policy=policy)
        report = torch_mp.report_of(program)
        converted = program.module()
    assert report.weight_ratio <= 1.0
    lookups = {n["scope"]: n for n in report.nodes if n["op"] == "aten::embedding"}
    assert (lookups["tokens"]["precision"], lookups["tokens"]["category"]) == ("fp32", "follow")
    assert (lookups["positions"]["precision"], lookups["positions"]["category"]) == ("low", "low")  # its own table
    expected = model(ids)
    assert torch.nn.functional.cosine_similarity(converted(ids).flatten(), expected.flatten(), dim=0) > 0.9999


def test_fp32_weights_over_64_kb_are_listed_with_their_readers_and_rule():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 20000), nn.LayerNorm(20000)).eval()
    report = torch_mp.report_of(torch_mp.convert(model, (torch.randn(4, 32),), torch.bfloat16))
    kept = report.weights_kept_fp32
    assert [w["bytes"] for w in kept] == [80000, 80000]  # the norm's weight and bias (the linear's are bf16)
    norms = {n["id"] for n in report.nodes if n["op"] == "aten::layer_norm"}
    assert all((w["readers"], w["rule_kind"]) == (["aten::layer_norm"], "policy") and w["decided_by"] in norms
               for w in kept)
    assert report.data["weight_bytes_kept_fp32"] == 160000
    assert "0.16 MB of them fp32" in report.summary() and "kept fp32:" in report.summary()


class CachedAttentionBias(nn.Module):
    """timm LeViT's attention: the bias gathered from a small table is cached per device in a dict the module keeps,
    filled on the first call."""

    attention_bias_cache: Dict[str, torch.Tensor]

    def __init__(self, heads: int = 4, tokens: int = 128, width: int = 64):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.heads = heads
        self.biases = nn.Parameter(torch.randn(heads, tokens))
        self.register_buffer("bias_idxs", torch.randint(0, tokens, (tokens, tokens)), persistent=False)
        self.attention_bias_cache = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = str(x.device)
        if key not in self.attention_bias_cache:
            self.attention_bias_cache[key] = self.biases[:, self.bias_idxs]
        b, n, c = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attention = (q @ k.transpose(-2, -1) + self.attention_bias_cache[key]).softmax(-1)
        return (attention @ v).transpose(1, 2).reshape(b, n, c)


def test_bias_a_module_caches_in_a_dict_is_stored_low_and_read_without_a_cast(tmp_path):
    torch.manual_seed(0)
    model = CachedAttentionBias().eval()
    x = torch.randn(2, 128, 64)
    expected = model(x)  # the user's model has cached its fp32 bias (4 x 128 x 128: 256 KB) before converting
    converted = torch_mp.convert(model, (x,), torch.bfloat16)
    report = torch_mp.report_of(converted)
    assert report.weight_ratio <= 0.51 and report.weights_kept_fp32 == []
    cache_reads = [n for n in report.nodes if n["op"] in ("aten::_set_item", "aten::__getitem__")]
    assert len(cache_reads) == 2 and all(n["precision"] == "low" for n in cache_reads)
    assert converted.attention_bias_cache["cpu"].dtype == torch.bfloat16
    assert model.attention_bias_cache["cpu"].dtype == torch.float32  # the user's cache is left alone
    torch.jit.save(converted, tmp_path / "cached.pt")
    loaded = torch.jit.load(tmp_path / "cached.pt")
    for result in (converted(x), loaded(x)):
        assert result.dtype == torch.float32
        assert torch.nn.functional.cosine_similarity(result.flatten(), expected.flatten(), dim=0) > 0.999


# Prints a digest of the converted graph and of the report's decisions (the timings left out). Unnamed values are
# numbered by a per-graph counter that freezing advances by an amount that varies between processes; numbers are
# renamed in order of first appearance, names and structure must match exactly.
_CONVERT_IN_A_PROCESS = textwrap.dedent(
    """
    import hashlib, json, re, sys, torch, torch_mp
    sys.path.insert(0, {tests!r})
    from test_plan_quality import TreeBlock
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    models = ((encoder, torch.randn(2, 10, 32)), (torch.jit.script(TreeBlock().eval()), torch.randn(2, 3, 16, 16)))
    for model, x in models:
        converted = torch_mp.convert(model, (x,), torch.float16)
        report = torch_mp.report_of(converted)
        decisions = {{k: v for k, v in report.data.items() if k not in ("seconds", "phases")}}
        text = str(converted.graph) + json.dumps(decisions, sort_keys=True)
        numbers = {{}}
        text = re.sub(r'(?<=[%"])[0-9]+(?=[^0-9a-zA-Z_]|$)', lambda m: numbers.setdefault(m.group(0), f"n{{len(numbers)}}"), text)
        print(hashlib.sha256(text.encode()).hexdigest())
    """
)


def test_one_model_gives_one_graph_in_every_process(tmp_path):
    script = _CONVERT_IN_A_PROCESS.format(tests=os.path.dirname(__file__))
    outputs = set()
    for seed in range(10):  # hash seeds change Python's set order; each process lays out memory differently
        env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
        env["PYTHONHASHSEED"] = str(seed)
        result = subprocess.run([sys.executable, "-W", "ignore", "-c", script], capture_output=True, text=True,
                                cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stderr
        outputs.add(result.stdout)
    assert len(outputs) == 1, outputs


def test_dla34_converted_again_changes_no_node():
    """timm's DLA-34 (tree blocks with in-place residual writes): its first conversion already drops the in-place
    writes a second one would drop (before: 4 add_ / relu_ turned out of place), so converting again changes no
    node."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "zoo"))
    from torchvision_shim import import_torchvision

    import_torchvision()
    import timm

    torch.manual_seed(0)
    model = timm.create_model("dla34", pretrained=False).eval()
    x = torch.randn(1, 3, 64, 64)
    once = torch_mp.convert(model, (x,), torch.bfloat16)
    report = torch_mp.report_of(once)
    twice = torch_mp.convert(once, (x,), torch.bfloat16)

    def kinds(module):
        return sorted(node.kind() for node in module.graph.nodes())

    assert report.low_precision_flop_fraction == 1.0
    assert not [kind for kind in kinds(once) if kind in ("aten::add_", "aten::relu_")]
    assert kinds(twice) == kinds(once)
    torch.testing.assert_close(twice(x), once(x), rtol=0, atol=0)
