"""The job interface: what the accuracy fallback (fallback.py) and the repair of non-finite outputs
(finite_outputs.py) ask of a conversion, on either front. `_convert.Conversion` (TorchScript; nodes named by integer
ids) and `_export.conversion.ProgramConversion` (torch.export; nodes named by FX node names) provide it."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Protocol, Sequence, Set, Tuple

import torch

if TYPE_CHECKING:  # for the annotations only
    from .options import ConversionOptions
    from .report import Report


class ConversionJob(Protocol):
    """A prepared (captured and observed) model and the options of its conversions. `inputs` below are one run's:
    a tuple of positional inputs (Conversion) or a _inputs.CallInputs (ProgramConversion: with keyword inputs)."""

    options: ConversionOptions  # keep_io_dtypes and dtype: what the converted model takes and returns
    keep_non_finite: Set[Any]  # node ids (int or str) every run keeps fp32: the non-finite repair grows it

    def reference(self, inputs: Any) -> Any:
        """The fp32 model's output on `inputs` (the fallback's reference); Conversion's is the captured module's."""
        ...

    def call(self, module: Any, inputs: Any) -> Any:
        """A converted model's output on `inputs` (as the fp32 model takes them; module_inputs turns them into what
        it takes)."""
        ...

    def run(self, keep_fp32: Iterable[Any] = (), keep_node_ids: bool = False, in_place: bool = False,
            verify: bool = True, keep_float: Iterable[Any] = ()) -> Tuple[Any, Report]:
        """A conversion, the nodes in `keep_fp32` and `keep_non_finite` kept fp32 and the int8 nodes in `keep_float`
        moved to the float plan's precision: (the converted model, its Report). `keep_node_ids`: its nodes can be
        probed; `verify=False`: no verification run."""
        ...

    def module_inputs(self, inputs: Tuple[Any, ...]) -> Tuple[Any, ...]:
        """The inputs as the converted model takes them: with low-precision IO, fp32 tensors in the low dtype."""
        ...

    def probe(self, module: Any, inputs: Tuple[Any, ...], ids: Sequence[Any]) -> List[Optional[torch.Tensor]]:
        """The first output of each node named, in a conversion run with keep_node_ids, on `inputs` (as the fp32
        model takes them)."""
        ...

    def probe_reference(self, inputs: Tuple[Any, ...], ids: Sequence[Any]) -> List[Optional[torch.Tensor]]:
        """The same of the fp32 model, whose nodes have the ids they have in every conversion."""
        ...
