"""Whether torch_mp.export gives the same program in every process: each of N fresh processes exports zoo models and
prints a digest of the program (its graph's code, signature and state dict bytes); all digests must agree.

    python benchmarks/export_determinism.py [--processes 10] [--dtype fp16] [--models tv.resnet50 hf.bert-base ...]
"""
import argparse
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = textwrap.dedent(
    """
    import hashlib, os, sys, warnings
    os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")
    sys.path.insert(0, os.path.join({root!r}, "tests", "zoo"))
    import torch, torch_mp
    from registry import build_model, load_zoo
    warnings.simplefilter("ignore")
    zoo = load_zoo()
    for name in {models!r}:
        entry = zoo[name]
        model = build_model(entry)
        torch.manual_seed(0)
        program = torch_mp.export(model, entry.inputs(), {dtype})
        digest = hashlib.sha256(program.graph_module.code.encode())
        digest.update(str(program.graph_signature).encode())
        for key, tensor in sorted(program.state_dict.items()):
            digest.update(key.encode() + str(tensor.dtype).encode())
            digest.update(tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        print(name, digest.hexdigest()[:16], flush=True)
    """
)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    parser.add_argument("--models", nargs="+", default=["tv.resnet50", "hf.bert-base", "timm.deit_tiny"])
    args = parser.parse_args()
    dtype = "torch.float16" if args.dtype == "fp16" else "torch.bfloat16"
    script = CHILD.format(root=ROOT, models=args.models, dtype=dtype)
    runs = []
    for index in range(args.processes):
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
        if result.returncode != 0:
            sys.exit(f"process {index} failed:\n{result.stderr[-2000:]}")
        runs.append(result.stdout.split())
        print(f"process {index}: {' '.join(runs[-1])}", flush=True)
    identical = all(run == runs[0] for run in runs)
    print(f"{args.processes} processes, {len(args.models)} models ({args.dtype}): "
          + ("identical programs" if identical else "DIFFERENT programs"))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
