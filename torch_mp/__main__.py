"""Command line of torch_mp.

    python -m torch_mp demo [--dtype bf16|fp16|int8] [--casts]   convert the built-in ResNet-50 IBN-a, print its report
    python -m torch_mp convert IN.pt -o OUT.pt (--input-shape 1,3,224,224 [--input-dtype int64] ... | --inputs FILE)
                       [--device cpu|cuda] [--dtype fp16|bf16|int8] [--report report.json] [--exclude GLOB ...]
                       [--calib FILE] [--tolerance X] [--low-precision-io] [--svg graph.svg] [--kernels portable|fused]
    python -m torch_mp export IN.pt2 -o OUT.pt2 [the options of convert but --svg and --kernels; the inputs default
                       to the program's own]                the same plan on a program saved by torch.export.save
    python -m torch_mp aoti IN.pt2 -o PACKAGE.pt2 ...       the same, then compiled into an AOTInductor package
    python -m torch_mp onnx IN.pt2 -o OUT.onnx [--opset 20] ...   the same plan written as a typed ONNX graph
    python -m torch_mp report OUT.pt [--svg graph.svg] [--casts]
                                                           summarise a converted file (and draw it)
    python -m torch_mp policy [--target cuda_fp16]          print a default op policy (docs/OP_POLICY.md)

--device is the device planned for (default cpu): with cuda the model runs on the GPU where there is one, and is
planned for CUDA's kernels on the CPU where there is none. --dtype defaults to the device's choice (fp16 on CUDA; on a
CPU the one it has fast kernels for); int8 (export and aoti, on a CPU) runs int8 where the int8 planner finds it pays.
The report printed is the summary and a table by op; --casts adds one line per
inserted cast (the JSON report always has them). Exit status: 0 done; 1 the conversion failed, or the model (or
program) raised on the given inputs (their shapes, dtypes or devices do not fit it); 2 bad arguments or input files,
inputs of another number than forward takes among them, checked before any work (output folders included).
"""
import argparse
import contextlib
import logging
import os
import shutil
import sys
import time
import zipfile
from typing import Any, Dict, NamedTuple, Tuple

import torch

import torch_mp
from torch_mp.models import resnet50_ibn_a

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "int8": torch.int8}
FLOAT_DTYPES = {name: dtype for name, dtype in DTYPES.items() if dtype != torch.int8}
CASTS_HELP = "also list every inserted cast with the bytes it moves per inference"


class CliError(Exception):
    """Bad arguments or input files: printed as `error: ...`, exit status 2."""


def demo(args: argparse.Namespace) -> int:
    torch.manual_seed(0)
    model = resnet50_ibn_a().eval()
    x = torch.randn(args.batch, 3, args.size, args.size)
    if args.dtype == "int8":
        return demo_int8(model, x)
    dtype = DTYPES[args.dtype]
    start = time.perf_counter()
    converted = torch_mp.convert(model, (x,), dtype)
    report = torch_mp.report_of(converted)
    elapsed = time.perf_counter() - start
    print_report(report, args.casts)
    with torch.no_grad():
        reference = model(x)
        result = converted(x)
    cosine = torch.nn.functional.cosine_similarity(reference.flatten(), result.float().flatten(), dim=0).item()
    agree = (reference.argmax(1) == result.argmax(1)).float().mean().item()
    print(f"\nResNet-50 IBN-a, {args.dtype}, input {tuple(x.shape)}: converted in {elapsed:.2f} s")
    print(f"output dtype {result.dtype} (fp32 model: {reference.dtype}); cosine vs fp32 {cosine:.6f}; "
          f"top-1 agreement {agree * 100:.1f}%")
    slow = torch_mp.OpPolicy.default(torch_mp.target_for(torch.device("cpu"), dtype)).slow_kernels
    if slow is not None:
        print(f"\nThis CPU has no fast {args.dtype} kernels ({slow}), so the plan above keeps the heavy ops fp32. "
              "int8 pays on every x86 CPU:\n")
        demo_int8(model, x)
    return 0


def demo_int8(model: torch.nn.Module, x: torch.Tensor) -> int:
    """The demo's int8 part: the int8 plan (torch_mp.export, dtype=torch.int8) beside fp32, both compiled by
    torch.compile with freezing (how Inductor lowers the int8 nodes to oneDNN), timed in interleaved rounds."""
    import torch._inductor.config as inductor_config  # noqa: PLC0415  (imports Inductor only for this demo)

    calibration = [(torch.randn_like(x),) for _ in range(4)]
    start = time.perf_counter()
    program = torch_mp.export(model, (x,), torch.int8, calibration_inputs=calibration)
    report = torch_mp.report_of(program)
    elapsed = time.perf_counter() - start
    print_report(report, False)
    with torch.no_grad(), inductor_config.patch(freezing=True):
        compiled = {"fp32": torch.compile(model), "int8": torch.compile(program.module())}
        outputs = {name: module(x) for name, module in compiled.items()}  # compiles
        seconds = {name: [] for name in compiled}
        for _ in range(5):
            for name, module in compiled.items():
                begin = time.perf_counter()
                module(x)
                seconds[name].append(time.perf_counter() - begin)
    reference, result = outputs["fp32"], outputs["int8"]
    cosine = torch.nn.functional.cosine_similarity(reference.flatten(), result.flatten(), dim=0).item()
    agree = (reference.argmax(1) == result.argmax(1)).float().mean().item()
    fp32, int8 = (sorted(seconds[name])[len(seconds[name]) // 2] for name in ("fp32", "int8"))
    print(f"\nResNet-50 IBN-a, int8, input {tuple(x.shape)}: converted in {elapsed:.2f} s; compiled with freezing "
          f"(torch.compile): fp32 {fp32 * 1e3:.1f} ms, int8 {int8 * 1e3:.1f} ms ({fp32 / int8:.2f}x fp32, median "
          f"of 5 interleaved rounds, {torch.get_num_threads()} threads)")
    print(f"cosine vs fp32 {cosine:.6f}; top-1 agreement {agree * 100:.1f}% (random weights: a trained model's "
          "agreement is the measure; benchmarks/results/INT8_CPU.md)")
    return 0


def print_report(report: torch_mp.Report, casts: bool) -> None:
    print(report)
    if casts:
        print("\n" + report.cast_table())


def load_torchscript(path: str, device: torch.device = torch.device("cpu")) -> torch.jit.ScriptModule:
    if os.path.isfile(path) and not is_torchscript_file(path) and zipfile.is_zipfile(path):
        raise CliError(f"{path} is not a loadable TorchScript file (a zip archive, but not one torch.jit.save wrote)")
    try:
        return torch_mp.load(path, device, cuda_graphs=False)
    except (FileNotFoundError, ValueError) as error:
        raise CliError(str(error))


def parse_shape(text: str):
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must be comma-separated integers like 1,3,224,224, got {text!r}")
    if not shape or any(size < 0 for size in shape):
        raise argparse.ArgumentTypeError(f"shape must be non-negative integers, got {text!r}")
    return shape


def load_inputs(path: str, what: str):
    """What torch.save wrote to `path`; user errors for a missing or unreadable file."""
    if not os.path.isfile(path):
        raise CliError(f"{what} file {path} does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any load failure means the file is not usable
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CliError(f"{what} file {path} is not readable by torch.load (corrupt, truncated or another format): "
                       f"{first}")


def load_calibration(path: str) -> list:
    batches = load_inputs(path, "--calib")
    if not isinstance(batches, list) or not batches:
        raise CliError(f"--calib file {path} must hold a non-empty list of inputs (each a tensor or a tuple of "
                       f"tensors) saved with torch.save; it holds {type(batches).__name__}"
                       + (" (empty)" if isinstance(batches, list) else ""))
    for index, item in enumerate(batches):
        if not isinstance(item, (torch.Tensor, tuple, dict)):
            raise CliError(f"--calib file {path}: item {index} is of type {type(item).__name__}; each input must be a "
                           "tensor, a tuple of tensors, or (for a program with keyword inputs) a dict of keyword "
                           "inputs or an (args, kwargs) pair")
    return batches


def parse_glob(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("a module-path glob must not be empty (like 'head' or 'layer4.*')")
    return text


def parse_tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"tolerance must be a number >= 0 like 1e-3, got {text!r}")
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"tolerance must be a finite number >= 0, got {text!r}")
    return value


def check_output_paths(args: argparse.Namespace) -> None:
    """-o, --report and --svg: each in an existing folder this process may write to, checked before any work (an
    aoti compile takes tens of seconds, and its failure to save would come after)."""
    for option in ("output", "report", "svg"):
        path = getattr(args, option, None)
        if not path:
            continue
        flag = "-o" if option == "output" else f"--{option}"
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise CliError(f"{flag} {path} is a folder: give a file path")
        if not os.path.isdir(folder):
            raise CliError(f"{flag} {path}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise CliError(f"{flag} {path}: the folder {folder} is not writable")


def require_graphviz() -> None:
    """--svg needs Graphviz's `dot`: checked before converting, not after."""
    if shutil.which("dot") is None:
        raise CliError("--svg needs Graphviz's `dot` program, which is not on PATH: install Graphviz "
                       "(apt-get install graphviz; brew install graphviz; conda install graphviz)")


def write_svg(report, path: str) -> None:
    from torch_mp import visualize

    try:
        visualize.render_svg(report, path)
    except RuntimeError as error:  # no Graphviz, or dot failed
        raise CliError(str(error))
    print(f"wrote {path}")


def check_exclusions(patterns, scopes) -> None:
    """A glob that matches no module of the model is a typo: refuse it before converting rather than silently exclude
    nothing (the conversion refuses one that matches no node, which is all it can say of a frozen module, whose
    module paths are known from its nodes only: torch_mp.module_paths gives none)."""
    scopes = sorted(set(scopes))
    for pattern in patterns:
        only_this = torch_mp.OpPolicy().exclude(pattern)
        if not any(only_this.excludes("", scope) for scope in scopes):
            examples = ", ".join(scopes[:6]) + (", ..." if len(scopes) > 6 else "")
            raise CliError(f"--exclude {pattern!r} matches no module of the model (module paths: {examples or 'none'})")


def print_fallback(report: torch_mp.Report) -> None:
    summary = report.data["fallback"]
    kept, kept_float = summary["kept_fp32"], summary["kept_float"]
    print(f"accuracy fallback (tolerance {summary['tolerance']:.3g}): error {summary['error_before']:.3g} -> "
          f"{summary['error_after']:.3g}, {len(kept)} nodes kept in fp32, {len(kept_float)} moved from int8 to low "
          f"float, {summary['conversions']} conversions, {summary['seconds']:.1f} s")
    described = {n["id"]: n for n in report.nodes}
    for label, nodes in (("kept in fp32", kept), ("moved from int8 to low float", kept_float)):
        if nodes:
            print(f"  {label}: " + ", ".join(f"{described[n]['op']} ({described[n]['scope'] or '<top>'})"
                                               for n in nodes))


def example_inputs(args: argparse.Namespace, default=None):
    if args.inputs:
        example = load_inputs(args.inputs, "--inputs")
        if isinstance(example, dict):
            raise CliError(f"--inputs file {args.inputs} holds a dict (keyword inputs): convert takes positional "
                           "inputs, a tensor or a tuple")
        return example if isinstance(example, tuple) else (example,)
    if args.input_shape:
        return tuple(torch_mp.InputSpec(shape, getattr(torch, args.input_dtype)) for shape in args.input_shape)
    if default is not None:
        return default
    raise CliError("give the example inputs: --input-shape 1,3,224,224 (repeatable) or --inputs FILE.pt")


def run_device(args: argparse.Namespace) -> torch.device:
    """Where the model runs: the planned-for device, or the CPU when that is a GPU this machine lacks."""
    return torch.device("cuda" if args.device == "cuda" and torch.cuda.is_available() else "cpu")


def on_device(inputs, device: torch.device):
    return tuple(x.to(device) if isinstance(x, torch.Tensor) else
                 x._replace(device=device) if isinstance(x, torch_mp.InputSpec) else x for x in inputs)


def conversion_options(args: argparse.Namespace, model) -> torch_mp.ConversionOptions:
    """The options convert, export and aoti share. A glob of --exclude that matches no module path known before
    converting is refused now (a frozen module's are known only from the report: check_exclusions after)."""
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype] if args.dtype else torch_mp.device_dtype(device)
    policy = None
    if device.type != run_device(args).type or args.exclude:  # planned for a GPU this machine lacks, or excluding
        policy = torch_mp.OpPolicy.default(torch_mp.target_for(device, dtype))
    if args.exclude:
        paths = torch_mp.module_paths(model)
        if paths:
            check_exclusions(args.exclude, paths)
        policy = policy.exclude(*args.exclude)
    return torch_mp.ConversionOptions(dtype=dtype, policy=policy, tolerance=args.tolerance,
                                      keep_io_dtypes=not args.low_precision_io)


def calibration(args: argparse.Namespace, keywords: bool = False):
    """The --calib inputs; for a program with keyword inputs (`keywords`) as torch_mp.export takes them then: dicts
    of keyword inputs or (args, kwargs) pairs, as saved."""
    if not args.calib:
        return None
    if keywords:
        return load_calibration(args.calib)
    return [on_device(b if isinstance(b, tuple) else (b,), run_device(args)) for b in load_calibration(args.calib)]


def finish(args: argparse.Namespace, report: torch_mp.Report) -> None:
    """What convert, export and aoti print and write once the model is converted and saved."""
    if args.report:
        with open(args.report, "w") as f:
            f.write(report.to_json())
    print(report.summary())
    if "fallback" in report.data:
        print_fallback(report)


def convert(args: argparse.Namespace) -> int:
    check_output_paths(args)
    model = load_torchscript(args.input, device=run_device(args))
    example = on_device(example_inputs(args), run_device(args))
    if args.svg:
        require_graphviz()
    model.eval()
    options = conversion_options(args, model)
    converted = torch_mp.convert(model, example, calibration_inputs=calibration(args), options=options,
                                 kernels=args.kernels)
    report = torch_mp.report_of(converted)
    torch_mp.save(converted, args.output)
    finish(args, report)
    print(f"saved {args.output}")
    if args.svg:
        write_svg(report, args.svg)
    return 0


def is_torchscript_file(path: str) -> bool:
    """Whether `path` is a zip archive as torch.jit.save writes it: one folder holding constants.pkl and code/
    (torch.export.save's .pt2 holds neither)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [name.partition("/")[2] for name in archive.namelist()]
    except (zipfile.BadZipFile, OSError):
        return False
    return "constants.pkl" in names and any(name.startswith("code/") for name in names)


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def quiet_export_logs():
    """torch.export.load logs a traceback (about 20 lines) before it raises on a file it cannot read, and its error
    refers to that log: the records are kept (yielded) instead of printed, so that the error line can say it all."""
    collect = _Collect()
    loggers = [logging.getLogger(name) for name in ("torch.export", "torch._export")]
    saved = [(logger.handlers, logger.propagate) for logger in loggers]
    for logger in loggers:  # torch gives torch.export a stderr handler of its own
        logger.handlers, logger.propagate = [collect], False
    try:
        yield collect.records
    finally:
        for logger, (handlers, propagate) in zip(loggers, saved):
            logger.handlers, logger.propagate = handlers, propagate


def load_program(path: str) -> torch.export.ExportedProgram:
    if not os.path.isfile(path):
        raise CliError(f"{path} does not exist")
    if is_torchscript_file(path):
        raise CliError(f"{path} is a TorchScript file (saved by torch.jit.save), not a program saved by "
                       "torch.export.save: convert it with `python -m torch_mp convert`")
    with quiet_export_logs() as records:
        try:
            return torch.export.load(path)
        except Exception as error:  # noqa: BLE001 - any load failure means the file is not usable
            logged = [r.exc_info[1] for r in records if r.exc_info and r.exc_info[1] is not None]
            cause = logged[-1] if logged else error  # the logged error is the one torch's message points to
            first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
            raise CliError(f"{path} is not a program saved by torch.export.save (corrupt, truncated or another "
                           f"format): {first}")


class ProgramInputs(NamedTuple):
    """One call of a program: its positional and keyword inputs."""
    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]


def program_example(program: torch.export.ExportedProgram, args: argparse.Namespace) -> ProgramInputs:
    """A program's example inputs, positional and keyword: those saved in it, unless --inputs or --input-shape give
    others (an --inputs file may hold a dict of keyword inputs, or an (args, kwargs) pair)."""
    if args.inputs:
        example = load_inputs(args.inputs, "--inputs")
        if isinstance(example, dict):
            return ProgramInputs((), example)
        if isinstance(example, tuple) and len(example) == 2 and isinstance(example[0], tuple) \
                and isinstance(example[1], dict):
            return ProgramInputs(*example)
        return ProgramInputs(example if isinstance(example, tuple) else (example,), {})
    if args.input_shape or program.example_inputs is None:
        return ProgramInputs(example_inputs(args), {})
    saved_args, saved_kwargs = program.example_inputs
    return ProgramInputs(saved_args, saved_kwargs)


def convert_program(args: argparse.Namespace, conversion=torch_mp.export, **arguments):
    """export and aoti: the saved program converted by `conversion` (torch_mp.export, or aoti_compile with its
    `arguments`), on the CPU: torch.export.load gives CPU tensors. What `conversion` returns (torch_mp.report_of
    gives its Report)."""
    if args.device == "cuda" and torch.cuda.is_available():
        raise CliError("export and aoti convert on the CPU (a saved program loads there); --device cuda on a machine "
                       "with a GPU: convert with torch_mp.export in Python, on the GPU")
    program = load_program(args.input)
    example = program_example(program, args)
    return conversion(program, example.args, example_kwarg_inputs=example.kwargs or None,
                   calibration_inputs=calibration(args, keywords=bool(example.kwargs)),
                   options=conversion_options(args, program), **arguments)


def export(args: argparse.Namespace) -> int:
    check_output_paths(args)
    converted = convert_program(args)
    torch.export.save(converted, args.output)
    finish(args, torch_mp.report_of(converted))
    print(f"saved {args.output}")
    return 0


def aoti(args: argparse.Namespace) -> int:
    if not args.output.endswith(".pt2"):
        raise CliError(f"-o {args.output} must end in .pt2: an AOTInductor package's name ends in .pt2")
    check_output_paths(args)
    report = torch_mp.report_of(convert_program(args, torch_mp.aoti_compile, package_path=args.output))
    finish(args, report)
    print(f"compiled in {report.data['aoti_seconds']:.1f} s; saved {args.output} (loads with "
          "torch._inductor.aoti_load_package, or torch::inductor::AOTIModelPackageLoader in C++)")
    return 0


def onnx(args: argparse.Namespace) -> int:
    """The saved program converted and written as ONNX (torch_mp.onnx_export), planned for ONNX runtimes
    (torch_mp.onnx_policy) in fp16 unless --dtype says otherwise."""
    if not args.output.endswith(".onnx"):
        raise CliError(f"-o {args.output} must end in .onnx")
    check_output_paths(args)
    if args.device != "cpu":
        raise CliError("onnx plans for ONNX runtimes (every heavy op low, norms and softmax fp32), not for a device: "
                       "leave out --device")
    program = load_program(args.input)
    example = program_example(program, args)
    dtype = DTYPES[args.dtype] if args.dtype else torch.float16
    policy = torch_mp.onnx_policy(dtype)
    if args.exclude:
        check_exclusions(args.exclude, torch_mp.module_paths(program))
        policy = policy.exclude(*args.exclude)
    options = torch_mp.ConversionOptions(dtype=dtype, policy=policy, tolerance=args.tolerance,
                                         keep_io_dtypes=not args.low_precision_io)
    written = torch_mp.onnx_export(program, example.args, args.output, opset=args.opset,
                                   example_kwarg_inputs=example.kwargs or None,
                                   calibration_inputs=calibration(args, keywords=bool(example.kwargs)), options=options)
    converted_report = torch_mp.report_of(written)
    finish(args, converted_report)
    external = converted_report.data["onnx"]["external_data"]
    print(f"saved {args.output}" + (f" (weights in {external} beside it)" if external else ""))
    return 0


def report(args: argparse.Namespace) -> int:
    check_output_paths(args)
    model = load_torchscript(args.model)
    stored = torch_mp.report_of(args.model)
    if stored is not None:
        if args.svg:
            require_graphviz()
        print_report(stored, args.casts)
        if args.svg:
            write_svg(stored, args.svg)
        return 0
    if args.svg:
        raise CliError(f"{args.model} holds no report (it was not saved by `python -m torch_mp convert`); "
                       "--svg needs one: convert it with the CLI, or use torch_mp.visualize with the Report")
    casts = model.graph.findAllNodes("aten::to")
    dtypes = {}
    for node in model.graph.findAllNodes("prim::Constant"):
        value = node.output().toIValue()
        if isinstance(value, torch.Tensor):
            dtypes[str(value.dtype)] = dtypes.get(str(value.dtype), 0) + value.numel() * value.element_size()
    weights = ", ".join(f"{k} {v}" for k, v in sorted(dtypes.items())) or \
        "none (the file holds no constant weights: not frozen? convert it with `python -m torch_mp convert`)"
    print(f"{args.model}: not saved by the torch_mp CLI (no embedded report); {len(casts)} aten::to nodes; "
          f"weight bytes by dtype: {weights}")
    return 0


def policy_table(args: argparse.Namespace) -> int:
    def default(target):  # as on a device with fast low-precision kernels, so the table is the same on every machine
        return torch_mp.OpPolicy.default(target, cpu_features="all", cuda_capability=(9, 0))

    policy = default(args.target)
    entries = policy.entries()
    print(f"# Default op policy `{args.target}`\n")
    print("Generated by `python -m torch_mp policy`; ops in no list are fp32. The other default targets differ from "
          "it in these entries only:\n")
    for other in torch_mp.TARGETS:
        if other != args.target:
            changed = [f"`{op}` {entry.category}" for op, entry in default(other).entries().items()
                       if entries.get(op) != entry]
            print(f"- {other}: {', '.join(changed) or 'none'}")
    print()
    print(policy.to_markdown())
    return 0


def add_conversion_options(parser: argparse.ArgumentParser, inputs_default: str = "") -> None:
    default = f" (default: {inputs_default})" if inputs_default else ""
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="the device planned for (default cpu); cuda without a GPU plans for CUDA on the CPU")
    parser.add_argument("--dtype", choices=DTYPES, default=None,
                        help="the low dtype (default: the device's choice, fp16 on CUDA, on a CPU the one it has fast "
                             "kernels for)")
    parser.add_argument("--input-shape", type=parse_shape, action="append",
                        help="shape of one forward input, filled with random normals (repeat per input)" + default)
    parser.add_argument("--input-dtype", default="float32", choices=("float32", "float64", "int64", "int32"),
                        help="dtype of every --input-shape input (default float32; floating inputs are random "
                             "normals, integer ones zeros); for inputs of several dtypes, use --inputs")
    parser.add_argument("--inputs", help="a file written by torch.save holding the inputs (tuple or tensor)" + default)
    parser.add_argument("--report", help="also write the report as JSON here")
    parser.add_argument("--exclude", type=parse_glob, action="append", metavar="GLOB",
                        help="keep every node inside modules whose path matches GLOB in fp32 "
                             "(fnmatch, like 'head' or 'layer4.*'; repeatable)")
    parser.add_argument("--calib", metavar="FILE",
                        help="a file written by torch.save holding a list of calibration inputs (each a "
                             "tensor or a tuple of tensors): the range guard and the fallback use them")
    parser.add_argument("--tolerance", type=parse_tolerance, metavar="X",
                        help="accuracy fallback: keep the fewest nodes in fp32 so that the relative error "
                             "against the fp32 model is at most X on every --calib input (or the example inputs)")
    parser.add_argument("--low-precision-io", action="store_true",
                        help="fp32 inputs and outputs take the low dtype (default: they keep their dtypes)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_mp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="convert the built-in ResNet-50 IBN-a and print the report")
    demo_parser.add_argument("--dtype", choices=DTYPES, default="bf16",
                             help="bf16 (default) or fp16: torch_mp.convert; int8: torch_mp.export's int8 plan, "
                                  "compiled beside fp32 (shown after the float plan too where the CPU has no fast "
                                  "bf16 / fp16 kernels)")
    demo_parser.add_argument("--batch", type=int, default=2)
    demo_parser.add_argument("--size", type=int, default=128)
    demo_parser.add_argument("--casts", action="store_true", help=CASTS_HELP)
    convert_parser = commands.add_parser("convert", help="convert a saved TorchScript model")
    convert_parser.add_argument("input", help="saved TorchScript model (scripted in eval mode, or frozen)")
    convert_parser.add_argument("-o", "--output", required=True, help="where to save the converted model")
    add_conversion_options(convert_parser)
    convert_parser.add_argument("--svg", metavar="FILE", help="draw the converted graph as SVG (needs Graphviz)")
    convert_parser.add_argument("--kernels", choices=("portable", "fused"), default="portable",
                                help="fused: elementwise chains and instance / group norms become torch_mp::"
                                     "fused_pointwise and fused_channel_norm calls; loading the output then needs "
                                     "the torch_mp library (default: portable, aten ops only)")
    export_parser = commands.add_parser("export", help="convert a program saved by torch.export.save")
    export_parser.add_argument("input", help="a program saved by torch.export.save (.pt2)")
    export_parser.add_argument("-o", "--output", required=True, help="where to save the converted program (.pt2)")
    add_conversion_options(export_parser, inputs_default="the program's own example inputs")
    aoti_parser = commands.add_parser("aoti", help="convert a saved program and compile it with AOTInductor")
    aoti_parser.add_argument("input", help="a program saved by torch.export.save (.pt2)")
    aoti_parser.add_argument("-o", "--output", required=True, help="where to write the AOTInductor package (.pt2)")
    add_conversion_options(aoti_parser, inputs_default="the program's own example inputs")
    onnx_parser = commands.add_parser("onnx", help="convert a saved program and write it as a typed ONNX graph")
    onnx_parser.add_argument("input", help="a program saved by torch.export.save (.pt2)")
    onnx_parser.add_argument("-o", "--output", required=True, help="where to write the ONNX file (.onnx)")
    add_conversion_options(onnx_parser, inputs_default="the program's own example inputs")
    onnx_parser.add_argument("--opset", type=int, default=None, help="the ONNX opset (default 20)")
    report_parser = commands.add_parser("report", help="summarise a converted model")
    report_parser.add_argument("model")
    report_parser.add_argument("--svg", metavar="FILE", help="draw the converted graph as SVG (needs Graphviz)")
    report_parser.add_argument("--casts", action="store_true", help=CASTS_HELP)
    policy_parser = commands.add_parser("policy", help="print a default op policy as a markdown table")
    policy_parser.add_argument("--target", choices=torch_mp.TARGETS, default="cuda_fp16")
    args = parser.parse_args(argv)
    handlers = {"demo": demo, "convert": convert, "export": export, "aoti": aoti, "onnx": onnx, "report": report,
                "policy": policy_table}
    try:
        return handlers[args.command](args)
    except (torch_mp.ConversionError, torch_mp.ModelRunError) as error:  # before ValueError: ModelRunError is one
        print(f"python -m torch_mp {args.command}: error: {error}", file=sys.stderr)
        return 1
    except (CliError, ValueError, TypeError) as error:
        print(f"python -m torch_mp {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
