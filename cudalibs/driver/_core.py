"""Shared plumbing of the driver wrappers: the bound library, status checks, cuInit.

Kept apart from ``_lib.py`` (which holds only types and prototypes) so that every wrapper
module raises the same :class:`~cudalibs.errors.CudaError`, with the driver's own name and
description of the status.
"""

from __future__ import annotations

import ctypes
import threading

from .._ffi import make_raiser, register_context_setter
from ..errors import CudaError, LibraryNotFoundError
from . import _lib

__all__ = ["lib", "raise_for", "init", "driver_version", "driver_version_int", "is_available",
           "ready", "unavailable_reason"]


def lib():
    """The bound driver library (loads libcuda on first use)."""
    return _lib.get()


def _message(status: int) -> str | None:
    text = ctypes.c_char_p()
    if _lib.get().cuGetErrorString(status, ctypes.byref(text)) == 0 and text.value:
        return text.value.decode()
    return None


raise_for = make_raiser(CudaError, message=_message)

_init_lock = threading.Lock()
_init_done = False


def init():
    """Run ``cuInit(0)`` once per process and return the bound library.

    Raises
    ------
    LibraryNotFoundError
        No NVIDIA driver (libcuda) could be loaded.
    CudaError
        The driver failed to initialise (``CUDA_ERROR_NO_DEVICE`` on a machine without a GPU,
        ``CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE``, ...).
    """
    global _init_done
    L = _lib.get()
    if _init_done:
        return L
    with _init_lock:
        if not _init_done:
            st = L.cuInit(0)
            if st:
                raise_for(st, "cuInit")
            # Every Resource whose release needs its context current goes through this.
            register_context_setter(L.cuCtxSetCurrent)
            _init_done = True
    return L


def driver_version() -> tuple[int, int, int]:
    """The CUDA version the installed driver supports.

    Needs only libcuda, not a GPU.

    Returns
    -------
    tuple of int
        ``(major, minor, patch)`` like every library's ``version()``, for example
        ``(13, 0, 0)``.  ``cuDriverGetVersion`` reports no patch level, so it is always 0;
        :func:`driver_version_int` gives the driver's own integer.
    """
    v = driver_version_int()
    return v // 1000, (v % 1000) // 10, 0


def driver_version_int() -> int:
    """The CUDA version the installed driver supports, as ``cuDriverGetVersion`` reports it
    (``1000 * major + 10 * minor``, for example 13000)."""
    v = ctypes.c_int()
    st = _lib.get().cuDriverGetVersion(ctypes.byref(v))
    if st:
        raise_for(st, "cuDriverGetVersion")
    return v.value


def unavailable_reason() -> str | None:
    """Why no GPU can be used here (a one-line reason), or ``None`` when one can."""
    try:
        L = init()
    except (LibraryNotFoundError, CudaError) as exc:
        first = str(exc).splitlines()[0]
        if isinstance(exc, LibraryNotFoundError):
            return f"no NVIDIA driver ({first})"
        return f"the NVIDIA driver cannot start ({first})"
    n = ctypes.c_int()
    if L.cuDeviceGetCount(ctypes.byref(n)) or n.value == 0:
        return "the NVIDIA driver is present but no GPU is usable"
    return None


def is_available() -> bool:
    """Whether a driver is installed and at least one GPU is usable."""
    return unavailable_reason() is None


def ready(status: int, function: str) -> bool:
    """Turn a query status into a bool: done (``CUDA_SUCCESS``) or pending
    (``CUDA_ERROR_NOT_READY``); anything else raises."""
    if status == 0:
        return True
    if status == 600:  # CUDA_ERROR_NOT_READY
        return False
    raise_for(status, function)
