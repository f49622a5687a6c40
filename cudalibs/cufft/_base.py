"""What every cuFFT wrapper shares: the status check and the library version.

cuFFT has no status-string function, so :data:`MESSAGES` gives each ``cufftResult`` the
meaning its documentation states; a failing call raises :class:`~cudalibs.errors.CufftError`
with it, and the wrappers add the plan's ``repr`` as the detail.
"""

from __future__ import annotations

import ctypes

from .. import _ffi
from ..errors import CufftError
from . import _lib

__all__ = ["raise_for", "version", "version_int", "MESSAGES"]

#: ``cufftResult`` -> what it means, after the cuFFT documentation.
MESSAGES = {
    1: "the plan handle is not valid (destroyed, or never made)",
    2: "cuFFT could not allocate GPU or host memory",
    3: "the transform type is not supported",
    4: "a pointer or parameter is not valid",
    5: "a driver or internal cuFFT error",
    6: "the transform failed to execute on the GPU",
    7: "the cuFFT library failed to initialize",
    8: "the transform size (or batch, or layout) is not supported",
    9: "a data pointer is not aligned as the element type needs",
    11: "the plan was made on another GPU than the call runs on",
    13: "no work area was given (cufftSetWorkArea) to a plan that needs one",
    14: "the function is not implemented for this plan",
    16: "the operation is not supported for these parameters",
    17: "a library cuFFT depends on is missing (nvJitLink, NVRTC)",
    18: "NVRTC failed while cuFFT compiled a kernel",
    19: "nvJitLink failed while cuFFT linked a kernel",
}


def _message(status: int) -> str | None:
    return MESSAGES.get(int(status))


raise_for = _ffi.make_raiser(CufftError, message=_message)
raise_for.__doc__ = """Raise :class:`~cudalibs.errors.CufftError` for ``status`` from ``function``.
"""


def version() -> tuple[int, int, int]:
    """The version of the loaded cuFFT library.

    Needs no GPU (``cufftGetProperty``).  cuFFT's major version runs one below CUDA's: 12 in
    the CUDA 13 wheels, 11 in the CUDA 12 ones.

    Returns
    -------
    tuple of int
        ``(major, minor, patch)``, for example ``(12, 0, 0)``.
    """
    return _ffi.property_version(_lib.get().cufftGetProperty, raise_for, "cufftGetProperty")


def version_int() -> int:
    """The version of the loaded cuFFT library as one number (``cufftGetVersion``), as
    ``CUFFT_VERSION`` encodes it.

    Returns
    -------
    int
        ``major * 1000 + minor * 100 + patch`` (``12000`` for 12.0.0).
    """
    value = ctypes.c_int()
    st = _lib.get().cufftGetVersion(ctypes.byref(value))
    if st:
        raise_for(st, "cufftGetVersion")
    return value.value
