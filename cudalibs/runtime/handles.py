"""Library handles per (device, thread) and scratch workspaces per (device, stream).

cuBLAS, cuBLASLt and cuDNN each need a handle, which is costly to create (milliseconds) and
not safe to share between threads, and most calls need scratch memory.  Both are cached here
so that a repeated call builds nothing:

- :class:`HandleCache` gives each (device, thread) a handle on first use, with the device's
  context current, and keeps it until the interpreter exits.  Handles are never destroyed by
  the garbage collector mid-run (a destroy synchronises the device and may run at any point in
  another thread's work): a thread that ends gives its handles back, and the next thread
  that needs one takes it instead of creating another, so a pool of short-lived worker
  threads holds no more handles than it has threads alive at once.
- :class:`Handle.bind` calls the library's set-stream function only when the stream changes,
  since that call costs as much as the rest of a small GEMM.
- :class:`Workspaces` keeps one buffer per (device, stream) that grows to the largest size
  asked for and is then reused.  Work on one stream runs in order, so the same buffer serves
  every call on that stream; two streams never share one.  At most :attr:`Workspaces.MAX`
  streams hold one at a time: a framework's streams are never destroyed through cudalibs, so
  the least recently used stream's buffer is freed (after the device's queued work) to make
  room.

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

from .._ffi import defer, refuse_in_capture
from ..errors import CaptureError, CudaError
from ..driver import _lib, stream as _stream_mod
from ..driver._core import raise_for
from ..driver.device import Device
from ..driver.memory import DeviceBuffer, alloc, trim_pools
from . import cache as _cache

__all__ = ["Handle", "HandleCache", "Workspaces", "refuse_if_capturing"]

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


class _ThreadToken:
    """Lives in one thread's local storage only; its collection says the thread ended."""

    __slots__ = ("__weakref__",)


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
        self._free: dict[int, list[Handle]] = {}     # by device ordinal: threads gone
        self._lock = threading.Lock()
        self._exit_registered = False
        _caches.add(self)

    def get(self, device: Device, stream: int | None = None) -> Handle:
        """The calling thread's handle for ``device``: made on first use, or taken over from
        a thread that has ended.  ``stream``, the raw handle of the stream the call will run
        on, lets making a handle be refused while that stream is capturing."""
        try:
            return self._local.handles[device.ordinal]
        except AttributeError:
            mine = self._local.handles = {}
            # Collected with this thread's local storage when the thread ends: its handles
            # then go back to the free list.
            self._local.token = token = _ThreadToken()
            weakref.finalize(token, self._give_back, mine)
        except KeyError:
            pass
        with self._lock:
            free = self._free.get(device.ordinal)
            handle = free.pop() if free else None
        if handle is None:
            what = f"creating this thread's {self.name} handle"
            why = "creating a library handle allocates device memory synchronously"
            refuse_in_capture(what, why)
            if stream is not None:
                refuse_if_capturing(stream, device, what, why)
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

    def _give_back(self, handles: dict) -> None:
        """A thread ended: its handles become free for the next thread."""
        with self._lock:
            for ordinal, h in handles.items():
                self._free.setdefault(ordinal, []).append(h)
        handles.clear()

    @property
    def free(self) -> int:
        """How many handles wait for a thread to take them (their threads have ended)."""
        return sum(len(v) for v in self._free.values())

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
        return (f"<HandleCache {self.name}: {len(self._all)} handle(s), {self.free} free>")


#: The driver's answers to waiting for a device while a stream on it records a graph
#: (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, _INVALIDATED, _IMPLICIT, _WRONG_THREAD).
_CAPTURE_CONFLICTS = frozenset((900, 901, 906, 908))


class Workspaces:
    """Scratch buffers per (device, stream) that grow to the largest need and are reused.

    ``get(device, stream_handle, nbytes)`` returns a buffer of at least ``nbytes`` for work
    enqueued on that stream.  Growing waits for the stream before freeing the smaller buffer,
    since work already queued may still be using it; this happens only a few times per stream.
    """

    #: The most streams that hold a buffer at once (per Workspaces).
    MAX = 32

    def __init__(self):
        self._buffers: dict[tuple[int, int], DeviceBuffer] = {}
        # Evicted buffers whose device could not be waited for yet (a capture was in
        # progress); freed by the next eviction or release.
        self._retired: list[DeviceBuffer] = []
        self._lock = threading.Lock()
        _workspaces.add(self)

    def get(self, device: Device, stream: int, nbytes: int) -> DeviceBuffer | None:
        """A buffer of at least ``nbytes`` bytes for stream handle ``stream``.

        Returns
        -------
        DeviceBuffer or None
            None when ``nbytes`` is 0 and no buffer exists yet.
        """
        # _key() inlined: this is every library call's path.
        key = (device.ordinal, stream) if stream != 2 else \
            (device.ordinal, (2, threading.get_ident()))
        buf = self._buffers.get(key)
        if buf is not None and buf.size >= nbytes:
            return buf
        if nbytes <= 0:
            return buf
        what = f"growing a library workspace to {nbytes} bytes"
        why = "the workspace is allocated and the smaller one freed synchronously"
        refuse_in_capture(what, why)
        refuse_if_capturing(stream, device, what, why)
        with self._lock:
            buf = self._buffers.get(key)
            if buf is not None and buf.size >= nbytes:
                return buf
            if buf is not None:
                _sync_raw(stream, device)
                buf.close()
                del self._buffers[key]
            while len(self._buffers) >= self.MAX:
                self._evict()
            # Round up so that a sequence of slightly growing requests does not reallocate
            # every time.
            size = max(nbytes, 1 << 20)
            size = (size + (1 << 20) - 1) & ~((1 << 20) - 1)
            buf = alloc(size, device)
            self._buffers[key] = buf
        return buf

    def _evict(self) -> None:
        """Free the buffer of the stream that got its buffer longest ago (under the lock).
        The handles bound to that stream are unbound first (they name the buffer, and the
        next call on the stream binds a new one); the stream may be gone (a framework
        destroyed it), so the whole device is waited for rather than the stream."""
        key, buf = next(iter(self._buffers.items()))
        del self._buffers[key]
        stream = key[1][0] if isinstance(key[1], tuple) else key[1]
        for cache in list(_caches):
            cache.forget_stream(stream)
        retired, self._retired = self._retired, []
        for old in retired + [buf]:
            # While another thread records a graph, waiting for the whole device is refused
            # (the capturing stream cannot be waited for); the buffer then waits for the end
            # of cudalibs' capture blocks, or for the next eviction.
            if not defer(self._retire, (old,)):
                self._retire(old)

    def _retire(self, buf: DeviceBuffer) -> None:
        """Free an evicted buffer once the device has finished the work queued before now; a
        capture in progress on the device keeps it for a later try."""
        try:
            buf.device.synchronize()
        except CudaError as exc:
            if exc.status not in _CAPTURE_CONFLICTS:
                raise
            self._retired.append(buf)
            return
        buf.close()

    def size(self, device: Device, stream: int) -> int:
        """Bytes held for (device, stream), 0 if none."""
        buf = self._buffers.get(_key(device, stream))
        return 0 if buf is None else buf.size

    def release(self, device: Device | None = None) -> None:
        """Free the buffers (of ``device`` only, if given) after synchronising their device."""
        with self._lock:
            keys = [k for k in self._buffers if device is None or k[0] == device.ordinal]
            for key in keys:
                buf = self._buffers.pop(key)
                buf.device.synchronize()
                buf.close()
            kept = [b for b in self._retired if device is not None and b.device != device]
            for buf in self._retired:
                if buf not in kept:
                    buf.device.synchronize()
                    buf.close()
            self._retired = kept

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


def refuse_if_capturing(stream: int, device: Device, what: str, why: str) -> None:
    """Raise :class:`~cudalibs.errors.CaptureError` naming ``what`` when raw stream ``stream``
    is capturing into a graph that cudalibs did not begin (a framework's ``torch.cuda.graph``):
    a synchronous allocation there fails and invalidates that capture, so it is refused first.
    A query the driver refuses (the legacy stream while another stream captures) counts as
    capturing."""
    L = _lib.get()
    L.cuCtxSetCurrent(device.raw_context)
    status = ctypes.c_int()
    st = L.cuStreamIsCapturing(ctypes.cast(ctypes.c_void_p(stream), _lib.CUstream),
                               ctypes.byref(status))
    if st or status.value != 0:
        raise CaptureError(f"{what} cannot be recorded into a CUDA graph, and the stream "
                           f"0x{stream:x} is capturing one: {why}; run the work once on this "
                           "stream before capturing (that makes handles and sizes "
                           "workspaces), then capture")


def _key(device: Device, stream: int):
    """A workspace's key: the per-thread default stream (2) is another stream in every
    thread, so each thread's gets a buffer of its own."""
    return (device.ordinal, stream if stream != 2 else (2, threading.get_ident()))


def _sync_raw(stream: int, device: Device) -> None:
    """Wait for the work queued on raw stream handle ``stream`` of ``device``."""
    L = _lib.get()
    L.cuCtxSetCurrent(device.raw_context)
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
_cache.RELEASE_HOOKS.append(_release_workspaces)
_cache.RELEASE_LAST.append(trim_pools)
