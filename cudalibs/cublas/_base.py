"""What every cuBLAS / cuBLASLt wrapper shares: the status check and the library versions.

cuBLAS and cuBLASLt return the same ``cublasStatus_t``; both raise
:class:`~cudalibs.errors.CublasError` with the message of ``cublasGetStatusString``.
"""

from __future__ import annotations

from .. import _ffi
from ..errors import CublasError
from . import _lib

__all__ = ["raise_for", "version", "version_int", "lt_version", "lt_version_int"]


def _status_string(status: int) -> str:
    text = _lib.get().cublasGetStatusString(status)
    return text.decode() if text else ""


raise_for = _ffi.make_raiser(CublasError, message=_status_string)
raise_for.__doc__ = """Raise :class:`~cudalibs.errors.CublasError` for ``status`` from ``function``.
"""


def version() -> tuple[int, int, int]:
    """The version of the loaded cuBLAS library.

    Needs no GPU (``cublasGetProperty``, not ``cublasGetVersion_v2``, which takes a handle).
    Every library's ``version()`` has this form (:func:`cudalibs.cudnn.version`,
    :func:`cudalibs.nccl.version`, :func:`cudalibs.driver.nvrtc.version`).

    Returns
    -------
    tuple of int
        ``(major, minor, patch)``, for example ``(13, 1, 0)``.
    """
    return _ffi.property_version(_lib.get().cublasGetProperty, raise_for, "cublasGetProperty")


def version_int() -> int:
    """The version of the loaded cuBLAS library as one number, as ``CUBLAS_VERSION`` encodes it.

    Returns
    -------
    int
        ``major * 10000 + minor * 100 + patch`` (``130100`` for 13.1.0).
    """
    major, minor, patch = version()
    return major * 10000 + minor * 100 + patch


def lt_version() -> tuple[int, int, int]:
    """The version of the loaded cuBLASLt library.

    Returns
    -------
    tuple of int
        ``(major, minor, patch)``, for example ``(13, 1, 0)``.
    """
    return _ffi.encoded_version(lt_version_int())


def lt_version_int() -> int:
    """The version of the loaded cuBLASLt library as one number (``cublasLtGetVersion``).

    Returns
    -------
    int
        ``major * 10000 + minor * 100 + patch`` (``130100`` for 13.1.0).
    """
    return int(_lib.get_lt().cublasLtGetVersion())
