"""What must agree between the two fronts' reports of one model (issue 48's parity): the heavy ops grouped by (module
path, op family) have the same precision; the FLOPs counted agree within 2% and the low-FLOP share within 0.01; the
(rule kind, guard kind) pairs of fp32 heavy nodes are the same set; the weight ratios agree within 0.005; the report
keys are the same. `differences` lists what does not, each a line naming it; tests assert it is empty or holds only
what they name with a reason."""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Set, Tuple

# The heavy ops by family: the same computation may be a different op on each front (TorchScript keeps
# aten::_convolution where torch.export writes aten::conv2d; attention may be fused or not).
OP_FAMILIES = {
    "convolution": ("aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_convolution", "aten::convolution",
                    "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d",
                    "aten::cudnn_convolution", "aten::mkldnn_convolution"),
    "matmul": ("aten::linear", "aten::matmul", "aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm",
               "aten::addbmm", "aten::einsum"),
    "attention": ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
                  "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                  "aten::_scaled_dot_product_cudnn_attention", "aten::_native_multi_head_attention",
                  "aten::_transformer_encoder_layer_fwd"),
    "recurrent": ("aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu"),
}
FAMILY_OF = {op: family for family, ops in OP_FAMILIES.items() for op in ops}

# Fused layers TorchScript runs where torch.export traces the layer decomposed (nn.TransformerEncoderLayer's and
# nn.MultiheadAttention's fast paths, which export does not take): one convert node in the layer's scope stands for
# the heavy ops under it, which are compared as one group.
FUSED_LAYERS = {
    "aten::_transformer_encoder_layer_fwd": "nn.TransformerEncoderLayer's fast path",
    "aten::_native_multi_head_attention": "nn.MultiheadAttention's fast path",
}

FLOP_TOLERANCE = 0.02
LOW_FLOP_SHARE_TOLERANCE = 0.01
WEIGHT_RATIO_TOLERANCE = 0.005


def heavy_nodes(report) -> List[dict]:
    """The heavy nodes that ran on the example inputs: a node in a branch they did not take (TorchScript keeps both
    branches of nn.MultiheadAttention's fast-path test, torch.export traces the one taken) has no counterpart."""
    return [node for node in report.nodes if node["op"] in FAMILY_OF and node["rule_kind"] != "unobserved"]


def heavy_precisions(report, fused_scopes: Set[str] = frozenset()) -> Dict[Tuple[str, str], Set[str]]:
    """(module path, op family) -> the precisions its heavy nodes run in; a node inside one of `fused_scopes` counts
    in that scope's "fused layer" group."""
    groups: Dict[Tuple[str, str], Set[str]] = defaultdict(set)
    for node in heavy_nodes(report):
        scope = node["scope"]
        fused = next((s for s in fused_scopes if scope == s or scope.startswith(s + ".")), None)
        groups[(fused, "fused layer") if fused is not None else (scope, FAMILY_OF[node["op"]])].add(node["precision"])
    return dict(groups)


def fp32_heavy_rules(report) -> Set[Tuple[str, str]]:
    """(rule kind, guard kind or "") of the heavy nodes that run fp32."""
    return {(node["rule_kind"], (node["guard"] or {}).get("kind", "")) for node in heavy_nodes(report)
            if node["precision"] == "fp32"}


def total_flops(report) -> int:
    return sum(node["flops"] for node in report.nodes)


def differences(convert, export) -> List[str]:
    found = []
    fused = {node["scope"] for node in heavy_nodes(convert) if node["op"] in FUSED_LAYERS}
    converted, exported = heavy_precisions(convert, fused), heavy_precisions(export, fused)
    for group in sorted(set(converted) | set(exported)):
        if converted.get(group) != exported.get(group):
            found.append(f"precision of {group[1]} in '{group[0]}': convert {sorted(converted.get(group, ()))}, "
                         f"export {sorted(exported.get(group, ()))}")
    flops = total_flops(convert), total_flops(export)
    if abs(flops[0] - flops[1]) > FLOP_TOLERANCE * max(flops):
        found.append(f"FLOPs: convert {flops[0]:.4g}, export {flops[1]:.4g}")
    shares = convert.low_precision_flop_fraction, export.low_precision_flop_fraction
    if abs(shares[0] - shares[1]) > LOW_FLOP_SHARE_TOLERANCE:
        found.append(f"low-FLOP share: convert {shares[0]:.4f}, export {shares[1]:.4f}")
    rules = fp32_heavy_rules(convert), fp32_heavy_rules(export)
    if rules[0] != rules[1]:
        found.append(f"fp32 heavy nodes' (rule kind, guard): convert {sorted(rules[0])}, export {sorted(rules[1])}")
    ratios = convert.weight_ratio, export.weight_ratio
    if abs(ratios[0] - ratios[1]) > WEIGHT_RATIO_TOLERANCE:
        found.append(f"weight ratio: convert {ratios[0]:.4f}, export {ratios[1]:.4f}")
    keys = set(convert.data) ^ set(export.data)
    if keys:
        found.append(f"report keys on one front only: {sorted(keys)}")
    return found
