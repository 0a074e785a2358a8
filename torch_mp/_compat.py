"""What differs between the torch versions torch_mp supports (2.11 to 2.15), one entry each, with the version that
needs it. Everything else is the same on all of them."""
from __future__ import annotations

import re
from typing import Tuple

import torch


def _release(version: str) -> Tuple[int, int, int]:
    """(major, minor, patch) of a version string such as "2.15.0+cu132" or "2.16.0.dev20261201"."""
    parts = [int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3]]
    return tuple(parts + [0] * (3 - len(parts)))  # type: ignore[return-value]


TORCH = _release(torch.__version__)

# torch 2.14: torch.jit.script, trace, freeze, save and load warn FutureWarning on every call (2.13: DeprecationWarning,
# hidden by default; 2.15 warns as 2.14 does).
JIT_CALLS_WARN = TORCH[:2] >= (2, 14)

# torch 2.13 (pytorch/pytorch#182882): under emulate_precision_casts Inductor's CPU kernels round where the program
# casts. Before, a fused CPU kernel computed an fp32 -> low -> fp32 round trip in fp32 (it cached the fp32 value as the
# round trip's result); its CUDA kernels rounded on every version.
INDUCTOR_CPU_ROUNDS_AT_CASTS = TORCH[:2] >= (2, 13)

# torch 2.13: export's meta["val"] of aten.lstm's last hidden and cell states is what the op returns,
# [layers * directions, batch, hidden]; before, it had one dimension of 1 more ([layers * directions, 1, batch,
# hidden]), which a fake-tensor run of the op does not give.
EXPORT_LSTM_STATE_META_RIGHT = TORCH[:2] >= (2, 13)

# Every version (2.11-2.15): torch.fx's graph module that generates its Python code on first use is private; the
# only private torch.fx name torch_mp imports, so that a release that moves it changes this line only.
from torch.fx._lazy_graph_module import _LazyGraphModule as LazyGraphModule  # noqa: E402


def import_quantized_decomposed() -> None:
    """Every version (2.11-2.15): registers torch.ops.quantized_decomposed (torch.ao's reference Q/DQ ops) without
    leaving dead ids in TorchScript's builtin table (forget_dead_quantized_decomposed_builtins)."""
    from torch.ao.quantization.fx._decomposed import quantized_decomposed_lib  # noqa: F401  (registers the ops)

    forget_dead_quantized_decomposed_builtins()


def forget_dead_quantized_decomposed_builtins() -> None:
    """Every version (2.11-2.15): TorchScript's builtin table (torch.jit._builtins) is keyed by id() of each op's
    function object. Defining another overload of an op that has a packet (quantized_decomposed's dequantize_per_channel,
    ..., when torch.ao's or torchao's quantization modules load) replaces the packet's function object and registers the
    new one; the old one dies and its id stays in the table. A later object at that address (a Conv2d's padding list)
    is then taken for the builtin, and torch.jit.script fails ("builtin cannot be used as a value"): about one
    conversion in 15 traced instead of scripting. Called where quantized_decomposed loads and before torch_mp scripts."""
    from torch.jit._builtins import _get_builtin_table

    namespace = torch.ops.quantized_decomposed
    table = _get_builtin_table()
    for key, qualified_name in list(table.items()):
        prefix, _, name = qualified_name.partition("::")
        if prefix == "quantized_decomposed" and (name not in namespace.__dict__ or id(namespace.__dict__[name]._op) != key):
            del table[key]


def check_extension(built_with: Tuple[int, int, int]) -> None:
    """Every version: the extension's compiled-in operator ids (c10::aten::to, ...) are those of the torch whose
    headers it was built with, and each release renumbers them (2.15 added five ops before aten::to, so an extension
    built against 2.15 and run on 2.14 made aten::to_padded_tensor nodes where it meant aten::to: what `pip install`
    left when a `torch<2.15` requirement made it replace the torch it had just built against). Refused here, at
    import, rather than as a wrong graph later."""
    if tuple(built_with) != TORCH:
        raise ImportError(
            f"torch_mp's extension was built against torch {'.'.join(map(str, built_with))} but torch "
            f"{torch.__version__} is installed; operator ids differ between torch releases, so it cannot run. "
            "Rebuild it against this torch: pip install --no-build-isolation --force-reinstall --no-deps <torch_mp "
            "checkout> (or `pip install --no-build-isolation -e .` in it)")
