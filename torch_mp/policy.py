"""The op policy: which ops run in low precision, follow their inputs, promote to the widest input, or stay fp32.

The defaults live in C++ (csrc/core/op_policy.cpp), one entry per op with its reason. Edit a copy here::

    policy = torch_mp.OpPolicy.default("cpu_bf16")
    policy.set("aten::gelu", "fp32", reason="our activations are large")
    policy.remove("aten::add")          # now unknown, hence fp32
    torch_mp.convert(model, (x,), torch.bfloat16, policy=policy)
"""
from __future__ import annotations

import copy
from typing import Dict, Iterable, NamedTuple, Optional

import torch

from . import _C

CATEGORIES = ("low", "follow", "widest", "fp32")
TARGETS = ("cuda_fp16", "cuda_bf16", "cpu_bf16", "cpu_fp16")


class PolicyEntry(NamedTuple):
    category: str
    reason: str


def target_for(device: torch.device, dtype: torch.dtype) -> str:
    """The default policy's name for a device and low-precision dtype."""
    half = dtype == torch.float16
    if torch.device(device).type == "cuda":
        return "cuda_fp16" if half else "cuda_bf16"
    return "cpu_fp16" if half else "cpu_bf16"


class OpPolicy:
    """A mutable table op -> (category, reason). Ops in no list are fp32."""

    def __init__(self, entries: Optional[Dict[str, PolicyEntry]] = None, name: str = "custom"):
        self.name = name
        self._entries: Dict[str, PolicyEntry] = dict(entries or {})

    @classmethod
    def default(cls, target: str) -> "OpPolicy":
        if target not in TARGETS:
            raise ValueError(f"unknown policy target {target!r}; expected one of {', '.join(TARGETS)}")
        rows = _C.default_policy(target)
        return cls({op: PolicyEntry(category, reason) for op, category, reason in rows}, name=target)

    def copy(self) -> "OpPolicy":
        return OpPolicy(copy.deepcopy(self._entries), name=self.name)

    def set(self, op: str, category: str, reason: str = "set by the user") -> "OpPolicy":
        """Puts `op` ("aten::gelu", all overloads) into `category`; returns self for chaining."""
        _check_op(op)
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r} for {op}; expected one of {', '.join(CATEGORIES)}")
        self._entries[op] = PolicyEntry(category, reason)
        if not self.name.endswith("+edits"):
            self.name += "+edits"
        return self

    def add(self, category: str, ops: Iterable[str], reason: str = "set by the user") -> "OpPolicy":
        """Puts every op of `ops` into `category`."""
        if isinstance(ops, str):
            raise TypeError("ops must be an iterable of op names, not a single string")
        for op in ops:
            self.set(op, category, reason)
        return self

    def remove(self, op: str) -> "OpPolicy":
        """Takes `op` out of every list: it becomes unknown, hence fp32."""
        if op not in self._entries:
            raise KeyError(f"{op} is in no list of this policy")
        del self._entries[op]
        if not self.name.endswith("+edits"):
            self.name += "+edits"
        return self

    def category(self, op: str) -> str:
        entry = self._entries.get(op)
        return entry.category if entry else "fp32"

    def reason(self, op: str) -> str:
        entry = self._entries.get(op)
        return entry.reason if entry else "in no list (unknown op)"

    def ops(self, category: str) -> list:
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}")
        return sorted(op for op, entry in self._entries.items() if entry.category == category)

    def entries(self) -> Dict[str, PolicyEntry]:
        return dict(self._entries)

    def rows(self):
        return [(op, entry.category, entry.reason) for op, entry in sorted(self._entries.items())]

    def __contains__(self, op: str) -> bool:
        return op in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        counts = ", ".join(f"{c}={len(self.ops(c))}" for c in CATEGORIES)
        return f"OpPolicy({self.name!r}: {counts})"

    def to_markdown(self) -> str:
        lines = ["| op | category | reason |", "| --- | --- | --- |"]
        lines += [f"| `{op}` | {category} | {reason} |" for op, category, reason in self.rows()]
        return "\n".join(lines)


def _check_op(op: str) -> None:
    if not isinstance(op, str) or "::" not in op:
        raise ValueError(f"op names are qualified, like 'aten::conv2d'; got {op!r}")
