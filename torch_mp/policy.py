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
they were added), the op's entry. Nodes the range guard keeps in fp32 stay fp32 whatever the rules say, unless a
forced-low rule (`policy.force_low("encoder.*", ops=["aten::softmax"])`, or by node: `force_low_nodes`) runs them low
over it.
"""
from __future__ import annotations

import sys
import warnings
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

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

    id: int  # the node's id: the same in every conversion of one preparation, as in the report's nodes (export: its
    #          FX node name, a str)
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


class SlowKernelsWarning(UserWarning):
    """The device has no fast kernels for the low dtype: the default policy keeps the heavy ops fp32 there."""


def fast_float_dtype(device: Union[str, torch.device]) -> torch.dtype:
    """device_dtype without its warning: an int8 conversion's float plan, where no fast low float dtype is no news."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SlowKernelsWarning)
        return device_dtype(device)


def device_dtype(device: Union[str, torch.device]) -> torch.dtype:
    """The low dtype to convert to when none is given, as torch.autocast picks it per device: fp16 on a CUDA GPU;
    on a CPU bf16 where it has fast bf16 kernels, else fp16 where it has fast fp16 kernels. Where the device has
    neither, the first of these, with a SlowKernelsWarning: the conversion keeps the heavy ops fp32 and why."""
    device = torch.device(device)
    choices = (torch.float16,) if device.type == "cuda" else (torch.bfloat16, torch.float16)
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" and torch.cuda.is_available() \
        else None
    reasons = []
    for dtype in choices:
        slow = _C.OpPolicy.defaults(target_for(device, dtype), None, capability).slow_kernels
        if slow is None:
            return dtype
        reasons.append(slow)
    warnings.warn(f"no low-precision dtype has fast kernels on this {device.type}: converting to {choices[0]}, the "
                  f"heavy ops stay fp32 ({'; '.join(reasons)}). Pass dtype= to choose, or plan for another device "
                  "with policy=torch_mp.OpPolicy.default(target, cpu_features=...)", SlowKernelsWarning, stacklevel=3)
    return choices[0]


def runs_nothing_heavy_low(policy: "OpPolicy") -> bool:
    """Whether the policy keeps every heavy op fp32 for want of fast kernels (slow_kernels) and the user made none low
    (no op set low, no forced-low rule or node, no node rule): what it would plan low, pointwise ops and the tables
    lookups read, gains no speed and loses accuracy."""
    return (policy.slow_kernels is not None and not policy.ops("low") and not policy.ops("low_fp32_output")
            and not policy.forced_low and not policy.forced_low_nodes and not policy.rules)


def all_fp32(policy: "OpPolicy") -> "OpPolicy":
    """A copy of a policy that runs nothing heavy low (runs_nothing_heavy_low) with every op fp32, each reason saying
    why; its name, exclusions and slow_kernels kept, and the heavy ops' rule kind ("no fast kernel")."""
    kept = policy.copy()
    for op, category, reason in kept.rows():
        if category != "fp32":
            kept._c.set(op, "fp32", f"{reason}; fp32 with the heavy ops, which have no fast kernels here "
                                    f"({policy.slow_kernels}): low, it would lose accuracy for no speed")
    return kept


def warn_nothing_low(policy: "OpPolicy", dtype: torch.dtype, device_target: str) -> None:
    """The warning for an explicit low dtype that a policy without fast kernels would run nothing heavy in; its remedy
    names the policy's target (a default policy's name), else the device's."""
    named = policy.name.partition("+")[0]
    target = named if named in TARGETS else device_target
    remedy = (f'torch_mp.OpPolicy.default("{target}", cuda_capability=(8, 0))' if target.startswith("cuda")
              else f'torch_mp.OpPolicy.default("{target}", cpu_features="all")')
    warnings.warn(
        f"dtype={dtype} runs nothing heavy low here: the policy {policy.name} keeps the heavy ops fp32 "
        f"({policy.slow_kernels}), so torch_mp keeps every op and stored tensor fp32 too (low pointwise ops and "
        f"tables would lose accuracy for no speed; the report's slow_kernels says why). To plan for a device that has "
        f"fast {dtype} kernels, pass policy={remedy} (or the features of the device you deploy to); to force "
        "chosen ops low here, edit the policy (set, force_low)", SlowKernelsWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The stacklevel of the first caller outside torch_mp: the user's code, or the command line's __main__."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "torch_mp":
        level, frame = level + 1, frame.f_back
    return level


def _module_rules(method: str, patterns, ops) -> List[Tuple[str, Optional[List[str]]]]:
    """(pattern, op names or None) per pattern of exclude / force_low, checked."""
    if not patterns:
        raise ValueError(f"{method} needs at least one module-path pattern, like 'head.*'")
    op_names = None
    if ops is not None:
        if isinstance(ops, str):
            raise TypeError("ops must be an iterable of op names, not a single string")
        op_names = list(ops)
        for op in op_names:
            _check_op(op)
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern:
            raise ValueError(f"module-path patterns are non-empty strings like 'head.*'; got {pattern!r}")
    return [(pattern, op_names) for pattern in patterns]


class OpPolicy:
    """A view of the C++ op policy (csrc/core/op_policy): op -> (category, reason), ops in no list being fp32, and
    module-path exclusions; plus the per-node rule callables, which are Python's own."""

    def __init__(self, entries: Optional[Dict[str, PolicyEntry]] = None, name: str = "custom"):
        self._c = _C.OpPolicy()
        self._c.name = name
        for op, (category, reason) in (entries or {}).items():
            self._c.set(op, category, reason)
        self._rules: List[Tuple[Rule, str]] = []

    @classmethod
    def _wrap(cls, bound: "_C.OpPolicy", rules: List[Tuple[Rule, str]]) -> "OpPolicy":
        policy = cls.__new__(cls)
        policy._c = bound
        policy._rules = list(rules)
        return policy

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
        return cls._wrap(_C.OpPolicy.defaults(target, cpu_features, cuda_capability), [])

    @property
    def name(self) -> str:
        return self._c.name

    @name.setter
    def name(self, value: str) -> None:
        self._c.name = value

    @property
    def slow_kernels(self) -> Optional[str]:
        """Why a default policy keeps its heavy ops fp32 (no fast kernels for the low dtype there), else None."""
        return self._c.slow_kernels

    def copy(self) -> "OpPolicy":
        return OpPolicy._wrap(_C.OpPolicy(self._c), self._rules)

    def exclude(self, *patterns: str, ops: Optional[Iterable[str]] = None, reason: Optional[str] = None) -> "OpPolicy":
        """Keeps in fp32 every node inside a module whose path matches one of the glob `patterns` (fnmatch:
        "head", "head.*", "*.attn", "blocks.1?.mlp"); a node inside "blocks.0.attn.proj" is matched by
        "blocks.0.attn.proj" and by each enclosing path ("blocks.0.attn", "blocks.0", "blocks"). With `ops`, only
        nodes of those ops ("aten::softmax"). Paths are the attribute names of nn.Module.named_modules()."""
        for pattern, op_names in _module_rules("exclude", patterns, ops):
            self._c.exclude(pattern, op_names, reason or f"module path matches {pattern!r}")
        self._mark_edited()
        return self

    def force_low(self, *patterns: str, ops: Optional[Iterable[str]] = None,
                  reason: Optional[str] = None) -> "OpPolicy":
        """Runs low every node inside a module whose path matches one of the glob `patterns` (as exclude matches
        them; "*" also matches the top module's own nodes), with `ops` only nodes of those ops, over the range
        guards: for values the user knows stay within the low dtype where the example inputs did not. The report
        gives such a node rule_kind "forced low" and the guard it overrode. The verification's repair and the
        accuracy fallback still keep a node fp32 where they measured that they must."""
        for pattern, op_names in _module_rules("force_low", patterns, ops):
            self._c.force_low(pattern, op_names, reason or f"module path matches {pattern!r}")
        self._mark_edited()
        return self

    def force_low_nodes(self, *node_ids: Union[int, str], reason: Optional[str] = None) -> "OpPolicy":
        """Runs low the nodes with these ids, as the report's `nodes` give them (`id`: an int for `convert`'s
        TorchScript nodes, the FX node's name for `export`'s), over the range guards, as `force_low` runs a module's
        nodes: for one model's nodes that a guard keeps fp32 where the user knows their values stay in range.
        Control flow is never forced; the verification's repair and the accuracy fallback still win."""
        if not node_ids:
            raise ValueError("force_low_nodes needs at least one node id, as the report's nodes give it")
        for node_id in node_ids:
            if isinstance(node_id, bool) or not isinstance(node_id, (int, str)) or node_id == "":
                raise ValueError(f"node ids are the report's: an int (convert) or an FX node name (export); "
                                 f"got {node_id!r}")
        for node_id in node_ids:
            self._c.force_low_node(str(node_id), reason or f"node {node_id}")
        self._mark_edited()
        return self

    @property
    def forced_low_nodes(self) -> Dict[str, str]:
        """{node id (a string): reason} of the nodes forced low by force_low_nodes."""
        return dict(self._c.forced_low_nodes())

    def add_rule(self, rule: Rule, name: Optional[str] = None) -> "OpPolicy":
        """Adds a per-node rule: `rule(node: NodeInfo)` returns a category (one of CATEGORIES),
        optionally with a reason as (category, reason), or None to leave the node to later rules and the op table.
        Rules run once per candidate node, in the order they were added."""
        if not callable(rule):
            raise TypeError(f"a rule must be callable with a NodeInfo, got {type(rule).__name__}")
        self._rules.append((rule, name or getattr(rule, "__name__", "rule")))
        self._mark_edited()
        return self

    def excludes(self, op: str, scope: str) -> bool:
        """Whether an exclusion keeps a node of `op` inside the module at path `scope` in fp32."""
        return self._c.excluded_by(op, scope) is not None

    @property
    def exclusions(self) -> List[Exclusion]:
        return [Exclusion(pattern, tuple(ops) if ops is not None else None, reason)
                for pattern, ops, reason in self._c.exclusions()]

    @property
    def forced_low(self) -> List[Exclusion]:
        """The forced-low rules (pattern, ops, reason), in the order added."""
        return [Exclusion(pattern, tuple(ops) if ops is not None else None, reason)
                for pattern, ops, reason in self._c.forced_low()]

    @property
    def rules(self) -> List[Tuple[Rule, str]]:
        return list(self._rules)

    def node_rule(self) -> Optional[Callable]:
        """The callback the converter calls per node after the fallback's kept nodes and the exclusions, or None when
        there are no rules: (id, op, scope, output, input_shapes, input_dtypes, constants) -> None or
        (category, reason)."""
        if not self._rules:
            return None
        rules = list(self._rules)

        def decide(node_id, op, scope, output, input_shapes, input_dtypes, constants):
            node = NodeInfo(node_id, op, scope, output, input_shapes, input_dtypes, constants)
            for rule, name in rules:
                verdict = rule(node)
                if verdict is None:
                    continue
                category, reason = verdict if isinstance(verdict, tuple) else (verdict, f"rule {name}")
                if category not in CATEGORIES:
                    raise ValueError(
                        f"rule {name} returned {verdict!r} for {op}; expected one of {', '.join(CATEGORIES)}, "
                        "(category, reason) or None"
                    )
                return category, str(reason)
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
        self._c.set(op, category, reason)
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
        if not self._c.remove(op):
            raise KeyError(f"{op} is in no list of this policy")
        self._mark_edited()
        return self

    def category(self, op: str) -> str:
        return self._c.category(op)

    def reason(self, op: str) -> str:
        entry = self._c.entry(op)
        return entry[1] if entry else "in no list (unknown op)"

    def ops(self, category: str) -> list:
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}")
        return [op for op, listed, _ in self._c.rows() if listed == category]

    def entries(self) -> Dict[str, PolicyEntry]:
        return {op: PolicyEntry(category, reason) for op, category, reason in self._c.rows()}

    def rows(self):
        return self._c.rows()

    def __contains__(self, op: str) -> bool:
        return op in self._c

    def __len__(self) -> int:
        return len(self._c)

    def __repr__(self) -> str:
        rows = self._c.rows()
        counts = ", ".join(f"{c}={sum(1 for _, listed, _ in rows if listed == c)}" for c in CATEGORIES)
        extras = ""
        exclusions, forced = self._c.exclusions(), self._c.forced_low() + list(self._c.forced_low_nodes())
        if exclusions or forced or self._rules:
            extras = f", {len(exclusions)} exclusions, {len(forced)} forced low, {len(self._rules)} rules"
        return f"OpPolicy({self.name!r}: {counts}{extras})"

    def to_markdown(self) -> str:
        lines = ["| op | category | reason |", "| --- | --- | --- |"]
        lines += [f"| `{op}` | {category} | {reason} |" for op, category, reason in self.rows()]
        return "\n".join(lines)


def check_rules_match(policy: OpPolicy, nodes: Sequence[Dict[str, Any]]) -> None:
    """Refuses an exclusion, forced-low rule or force_low_nodes id of `policy` that matches none of `nodes` (a
    report's `nodes`: id, op, scope), naming it: a typo or a path that is not the model's would otherwise change
    nothing, silently. _job.run_job calls it on the nodes of a job's first conversion, on either front."""
    scopes = sorted({node["scope"] for node in nodes if node["scope"]})
    paths = ", ".join(scopes[:8]) + (", ..." if len(scopes) > 8 else "") or "none"
    for method, rules, matches in (("exclude", policy._c.exclusions(), "excluded_by"),
                                   ("force_low", policy._c.forced_low(), "forced_low_by")):
        for pattern, ops, reason in rules:
            only_this = _C.OpPolicy()
            getattr(only_this, method)(pattern, ops, reason)
            if not any(getattr(only_this, matches)(node["op"], node["scope"]) is not None for node in nodes):
                of_ops = f" with ops={list(ops)}" if ops is not None else ""
                raise ValueError(f"policy.{method}({pattern!r}){of_ops} matches no node of the model; its nodes' "
                                 f"module paths (nn.Module.named_modules() names) are: {paths}")
    ids = {str(node["id"]) for node in nodes}
    unknown = sorted(node_id for node_id in policy._c.forced_low_nodes() if node_id not in ids)
    if unknown:
        raise ValueError(f"policy.force_low_nodes: no node of the model has the id {', '.join(unknown)}; ids are "
                         "the report's nodes[].id of this model (an int for convert, an FX node name for export)")


def _check_op(op: str) -> None:
    if not isinstance(op, str) or "::" not in op:
        raise ValueError(f"op names are qualified, like 'aten::conv2d'; got {op!r}")


def module_paths(model: Any) -> List[str]:
    """The module paths that a policy's rules (exclude, force_low) match in `model`, sorted: an nn.Module's or a
    ScriptModule's named_modules() names, the modules an ExportedProgram's nodes record having run in; empty for a
    frozen module (freezing drops its submodules: its report's nodes name them)."""
    if isinstance(model, torch.export.ExportedProgram):
        from ._export.ir import _scope  # here: the export front imports this module

        return sorted({_scope(node) for node in model.graph.nodes if node.op == "call_function"} - {""})
    return sorted(name for name, _ in model.named_modules() if name)
