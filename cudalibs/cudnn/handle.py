"""The cuDNN handle of each (device, thread) and the convolution workspaces.

``cudnnCreate`` costs milliseconds and needs a GPU, and a handle must not be used by two threads
at once, so one is made per (device, thread) on first use by the shared
:class:`~cudalibs.runtime.handles.HandleCache` and bound to a call's stream only when the
stream changes.  Scratch memory comes from the shared
:class:`~cudalibs.runtime.handles.Workspaces`: one buffer per (device, stream) that grows to the
largest need and is reused, so a steady stream of convolutions allocates nothing.
"""

from __future__ import annotations

import ctypes

from ..driver.device import Device
from ..driver.memory import check_nbytes
from ..runtime.cache import RELEASE_HOOKS
from ..runtime.handles import Handle, HandleCache, Workspaces
from . import _lib
from ._base import check_versions, raise_for
from .descriptors import clear_descriptor_cache

__all__ = ["handle_for", "workspace", "workspace_bytes", "release_workspaces",
           "DEFAULT_WORKSPACE_LIMIT", "set_workspace_limit", "workspace_limit"]


def _create(device: Device):
    check_versions()
    h = _lib.cudnnHandle_t()
    st = _lib.get().cudnnCreate(ctypes.byref(h))
    if st:
        raise_for(st, "cudnnCreate")
    return h


def _destroy(raw) -> None:
    _lib.get().cudnnDestroy(raw)


def _set_stream(raw, stream: int) -> None:
    st = _lib.get().cudnnSetStream(raw, ctypes.cast(ctypes.c_void_p(stream), _lib.cudaStream_t))
    if st:
        raise_for(st, "cudnnSetStream")


_handles = HandleCache("cuDNN", _create, _destroy, _set_stream)
_workspaces = Workspaces()

#: The most scratch memory one convolution may use unless told otherwise (bytes).  Large
#: enough for the fastest algorithms of ResNet-sized layers, small beside a training run.
DEFAULT_WORKSPACE_LIMIT = 1 << 30
_limit = [DEFAULT_WORKSPACE_LIMIT]


def set_workspace_limit(nbytes: int) -> None:
    """Set the default per-call workspace limit of the convolutions (bytes, >= 0).

    Cached algorithm choices made under another limit stay valid for that limit only (the
    limit is part of the cache key).
    """
    _limit[0] = check_nbytes(nbytes, "set_workspace_limit: nbytes")


def workspace_limit() -> int:
    """The default per-call workspace limit in bytes (see :func:`set_workspace_limit`)."""
    return _limit[0]


def handle_for(device: Device, stream: int) -> Handle:
    """The calling thread's cuDNN handle for ``device``, bound to raw stream ``stream``.

    The device's context is made current as well: cuDNN launches into the current context.
    """
    device.set_current()
    h = _handles.get(device, stream)
    h.bind(stream)
    return h


def workspace(device: Device, stream: int, nbytes: int) -> tuple[int, int]:
    """``(pointer, size)`` of scratch memory of at least ``nbytes`` for work on ``stream``.

    ``(0, 0)`` when nothing is needed and nothing is held yet.
    """
    if nbytes <= 0:
        return 0, 0
    buf = _workspaces.get(device, stream, nbytes)
    return buf.ptr, buf.size


def workspace_bytes(device: Device | None = None) -> int:
    """Bytes of workspace held (for one device, or all)."""
    if device is None:
        return _workspaces.total_bytes()
    try:
        return _workspaces.total_bytes(device)
    except TypeError:   # a Workspaces that counts all devices together only
        return _workspaces.total_bytes()


def release_workspaces(device: Device | None = None) -> None:
    """Free the cached workspaces (of ``device`` only, if given); they regrow on demand."""
    _workspaces.release(device)


def _release_all() -> None:
    """What :func:`cudalibs.release_all` frees of cuDNN: the workspaces and the
    descriptor cache (the plans went with the plan cache)."""
    release_workspaces()
    clear_descriptor_cache()


RELEASE_HOOKS.append(_release_all)
