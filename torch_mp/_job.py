"""The job interface and the one conversion both fronts make of a job. ConversionJob is what the accuracy fallback
(fallback.py) and the repair of non-finite outputs (finite_outputs.py) ask of a conversion, on either front:
`_torchscript.conversion.Conversion` (TorchScript; nodes named by integer ids) and
`_export.conversion.ProgramConversion` (torch.export; nodes named by FX node names) provide it. run_job is what both
fronts do with one: run it, or search the accuracy fallback; repair non-finite outputs; check the policy's rules
once."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Protocol, Sequence, Set, Tuple

import torch

from .fallback import search_fallback
from .finite_outputs import repair_non_finite
from .policy import check_rules_match

if TYPE_CHECKING:  # for the annotations only
    from .options import ConversionOptions
    from .report import Report


class ConversionJob(Protocol):
    """A prepared (captured and observed) model and the options of its conversions. `inputs` below are one run's:
    a tuple of positional inputs (Conversion) or a _inputs.CallInputs (ProgramConversion: with keyword inputs)."""

    # keep_io_dtypes and dtype: what the converted model takes and returns; policy, tolerance, metric and progress:
    # what run_job checks the rules of and searches the fallback with
    options: ConversionOptions
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


def run_job(job: ConversionJob, inputs: Any, calibration: Sequence[Any], in_place: bool = False
            ) -> Tuple[Any, Report]:
    """The converted model and its Report, as both fronts convert: the job run once, or, where the options give a
    tolerance, the accuracy fallback's search (on the calibration inputs, else the example inputs); then the nodes
    that turn outputs NaN or inf kept fp32 until the example and calibration inputs give finite outputs. The policy's
    rules are checked against the first conversion's nodes (a rule that matches none is a ValueError).
    `in_place`: the plain run may convert the job's preparation itself (convert's, which then prepares again if the
    repair needs another run)."""
    job = _RulesCheckedOnce(job)
    options = job.options
    if options.tolerance is None:
        module, report = job.run(in_place=in_place)
    else:
        module, report = search_fallback(job, list(calibration) or [inputs], options.tolerance, options.metric,
                                         options.progress)
    return repair_non_finite(job, module, report, [inputs] + list(calibration))


class _RulesCheckedOnce:
    """A job whose first conversion's nodes are checked against its policy's rules (policy.check_rules_match), made
    by whichever step converts first (the plain run, or the fallback's first try, before it runs anything): every
    conversion of a job plans the same nodes, so once is enough. The rest of the job interface is the job's."""

    def __init__(self, job: ConversionJob):
        self._job = job
        self._checked = False

    def run(self, *args, **kwargs) -> Tuple[Any, Report]:
        module, report = self._job.run(*args, **kwargs)
        if not self._checked:
            check_rules_match(self._job.options.policy, report.nodes)
            self._checked = True
        return module, report

    @property
    def keep_non_finite(self) -> Set[Any]:
        return self._job.keep_non_finite

    @keep_non_finite.setter
    def keep_non_finite(self, kept: Set[Any]) -> None:  # the repair grows the job's own set
        self._job.keep_non_finite = kept

    def __getattr__(self, name: str) -> Any:
        return getattr(self._job, name)
