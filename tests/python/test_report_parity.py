"""The report has the same keys on both fronts, each with the true value: both fill one C++ ConversionReport, which
one serializer writes; export fills what convert's kernel and layout passes count with 0 (it leaves kernels and
layouts to the compiler that runs its program) and lists the fp32 weights it keeps, as convert does."""
import torch

import torch_mp


class TableNormHead(torch.nn.Module):
    """A table looked up low, a layer norm whose fp32 weight stays fp32, a head kept fp32 by an exclusion (its
    300x64 weight, 76.8 KB, over the report's 64 KB listing size)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 64)
        self.norm = torch.nn.LayerNorm(64)
        self.head = torch.nn.Linear(64, 300)

    def forward(self, tokens):
        return self.head(self.norm(self.embed(tokens)))


def test_both_fronts_report_the_same_keys_and_the_fp32_weights_they_keep():
    model, tokens = TableNormHead().eval(), torch.randint(0, 1000, (2, 8))
    policy = torch_mp.OpPolicy.default("cpu_bf16").exclude("head", reason="head stays fp32")
    reports = {front: torch_mp.report_of(getattr(torch_mp, front)(model, (tokens,), torch.bfloat16, policy=policy))
               for front in ("convert", "export")}
    convert, export = reports["convert"], reports["export"]
    assert all(isinstance(report._bound, torch_mp._C.ConversionReport) for report in reports.values())
    assert set(export.data) == set(convert.data)
    assert (convert.capture, export.capture) == ("script", "export")
    assert convert.data["slow_kernels"] == export.data["slow_kernels"] == policy.slow_kernels
    for key in ("fused_pointwise", "fused_normalizations", "column_major_matmul_weights",
                "channels_last_convolutions", "fused_convolutions"):
        assert export.data[key] == 0, key
    assert export.data["ranges_observed"] is True
    for report in (convert, export):
        [head] = report.weights_kept_fp32
        assert (head["bytes"], head["readers"], head["rule_kind"]) == (300 * 64 * 4, ["aten::linear"], "exclusion")
        assert next(n for n in report.nodes if n["id"] == head["decided_by"])["scope"] == "head"
        # the head's weight and bias and the norm's, in fp32; the table is stored low
        assert report.data["weight_bytes_kept_fp32"] == (300 * 64 + 300 + 2 * 64) * 4
        assert "MB of them fp32" in report.summary()
    assert export.weights_kept_fp32[0]["name"] == "head.weight"


def test_the_export_report_names_its_nodes_casts_and_graph_items_by_fx_node_name():
    """The ids of the one report type are indexes; the export front's are written as the FX names they index."""
    model, tokens = TableNormHead().eval(), torch.randint(0, 1000, (2, 8))
    program = torch_mp.export(model, (tokens,), torch.bfloat16)
    report = torch_mp.report_of(program)
    names = {node.name: node for node in program.graph.nodes}
    assert all(isinstance(n["id"], str) and n["id"] == n["output"] for n in report.nodes)
    assert {n["id"] for n in report.nodes} <= set(names)
    assert report.casts and all(names[c["id"]].target is torch.ops.aten._to_copy.default for c in report.casts)
    items = {item["id"]: item for item in report.data["graph"]}
    for cast_index, cast in enumerate(report.casts):
        assert items[cast["id"]]["kind"] == "cast" and items[cast["id"]]["cast"] == cast_index
    assert all(i in items for item in items.values() for i in item["inputs"])
    assert report.data["cast_bytes"] == sum(c["bytes"] for c in report.casts)


def test_a_default_policy_without_fast_kernels_says_why_in_both_reports():
    """slow_kernels comes from the options' policy into the C++ report on both fronts (it was a Python annotation
    that only a policy with slow kernels added)."""
    model, tokens = TableNormHead().eval(), torch.randint(0, 1000, (2, 8))
    policy = torch_mp.OpPolicy.default("cpu_bf16", cpu_features=())
    assert policy.slow_kernels
    for front in ("convert", "export"):
        report = torch_mp.report_of(getattr(torch_mp, front)(model, (tokens,), torch.bfloat16, policy=policy))
        assert report.data["slow_kernels"] == policy.slow_kernels, front
