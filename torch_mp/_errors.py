"""The errors every front raises, in a leaf module (it imports nothing of torch_mp but the extension): torch_mp.convert,
torch_mp.export, the accuracy fallback and the repair of non-finite outputs all raise these two; and the warning of an
int8 conversion that cannot be as good as asked."""
from __future__ import annotations

from . import _C


class ConversionError(RuntimeError):
    """The conversion itself failed. The user's model is untouched."""


ModelRunError = _C.ModelRunError  # a ValueError: the model itself failed on the example or calibration inputs


class Int8Warning(UserWarning):
    """An int8 conversion that cannot be as good as asked: ranges from one batch, no node int8, a package computing
    planned int8 kernels in float."""
