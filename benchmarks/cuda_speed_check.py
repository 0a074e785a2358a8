"""First CUDA timing check: fp32 TorchScript, torch.autocast(fp16) eager and torch_mp fp16 on ResNet-50 (batch 32,
224x224) and BERT-base (batch 32, seq 128); median of 30 CUDA-event timings after 5 warm-ups. Needs a GPU.

    python benchmarks/cuda_speed_check.py
"""
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "zoo"))

import torch_mp  # noqa: E402
from registry import build_model, load_zoo  # noqa: E402

INPUTS = {
    "tv.resnet50": lambda: (torch.randn(32, 3, 224, 224, device="cuda"),),
    "hf.bert-base": lambda: (torch.randint(0, 1000, (32, 128), device="cuda"),
                             torch.ones(32, 128, dtype=torch.long, device="cuda")),
}


def median_ms(fn, inputs, repeats=30):
    with torch.no_grad():
        for _ in range(5):
            fn(*inputs)
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main():
    warnings.simplefilter("ignore")
    zoo = load_zoo()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, make_inputs in INPUTS.items():
        model = build_model(zoo[name]).cuda()
        inputs = make_inputs()
        with torch.no_grad():
            fp32 = torch.jit.freeze(torch.jit.trace(model, inputs, strict=False, check_trace=False))
        converted = torch_mp.convert(model, inputs, torch.float16)

        def autocast(*args):
            with torch.autocast("cuda", dtype=torch.float16):
                return model(*args)

        times = {"fp32 TorchScript": median_ms(fp32, inputs), "torch.autocast eager": median_ms(autocast, inputs),
                 "torch_mp fp16": median_ms(converted, inputs)}
        base = times["fp32 TorchScript"]
        print(f"{name}: " + "; ".join(f"{k} {v:.2f} ms ({base / v:.2f}x)" for k, v in times.items()), flush=True)


if __name__ == "__main__":
    main()
