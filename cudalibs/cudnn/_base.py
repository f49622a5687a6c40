"""What every cuDNN wrapper shares: the status check and the library version.

A failing status raises :class:`~cudalibs.errors.CudnnError` with the message of
``cudnnGetErrorString`` and, as ``detail``, ``cudnnGetLastErrorString`` -- cuDNN's own account
of what was wrong with the call (which dimension, which descriptor), read right after it failed.
"""

from __future__ import annotations

import ctypes

from .. import _ffi
from ..errors import CudnnError
from . import _lib

__all__ = ["raise_for", "version", "version_tuple", "last_error_string"]

# cudnnGetLastErrorString truncates to the buffer it is given; its messages are a few lines.
_LAST_ERROR_BYTES = 4096


def _error_string(status: int) -> str:
    text = _lib.get().cudnnGetErrorString(status)
    return text.decode() if text else ""


def last_error_string() -> str:
    """cuDNN's description of the most recent failure on this thread ('' when none).

    Reading it clears it.
    """
    buf = ctypes.create_string_buffer(_LAST_ERROR_BYTES)
    _lib.get().cudnnGetLastErrorString(buf, _LAST_ERROR_BYTES)
    return buf.value.decode(errors="replace").strip()


raise_for = _ffi.make_raiser(CudnnError, message=_error_string, detail=last_error_string)
raise_for.__doc__ = """Raise :class:`~cudalibs.errors.CudnnError` for ``status`` from ``function``.

The error's ``detail`` is ``cudnnGetLastErrorString``, so call this right after the failure."""


def version() -> int:
    """The version of the loaded cuDNN library, as one number.

    Returns
    -------
    int
        ``cudnnGetVersion()``: ``major * 10000 + minor * 100 + patch`` for cuDNN 9
        (``91900`` for 9.19.0).
    """
    return int(_lib.get().cudnnGetVersion())


def version_tuple() -> tuple[int, int, int]:
    """The version of the loaded cuDNN library.

    Returns
    -------
    tuple of int
        ``(major, minor, patch)``, for example ``(9, 19, 0)``.
    """
    return _ffi.property_version(_lib.get().cudnnGetProperty, raise_for, "cudnnGetProperty")
