"""What a front is given, checked and put in one form, in a leaf module (it imports nothing of torch_mp): example and
calibration inputs (tensors, nested containers, InputSpec) normalised to tuples, the device they are on, the
tensors of a nested value, the inputs as a converted model takes them, and the refusal of an active autocast region.
torch_mp.convert, torch_mp.export, the accuracy fallback and the repair of non-finite outputs share these."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, NamedTuple, Optional, Sequence, Tuple, Union

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


def module_inputs(options: ConversionOptions, inputs: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """The inputs as a converted model takes them: with keep_io_dtypes=False, fp32 tensors in the low dtype."""
    if options.keep_io_dtypes:
        return inputs
    return tuple(x.to(options.dtype) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x
                 for x in inputs)


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
