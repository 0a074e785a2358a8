"""CUDA-graph replay of a converted module: one launch per forward instead of one per op.

At batch 1 the TorchScript interpreter spends more time launching kernels than the GPU spends running them. A CUDA
graph records the kernels of one forward once and replays them with a single launch:

    fast = torch_mp.cuda_graphs(torch_mp.convert(model, (x,), torch.float16), (x,))
    y = fast(x)          # replays; a new input shape or dtype records one more graph

Each input signature (shapes, dtypes, strides, devices of the tensors; values of everything else) gets its own graph
with static input buffers; a call copies its tensors into them, replays, and returns copies of the outputs (the
graph overwrites its outputs on every replay). All graphs share one memory pool. A forward that synchronises with
the host (`.item()`, `.tolist()`, `nonzero`, data-dependent shapes, printing) cannot be recorded: capturing it raises
CudaGraphCaptureError.
"""
from typing import Any, Dict, Tuple

import torch
from torch.utils import _pytree as pytree


class CudaGraphCaptureError(RuntimeError):
    """The module's forward cannot be recorded as a CUDA graph."""


def _signature(leaves) -> Tuple:
    key = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            key.append(("tensor", tuple(leaf.shape), leaf.dtype, leaf.stride(), leaf.device))
        else:
            key.append(("value", leaf))
    return tuple(key)


class _Recording:
    def __init__(self, graph, static_leaves, static_outputs):
        self.graph = graph
        self.static_leaves = static_leaves
        self.static_outputs = static_outputs


class CudaGraphModule:
    """Calls `module` through CUDA graphs recorded per input signature; see the module docstring."""

    def __init__(self, module, warmup: int = 3, clone_outputs: bool = True):
        if not torch.cuda.is_available():
            raise RuntimeError("torch_mp.cuda_graphs needs a CUDA GPU; none is available")
        if warmup < 1:
            raise ValueError(f"warmup must be at least 1 (the first runs allocate and tune), got {warmup}")
        self.module = module
        self.warmup = warmup
        self.clone_outputs = clone_outputs
        self._pool = torch.cuda.graph_pool_handle()
        self._recordings: Dict[Tuple, _Recording] = {}

    @property
    def recorded_signatures(self) -> int:
        """How many input signatures have a graph."""
        return len(self._recordings)

    def __call__(self, *inputs: Any) -> Any:
        leaves, spec = pytree.tree_flatten(inputs)
        key = (spec, _signature(leaves))
        recording = self._recordings.get(key)
        if recording is None:
            recording = self._record(inputs, leaves)
            self._recordings[key] = recording
        for static, leaf in zip(recording.static_leaves, leaves):
            if isinstance(leaf, torch.Tensor):
                static.copy_(leaf)
        recording.graph.replay()
        if not self.clone_outputs:
            return recording.static_outputs
        return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, recording.static_outputs)

    def _record(self, inputs, leaves) -> _Recording:
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        if not tensors or any(not t.is_cuda for t in tensors):
            raise ValueError("torch_mp.cuda_graphs: every tensor input must be on a CUDA device "
                             f"(got {[str(t.device) for t in tensors] or 'no tensor inputs'})")
        static_leaves = [leaf.clone() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        static_inputs = pytree.tree_unflatten(static_leaves, pytree.tree_flatten(inputs)[1])
        side = torch.cuda.Stream(device=tensors[0].device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):
            # the profiling executor optimises the graph; cuBLAS/cuDNN pick kernels; at least one plain run, so that
            # an error of the next one is its synchronisation
            for _ in range(max(self.warmup - 1, 1)):
                self.module(*static_inputs)
            # The last warm-up run (the graph the capture will see) with host synchronisation made an error: a capture
            # that fails on one leaves CUDA's random generators in capture mode for the rest of the process.
            _run_refusing_host_synchronisation(self.module, static_inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.no_grad(), torch.cuda.graph(graph, pool=self._pool):
                static_outputs = self.module(*static_inputs)
        except RuntimeError as error:
            raise CudaGraphCaptureError(
                f"torch_mp.cuda_graphs: the forward cannot be recorded as a CUDA graph. CUDA said: {error}"
            ) from error
        return _Recording(graph, static_leaves, static_outputs)


def _run_refusing_host_synchronisation(module, inputs) -> None:
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        module(*inputs)
    except RuntimeError as error:  # the same forward ran without the sync check just before: this is the check's
        raise CudaGraphCaptureError(
            "torch_mp.cuda_graphs: the forward cannot be recorded as a CUDA graph because it synchronises with the "
            "host (.item(), .tolist(), nonzero, shapes that depend on values, printing). Call the module directly "
            f"instead, or remove the synchronisation. CUDA said: {error}"
        ) from error
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def cuda_graphs(module, example_inputs: Any = None, warmup: int = 3, clone_outputs: bool = True) -> CudaGraphModule:
    """Wraps a (converted) module so that its forward replays CUDA graphs; records one now for `example_inputs`
    (a tensor or a tuple of positional inputs) when given, so capture errors show here rather than at the first call.
    """
    runner = CudaGraphModule(module, warmup=warmup, clone_outputs=clone_outputs)
    if example_inputs is not None:
        runner(*(example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)))
    return runner
