"""The accuracy fallback's ranked search against plain bisection, on the same models, tolerances and inputs.

    python benchmarks/fallback_search.py

Prints a markdown table (also written to benchmarks/results/FALLBACK.md): per case, the nodes each search keeps in fp32,
the error it reaches, how many conversions it ran and its wall time. Cases: CancellationNet (fp16; one layer fp16
cannot represent), ResNet-50 IBN-a (bf16, 64x64 inputs; a tolerance below its plain conversion's error) and the
TransformerEncoder-based classifier of the zoo (fp16, tight tolerance).
"""
import datetime
import os
import platform
import sys
import time

import torch

# plan as on a CPU with fast fp16 and bf16 kernels (the plan a GPU conversion makes), whichever CPU runs this
os.environ.setdefault("TORCH_MP_CPU_FEATURES", "all")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # the tests' models and the plain bisection

import torch_mp  # noqa: E402
from torch_mp._torchscript.conversion import Conversion  # noqa: E402
from bisection import bisect_fallback  # noqa: E402
from torch_mp.fallback import search_fallback  # noqa: E402
from torch_mp.models import resnet50_ibn_a  # noqa: E402
from small_models import CancellationNet  # noqa: E402

DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
MAX_BISECTION = 60  # conversions: plain bisection over hundreds of nodes with a diffuse error takes far more


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(128, 4, 256, batch_first=True, dropout=0.0)
        self.encoder = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.head = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.head(self.encoder(x).mean(1))


def cases():
    torch.manual_seed(0)
    yield "CancellationNet", CancellationNet().eval(), [(torch.randn(16, 64),) for _ in range(3)], torch.float16, 5e-3
    yield "ResNet-50 IBN-a", resnet50_ibn_a().eval(), [(torch.randn(2, 3, 64, 64),) for _ in range(2)], \
        torch.bfloat16, 1.5e-2
    yield "TransformerEncoder x4", Encoder().eval(), [(torch.randn(4, 32, 128),) for _ in range(2)], \
        torch.float16, 2e-4


def job_for(model, inputs, dtype):
    """The model prepared once (observed on `inputs`) and the default CPU policy's options."""
    policy = torch_mp.OpPolicy.default(torch_mp.target_for(torch.device("cpu"), dtype))
    options = torch_mp.TorchScriptOptions(dtype=dtype, policy=policy, fuse_convolutions=False)
    return Conversion(torch_mp.prepare(model, inputs), options)


def fallback_low_nodes(job):
    """The nodes the plain conversion runs in low precision: the fallback's candidates."""
    _, plain = job.run(verify=False)
    return [n["id"] for n in plain.nodes if n["precision"] == "low"]


def main() -> int:
    rows = []
    for name, model, calibration, dtype, tolerance in cases():
        # each search's time includes its one preparation (freezing, clean-up, observation)
        start = time.perf_counter()
        job = job_for(model, calibration[0], dtype)
        _, report = search_fallback(job, calibration, tolerance, None, progress=False)
        ranked_seconds = time.perf_counter() - start
        fallback = report.data["fallback"]
        plain_error = fallback["error_before"]
        start = time.perf_counter()
        job = job_for(model, calibration[0], dtype)
        kept, error, conversions = bisect_fallback(job, calibration, tolerance, max_conversions=MAX_BISECTION)
        bisect_seconds = time.perf_counter() - start
        bisection = (f"{len(kept)} / {error:.3g} / {conversions} / {bisect_seconds:.1f} s" if kept is not None else
                     f"not done after {conversions} conversions / {bisect_seconds:.1f} s")
        low = len(fallback_low_nodes(job))
        rows.append(
            f"| {name} | {DTYPE_NAMES[dtype]} | {tolerance:g} | {plain_error:.3g} | {low} "
            f"| {len(fallback['kept_fp32'])} / {fallback['error_after']:.3g} / {fallback['conversions']} / "
            f"{ranked_seconds:.1f} s ({fallback['conversion_seconds']:.1f} s converting, "
            f"{fallback['run_seconds']:.1f} s running) | {bisection} | {'>' if kept is None else ''}"
            f"{bisect_seconds / ranked_seconds:.1f}x |"
        )
        print(rows[-1], flush=True)
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo") as info:
        cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    text = "\n".join([
        "# Accuracy fallback: ranked search vs plain bisection",
        "",
        f"Machine: {cpu}, {os.cpu_count()} cores; date {datetime.date.today()}; torch {torch.__version__}.",
        "Command: `python benchmarks/fallback_search.py`. Error: relative L2 error of the outputs against fp32, worst "
        "over the calibration inputs (the fallback's default metric). Each cell: nodes kept in fp32 / error reached / "
        "conversions run / wall time (the one preparation, the conversions and the calibration runs included; for "
        "the ranked search, the seconds spent converting and running the converted models).",
        "",
        "| model | dtype | tolerance | error without fallback | low-precision nodes | ranked search | bisection "
        "| bisection time / ranked |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
    ])
    print(text)
    with open(os.path.join(ROOT, "benchmarks", "results", "FALLBACK.md"), "w") as out:
        out.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
