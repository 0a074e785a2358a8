"""The records the export front's stages hand each other, in the order conversion.py runs them (as csrc/jit's stages
hand on a PreparedGraph, a DataflowMapping and a PrecisionPlan):

    capture (capture.py)   -> Capture
    observe (observe.py)   -> Observation            (and StoredTensors, ir.stored_tensors: what the program stores)
    decide (facts.py)      -> a Decision per planned node
    plan (plan.py)         -> Plan                   (with the int8 plan, int8_plan.py, of an int8 conversion)
    apply (apply.py)       -> Applied                (its Casts, GraphItems and Weights)
    verify (verify.py)     -> NonFinite, or None
    report (report.py)     -> torch_mp.Report

Each record is made once by its stage and only read by the later ones. Nodes are named by their FX node names."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Optional, Set

import torch
from torch.export import ExportedProgram

from .. import _C
from .._inputs import CallInputs

if TYPE_CHECKING:  # for the annotations only: both modules read these records
    from .int8_plan import Int8Plan
    from .observe import _Seen


@dataclasses.dataclass(frozen=True)
class Capture:
    """A model's or a given program's program (not yet cleaned up), the example inputs, and for a module its eager
    outputs on them (the reference the program is checked against; None for a given program)."""

    program: ExportedProgram
    inputs: CallInputs
    eager_outputs: Any


@dataclasses.dataclass(frozen=True)
class StoredTensors:
    """The program's parameters, buffers and lifted constants: the names of their placeholders, and for each fp32
    one the readers of its tensor (tied weights: placeholders holding one tensor share one list)."""

    names: FrozenSet[str]
    readers: Dict[str, List[torch.fx.Node]]

    def holds(self, node: Any) -> bool:
        """Whether a node is one of the program's stored tensors."""
        return isinstance(node, torch.fx.Node) and node.op == "placeholder" and node.name in self.names


@dataclasses.dataclass(frozen=True)
class Observation:
    """What the runs on the example and calibration inputs showed: each floating value's statistics by node name,
    and each run's outputs (the fp32 reference the verification compares with)."""

    values: Dict[str, "_Seen"]
    outputs: List[Any]


@dataclasses.dataclass(frozen=True)
class Decision:
    """The core's decision of one planned node (core::classifyNode over its facts)."""

    node: torch.fx.Node
    op: str  # the schema's name: "aten::linear"
    scope: str  # the module path it ran in, as named_modules() names it
    verdict: "_C.NodeDecision"  # category, rule_kind, rule, reason, guard


@dataclasses.dataclass(frozen=True)
class Plan:
    """The precision of every planned node, as the core planner chose it from the decisions' categories."""

    decisions: List[Decision]  # in graph order
    precision: Dict[str, str]  # node name -> "low" or "fp32"
    forced_fp32: Set[str]  # the nodes the planner's constraints kept fp32 against their category
    low_dtype: torch.dtype
    low_io: bool  # the program takes and returns its fp32 tensors in the low dtype
    int8: Optional["Int8Plan"] = None  # an int8 conversion's int8 nodes and quantized values

    def runs_low(self, name: str) -> bool:
        return self.precision.get(name) == "low"


@dataclasses.dataclass(frozen=True)
class Cast:
    """One cast apply made: its node, the node whose value it casts, the dtypes (as the report spells them: "Float",
    "Half", "BFloat16") and the bytes it moves per inference (read in one dtype, written in the other)."""

    name: str
    value: str
    source: str
    target: str
    bytes: int


@dataclasses.dataclass(frozen=True)
class GraphItem:
    """A planned node or a cast of the converted graph, as the report draws it: the planned nodes and casts whose
    values it reads (through getitems, to the call that computed the value)."""

    name: str
    is_cast: bool
    op: str
    reads: List[str]
    cast_index: int  # its index in Applied.casts, -1 for a planned node


@dataclasses.dataclass(frozen=True)
class KeptFp32:
    """A stored fp32 tensor of the converted program: its first name (state_dict or constants key), its bytes and
    the nodes that read it (of the fp32 program)."""

    name: str
    bytes: int
    readers: List[torch.fx.Node]


@dataclasses.dataclass(frozen=True)
class Weights:
    """The stored tensors' bytes before and after the conversion (those nothing reads not counted), and the fp32 ones
    the converted program keeps."""

    bytes_before: int
    bytes_after: int
    kept_fp32: List[KeptFp32]


@dataclasses.dataclass(frozen=True)
class Applied:
    """The converted program and what apply (and quantize, for int8) made of it."""

    program: ExportedProgram
    casts: List[Cast]
    weights: Weights
    graph: List[GraphItem]


@dataclasses.dataclass(frozen=True)
class NonFinite:
    """Where a converted program computes NaN or inf where the fp32 one is finite: the run (0: the example inputs,
    then the calibration inputs), the output tensor's position among the floating outputs, or else (None) the name
    of the first intermediate value."""

    run: int
    tensor: Optional[int]
    value: str
