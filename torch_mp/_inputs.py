"""What a front is given, checked and put in one form, in a leaf module (it imports nothing of torch_mp): example and
calibration inputs (tensors, nested containers, InputSpec) normalised to tuples, keyword inputs to CallInputs, the
device they are on, the tensors of a nested value, the inputs as a converted model takes them, and the refusal of an
active autocast region. torch_mp.convert, torch_mp.export, the accuracy fallback and the repair of non-finite outputs
share these."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch.utils import _pytree as pytree

if TYPE_CHECKING:  # for the annotation only: options.py imports the policy, which a leaf module does not
    from .options import ConversionOptions


class InputSpec(NamedTuple):
    """An input given by shape and dtype instead of a tensor: it is filled with random normals (floating dtypes)
    or zeros (integer and bool dtypes) for the one observed run."""

    shape: Sequence[int]
    dtype: torch.dtype = torch.float32
    device: Union[str, torch.device] = "cpu"

    def materialize(self) -> torch.Tensor:
        if self.dtype.is_floating_point:
            return torch.randn(*self.shape, dtype=self.dtype, device=self.device)
        return torch.zeros(*self.shape, dtype=self.dtype, device=self.device)


def _normalize_inputs(example_inputs: Any) -> Tuple[Any, ...]:
    if example_inputs is None:
        return ()
    if isinstance(example_inputs, (torch.Tensor, InputSpec)):
        example_inputs = (example_inputs,)
    if isinstance(example_inputs, list):
        example_inputs = tuple(example_inputs)
    if not isinstance(example_inputs, tuple):
        raise TypeError(
            "example_inputs must be a tensor or a tuple of the forward's positional inputs, "
            f"got {type(example_inputs).__name__}"
        )
    return tuple(_materialize(item) for item in example_inputs)


def _materialize(item: Any) -> Any:
    if isinstance(item, InputSpec):
        return item.materialize()
    if isinstance(item, tuple):
        return tuple(_materialize(x) for x in item)
    if isinstance(item, list):
        return [_materialize(x) for x in item]
    if isinstance(item, dict):
        return {k: _materialize(v) for k, v in item.items()}
    return item


def _normalize_calibration(calibration_inputs: Optional[Sequence[Any]]) -> List[Tuple[Any, ...]]:
    if calibration_inputs is None:
        return []
    if isinstance(calibration_inputs, (torch.Tensor, tuple)) or not isinstance(calibration_inputs, Sequence):
        raise TypeError(
            "calibration_inputs must be a list of inputs, each a tensor or a tuple like example_inputs, "
            f"got {type(calibration_inputs).__name__}"
        )
    return [_normalize_inputs(item) for item in calibration_inputs]


@dataclass(frozen=True)
class CallInputs:
    """The inputs of one forward call with keyword inputs: torch.export's (args, kwargs)."""

    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]


def _normalize_kwargs(example_kwarg_inputs: Any) -> Dict[str, Any]:
    """example_kwarg_inputs as a dict of keyword name -> input (InputSpec materialised); {} for None."""
    if example_kwarg_inputs is None:
        return {}
    if not isinstance(example_kwarg_inputs, dict) or not all(isinstance(k, str) for k in example_kwarg_inputs):
        raise TypeError("example_kwarg_inputs must be a dict of the forward's keyword inputs (parameter name -> "
                        f"tensor, container or InputSpec), got {type(example_kwarg_inputs).__name__}")
    return {name: _materialize(value) for name, value in example_kwarg_inputs.items()}


def _normalize_calibration_calls(calibration_inputs: Optional[Sequence[Any]], keywords: Optional[Sequence[str]]
                                 ) -> List[CallInputs]:
    """Calibration inputs of a model given keyword inputs (named `keywords` in the example): each a dict of keyword
    inputs, or an (args, kwargs) pair, torch.export's form; their keywords must be the example's (a program's
    signature), unless `keywords` is None (convert binds each call to forward's parameters instead)."""
    if calibration_inputs is None:
        return []
    if isinstance(calibration_inputs, (torch.Tensor, tuple, dict)) or not isinstance(calibration_inputs, Sequence):
        raise TypeError("calibration_inputs must be a list of inputs, each (with example_kwarg_inputs) a dict of "
                        f"keyword inputs or an (args, kwargs) pair, got {type(calibration_inputs).__name__}")
    calls = []
    for index, item in enumerate(calibration_inputs):
        if isinstance(item, dict):
            args, kwargs = (), item
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict):
            args, kwargs = item
        else:
            raise TypeError(f"calibration input {index} is a {type(item).__name__}; with example_kwarg_inputs each "
                            "calibration input is a dict of keyword inputs or an (args, kwargs) pair")
        kwargs = _normalize_kwargs(kwargs)
        if keywords is not None and sorted(kwargs) != sorted(keywords):
            raise ValueError(f"calibration input {index} has the keyword inputs {sorted(kwargs)}, the example "
                             f"{sorted(keywords)}: give each call the same keywords")
        calls.append(CallInputs(_normalize_inputs(args), kwargs))
    return calls


def module_inputs(options: ConversionOptions, inputs: Union[Tuple[Any, ...], CallInputs]
                  ) -> Union[Tuple[Any, ...], CallInputs]:
    """The inputs as a converted model takes them: with keep_io_dtypes=False, fp32 tensors in the low dtype."""
    if options.keep_io_dtypes:
        return inputs

    def low(x: Any) -> Any:
        return x.to(options.dtype) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x

    if isinstance(inputs, CallInputs):
        return CallInputs(tuple(low(x) for x in inputs.args), {k: low(v) for k, v in inputs.kwargs.items()})
    return tuple(low(x) for x in inputs)


def _refuse_autocast(front: str) -> None:
    """A RuntimeError naming `front` (torch_mp.convert, torch_mp.export) where it is called under torch.autocast."""
    for device_type in ("cpu", "cuda"):
        if torch.is_autocast_enabled(device_type):
            raise RuntimeError(
                f"{front} was called inside an active torch.autocast('{device_type}') region; "
                "autocast would change the fp32 reference the conversion is planned from. Convert outside it."
            )


def _device_of(inputs: Tuple[Any, ...], model: Any) -> torch.device:
    for tensor in tensors_of(inputs):
        return tensor.device
    if isinstance(model, torch.nn.Module):
        for parameter in model.parameters():
            return parameter.device
    return torch.device("cpu")


def tensors_of(value: Any) -> List[torch.Tensor]:
    """The tensors of a (nested) value, in pytree order."""
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]
