"""torch_mp: turns an fp32 PyTorch model into a fast mixed-precision model for inference, through either of two
fronts on one C++ core: `convert` gives a frozen TorchScript module, `export` a torch.export program with explicit
casts, which `aoti_compile` packages with AOTInductor for C++ without TorchScript.

    mp = torch_mp.convert(model, example_inputs=(x,), dtype=torch.float16)
    torch.jit.save(mp, "model_fp16.pt")   # loads with torch.jit.load / torch::jit::load, no torch_mp needed
    program = torch_mp.export(model, (x,), torch.bfloat16)         # a torch.export.ExportedProgram
    torch_mp.aoti_compile(model, (x,), torch.bfloat16, "model.pt2")  # an AOTInductor package
    fast = torch_mp.load("model_fp16.pt", "cuda")   # either file, replaying CUDA graphs where it can
    print(torch_mp.report_of(mp))   # what the conversion did; of a program, a package's or an ONNX file's path too
"""
import torch  # noqa: F401  (loads libtorch before the extension)

from . import _C, _compat

_compat.check_extension(_C.BUILT_WITH_TORCH)

from ._errors import ConversionError, Int8Warning, ModelRunError
from ._inputs import InputSpec
from ._torchscript.conversion import PreparedModel, TraceWarning, convert, prepare
from ._export import aoti_compile, export
from ._export.onnx_writer import onnx_export, onnx_policy, onnx_typing_problems
from ._torchscript.jit_calls import TorchScriptDeprecationWarning, save
from .cuda_graphs import CudaGraphCaptureError, CudaGraphFallbackWarning, CudaGraphModule, cuda_graphs
from ._load import load
from ._torchscript.jit_pass import jit_pass
from .options import ConversionOptions, TorchScriptOptions
from .policy import (CATEGORIES, TARGETS, NodeInfo, OpPolicy, PolicyEntry, SlowKernelsWarning, cpu_features,
                     device_dtype, module_paths, target_for)
from .report import Report, report_of

__all__ = [
    "CATEGORIES",
    "TARGETS",
    "ConversionError",
    "Int8Warning",
    "ConversionOptions",
    "CudaGraphCaptureError",
    "CudaGraphFallbackWarning",
    "CudaGraphModule",
    "InputSpec",
    "ModelRunError",
    "NodeInfo",
    "OpPolicy",
    "PolicyEntry",
    "PreparedModel",
    "Report",
    "SlowKernelsWarning",
    "TorchScriptDeprecationWarning",
    "TorchScriptOptions",
    "TraceWarning",
    "aoti_compile",
    "convert",
    "cpu_features",
    "cuda_graphs",
    "device_dtype",
    "export",
    "jit_pass",
    "load",
    "module_paths",
    "onnx_export",
    "onnx_policy",
    "onnx_typing_problems",
    "prepare",
    "report_of",
    "save",
    "target_for",
]
__version__ = "0.1.0"
