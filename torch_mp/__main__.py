"""python -m torch_mp demo: converts the built-in ResNet-50 IBN-a and prints its report and accuracy."""
import argparse
import sys
import time

import torch

import torch_mp
from torch_mp.models import resnet50_ibn_a


def demo(args: argparse.Namespace) -> int:
    torch.manual_seed(0)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    model = resnet50_ibn_a().eval()
    x = torch.randn(args.batch, 3, args.size, args.size)
    start = time.perf_counter()
    converted, report = torch_mp.convert(model, (x,), dtype, return_report=True)
    elapsed = time.perf_counter() - start
    print(report)
    with torch.no_grad():
        reference = model(x)
        result = converted(x)
    cosine = torch.nn.functional.cosine_similarity(reference.flatten(), result.float().flatten(), dim=0).item()
    agree = (reference.argmax(1) == result.argmax(1)).float().mean().item()
    print(f"\nResNet-50 IBN-a, {args.dtype}, input {tuple(x.shape)}: converted in {elapsed:.2f} s")
    print(f"output dtype {result.dtype} (fp32 model: {reference.dtype}); cosine vs fp32 {cosine:.6f}; "
          f"top-1 agreement {agree * 100:.1f}%")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_mp", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="convert the built-in ResNet-50 IBN-a and print the report")
    demo_parser.add_argument("--dtype", choices=("fp16", "bf16"), default="bf16")
    demo_parser.add_argument("--batch", type=int, default=2)
    demo_parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args(argv)
    return demo(args)


if __name__ == "__main__":
    sys.exit(main())
