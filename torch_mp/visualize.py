"""The picture of a conversion: the converted graph coloured by precision, with its casts, drawn from the report alone
(its `graph`: every node by id, what it reads, the casts between) with the `graphviz` package.

    mp = torch_mp.convert(model, (x,), torch.float16)
    report = torch_mp.report_of(mp)
    torch_mp.visualize.render_svg(report, "graph.svg")      # needs Graphviz's `dot` (apt-get install graphviz)
    dot_source = torch_mp.visualize.to_dot(report)           # plain text, no Graphviz program needed

What is drawn (the legend in the picture says the same):
- one node per planned node of the converted graph (report.nodes, by id): low precision by the op policy in one
  colour, follow/widest nodes the planner put in low precision in a lighter shade of it, fp32 nodes in another
  colour; fp32 nodes kept there by an exclusion, a callable rule, the accuracy fallback or the range guard have a
  coloured bold border (unknown ops a dashed one);
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

from collections import Counter, defaultdict
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import graphviz

MAX_BOXES = 150  # the automatic collapse depth keeps at most this many nodes/boxes

COLORS = {
    "low": "#3b7dd8",  # low precision: the op policy says low
    "follow_low": "#a9c8f0",  # follow/widest node the planner put in low precision
    "int8": "#2a9d8f",  # int8 (an int8 conversion's int8 kernels and the ops on uint8 between them)
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
SHORT_DTYPES = {"half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float": "fp32", "float32": "fp32",
                "double": "fp64", "float64": "fp64"}


def to_dot(report: Any, collapse_depth: Optional[int] = None) -> str:
    """Graphviz DOT source of the converted graph a `report` (a torch_mp.Report or its dict) describes.

    collapse_depth: None (default) picks the depth automatically so that at most ~150 boxes remain (MAX_BOXES): the
    whole graph node by node when it has at most ~150 nodes, else the deepest module-path depth that leaves at
    most ~150 boxes and no cycle between boxes (modules called more than once make cycles), else the deepest that
    leaves at most ~150 boxes (depth 0: one box for the whole model). An int k collapses every node whose module
    path has the same first k components into one box.
    """
    return _digraph(report, collapse_depth).source


def render_svg(report: Any, path: str, collapse_depth: Optional[int] = None) -> str:
    """Writes the picture (see to_dot) as SVG to `path` with Graphviz's `dot` program; returns `path`.

    Raises RuntimeError when `dot` is not installed (to_dot works without it)."""
    digraph = _digraph(report, collapse_depth)
    try:
        svg = digraph.pipe(format="svg")
    except graphviz.ExecutableNotFound as error:
        raise RuntimeError(
            "rendering SVG needs Graphviz's `dot` program, which is not on PATH: install Graphviz "
            "(apt-get install graphviz; brew install graphviz; conda install graphviz), "
            "or write torch_mp.visualize.to_dot(...) to a .dot file and render it elsewhere"
        ) from error
    except graphviz.CalledProcessError as error:
        raise RuntimeError(f"dot failed to render {path}: {error.stderr.decode(errors='replace').strip()}") from error
    with open(path, "wb") as f:
        f.write(svg)
    return str(path)


def _digraph(report: Any, collapse_depth: Optional[int]) -> graphviz.Digraph:
    picture = _Picture(report)
    if collapse_depth is None:
        collapse_depth = picture.auto_depth(MAX_BOXES)
    elif not isinstance(collapse_depth, int) or isinstance(collapse_depth, bool) or collapse_depth < 0:
        raise ValueError(f"collapse_depth must be None or an int >= 0, got {collapse_depth!r}")
    return picture.digraph(collapse_depth)


# ---------------------------------------------------------------------------------------------------------------


class _Item(NamedTuple):
    """One drawable node of the graph."""

    id: str  # DOT node name (no ":", which DOT reads as a port)
    kind: str  # "planned", "cast", "unplanned", "input", "output"
    op: str
    scope: Optional[str]  # module path (planned nodes); None: inherit from the first input when collapsing
    node: Optional[Dict[str, Any]]  # the report's node
    cast: Optional[Dict[str, Any]]  # the report's cast


def _label(text: str) -> str:
    """A DOT label: backslashes kept as themselves, line breaks as DOT's \\n (the graphviz package quotes the rest)."""
    return "\\n".join(line.replace("\\", "\\\\") for line in str(text).split("\n"))


def _short_dtype(name: Any) -> str:
    text = str(name).replace("torch.", "")
    return SHORT_DTYPES.get(text.lower(), text)


def _human_bytes(count: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{int(count)} B"


ITEM_KINDS = {"input": "input", "node": "planned", "cast": "cast", "other": "unplanned", "output": "output"}
NAME_PREFIXES = {"input": "in", "planned": "n", "cast": "cast", "unplanned": "u", "output": "out"}


class _Picture:
    """The report's graph as items and edges, each planned node with its decision and each cast with its record."""

    def __init__(self, report: Any):
        data = report.data if hasattr(report, "data") else report
        if not isinstance(data, dict) or not all(key in data for key in ("nodes", "casts", "graph")):
            raise TypeError("report must be a torch_mp.Report (or its .data dict) of a conversion, with its graph "
                            "(reports saved before node ids existed have none: convert the model again)")
        self.data = data
        self.items: Dict[str, _Item] = {}
        self.order: List[str] = []
        self.edges: List[Tuple[str, str]] = []
        decisions = {n["id"]: n for n in data["nodes"]}
        name_of: Dict[int, str] = {}
        for entry in data["graph"]:
            kind = ITEM_KINDS[entry["kind"]]
            name = f"{NAME_PREFIXES[kind]}{entry['id']}"
            name_of[entry["id"]] = name
            node = decisions.get(entry["id"]) if kind == "planned" else None
            cast = data["casts"][entry["cast"]] if kind == "cast" else None
            op = f"input {entry['op']}" if kind == "input" else entry["op"]
            self._add(_Item(name, kind, op, node.get("scope", "") if node else None, node, cast))
            self.edges += [(name_of[source], name) for source in entry["inputs"] if source in name_of]
        self.edges = list(dict.fromkeys(self.edges))

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
        """Item -> what draws it at this depth, and those in first-seen order: "box/PATH" for a node whose scope has
        at least `depth` components (PATH: the first `depth`); the node itself for a module's own code above that
        depth (the top module's ops, which run between its children's boxes: merged they would make cycles); inputs
        and outputs themselves. A module called more than once (ResNet's shared relu) gives one box per call: the
        nodes of one path that are not connected inside it become "box/PATH#2", "#3", ... Casts are not drawn on
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
                    calls[path][component] = f"{BOX}{path}" + (f"#{count}" if count > 1 else "")
                box_of[item_id] = calls[path][component]
            if box_of[item_id] not in drawn:
                drawn.append(box_of[item_id])
        return box_of, drawn

    # --- drawing -------------------------------------------------------------------------------------------------

    def _title(self) -> str:
        nodes = self.data["nodes"]
        low = sum(1 for n in nodes if n["precision"] == "low")
        int8 = sum(1 for n in nodes if n["precision"] == "int8")
        return (f"torch_mp: {self.data.get('dtype', '?')} ({_short_dtype(self.data.get('dtype', '?'))}), "
                + (f"{int8} int8 nodes, " if int8 else "")
                + f"{low} low-precision nodes, {len(nodes) - low - int8} fp32 nodes, {len(self.data['casts'])} casts moving "
                f"{_human_bytes(self.data.get('cast_bytes', 0))} per inference")

    @staticmethod
    def _precision_class(node: Dict[str, Any]) -> str:
        if node["precision"] == "low":
            return "follow_low" if node.get("category") in ("follow", "widest") else "low"
        return "int8" if node["precision"] == "int8" else "fp32"

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
                 "tooltip": f"node {node['id']} ({node['output']}): {node['precision']} — {node.get('rule', '')}"}
        mark = MARKS.get(node.get("rule_kind", ""))
        if mark and node["precision"] == "fp32":
            attrs.update(color=mark[0], style=f"filled,{mark[1]}", penwidth="3")
        return attrs

    def digraph(self, depth: Optional[int]) -> graphviz.Digraph:
        dot = graphviz.Digraph(
            "torch_mp", graph_attr={"rankdir": "TB", "labelloc": "t", "label": _label(self._title())},
            node_attr={"fontname": "Helvetica", "fontsize": "10"}, edge_attr={"fontname": "Helvetica", "fontsize": "9"})
        if depth is None:
            for item_id in self.order:
                dot.node(item_id, **_labelled(self._node_attrs(self.items[item_id])))
            for source, target in self.edges:
                dot.edge(source, target)
        else:
            self._collapsed(dot, depth)
        self._legend(dot)
        return dot

    def _collapsed(self, dot: graphviz.Digraph, depth: int) -> None:
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
        for drawn_id in drawn:
            if drawn_id.startswith(BOX):
                attrs = self._box_attrs(drawn_id[len(BOX):], counts[drawn_id], marks[drawn_id])
            else:
                attrs = self._node_attrs(self.items[drawn_id])
            dot.node(drawn_id, **_labelled(attrs))
        for source, target in dict.fromkeys(edges):
            if source == target:
                continue
            if (source, target) in edge_casts:
                label = _cast_summary(edge_casts[(source, target)], self._cast_label)
                dot.edge(source, target, label=_label(label), color="#b8860b", fontcolor="#8b6508", penwidth="2")
            else:
                dot.edge(source, target)

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

    def _legend(self, dot: graphviz.Digraph) -> None:
        entries = [
            ("legend/low", {"label": "low precision (policy)", "shape": "box", "style": "filled",
                            "fillcolor": COLORS["low"]}),
            ("legend/follow_low", {"label": "low precision (follow, planned low)", "shape": "box", "style": "filled",
                                   "fillcolor": COLORS["follow_low"]}),
            ("legend/fp32", {"label": "fp32", "shape": "box", "style": "filled", "fillcolor": COLORS["fp32"]}),
        ]
        if any(n["precision"] == "int8" for n in self.data["nodes"]):
            entries.insert(0, ("legend/int8", {"label": "int8", "shape": "box", "style": "filled",
                                               "fillcolor": COLORS["int8"]}))
        for kind, (color, style) in MARKS.items():
            entries.append((f"legend/{kind}", {"label": MARK_LABELS[kind], "shape": "box",
                                               "style": f"filled,{style}", "fillcolor": COLORS["fp32"],
                                               "color": color, "penwidth": "3"}))
        entries += [
            ("legend/unplanned", {"label": "not planned (lists, tuples, control flow)", "shape": "box",
                                  "style": "filled,rounded", "fillcolor": COLORS["unplanned"],
                                  "fontcolor": "#666666"}),
            ("legend/cast", {"label": "cast →dtype bytes", "shape": "diamond", "style": "filled",
                             "fillcolor": COLORS["cast"], "fontsize": "9"}),
        ]
        with dot.subgraph(name="cluster_legend", graph_attr={"label": "legend", "style": "dashed"}) as legend:
            for name, attrs in entries:
                legend.node(name, **_labelled(attrs))
            for (first, _), (second, _) in zip(entries, entries[1:]):
                legend.edge(first, second, style="invis")


BOX = "box/"  # the prefix of a collapsed module's node name


def _labelled(attrs: Dict[str, str]) -> Dict[str, str]:
    """The attributes with the label and tooltip made DOT-safe (_label)."""
    return {key: _label(value) if key in ("label", "tooltip") else str(value) for key, value in attrs.items()}


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
