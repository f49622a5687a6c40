"""What every NCCL wrapper shares: the status check, the library version, raw unique ids,
the checks of ranks and timeouts.

A failing status raises :class:`~cudalibs.errors.NcclError` with the message of
``ncclGetErrorString`` and, as ``detail``, ``ncclGetLastError(NULL)`` -- NCCL's own account of
the most recent failure (which rank, which socket, which CUDA call).
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from .. import _ffi
from ..errors import NcclError
from . import _lib

__all__ = ["raise_for", "version", "version_int", "version_tuple", "unique_id_bytes", "new_config",
           "IN_PROGRESS", "NcclTimeoutError", "comm_last_error", "abort_raw", "poll",
           "check_int", "check_ranks", "check_timeout"]

#: ``ncclInProgress``: a non-blocking call has not finished yet.
IN_PROGRESS = 7


def _error_string(status: int) -> str:
    text = _lib.get().ncclGetErrorString(status)
    return text.decode() if text else ""


def _last_error() -> str:
    text = _lib.get().ncclGetLastError(None)
    return text.decode(errors="replace").strip() if text else ""


raise_for = _ffi.make_raiser(NcclError, message=_error_string, detail=_last_error)
raise_for.__doc__ = """Raise :class:`~cudalibs.errors.NcclError` for ``status`` from ``function``.

The error's ``detail`` is ``ncclGetLastError(NULL)``."""


def version() -> tuple[int, int, int]:
    """The version of the loaded NCCL library.

    Returns
    -------
    tuple of int
        ``(major, minor, patch)``, for example ``(2, 28, 9)``.
    """
    code = version_int()
    if code >= 10000:  # NCCL_VERSION(X, Y, Z) for anything after 2.8
        return _ffi.encoded_version(code)
    return _ffi.encoded_version(code, 1000)


def version_int() -> int:
    """The version of the loaded NCCL library as one number, as NCCL encodes it.

    Returns
    -------
    int
        ``NCCL_VERSION_CODE`` of the library (``ncclGetVersion``): ``major * 10000 + minor *
        100 + patch`` since 2.9 (``22809`` for 2.28.9), ``major * 1000 + minor * 100 + patch``
        before.
    """
    code = ctypes.c_int()
    st = _lib.get().ncclGetVersion(ctypes.byref(code))
    if st:
        raise_for(st, "ncclGetVersion")
    return code.value


version_tuple = _ffi.renamed(version, "nccl.version_tuple()", "nccl.version()")


def unique_id_bytes() -> bytes:
    """A new NCCL unique id (``ncclGetUniqueId``), as its raw 128 bytes.

    The id names one communicator: rank 0 makes it and sends it to every other rank (over any
    channel; it is plain bytes), and every rank passes it to ``ncclCommInitRank``.  Making one
    needs no GPU, but NCCL opens a bootstrap socket on a network interface
    (``NCCL_SOCKET_IFNAME`` chooses which).

    Returns
    -------
    bytes
        ``NCCL_UNIQUE_ID_BYTES`` (128) bytes; ``ncclUniqueId.from_buffer_copy`` turns them back.
    """
    uid = _lib.ncclUniqueId()
    st = _lib.get().ncclGetUniqueId(ctypes.byref(uid))
    if st:
        raise_for(st, "ncclGetUniqueId")
    return bytes(uid)  # not uid.internal: a c_char array stops at the first NUL


def new_config(**fields) -> "_lib.ncclConfig_t":
    """An ``ncclConfig_t`` as ``NCCL_CONFIG_INITIALIZER`` makes it, with ``fields`` set.

    Parameters
    ----------
    **fields
        ``ncclConfig_t`` fields to set (``blocking=0``, ``commName=b"tp"``); every other
        user field stays ``NCCL_CONFIG_UNDEF_INT`` / ``NULL`` ("NCCL chooses").

    Returns
    -------
    ncclConfig_t
    """
    cfg = _lib.ncclConfig_t()
    cfg.size = ctypes.sizeof(_lib.ncclConfig_t)
    cfg.magic = _lib.CONFIG_MAGIC
    cfg.version = _lib.CONFIG_VERSION
    for name, ctype in _lib.ncclConfig_t._fields_[3:]:
        if ctype is ctypes.c_int:
            setattr(cfg, name, _lib.CONFIG_UNDEF_INT)
    known = {name for name, _ in _lib.ncclConfig_t._fields_[3:]}
    for name, value in fields.items():
        if name not in known:
            raise TypeError(f"ncclConfig_t has no user field {name!r}")
        setattr(cfg, name, value)
    return cfg


# -- argument checks shared by the communicator and its bootstrap -----------------------------
def check_int(value, what: str) -> int:
    """``value`` as an int, refusing bools and non-integers."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    return int(value)


def check_ranks(nranks, rank, op: str, size_name: str = "nranks") -> tuple[int, int]:
    """``(nranks, rank)`` checked: at least one rank, ``0 <= rank < nranks``; messages in
    ``op``'s name, the size under its parameter's name ``size_name``."""
    nranks = check_int(nranks, f"{op}: {size_name}")
    rank = check_int(rank, f"{op}: rank")
    if nranks < 1:
        raise ValueError(f"{op}: {size_name} must be at least 1, got {nranks}")
    if not 0 <= rank < nranks:
        raise ValueError(f"{op}: rank {rank} is out of range for {nranks} rank(s)")
    return nranks, rank


def check_timeout(timeout, blocking: bool):
    """A positive number of seconds, or None; only a non-blocking communicator has one."""
    if timeout is None:
        return None
    if blocking:
        raise ValueError("timeout needs blocking=False: a blocking NCCL call cannot be "
                         "interrupted")
    timeout = float(timeout)
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    return timeout


# -- non-blocking calls --------------------------------------------------------------------
class NcclTimeoutError(NcclError, TimeoutError):
    """An NCCL operation did not finish within the communicator's timeout.

    The communicator has been aborted (``ncclCommAbort``) by the time this is raised, so the
    process can go on.  ``status`` is ``ncclInProgress``; ``detail`` holds ``ncclGetLastError``.
    """


def comm_last_error(raw) -> str:
    """``ncclGetLastError`` of the communicator ``raw``; empty if even that fails."""
    try:
        text = _lib.get().ncclGetLastError(raw)
    except Exception:  # noqa: BLE001 - only decorates an error already being raised
        return ""
    return text.decode(errors="replace").strip() if text else ""


def abort_raw(raw) -> None:
    """``ncclCommAbort(raw)``, ignoring its failure (the last resort after another error)."""
    try:
        _lib.get().ncclCommAbort(raw)
    except Exception:  # noqa: BLE001 - aborting is the last resort; report the first error
        pass


def poll(raw, timeout, function: str) -> None:
    """Wait until the communicator ``raw`` has no operation in progress.

    On an asynchronous error or past ``timeout`` seconds the communicator is aborted (NCCL
    leaves it unusable after an asynchronous error) and the error raised.
    """
    L = _lib.get()
    state = ctypes.c_int()
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 1e-5
    while True:
        st = L.ncclCommGetAsyncError(raw, ctypes.byref(state))
        if st:
            detail = comm_last_error(raw)
            abort_raw(raw)
            raise_for(st, "ncclCommGetAsyncError", detail)
        if state.value == 0:
            return
        if state.value != IN_PROGRESS:
            detail = comm_last_error(raw)
            abort_raw(raw)
            raise_for(state.value, function, detail)
        if deadline is not None and time.monotonic() >= deadline:
            detail = comm_last_error(raw)
            abort_raw(raw)
            raise NcclTimeoutError(IN_PROGRESS, function,
                                   f"not finished after {timeout:g} s; the communicator was "
                                   "aborted", detail or None)
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)  # short first waits keep small collectives fast
