"""torch_mp.visualize: the converted graph as DOT / SVG, coloured by precision, with casts, collapsed by module."""
import os
import re
import shutil

import pytest
import torch
from torch import nn

import torch_mp
from torch_mp import visualize
from torch_mp.models import resnet50_ibn_a
from small_models import ConvBnNet
from torch_mp.visualize import COLORS, MARKS


class Net(nn.Module):
    """Submodules body / norm / head, and top-level code (softmax) of its own."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32))
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return torch.softmax(self.head(self.norm(self.body(x))), dim=-1)


def convert(model, x, **kwargs):
    converted = torch_mp.convert(model.eval(), (x,), torch.float16, **kwargs)
    return converted, torch_mp.report_of(converted)


def node_line(dot, name):
    lines = [line for line in dot.splitlines() if re.match(rf'\s*"?{re.escape(name)}"? \[', line)]
    assert len(lines) == 1, (name, lines)
    return lines[0]


def attr(line, key):
    """An attribute's value, quoted or not (the graphviz package quotes only what needs it)."""
    match = re.search(rf'\b{key}=(?:"((?:[^"\\]|\\.)*)"|([^\s\]]+))', line)
    return (match.group(1) if match.group(1) is not None else match.group(2)) if match else None


def drawn_nodes(dot, pattern):
    """Names of the drawn nodes matching a regular expression (n12: a planned node, cast17, box/layer1, ...)."""
    return re.findall(rf'^\s*"?({pattern})"? \[', dot, flags=re.M)


def edges_of(dot):
    return re.findall(r'^\s*"?([^"\s]+)"? -> "?([^"\s]+)"?', dot.split("cluster_legend")[0], flags=re.M)


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return convert(Net(), torch.randn(8, 16))


def test_marks_and_summary_name_rule_kinds_the_report_writes():
    from torch_mp import _C
    from torch_mp.report import USER_RULE_KINDS

    assert set(MARKS) <= set(_C.RULE_KINDS) and set(USER_RULE_KINDS) <= set(_C.RULE_KINDS)
    assert {"exclusion", "callable", "fallback", "range guard", "policy", "io"} <= set(_C.RULE_KINDS)


def test_low_and_fp32_nodes_have_their_colours(net):
    module, report = net
    dot = visualize.to_dot(report, collapse_depth=None)
    linear = next(n for n in report.nodes if n["op"] == "aten::linear" and n["scope"].startswith("body"))
    norm = next(n for n in report.nodes if n["op"] == "aten::layer_norm")
    assert linear["precision"] == "low" and norm["precision"] == "fp32"
    low_line, fp32_line = node_line(dot, f"n{linear['id']}"), node_line(dot, f"n{norm['id']}")
    assert attr(low_line, "fillcolor") == COLORS["low"] and attr(low_line, "penwidth") is None
    assert attr(fp32_line, "fillcolor") == COLORS["fp32"] and attr(fp32_line, "penwidth") is None
    # every planned node is drawn once, in the colour of its precision
    for node in report.nodes:
        line = node_line(dot, f"n{node['id']}")
        expected = {"low": {COLORS["low"], COLORS["follow_low"]}, "fp32": {COLORS["fp32"]}}[node["precision"]]
        assert attr(line, "fillcolor") in expected, (node, line)
        if node["precision"] == "low" and node["category"] in ("follow", "widest"):
            assert attr(line, "fillcolor") == COLORS["follow_low"]


def test_title_and_legend(net):
    module, report = net
    dot = visualize.to_dot(report)
    low = sum(1 for n in report.nodes if n["precision"] == "low")
    title = attr(next(line for line in dot.splitlines() if line.strip().startswith("graph [")), "label")
    assert f"{low} low-precision nodes" in title and f"{len(report.nodes) - low} fp32 nodes" in title
    assert f"{len(report.casts)} casts" in title and "fp16" in title
    assert "subgraph cluster_legend" in dot
    legend = drawn_nodes(dot, "legend/[^\"]+")
    assert {f"legend/{k}" for k in ("low", "follow_low", "fp32", "cast", "unplanned")} <= set(legend)
    assert {f"legend/{k}" for k in MARKS} <= set(legend)


def test_one_cast_node_per_report_cast(net):
    module, report = net
    dot = visualize.to_dot(report, collapse_depth=None)
    casts = drawn_nodes(dot, r"cast\d+")
    assert report.casts and sorted(casts) == sorted(f"cast{c['id']}" for c in report.casts)
    labels = sorted(attr(node_line(dot, c), "label") for c in casts)
    expected = sorted(f"→{ {'Half': 'fp16', 'Float': 'fp32'}.get(c['to'], c['to'])} " for c in report.casts)
    assert [label.split(" ")[0] + " " for label in labels] == expected, labels
    assert all(re.fullmatch(r"→fp(16|32) \d+(\.\d)? (B|kB|MB)", label) for label in labels), labels
    for cast in casts:
        assert attr(node_line(dot, cast), "shape") == "diamond"


def test_excluded_nodes_are_marked():
    torch.manual_seed(0)
    policy = torch_mp.OpPolicy.default("cpu_fp16").exclude("head")
    module, report = convert(Net(), torch.randn(8, 16), policy=policy)
    head = [n for n in report.nodes if n["scope"] == "head"]
    assert head and all(n["rule_kind"] == "exclusion" and n["precision"] == "fp32" for n in head)
    dot = visualize.to_dot(report, collapse_depth=None)
    for node in head:
        line = node_line(dot, f"n{node['id']}")
        assert attr(line, "fillcolor") == COLORS["fp32"]
        assert attr(line, "color") == MARKS["exclusion"][0] and attr(line, "penwidth") == "3"
    others = [n for n in report.nodes if n["rule_kind"] != "exclusion"]
    assert all(attr(node_line(dot, f"n{n['id']}"), "color") is None for n in others)
    collapsed = visualize.to_dot(report, collapse_depth=1)
    assert attr(node_line(collapsed, "box/head"), "color") == MARKS["exclusion"][0]
    assert "1 excluded" in attr(node_line(collapsed, "box/head"), "label")


def test_collapse_depth_one_gives_one_box_per_top_level_module():
    torch.manual_seed(0)
    module, report = convert(ConvBnNet(), torch.randn(2, 3, 16, 16))
    dot = visualize.to_dot(report, collapse_depth=1)
    boxes = drawn_nodes(dot, "box/[^\"]+")
    assert sorted(boxes) == ["box/classifier", "box/features"]
    # the top module's own code (flatten) runs between its children: drawn node by node, not as a box
    top = [n for n in report.nodes if n["scope"] == ""]
    assert top and sorted(drawn_nodes(dot, r"n\d+")) == sorted(f"n{n['id']}" for n in top)
    assert not drawn_nodes(dot, r"cast\d+")
    features = attr(node_line(dot, "box/features"), "label")
    low = sum(1 for n in report.nodes if n["scope"].startswith("features") and n["precision"] == "low")
    assert features.startswith(f"features: {low} low, ")
    # edges between boxes are drawn once
    edges = edges_of(dot)
    assert edges and len(edges) == len(set(edges))


def test_collapsed_box_stripes_follow_the_mix():
    torch.manual_seed(0)
    module, report = convert(Net(), torch.randn(8, 16))
    dot = visualize.to_dot(report, collapse_depth=0)
    (box,) = drawn_nodes(dot, "box/[^\"]*")
    assert box == "box/" and not drawn_nodes(dot, r"n\d+")
    line = node_line(dot, box)
    assert attr(line, "style") == "striped"
    shares = dict(part.split(";") for part in attr(line, "fillcolor").split(":"))
    low = sum(1 for n in report.nodes if n["precision"] == "low" and n["category"] not in ("follow", "widest"))
    assert float(shares[COLORS["low"]]) == pytest.approx(low / len(report.nodes), abs=1e-3)
    # casts crossing from the input into the box are edge labels
    assert "→fp16" in dot.split("subgraph cluster_legend")[0]


def test_a_module_called_twice_gets_one_box_per_call():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.act = nn.ReLU()
            self.b = nn.Linear(8, 8)

        def forward(self, x):
            return self.act(self.b(self.act(self.a(x))))

    torch.manual_seed(0)
    module, report = convert(Twice(), torch.randn(4, 8))
    dot = visualize.to_dot(report, collapse_depth=1)
    assert drawn_nodes(dot, "box/[^\"]+") == ["box/a", "box/act", "box/b", "box/act#2"]
    edges = edges_of(dot)
    assert ("box/act", "box/b") in edges and ("box/b", "box/act#2") in edges and ("box/act#2", "box/act") not in edges


def test_automatic_depth_and_bad_depth(net):
    module, report = net
    assert drawn_nodes(visualize.to_dot(report), r"n\d+")  # small: node by node
    with pytest.raises(ValueError, match="collapse_depth"):
        visualize.to_dot(report, collapse_depth=-1)
    with pytest.raises(TypeError, match="torch_mp.Report"):
        visualize.to_dot({"nodes": []})


def test_labels_keep_quotes_and_backslashes():
    assert visualize._label('say "hi"\\n') == 'say "hi"\\\\n'  # the graphviz package quotes the rest
    assert visualize._label("two\nlines") == "two\\nlines"
    report = {"dtype": 'Ha"lf', "nodes": [], "casts": [], "cast_bytes": 0, "graph": []}
    assert 'Ha\\"lf' in visualize.to_dot(report)


def test_edges_follow_the_report_graph_through_casts(net):
    _, report = net
    dot = visualize.to_dot(report, collapse_depth=None)
    edges = set(edges_of(dot))
    names = {"input": "in", "node": "n", "cast": "cast", "other": "u", "output": "out"}
    items = {item["id"]: item for item in report.data["graph"]}
    expected = {(f"{names[items[source]['kind']]}{source}", f"{names[item['kind']]}{item['id']}")
                for item in report.data["graph"] for source in item["inputs"]}
    assert edges == expected
    # each cast reads one value and is read by the op it feeds
    for cast in report.casts:
        assert len(items[cast["id"]]["inputs"]) == 1
        assert any(cast["id"] in item["inputs"] for item in report.data["graph"])


def test_a_report_read_back_from_json_is_drawn_alike(net):
    _, report = net
    again = torch_mp.Report.from_json(report.to_json())
    assert visualize.to_dot(again, collapse_depth=None) == visualize.to_dot(report, collapse_depth=None)


def require_dot():
    if shutil.which("dot") is None:
        pytest.fail("Graphviz's `dot` is not installed: apt-get install graphviz (CI installs it)")


def test_render_svg(net, tmp_path):
    require_dot()
    module, report = net
    path = visualize.render_svg(report, tmp_path / "net.svg")
    text = open(path).read()
    assert text.startswith("<?xml") or text.startswith("<svg")
    assert "</svg>" in text


def test_render_svg_without_graphviz_says_how_to_install_it(net, tmp_path, monkeypatch):
    _, report = net
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="apt-get install graphviz"):
        visualize.render_svg(report, tmp_path / "net.svg")
    assert visualize.to_dot(report).startswith("digraph")


def test_resnet50_ibn_a_picture_is_readable(tmp_path):
    require_dot()
    torch.manual_seed(0)
    _, report = convert(resnet50_ibn_a(), torch.randn(1, 3, 64, 64))
    path = visualize.render_svg(report, tmp_path / "resnet.svg")
    text = open(path).read()
    titles = re.findall(r'<g id="node\d+" class="node">\s*<title>([^<]*)</title>', text)
    drawn = [t for t in titles if not t.startswith("legend/")]
    assert 10 <= len(drawn) <= 150, len(drawn)
    assert any(t.startswith("box/layer1") for t in drawn)
    assert os.path.getsize(path) < 2 * 1024 * 1024
