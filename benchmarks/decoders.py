"""Small decoder language models for the decode benchmarks (decode_fidelity.py, llm_decode.py): transformers' Llama
(grouped KV heads, RoPE, RMSNorm, SwiGLU) and GPT-2 (tied embeddings) from their configs with random weights, and
transformers' static-cache exporter around them (TorchExportableModuleWithStaticCache: one call per step, the keys
and values written into buffers at cache_position)."""
from __future__ import annotations

import dataclasses
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class DecoderShape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int  # Llama only; GPT-2 has one KV head per head
    vocab: int
    max_len: int

    def describe(self, architecture: str) -> str:
        kv = f", {self.kv_heads} KV heads" if architecture == "llama" else ""
        return (f"{architecture}: hidden {self.hidden}, {self.layers} layers, {self.heads} heads{kv}, vocab "
                f"{self.vocab}, cache {self.max_len}")


def transformers_module():
    sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))
    try:
        from torchvision_shim import import_torchvision
    finally:
        sys.path.remove(os.path.join(ROOT, "tests", "zoo"))
    import_torchvision()  # transformers imports torchvision where it is installed
    import transformers
    return transformers


def language_model(architecture: str, shape: DecoderShape, seed: int = 0) -> torch.nn.Module:
    """The model with random weights (seeded), eval, set up for a static cache of shape.max_len."""
    transformers = transformers_module()
    torch.manual_seed(seed)
    if architecture == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=shape.hidden, intermediate_size=shape.hidden * 8 // 3, num_hidden_layers=shape.layers,
            num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, vocab_size=shape.vocab,
            max_position_embeddings=shape.max_len))
    else:  # GPT-2's default initializer_range (0.02) makes a small random model repeat one token
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_embd=shape.hidden, n_layer=shape.layers, n_head=shape.heads, vocab_size=shape.vocab,
            n_positions=shape.max_len, initializer_range=0.2))
    model.eval().generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static", max_length=shape.max_len,
        cache_config={"batch_size": 1, "max_cache_len": shape.max_len, "device": "cpu"})
    return model


def static_cache_step(model: torch.nn.Module, batch: int, max_len: int) -> torch.nn.Module:
    """A fresh static-cache wrapper (its own zero cache): step(input_ids=, cache_position=) -> logits."""
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache
    return TorchExportableModuleWithStaticCache(model, batch_size=batch, max_cache_len=max_len).eval()


def for_autocast(step: torch.nn.Module) -> torch.nn.Module:
    """The wrapper with each cache layer's update casting the keys and values to the cache's dtype (fp32), as
    autocast needs: its keys and values come out of low linear layers (Llama's keys fp32 again after RoPE), and
    index_copy_ refuses a source of another dtype than the cache."""
    for layer in step.static_cache.layers:
        update = layer.update
        layer.update = lambda keys, values, *rest, _update=update, _layer=layer: _update(
            keys.to(_layer.keys.dtype), values.to(_layer.values.dtype), *rest)
    return step


def cache_bytes(step: torch.nn.Module) -> int:
    """Bytes of the key and value caches a static-cache step holds (eager wrapper or the program's module)."""
    return sum(b.nbytes for name, b in step.named_buffers() if "key_cache" in name or "value_cache" in name)
