"""Per model and dtype: accuracy against fp32, weight-size ratio, casts, conversion time (CPU).

    python benchmarks/accuracy_table.py            # prints a markdown table
"""
import os
import platform
import sys
import time
from datetime import date

import torch
from torch import nn

# plan as on a CPU with fast fp16 and bf16 kernels (the plan a GPU conversion makes), whichever CPU runs this
os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")
# the tests' models and helpers
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "python"))

import torch_mp  # noqa: E402
from agreement import compare, flatten_tensors  # noqa: E402
from small_models import ControlFlowNet, ConvBnNet, LSTMTagger  # noqa: E402
from torch_mp.models import resnet50_ibn_a  # noqa: E402


def transformer():
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


MODELS = {
    "ConvBnNet": (ConvBnNet, lambda: (torch.randn(16, 3, 32, 32),)),
    "ResNet-50 IBN-a": (resnet50_ibn_a, lambda: (torch.randn(4, 3, 64, 64),)),
    "TransformerEncoder": (transformer, lambda: (torch.randn(4, 16, 64),)),
    "LSTM tagger": (LSTMTagger, lambda: (torch.randint(0, 1000, (4, 20)),)),
    "ControlFlowNet": (ControlFlowNet, lambda: (torch.randn(64, 32),)),
}


def main() -> int:
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads; "
          f"torch {torch.__version__}; {date.today()}; command: python {' '.join(sys.argv)}\n")
    print("| model | dtype | cosine | max rel error | top-1 | weights after/before | casts | cast MB/inference "
          "| low-precision nodes | conversion s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, (build, make_inputs) in MODELS.items():
        for dtype in (torch.float16, torch.bfloat16):
            torch.manual_seed(0)
            model = build().eval()
            inputs = make_inputs()
            start = time.perf_counter()
            converted = torch_mp.convert(model, inputs, dtype)
            report = torch_mp.report_of(converted)
            seconds = time.perf_counter() - start
            fresh = tuple(torch.randn_like(x) if x.is_floating_point() else x for x in inputs)
            with torch.no_grad():
                reference = flatten_tensors(model(*fresh))[0]
                result = flatten_tensors(converted(*fresh))[0]
            a = compare(reference, result)
            low = sum(1 for n in report.nodes if n["precision"] == "low")
            print(f"| {name} | {str(dtype)[6:]} | {a.cosine:.6f} | {a.max_rel_error:.2e} | {a.top1 * 100:.1f}% "
                  f"| {report.weight_ratio:.3f} | {len(report.casts)} | {report.cast_bytes / 1e6:.3f} "
                  f"| {low}/{len(report.nodes)} | {seconds:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
