"""TorchScript's builtin table (torch.jit._builtins, keyed by id() of each op's function object) holds no dead
object's id for torch.ops.quantized_decomposed after `import torch_mp`, nor when torch_mp scripts a model.

Loading torch.ao's quantization modules defines more overloads of those ops, which replaces their function objects;
the old ones died with their ids left in the table, and a later object at such an address (a Conv2d's padding list)
was taken for a builtin: scripting failed with "builtin cannot be used as a value" and convert traced instead (one
process in about 15; CI saw it as a flaky subprocess test)."""
import torch
import torch.jit._builtins as builtins

import torch_mp
from small_models import ConvBnNet


def _quantized_decomposed_entries():
    return {key: name for key, name in builtins._get_builtin_table().items()
            if name.startswith("quantized_decomposed::")}


def _live(entries):
    namespace = torch.ops.quantized_decomposed
    return {id(namespace.__dict__[name.partition("::")[2]]._op): name for name in entries.values()}


def test_each_quantized_decomposed_entry_is_the_live_function_object():
    entries = _quantized_decomposed_entries()
    assert entries == _live(entries)
    assert {"quantized_decomposed::quantize_per_tensor", "quantized_decomposed::dequantize_per_tensor",
            "quantized_decomposed::dequantize_per_channel"} <= set(entries.values())


def test_convert_forgets_entries_left_dead_after_torch_mp_loaded():
    """A module that loads later and defines another overload leaves a dead entry; convert's scripting drops it."""
    namespace = torch.ops.quantized_decomposed
    packet = namespace.quantize_per_tensor
    library = torch.library.Library("quantized_decomposed", "FRAGMENT")
    library.define("quantize_per_tensor.torch_mp_test(Tensor input) -> Tensor")  # refreshes the packet's function
    try:
        dead = [key for key, name in _quantized_decomposed_entries().items()
                if name == "quantized_decomposed::quantize_per_tensor" and key != id(packet._op)]
        assert dead, "the refresh left no second entry: this test no longer reproduces torch's behaviour"
        x = torch.randn(2, 3, 16, 16)
        report = torch_mp.report_of(torch_mp.convert(ConvBnNet().eval(), (x,), torch.float16))
        assert report.data["capture"] == "script"
        entries = _quantized_decomposed_entries()
        assert entries == _live(entries)
    finally:
        library._destroy()
