"""Pinned (page-locked) host memory: :class:`HostBuffer` and :func:`pinned_empty`.

Copies between pinned memory and the device run at full bus speed and can be truly
asynchronous; numpy views keep a buffer alive, and ``close()`` refuses while one exists.
"""

from __future__ import annotations

import ctypes
import weakref

import numpy as np

from .._ffi import refuse_in_capture
from ..errors import ClosedError
from . import _capture, _lib
from ._core import init, raise_for
from .device import as_device
from .args import shape_tuple
from .memory import check_nbytes

__all__ = ["HostBuffer", "pinned_empty"]


def _free_host(free, ptr):
    if _capture.defer(_free_host, (free, ptr)):
        return
    free(ptr)


class _HostView:
    """The object numpy arrays over a HostBuffer hold as ``base``: keeps the buffer alive."""

    __slots__ = ("__array_interface__", "_buffer", "__weakref__")

    def __init__(self, buffer, shape, typestr):
        self._buffer = buffer
        self.__array_interface__ = {"shape": shape, "typestr": typestr,
                                    "data": (buffer._ptr, False), "version": 3}


class HostBuffer:
    """Page-locked (pinned) host memory from ``cuMemHostAlloc``.

    Copies between pinned memory and the device run at full bus speed and can be truly
    asynchronous.  :meth:`numpy` gives array views; they keep the buffer alive, and
    ``close()`` refuses (``BufferError``) while any view exists.

    Parameters
    ----------
    nbytes : int
    portable : bool, default True
        Pinned for every context, not only the current one.
    write_combined : bool, default False
        Faster host-to-device transfers, very slow host reads.
    """

    __slots__ = ("_ptr", "_size", "_finalizer", "_views", "__weakref__")

    def __init__(self, nbytes: int, *, portable: bool = True, write_combined: bool = False):
        nbytes = check_nbytes(nbytes, "HostBuffer: nbytes")
        refuse_in_capture("HostBuffer() (cuMemHostAlloc)", "allocate pinned memory before it")
        L = init()
        dev = as_device(None)
        L.cuCtxSetCurrent(dev._ctx)
        flags = (_lib.CU_MEMHOSTALLOC_PORTABLE if portable else 0) | (
            _lib.CU_MEMHOSTALLOC_WRITECOMBINED if write_combined else 0)
        p = ctypes.c_void_p()
        if nbytes:
            st = L.cuMemHostAlloc(ctypes.byref(p), nbytes, flags)
            if st:
                raise_for(st, "cuMemHostAlloc", f"requested {nbytes} pinned bytes")
        self._ptr = p.value or 0
        self._size = nbytes
        self._views = weakref.WeakSet()
        self._finalizer = (weakref.finalize(self, _free_host, L.cuMemFreeHost, self._ptr)
                           if nbytes else None)
        if self._finalizer is not None:
            self._finalizer.atexit = False

    @property
    def ptr(self) -> int:
        if self._ptr is None:
            raise ClosedError("host buffer is closed")
        return self._ptr

    @property
    def size(self) -> int:
        return self._size

    nbytes = size

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def numpy(self, dtype=np.uint8, shape=None) -> np.ndarray:
        """A numpy array over the pinned bytes (C order); it keeps this buffer alive."""
        self.ptr  # raises ClosedError after close()
        dt = np.dtype(dtype)
        if shape is None:
            shape = (self._size // dt.itemsize,)
        shape = tuple(int(s) for s in np.atleast_1d(shape)) if np.ndim(shape) else (int(shape),)
        need = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if any(s < 0 for s in shape) or need > self._size:
            raise ValueError(f"shape {shape} of {dt} needs {need} bytes; buffer has {self._size}")
        view = _HostView(self, shape, dt.str)
        self._views.add(view)
        arr = np.asarray(view)
        if dt.kind == "V" or dt.str.startswith("|V") or dt.str.startswith("<V"):
            arr = arr.view(dt)  # ml_dtypes types export as void; restore the real dtype
        return arr

    def close(self) -> None:
        """Free the pinned memory. Idempotent.

        Raises
        ------
        BufferError
            numpy arrays made by :meth:`numpy` are still alive.
        """
        if self._ptr is None:
            return
        if len(self._views):
            raise BufferError(f"{len(self._views)} numpy view(s) of this pinned buffer are "
                              "still alive; delete them before close()")
        if self._finalizer is not None:
            self._finalizer()
        self._ptr = None

    def __enter__(self) -> "HostBuffer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._ptr is None:
            return f"<HostBuffer closed, {self._size} bytes>"
        return f"<HostBuffer 0x{self._ptr:x}, {self._size} pinned bytes>"


def pinned_empty(shape, dtype=np.float32) -> np.ndarray:
    """An uninitialised numpy array in pinned host memory."""
    dt = np.dtype(dtype)
    shape = shape_tuple(shape, "pinned_empty: shape")
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    return HostBuffer(n).numpy(dt, shape)
