"""GraphsBySignature on the CPU, for testing torch_mp.load's bounded / fallback logic without a GPU: a recording that
keeps what a CUDA graph keeps, static input and output buffers that each replay overwrites, and that the test can
refuse (test_load.py, test_load_package.py)."""
import torch
from torch.utils import _pytree as pytree

from torch_mp.cuda_graphs import CudaGraphCaptureError, GraphsBySignature


class StaticBufferRecording:
    """What a CUDA graph keeps, on the CPU: static inputs copied in by each replay and static outputs it overwrites."""

    def __init__(self, module, leaves, spec):
        self.module, self.spec = module, spec
        self.static_leaves = [leaf.clone() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        self.static_outputs = self._run()

    def _run(self):
        with torch.no_grad():
            return self.module(*pytree.tree_unflatten(self.static_leaves, self.spec))

    def replay(self, leaves):
        for static, leaf in zip(self.static_leaves, leaves):
            if isinstance(static, torch.Tensor):
                static.copy_(leaf)
        for static, fresh in zip(pytree.tree_leaves(self.static_outputs), pytree.tree_leaves(self._run())):
            static.copy_(fresh)
        return self.static_outputs


class CpuGraphs(GraphsBySignature):
    """GraphsBySignature with StaticBufferRecording, refusing the signatures whose first input has a batch in
    `refuse`; counts its recordings."""

    def __init__(self, module, refuse=(), **settings):
        super().__init__(module, **settings)
        self.refuse, self.records = set(refuse), 0

    def _not_recordable(self, leaves):
        return None if any(isinstance(leaf, torch.Tensor) for leaf in leaves) else "no tensor inputs"

    def _record(self, inputs, leaves):
        self.records += 1
        self.module(*inputs)  # the plain first run, where a model error shows as itself
        if inputs[0].shape[0] in self.refuse:
            raise CudaGraphCaptureError("the forward synchronises with the host.")
        return StaticBufferRecording(self.module, leaves, pytree.tree_flatten(inputs)[1])
