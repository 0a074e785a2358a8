"""The conversion report: per node the precision and the rule that chose it, casts with bytes, weight sizes."""
from __future__ import annotations

import dataclasses
import json
import os
import warnings
import zipfile
from collections import Counter
from typing import Any, Dict, Optional, Union

import torch

from . import _C
from ._torchscript.jit_calls import REPORT_FILE, user_stacklevel


USER_RULE_KINDS = ("exclusion", "callable", "fallback", "range guard")


@dataclasses.dataclass(frozen=True)
class MutableBuffer:
    """A buffer the converted model writes (a KV cache, a step counter): the report's `mutable_buffers[]` entry."""
    name: str
    dtype: str  # as the converted model stores it
    bytes: int
    fp32_bytes: int  # as the model or program given stores it

    @classmethod
    def of(cls, name: str, tensor: torch.Tensor, fp32_bytes: int) -> Dict[str, Any]:
        return dataclasses.asdict(cls(name, str(tensor.dtype).replace("torch.", ""), tensor.nbytes, fp32_bytes))


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e6:.2f} MB" if nbytes >= 1e5 else f"{nbytes / 1e3:.1f} KB" if nbytes >= 100 else f"{nbytes} B"


class Report:
    """A conversion's report (schema: see README, "Report"): a view of the C++ ConversionReport, read into dicts and
    lists the first time `data` is asked for, or such a dict itself (a report read back from JSON)."""

    def __init__(self, source: Union["_C.ConversionReport", Dict[str, Any]]):
        self._bound = None if isinstance(source, dict) else source
        self._data: Optional[Dict[str, Any]] = source if isinstance(source, dict) else None
        self._annotations: Dict[str, Any] = {}

    @classmethod
    def from_json(cls, text: str) -> "Report":
        return cls(json.loads(text))

    def __reduce__(self):
        # copied and pickled as its data (the C++ report is neither): a program carrying it deep-copies
        return Report, (self.data,)

    @property
    def data(self) -> Dict[str, Any]:
        if self._data is None:
            self._data = {**self._bound.to_dict(), **self._annotations}
        return self._data

    def annotate(self, key: str, value: Any) -> None:
        """Adds what the Python front knows (how the model was captured, the fallback's search) to `data`."""
        self._annotations[key] = value
        if self._data is not None:
            self._data[key] = value

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.data, indent=indent)

    @property
    def nodes(self):
        return self.data["nodes"]

    @property
    def casts(self):
        return self.data["casts"]

    @property
    def unknown_ops(self):
        return self.data["unknown_ops"]

    @property
    def weight_ratio(self) -> float:
        before = self.data["weight_bytes_before"]
        return self.data["weight_bytes_after"] / before if before else 1.0

    @property
    def weights_kept_fp32(self):
        """The fp32 tensor weights over 64 KB the converted model holds: name, bytes, readers and the rule (with its
        rule_kind) that kept them, largest first."""
        return self.data["weights_kept_fp32"]

    @property
    def cast_bytes(self) -> int:
        return self.data["cast_bytes"]

    @property
    def reached_casts(self) -> int:
        """Casts the example inputs ran (the others sit on branches they skipped, e.g. a slow path kept in fp32)."""
        return sum(1 for cast in self.casts if cast["reached"])

    @property
    def fused_casts(self) -> int:
        """Casts the plan needed that were folded into the ops reading them (not in `casts`)."""
        return self.data["fused_casts"]

    @property
    def fused_cast_bytes(self) -> int:
        """Bytes per inference those fused casts would have moved."""
        return self.data["fused_cast_bytes"]

    @property
    def seconds(self) -> float:
        return self._bound.seconds if self._bound is not None else self.data["seconds"]

    @property
    def capture(self) -> str:
        """How the model was captured: convert's "script", "trace" or "scriptmodule" (given as one, as the load-time
        pass's graphs are), or "export"."""
        return self.data["capture"]

    @property
    def low_precision_flop_fraction(self) -> float:
        """Share of the heavy ops' multiply-add FLOPs (convolutions, matmuls, attention, RNNs) run in low
        precision, at the example inputs' sizes."""
        return self.data["low_precision_flop_fraction"]

    def low_precision_ops(self) -> Counter:
        return Counter(n["op"] for n in self.nodes if n["precision"] == "low")

    def fp32_ops(self) -> Counter:
        return Counter(n["op"] for n in self.nodes if n["precision"] == "fp32")

    def summary(self) -> str:
        d = self.data
        low = sum(1 for n in self.nodes if n["precision"] == "low")
        int8 = sum(1 for n in self.nodes if n["precision"] == "int8")
        skipped = len(self.casts) - self.reached_casts
        heavy = (f"{self.low_precision_flop_fraction * 100:.1f}% of the heavy ops' FLOPs in low precision"
                 + (" or int8" if int8 else "")
                 if any(n["flops"] for n in self.nodes) else "no heavy op with a FLOP estimate ran")
        target = (f"int8 (uint8 activations{', reduced range' if d['int8']['reduced_range'] else ''}), else "
                  f"{d['dtype']}" if "int8" in d else d["dtype"])
        lines = [
            f"torch_mp conversion to {target} (policy {d['policy']}, planner {d['planner']}, "
            f"{d['seconds'] * 1e3:.1f} ms)",
            "  nodes: " + (f"{int8} int8, " if int8 else "") + f"{low} low precision, {len(self.nodes) - low - int8} "
            f"fp32; {heavy}",
            f"  casts: {len(self.casts)} moving {d['cast_bytes'] / 1e6:.3f} MB per inference"
            f" ({d['fused_casts']} more fused into their readers, saving"
            f" {d['fused_cast_bytes'] / 1e6:.3f} MB)"
            + (f"; {skipped} on paths the example inputs did not take" if skipped else "")
            + (f"; {d['fused_pointwise']} fused pointwise kernels" if d["fused_pointwise"] else "")
            + (f"; {d['fused_normalizations']} fused norms" if d["fused_normalizations"] else ""),
            f"  weights: {d['weight_bytes_before'] / 1e6:.2f} MB -> {d['weight_bytes_after'] / 1e6:.2f} MB "
            f"({self.weight_ratio:.2f}x)"
            + f"; {d['weight_bytes_kept_fp32'] / 1e6:.2f} MB of them fp32",
        ]
        for weight in self.weights_kept_fp32[:3]:
            lines.append(f"    kept fp32: {weight['name']} ({weight['bytes'] / 1e6:.2f} MB, read by "
                         f"{', '.join(sorted(set(weight['readers'])))}): {weight['rule'] or 'no planned reader'}")
        if len(self.weights_kept_fp32) > 3:
            lines.append(f"    ... {len(self.weights_kept_fp32) - 3} more fp32 weights over 64 KB (weights_kept_fp32)")
        if d.get("mutable_buffers"):  # buffers the model writes (a KV cache)
            buffers = d["mutable_buffers"]
            lines.append(f"  mutable buffers: {_size(sum(b['fp32_bytes'] for b in buffers))} -> "
                         f"{_size(sum(b['bytes'] for b in buffers))} (counted in the weights): "
                         + ", ".join(f"{b['name']} {b['dtype']} {_size(b['bytes'])}" for b in buffers[:4])
                         + (f", ... {len(buffers) - 4} more (mutable_buffers)" if len(buffers) > 4 else ""))
        if d["column_major_matmul_weights"]:
            lines.append(f"  CPU matmul weights stored column-major: {d['column_major_matmul_weights']}")
        if d["channels_last_convolutions"] or d["fused_convolutions"]:
            lines.append(f"  CUDA convolutions: {d['channels_last_convolutions']} channels_last, "
                         f"{d['fused_convolutions']} fused with their relu (and residual add) into cuDNN calls")
        slow = [n for n in self.nodes if n["rule_kind"] == "no fast kernel"]
        if slow and d["slow_kernels"]:
            lines.append(f"  {len(slow)} heavy ops {d['slow_kernels']}")
        if self.unknown_ops:
            lines.append(f"  unknown ops kept in fp32: {', '.join(self.unknown_ops)}")
        if "fallback" in d:
            f = d["fallback"]
            moved_to_float = f", {len(f['kept_float'])} moved from int8 to low float" if f["kept_float"] else ""
            lines.append(
                f"  accuracy fallback: {len(f['kept_fp32'])} nodes kept in fp32{moved_to_float}, error "
                f"{f['error_before']:.3g} -> "
                f"{f['error_after']:.3g} (tolerance {f['tolerance']:.3g}; {f['conversions']} conversions, "
                f"{f['seconds']:.1f} s)"
            )
        kinds = Counter(n["rule_kind"] for n in self.nodes if n["rule_kind"] in USER_RULE_KINDS)
        if kinds:
            counts = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
            lines.append(f"  nodes decided by: {counts}")
        if d["unobserved_nodes"]:
            lines.append(f"  {d['unobserved_nodes']} nodes not reached by the example inputs were left as they are")
        return "\n".join(lines)

    def table(self) -> str:
        """One row per op kind and precision, with the rule that decided it."""
        groups: Counter = Counter((n["op"], n["precision"], n["rule"]) for n in self.nodes)
        width = max([len(op) for op, _, _ in groups] + [2])
        rows = [f"{'op'.ljust(width)}  count  precision  rule", "-" * (width + 40)]
        for (op, precision, rule), count in sorted(groups.items(), key=lambda item: (item[0][1], item[0][0])):
            rows.append(f"{op.ljust(width)}  {count:5d}  {precision:9s}  {rule}")
        return "\n".join(rows)

    def cast_table(self) -> str:
        """One line per inserted cast with the bytes it moves per inference (`python -m torch_mp ... --casts`)."""
        if not self.casts:
            return "casts: none"
        return "\n".join(["casts:"] + [f"  {c['value']}: {c['from']} -> {c['to']}  {c['bytes']} bytes"
                                       for c in self.casts])

    def __str__(self) -> str:
        # no cast list: a ResNet-50 has dozens of casts, most moving no bytes; the summary totals them
        return self.summary() + "\n\n" + self.table()

    def __repr__(self) -> str:
        return f"<torch_mp.Report {self.summary().splitlines()[0]}>"


# Where a conversion's result carries its Report: a ScriptModule's Python attribute, an ExportedProgram's
# graph_module.meta entry, an ONNX file's metadata_props entry; a zip that torch_mp wrote (torch_mp.save's TorchScript
# file, aoti_compile's package) holds it as the file <archive>/extra/REPORT_FILE, where torch.jit.save puts extra files.
_ATTRIBUTE = "_torch_mp_report"
REPORT_KEY = "torch_mp_report"


def report_of(result: Any) -> Optional[Report]:
    """The Report of what a torch_mp conversion returned, or None where it carries none.

        mp = torch_mp.convert(model, (x,), torch.float16)
        print(torch_mp.report_of(mp))

    `result` is one of:
      - the ScriptModule of torch_mp.convert or PreparedModel.convert (not its copy.deepcopy, nor what
        torch.jit.load reads back: save it with torch_mp.save, and ask report_of the path);
      - the ExportedProgram of torch_mp.export (copy.deepcopy keeps the report; torch.export.save does not:
        write report_of(program).to_json() beside the file);
      - a path: a file torch_mp.save or `python -m torch_mp convert` wrote, a package of torch_mp.aoti_compile, an
        .onnx file of torch_mp.onnx_export.
    FileNotFoundError for a missing file, ValueError for a file that is none of those, TypeError for anything else.
    """
    if isinstance(result, torch.jit.ScriptModule):
        return getattr(result, _ATTRIBUTE, None)
    if isinstance(result, torch.export.ExportedProgram):
        return result.graph_module.meta.get(REPORT_KEY)
    if isinstance(result, (str, os.PathLike)):
        return _stored_report(os.fspath(result))
    raise TypeError(f"torch_mp.report_of takes what a conversion returned (a ScriptModule, an ExportedProgram, or the "
                    f"path of a file torch_mp wrote), got {type(result).__name__}")


def carrying_report(result: Any, report: Report) -> Any:
    """`result` (a converted ScriptModule or ExportedProgram) carrying `report`, for report_of."""
    if isinstance(result, torch.export.ExportedProgram):
        result.graph_module.meta[REPORT_KEY] = report
    else:
        setattr(result, _ATTRIBUTE, report)
    return result


def returned(result: Any, return_report: bool, api: str) -> Any:
    """What a conversion returns: `result` (carrying its report), or where the caller still asks return_report=True,
    the (result, report) pair, with a FutureWarning that names report_of."""
    if not return_report:
        return result
    warnings.warn(f"{api}(..., return_report=True) is deprecated: {api} returns what it converted, and "
                  "torch_mp.report_of(that) gives its Report", FutureWarning, stacklevel=user_stacklevel())
    return result, report_of(result)


def _stored_report(path: str) -> Optional[Report]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist")
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            stored = [name for name in archive.namelist() if name.endswith(f"/extra/{REPORT_FILE}")]
            return Report.from_json(archive.read(stored[0]).decode("utf-8")) if stored else None
    if path.endswith(".onnx"):
        import onnx  # here: only ONNX files need it

        try:
            model = onnx.load(path, load_external_data=False)
        except Exception as error:  # noqa: BLE001 - any parse failure means the file is not usable
            raise ValueError(f"{path} is not a readable ONNX file: {error}") from error
        stored = [entry.value for entry in model.metadata_props if entry.key == REPORT_KEY]
        return Report.from_json(stored[0]) if stored else None
    raise ValueError(f"{path} is none of the files torch_mp writes (a TorchScript file, an AOTInductor package, an "
                     ".onnx file)")
