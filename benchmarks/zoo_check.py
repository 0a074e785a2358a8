"""Converts real architectures from their library definitions (random weights, nothing downloaded) and compares
them with fp32: a first look at the zoo of issue 3. Models whose library is not installed are skipped and named.

    python benchmarks/zoo_check.py [--device cuda] [--dtype fp16]
"""
import argparse
import sys
import time
import warnings

import torch

import torch_mp
from torch_mp.accuracy import compare, flatten_tensors


def torchvision_models():
    import torchvision.models as tvm

    image = lambda: (torch.randn(4, 3, 224, 224),)  # noqa: E731
    return {
        "tv.resnet50": (lambda: tvm.resnet50(), image),
        "tv.mobilenet_v3_large": (lambda: tvm.mobilenet_v3_large(), image),
        "tv.efficientnet_b0": (lambda: tvm.efficientnet_b0(), image),
        "tv.convnext_tiny": (lambda: tvm.convnext_tiny(), image),
        "tv.vit_b_16": (lambda: tvm.vit_b_16(), image),
        "tv.swin_t": (lambda: tvm.swin_t(), image),
        "tv.regnet_y_400mf": (lambda: tvm.regnet_y_400mf(), image),
        "tv.densenet121": (lambda: tvm.densenet121(), image),
    }


def transformers_models():
    import transformers as hf

    tokens = lambda: (torch.randint(0, 1000, (4, 64)),)  # noqa: E731
    return {
        "hf.bert-base": (lambda: hf.BertModel(hf.BertConfig(torchscript=True)), tokens),
        "hf.gpt2": (lambda: hf.GPT2Model(hf.GPT2Config(torchscript=True)), tokens),
        "hf.distilbert": (lambda: hf.DistilBertModel(hf.DistilBertConfig(torchscript=True)), tokens),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    args = parser.parse_args()
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    warnings.simplefilter("ignore")
    models = {}
    for loader in (torchvision_models, transformers_models):
        try:
            models.update(loader())
        except ImportError as error:
            print(f"skipped {loader.__name__}: {error}")
    print(f"torch {torch.__version__}, device {args.device}, dtype {args.dtype}\n")
    print("| model | capture | cosine | max rel error | top-1 | weights after/before | casts | low nodes | convert s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    failures = 0
    for name, (build, make_inputs) in models.items():
        torch.manual_seed(0)
        try:
            model = build().eval().to(args.device)
            inputs = tuple(x.to(args.device) for x in make_inputs())
            start = time.perf_counter()
            converted, report = torch_mp.convert(model, inputs, dtype, return_report=True)
            seconds = time.perf_counter() - start
            with torch.no_grad():
                reference = flatten_tensors(model(*inputs))[0]
                result = flatten_tensors(converted(*inputs))[0]
            a = compare(reference, result)
            low = sum(1 for n in report.nodes if n["precision"] == "low")
            capture = "script" if "Traced" not in type(converted).__name__ else "trace"
            print(f"| {name} | {capture} | {a.cosine:.6f} | {a.max_rel_error:.2e} | {a.top1 * 100:.1f}% | "
                  f"{report.weight_ratio:.3f} | {len(report.casts)} | {low}/{len(report.nodes)} | {seconds:.2f} |")
        except Exception as error:  # noqa: BLE001 - report every model
            failures += 1
            first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
            print(f"| {name} | FAILED: {type(error).__name__}: {first} |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
