"""cuBLAS and cuBLASLt handles per (device, thread), and their workspaces per (device, stream).

Both handle kinds come from :class:`cudalibs.runtime.handles.HandleCache`: created on first
use with the device's context current, kept until the interpreter exits (a destroy
synchronises the device, which must not happen from the garbage collector mid-run).

cuBLAS handles are set up deliberately once, at creation:

- pointer mode HOST: ``alpha`` and ``beta`` are host scalars (ctypes values), so a call needs
  no device allocation or copy for them;
- math mode ``CUBLAS_DEFAULT_MATH``: fp32 stays fp32.  TF32 is asked for per call through the
  compute type (``CUBLAS_COMPUTE_32F_FAST_TF32``), never by changing the handle's state, so
  one call cannot change the precision of the next.

A cuBLAS handle is bound to a stream (``cublasSetStream_v2``) and, with it, to that stream's
workspace (``cublasSetWorkspace_v2``): cuBLAS resets the workspace to its own default when the
stream changes, so both are set together, and only when the stream differs from the last one.
cuBLASLt handles have no stream; the stream and workspace are arguments of every
``cublasLtMatmul``.

Workspaces are one buffer per (device, stream), :data:`WORKSPACE_BYTES` each, shared by cuBLAS
and cuBLASLt (work on one stream runs in order, so both can use the same scratch).  Every
request is for the same size, so a buffer never grows and a handle never points at a freed
one.  A workspace is allocated outside any graph capture when possible: call
:func:`prepare` on a stream before capturing cuBLAS work on it.
"""

from __future__ import annotations

import ctypes
import threading

from ..driver import _lib as _drv
from ..driver.device import Device, as_device
from ..driver.stream import as_stream
from ..runtime import cache as _cache
from ..runtime.handles import HandleCache, Workspaces
from . import _lib
from ._base import raise_for

__all__ = ["WORKSPACE_BYTES", "cublas_handle", "thread_handle", "bind", "lt_handle",
           "workspace", "workspace_buffer", "prepare", "handle_caches", "release_workspaces"]

#: Scratch bytes per (device, stream).  Hopper needs 32 MiB for cuBLAS's fastest kernels
#: (the cuBLAS documentation recommends 32 MiB on sm_90, 4 MiB elsewhere).
WORKSPACE_BYTES = 32 << 20

_workspaces = Workspaces()


def _create_cublas(device: Device):
    L = _lib.get()
    h = _lib.cublasHandle_t()
    st = L.cublasCreate_v2(ctypes.byref(h))
    if st:
        raise_for(st, "cublasCreate_v2")
    try:
        st = L.cublasSetPointerMode_v2(h, _lib.CUBLAS_POINTER_MODE_HOST)
        if st:
            raise_for(st, "cublasSetPointerMode_v2")
        st = L.cublasSetMathMode(h, _lib.CUBLAS_DEFAULT_MATH)
        if st:
            raise_for(st, "cublasSetMathMode")
    except BaseException:
        L.cublasDestroy_v2(h)   # nothing half-built is left behind
        raise
    return h


def _destroy_cublas(raw) -> None:
    _lib.get().cublasDestroy_v2(raw)


def _set_stream_cublas(raw, stream: int) -> None:
    st = _lib.get().cublasSetStream_v2(raw, ctypes.cast(ctypes.c_void_p(stream), _drv.CUstream))
    if st:
        raise_for(st, "cublasSetStream_v2")


def _create_lt(device: Device):
    h = _lib.cublasLtHandle_t()
    st = _lib.get_lt().cublasLtCreate(ctypes.byref(h))
    if st:
        raise_for(st, "cublasLtCreate")
    return h


def _destroy_lt(raw) -> None:
    _lib.get_lt().cublasLtDestroy(raw)


_cublas_handles = HandleCache("cuBLAS", _create_cublas, _destroy_cublas, _set_stream_cublas)
_lt_handles = HandleCache("cuBLASLt", _create_lt, _destroy_lt)


def handle_caches() -> tuple[HandleCache, HandleCache]:
    """The cuBLAS and cuBLASLt :class:`~cudalibs.runtime.handles.HandleCache` objects."""
    return _cublas_handles, _lt_handles


def workspace(device: Device, stream: int) -> int:
    """Device address of the workspace of raw stream handle ``stream`` on ``device``
    (:data:`WORKSPACE_BYTES` long), allocated on first use."""
    return _workspaces.get(device, stream, WORKSPACE_BYTES).ptr


def workspace_buffer(device: Device, stream: int):
    """The workspace buffer of raw stream handle ``stream`` on ``device`` (allocated on first
    use)."""
    return _workspaces.get(device, stream, WORKSPACE_BYTES)


#: This thread's cuBLAS handles by Device (``_tls.cublas``), read by the GEMM hot path
#: without a call; filled from the handle cache on first use.
_tls = threading.local()
#: Every cuBLAS handle ever bound to a stream, so that releasing the workspaces can unbind
#: them (a handle still "bound" to a stream would skip the rebind that sets a new workspace).
_bound: set = set()


def thread_handle(device: Device, stream: int | None = None):
    """This thread's cuBLAS :class:`~cudalibs.runtime.handles.Handle` for ``device``
    (``stream``: the raw stream the call runs on, checked not to be capturing when a handle
    must be made)."""
    try:
        return _tls.cublas[device]
    except AttributeError:
        _tls.cublas = {}
    except KeyError:
        pass
    h = _tls.cublas[device] = _cublas_handles.get(device, stream)
    return h


def cublas_handle(device: Device, stream: int):
    """The calling thread's cuBLAS handle for ``device``, bound to raw stream handle
    ``stream`` and that stream's workspace.

    The hot path is two dictionary lookups and an integer comparison; the library is called
    only when the stream changed since the last call of this thread on this device.  The
    caller makes ``device``'s context current.

    Returns
    -------
    cublasHandle_t
        The raw ctypes handle.
    """
    try:
        h = _tls.cublas[device]
    except (AttributeError, KeyError):
        h = thread_handle(device, stream)
    if h.stream != stream:
        bind(h, device, stream)
    return h.raw


def bind(h, device: Device, stream: int) -> None:
    """Bind cuBLAS handle ``h`` to raw stream handle ``stream`` and that stream's workspace
    (the caller makes ``device``'s context current)."""
    ws = workspace(device, stream)
    _bound.add(h)
    h.bind(stream)
    # cublasSetStream resets the workspace to cuBLAS's own default pool, so this follows it.
    st = _lib.get().cublasSetWorkspace_v2(h.raw, ws, WORKSPACE_BYTES)
    if st:
        h.stream = None     # make the next call try again rather than run without scratch
        raise_for(st, "cublasSetWorkspace_v2")
    h.extra["workspace"] = ws


def lt_handle(device: Device, stream: int | None = None):
    """The calling thread's cuBLASLt handle for ``device`` (raw ctypes handle); ``stream`` as
    for :func:`thread_handle`."""
    return _lt_handles.get(device, stream).raw


def prepare(stream=None, device=None) -> None:
    """Create this thread's handles for the stream's device and bind them to ``stream``.

    Call it once before capturing cuBLAS or cuBLASLt work into a CUDA graph: creating a
    handle and allocating its workspace are not allowed while a stream is capturing.

    Parameters
    ----------
    stream : Stream, optional
        The current stream by default.
    device : Device or int, optional
        The stream's device, or the current device.
    """
    s = as_stream(stream)
    dev = s.device if device is None and s.device is not None else as_device(device)
    _drv.get().cuCtxSetCurrent(dev.raw_context)
    cublas_handle(dev, s.raw_handle)
    lt_handle(dev)


def release_workspaces(device=None) -> None:
    """Free the cuBLAS/cuBLASLt workspaces (of ``device`` only, if given) and unbind this
    process's cuBLAS handles from their streams, so the next call sets its stream and a new
    workspace again.  Waits for the device first: queued work may still use a workspace.
    Run by :func:`cudalibs.runtime.plan.release_all`."""
    dev = None if device is None else as_device(device)
    for h in list(_bound):
        if dev is None or h.device is dev:
            h.stream = None
    _workspaces.release(dev)


def _release_hook() -> None:
    release_workspaces()


_cache.RELEASE_HOOKS.append(_release_hook)
