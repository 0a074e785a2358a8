"""The picture of a conversion: the converted graph coloured by precision, with its casts, as Graphviz DOT or SVG.

    mp, report = torch_mp.convert(model, (x,), torch.float16, return_report=True)
    torch_mp.visualize.render_svg(mp, report, "graph.svg")      # needs Graphviz's `dot` (apt-get install graphviz)
    dot_source = torch_mp.visualize.to_dot(mp, report)           # plain text, no Graphviz needed

What is drawn (the legend in the picture says the same):
- one node per planned node of the converted graph (report.nodes, matched by the name of its first output):
  low precision by the op policy in one colour, follow/widest nodes the planner put in low precision in a lighter
  shade of it, fp32 nodes in another colour; fp32 nodes kept there by an exclusion, a callable rule, the accuracy
  fallback or the range guard have a coloured bold border (unknown ops a dashed one);
- each cast torch_mp inserted (report.casts) as a small diamond, "→fp16 1.2 MB" (its dtype and the bytes it moves);
- graph inputs and outputs as ellipses; other nodes that touch tensors (lists, tuples, control flow) in grey;
  constants and nodes without tensors are left out.

Large models are collapsed by module path: with collapse_depth=k, every node whose scope ("layer1.0.conv1") has
the same first k components becomes one box labelled "layer1.0: 12 low, 3 fp32, 2 casts", filled in stripes in
proportion to its low / follow-low / fp32 nodes; edges between boxes are drawn once, and casts between boxes are
labels on those edges. Unplanned nodes are folded into the box of their first input. A module's own code above
depth k (the top module's ops, like ResNet's flatten) runs between its children's boxes and is drawn node by node;
a module called more than once (ResNet's shared relu) gets one box per call ("layer1.0.relu#2"), so that the boxes
stay a DAG. The default depth keeps at most ~150 boxes (to_dot says how).
"""
from __future__ import annotations

import shutil
import subprocess
from collections import Counter, defaultdict
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

import torch

MAX_BOXES = 150  # the automatic collapse depth keeps at most this many nodes/boxes

COLORS = {
    "low": "#3b7dd8",  # low precision: the op policy says low
    "follow_low": "#a9c8f0",  # follow/widest node the planner put in low precision
    "fp32": "#f4a259",  # fp32
    "unplanned": "#e0e0e0",  # not a planned node (lists, tuples, control flow)
    "cast": "#ffe066",  # an inserted cast
    "io": "#ffffff",  # graph input / output
}
# rule_kind -> (border colour, border style) for nodes kept in fp32 for a reason the user should see
MARKS = {
    "exclusion": ("#7b2cbf", "bold"),
    "callable": ("#1b9e3e", "bold"),
    "fallback": ("#d00000", "bold"),
    "range guard": ("#000000", "bold"),
    "unknown op": ("#555555", "dashed"),
}
MARK_LABELS = {
    "exclusion": "fp32: excluded (policy.exclude)",
    "callable": "fp32: callable rule",
    "fallback": "fp32: accuracy fallback",
    "range guard": "fp32: range guard",
    "unknown op": "fp32: unknown op",
}
SCALAR_TYPES = {5: "Half", 15: "BFloat16", 6: "Float", 7: "Double"}  # c10::ScalarType codes of aten::to's dtype
SHORT_DTYPES = {"half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float": "fp32", "float32": "fp32",
                "double": "fp64", "float64": "fp64"}


def to_dot(module: Any, report: Any, collapse_depth: Optional[int] = None) -> str:
    """Graphviz DOT source of the converted `module`'s graph coloured by `report` (a torch_mp.Report or its dict).

    collapse_depth: None (default) picks the depth automatically so that at most ~150 boxes remain (MAX_BOXES): the
    whole graph node by node when it has at most ~150 nodes, else the deepest module-path depth that leaves at
    most ~150 boxes and no cycle between boxes (modules called more than once make cycles), else the deepest that
    leaves at most ~150 boxes (depth 0: one box for the whole model). An int k collapses every node whose module
    path has the same first k components into one box.
    """
    picture = _Picture(module, report)
    if collapse_depth is None:
        collapse_depth = picture.auto_depth(MAX_BOXES)
    elif not isinstance(collapse_depth, int) or isinstance(collapse_depth, bool) or collapse_depth < 0:
        raise ValueError(f"collapse_depth must be None or an int >= 0, got {collapse_depth!r}")
    return picture.dot(collapse_depth)


def render_svg(module: Any, report: Any, path: str, collapse_depth: Optional[int] = None) -> str:
    """Writes the picture (see to_dot) as SVG to `path` with Graphviz's `dot` program; returns `path`.

    Raises RuntimeError when `dot` is not installed (to_dot works without it)."""
    dot = shutil.which("dot")
    if dot is None:
        raise RuntimeError(
            "rendering SVG needs Graphviz's `dot` program, which is not on PATH: install Graphviz "
            "(apt-get install graphviz; brew install graphviz; conda install graphviz), "
            "or write torch_mp.visualize.to_dot(...) to a .dot file and render it elsewhere"
        )
    source = to_dot(module, report, collapse_depth)
    result = subprocess.run([dot, "-Tsvg", "-o", str(path)], input=source, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"dot failed to render {path}: {result.stderr.strip()}")
    return str(path)


# ---------------------------------------------------------------------------------------------------------------


class _Item(NamedTuple):
    """One drawable node of the graph."""

    id: str  # DOT node name
    kind: str  # "planned", "cast", "unplanned", "input", "output"
    op: str
    scope: Optional[str]  # module path (planned nodes); None: inherit from the first input when collapsing
    node: Optional[Dict[str, Any]]  # the report's node
    cast: Optional[Dict[str, Any]]  # the report's cast (or a description built from the graph)


def _escape(text: str) -> str:
    """A DOT double-quoted string's contents: backslashes and quotes escaped, line breaks as \\n."""
    return "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in str(text).split("\n"))


def _short_dtype(name: Any) -> str:
    text = str(name).replace("torch.", "")
    return SHORT_DTYPES.get(text.lower(), text)


def _human_bytes(count: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{int(count)} B"


def _involves_tensors(type_: Any) -> bool:
    if isinstance(type_, torch._C.TensorType):
        return True
    if isinstance(type_, (torch._C.ListType, torch._C.OptionalType)):
        return _involves_tensors(type_.getElementType())
    if isinstance(type_, torch._C.TupleType):
        return any(_involves_tensors(t) for t in type_.elements())
    if isinstance(type_, torch._C.DictType):
        return _involves_tensors(type_.getValueType())
    return False


def _walk(block: Any) -> Iterator[Any]:
    for node in block.nodes():
        yield node
        for inner in node.blocks():
            yield from _walk(inner)


def _first_output_name(node: Any) -> str:
    return node.outputsAt(0).debugName() if node.outputsSize() else ""


def _cast_dtype(node: Any) -> Optional[str]:
    """The target dtype of an aten::to node from its constant dtype argument."""
    for value in list(node.inputs())[1:]:
        if value.node().kind() == "prim::Constant" and str(value.type()) == "int":
            code = value.toIValue()
            if code in SCALAR_TYPES:
                return SCALAR_TYPES[code]
    return None


class _Picture:
    """The converted graph as items and edges, matched with the report."""

    def __init__(self, module: Any, report: Any):
        data = report.data if hasattr(report, "data") else report
        if not isinstance(data, dict) or "nodes" not in data or "casts" not in data:
            raise TypeError("report must be a torch_mp.Report (or its .data dict) from the conversion of this module")
        graph = module.graph if hasattr(module, "graph") else module
        self.data = data
        self.items: Dict[str, _Item] = {}
        self.order: List[str] = []
        self.edges: List[Tuple[str, str]] = []
        self._build(graph)

    # --- reading the graph ---------------------------------------------------------------------------------------

    def _build(self, graph: Any) -> None:
        nodes = [n for n in _walk(graph) if n.kind() != "prim::Constant" and self._touches_tensors(n)]
        by_output = {n["output"]: n for n in self.data["nodes"]}
        matched = self._match(nodes, by_output)
        value_item: Dict[Any, str] = {}  # torch value (by unique id) -> item producing it
        renamed: Dict[str, str] = {}  # graph value name -> name in the report (for files loaded from disk)
        for value in graph.inputs():
            if _involves_tensors(value.type()):
                item = _Item(f"in:{value.debugName()}", "input", f"input {value.debugName()}", None, None, None)
                self._add(item)
                value_item[value.unique()] = item.id
        casts = {(c["value"], _short_dtype(c["to"])): c for c in self.data["casts"]}
        pending_casts = []
        owners = []  # (item, block) of nodes with blocks
        for graph_node in nodes:
            name = _first_output_name(graph_node)
            report_node = matched.get(id(graph_node))
            if report_node is not None:
                if report_node["output"] != name:
                    renamed[name] = report_node["output"]
                item = _Item(f"n:{report_node['output']}", "planned", report_node["op"], report_node.get("scope", ""),
                             report_node, None)
            elif graph_node.kind() == "aten::to" and self._is_inserted_cast(graph_node, casts, renamed):
                source = graph_node.inputsAt(0).debugName()
                dtype = _cast_dtype(graph_node) or "?"
                cast = casts.pop((renamed.get(source, source), _short_dtype(dtype)), None)
                item = _Item(f"cast:{name}", "cast", "aten::to", None, None, cast or {"to": dtype})
                if cast is None:
                    pending_casts.append(item)
            else:
                item = _Item(f"u:{name or graph_node.kind()}:{len(self.order)}", "unplanned", graph_node.kind(),
                             None, None, None)
            self._add(item)
            for value in graph_node.outputs():
                value_item[value.unique()] = item.id
            for value in graph_node.inputs():
                source = value_item.get(value.unique())
                if source is not None:
                    self.edges.append((source, item.id))
            owners.extend((item.id, inner) for inner in graph_node.blocks())
        for owner, inner in owners:  # what a branch / loop body returns flows into its node's outputs
            for value in inner.returnNode().inputs():
                source = value_item.get(value.unique())
                if source is not None and source != owner:
                    self.edges.append((source, owner))
        # casts whose value could not be named (a reloaded file's graph inputs): the report's remaining casts, in order
        remaining = defaultdict(list)
        for cast in casts.values():
            remaining[_short_dtype(cast["to"])].append(cast)
        for item in pending_casts:
            queue = remaining[_short_dtype(item.cast["to"])]
            if queue:
                self.items[item.id] = item._replace(cast=queue.pop(0))
        output = _Item("out", "output", "output", None, None, None)
        self._add(output)
        for value in graph.outputs():
            source = value_item.get(value.unique())
            if source is not None:
                self.edges.append((source, output.id))
        self.edges = list(dict.fromkeys(self.edges))

    @staticmethod
    def _touches_tensors(node: Any) -> bool:
        return any(_involves_tensors(v.type()) for v in list(node.inputs()) + list(node.outputs()))

    def _match(self, nodes: List[Any], by_output: Dict[str, Dict[str, Any]]) -> Dict[int, Dict[str, Any]]:
        """Graph node -> report node: by the first output's name when that finds (nearly) every report node with its
        op; else (a converted model saved and loaded again gets new value names, some of which collide with old
        ones) by op kind in graph order, which the report and saving both keep."""
        matched = {}
        mismatched = 0
        for node in nodes:
            report_node = by_output.get(_first_output_name(node))
            if report_node is not None:
                if report_node["op"] == node.kind():
                    matched[id(node)] = report_node
                else:
                    mismatched += 1
        self.reloaded = mismatched > 0 or len(matched) < 0.9 * len(by_output)
        if not self.reloaded:
            return matched
        matched = {}
        position = 0
        for report_node in self.data["nodes"]:
            for index in range(position, len(nodes)):
                if nodes[index].kind() == report_node["op"]:
                    matched[id(nodes[index])] = report_node
                    position = index + 1
                    break
        return matched

    def _is_inserted_cast(self, node: Any, casts: Dict[Tuple[str, str], Any], renamed: Dict[str, str]) -> bool:
        if self.reloaded:  # names changed: every aten::to that is not a planned node was inserted by torch_mp
            return True
        source = node.inputsAt(0).debugName()
        return (source, _short_dtype(_cast_dtype(node) or "")) in casts or any(
            c["value"] == source for c in self.data["casts"])

    def _add(self, item: _Item) -> None:
        self.items[item.id] = item
        self.order.append(item.id)

    # --- grouping ------------------------------------------------------------------------------------------------

    def scopes(self) -> Dict[str, str]:
        """Item -> module path; unplanned nodes and casts take their first input's."""
        scope: Dict[str, str] = {}
        inputs = defaultdict(list)
        for source, target in self.edges:
            inputs[target].append(source)
        for item_id in self.order:
            item = self.items[item_id]
            if item.scope is not None:
                scope[item_id] = item.scope
            else:
                scope[item_id] = next((scope[s] for s in inputs[item_id] if s in scope and
                                       self.items[s].kind not in ("input", "output")), "")
        return scope

    def max_depth(self) -> int:
        return max([len(s.split(".")) for s in self.scopes().values() if s] + [0])

    def count(self, depth: Optional[int]) -> int:
        """Drawn nodes (legend excluded) at a collapse depth (None: node by node)."""
        if depth is None:
            return len(self.items)
        return len(self._groups(depth)[1])

    def auto_depth(self, limit: int) -> Optional[int]:
        """None (node by node) when the graph is small; else the deepest depth with at most `limit` boxes whose box
        graph has no cycle (a module called several times, like ResNet's shared relu, makes its box a loop that
        tangles the layout), else the deepest with at most `limit` boxes."""
        if self.count(None) <= limit:
            return None
        small = [d for d in range(self.max_depth(), -1, -1) if self.count(d) <= limit]
        return next((d for d in small if self._acyclic(d)), small[0] if small else 0)

    def _acyclic(self, depth: int) -> bool:
        box_of, _ = self._groups(depth)
        for source, target in self.edges:  # a cast goes with what it reads
            if self.items[target].kind == "cast":
                box_of[target] = box_of.get(source, source)
        successors = defaultdict(set)
        for source, target in self.edges:
            a, b = box_of.get(source, source), box_of.get(target, target)
            if a != b:
                successors[a].add(b)
        state: Dict[str, int] = {}  # 1: on the stack, 2: done

        def visit(start: str) -> bool:
            stack = [(start, iter(successors[start]))]
            state[start] = 1
            while stack:
                box, children = stack[-1]
                child = next(children, None)
                if child is None:
                    state[box] = 2
                    stack.pop()
                elif state.get(child) == 1:
                    return False
                elif child not in state:
                    state[child] = 1
                    stack.append((child, iter(successors[child])))
            return True

        return all(visit(box) for box in list(successors) if box not in state)

    def _groups(self, depth: int) -> Tuple[Dict[str, str], List[str]]:
        """Item -> what draws it at this depth, and those in first-seen order: "box:PATH" for a node whose scope has
        at least `depth` components (PATH: the first `depth`); the node itself for a module's own code above that
        depth (the top module's ops, which run between its children's boxes: merged they would make cycles); inputs
        and outputs themselves. A module called more than once (ResNet's shared relu) gives one box per call: the
        nodes of one path that are not connected inside it become "box:PATH#2", "#3", ... Casts are not drawn on
        their own (see _collapsed)."""
        scopes = self.scopes()
        path_of = {}
        for item_id in self.order:
            item = self.items[item_id]
            parts = scopes[item_id].split(".") if scopes[item_id] else []
            if item.kind not in ("input", "output", "cast") and len(parts) >= depth:
                path_of[item_id] = ".".join(parts[:depth])
        # connected parts of each path (union-find; a cast joins what it reads to its readers)
        parent = {item_id: item_id for item_id in path_of}

        def root(item_id: str) -> str:
            while parent[item_id] != item_id:
                parent[item_id] = parent[parent[item_id]]
                item_id = parent[item_id]
            return item_id

        readers = defaultdict(list)
        for source, target in self.edges:
            readers[source].append(target)
        for source, target in self.edges:
            if self.items[source].kind == "cast":
                continue
            for reader in readers[target] if self.items[target].kind == "cast" else [target]:
                if source in path_of and reader in path_of and path_of[source] == path_of[reader]:
                    parent[root(source)] = root(reader)
        calls: Dict[str, Dict[str, str]] = defaultdict(dict)  # path -> component root -> drawn id
        box_of, drawn = {}, []
        for item_id in self.order:
            if self.items[item_id].kind == "cast":
                continue
            if item_id not in path_of:
                box_of[item_id] = item_id
            else:
                path, component = path_of[item_id], root(item_id)
                if component not in calls[path]:
                    count = len(calls[path]) + 1
                    calls[path][component] = f"box:{path}" + (f"#{count}" if count > 1 else "")
                box_of[item_id] = calls[path][component]
            if box_of[item_id] not in drawn:
                drawn.append(box_of[item_id])
        return box_of, drawn

    # --- drawing -------------------------------------------------------------------------------------------------

    def _title(self) -> str:
        nodes = self.data["nodes"]
        low = sum(1 for n in nodes if n["precision"] == "low")
        return (f"torch_mp: {self.data.get('dtype', '?')} ({_short_dtype(self.data.get('dtype', '?'))}), "
                f"{low} low-precision nodes, {len(nodes) - low} fp32 nodes, {len(self.data['casts'])} casts moving "
                f"{_human_bytes(self.data.get('cast_bytes', 0))} per inference")

    @staticmethod
    def _precision_class(node: Dict[str, Any]) -> str:
        if node["precision"] == "low":
            return "follow_low" if "planned low" in node.get("rule", "") else "low"
        return "fp32"

    def _cast_label(self, cast: Dict[str, Any]) -> str:
        label = f"→{_short_dtype(cast['to'])}"
        return f"{label} {_human_bytes(cast['bytes'])}" if "bytes" in cast else label

    def _node_attrs(self, item: _Item) -> Dict[str, str]:
        if item.kind in ("input", "output"):
            return {"label": item.op, "shape": "ellipse", "style": "filled", "fillcolor": COLORS["io"]}
        if item.kind == "cast":
            return {"label": self._cast_label(item.cast), "shape": "diamond", "style": "filled",
                    "fillcolor": COLORS["cast"], "fontsize": "9", "height": "0.3", "margin": "0.02"}
        op = item.op.split("::", 1)[-1]
        if item.kind == "unplanned":
            return {"label": op, "shape": "box", "style": "filled,rounded", "fillcolor": COLORS["unplanned"],
                    "fontcolor": "#666666", "color": "#999999"}
        node = item.node
        attrs = {"label": f"{op}\n{node.get('scope') or '<top>'}", "shape": "box", "style": "filled",
                 "fillcolor": COLORS[self._precision_class(node)],
                 "tooltip": f"{node['output']}: {node['precision']} — {node.get('rule', '')}"}
        mark = MARKS.get(node.get("rule_kind", ""))
        if mark and node["precision"] == "fp32":
            attrs.update(color=mark[0], style=f"filled,{mark[1]}", penwidth="3")
        return attrs

    def dot(self, depth: Optional[int]) -> str:
        lines = ["digraph torch_mp {", "  rankdir=TB;", "  labelloc=t;", f'  label="{_escape(self._title())}";',
                 '  node [fontname="Helvetica", fontsize=10];', '  edge [fontname="Helvetica", fontsize=9];']
        if depth is None:
            for item_id in self.order:
                lines.append(f"  {_node(item_id, self._node_attrs(self.items[item_id]))}")
            for source, target in self.edges:
                lines.append(f'  "{_escape(source)}" -> "{_escape(target)}";')
        else:
            lines += self._collapsed(depth)
        lines += self._legend()
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _collapsed(self, depth: int) -> List[str]:
        box_of, drawn = self._groups(depth)
        counts: Dict[str, Counter] = defaultdict(Counter)
        marks: Dict[str, Counter] = defaultdict(Counter)
        consumers = defaultdict(list)
        for source, target in self.edges:
            consumers[source].append(target)
        for item_id, box in box_of.items():
            item = self.items[item_id]
            if item.kind == "planned":
                counts[box][self._precision_class(item.node)] += 1
                kind = item.node.get("rule_kind", "")
                if kind in MARKS and item.node["precision"] == "fp32":
                    marks[box][kind] += 1
            elif item.kind == "unplanned":
                counts[box]["other"] += 1
        # a cast inside one box counts in it; a cast between two is a label on their edge
        edge_casts: Dict[Tuple[str, str], List[Dict[str, Any]]] = defaultdict(list)
        edges = []
        for source, target in self.edges:
            if self.items[source].kind == "cast":
                continue  # drawn from the cast's producer below
            here = box_of[source]
            if self.items[target].kind != "cast":
                edges.append((here, box_of[target]))
                continue
            readers = {box_of[c] for c in consumers[target] if c in box_of}
            if here in readers:
                counts[here]["casts"] += 1
            for reader in sorted(readers - {here}):
                edges.append((here, reader))
                edge_casts[(here, reader)].append(self.items[target].cast)
        lines = []
        for drawn_id in drawn:
            if drawn_id.startswith("box:"):
                attrs = self._box_attrs(drawn_id[len("box:"):], counts[drawn_id], marks[drawn_id])
            else:
                attrs = self._node_attrs(self.items[drawn_id])
            lines.append(f"  {_node(drawn_id, attrs)}")
        for source, target in dict.fromkeys(edges):
            if source == target:
                continue
            attrs = ""
            if (source, target) in edge_casts:
                label = _cast_summary(edge_casts[(source, target)], self._cast_label)
                attrs = f' [label="{_escape(label)}", color="#b8860b", fontcolor="#8b6508", penwidth=2]'
            lines.append(f'  "{_escape(source)}" -> "{_escape(target)}"{attrs};')
        return lines

    def _box_attrs(self, box: str, counts: Counter, marks: Counter) -> Dict[str, str]:
        planned = counts["low"] + counts["follow_low"] + counts["fp32"]
        parts = [f"{counts['low'] + counts['follow_low']} low", f"{counts['fp32']} fp32", f"{counts['casts']} casts"]
        if counts["other"]:
            parts.append(f"{counts['other']} other")
        label = f"{box or '<top>'}: " + ", ".join(parts)
        if marks:
            label += "\n" + ", ".join(f"{n} {MARK_LABELS[k].split(': ')[1]}" for k, n in marks.most_common())
        attrs = {"label": label, "shape": "box"}
        if planned == 0:
            attrs.update(style="filled", fillcolor=COLORS["unplanned"], fontcolor="#666666")
        else:
            # stripes in proportion to the kinds; the majority first
            shares = [(k, counts[k] / planned) for k in ("low", "follow_low", "fp32") if counts[k]]
            shares.sort(key=lambda share: -share[1])
            if len(shares) == 1:
                attrs.update(style="filled", fillcolor=COLORS[shares[0][0]])
            else:
                attrs.update(style="striped", fillcolor=":".join(f"{COLORS[k]};{f:.3f}" for k, f in shares))
        if marks:
            kind = marks.most_common(1)[0][0]
            attrs.update(color=MARKS[kind][0], penwidth="3")
            attrs["style"] = attrs["style"] + f",{MARKS[kind][1]}"
        return attrs

    def _legend(self) -> List[str]:
        entries = [
            ("legend:low", {"label": "low precision (policy)", "shape": "box", "style": "filled",
                            "fillcolor": COLORS["low"]}),
            ("legend:follow_low", {"label": "low precision (follow, planned low)", "shape": "box", "style": "filled",
                                   "fillcolor": COLORS["follow_low"]}),
            ("legend:fp32", {"label": "fp32", "shape": "box", "style": "filled", "fillcolor": COLORS["fp32"]}),
        ]
        for kind, (color, style) in MARKS.items():
            entries.append((f"legend:{kind}", {"label": MARK_LABELS[kind], "shape": "box",
                                               "style": f"filled,{style}", "fillcolor": COLORS["fp32"],
                                               "color": color, "penwidth": "3"}))
        entries += [
            ("legend:unplanned", {"label": "not planned (lists, tuples, control flow)", "shape": "box",
                                  "style": "filled,rounded", "fillcolor": COLORS["unplanned"],
                                  "fontcolor": "#666666"}),
            ("legend:cast", {"label": "cast →dtype bytes", "shape": "diamond", "style": "filled",
                             "fillcolor": COLORS["cast"], "fontsize": "9"}),
        ]
        lines = ["  subgraph cluster_legend {", '    label="legend";', "    style=dashed;"]
        lines += [f"    {_node(name, attrs)}" for name, attrs in entries]
        for (first, _), (second, _) in zip(entries, entries[1:]):
            lines.append(f'    "{first}" -> "{second}" [style=invis];')
        lines.append("  }")
        return lines


def _node(name: str, attrs: Dict[str, str]) -> str:
    body = ", ".join(f'{key}="{_escape(value)}"' for key, value in attrs.items())
    return f'"{_escape(name)}" [{body}];'


def _cast_summary(casts: List[Dict[str, Any]], label) -> str:
    """One edge label for the casts between two boxes: one line per target dtype."""
    by_dtype: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
    for cast in casts:
        by_dtype[_short_dtype(cast["to"])].append(cast)
    lines = []
    for dtype, group in by_dtype.items():
        total = sum(c.get("bytes", 0) for c in group)
        count = f"{len(group)}× " if len(group) > 1 else ""
        lines.append(f"{count}→{dtype} {_human_bytes(total)}" if total else f"{count}→{dtype}")
    return "\n".join(lines)
