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

__all__ = ["raise_for", "version", "version_int", "version_tuple", "last_error_string",
           "check_versions", "env"]

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


def version() -> tuple[int, int, int]:
    """The version of the loaded cuDNN library.

    Returns
    -------
    tuple of int
        ``(major, minor, patch)``, for example ``(9, 19, 0)``; compare it with a tuple
        (``version() >= (9, 11, 0)``).
    """
    return _ffi.property_version(_lib.get().cudnnGetProperty, raise_for, "cudnnGetProperty")


def version_int() -> int:
    """The version of the loaded cuDNN library as one number (``cudnnGetVersion``).

    Returns
    -------
    int
        ``major * 10000 + minor * 100 + patch`` for cuDNN 9 (``91900`` for 9.19.0).
    """
    return int(_lib.get().cudnnGetVersion())


version_tuple = _ffi.renamed(version, "cudnn.version_tuple()", "cudnn.version()")


_checked_versions = False


def check_versions() -> None:
    """Check once per process that cuDNN's sub-libraries match ``libcudnn.so.9``.

    cuDNN 9 is several shared objects (graph, ops, cnn, engines); a stray older
    ``libcudnn_cnn.so.9`` on the loader path would otherwise fail later with an opaque status.
    Each ``cudnn*VersionCheck`` needs no GPU.

    Raises
    ------
    CudnnError
        A sub-library is missing or of another version; the message names which.
    """
    global _checked_versions
    if _checked_versions:
        return
    L = _lib.get()
    for fn in ("cudnnGraphVersionCheck", "cudnnOpsVersionCheck", "cudnnCnnVersionCheck"):
        st = getattr(L, fn)()
        if st:
            raise_for(st, fn, f"the cuDNN sub-library checked by {fn} does not match "
                              f"{L.path or 'libcudnn.so.9'} (version {version_int()}); "
                              "install one consistent cuDNN")
    _checked_versions = True


_env_of: dict = {}


def env(dev) -> tuple:
    """``((major, minor), cuDNN version)`` of a device, looked up once: part of every plan
    cache key, so a plan chosen for one architecture or library is never reused on
    another."""
    e = _env_of.get(dev.ordinal)
    if e is None:
        e = _env_of[dev.ordinal] = (tuple(dev.compute_capability), version())
    return e
