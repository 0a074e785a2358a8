"""Facts: what core::NodeFacts needs of each FX node (the counterpart of csrc/jit/plan/graph_to_dataflow's), gathered
from the program and its observation, and the decision the core's rule order makes of them (core/classify_node, one
_C.classify_nodes call): the dtypes a node reads and writes, the user's node rule's answer, the numbers the range guards
judge (observed fp32 values, stored tensors' and float scalars' magnitudes: core/range_guards judges them), the
underflow-to-zero walk over the FX graph's view (core/underflow_to_zero), whether a lookup's table is stored low,
whether a product sums nothing; and each heavy node's FLOPs (core/flop_formulas). Takes the program, its Observation
and StoredTensors; hands on a Decision (records.py) per planned node, in graph order."""
from __future__ import annotations

import math
import operator
from typing import Any, Dict, List, Optional, Set, Tuple

import torch
from torch.export import ExportedProgram

from .. import _C
from .._inputs import tensors_of
from .ir import _floating_dtypes, _is_view, _op_name, _outputs_of, _scope, _val
from .observe import _Seen
from .records import Decision, Observation, StoredTensors


class ProgramFacts:
    """The program, its observation and its stored tensors, read per FX node into what core::NodeFacts holds;
    decide hands every node's facts to core::classifyNode in one call (_C.classify_nodes)."""

    def __init__(self, program: ExportedProgram, observation: Observation, stored: StoredTensors, policy,
                 bound: "_C.ConversionRequest"):
        self.program = program
        self.seen = observation.values
        self.policy = policy
        self._bound = bound  # the options as C++ holds them: the policy and the dtype the core decides with
        self._stored_names = stored.names
        self._stored_readers = stored.readers  # a stored placeholder -> readers of its tensor
        self._underflow = _underflow_to_zero(program.graph, self.seen, self._bound)

    def decide(self, keep_fp32: Set[str], keep_non_finite: Set[str], runs_int8: Set[str] = frozenset()
               ) -> List[Decision]:
        """The decision per planned node: core::classifyNode (the rule order both fronts share) over the facts
        gathered here, in one call; `runs_int8` names an int8 conversion's int8 nodes."""
        nodes = []
        for node in self.program.graph.nodes:
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            reads_tensor = any(isinstance(_val(i), torch.Tensor) for i in node.all_input_nodes)
            if not reads_tensor and not list(tensors_of(_val(node))):
                continue  # arithmetic on sizes
            nodes.append((node, _op_name(node), _scope(node)))
        node_rule = self.policy.node_rule()
        ask = None if node_rule is None else (lambda i: self._ask_node_rule(node_rule, *nodes[i]))
        decisions = _C.classify_nodes([self._facts(*entry, keep_fp32, keep_non_finite, runs_int8) for entry in nodes],
                                      self._bound, ask)
        return [Decision(node, op, scope, verdict) for (node, op, scope), verdict in zip(nodes, decisions)]

    def _facts(self, node, op, scope, keep_fp32, keep_non_finite, runs_int8) -> "_C.NodeFacts":
        """What core::NodeFacts holds of one node, every field named (the record has no defaults). A program's
        nodes were all observed, none is a graph input or output, and a tensor list an FX node returns is read item
        by item (getitem), each cast on its own, so `boundary`, `unobserved` and `writes_tensor_list` never apply
        here. The range guards judge the node's numbers in the options' dtype (_C.judge_ranges)."""
        outputs = _outputs_of(node)
        floating = [d for i in node.all_input_nodes for d in _floating_dtypes(_val(i))] + \
            [d for o in outputs for d in _floating_dtypes(_val(o))]
        ranges = _C.judge_ranges(_C.RangeGuardNumbers(observed=self._observed(node, outputs),
                                                      constants=self._constants(node), scalars=self._scalars(node)),
                                 self._bound)
        opaque = not isinstance(node.target, torch._ops.OpOverload)  # a higher-order op
        return _C.NodeFacts(
            op=op, scope=scope, id=node.name, boundary=_C.Boundary.none, unobserved=False,
            not_fp32=any(d != torch.float32 for d in floating),
            control_flow=_C.ControlFlow.opaque_subgraphs if opaque else _C.ControlFlow.none,
            kept_non_finite=node.name in keep_non_finite, kept_by_fallback=node.name in keep_fp32,
            runs_int8=node.name in runs_int8,
            observed_range=ranges.observed_range, underflow_to_zero=self._underflow.get(node.name),
            constant_range=ranges.constant_range, lost_scalar=ranges.lost_scalar,
            reads_table_stored_low=bool(_C.op_facts(op)["table_lookup"]) and self._table_stored_low(node),
            writes_tensor_list=False, sums_nothing=self._sums_nothing(node, op))

    def _ask_node_rule(self, node_rule, node, op, scope) -> Optional[Tuple[str, str]]:
        """The user's per-node callable on one node, given what convert's NodeDescription gives it."""
        tensors = [_val(a) if isinstance(_val(a), torch.Tensor) else None for a in node.args]
        shapes = tuple(tuple(self.seen[a.name].shape) if t is not None and a.name in self.seen else None
                       for a, t in zip(node.args, tensors))
        dtypes = tuple(t.dtype if t is not None else None for t in tensors)
        constants = {}  # as the schema names them, defaults included (a TorchScript node spells every argument)
        for position, argument in enumerate(node.target._schema.arguments):
            if position < len(node.args):
                value = node.args[position]
            elif argument.name in node.kwargs:
                value = node.kwargs[argument.name]
            elif argument.has_default_value():
                value = argument.default_value
            else:
                continue
            if not any(isinstance(v, torch.fx.Node) for v in (value if isinstance(value, (list, tuple)) else [value])):
                constants[argument.name] = value
        return node_rule(node.name, op, scope, node.name, shapes, dtypes, constants)

    def _sums_nothing(self, node, op) -> bool:
        """convert's demotion of a product that sums nothing (core::sumsNothing): it follows. A tensor list an FX
        node returns is read item by item (getitem), each cast on its own, so convert's other demotion (a
        low_fp32_output op writing a tensor list keeps fp32) has nothing to do here."""
        first = node.args[0] if node.args else None
        equation = first if op == "aten::einsum" and isinstance(first, str) else None
        seen = self.seen.get(first.name) if isinstance(first, torch.fx.Node) else None
        return _C.sums_nothing(op, equation, list(seen.shape) if seen is not None and seen.shape is not None else None)

    def _scalars(self, node) -> List["_C.NamedNumber"]:
        """The float scalars the node reads, named by position."""
        return [_C.NamedNumber(name=name, value=scalar) for name, scalar in _float_scalars(node)]

    def _observed(self, node, outputs) -> List["_C.ObservedNumber"]:
        """The computed fp32 values the node reads and writes, as observed."""
        observed = []
        for value in list(node.all_input_nodes) + outputs:
            seen = self.seen.get(value.name)
            if seen is not None and seen.dtype == torch.float32 and not self._stored(value):
                observed.append(_C.ObservedNumber(name=value.name, largest_magnitude=seen.largest,
                                                  only_integers=seen.only_integers))
        return observed  # stored tensors count as constants: a tiny bias is harmless

    def _constants(self, node) -> List["_C.NamedNumber"]:
        """The largest magnitude of each stored tensor and finite float scalar the node reads (in a frozen
        TorchScript graph both are constants, which jit/plan/numeric_guards lists)."""
        stored = [(value.name, self.seen[value.name].largest) for value in node.all_input_nodes
                  if self._stored(value) and value.name in self.seen]
        scalars = [(name, abs(scalar)) for name, scalar in _float_scalars(node) if math.isfinite(scalar)]
        return [_C.NamedNumber(name=name, value=largest) for name, largest in stored + scalars]

    def _table_stored_low(self, lookup: torch.fx.Node) -> bool:
        """Whether a lookup's table is a stored tensor that can be stored once, low (core::OpPolicy::storesTableLow, as
        convert asks it): every node reading it is a lookup of it or one the policy runs low. A view of the table (a
        tied head's `t()`) is followed to its readers: convert's frozen graph folds it into a constant sharing the
        table's storage, whose readers it asks about."""
        readers = self._stored_readers.get(lookup.args[0].name) if lookup.args and self._stored(lookup.args[0]) \
            else None
        if readers is None:
            return False
        aliases = {name for name, group in self._stored_readers.items() if group is readers}
        reached, pending = [], list(readers)
        while pending:
            reader = pending.pop(0)
            if _is_view(reader):
                aliases.add(reader.name)
                pending.extend(user for user in reader.users if user not in pending)
            elif reader not in reached:
                reached.append(reader)
        reads_first = [bool(r.args) and isinstance(r.args[0], torch.fx.Node) and r.args[0].name in aliases
                       for r in reached]
        return self.policy._c.stores_table_low([(_op_name(r), first) for r, first in zip(reached, reads_first)])

    def _stored(self, node: Any) -> bool:
        """Whether a node is a parameter, buffer or lifted constant of the program."""
        return isinstance(node, torch.fx.Node) and node.op == "placeholder" and node.name in self._stored_names


def _float_scalars(node: torch.fx.Node) -> List[Tuple[str, float]]:
    """(name by position, value) of the float scalars a node reads."""
    return [(f"{node.name}[{position}]", scalar)
            for position, scalar in enumerate(list(node.args) + list(node.kwargs.values()))
            if isinstance(scalar, float)]


def _underflow_to_zero(graph: torch.fx.Graph, seen: Dict[str, _Seen], options) -> Dict[str, "_C.GuardVerdict"]:
    """The underflow-to-zero verdict by node name (core/underflow_to_zero, as convert's numeric guards ask it) over
    the FX graph's view: its ATen calls, the tensor values each reads, the float scalars each reads."""
    calls = [node for node in graph.nodes
             if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)]
    call_index = {node.name: i for i, node in enumerate(calls)}
    values: List[Tuple[str, int, float]] = []
    value_index: Dict[str, int] = {}

    def index_of(value: torch.fx.Node) -> int:
        if value.name not in value_index:
            observed = seen.get(value.name)
            smallest = observed.smallest if observed is not None and observed.dtype == torch.float32 else math.inf
            value_index[value.name] = len(values)
            values.append((value.name, call_index.get(value.name, -1), smallest))
        return value_index[value.name]

    nodes = []
    for node in calls:
        arguments = list(node.args) + list(node.kwargs.values())
        exponent = node.args[1] if len(node.args) > 1 else None
        nodes.append((node.target._schema.name,
                      [index_of(a) if isinstance(a, torch.fx.Node) and isinstance(_val(a), torch.Tensor) else -1
                       for a in node.args],
                      [abs(a) for a in arguments if isinstance(a, float) and a],
                      not (isinstance(exponent, (int, float)) and exponent >= 0)))
    return {calls[i].name: verdict for i, verdict in _C.underflow_to_zero(nodes, values, options).items()}


def _flops(decision: Decision, seen: Dict[str, _Seen]) -> int:
    """Multiply-add FLOPs of a heavy op at the example inputs' sizes (core/flop_formulas, as convert counts them)."""
    node = decision.node

    def sizes(value: Any) -> Optional[List[int]]:
        observed = seen.get(value.name)
        return observed.shape if observed is not None else None

    outputs = _outputs_of(node)
    inputs = [sizes(a) if isinstance(a, torch.fx.Node) else None for a in node.args]
    transposed = node.args[6] if len(node.args) > 6 and isinstance(node.args[6], bool) else None
    integers = [a if isinstance(a, int) and not isinstance(a, bool) else None for a in node.args]
    weights = []
    if isinstance(node.target, torch._ops.OpOverload):
        names = [argument.name for argument in node.target._schema.arguments]
        position = names.index(_C.RECURRENT_WEIGHTS_ARGUMENT) if _C.RECURRENT_WEIGHTS_ARGUMENT in names else None
        listed = node.args[position] if position is not None and position < len(node.args) else ()
        weights = [sizes(t) for t in listed if isinstance(t, torch.fx.Node) and sizes(t) is not None]
    first = sizes(node.args[0]) if node.args and isinstance(node.args[0], torch.fx.Node) else None
    return _C.estimate_flops(decision.op, inputs, sizes(outputs[0]) if outputs else None, transposed, weights,
                             integers, math.prod(first) if first is not None else None)
