"""Models whose forward writes into their state (issue 59, items 1 and 7): a decoder with a static KV cache written by
index_copy_ and a step counter, as transformers' TorchExportableModuleWithStaticCache exports decoders. The writes are
kept (buffer mutations of the program; module state of a TorchScript module), decoding step by step gives fp32's
greedy tokens, the user's module is never written, and a capture that would lose the writes is refused naming the
tensor, the op, the module and the source line. On the export front the cache is stored in the low dtype where the
attention reading it runs low (issue 59, item 3)."""
import copy
import json
import os
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_mp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


POLICIES = {torch.bfloat16: torch_mp.OpPolicy.default("cpu_bf16", cpu_features="all"),
            torch.float16: torch_mp.OpPolicy.default("cpu_fp16", cpu_features="all")}
PROMPT, NEW_TOKENS = 6, 10


class StaticCacheDecoder(nn.Module):
    """A one-layer decoder taking one token per call: its keys and values go into cache buffers at cache_position
    (index_copy_), attention reads the whole cache under a causal mask, and a buffer counts the calls (add_)."""

    def __init__(self, vocab=64, dim=32, heads=4, max_len=32):
        super().__init__()
        self.heads, self.head_dim, self.max_len = heads, dim // heads, max_len
        self.embed = nn.Embedding(vocab, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("key_cache", torch.zeros(1, heads, max_len, self.head_dim))
        self.register_buffer("value_cache", torch.zeros(1, heads, max_len, self.head_dim))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, input_ids, cache_position):
        x = self.embed(input_ids)
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        self.key_cache.index_copy_(2, cache_position, k)
        self.value_cache.index_copy_(2, cache_position, v)
        self.steps.add_(1)
        mask = torch.arange(self.max_len)[None, :] <= cache_position[:, None]
        attention = F.scaled_dot_product_attention(q, self.key_cache, self.value_cache, attn_mask=mask)
        x = x + self.out(attention.transpose(1, 2).reshape(batch, length, -1))
        x = x + self.mlp(self.norm(x))
        return self.head(x)


def greedy(step, prompt, new_tokens, keywords=False):
    """Feeds the prompt one token per call, then the argmax of each call's logits, new_tokens times; the token and
    its position as keyword inputs where the program was exported with them."""
    tokens = list(prompt)
    with torch.no_grad():
        for position in range(len(prompt) + new_tokens - 1):
            ids, cache_position = torch.tensor([[tokens[position]]]), torch.tensor([position])
            logits = step(input_ids=ids, cache_position=cache_position) if keywords else step(ids, cache_position)
            if position >= len(prompt) - 1:
                tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt):]


@pytest.fixture
def decoder():
    model = StaticCacheDecoder().eval()
    example = (torch.tensor([[1]]), torch.tensor([0]))
    prompt = torch.randint(0, 64, (PROMPT,)).tolist()
    reference = copy.deepcopy(model)  # decoded eagerly in fp32: the tokens to agree with
    tokens = greedy(reference, prompt, NEW_TOKENS)
    assert len(set(tokens)) > 1  # random weights that still choose different tokens
    return model, example, prompt, reference, tokens


def untouched(model):
    return all(not bool(buffer.any()) for buffer in model.buffers())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_export_keeps_the_cache_writes_and_decodes_fp32s_tokens(decoder, dtype):
    model, example, prompt, reference, tokens = decoder
    program = torch_mp.export(model, example, dtype, policy=POLICIES[dtype])
    report = torch_mp.report_of(program)
    assert sorted(program.graph_signature.buffers_to_mutate.values()) == ["key_cache", "steps", "value_cache"]
    assert report.low_precision_flop_fraction == 1.0
    assert untouched(model)  # the export's runs wrote copies
    # the attention reading the cache runs low, so the cache writes (index_copy, which follows) run low and the cache is
    # stored low: half its bytes, each step casts the new keys and values only (they are low already), and no cast
    # of the whole cache before attention
    writes = [node for node in report.nodes if node["op"] == "aten::index_copy"]
    assert [(n["precision"], n["rule_kind"]) for n in writes] == [("low", "policy")] * 2
    assert {program.state_dict[name].dtype for name in ("key_cache", "value_cache")} == {dtype}
    assert {program.state_dict[name].nbytes for name in ("key_cache", "value_cache")} == {model.key_cache.nbytes // 2}
    cache_values = {n["id"] for n in writes} | {"b_key_cache", "b_value_cache"}
    assert not [cast for cast in report.casts if cast["value"] in cache_values]
    module = program.module()
    assert greedy(module, prompt, NEW_TOKENS) == tokens
    assert untouched(model)
    # the cache holds what fp32 wrote into it, within the low dtype's rounding of the keys and values
    assert module.key_cache.dtype == module.value_cache.dtype == dtype
    assert int(module.steps) == int(reference.steps) == PROMPT + NEW_TOKENS - 1
    tolerance = 2 ** -7 if dtype == torch.bfloat16 else 2 ** -10  # a few roundings of values below 4 in magnitude
    for name in ("key_cache", "value_cache"):
        torch.testing.assert_close(getattr(module, name).float(), getattr(reference, name), rtol=0,
                                   atol=8 * tolerance)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_report_lists_the_mutable_buffers_beside_the_weights(decoder, dtype):
    """Issue 59, item 3: each buffer the program writes, with its stored dtype and bytes and its fp32 bytes."""
    model, example, *_ = decoder
    report = torch_mp.report_of(torch_mp.export(model, example, dtype, policy=POLICIES[dtype]))
    cache_bytes = 1 * 4 * 32 * 8 * 4  # (1, heads, max_len, head_dim) fp32
    name = str(dtype).replace("torch.", "")
    assert report.data["mutable_buffers"] == [
        {"name": "key_cache", "dtype": name, "bytes": cache_bytes // 2, "fp32_bytes": cache_bytes},
        {"name": "value_cache", "dtype": name, "bytes": cache_bytes // 2, "fp32_bytes": cache_bytes},
        {"name": "steps", "dtype": "int64", "bytes": 8, "fp32_bytes": 8}]
    assert json.loads(report.to_json())["mutable_buffers"] == report.data["mutable_buffers"]
    summary = report.summary().splitlines()
    weights = next(i for i, line in enumerate(summary) if line.startswith("  weights: "))
    assert summary[weights + 1] == (f"  mutable buffers: 8.2 KB -> 4.1 KB (counted in the weights): key_cache {name} "
                                    f"2.0 KB, value_cache {name} 2.0 KB, steps int64 8 B")
    # a model that writes nothing lists none, and the summary says nothing of them; a buffer it only reads (a batch
    # norm's statistics) is no mutable buffer, on either front
    reads_a_buffer = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).eval()
    for front in (torch_mp.export, torch_mp.convert):
        report = torch_mp.report_of(front(reads_a_buffer, (torch.randn(2, 4),), dtype))
        assert report.data["mutable_buffers"] == [] and "mutable buffers" not in report.summary()


def test_convert_keeps_the_cache_writes_as_module_state(decoder):
    model, example, prompt, reference, tokens = decoder
    converted = torch_mp.convert(model, example, torch.bfloat16, policy=POLICIES[torch.bfloat16])
    report = torch_mp.report_of(converted)
    assert untouched(model)  # tracing ran the model: its buffers were put back
    # the TorchScript front keeps module state in its dtype: the cache stays fp32 there
    assert {name: buffer.dtype for name, buffer in converted.named_buffers()} == \
        {"key_cache": torch.float32, "value_cache": torch.float32, "steps": torch.int64}
    cache_bytes = model.key_cache.nbytes
    assert report.data["mutable_buffers"] == [
        {"name": "key_cache", "dtype": "float32", "bytes": cache_bytes, "fp32_bytes": cache_bytes},
        {"name": "value_cache", "dtype": "float32", "bytes": cache_bytes, "fp32_bytes": cache_bytes},
        {"name": "steps", "dtype": "int64", "bytes": 8, "fp32_bytes": 8}]
    assert greedy(converted, prompt, NEW_TOKENS) == tokens
    assert int(converted.steps) == PROMPT + NEW_TOKENS - 1 and untouched(model)


class CacheInAnObject(nn.Module):
    """Holds its cache in a plain Python object, as transformers' StaticCache holds its layers' tensors; with
    `registered` the same tensors are buffers too (TorchExportableModuleWithStaticCache registers them)."""

    def __init__(self, registered):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.store = types.SimpleNamespace(keys=torch.zeros(1, 16, 8))
        if registered:
            self.register_buffer("keys", self.store.keys)

    def forward(self, x, cache_position):
        self.store.keys.index_copy_(1, cache_position, self.proj(x))
        return self.store.keys.sum(dim=1)


def test_writes_the_capture_would_lose_are_refused_naming_where_they_are():
    x, position = torch.randn(1, 1, 8), torch.tensor([3])
    model = CacheInAnObject(registered=False).eval()
    with pytest.raises(ValueError) as caught:
        torch_mp.export(model, (x, position), torch.bfloat16)
    assert not bool(model.store.keys.any())  # refused before any run of the model, which would have written it
    message = str(caught.value)
    assert message.startswith("torch.export could not capture CacheInAnObject: non-strict: it writes into tensors "
                              "the capture lifted as constants, so the writes would be lost: ")
    assert "(by aten::index_copy_ in module <top> (CacheInAnObject), at " in message
    assert "`self.store.keys.index_copy_(1, cache_position, self.proj(x))`" in message
    assert "register it as a buffer (module.register_buffer)" in message and "strict=True" in message
    # a program exported non-strict by the user: its writes went into constants, refused before anything else
    program = torch.export.export(CacheInAnObject(registered=True).eval(), (x, position), strict=False)
    assert not program.graph_signature.buffers_to_mutate
    with pytest.raises(ValueError, match=r"the program given writes into tensors torch.export lifted as constants: "
                                         r"lifted_tensor_0 \(by aten::index_copy_"):
        torch_mp.export(program, dtype=torch.bfloat16)


def test_a_cache_in_an_object_and_registered_as_a_buffer_converts_strict():
    """Non-strict capture lifts the object's tensor as a constant; strict capture finds the buffer: the write is kept
    as a buffer mutation."""
    model, x, position = CacheInAnObject(registered=True).eval(), torch.randn(1, 1, 8), torch.tensor([3])
    program = torch_mp.export(model, (x, position), torch.bfloat16, policy=POLICIES[torch.bfloat16])
    assert list(program.graph_signature.buffers_to_mutate.values()) == ["keys"]
    assert not bool(model.keys.any())
    module = program.module()
    with torch.no_grad():
        expected = model.proj(x)[0, 0]
        module(x, position)
    torch.testing.assert_close(module.keys[0, 3], expected, rtol=2 ** -7, atol=2 ** -7)
    assert not bool(module.keys[0, :3].any()) and not bool(module.keys[0, 4:].any())


@pytest.mark.parametrize("front", ["export", "convert"])
@pytest.mark.parametrize("architecture", ["llama", "gpt2"])
def test_transformers_static_cache_wrapper(architecture, front):
    """transformers' own exporter of decoders, on a tiny Llama (grouped KV heads, RoPE) and GPT-2 (tied embeddings):
    its forward writes the keys and values into the StaticCache's tensors (registered as its buffers) and a
    cumulative length; non-strict capture lifted them as constants (a bare AssertionError in run_decompositions,
    before). Both fronts, bf16: 32 greedy tokens equal fp32's from the same wrapper, which is never written; the
    export's caches are stored bf16."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))
    try:
        from torchvision_shim import import_torchvision
    finally:
        sys.path.remove(os.path.join(ROOT, "tests", "zoo"))
    import_torchvision()  # transformers imports torchvision where it is installed
    import transformers
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    if architecture == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=256, max_position_embeddings=64))
    else:  # GPT-2's default initializer_range (0.02) makes a tiny random model repeat one token
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256,
                                                                     n_positions=64, initializer_range=0.2))
    model.eval().generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static", max_length=48,
        cache_config={"batch_size": 1, "max_cache_len": 48, "device": "cpu"})

    def wrapper():
        return TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=48).eval()

    converted = wrapper()
    example = {"input_ids": torch.tensor([[1]]), "cache_position": torch.tensor([0])}
    result = getattr(torch_mp, front)(converted, None, torch.bfloat16, policy=POLICIES[torch.bfloat16],
                                      example_kwarg_inputs=example)
    if front == "export":
        caches = {"key_cache_0", "value_cache_0", "key_cache_1", "value_cache_1"}
        assert caches <= set(result.graph_signature.buffers_to_mutate.values())
        result = result.module()
        # stored low: the attention reading them runs low (the TorchScript front keeps them fp32)
        assert {buffer.dtype for name, buffer in result.named_buffers() if name in caches} == {torch.bfloat16}
    assert all(not bool(buffer.any()) for name, buffer in converted.named_buffers() if "cache" in name)
    prompt = torch.randint(0, 256, (8,)).tolist()
    tokens = greedy(wrapper(), prompt, 32, keywords=True)
    assert len(set(tokens)) > 1
    assert greedy(result, prompt, 32, keywords=True) == tokens
    assert all(not bool(buffer.any()) for name, buffer in converted.named_buffers() if "cache" in name)
