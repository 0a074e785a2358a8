"""torch_mp.load: a saved converted module, ready to call, replaying CUDA graphs where that is safe.

    model = torch_mp.load("model_fp16.pt", "cuda")   # a CudaGraphModule on a GPU; the plain module on a CPU
    y = model(x)

The file is what torch.jit.save wrote (torch.jit.load still loads it, without torch_mp). On a CUDA device the module
comes wrapped as torch_mp.cuda_graphs wraps it, but bounded and never failing for want of a graph: at most
`max_signatures` input signatures get a graph, and calls with other signatures, with inputs a graph cannot take
(CPU tensors, unhashable values), or whose capture failed (the forward synchronises with the host) run the module
itself (cuda_graphs.py). The default bound, 8, holds the batch sizes a server usually pads to (1, 2, 4, ..., 128)
while keeping the memory of the graphs (static inputs and outputs, each graph's own intermediates) and the time spent
recording (warm-up runs and a capture per signature) bounded when shapes vary freely, e.g. one sequence length per
request.
"""
from typing import Optional, Union

import torch

from ._torchscript import load_file
from .cuda_graphs import CudaGraphModule

DEFAULT_MAX_SIGNATURES = 8


def load(path, device: Optional[Union[str, torch.device]] = None, *, cuda_graphs: bool = True,
         max_signatures: int = DEFAULT_MAX_SIGNATURES):
    """The module saved at `path`, its tensors on `device` (None: where they were saved). On a machine with a GPU,
    unless `device` is a CPU or `cuda_graphs` is False, a CudaGraphModule that replays a CUDA graph per input
    signature (up to `max_signatures`) and calls the module itself (its `.module`) for anything else; otherwise the
    module. FileNotFoundError for a missing file, ValueError for one torch.jit.load cannot read."""
    if not isinstance(cuda_graphs, bool):
        raise TypeError(f"cuda_graphs must be True or False, got {cuda_graphs!r}")
    if isinstance(max_signatures, bool) or not isinstance(max_signatures, int) or max_signatures < 1:
        raise ValueError(f"max_signatures must be a positive int, got {max_signatures!r}")
    if device is not None:
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as error:
            raise ValueError(f"device must be a torch.device or a string like 'cuda:0', got {device!r}: {error}")
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"torch_mp.load: device {device} asked for, but torch sees no CUDA GPU")
    module = load_file(str(path), map_location=device)
    if not cuda_graphs or not torch.cuda.is_available() or (device is not None and device.type != "cuda"):
        return module
    return CudaGraphModule(module, max_signatures=max_signatures, fall_back=True)
