"""Casts per inference: torch_mp's planners (greedy painting, exact min-cut, min-cut + cast fusion) next to the
converters of other projects on the same models and inputs. Writes benchmarks/results/CASTS.md.

    python benchmarks/casts_table.py [--models NAME ...]

Peers (not installed by CI; the table says why where one is missing):
    pip install onnx onnxconverter-common onnxruntime    # onnxconverter-common float16.convert_float_to_float16
    pip install apache-tvm                               # TVM Relax ToMixedPrecision
Neither pulls another torch; `pip show torch` stays at the installed version.

What is counted: casts that the converter adds and that run at inference, with the bytes each reads and writes
(input numel x (size of source dtype + size of target dtype)) at the inputs below. Casts the model itself contains
(say, an int attention mask cast to float) are in none of the columns. Casts of constants (weights) are not counted
for anyone: torch_mp stores weights pre-cast, ONNX Runtime folds Cast(initializer) when it loads a model and TVM
folds astype(constant) in FoldConstant. torch_mp's casts on branches the inputs do not take (nn.MultiheadAttention's
slow path beside its fast path, whose weights are stored low and cast back to fp32 there) do not run: not counted.
"""
from __future__ import annotations

import argparse
import datetime
import io
import os
import platform
import sys
import time
import traceback
import warnings

import torch

# plan as on a CPU with fast fp16 and bf16 kernels (the plan a GPU conversion makes), whichever CPU runs this
os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # the tests' models and helpers

import torch_mp  # noqa: E402
from registry import build_model, load_zoo  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _image(size=224):
    return lambda: (torch.randn(1, 3, size, size),)


def _tokens(length=64, vocab=1000, mask=True):
    def make():
        ids = torch.randint(0, vocab, (1, length))
        if not mask:
            return (ids,)
        attention = torch.ones(1, length, dtype=torch.long)
        attention[:, length - length // 4:] = 0
        return ids, attention

    return make


# name in tests/zoo/registry.py -> (inputs, what they are)
MODELS = {
    "resnet50_ibn_a": (_image(), "1x3x224x224"),
    "transformer_encoder": (lambda: (torch.randn(1, 64, 128),), "1x64x128 (seq 64, d_model 128, 3 layers)"),
    "lstm_tagger": (lambda: (torch.randint(0, 1000, (1, 64)),), "1x64 token ids"),
    "tv.resnet50": (_image(), "1x3x224x224"),
    "tv.convnext_tiny": (_image(), "1x3x224x224"),
    "tv.vit_b_16": (_image(), "1x3x224x224"),
    "tv.swin_t": (_image(), "1x3x224x224"),
    "hf.bert-base": (_tokens(), "1x64 token ids + mask (last 16 padding)"),
    "hf.gpt2": (_tokens(mask=False), "1x64 token ids"),
    "timm.coatnet_nano": (_image(128), "1x3x128x128 (the zoo builds it for 128)"),
}

# ONNX op types of the ops torch_mp's default policy keeps in fp32 (for the "same fp32 set" ONNX column).
ONNX_FP32_OPS = [
    "Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization", "InstanceNormalization",
    "BatchNormalization", "ReduceMean", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
    "ReduceSumSquare", "CumSum", "Exp", "Log", "Pow", "Resize",
]

ONNX_ELEMENT_BYTES = {1: 4, 10: 2, 16: 2, 11: 8, 7: 8, 6: 4, 9: 1, 2: 1, 3: 1, 5: 2, 4: 2}


class Cell:
    """A column's result: casts and bytes, or why there is none."""

    def __init__(self, casts=None, nbytes=None, note=""):
        self.casts, self.nbytes, self.note = casts, nbytes, note

    def __str__(self):
        if self.casts is None:
            return self.note
        text = f"{self.casts} / {self.nbytes / 1e6:.3f}"
        return text + (f" ({self.note})" if self.note else "")


def _reason(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    text = lines[0] if lines else ""
    return f"{type(error).__name__}: {text[:140]}".replace("|", "/")


# ---- torch_mp -----------------------------------------------------------------------------------------------------

def torch_mp_cell(model, inputs, dtype, planner, fuse):
    report = torch_mp.report_of(torch_mp.convert(model, inputs, dtype, planner=planner, fuse_casts=fuse))
    note = f"{report.fused_casts} fused" if fuse else ""
    return Cell(report.reached_casts, report.cast_bytes, note)


# ---- onnxconverter-common float16 ---------------------------------------------------------------------------------

class _Positional(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *inputs):
        return self.model(*inputs)


class OnnxPeer:
    """torch.onnx.export (TorchScript exporter) + onnxconverter-common convert_float_to_float16(keep_io_types=True).
    Sizes of the values cast come from running the fp32 export in ONNX Runtime with every intermediate as an
    output (the float16 converter keeps value names), or from ONNX shape inference."""

    def __init__(self, model, inputs):
        import onnx
        import onnxruntime  # noqa: F401 - fail early when missing

        self.onnx = onnx
        buffer = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # positional inputs through a wrapper: the exporter binds them by name otherwise (transformers'
            # forward(input_ids, attention_mask, ..., **kwargs) then gets use_cache twice)
            torch.onnx.export(_Positional(model).eval(), inputs, buffer, dynamo=False, opset_version=17)
        model.eval()
        self.fp32 = onnx.load_from_string(buffer.getvalue())
        self.inputs = inputs

    def numel(self, needed):
        """Element counts of the fp32 export's values, from one ONNX Runtime run with every value as an output.
        `needed` (values the converter casts; always float tensors) are added as float outputs where shape
        inference gives no type."""
        import numpy as np
        import onnxruntime

        onnx = self.onnx
        inferred = onnx.shape_inference.infer_shapes(self.fp32)
        types = {vi.name: vi.type.tensor_type.elem_type
                 for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
        model = onnx.ModelProto()
        model.CopyFrom(self.fp32)
        present = {o.name for o in model.graph.output} | {i.name for i in model.graph.input}
        for node in model.graph.node:
            for name in node.output:
                elem_type = types.get(name) or (onnx.TensorProto.FLOAT if name in needed else 0)
                if name and name not in present and elem_type:
                    model.graph.output.append(onnx.helper.make_tensor_value_info(name, elem_type, None))
                    present.add(name)
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
        feed = {i.name: np.asarray(t.numpy()) for i, t in zip(session.get_inputs(), self.inputs)}
        names = [o.name for o in session.get_outputs()]
        numel = {name: np.asarray(value).size for name, value in zip(names, session.run(names, feed))}
        numel.update({i.name: t.numel() for i, t in zip(session.get_inputs(), self.inputs)})
        return numel

    def cell(self, block_list=None):
        from onnxconverter_common import float16

        onnx = self.onnx
        kwargs = {"keep_io_types": True}
        if block_list is not None:
            kwargs["op_block_list"] = float16.DEFAULT_OP_BLOCK_LIST + block_list
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converted = float16.convert_float_to_float16(self.fp32, **kwargs)
        original = {node.name for node in self.fp32.graph.node if node.op_type == "Cast"}
        constants = {init.name for init in converted.graph.initializer}
        constants |= {out for node in converted.graph.node if node.op_type == "Constant" for out in node.output}
        produced_by = {out: node for node in converted.graph.node for out in node.output}
        fp32_outputs = {node.name: list(node.output) for node in self.fp32.graph.node if node.name}
        numel = self.numel({node.input[0] for node in converted.graph.node if node.op_type == "Cast"})
        fp16_inferred = None
        casts = 0
        nbytes = 0
        unknown = 0
        for node in converted.graph.node:
            if node.op_type != "Cast" or node.name in original or node.input[0] in constants:
                continue
            casts += 1
            to = next(a.i for a in node.attribute if a.name == "to")
            source = node.input[0]
            # a Cast the converter inserted between fp32 and fp16: the other side of `to`
            from_bytes = 4 if to == 10 else 2
            n = numel.get(source)
            value = source
            while n is None and value in produced_by:
                producer = produced_by[value]
                if producer.op_type == "Cast":  # a cast of a cast: the size of what that cast read
                    value = producer.input[0]
                    n = numel.get(value)
                elif producer.name in fp32_outputs:  # an output the converter renamed: the original's size
                    n = numel.get(fp32_outputs[producer.name][list(producer.output).index(value)])
                    break
                else:
                    break
            if n is None:
                if fp16_inferred is None:
                    fp16_inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(converted).graph.value_info}
                info = fp16_inferred.get(source)
                dims = [d.dim_value for d in info.type.tensor_type.shape.dim] if info is not None else []
                if info is None or any(d <= 0 for d in dims):
                    unknown += 1
                    continue
                n = 1
                for d in dims:
                    n *= d
            nbytes += n * (from_bytes + ONNX_ELEMENT_BYTES.get(to, 4))
        return Cell(casts, nbytes, f"{unknown} of unknown size" if unknown else "")


# ---- TVM Relax ToMixedPrecision -----------------------------------------------------------------------------------

class TvmPeer:
    """torch.export -> tvm.relax.frontend.torch.from_exported_program -> relax.transform.ToMixedPrecision(
    out_dtype="float32"); counts relax.astype calls it added (not of constants), bytes from their struct_info."""

    def __init__(self, model, inputs):
        import tvm  # noqa: F401
        from tvm import relax
        from tvm.relax.frontend.torch import from_exported_program

        self.relax = relax
        with torch.no_grad():
            exported = torch.export.export(model, tuple(inputs))
        self.module = from_exported_program(exported)

    def _casts(self, module):
        """(astype call, whether its input is computed from constants only) for every astype in the module."""
        relax = self.relax
        found = []
        for _, function in module.functions_items():
            if not isinstance(function, relax.Function):
                continue
            constant = set()  # vars bound to values computed from constants only (FoldConstant folds them)

            def folds(arg):
                return _is_constant(arg) or type(arg).__name__ == "ShapeExpr" or arg in constant

            for block in function.body.blocks:
                for binding in block.bindings:
                    value = binding.value
                    if not isinstance(value, relax.Call):
                        continue
                    from_constants = all(folds(arg) for arg in value.args)
                    if from_constants:
                        constant.add(binding.var)
                    if getattr(value.op, "name", "") == "relax.astype":
                        found.append((value, from_constants))
        return found

    def _measure(self, module):
        casts = nbytes = unknown = 0
        for call, folded in self._casts(module):
            if folded:
                continue
            casts += 1
            shape = _tvm_tensor_shape(call.args[0])
            if shape is None:
                unknown += 1  # a symbolic shape
                continue
            numel, source_dtype = shape
            nbytes += numel * (_tvm_bytes(source_dtype) + _tvm_bytes(call.attrs.dtype))
        return casts, nbytes, unknown

    def cell(self):
        own_casts, own_bytes, _ = self._measure(self.module)
        mixed = self.relax.transform.ToMixedPrecision(out_dtype="float32")(self.module)
        casts, nbytes, unknown = self._measure(mixed)
        # the model's own casts are in the module before the pass too
        notes = [f"{own_casts} of the model's own not counted"] if own_casts else []
        notes += [f"{unknown} of unknown size"] if unknown else []
        return Cell(casts - own_casts, nbytes - own_bytes, ", ".join(notes))


def _is_constant(expr) -> bool:
    import tvm

    return isinstance(expr, tvm.ir.Constant) or type(expr).__name__ == "Constant"


def _tvm_tensor_shape(expr):
    """(numel, dtype) of a relax tensor expression with a static shape, from its struct info
    `R.Tensor((2, 4), dtype="float32")`; None when symbolic."""
    import re

    info = getattr(expr, "ty", None)
    if info is None:
        info = getattr(expr, "struct_info", None)
    match = re.fullmatch(r'R\.Tensor\(\(([0-9, ]*)\), dtype="(\w+)"\)', str(info).strip())
    if not match:
        return None
    numel = 1
    for d in match.group(1).replace(" ", "").split(","):
        if d:
            numel *= int(d)
    return numel, match.group(2)


def _tvm_bytes(dtype) -> int:
    text = str(dtype)
    return {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int64": 8, "int32": 4, "bool": 1}.get(text, 4)


# ---- table --------------------------------------------------------------------------------------------------------

def peer(factory):
    """(peer object, None) or (None, one-line reason)."""
    try:
        return factory(), None
    except Exception as error:  # noqa: BLE001 - the table says why
        return None, _reason(error)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", help="names (default: all)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    zoo = load_zoo()
    names = args.models or list(MODELS)
    start = time.time()
    rows = []
    header = ("| model | dtype | torch_mp greedy | torch_mp min-cut | torch_mp min-cut + fusion | "
              "ORT float16 (its block list) | ORT float16 (torch_mp's fp32 ops blocked) | TVM ToMixedPrecision | "
              "torch_mp + fusion <= every peer |")
    print(header, flush=True)
    for name in names:
        make_inputs, _ = MODELS[name]
        model = build_model(zoo[name])
        torch.manual_seed(0)
        inputs = make_inputs()
        onnx_peer, onnx_error = peer(lambda: OnnxPeer(model, inputs))
        tvm_peer, tvm_error = peer(lambda: TvmPeer(model, inputs))
        for label, dtype in DTYPES.items():
            cells = []
            for planner, fuse in (("greedy", False), ("min-cut", False), ("min-cut", True)):
                try:
                    cells.append(torch_mp_cell(model, inputs, dtype, planner, fuse))
                except Exception as error:  # noqa: BLE001
                    cells.append(Cell(note="FAILED " + _reason(error)))
            peers = []
            if dtype != torch.float16:
                peers += [Cell(note="n/a: converts to float16 only")] * 2
            elif onnx_peer is None:
                peers += [Cell(note="export failed: " + onnx_error)] * 2
            else:
                for block in (None, ONNX_FP32_OPS):
                    try:
                        peers.append(onnx_peer.cell(block))
                    except Exception as error:  # noqa: BLE001
                        peers.append(Cell(note="FAILED " + _reason(error)))
            if dtype != torch.float16:
                peers.append(Cell(note="n/a: float16 only"))
            elif tvm_peer is None:
                peers.append(Cell(note="import failed: " + tvm_error))
            else:
                try:
                    peers.append(tvm_peer.cell())
                except Exception as error:  # noqa: BLE001
                    peers.append(Cell(note="FAILED " + _reason(error)))
            ours = cells[2].nbytes
            measured = [p.nbytes for p in peers if p.nbytes is not None]
            if ours is None:
                verdict = "-"
            elif not measured:
                verdict = "no peer measured"
            else:
                verdict = "yes" if all(ours <= b for b in measured) else "**no**"
            row = f"| {name} | {label} | " + " | ".join(str(c) for c in cells + peers) + f" | {verdict} |"
            rows.append(row)
            print(row, flush=True)
    elapsed = time.time() - start

    machine = platform.processor() or platform.machine()
    lines = [
        "# Casts per inference: torch_mp vs other converters",
        "",
        f"Machine: {machine}, {os.cpu_count()} CPU cores, {platform.system()}; date {datetime.date.today()}; "
        f"torch {torch.__version__}; {_versions()}.",
        "Command: `python benchmarks/casts_table.py` (all models, fp16 and bf16, "
        f"{elapsed / 60:.1f} minutes here). Peers are installed with "
        "`pip install onnx onnxconverter-common onnxruntime apache-tvm` (not part of CI).",
        "",
        "Each cell: **casts / MB moved per inference** (every cast counted with the bytes it reads and writes: "
        "elements x (source + target dtype size)). Batch 1; the inputs are:",
        "",
    ]
    lines += [f"- {n}: {MODELS[n][1]}" for n in names]
    lines += [
        "",
        "Bytes scale with the input size (batch, image size, sequence length); the counts do not.",
        "Counted: casts the converter adds that run at inference. Not counted, for anyone: the model's own casts "
        "(an int mask cast to float) and casts of constants (torch_mp stores weights pre-cast; ONNX Runtime folds "
        "Cast(initializer) at load; TVM folds astype(constant)).",
        "",
        "- torch_mp greedy / min-cut: `torch_mp.convert(..., planner=..., fuse_casts=False)`; + fusion: "
        "`planner=\"min-cut\", fuse_casts=True` (the default), with how many casts the fusion removed.",
        "- ORT float16: `torch.onnx.export(..., dynamo=False, opset_version=17)` then onnxconverter-common "
        "`float16.convert_float_to_float16(model, keep_io_types=True)`: every op not in its block list runs in "
        "fp16 (softmax, layer norm, reductions, exp included). The second ORT column blocks the ONNX ops that "
        "torch_mp's policy keeps in fp32 (" + ", ".join(ONNX_FP32_OPS) + "), so both decide the same ops: "
        "this compares the cast placement, not the numerics policy.",
        "- TVM: `torch.export.export` -> `tvm.relax.frontend.torch.from_exported_program` -> "
        "`relax.transform.ToMixedPrecision(out_dtype=\"float32\")`; counts `relax.astype` calls added. Both "
        "peers convert to float16 only: their bf16 cells are n/a.",
        "",
        header,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += rows
    write_section(os.path.join(ROOT, "benchmarks", "results", "CASTS.md"), "\n".join(lines[2:]))
    return 0


BEGIN, END = "<!-- casts_table.py: begin -->", "<!-- casts_table.py: end -->"


def write_section(path: str, section: str) -> None:
    """Replaces the generated section of CASTS.md (between the markers); the hand-written text around it stays."""
    text = ""
    if os.path.exists(path):
        with open(path) as existing:
            text = existing.read()
    block = f"{BEGIN}\n{section}\n{END}"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = "# Casts per inference: torch_mp vs other converters\n\n" + block + "\n" + text
    with open(path, "w") as out:
        out.write(text)


def _versions() -> str:
    parts = []
    for module in ("onnx", "onnxconverter_common", "onnxruntime", "tvm"):
        try:
            parts.append(f"{module} {__import__(module).__version__}")
        except Exception:  # noqa: BLE001
            parts.append(f"{module} not installed")
    return ", ".join(parts)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(1)
