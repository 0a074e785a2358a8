"""torch_mp.load: a saved converted module, ready to call, replaying CUDA graphs where that is safe.

    model = torch_mp.load("model_fp16.pt", "cuda")   # a CudaGraphModule on a GPU; the plain module on a CPU
    y = model(x)

The file is what torch.jit.save wrote (torch.jit.load still loads it, without torch_mp), or an AOTInductor package
(torch_mp.aoti_compile, torch._inductor.aoti_compile_and_package), told apart by content, not by name. On a CUDA
device the module comes wrapped as torch_mp.cuda_graphs wraps it, but bounded and never failing for want of a graph:
at most `max_signatures` input signatures get a graph, and calls with other signatures, with inputs a graph cannot
take (CPU tensors, unhashable values), or whose capture failed (the forward synchronises with the host) run the module
itself (cuda_graphs.py). The default bound, 8, holds the batch sizes a server usually pads to (1, 2, 4, ..., 128)
while keeping the memory of the graphs (static inputs and outputs, each graph's own intermediates) and the time spent
recording (warm-up runs and a capture per signature) bounded when shapes vary freely, e.g. one sequence length per
request.

A package is compiled for one device and has no CUDA graphs of its own (AOTInductor, through torch 2.15), so a
batch-1 call is launch-bound as the interpreter's is: a CUDA package gets the same wrapper, its loader made to run
single-threaded (run_single_threaded=True). Its default run takes a runner from a pool and synchronises with CUDA
events, which a capture cannot record; the wrapper's lock serialises the calls the single-threaded run leaves
unguarded.
"""
import json
import os
import zipfile
from typing import Optional, Union

import torch

from ._torchscript.jit_calls import load_file
from .cuda_graphs import CudaGraphModule

DEFAULT_MAX_SIGNATURES = 8

_MODEL_DIR = "data/aotinductor/model/"  # the package's default model, the one aoti_load_package loads


def load(path, device: Optional[Union[str, torch.device]] = None, *, cuda_graphs: bool = True,
         max_signatures: int = DEFAULT_MAX_SIGNATURES):
    """The module saved at `path` (a TorchScript file or an AOTInductor package), its tensors on `device` (None:
    where they were saved; a package runs on the device it was compiled for). On a machine with a GPU, unless
    `device` is a CPU, the package a CPU one, or `cuda_graphs` False, a CudaGraphModule that replays a CUDA graph per
    input signature (up to `max_signatures`) and calls the module itself (its `.module`) for anything else; otherwise
    the module, or the package's callable. FileNotFoundError for a missing file, ValueError for one neither
    torch.jit.load nor aoti_load_package can read and for a package asked for on another device than its own."""
    if not isinstance(cuda_graphs, bool):
        raise TypeError(f"cuda_graphs must be True or False, got {cuda_graphs!r}")
    if isinstance(max_signatures, bool) or not isinstance(max_signatures, int) or max_signatures < 1:
        raise ValueError(f"max_signatures must be a positive int, got {max_signatures!r}")
    if device is not None:
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as error:
            raise ValueError(f"device must be a torch.device or a string like 'cuda:0', got {device!r}: {error}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist")
    package_device = _package_device(path)
    if package_device is not None:
        return _load_package(path, package_device, device, cuda_graphs, max_signatures)
    _check_gpu(device)
    try:
        module = load_file(path, map_location=device)
    except ValueError as error:
        raise ValueError(f"{error}; nor is it an AOTInductor package") from error
    if not cuda_graphs or not torch.cuda.is_available() or (device is not None and device.type != "cuda"):
        return module
    return CudaGraphModule(module, max_signatures=max_signatures, fall_back=True)


def _check_gpu(device: Optional[torch.device]) -> None:
    if device is not None and device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"torch_mp.load: device {device} asked for, but torch sees no CUDA GPU")


def _package_device(path: str) -> Optional[str]:
    """The device type the AOTInductor package at `path` was compiled for ("cpu", "cuda"), or None where the file is
    not a PT2 archive (a TorchScript zip, anything else). ValueError for a PT2 archive without a compiled model."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            roots = [name[:-len("/archive_format")] for name in names
                     if name.endswith("/archive_format") and name.count("/") == 1]
            if len(roots) != 1 or archive.read(f"{roots[0]}/archive_format") != b"pt2":
                return None
            model = f"{roots[0]}/{_MODEL_DIR}"
            # AOTInductor writes the device into each compiled file's metadata; its loader reads it there too
            devices = {json.loads(archive.read(name)).get("AOTI_DEVICE_KEY") for name in names
                       if name.startswith(model) and name.endswith("_metadata.json")} - {None}
    except (zipfile.BadZipFile, OSError, KeyError, ValueError):
        return None  # not a readable zip, or not one of AOTInductor's: left to torch.jit.load and its error
    if len(devices) != 1:
        raise ValueError(f"{path} is a PT2 archive without an AOTInductor model (torch.export.save writes such "
                         "archives: torch.export.load reads them); torch_mp.load loads AOTInductor packages "
                         "(torch_mp.aoti_compile) and TorchScript files")
    return devices.pop()


def _load_package(path: str, package_device: str, device: Optional[torch.device], cuda_graphs: bool,
                  max_signatures: int):
    if device is not None and device.type != package_device:
        raise ValueError(f"{path} is an AOTInductor package compiled for {package_device}; it cannot run on {device}: "
                         f"compile it again (torch_mp.aoti_compile) with example inputs and model on {device.type}")
    if package_device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"torch_mp.load: {path} is an AOTInductor package compiled for cuda, but torch sees no "
                           "CUDA GPU")
    from torch import _inductor  # here, not at torch_mp's import: it takes about a second

    graphs = cuda_graphs and package_device == "cuda"
    try:
        package = _inductor.aoti_load_package(
            path, run_single_threaded=graphs,
            device_index=-1 if device is None or device.index is None else device.index)
    except Exception as error:  # noqa: BLE001 - any load failure means the package is not usable here
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{path} is an AOTInductor package torch cannot load (corrupt, or compiled by another torch "
                         f"or for another machine): {first}") from error
    if not graphs:
        return package
    return CudaGraphModule(package, max_signatures=max_signatures, fall_back=True)
