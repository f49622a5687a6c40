"""Library handles per (device, thread) and scratch workspaces per (device, stream).

cuBLAS, cuBLASLt and cuDNN each need a handle, which is costly to create (milliseconds) and
not safe to share between threads, and most calls need scratch memory.  Both are cached here
so that a repeated call builds nothing:

- :class:`HandleCache` creates one handle per (device, thread) on first use, with the device's
  context current, and keeps it until the interpreter exits.  Handles are never destroyed by
  the garbage collector mid-run (a destroy synchronises the device and may run at any point in
  another thread's work); a thread that ends leaves its handles to the exit hook.
- :class:`Handle.bind` calls the library's set-stream function only when the stream changes,
  since that call costs as much as the rest of a small GEMM.
- :class:`Workspaces` keeps one buffer per (device, stream) that grows to the largest size
  asked for and is then reused.  Work on one stream runs in order, so the same buffer serves
  every call on that stream; two streams never share one.

Per-stream state goes with its stream: when an owned :class:`~cudalibs.Stream` is closed or
collected, every :class:`Workspaces` frees that stream's buffer (after the work queued on the
stream) and every :class:`HandleCache` unbinds the handles bound to it, before the stream is
destroyed, so a stream per request leaves nothing behind and a recycled handle value never
meets a stale binding.  :func:`cudalibs.release_all` frees every workspace.
"""

from __future__ import annotations

import atexit
import ctypes
import threading
import weakref
from typing import Any, Callable

from .._ffi import refuse_in_capture
from . import _lib, plan as _plan, stream as _stream_mod
from ._core import raise_for
from .device import Device
from .memory import DeviceBuffer, alloc, trim_pools

__all__ = ["Handle", "HandleCache", "Workspaces"]

# Every live HandleCache and Workspaces, walked when a stream is destroyed.
_caches: "weakref.WeakSet[HandleCache]" = weakref.WeakSet()
_workspaces: "weakref.WeakSet[Workspaces]" = weakref.WeakSet()


class Handle:
    """One library handle of one device, used by one thread.

    Attributes
    ----------
    raw
        The ctypes handle (the library's opaque pointer type).
    device : Device
        The device whose context was current when the handle was created.
    stream : int or None
        The raw stream handle last bound with :meth:`bind` (``None``: never bound).
    """

    __slots__ = ("raw", "device", "stream", "_set_stream", "extra")

    def __init__(self, raw, device: Device, set_stream: Callable[[Any, int], None] | None):
        self.raw = raw
        self.device = device
        self.stream: int | None = None
        self._set_stream = set_stream
        #: Per-handle state a binding may keep (for example the workspace last set).
        self.extra: dict = {}

    def bind(self, stream: int) -> bool:
        """Bind the handle to raw stream handle ``stream`` if it is not bound to it already.

        Returns
        -------
        bool
            True when the library's set-stream function was called.
        """
        if stream == self.stream:
            return False
        if self._set_stream is not None:
            self._set_stream(self.raw, stream)
        self.stream = stream
        return True

    def __repr__(self) -> str:
        value = getattr(self.raw, "value", self.raw)
        return (f"<Handle {type(self.raw).__name__} 0x{value or 0:x} on {self.device!r}, "
                f"stream {self.stream}>")


class HandleCache:
    """Create a library handle per (device, thread) on first use; destroy them all at exit.

    Parameters
    ----------
    name : str
        The library, for messages (``"cuBLAS"``).
    create : callable
        ``create(device) -> raw``: makes a handle; called with ``device``'s context current.
        It raises on failure and must leave nothing behind when it does.
    destroy : callable
        ``destroy(raw)``: frees a handle; called once per handle from the exit hook, with
        its device's context current.  Errors there are ignored (the process is ending).
    set_stream : callable, optional
        ``set_stream(raw, stream_handle)``, used by :meth:`Handle.bind`.
    """

    def __init__(self, name: str, create: Callable[[Device], Any],
                 destroy: Callable[[Any], Any],
                 set_stream: Callable[[Any, int], None] | None = None):
        self.name = name
        self._create = create
        self._destroy = destroy
        self._set_stream = set_stream
        self._local = threading.local()
        self._all: list[Handle] = []       # strong references: no GC-time destroy
        self._lock = threading.Lock()
        self._exit_registered = False
        _caches.add(self)

    def get(self, device: Device) -> Handle:
        """The calling thread's handle for ``device``, created on first use."""
        try:
            return self._local.handles[device.ordinal]
        except AttributeError:
            self._local.handles = {}
        except KeyError:
            pass
        refuse_in_capture(f"creating this thread's {self.name} handle",
                          "creating a library handle allocates device memory synchronously")
        with device:
            raw = self._create(device)
        handle = Handle(raw, device, self._set_stream)
        with self._lock:
            self._all.append(handle)
            if not self._exit_registered:
                atexit.register(self._destroy_all)
                self._exit_registered = True
        self._local.handles[device.ordinal] = handle
        return handle

    def __len__(self) -> int:
        return len(self._all)

    def forget_stream(self, stream: int) -> int:
        """Unbind every handle (of any thread) bound to raw stream handle ``stream``; the
        next call on each rebinds it.  Called when that stream is destroyed, since a new
        stream may get the same handle value.  Returns how many were unbound."""
        n = 0
        with self._lock:
            handles = list(self._all)
        for h in handles:
            if h.stream == stream:
                h.stream = None
                n += 1
        return n

    def _destroy_all(self) -> None:
        with self._lock:
            handles, self._all = self._all, []
        for h in handles:
            try:
                with h.device:
                    self._destroy(h.raw)
            except Exception:   # noqa: BLE001 - the process is exiting; nothing to report to
                pass

    def __repr__(self) -> str:
        return f"<HandleCache {self.name}: {len(self._all)} handle(s)>"


class Workspaces:
    """Scratch buffers per (device, stream) that grow to the largest need and are reused.

    ``get(device, stream_handle, nbytes)`` returns a buffer of at least ``nbytes`` for work
    enqueued on that stream.  Growing waits for the stream before freeing the smaller buffer,
    since work already queued may still be using it; this happens only a few times per stream.
    """

    def __init__(self):
        self._buffers: dict[tuple[int, int], DeviceBuffer] = {}
        self._lock = threading.Lock()
        _workspaces.add(self)

    def get(self, device: Device, stream: int, nbytes: int) -> DeviceBuffer | None:
        """A buffer of at least ``nbytes`` bytes for stream handle ``stream``.

        Returns
        -------
        DeviceBuffer or None
            None when ``nbytes`` is 0 and no buffer exists yet.
        """
        key = (device.ordinal, stream)
        buf = self._buffers.get(key)
        if buf is not None and buf.size >= nbytes:
            return buf
        if nbytes <= 0:
            return buf
        refuse_in_capture(f"growing a library workspace to {nbytes} bytes",
                          "the workspace is allocated and the smaller one freed synchronously")
        with self._lock:
            buf = self._buffers.get(key)
            if buf is not None and buf.size >= nbytes:
                return buf
            if buf is not None:
                _sync_raw(stream, device)
                buf.close()
            # Round up so that a sequence of slightly growing requests does not reallocate
            # every time.
            size = max(nbytes, 1 << 20)
            size = (size + (1 << 20) - 1) & ~((1 << 20) - 1)
            buf = alloc(size, device)
            self._buffers[key] = buf
            return buf

    def size(self, device: Device, stream: int) -> int:
        """Bytes held for (device, stream), 0 if none."""
        buf = self._buffers.get((device.ordinal, stream))
        return 0 if buf is None else buf.size

    def release(self, device: Device | None = None) -> None:
        """Free the buffers (of ``device`` only, if given) after synchronising their device."""
        with self._lock:
            keys = [k for k in self._buffers if device is None or k[0] == device.ordinal]
            for key in keys:
                buf = self._buffers.pop(key)
                buf.device.synchronize()
                buf.close()

    def release_stream(self, device: int | None, stream: int) -> int:
        """Free the buffers of raw stream handle ``stream`` (on device ordinal ``device``, or
        on every device when None) once the work queued on that stream has run.  Returns the
        bytes freed."""
        with self._lock:
            keys = [k for k in self._buffers
                    if k[1] == stream and (device is None or k[0] == device)]
            bufs = [self._buffers.pop(k) for k in keys]
        freed = 0
        for buf in bufs:
            # Buffers come from cuMemAlloc, whose free is not stream-ordered: wait for the
            # stream's queued work (which may still use the buffer) first.
            _sync_raw(stream, buf.device)
            freed += buf.size
            buf.close()
        return freed

    def release_all(self) -> int:
        """Free every buffer (after synchronising its device); returns the bytes freed."""
        freed = self.total_bytes()
        self.release()
        return freed

    def total_bytes(self) -> int:
        """Bytes held over all devices and streams."""
        return sum(b.size for b in self._buffers.values())

    def __repr__(self) -> str:
        return f"<Workspaces: {len(self._buffers)} buffer(s), {self.total_bytes()} bytes>"


def _sync_raw(stream: int, device: Device) -> None:
    """Wait for the work queued on raw stream handle ``stream`` of ``device``."""
    L = _lib.get()
    L.cuCtxSetCurrent(device._ctx)
    st = L.cuStreamSynchronize(ctypes.cast(ctypes.c_void_p(stream), _lib.CUstream))
    if st:
        raise_for(st, "cuStreamSynchronize")


def _stream_destroyed(stream: int) -> None:
    """A stream is about to be destroyed: free its workspaces, unbind the handles bound to it."""
    for ws in list(_workspaces):
        ws.release_stream(None, stream)
    for cache in list(_caches):
        cache.forget_stream(stream)


def _release_workspaces() -> None:
    for ws in list(_workspaces):
        ws.release_all()


# Before the memory pools' hook: what the workspaces free must not outlive the stream's
# destroy, and the pools' hook is the last word on the stream's cached blocks.
_stream_mod.DESTROY_HOOKS.insert(0, _stream_destroyed)
# Workspaces with the other releases, the pools last (what the frees return is trimmed too).
_plan.RELEASE_HOOKS.append(_release_workspaces)
_plan.RELEASE_LAST.append(trim_pools)
