"""The torch.export front, laid out by stage as csrc/jit is: capture.py (torch.export and the capture checks, with
inference_form.py, functional_writes.py and fold_batch_norms.py), observe.py (the FX interpreter's statistics), facts.py (what the core's
rule order needs per FX node, and its decisions), plan.py (the dataflow graph for the core planner), apply.py (the
plan as casts, stored weights), verify.py (non-finite values), report.py, package.py (AOTInductor); conversion.py
holds torch_mp.export and sequences them. ir.py: what the stages read of FX nodes."""
from .conversion import export
from .ir import CAST
from .package import aoti_compile

__all__ = ["CAST", "aoti_compile", "export"]
