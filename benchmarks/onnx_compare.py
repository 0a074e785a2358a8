"""torch_mp.onnx_export against ModelOpt AutoCast and onnxconverter-common, fp16, on the zoo
(benchmarks/results/ONNX.md).

Each peer converts the same fp32 ONNX file of the model (torch.onnx.export(torch.export.export(model), dynamo=True),
opset 20); torch_mp converts the model itself (torch_mp.onnx_export: torch.export, observation on the example batch,
planning, verification, torch.onnx.export). Every result runs with onnxruntime's CPU provider on the example batch and
two fresh ones and is compared with the PyTorch fp32 model's first output (tests/python/agreement.py's cosine and
max relative error).

    python benchmarks/onnx_compare.py --modelopt-python $(bash /work/shared/tools/modelopt_env.sh) [--models a,b]
        [--out /tmp/onnx_compare.json]

ModelOpt runs in its own virtual environment (a subprocess), twice: keep_io_types=True with the example batch as its
calibration file (the inputs torch_mp observes), and with its defaults (keep_io_types=False, random calibration data).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests", "zoo"), os.path.join(ROOT, "tests", "python")]
os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")  # as the zoo tests: plan for fast fp16 kernels

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime  # noqa: E402
import torch  # noqa: E402

import torch_mp  # noqa: E402
from torch_mp._export import onnx_writer  # noqa: E402
from registry import build_model, load_zoo  # noqa: E402
from agreement import compare, flatten_tensors  # noqa: E402

HEAVY = ("MatMul", "Gemm", "Conv", "ConvTranspose")
# small and quick first, so that a partial run still covers most of the zoo
ORDER = ["transformer_encoder", "gru_classifier", "lstm_tagger", "timm.regnetx_002", "tv.regnet_y_400mf",
         "timm.mixer_s16", "timm.deit_tiny", "timm.levit_128s", "tv.mobilenet_v3_large", "tv.efficientnet_b0",
         "hf.distilbert", "hf.t5-small-encoder", "hf.whisper-tiny-encoder", "hf.vit-small", "timm.poolformer_s12",
         "timm.coatnet_nano", "resnet50_ibn_a", "tv.resnet50", "hf.gpt2", "tv.swin_t", "tv.convnext_tiny",
         "tv.densenet121", "hf.bert-base", "tv.vit_b_16"]

MODELOPT = r"""
import json, sys, time
from modelopt.onnx.autocast import convert_to_mixed_precision
import onnx
src, dst, calib, keep = sys.argv[1], sys.argv[2], sys.argv[3] or None, sys.argv[4] == "1"
start = time.perf_counter()
model = convert_to_mixed_precision(src, low_precision_type="fp16", keep_io_types=keep, calibration_data=calib)
seconds = time.perf_counter() - start
onnx.save(model, dst)
print(json.dumps({"seconds": seconds}))
"""


def stats(path, fp32_bytes):
    model = onnx.load(path)
    _, types = onnx_writer._element_types(model)
    heavy = [n for n in model.graph.node if n.op_type in HEAVY]
    low = [n for n in heavy if types.get(n.input[0]) == onnx.TensorProto.FLOAT16]
    io = sorted({onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type)
                 for v in list(model.graph.input) + list(model.graph.output)})
    return {"casts": onnx_writer.cast_count(model),
            "initializer_ratio": sum(onnx_writer.initializer_bytes(model).values()) / fp32_bytes,
            "heavy_fp16": f"{len(low)}/{len(heavy)}", "heavy_fp16_share": len(low) / max(len(heavy), 1),
            "io": io, "typing_problems": len(torch_mp.onnx_typing_problems(model))}


def accuracy(path, model, batches):
    try:
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    except Exception as error:  # noqa: BLE001 - what onnxruntime says is the result
        return {"loads": False, "error": str(error).splitlines()[0][:200]}
    cosines, errors, finite = [], [], True
    for inputs in batches:
        feed = {}
        for spec, x in zip(session.get_inputs(), inputs):
            array = x.numpy()
            if spec.type == "tensor(float16)":
                array = array.astype(np.float16)
            feed[spec.name] = array
        with torch.no_grad():
            reference = flatten_tensors(model(*inputs))[0]
        output = torch.from_numpy(np.asarray(session.run(None, feed)[0])).float()
        finite &= bool(torch.isfinite(output).all())
        agreement = compare(reference, output.reshape(reference.shape))
        cosines.append(agreement.cosine)
        errors.append(agreement.max_rel_error)
    return {"loads": True, "finite": finite, "cosine": min(cosines), "max_rel_error": max(errors)}


def run_model(name, entry, folder, modelopt_python):
    model = build_model(entry)
    example = entry.inputs()
    torch.manual_seed(1)
    batches = [example] + [entry.inputs() for _ in range(2)]
    row = {"model": name}
    fp32_path = os.path.join(folder, "fp32.onnx")
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(model, example)
        torch.onnx.export(program, (), fp32_path, dynamo=True, opset_version=20, optimize=True,
                          external_data=False)
    row["fp32_export_seconds"] = time.perf_counter() - start
    fp32_bytes = sum(onnx_writer.initializer_bytes(onnx.load(fp32_path)).values())
    row["fp32"] = {**stats(fp32_path, fp32_bytes), **accuracy(fp32_path, model, batches)}
    variants = {}
    ours = os.path.join(folder, "torch_mp.onnx")
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = torch_mp.report_of(torch_mp.onnx_export(model, example, ours, torch.float16))
        variants["torch_mp"] = {"seconds": time.perf_counter() - start, "onnx_seconds": report.data["onnx"]["seconds"]}
    except Exception as error:  # noqa: BLE001
        variants["torch_mp"] = {"failed": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
    from onnxconverter_common import float16

    occ = os.path.join(folder, "occ.onnx")
    start = time.perf_counter()
    try:
        converted = float16.convert_float_to_float16(onnx.load(fp32_path), keep_io_types=True)
        variants["onnxconverter_common"] = {"seconds": time.perf_counter() - start}
        onnx.save(converted, occ)
    except Exception as error:  # noqa: BLE001
        variants["onnxconverter_common"] = {"failed": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
    if modelopt_python:
        calib = os.path.join(folder, "calib")
        os.makedirs(calib, exist_ok=True)
        session = onnxruntime.InferenceSession(fp32_path, providers=["CPUExecutionProvider"])
        np.savez(os.path.join(calib, "0.npz"), **{s.name: x.numpy() for s, x in zip(session.get_inputs(), example)})
        for label, calib_arg, keep in (("modelopt_keep_io_calib", calib, "1"), ("modelopt_defaults", "", "0")):
            out = os.path.join(folder, f"{label}.onnx")
            done = subprocess.run([modelopt_python, "-c", MODELOPT, fp32_path, out, calib_arg, keep],
                                  capture_output=True, text=True, timeout=1200)
            if done.returncode == 0:
                variants[label] = json.loads(done.stdout.strip().splitlines()[-1])
            else:
                variants[label] = {"failed": (done.stderr.strip().splitlines() or ["?"])[-1][:300]}
    paths = {"torch_mp": ours, "onnxconverter_common": occ, "modelopt_keep_io_calib":
             os.path.join(folder, "modelopt_keep_io_calib.onnx"), "modelopt_defaults":
             os.path.join(folder, "modelopt_defaults.onnx")}
    for label, info in variants.items():
        if "failed" not in info:
            info.update(stats(paths[label], fp32_bytes))
            info.update(accuracy(paths[label], model, batches))
    row["variants"] = variants
    return row


LABELS = {"torch_mp": "torch_mp", "modelopt_keep_io_calib": "AutoCast (keep IO, calib.)",
          "modelopt_defaults": "AutoCast (defaults)", "onnxconverter_common": "onnxconverter-common"}


def table(paths):
    """benchmarks/results/ONNX.md's table from the JSON files of one or more runs (rows in ORDER)."""
    rows = {}
    for path in paths:
        with open(path) as f:
            for row in json.load(f)["rows"]:
                rows[row["model"]] = row
    lines = ["| model | tool | Casts | init. bytes / fp32 | heavy ops fp16 | IO | typing problems | non-finite | "
             "1 - cosine | max rel. error | seconds |", "| --- | --- | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: |"]
    for name in [n for n in ORDER if n in rows]:
        row = rows[name]
        if "failed" in row:
            lines.append(f"| {name} | fp32 export | failed: {row['failed'][:80]} |" + " |" * 9)
            continue
        cell = f"{name} (fp32 ONNX export {row['fp32_export_seconds']:.0f} s)"
        for label in LABELS:
            v = row["variants"].get(label)
            if v is None:
                continue
            if "failed" in v:
                lines.append(f"| {cell} | {LABELS[label]} | failed: {v['failed'][:100]} |" + " |" * 8)
                continue
            io = "fp16" if v["io"] == ["FLOAT16"] else "fp32" if v["io"] == ["FLOAT"] else "+".join(v["io"]).lower()
            if not v.get("loads", True):
                quality = f"onnxruntime refuses: {v['error'][:90]} | | |"
            else:
                quality = f"{'no' if v['finite'] else '**yes**'} | {1 - v['cosine']:.1e} | {v['max_rel_error']:.2e} |"
            lines.append(f"| {cell} | {LABELS[label]} | {v['casts']} | {v['initializer_ratio']:.3f} | {v['heavy_fp16']} | "
                         f"{io} | {v['typing_problems']} | {quality} {v['seconds']:.1f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--modelopt-python", default=None)
    parser.add_argument("--models", default=None)
    parser.add_argument("--out", default="/tmp/onnx_compare.json")
    parser.add_argument("--table", nargs="+", metavar="JSON", help="print the markdown table of these runs' files")
    args = parser.parse_args()
    if args.table:
        print(table(args.table))
        return
    zoo = load_zoo()
    names = args.models.split(",") if args.models else [n for n in ORDER if n in zoo]
    rows = []
    header = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
              "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, "command": " ".join(sys.argv)}
    for name in names:
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            try:
                row = run_model(name, zoo[name], folder, args.modelopt_python)
            except Exception as error:  # noqa: BLE001 - the fp32 export itself failed
                row = {"model": name, "failed": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
            row["wall_seconds"] = time.perf_counter() - start
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(args.out, "w") as f:
            json.dump({"header": header, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
