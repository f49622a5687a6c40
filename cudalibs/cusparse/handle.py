"""cuSPARSE handles per (device, thread), bound to a call's stream only when it changes.

The handles come from :class:`cudalibs.runtime.handles.HandleCache`: created on first use
with the device's context current, kept until the interpreter exits (a destroy synchronises
the device, which must not happen from the garbage collector mid-run), handed on to the next
thread when theirs ends, unbound when a stream they are bound to is destroyed.  A handle's
pointer mode stays cuSPARSE's default, HOST: ``alpha`` and ``beta`` are host scalars.
cuSPARSE needs no workspace in the handle: every generic call takes its buffer as an
argument, and the plans take it from the stream-ordered pool.
"""

from __future__ import annotations

import ctypes
import threading

from ..driver import _lib as _drv
from ..driver.device import Device
from ..runtime.handles import HandleCache
from . import _lib
from ._base import raise_for

__all__ = ["cusparse_handle", "handle_cache"]


def _create(device: Device):
    h = _lib.cusparseHandle_t()
    st = _lib.get().cusparseCreate(ctypes.byref(h))
    if st:
        raise_for(st, "cusparseCreate")
    return h


def _destroy(raw) -> None:
    _lib.get().cusparseDestroy(raw)


def _set_stream(raw, stream: int) -> None:
    st = _lib.get().cusparseSetStream(raw, ctypes.cast(ctypes.c_void_p(stream), _drv.CUstream))
    if st:
        raise_for(st, "cusparseSetStream")


_handles = HandleCache("cuSPARSE", _create, _destroy, _set_stream)
#: This thread's handles by Device, read by the hot path without a call.
_tls = threading.local()


def handle_cache() -> HandleCache:
    """The cuSPARSE :class:`~cudalibs.runtime.handles.HandleCache`."""
    return _handles


def cusparse_handle(device: Device, stream: int):
    """The calling thread's cuSPARSE handle for ``device``, bound to raw stream handle
    ``stream`` (the caller makes ``device``'s context current).

    Creating the handle is refused while ``stream`` is capturing a graph (it allocates
    synchronously): run the work once before capturing it.

    Returns
    -------
    cusparseHandle_t
        The raw ctypes handle.
    """
    try:
        h = _tls.handles[device]
    except AttributeError:
        _tls.handles = {}
        h = _tls.handles[device] = _handles.get(device, stream)
    except KeyError:
        h = _tls.handles[device] = _handles.get(device, stream)
    if h.stream != stream:
        h.bind(stream)
    return h.raw
