"""Module paths on both fronts: a node's scope is its module's nn.Module.named_modules() name, also inside loops over
an nn.ModuleList, an indexed nn.ModuleDict and an nn.Sequential called by a parent (convert's TorchScript inliner
named those by their last attribute: "0.fc" for layers.0.fc); and an exclusion, forced-low rule or force_low_nodes
id that matches no node is refused, naming it, on both fronts."""
import pytest
import torch

import torch_mp

FRONTS = {"convert": torch_mp.convert, "export": torch_mp.export}


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up_proj = torch.nn.Linear(16, 32)
        self.down_proj = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.down_proj(torch.relu(self.up_proj(x)))


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Mlp()

    def forward(self, x):
        return x + self.mlp(x)


class Inner(torch.nn.Module):
    """HF-style: the decoder's layers live in `model`, looped over there."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer() for _ in range(3)])
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(16, 16), "b": torch.nn.Linear(16, 16)})

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.heads["a"](x) * self.heads["b"](x)


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Inner()
        self.lm_head = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))

    def forward(self, x):
        for block in self.lm_head:
            x = block(x)
        return self.model.layers[0](self.model(x[:, :16].repeat(1, 2)[:, :16]))


def linear_scopes(report):
    return sorted(n["scope"] for n in report.nodes if n["op"] in ("aten::linear", "aten.linear.default"))


EXPECTED = sorted(["lm_head.0", "lm_head.2", "model.heads.a", "model.heads.b"]
                  + [f"model.layers.{i}.mlp.{p}" for i in (0, 1, 2, 0) for p in ("up_proj", "down_proj")])


@pytest.fixture(scope="module")
def decoder():
    torch.manual_seed(0)
    model = Decoder().eval()
    x = torch.randn(4, 16)
    names = {name for name, _ in model.named_modules()}
    assert set(EXPECTED) <= names
    return model, x


@pytest.mark.parametrize("capture", ["script", "trace", "export"])
def test_scopes_are_named_modules_paths_and_exclude_keeps_exactly_that_layer(decoder, capture):
    model, x = decoder
    policy = torch_mp.OpPolicy.default("cpu_bf16").exclude("model.layers.1")
    if capture == "export":
        report = torch_mp.report_of(torch_mp.export(model, (x,), torch.bfloat16, policy=policy))
    else:
        module = torch.jit.script(model) if capture == "script" else torch.jit.trace(model, (x,))
        report = torch_mp.report_of(torch_mp.convert(module, (x,), torch.bfloat16, policy=policy))
    assert linear_scopes(report) == EXPECTED
    linears = [n for n in report.nodes if n["op"] in ("aten::linear", "aten.linear.default")]
    kept = sorted(n["scope"] for n in linears if n["precision"] == "fp32")
    assert kept == ["model.layers.1.mlp.down_proj", "model.layers.1.mlp.up_proj"]
    assert all(n["rule_kind"] == "exclusion" for n in report.nodes if n["scope"].startswith("model.layers.1."))
    assert not any(n["rule_kind"] == "exclusion" for n in report.nodes if not n["scope"].startswith("model.layers.1"))


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("edit, named", [
    (lambda p: p.exclude("model.layers.3"), "policy.exclude('model.layers.3')"),
    (lambda p: p.exclude("layers.1"), "policy.exclude('layers.1')"),  # a path must start at the top module
    (lambda p: p.exclude("lm_head", ops=["aten::softmax"]), "policy.exclude('lm_head') with ops=['aten::softmax']"),
    (lambda p: p.force_low("model.tail*"), "policy.force_low('model.tail*')"),
    (lambda p: p.force_low_nodes("no_such_node", 123456), "no node of the model has the id 123456, no_such_node"),
])
def test_a_rule_that_matches_no_node_is_an_error_naming_it(decoder, front, edit, named):
    model, x = decoder
    policy = edit(torch_mp.OpPolicy.default("cpu_bf16").exclude("model.layers.2"))  # this one matches
    with pytest.raises(ValueError) as error:
        FRONTS[front](model, (x,), torch.bfloat16, policy=policy)
    assert named in str(error.value)
    assert "model.layers.0" in str(error.value) or "force_low_nodes" in str(error.value)
