"""PyTorch's autocast op lists (torch/testing/_internal/autocast_test_lists.py: AutocastTestLists, the CUDA lists, and
AutocastCPUTestLists) as one-op fp32 models: each entry, its floating tensors made fp32, becomes a module whose
forward makes that one call, written to a file (TorchScript reads a forward's source) and imported. Entries that do
not run eagerly on CPU in fp32 (cudnn ops, an entry whose arguments do not fit its op) do not apply; entries equal
after the cast to fp32 (the lists' bf16 and fp16 variants of one call, the CUDA and CPU lists' common entries) are
one model. `one_op_models` gives them; test_autocast_lists.py converts each."""
from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any, List, NamedTuple, Tuple

import torch

SEED = 0


class OneOpModel(NamedTuple):
    name: str                 # the list, the op and the entry's index: "nn_fp32.l1_loss.3"
    module: torch.nn.Module   # in eval mode
    inputs: Tuple[Any, ...]   # the entry's tensors, floating ones fp32, in order
    call: str                 # the forward's one line, for messages


def _lists_module():
    """torch's autocast_test_lists. It imports TEST_WITH_ROCM and TestCase from common_utils, which needs the
    test-only package expecttest that torch's wheels do not require: where that is missing, a stand-in with those
    two names is imported in its place (the lists use nothing else of it)."""
    try:
        import torch.testing._internal.autocast_test_lists as lists
        return lists
    except ModuleNotFoundError as error:
        if error.name != "expecttest":
            raise
    import unittest

    name = "torch.testing._internal.common_utils"
    stand_in = types.ModuleType(name)
    stand_in.TEST_WITH_ROCM = False
    stand_in.TestCase = unittest.TestCase
    real = sys.modules.get(name)
    sys.modules[name] = stand_in
    try:
        import torch.testing._internal.autocast_test_lists as lists
    finally:
        if real is None:
            del sys.modules[name]
        else:
            sys.modules[name] = real
    return lists


def _calls() -> List[Tuple[str, str, Any, tuple, dict]]:
    """(list name, op, namespace: "torch", "torch._C._nn", "torch._C._linalg" or None for a Tensor method, args,
    kwargs) of every entry of both classes; an entry with a bf16 and an fp16 variant of its arguments gives both."""
    lists = _lists_module()
    torch.manual_seed(SEED)
    found = []
    for holder in (lists.AutocastTestLists("cpu"), lists.AutocastCPUTestLists("cpu")):
        for list_name, entries in vars(holder).items():
            if not isinstance(entries, list):
                continue
            default = ("torch._C._nn" if list_name.startswith("nn_") else "torch._C._linalg"
                       if list_name.startswith("linalg_") else None if list_name.startswith("methods_") else "torch")
            for entry in entries:
                op, rest = entry[0], list(entry[1:])
                if isinstance(rest[0], str):  # einsum's equation, before its operands
                    rest = [(rest[0],) + tuple(rest[1])] + rest[2:]
                namespace = next((_NAMESPACES[id(x)] for x in rest if id(x) in _NAMESPACES), default)
                kwargs = next((x for x in rest if isinstance(x, dict)), {})
                for args in (x for x in rest if isinstance(x, tuple)):
                    found.append((list_name, op, namespace, args, kwargs))
    return found


_NAMESPACES = {id(torch): "torch", id(torch._C._nn): "torch._C._nn", id(torch._C._linalg): "torch._C._linalg"}


class _Source:
    """Writes an entry's arguments as Python source, its tensors (fp32 where floating) becoming forward's inputs."""

    def __init__(self):
        self.inputs: List[torch.Tensor] = []

    def write(self, value: Any) -> str:
        if isinstance(value, torch.Tensor):
            self.inputs.append(value.float() if value.is_floating_point() else value)
            return f"x{len(self.inputs) - 1}"
        if isinstance(value, (tuple, list)):
            items = [self.write(item) for item in value]
            tensors = any(isinstance(item, torch.Tensor) for item in value)
            # TorchScript types a tuple literal of tensors as a Tuple; the ops take Tensor[]
            return f"[{', '.join(items)}]" if tensors else f"({', '.join(items)}{',' if len(items) == 1 else ''})"
        if value is None or isinstance(value, (bool, int, float, str)):
            return repr(value)
        raise TypeError(f"no source for an argument of type {type(value).__name__}")


def _signature(inputs: List[torch.Tensor], call: str) -> tuple:
    return call, tuple((tuple(t.shape), t.dtype) for t in inputs)


def one_op_models(directory: str) -> List[OneOpModel]:
    """Every entry that applies, once, as a model: its module written to `directory`/autocast_one_op.py."""
    lines = ["import torch", "from torch import Tensor", ""]
    pending, seen = [], set()
    for list_name, op, namespace, args, kwargs in _calls():
        source = _Source()
        arguments = [source.write(a) for a in args]
        arguments += [f"{key}={source.write(value)}" for key, value in kwargs.items()]
        if namespace is None:
            if not args or not isinstance(args[0], torch.Tensor):
                continue
            call = f"{arguments[0]}.{op}({', '.join(arguments[1:])})"
        else:
            call = f"{namespace}.{op}({', '.join(arguments)})"
        key = _signature(source.inputs, call)
        if key in seen:
            continue
        seen.add(key)
        name = f"{list_name}.{op}.{len(pending)}"
        parameters = ", ".join(f"x{i}: Tensor" for i in range(len(source.inputs)))
        lines += [f"class M{len(pending)}(torch.nn.Module):", f"    def forward(self, {parameters}):",
                  f"        return {call}", "", ""]
        pending.append((name, tuple(source.inputs), call))
    path = f"{directory}/autocast_one_op.py"
    with open(path, "w") as file:
        file.write("\n".join(lines))
    spec = importlib.util.spec_from_file_location("autocast_one_op", path)
    generated = importlib.util.module_from_spec(spec)
    sys.modules["autocast_one_op"] = generated  # TorchScript resolves a class through its module
    spec.loader.exec_module(generated)
    models = []
    for index, (name, inputs, call) in enumerate(pending):
        module = getattr(generated, f"M{index}")().eval()
        try:
            with torch.no_grad():
                module(*inputs)
        except Exception:  # noqa: BLE001 - does not run on CPU in fp32: not an entry for this machine
            continue
        models.append(OneOpModel(name, module, inputs, call))
    return models
