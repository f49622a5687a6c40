"""What every NCCL wrapper shares: the status check, the library version, raw unique ids.

A failing status raises :class:`~cudalibs.errors.NcclError` with the message of
``ncclGetErrorString`` and, as ``detail``, ``ncclGetLastError(NULL)`` -- NCCL's own account of
the most recent failure (which rank, which socket, which CUDA call).
"""

from __future__ import annotations

import ctypes

from .. import _ffi
from ..errors import NcclError
from . import _lib

__all__ = ["raise_for", "version", "version_tuple", "unique_id_bytes", "new_config"]


def _error_string(status: int) -> str:
    text = _lib.get().ncclGetErrorString(status)
    return text.decode() if text else ""


def _last_error() -> str:
    text = _lib.get().ncclGetLastError(None)
    return text.decode(errors="replace").strip() if text else ""


raise_for = _ffi.make_raiser(NcclError, message=_error_string, detail=_last_error)
raise_for.__doc__ = """Raise :class:`~cudalibs.errors.NcclError` for ``status`` from ``function``.

The error's ``detail`` is ``ncclGetLastError(NULL)``."""


def version() -> int:
    """The version of the loaded NCCL library, as NCCL encodes it.

    Returns
    -------
    int
        ``NCCL_VERSION_CODE`` of the library: ``major * 10000 + minor * 100 + patch`` since
        2.9 (``22809`` for 2.28.9), ``major * 1000 + minor * 100 + patch`` before.
    """
    code = ctypes.c_int()
    st = _lib.get().ncclGetVersion(ctypes.byref(code))
    if st:
        raise_for(st, "ncclGetVersion")
    return code.value


def version_tuple() -> tuple[int, int, int]:
    """The version of the loaded NCCL library.

    Returns
    -------
    tuple of int
        ``(major, minor, patch)``, for example ``(2, 28, 9)``.
    """
    code = version()
    if code >= 10000:  # NCCL_VERSION(X, Y, Z) for anything after 2.8
        return code // 10000, code % 10000 // 100, code % 100
    return code // 1000, code % 1000 // 100, code % 100


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
