"""The op policy: which ops run in low precision, follow their inputs, promote to the widest input, or stay fp32.

The defaults live in C++ (csrc/core/op_policy.cpp), one entry per op with its reason. Edit a copy here::

    policy = torch_mp.OpPolicy.default("cpu_bf16")
    policy.set("aten::gelu", "fp32", reason="our activations are large")
    policy.remove("aten::add")          # now unknown, hence fp32
    policy.set("aten::bmm", "low_fp32_output")  # fp16 inputs, fp32 accumulation and fp32 result
    policy.exclude("head.*")            # every node inside the module `head`'s children stays fp32
    policy.add_rule(lambda node: "fp32" if node.op == "aten::conv2d" and node.input_shapes[0][1] < 16 else None)
    torch_mp.convert(model, (x,), torch.bfloat16, policy=policy)

Per node, the first of these that speaks decides: the accuracy fallback's choices, exclusions, rules (in the order
they were added), the op's entry. Nodes the range guard keeps in fp32 stay fp32 whatever the rules say.
"""
from __future__ import annotations

import copy
import fnmatch
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple, Union

import torch

from . import _C

# "low_fp32_output": computed in the low dtype (accumulating in fp32), result written in fp32, e.g. a matmul that
# feeds a norm. On CUDA, mm / bmm / 2-d and 3-d matmul do it in one kernel (aten::mm.dtype); elsewhere the low
# result is cast once, and a softmax / sum / mean reader folds that cast into its own kernel.
CATEGORIES = _C.CATEGORIES  # ("low", "low_fp32_output", "follow", "widest", "fp32"), from csrc/core/op_policy.h
TARGETS = _C.TARGETS  # ("cuda_fp16", "cuda_bf16", "cpu_bf16", "cpu_fp16")


class PolicyEntry(NamedTuple):
    category: str
    reason: str


class NodeInfo(NamedTuple):
    """What a per-node rule sees of a node of the frozen graph."""

    op: str  # "aten::conv2d"
    scope: str  # module path, "layer1.0.conv1" ("" for the top module's own code)
    output: str  # name of its first output in the graph, as in the report
    input_shapes: Tuple[Optional[Tuple[int, ...]], ...]  # per input: observed sizes of a tensor, else None
    input_dtypes: Tuple[Optional[torch.dtype], ...]  # per input: dtype of a tensor, else None
    constants: Dict[str, Any]  # constant inputs by schema argument name, e.g. {"groups": 1, "stride": [1, 1]}


class Exclusion(NamedTuple):
    pattern: str
    ops: Optional[Tuple[str, ...]]
    reason: str

    def matches(self, node: NodeInfo) -> bool:
        if self.ops is not None and node.op not in self.ops:
            return False
        # a module path matches when the node's module or one of its enclosing modules does
        parts = node.scope.split(".") if node.scope else []
        return any(fnmatch.fnmatchcase(".".join(parts[:i]), self.pattern) for i in range(len(parts), 0, -1))


Rule = Callable[[NodeInfo], Union[None, str, Tuple[str, str]]]


def cpu_features() -> List[str]:
    """The CPU features that decide which low-precision kernels are fast: this CPU's, or those the environment
    variable TORCH_MP_CPU_FEATURES names ("all", "none", "avx512_bf16,amx_bf16")."""
    return _C.cpu_features()


def _capability(value: Any) -> Tuple[int, int]:
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)):
        raise ValueError(f"cuda_capability must be a (major, minor) pair of ints such as (8, 0), as "
                         f"torch.cuda.get_device_capability() gives it; got {value!r}")
    return (value[0], value[1])


def target_for(device: torch.device, dtype: torch.dtype) -> str:
    """The default policy's name for a device and low-precision dtype."""
    return _C.target_for(torch.device(device).type == "cuda", dtype == torch.float16)


class OpPolicy:
    """A mutable table op -> (category, reason). Ops in no list are fp32."""

    def __init__(self, entries: Optional[Dict[str, PolicyEntry]] = None, name: str = "custom"):
        self.name = name
        self._entries: Dict[str, PolicyEntry] = dict(entries or {})
        self._exclusions: List[Exclusion] = []
        self._rules: List[Tuple[Rule, str]] = []
        # why a default CPU policy keeps its heavy ops fp32 (no fast kernels for the low dtype there), else None
        self.slow_kernels: Optional[str] = None

    @classmethod
    def default(
        cls,
        target: str,
        cpu_features: Union[None, str, Iterable[str]] = None,
        cuda_capability: Optional[Tuple[int, int]] = None,
    ) -> "OpPolicy":
        """The default policy for `target`. The heavy ops (low, low_fp32_output) stay fp32 where the device has no
        fast kernels for the low dtype. On a CPU, fp16 needs avx512_fp16, amx_fp16 or asimdhp and bf16 needs
        avx512_bf16, amx_bf16 or bf16; `cpu_features` names the CPU planned for: None (this one, or the
        TORCH_MP_CPU_FEATURES environment variable), "all", "none", or feature names. On a GPU, fp16 needs compute
        capability 7.0 and bf16 8.0 (their tensor cores); `cuda_capability` is the (major, minor) of the GPU planned
        for: None takes the current CUDA device's where CUDA is available, and otherwise assumes the kernels fast."""
        if target not in TARGETS:
            raise ValueError(f"unknown policy target {target!r}; expected one of {', '.join(TARGETS)}")
        if cpu_features is not None and not isinstance(cpu_features, str):
            cpu_features = ",".join(cpu_features)
        if cuda_capability is None and target.startswith("cuda") and torch.cuda.is_available():
            cuda_capability = torch.cuda.get_device_capability()
        if cuda_capability is not None:
            cuda_capability = _capability(cuda_capability)
        rows, slow_kernels = _C.default_policy(target, cpu_features, cuda_capability)
        policy = cls({op: PolicyEntry(category, reason) for op, category, reason in rows}, name=target)
        policy.slow_kernels = slow_kernels
        return policy

    def copy(self) -> "OpPolicy":
        other = OpPolicy(copy.deepcopy(self._entries), name=self.name)
        other._exclusions = list(self._exclusions)
        other._rules = list(self._rules)
        other.slow_kernels = self.slow_kernels
        return other

    def exclude(self, *patterns: str, ops: Optional[Iterable[str]] = None, reason: Optional[str] = None) -> "OpPolicy":
        """Keeps in fp32 every node inside a module whose path matches one of the glob `patterns` (fnmatch:
        "head", "head.*", "*.attn", "blocks.1?.mlp"); a node inside "blocks.0.attn.proj" is matched by
        "blocks.0.attn.proj" and by each enclosing path ("blocks.0.attn", "blocks.0", "blocks"). With `ops`, only
        nodes of those ops ("aten::softmax"). Paths are the attribute names of nn.Module.named_modules()."""
        if not patterns:
            raise ValueError("exclude needs at least one module-path pattern, like 'head.*'")
        op_names = None
        if ops is not None:
            if isinstance(ops, str):
                raise TypeError("ops must be an iterable of op names, not a single string")
            op_names = tuple(ops)
            for op in op_names:
                _check_op(op)
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern:
                raise ValueError(f"module-path patterns are non-empty strings like 'head.*'; got {pattern!r}")
            self._exclusions.append(Exclusion(pattern, op_names, reason or f"module path matches {pattern!r}"))
        self._mark_edited()
        return self

    def add_rule(self, rule: Rule, name: Optional[str] = None) -> "OpPolicy":
        """Adds a per-node rule: `rule(node: NodeInfo)` returns a category (one of CATEGORIES),
        optionally with a reason as (category, reason), or None to leave the node to later rules and the op table.
        Rules run once per candidate node, in the order they were added."""
        if not callable(rule):
            raise TypeError(f"a rule must be callable with a NodeInfo, got {type(rule).__name__}")
        self._rules.append((rule, name or getattr(rule, "__name__", "rule")))
        self._mark_edited()
        return self

    @property
    def exclusions(self) -> List[Exclusion]:
        return list(self._exclusions)

    @property
    def rules(self) -> List[Tuple[Rule, str]]:
        return list(self._rules)

    def node_rule(self, fallback: Iterable[str] = ()) -> Optional[Callable]:
        """The per-node callback the converter calls, or None when nothing here depends on the node. `fallback`:
        outputs of nodes to keep in fp32 (the accuracy fallback's choice)."""
        fallback = frozenset(fallback)
        if not fallback and not self._exclusions and not self._rules:
            return None

        def decide(op, scope, output, input_shapes, input_dtypes, constants):
            if output in fallback:
                return "fp32", "fallback", "accuracy fallback: keeping it in fp32 brings the error within tolerance"
            node = NodeInfo(op, scope, output, input_shapes, input_dtypes, constants)
            for exclusion in self._exclusions:
                if exclusion.matches(node):
                    return "fp32", "exclusion", f"excluded: {exclusion.reason}"
            for rule, name in self._rules:
                verdict = rule(node)
                if verdict is None:
                    continue
                category, reason = verdict if isinstance(verdict, tuple) else (verdict, f"rule {name}")
                if category not in CATEGORIES:
                    raise ValueError(
                        f"rule {name} returned {verdict!r} for {op}; expected one of {', '.join(CATEGORIES)}, "
                        "(category, reason) or None"
                    )
                return category, "callable", str(reason)
            return None

        return decide

    def _mark_edited(self) -> None:
        if not self.name.endswith("+edits"):
            self.name += "+edits"

    def set(self, op: str, category: str, reason: str = "set by the user") -> "OpPolicy":
        """Puts `op` ("aten::gelu", all overloads) into `category`; returns self for chaining."""
        _check_op(op)
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r} for {op}; expected one of {', '.join(CATEGORIES)}")
        self._entries[op] = PolicyEntry(category, reason)
        self._mark_edited()
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
        self._mark_edited()
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
        extras = ""
        if self._exclusions or self._rules:
            extras = f", {len(self._exclusions)} exclusions, {len(self._rules)} rules"
        return f"OpPolicy({self.name!r}: {counts}{extras})"

    def to_markdown(self) -> str:
        lines = ["| op | category | reason |", "| --- | --- | --- |"]
        lines += [f"| `{op}` | {category} | {reason} |" for op, category, reason in self.rows()]
        return "\n".join(lines)


def _check_op(op: str) -> None:
    if not isinstance(op, str) or "::" not in op:
        raise ValueError(f"op names are qualified, like 'aten::conv2d'; got {op!r}")
