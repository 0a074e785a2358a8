"""torch_mp.aoti_compile: torch_mp.export's program compiled by AOTInductor into a package (.pt2) that loads with
torch._inductor.aoti_load_package in Python and torch::inductor::AOTIModelPackageLoader in C++, without torch_mp."""
from __future__ import annotations

import contextlib
import os
import re
import time
import warnings
import zipfile
from collections import Counter
from typing import Any, Dict, Optional

import torch

from .. import _C
from .._errors import Int8Warning
from .._compat import INDUCTOR_CPU_ROUNDS_AT_CASTS
from .._torchscript.jit_calls import REPORT_FILE
from ..report import report_of, returned
from .conversion import export

# What keeps the plan's rounding in Inductor's kernels. Inductor fuses a cast into the pointwise kernel around it and
# would otherwise compute in fp32 straight through an fp32 -> low -> fp32 round trip; emulate_precision_casts rounds
# where the program casts, so the package computes what the exported program does (tests/python/test_aoti.py), on CPU
# from torch 2.13 (_compat.INDUCTOR_CPU_ROUNDS_AT_CASTS).
INDUCTOR_CONFIGS: Dict[str, Any] = {"emulate_precision_casts": True}


def aoti_compile(model: Any, example_inputs: Any, dtype: Optional[torch.dtype] = None, package_path: Any = None, *,
                 example_kwarg_inputs: Optional[Dict[str, Any]] = None, dynamic_shapes: Any = None,
                 inductor_configs: Optional[Dict[str, Any]] = None,
                 return_report: bool = False, **options):
    """Exports and converts `model` (torch_mp.export, with `options`), then writes an AOTInductor package to
    `package_path` (a path ending in .pt2).

    Args:
        model, example_inputs, example_kwarg_inputs: as for torch_mp.export (the package takes the keyword inputs as
            keywords).
        dtype: torch.float16, torch.bfloat16 or torch.int8 (freezing on, so that Inductor lowers the int8 nodes to
            oneDNN's kernels; the report's "aoti_int8_kernels" says how many of them the package calls);
            None (default): the device's choice, as for torch_mp.export.
        package_path: where to write the package (required; a path ending in .pt2).
        dynamic_shapes: passed to torch.export.export, as for torch_mp.export, e.g. ({0: torch.export.Dim("batch",
            min=1, max=64)},) for a batch of any size in that range. Without it the program, and so the package, is
            specialised to the example inputs' shapes (torch.export's behaviour): run it on inputs of those shapes
            only (a package does not necessarily refuse others: a CPU one may resize its output and go on).
        inductor_configs: added to INDUCTOR_CONFIGS.
        return_report: deprecated (a FutureWarning): also return the Report, which torch_mp.report_of(path) reads
            from the package.
        options: ConversionOptions fields, as for torch_mp.export.

    Returns:
        the path, or (path, Report) with return_report=True. The package holds the Report (torch_mp.report_of(path)):
        its "aoti_seconds" is the compile time and "aoti_rounds_at_casts" whether every cast of the program rounds in
        the package (False for a CPU package before torch 2.13, with a warning).
    """
    if package_path is None:
        raise TypeError("aoti_compile() needs package_path, where to write the package (a path ending in .pt2)")
    check_package_path(package_path)
    program = export(model, example_inputs, dtype, example_kwarg_inputs=example_kwarg_inputs,
                     dynamic_shapes=dynamic_shapes, **options)
    path = write_package(program, package_path, report_of(program), inductor_configs)
    return returned(path, return_report, "torch_mp.aoti_compile")


def check_package_path(package_path: Any) -> None:
    if not str(package_path).endswith(".pt2"):
        raise ValueError(f"package path {str(package_path)!r} must end in .pt2: an AOTInductor package's name ends in "
                         ".pt2")


def write_package(program, package_path: Any, report, inductor_configs: Optional[Dict[str, Any]] = None) -> str:
    """Compiles a converted program into the package at `package_path`; notes in the report the compile time and
    whether the package rounds where the program casts, and stores it in the package (report_of reads it there)."""
    configs = {**INDUCTOR_CONFIGS, **(inductor_configs or {})}
    int8_kernels = Counter(node["op"] for node in report.nodes if node["precision"] == "int8"
                           and _C.int8_facts(node["op"]).role == _C.Int8Role.kernel)
    if int8_kernels:
        configs.setdefault("freezing", True)  # without it AOTInductor computes the program in fp32 (pytorch/ao#4566)
    rounds = bool(configs["emulate_precision_casts"]) and (INDUCTOR_CPU_ROUNDS_AT_CASTS or not _on_cpu(program))
    if configs["emulate_precision_casts"] and not rounds:
        warnings.warn(
            f"torch {torch.__version__}: Inductor's CPU kernels compute an fp32 -> {report.data['dtype']} -> fp32 "
            "round trip that falls inside one fused kernel in fp32, so the package may differ from the exported "
            "program there by a rounding of the low dtype (the kernel keeps the fp32 value); torch >= 2.13 rounds "
            "where the program casts (pytorch/pytorch#182882)", stacklevel=3)
    report.annotate("aoti_rounds_at_casts", rounds)
    start = time.perf_counter()
    # int8: freezing takes effect under no_grad only (pytorch/ao#4566), and without it the package computes in fp32
    with torch.no_grad() if int8_kernels else contextlib.nullcontext():
        path = torch._inductor.aoti_compile_and_package(program, package_path=os.fspath(package_path),
                                                        inductor_configs=configs)
    report.annotate("aoti_seconds", time.perf_counter() - start)
    if int8_kernels:
        report.annotate("aoti_int8_kernels", _check_int8_kernels(path, int8_kernels))
    _store_report(path, report)
    return path


def _store_report(path: str, report) -> None:
    """The report added to the package as <archive>/extra/REPORT_FILE, where torch.jit.save puts a module's extra
    files; AOTInductor's loader reads only the entries it knows."""
    with zipfile.ZipFile(path, "a") as package:
        root = package.namelist()[0].partition("/")[0]
        package.writestr(f"{root}/extra/{REPORT_FILE}", report.to_json(indent=None))


# The oneDNN int8 kernels the package's generated C++ calls for each int8 kernel op of the plan (as
# aoti_torch_cpu__qconv_pointwise_tensor, aoti_torch_cpu__qconv2d_pointwise_binary_tensor, ...).
_INT8_CALLS = {"aten::conv2d": "qconv", "aten::linear": "qlinear"}


def _check_int8_kernels(path: str, planned: Counter) -> Dict[str, Dict[str, int]]:
    """How many of the plan's int8 kernels the package calls (from its generated C++); an Int8Warning where some fell
    back to float (their Q/DQ pattern was not lowered)."""
    with zipfile.ZipFile(path) as package:
        source = "\n".join(package.read(name).decode("utf-8", "replace") for name in package.namelist()
                           if name.endswith(".cpp"))
    found = {}
    for op, count in planned.items():
        calls = len(re.findall(rf"\baoti_torch_cpu__{_INT8_CALLS[op]}\w*_pointwise\w*\(", source))
        found[op] = {"planned": count, "in_package": calls}
    missing = {op: f["planned"] - f["in_package"] for op, f in found.items() if f["in_package"] < f["planned"]}
    if missing:
        warnings.warn("torch_mp int8: the package computes " + ", ".join(f"{n} of the planned int8 {op}"
                      for op, n in missing.items()) + " in float: Inductor did not lower their quantize -> op "
                      "pattern to oneDNN's int8 kernels (the program still computes them on dequantized values)",
                      Int8Warning, stacklevel=4)
    return found


def _on_cpu(program) -> bool:
    """Whether the program computes on the CPU: its inputs' and stored tensors' device."""
    values = [node.meta.get("val") for node in program.graph.nodes if node.op == "placeholder"]
    return any(isinstance(value, torch.Tensor) and value.device.type == "cpu" for value in values)
