"""The torch.export front, laid out by stage as csrc/jit is: capture.py (torch.export and the capture checks), the
fp32 clean-up (inference_form.py with functional_writes.py, fold_constants.py, fold_batch_norms.py), observe.py (the
FX interpreter's statistics), facts.py (what the core's rule order needs per FX node, and its decisions), plan.py (the
dataflow graph for the core planner), int8_plan.py (int8 conversions), apply.py (the plan as casts, stored weights),
quantize.py (int8 conversions), verify.py (non-finite values), report.py; conversion.py holds torch_mp.export and
sequences them, each stage handing the next a record of records.py. ir.py: what the stages read of FX nodes, and the
program surgery they share. The ways out of the front beside the program itself: package.py (AOTInductor) and
onnx_writer.py (a typed ONNX graph).
"""
from .conversion import export
from .ir import CAST
from .package import aoti_compile

__all__ = ["CAST", "aoti_compile", "export"]
