"""The errors every front raises, in a leaf module (it imports nothing of torch_mp but the extension): torch_mp.convert,
torch_mp.export, the accuracy fallback and the repair of non-finite outputs all raise these two."""
from __future__ import annotations

from . import _C


class ConversionError(RuntimeError):
    """The conversion itself failed. The user's model is untouched."""


ModelRunError = _C.ModelRunError  # a ValueError: the model itself failed on the example or calibration inputs
