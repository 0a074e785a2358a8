"""Draws the built-in ResNet-50 IBN-a converted to fp16 (input 1x3x64x64) as SVG, collapsed automatically.

    python benchmarks/render_picture.py [--dtype fp16|bf16] [-o benchmarks/results/resnet50_ibn_a_fp16.svg]
"""
import argparse
import os
import re

import torch

import torch_mp
from torch_mp import visualize
from torch_mp.models import resnet50_ibn_a

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", choices=DTYPES, default="fp16")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    output = args.output or os.path.join(HERE, "results", f"resnet50_ibn_a_{args.dtype}.svg")
    torch.manual_seed(0)
    converted = torch_mp.convert(resnet50_ibn_a().eval(), (torch.randn(1, 3, 64, 64),), DTYPES[args.dtype])
    report = torch_mp.report_of(converted)
    visualize.render_svg(report, output)
    with open(output) as f:
        titles = re.findall(r'class="node">\s*<title>([^<]*)</title>', f.read())
    drawn = [t for t in titles if not t.startswith("legend/")]
    boxes = sum(1 for t in drawn if t.startswith(visualize.BOX))
    print(f"{output}: {len(drawn)} drawn nodes ({boxes} module boxes, {len(drawn) - boxes} single nodes and "
          f"inputs/outputs), {os.path.getsize(output) / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
