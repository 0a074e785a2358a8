"""torch_mp.onnx_export: torch_mp.export's program written as ONNX by PyTorch's own exporter (torch.onnx.export with
dynamo=True), held to a typed graph.

A typed graph is what a strongly typed runtime (TensorRT 10's strongly typed networks, TensorRT 11 always) needs and
what onnxruntime loads: every op's floating operands that its schema binds to one type parameter agree in element
type, an explicit Cast at every precision boundary, and each weight stored once, in the dtype its readers compute in.
`onnx_typing_problems` lists what breaks that; `onnx_export` refuses to write a graph that has any, and refuses one
where the exporter's optimizer dropped a cast the plan put in (an fp32 -> low -> fp32 rounding pair included).
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .._errors import ConversionError
from .conversion import export
from .ir import CAST
from ..options import ConversionOptions
from ..policy import OpPolicy, target_for
from ..report import REPORT_KEY, report_of, returned

DEFAULT_OPSET = 20
# One protobuf message holds at most 2 GiB: a model whose initializers are larger is written with ONNX external data.
EXTERNAL_DATA_THRESHOLD = 2 * 1024 ** 3
# Initializers with fewer elements are not compared for "stored in two precisions": equal small constants (a 0 or a
# 1, a shape-sized vector) in fp32 and fp16 are the exporter's scalars, not one weight stored twice.
MIN_COMPARED_ELEMENTS = 16
BF16_CPU_NOTE = ("onnxruntime's CPU execution provider has no bf16 kernels for Conv, Gemm and MatMul: a bf16 graph "
                 "loads there only if it has none of them; run it with TensorRT or the CUDA execution provider")

_FLOATS = {1: torch.float32, 10: torch.float16, 16: torch.bfloat16, 11: torch.float64}  # onnx.TensorProto codes
_CODE = {dtype: code for code, dtype in _FLOATS.items()}
_NAMES = {1: "float", 10: "float16", 16: "bfloat16", 11: "double"}


def onnx_policy(dtype: torch.dtype) -> OpPolicy:
    """The policy an ONNX graph is planned with when none is given: every heavy op low (a runtime with fast fp16 and
    bf16 kernels for convolutions, matmuls and attention, as TensorRT and onnxruntime's CUDA provider are), the
    numerically sensitive ops fp32, norms included (TensorRT computes a LayerNormalization in its input's type)."""
    policy = OpPolicy.default(target_for(torch.device("cpu"), dtype), cpu_features="all")
    policy.name = "onnx_fp16" if dtype == torch.float16 else "onnx_bf16"
    return policy


def onnx_export(model: Any, example_inputs: Any, path: Any, dtype: Optional[torch.dtype] = None, *,
                opset: Optional[int] = None, example_kwarg_inputs: Optional[Dict[str, Any]] = None,
                dynamic_shapes: Any = None,
                calibration_inputs: Optional[Sequence[Any]] = None,
                external_data_threshold: int = EXTERNAL_DATA_THRESHOLD, return_report: bool = False,
                options: Optional[ConversionOptions] = None, **option_fields):
    """Converts `model` as torch_mp.export does and writes the program as an ONNX file at `path`.

    Args:
        model, example_inputs, example_kwarg_inputs, calibration_inputs, dynamic_shapes: as for torch_mp.export (a
            module in eval mode or an ExportedProgram; dynamic_shapes gives the ONNX graph its symbolic axes; keyword
            inputs are graph inputs named after them).
        path: the .onnx file to write (its folder must exist).
        dtype: torch.float16 (the default, also for dtype=None) or torch.bfloat16.
        opset: the ONNX opset (default DEFAULT_OPSET, 20).
        external_data_threshold: initializer bytes above which the weights go to an external data file beside
            `path` (PATH.data); default 2 GiB, protobuf's limit.
        return_report: deprecated (a FutureWarning): also return the Report, which torch_mp.report_of(path) reads
            from the file's metadata (its "onnx" entry: opset, casts, initializer bytes by dtype, external data,
            seconds, notes).
        options, option_fields: as for torch_mp.export; without a policy, onnx_policy(dtype).

    Returns:
        the path written, or (path, Report) with return_report=True.

    Raises:
        ConversionError: the exporter failed, or the graph is not typed (onnx_typing_problems), or it lost a cast of
            the plan; nothing is written then.
    """
    try:
        import onnx
        import onnxscript  # noqa: F401  (torch.onnx.export(dynamo=True) needs it)
    except ImportError as error:
        raise ImportError(f"torch_mp.onnx_export needs the onnx and onnxscript packages ({error}): pip install onnx "
                          "onnxscript (and onnxruntime to run the result)") from error

    path = _checked_path(path, external_data_threshold, opset)
    chosen = ConversionOptions.of(options, dtype=dtype, **option_fields)
    chosen.refuse_int8("torch_mp.onnx_export")
    if chosen.dtype is None:
        chosen = dataclasses.replace(chosen, dtype=torch.float16)
    if chosen.policy is None:
        chosen = dataclasses.replace(chosen, policy=onnx_policy(chosen.dtype))
    program = export(model, example_inputs, example_kwarg_inputs=example_kwarg_inputs,
                     calibration_inputs=calibration_inputs, dynamic_shapes=dynamic_shapes, options=chosen)
    report = report_of(program)
    start = time.perf_counter()
    proto = program_to_onnx(program, opset or DEFAULT_OPSET)
    problems = onnx_typing_problems(proto)
    if problems:
        raise ConversionError(f"torch.onnx.export wrote a graph that is not typed ({len(problems)} problems; nothing "
                              f"written to {path}): " + "; ".join(problems[:5])
                              + ("; ..." if len(problems) > 5 else ""))
    lost = lost_casts(program, proto)
    if lost:
        raise ConversionError(f"torch.onnx.export dropped casts of the plan (nothing written to {path}): {lost}")
    weights = initializer_bytes(proto)
    external = sum(weights.values()) > external_data_threshold
    info = {"opset": opset or DEFAULT_OPSET, "path": path, "casts": cast_count(proto),
            "initializer_bytes": {_NAMES.get(c) or onnx.TensorProto.DataType.Name(c).lower(): b
                                  for c, b in sorted(weights.items())},
            "external_data": os.path.basename(path) + ".data" if external else None,
            "seconds": time.perf_counter() - start, "notes": [BF16_CPU_NOTE] if chosen.dtype == torch.bfloat16 else []}
    report.annotate("onnx", info)
    proto.metadata_props.add(key=REPORT_KEY, value=report.to_json(indent=None))  # for report_of(path)
    _write(onnx, proto, path, external)
    return returned(path, return_report, "torch_mp.onnx_export")


def _checked_path(path: Any, threshold: Any, opset: Any) -> str:
    path = os.fspath(path)
    if not str(path).endswith(".onnx"):
        raise ValueError(f"ONNX path {path!r} must end in .onnx")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"ONNX path {path} is a folder: give a file path ending in .onnx")
    if not os.path.isdir(folder):
        raise ValueError(f"ONNX path {path}: the folder {folder} does not exist")
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 0:
        raise ValueError(f"external_data_threshold must be a number of bytes >= 0, got {threshold!r}")
    if opset is not None and (not isinstance(opset, int) or isinstance(opset, bool) or opset < 17):
        raise ValueError(f"opset must be an int >= 17 (LayerNormalization's first opset), got {opset!r}")
    return path


def program_to_onnx(program: torch.export.ExportedProgram, opset: int):
    """The program as an onnx.ModelProto, written by torch.onnx.export (dynamo=True, its optimizer on)."""
    try:
        written = torch.onnx.export(program, (), dynamo=True, opset_version=opset, optimize=True, verbose=False,
                                    external_data=False)
    except Exception as error:  # noqa: BLE001 - the exporter's failure, named
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConversionError(f"torch.onnx.export could not write the converted program: {first}") from error
    return written.model_proto


def _write(onnx, proto, path: str, external: bool) -> None:
    data = path + ".data"
    if os.path.exists(data):
        os.remove(data)  # external data appends to an existing file
    if external:
        onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(data), size_threshold=1024)
    else:
        onnx.save_model(proto, path)


def initializer_bytes(model) -> Dict[int, int]:
    """Bytes of the main graph's initializers by ONNX element type."""
    import onnx

    sizes: Dict[int, int] = collections.defaultdict(int)
    for tensor in model.graph.initializer:
        count = 1
        for d in tensor.dims:
            count *= d
        sizes[tensor.data_type] += count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return dict(sizes)


def cast_count(model) -> int:
    return sum(1 for node in model.graph.node if node.op_type == "Cast")


def _element_types(model) -> Tuple[Any, Dict[str, int]]:
    """(the model's inferred graph, element type per value name). Inference runs on a copy whose initializers are
    graph inputs of their type and shape, so that a model over 2 GiB is inferred as well (no data is serialised)."""
    import onnx

    graph = model.graph
    typed_inits = [onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in graph.initializer]
    light = onnx.helper.make_graph(list(graph.node), graph.name, list(graph.input) + typed_inits, list(graph.output),
                                   value_info=list(graph.value_info))
    copy = onnx.helper.make_model(light, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                                  functions=list(model.functions))
    inferred = onnx.shape_inference.infer_shapes(copy, strict_mode=False)
    types: Dict[str, int] = {}

    def collect(g) -> None:
        for info in list(g.input) + list(g.output) + list(g.value_info):
            if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
                types[info.name] = info.type.tensor_type.elem_type
        for t in g.initializer:
            types[t.name] = t.data_type
        for node in g.node:
            for attribute in node.attribute:
                for sub in list(attribute.graphs) + ([attribute.g] if attribute.HasField("g") else []):
                    collect(sub)

    collect(inferred.graph)
    return inferred.graph, types


def _nodes(graph):
    """Every node of a graph and of its subgraphs (If, Loop, Scan bodies)."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for sub in list(attribute.graphs) + ([attribute.g] if attribute.HasField("g") else []):
                yield from _nodes(sub)


def _describe(node) -> str:
    return f"node {node.name or node.output[0]!r} ({node.op_type})"


def onnx_typing_problems(model) -> List[str]:
    """What keeps an ONNX model (onnx.ModelProto) from being typed, one line per problem, after ONNX type inference:

    - a node whose floating operands disagree in element type where the op's schema binds them to one type
      parameter (`T`): a strongly typed runtime refuses it, onnxruntime refuses to load it;
    - an initializer stored in more than one precision: an fp32 initializer whose values, rounded to fp16 or bf16,
      are another initializer of the same shape (at least MIN_COMPARED_ELEMENTS elements, not all equal: zero
      biases and unit scales of different layers are alike by chance);
    - a Cast of an initializer left in the graph: a weight converted on every run instead of stored in its type.

    Nodes of other domains than ONNX's own (no schema to read) are not checked. An empty list: typed.
    """
    import onnx
    from onnx import defs, numpy_helper

    graph, types = _element_types(model)
    opsets = {entry.domain or "ai.onnx": entry.version for entry in model.opset_import}
    problems: List[str] = []
    for node in _nodes(graph):
        domain = node.domain or "ai.onnx"
        try:
            schema = defs.get_schema(node.op_type, opsets.get(domain, DEFAULT_OPSET), node.domain)
        except defs.SchemaError:
            continue
        params = {constraint.type_param_str for constraint in schema.type_constraints}
        bound: Dict[str, List[Tuple[str, int]]] = collections.defaultdict(list)
        formals = list(schema.inputs)
        for index, name in enumerate(node.input):
            if not name or not formals:
                continue
            formal = formals[index] if index < len(formals) else formals[-1]
            if index >= len(formals) and formal.option != defs.OpSchema.FormalParameterOption.Variadic:
                continue
            if formal.option == defs.OpSchema.FormalParameterOption.Variadic and not formal.is_homogeneous:
                continue
            element = types.get(name)
            if element in _FLOATS and formal.type_str in params:
                bound[formal.type_str].append((name, element))
        for param, operands in bound.items():
            if len({element for _, element in operands}) > 1:
                listed = ", ".join(f"{name!r} ({_NAMES[element]})" for name, element in operands)
                problems.append(f"{_describe(node)}: its operands {listed} are bound to one type {param} by the "
                                "schema but differ (a Cast is missing at a precision boundary)")
    initializers = {t.name: t for t in model.graph.initializer}
    for node in _nodes(graph):
        if node.op_type == "Cast" and node.input and node.input[0] in initializers:
            source = initializers[node.input[0]]
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            problems.append(f"{_describe(node)}: a Cast of the initializer {source.name!r} "
                            f"({_NAMES.get(source.data_type, source.data_type)} -> {_NAMES.get(to, to)}) is left in "
                            "the graph: the weight is converted on every run instead of stored in its readers' type")
    low: Dict[Tuple[int, Tuple[int, ...], bytes], str] = {}
    full: List[Tuple[str, torch.Tensor]] = []
    for tensor in model.graph.initializer:
        count = 1
        for d in tensor.dims:
            count *= d
        if tensor.data_type not in (1, 10, 16) or count < MIN_COMPARED_ELEMENTS:
            continue
        if tensor.data_location == onnx.TensorProto.EXTERNAL and not tensor.raw_data:
            continue  # not loaded: nothing to compare
        array = numpy_helper.to_array(tensor)
        if tensor.data_type == 16:
            values = torch.from_numpy(array.view("uint16").copy()).view(torch.bfloat16)
        else:
            values = torch.from_numpy(array.copy())
        if bool((values == values.flatten()[0]).all()):
            continue  # one value throughout (a zero bias, a unit scale): equal in two precisions by chance
        if tensor.data_type == 1:
            full.append((tensor.name, values))
        else:
            low[(tensor.data_type, tuple(tensor.dims), _digest(values))] = tensor.name
    for name, values in full:
        for code in (10, 16):
            twin = low.get((code, tuple(values.shape), _digest(values.to(_FLOATS[code]))))
            if twin is not None:
                problems.append(f"initializer {name!r} (float) is stored again as {twin!r} ({_NAMES[code]}): one "
                                "weight in two precisions")
    return problems


def _digest(values: torch.Tensor) -> bytes:
    bits = values.contiguous().view(torch.int16 if values.element_size() == 2 else torch.int32)
    return hashlib.blake2b(bits.numpy().tobytes(), digest_size=16).digest()


def _cast_kinds_of_program(program: torch.export.ExportedProgram) -> collections.Counter:
    """Casts between floating dtypes by (source, target) ONNX code, of values computed from the program's inputs:
    a cast of a stored tensor (parameter, buffer, constant) or of a value computed from those alone (an RNN's zero
    initial state) is folded by the exporter into an initializer of its type."""
    user_inputs = set(program.graph_signature.user_inputs)
    from_inputs = set()
    kinds: collections.Counter = collections.Counter()
    for node in program.graph.nodes:
        if (node.op == "placeholder" and node.name in user_inputs) or \
                any(arg in from_inputs for arg in node.all_input_nodes):
            from_inputs.add(node)
        if node.op != "call_function" or node.target != CAST:
            continue
        source = node.args[0]
        if not isinstance(source, torch.fx.Node) or source not in from_inputs:
            continue
        before, after = _dtype_of(source), node.kwargs.get("dtype")
        if before in _CODE and after in _CODE and before != after:
            kinds[(_CODE[before], _CODE[after])] += 1
    return kinds


def _dtype_of(node: Any) -> Optional[torch.dtype]:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value.dtype if isinstance(value, torch.Tensor) else None


def _cast_kinds_of_onnx(model) -> collections.Counter:
    graph, types = _element_types(model)
    kinds: collections.Counter = collections.Counter()
    for node in _nodes(graph):
        if node.op_type != "Cast":
            continue
        before = types.get(node.input[0])
        after = next((a.i for a in node.attribute if a.name == "to"), None)
        if before in _FLOATS and after in _FLOATS and before != after:
            kinds[(before, after)] += 1
    return kinds


def lost_casts(program: torch.export.ExportedProgram, model) -> Optional[str]:
    """What the ONNX graph lacks of the program's casts between floating dtypes (of computed values; a stored
    tensor's cast becomes an initializer of its type): fewer of some (source, target) kind than the program has. An
    optimizer folding an fp32 -> low -> fp32 rounding pair, or a Cast into its reader, shows as one. None when nothing
    was dropped."""
    wanted, found = _cast_kinds_of_program(program), _cast_kinds_of_onnx(model)
    missing = [f"{_NAMES[a]} -> {_NAMES[b]}: {count} in the program, {found.get((a, b), 0)} in the graph"
               for (a, b), count in sorted(wanted.items()) if found.get((a, b), 0) < count]
    return "; ".join(missing) or None
