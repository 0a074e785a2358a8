"""CUDA-graph replay of a converted module: one launch per forward instead of one per op.

At batch 1 the TorchScript interpreter spends more time launching kernels than the GPU spends running them. A CUDA
graph records the kernels of one forward once and replays them with a single launch:

    fast = torch_mp.cuda_graphs(torch_mp.convert(model, (x,), torch.float16), (x,))
    y = fast(x)          # replays; a new input shape or dtype records one more graph

Each input signature (shapes, dtypes, strides, devices of the tensors; types and values of everything else) gets its
own graph with static input buffers; a call copies its tensors into them, replays, and returns copies of the outputs
(the graph overwrites its outputs on every replay). All graphs share one memory pool. A forward that synchronises with
the host (`.item()`, `.tolist()`, `nonzero`, data-dependent shapes, printing) cannot be recorded.

Two settings of one class, GraphsBySignature: torch_mp.cuda_graphs records every signature and raises where it cannot
(CudaGraphCaptureError; ValueError for inputs a graph cannot take); torch_mp.load records at most `max_signatures` and
calls the module itself for the others, for inputs a graph cannot take and for signatures whose capture failed
(remembered, one CudaGraphFallbackWarning per wrapper). Either way an error of the model itself (a wrong input shape)
is raised as the model raised it: the first run of a new signature is a plain one. Inputs that require grad, with
grad mode on, always get a plain call: a replay's outputs carry no autograd history.

Threads: a lock serialises the calls of one wrapper (its graphs share static buffers and one pool), so one wrapper
may be called from several threads; its calls do not overlap. A capture (the first call of a signature) forbids
unsafe CUDA calls process-wide while it runs: other threads' CUDA work at that moment can make it fail, and then
torch_mp.load's wrapper falls back for that signature.
"""
import threading
import warnings
from typing import Any, Dict, Optional, Tuple

import torch
from torch.utils import _pytree as pytree


class CudaGraphCaptureError(RuntimeError):
    """The module's forward cannot be recorded as a CUDA graph."""


class CudaGraphFallbackWarning(UserWarning):
    """torch_mp.load's wrapper calls the module without a CUDA graph for some inputs (capture failed, or the bound on
    recorded signatures was reached)."""


def _signature(leaves) -> Tuple:
    key = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            key.append(("tensor", tuple(leaf.shape), leaf.dtype, leaf.stride(), leaf.device))
        else:
            key.append(("value", type(leaf), leaf))  # the type too: 1, 1.0 and True are equal keys
    return tuple(key)


class _Recording:
    def __init__(self, graph, device, static_leaves, static_outputs):
        self.graph = graph
        self.device = device
        self.static_leaves = static_leaves
        self.static_outputs = static_outputs

    def replay(self, leaves):
        """The outputs for `leaves` (of this recording's signature), in the static output buffers."""
        with torch.cuda.device(self.device):
            for static, leaf in zip(self.static_leaves, leaves):
                if isinstance(static, torch.Tensor):
                    static.copy_(leaf)
            self.graph.replay()
        return self.static_outputs


class GraphsBySignature:
    """Calls `module` through one recording per input signature; see the module docstring. `_record` and
    `_not_recordable` make and vet the recordings (CudaGraphModule: CUDA graphs)."""

    def __init__(self, module, clone_outputs: bool = True, max_signatures: Optional[int] = None,
                 fall_back: bool = False):
        if max_signatures is not None and (isinstance(max_signatures, bool) or not isinstance(max_signatures, int)
                                           or max_signatures < 1):
            raise ValueError(f"max_signatures must be a positive int or None (no bound), got {max_signatures!r}")
        self.module = module
        self.clone_outputs = clone_outputs
        self.max_signatures = max_signatures
        self.fall_back = fall_back
        self._recordings: Dict[Tuple, Any] = {}
        self._refused: Dict[Tuple, str] = {}  # signature -> why its capture failed
        self._warned = set()  # the kinds of fallback warned about: "refused", "bound"
        self._lock = threading.Lock()

    @property
    def recorded_signatures(self) -> int:
        """How many input signatures have a recording."""
        return len(self._recordings)

    @property
    def refused_signatures(self) -> int:
        """How many input signatures could not be recorded (fall_back: they run the module itself)."""
        return len(self._refused)

    def __call__(self, *inputs: Any) -> Any:
        with self._lock:
            return self._call(inputs)

    def _call(self, inputs) -> Any:
        leaves, spec = pytree.tree_flatten(inputs)
        if torch.is_grad_enabled() and any(isinstance(leaf, torch.Tensor) and leaf.requires_grad for leaf in leaves):
            return self.module(*inputs)
        reason = self._not_recordable(leaves)
        if reason is None:
            key = (spec, _signature(leaves))
            try:
                hash(key)
            except TypeError as error:
                reason = f"torch_mp.cuda_graphs: an input value cannot key a recording ({error})"
        if reason is not None:
            if not self.fall_back:
                raise ValueError(reason)
            return self.module(*inputs)
        recording = self._recordings.get(key)
        if recording is None:
            if key in self._refused:
                return self.module(*inputs)
            if self.max_signatures is not None and len(self._recordings) >= self.max_signatures:
                self._warn("bound", f"torch_mp: {self.max_signatures} input signatures have CUDA graphs "
                           "(max_signatures); calls with other signatures run the module without one")
                return self.module(*inputs)
            try:
                recording = self._record(inputs, leaves)
            except CudaGraphCaptureError as error:
                if not self.fall_back:
                    raise
                self._refused[key] = str(error)
                self._warn("refused", f"{error} The module runs without a CUDA graph for these inputs.")
                return self.module(*inputs)
            self._recordings[key] = recording
        outputs = recording.replay(leaves)
        if not self.clone_outputs:
            return outputs
        return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, outputs)

    forward = __call__

    def _warn(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(message, CudaGraphFallbackWarning, stacklevel=4)  # _warn, _call, __call__

    def _not_recordable(self, leaves) -> Optional[str]:
        """Why inputs with these leaves cannot be recorded at all, or None."""
        raise NotImplementedError

    def _record(self, inputs, leaves):
        """A recording for this signature (its replay(leaves) gives the outputs); CudaGraphCaptureError where none
        can be made, the model's own error where the model fails."""
        raise NotImplementedError


class CudaGraphModule(GraphsBySignature):
    """Calls `module` through CUDA graphs recorded per input signature; see the module docstring."""

    def __init__(self, module, warmup: int = 3, clone_outputs: bool = True, max_signatures: Optional[int] = None,
                 fall_back: bool = False):
        if not torch.cuda.is_available():
            raise RuntimeError("torch_mp.cuda_graphs needs a CUDA GPU; none is available")
        if warmup < 1:
            raise ValueError(f"warmup must be at least 1 (the first runs allocate and tune), got {warmup}")
        super().__init__(module, clone_outputs=clone_outputs, max_signatures=max_signatures, fall_back=fall_back)
        self.warmup = warmup
        self._pool = torch.cuda.graph_pool_handle()

    def _not_recordable(self, leaves) -> Optional[str]:
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        if not tensors or any(not t.is_cuda for t in tensors) or len({t.device for t in tensors}) > 1:
            return ("torch_mp.cuda_graphs: every tensor input must be on one CUDA device "
                    f"(got {[str(t.device) for t in tensors] or 'no tensor inputs'})")
        return None

    def _record(self, inputs, leaves) -> _Recording:
        device = next(leaf.device for leaf in leaves if isinstance(leaf, torch.Tensor))
        static_leaves = [leaf.clone() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        static_inputs = pytree.tree_unflatten(static_leaves, pytree.tree_flatten(inputs)[1])
        with torch.cuda.device(device):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.no_grad(), torch.cuda.stream(side):
                # the profiling executor optimises the graph; cuBLAS/cuDNN pick kernels. At least one plain run: an
                # error there is the model's own (raised as it is), an error of the next one is its synchronisation
                for _ in range(max(self.warmup - 1, 1)):
                    self.module(*static_inputs)
                # The last warm-up run (the graph the capture will see) with host synchronisation made an error: a
                # capture that fails on one leaves CUDA's random generators in capture mode for the rest of the process.
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
        return _Recording(graph, device, static_leaves, static_outputs)


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
