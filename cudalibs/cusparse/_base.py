"""What every cuSPARSE wrapper shares: the status check, the status texts, the version.

A failing call raises :class:`~cudalibs.errors.CusparseError` with cuSPARSE's own message
(``cusparseGetErrorString``); the wrappers add the plan's or the matrix's ``repr`` as the
detail.
"""

from __future__ import annotations

from .. import _ffi
from ..errors import CusparseError
from . import _lib

__all__ = ["raise_for", "version", "version_int", "error_name", "error_string"]


def _status(status, op: str) -> int:
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError(f"{op}: status must be an int (a cusparseStatus_t), not "
                        f"{type(status).__name__}")
    return int(status)


def error_name(status: int) -> str:
    """cuSPARSE's name of a ``cusparseStatus_t`` (``cusparseGetErrorName``), for example
    ``"CUSPARSE_STATUS_INVALID_VALUE"``; needs no GPU."""
    status = _status(status, "error_name")
    text = _lib.get().cusparseGetErrorName(status)
    return text.decode() if text else f"unknown cusparseStatus_t {int(status)}"


def error_string(status: int) -> str:
    """cuSPARSE's description of a ``cusparseStatus_t`` (``cusparseGetErrorString``); needs
    no GPU."""
    status = _status(status, "error_string")
    text = _lib.get().cusparseGetErrorString(status)
    return text.decode() if text else f"unknown cusparseStatus_t {int(status)}"


raise_for = _ffi.make_raiser(CusparseError, message=error_string)
raise_for.__doc__ = """Raise :class:`~cudalibs.errors.CusparseError` for ``status`` from
``function`` (``extra``: the detail, usually the plan's ``repr``).
"""


def version() -> tuple[int, int, int]:
    """The version of the loaded cuSPARSE library.

    Needs no GPU (``cusparseGetProperty``).  cuSPARSE's major version runs one below CUDA's:
    12 in the CUDA 13 wheels (12.6 in CUDA 13.0) and in the CUDA 12 ones.

    Returns
    -------
    tuple of int
        ``(major, minor, patch)``, for example ``(12, 6, 3)``.
    """
    return _ffi.property_version(_lib.get().cusparseGetProperty, raise_for,
                                 "cusparseGetProperty")


def version_int() -> int:
    """The version of the loaded cuSPARSE library as one number, as ``CUSPARSE_VERSION``
    encodes it: ``major * 1000 + minor * 100 + patch`` (``12603`` for 12.6.3).

    ``cusparseGetVersion`` needs a handle, hence a GPU; this reads the same numbers through
    ``cusparseGetProperty``, which needs neither.
    """
    major, minor, patch = version()
    return major * 1000 + minor * 100 + patch
