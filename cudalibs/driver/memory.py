"""Device memory, pinned host memory and stream-ordered memory pools.

Ownership follows STYLE.md: a buffer frees its memory on ``close()``, at the end of a ``with``
block, or when it is garbage collected (a ``weakref.finalize`` that captures the C function
and the raw pointer, never the object).  Finalizers do not run at interpreter exit: the driver
reclaims everything when the process ends, and skipping them avoids calling into a library
that may already be unloaded.

Stream-ordered buffers (from a :class:`MemoryPool`) remember the stream they were allocated
on and are freed on it, so a free never races work still queued there.

Stream-ordered blocks are recycled without the driver: a block of at most
:data:`CACHE_BLOCK_BYTES` freed on a stream cudalibs owns (or on the legacy default stream)
goes to a per-pool list for its stream and size class, and the next allocation of that class
on that stream takes it back.  Reuse on the same stream is ordered after every earlier use of
the block exactly as a driver free and allocation would be, and it saves two driver calls,
which for small and medium tensors cost more than the work.  Borrowed and per-thread default
streams are never cached (their lifetime or ordering is not known here), nor is anything while a
:func:`cudalibs.graph.capture` block is open (a graph must own the memory it allocates).
"""

from __future__ import annotations

import atexit
import ctypes
import weakref

import numpy as np

from .._ffi import Resource, refuse_in_capture
from ..errors import ClosedError, CudaLibsError
from . import _capture, _lib, device as _device_mod
from . import stream as _stream_mod
from ._core import raise_for
from .device import Device, as_device
from .stream import Stream, as_stream

__all__ = ["DeviceBuffer", "MemoryPool", "alloc", "alloc_async", "CACHE_BLOCK_BYTES",
           "check_nbytes", "is_pinned"]

# Sizes beyond this cannot be expressed in size_t arithmetic the driver does on them.
_MAX_BYTES = 2**62


def check_nbytes(nbytes, what: str = "size") -> int:
    """``nbytes`` as an int, checked to be a byte count; ``what`` names it in messages
    (``"alloc: nbytes"``)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)):
        raise TypeError(f"{what} must be an integer number of bytes, not "
                        f"{type(nbytes).__name__}")
    nbytes = int(nbytes)
    if nbytes < 0:
        raise ValueError(f"{what} must be non-negative, got {nbytes}")
    if nbytes > _MAX_BYTES:
        raise ValueError(f"{what} {nbytes} bytes is beyond any device's memory")
    return nbytes


def _free_sync(free, set_ctx, ctx, ptr):
    if _capture.defer(_free_sync, (free, set_ctx, ctx, ptr)):
        return
    set_ctx(ctx)
    free(ptr)


def _stream_capturing(L, stream_h) -> bool:
    """Whether the stream is capturing: its allocations are then the graph's memory."""
    status = ctypes.c_int()
    return not L.cuStreamIsCapturing(stream_h, ctypes.byref(status)) and \
        status.value == _lib.CU_STREAM_CAPTURE_STATUS_ACTIVE


def _free_async(free, set_ctx, ctx, ptr, stream_h, alive, null_stream, cache=None, key=None,
                graph_memory=False):
    if _capture.OPEN[0] and not graph_memory:
        # Memory allocated outside every capture must not be freed inside one: on the
        # capturing stream the free would become a node of the graph (freeing, at every
        # replay, memory the graph never allocated).  It waits for the capture's end.
        _capture.defer(_free_async, (free, set_ctx, ctx, ptr, stream_h, alive, null_stream,
                                     cache, key))
        return
    # Small blocks on a live stream go back to the pool's cache for that stream (see the
    # module docstring); the rest are freed.
    if cache is not None and alive[0] and not _capture.OPEN[0] and cache.put(key, ptr):
        return
    # A stream closed before the buffer: free on the legacy stream, which orders itself after
    # all blocking work of the context.
    # During a capture only a free on a live stream of our own is safe (on the capturing
    # stream it becomes a free node of the graph); anything else waits for the capture's end.
    if not (alive[0] and stream_h) and _capture.defer(
            _free_async, (free, set_ctx, ctx, ptr, stream_h, alive, null_stream)):
        return
    set_ctx(ctx)
    free(ptr, stream_h if alive[0] else null_stream)


#: id -> live :class:`_Release`; holding them here keeps their callbacks armed.
_releases: dict = {}
#: Set once the interpreter starts exiting: releases do nothing from then on, since the
#: driver reclaims everything at process end and may already be unloading.
_exiting = [False]
atexit.register(_exiting.__setitem__, 0, True)


def _fire(ref, _releases=_releases, _exiting=_exiting) -> None:
    # The registry and flag are bound as defaults: a buffer collected while the interpreter
    # tears this module down (its globals already None) must still find them.
    if _releases.pop(id(ref), None) is not None and not _exiting[0]:
        ref._fn(*ref._args)


class _Release(weakref.ref):
    """``weakref.finalize`` for device buffers at a fraction of its cost.

    Calls ``fn(*args)`` exactly once: when the buffer is garbage collected or when the
    release is called, whichever comes first, and never during interpreter exit.  It holds the
    C function and the raw pointer, never the buffer.  (``weakref.finalize`` keeps a registry
    object, an atexit flag and a counter per instance; on the allocation hot path that was a
    quarter of the whole cost of :func:`cudalibs.empty`.)
    """

    __slots__ = ("_fn", "_args")

    def __new__(cls, obj, fn, args):
        self = weakref.ref.__new__(cls, obj, _fire)
        self._fn = fn
        self._args = args
        _releases[id(self)] = self
        return self

    def __init__(self, obj, fn, args):   # weakref.ref's own __init__ takes no extra args
        pass

    @property
    def alive(self) -> bool:
        return id(self) in _releases

    def detach(self):
        """Disarm without calling; returns ``(fn, args)`` or None when already done."""
        if _releases.pop(id(self), None) is not None:
            return self._fn, self._args
        return None

    def __call__(self):
        if _releases.pop(id(self), None) is not None:
            return self._fn(*self._args)
        return None


#: Stream-ordered blocks up to this size are recycled by the pool's per-stream cache.
CACHE_BLOCK_BYTES = 32 << 20
#: Most blocks kept per (stream, size class); beyond it freed blocks go back to the driver.
#: Memory held here is returned when an allocation runs out of memory, by
#: :meth:`MemoryPool.trim` and by :meth:`MemoryPool.release_cached`.
_CACHE_DEPTH = 64


def _size_class(nbytes: int) -> int:
    """Round up to 512 bytes, then to a quarter of the power of two below (at most 25% over),
    so near sizes share blocks."""
    if nbytes <= 4096:
        return (nbytes + 511) & ~511
    q = 1 << (nbytes.bit_length() - 3)
    return (nbytes + q - 1) & ~(q - 1)


class _BlockCache:
    """The small-block cache of one :class:`MemoryPool`: ``(stream handle, size class) ->
    [device pointers]``.

    No lock: ``dict.get``/``setdefault`` and ``list.append``/``pop`` are atomic under the GIL,
    and a free may run from the garbage collector in the middle of an allocation on the same
    thread, where a lock would deadlock.
    """

    __slots__ = ("lists", "open")

    def __init__(self):
        self.lists: dict = {}
        self.open = True        # False once the pool is closed: frees then go to the driver

    def take(self, key):
        lst = self.lists.get(key)
        if lst:
            try:
                return lst.pop()
            except IndexError:  # another thread emptied it meanwhile
                pass
        return None

    def put(self, key, ptr) -> bool:
        if not self.open:
            return False
        lst = self.lists.get(key)
        if lst is None:
            lst = self.lists.setdefault(key, [])
        if len(lst) >= _CACHE_DEPTH:
            return False
        lst.append(ptr)
        return True

    @property
    def nbytes(self) -> int:
        return sum(key[1] * len(lst) for key, lst in list(self.lists.items()))

    def drain(self, stream_handle=None) -> list:
        """Remove and return ``[(stream handle, ptr), ...]`` for one stream or all."""
        out = []
        for key in list(self.lists):
            if stream_handle is not None and key[0] != stream_handle:
                continue
            lst = self.lists.get(key)
            while lst:
                try:
                    out.append((key[0], lst.pop()))
                except IndexError:
                    break
        return out


def _free_cached(cache, stream_handle, free) -> set:
    """Free a pool's cached blocks (of one raw stream handle, or all), each on its stream,
    with the pool's context current; returns the handles of the streams the frees were
    queued on."""
    blocks = cache.drain(stream_handle)
    if blocks:
        for handle, ptr in blocks:
            free(ptr, ctypes.cast(ctypes.c_void_p(handle), _lib.CUstream))
    return {handle for handle, _ in blocks}


def _destroy_pool(destroy, free, h, cache):
    """The release of a :class:`MemoryPool` (run by the lifetime base with the pool's context
    current, deferred while a capture is open)."""
    # Cached blocks are allocations the driver still counts: a pool destroyed with them would
    # keep its memory until the process ends.  Free them first (and refuse new ones).
    cache.open = False
    _free_cached(cache, None, free)
    destroy(h)


class DeviceBuffer:
    """Bytes of device memory, owned or borrowed.

    Create with :func:`alloc` (``cuMemAlloc``), :func:`alloc_async` / :meth:`MemoryPool.allocate`
    (stream-ordered), or :meth:`from_handle` to borrow memory someone else owns.

    Attributes
    ----------
    ptr : int
        Device address; raises :class:`~cudalibs.errors.ClosedError` after ``close()``.
    size : int
        Bytes.
    device : Device
    stream : Stream or None
        For stream-ordered buffers, the stream the free is queued on.
    """

    __slots__ = ("_ptr", "_size", "_device", "_stream", "_pool", "_owner", "_finalizer",
                 "__weakref__")

    def __init__(self):
        raise TypeError("use cudalibs.alloc(), alloc_async(), MemoryPool.allocate() or "
                        "DeviceBuffer.from_handle()")

    @classmethod
    def _make(cls, ptr, size, device, stream=None, pool=None, owner=None, finalizer=None):
        self = object.__new__(cls)
        self._ptr = ptr
        self._size = size
        self._device = device
        self._stream = stream
        self._pool = pool
        self._owner = owner
        self._finalizer = finalizer
        return self

    @classmethod
    def from_handle(cls, ptr: int, size: int, device=None, *, owner=None) -> "DeviceBuffer":
        """Borrow ``size`` bytes at device address ``ptr``; they are never freed here.

        ``owner`` is kept alive as long as the buffer (the object that owns the memory).
        """
        size = check_nbytes(size, "from_handle: size")
        if isinstance(ptr, bool) or not isinstance(ptr, int):
            raise TypeError(f"from_handle: ptr must be an int address, not {type(ptr).__name__}")
        if ptr < 0:
            raise ValueError(f"from_handle: ptr {ptr} is not a device address")
        return cls._make(ptr, size, as_device(device), owner=owner)

    @property
    def ptr(self) -> int:
        if self._ptr is None:
            raise ClosedError("device buffer is closed")
        return self._ptr

    handle = ptr

    @property
    def size(self) -> int:
        return self._size

    nbytes = size

    @property
    def device(self) -> Device:
        return self._device

    @property
    def stream(self) -> Stream | None:
        return self._stream

    @property
    def closed(self) -> bool:
        return self._ptr is None

    @property
    def owned(self) -> bool:
        """Whether this buffer frees its memory (``False`` for borrowed memory)."""
        return self._finalizer is not None

    def close(self, stream=None) -> None:
        """Free the memory (borrowed memory is only released). Idempotent.

        Parameters
        ----------
        stream : Stream, optional
            For stream-ordered buffers, free on this stream instead of the allocation stream
            (the caller vouches that all users of the memory are ordered before it).
        """
        if self._ptr is None:
            return
        fin = self._finalizer
        if fin is not None and fin.alive:
            if stream is not None and self._stream is not None:
                s = as_stream(stream, self._device)
                fin.detach()
                L = _lib.get()
                L.cuCtxSetCurrent(self._device._ctx)
                st = L.cuMemFreeAsync(self._ptr, s._h)
                if st:
                    raise_for(st, "cuMemFreeAsync")
            else:
                fin()
        self._ptr = None
        self._owner = None

    def __enter__(self) -> "DeviceBuffer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def as_array(self, shape=None, dtype=np.uint8, strides=None, offset: int = 0):
        """View the bytes as a :class:`~cudalibs.DeviceArray` (the whole buffer as uint8 by
        default); the array keeps the buffer alive."""
        if shape is None:
            shape = ((self._size - offset) // np.dtype(dtype).itemsize,)
        # DeviceArray lives in the layer above, which registers its constructor here.
        return BUFFER_VIEW[0](self, shape, dtype, strides, offset)

    def memset(self, value: int, stream=None) -> "DeviceBuffer":
        """Set every byte to ``value`` (0..255), queued on ``stream``."""
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"memset: value must be an int byte value, not "
                            f"{type(value).__name__}")
        if not 0 <= value <= 255:
            raise ValueError(f"memset: value must be 0..255, not {value}")
        ptr = self.ptr
        s = as_stream(stream, self._device)
        if self._size:
            L = _lib.get()
            L.cuCtxSetCurrent(self._device._ctx)
            st = L.cuMemsetD8Async(ptr, int(value), self._size, s._h)
            if st:
                raise_for(st, "cuMemsetD8Async")
        return self

    def copy_from(self, src, stream=None) -> "DeviceBuffer":
        """Copy all bytes from a host object with the buffer protocol, another buffer, or a
        C-contiguous device array (``__cuda_array_interface__``) of the same byte size.

        Host sources are read before the call returns (a pinned one is waited for)."""
        dst = self.ptr
        host = None
        if isinstance(src, DeviceBuffer):
            src_ptr, nbytes, src_dev = src.ptr, src._size, src._device
        elif hasattr(src, "__cuda_array_interface__"):
            src_ptr, nbytes = _cai_bytes(src.__cuda_array_interface__)
            src_dev = None
        else:
            try:
                host = np.frombuffer(memoryview(src).cast("B"), np.uint8)
            except TypeError:
                raise TypeError(f"copy_from: src must be a DeviceBuffer, a device array or a "
                                f"host buffer, not {type(src).__name__}") from None
        s = as_stream(stream, self._device)
        if host is not None:
            if host.nbytes != self._size:
                raise ValueError(f"copy_from: the source has {host.nbytes} bytes, the buffer "
                                 f"{self._size}")
            if self._size:
                L = _lib.get()
                L.cuCtxSetCurrent(self._device._ctx)
                st = L.cuMemcpyHtoDAsync_v2(dst, host.ctypes.data, self._size, s._h)
                if st:
                    raise_for(st, "cuMemcpyHtoDAsync_v2")
                # A pinned source is read asynchronously; the caller may reuse it on return.
                if is_pinned(host.ctypes.data):
                    _sync(s._h)
            return self
        if nbytes != self._size:
            raise ValueError(f"copy_from: the source has {nbytes} bytes, the buffer "
                             f"{self._size}")
        if self._size:
            L = _lib.get()
            L.cuCtxSetCurrent(self._device._ctx)
            if src_dev is None or src_dev is self._device:
                # Unified addressing: the driver finds the source's device from its address.
                st, fn = L.cuMemcpyDtoDAsync_v2(dst, src_ptr, self._size, s._h), \
                    "cuMemcpyDtoDAsync_v2"
            else:
                st, fn = L.cuMemcpyPeerAsync(dst, self._device._ctx, src_ptr, src_dev._ctx,
                                             self._size, s._h), "cuMemcpyPeerAsync"
            if st:
                raise_for(st, fn)
        return self

    def copy_to(self, dst=None, stream=None):
        """Copy all bytes to ``dst`` (a writable host buffer-protocol object, or a new
        ``bytes``-like numpy uint8 array when omitted) and return it."""
        ptr = self.ptr
        s = as_stream(stream, self._device)
        out = (np.empty(self._size, np.uint8) if dst is None
               else np.frombuffer(memoryview(dst).cast("B"), np.uint8))
        if out.nbytes != self._size:
            raise ValueError(f"copy_to: the destination has {out.nbytes} bytes, the buffer "
                             f"{self._size}")
        if not out.flags.writeable:
            raise ValueError("copy_to: the destination is read-only")
        if self._size:
            L = _lib.get()
            L.cuCtxSetCurrent(self._device._ctx)
            st = L.cuMemcpyDtoHAsync_v2(out.ctypes.data, ptr, self._size, s._h)
            if st:
                raise_for(st, "cuMemcpyDtoHAsync_v2")
            _sync(s._h)
        return out

    def __int__(self) -> int:
        return self.ptr

    def __repr__(self) -> str:
        if self._ptr is None:
            return f"<DeviceBuffer closed, {self._size} bytes on device {self._device.ordinal}>"
        kind = "stream-ordered" if self._stream is not None else (
            "owned" if self._finalizer is not None else "borrowed")
        return (f"<DeviceBuffer 0x{self._ptr:x}, {self._size} bytes on device "
                f"{self._device.ordinal}, {kind}>")


#: ``[view(buffer, shape, dtype, strides, offset)]``: what :meth:`DeviceBuffer.as_array`
#: builds, registered by :mod:`cudalibs.driver.array` (``DeviceArray.from_buffer``), which
#: imports this module, not the other way round.
BUFFER_VIEW: list = []


def _cai_bytes(cai: dict) -> tuple[int, int]:
    """``(address, byte size)`` of a C-contiguous ``__cuda_array_interface__``."""
    try:
        shape, typestr, data = tuple(cai["shape"]), cai["typestr"], cai["data"]
    except (KeyError, TypeError):
        raise TypeError("copy_from: the source's __cuda_array_interface__ lacks shape, "
                        "typestr or data") from None
    itemsize = np.dtype(typestr).itemsize
    strides = cai.get("strides")
    n = itemsize
    for dim in shape:
        n *= dim
    if strides is not None and n:
        expect, acc = [], itemsize
        for dim in reversed(shape):
            expect.append(acc)
            acc *= dim
        if tuple(st for dim, st in zip(shape, strides) if dim > 1) != tuple(
                st for dim, st in zip(shape, reversed(expect)) if dim > 1):
            raise ValueError("copy_from needs a C-contiguous device array")
    return int(data[0] or 0), n


def _sync(stream_h) -> None:
    st = _lib.get().cuStreamSynchronize(stream_h)
    if st:
        raise_for(st, "cuStreamSynchronize")


def is_pinned(ptr: int) -> bool:
    """Whether a host address is page-locked (ours, PyTorch's, CuPy's or registered)."""
    kind = ctypes.c_uint()
    st = _lib.get().cuPointerGetAttribute(ctypes.byref(kind),
                                          _lib.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
    return st == 0 and kind.value == _lib.CU_MEMORYTYPE_HOST


def alloc(nbytes: int, device=None) -> DeviceBuffer:
    """Allocate ``nbytes`` of device memory with ``cuMemAlloc`` (synchronous).

    Raises
    ------
    CudaOutOfMemoryError
        The device cannot satisfy the request; the process and later allocations are fine.
    """
    nbytes = check_nbytes(nbytes, "alloc: nbytes")
    dev = as_device(device)
    if nbytes == 0:
        return DeviceBuffer._make(0, 0, dev)
    refuse_in_capture(f"cudalibs.alloc({nbytes}) (cuMemAlloc, synchronous)",
                      "allocate with cudalibs.empty(..., stream=) instead, or before the capture")
    L = _lib.get()
    L.cuCtxSetCurrent(dev._ctx)
    p = _lib.CUdeviceptr()
    st = L.cuMemAlloc_v2(ctypes.byref(p), nbytes)
    if st:
        raise_for(st, "cuMemAlloc_v2", f"requested {nbytes} bytes on device {dev.ordinal}")
    buf = DeviceBuffer._make(p.value, nbytes, dev)
    buf._finalizer = _Release(buf, _free_sync, (L.cuMemFree_v2, L.cuCtxSetCurrent, dev._ctx,
                                                p.value))
    return buf


class MemoryPool(Resource):
    """A stream-ordered memory pool (``cuMemPoolCreate``) on one device.

    Allocation and free are queued on a stream and served from memory the pool keeps, so
    repeated allocation costs no system call.  ``Device(n).memory_pool`` is the pool cudalibs
    arrays use; a separate pool isolates a workload's memory and its statistics.

    Parameters
    ----------
    device : Device or int, optional
    release_threshold : int or None
        Bytes the pool keeps cached when idle; ``None`` keeps everything (as PyTorch's and
        CuPy's caching allocators do) until :meth:`trim`.
    max_size : int, default 0
        Upper bound of the pool's memory (0: no bound).
    """

    __slots__ = ("_h", "_device", "_cache")

    def __init__(self, device=None, *, release_threshold: int | None = None, max_size: int = 0):
        dev = as_device(device)
        L = _lib.get()
        L.cuCtxSetCurrent(dev._ctx)
        props = _lib.CUmemPoolProps()
        props.allocType = _lib.CU_MEM_ALLOCATION_TYPE_PINNED
        props.location.type = _lib.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = dev.ordinal
        props.maxSize = check_nbytes(max_size)
        h = _lib.CUmemoryPool()
        st = L.cuMemPoolCreate(ctypes.byref(h), ctypes.byref(props))
        if st:
            raise_for(st, "cuMemPoolCreate")
        self._h = h
        self._device = dev
        self._cache = _BlockCache()
        self._own(_destroy_pool, L.cuMemPoolDestroy, L.cuMemFreeAsync, h, self._cache,
                  ctx=dev._ctx)
        _pools.add(self)
        try:
            self.release_threshold = release_threshold
        except BaseException:
            Resource.close(self)
            raise

    def _check(self):
        self._live()
        return self._h

    @property
    def device(self) -> Device:
        return self._device

    @property
    def handle(self) -> int:
        return ctypes.cast(self._check(), ctypes.c_void_p).value or 0

    def _attr(self, attr: int) -> int:
        v = ctypes.c_uint64()
        st = _lib.get().cuMemPoolGetAttribute(self._check(), attr, ctypes.byref(v))
        if st:
            raise_for(st, "cuMemPoolGetAttribute")
        return v.value

    @property
    def release_threshold(self) -> int:
        return self._attr(_lib.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)

    @release_threshold.setter
    def release_threshold(self, value: int | None) -> None:
        v = ctypes.c_uint64(2**64 - 1 if value is None else check_nbytes(value))
        st = _lib.get().cuMemPoolSetAttribute(self._check(), _lib.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                             ctypes.byref(v))
        if st:
            raise_for(st, "cuMemPoolSetAttribute")

    @property
    def used_bytes(self) -> int:
        """Bytes currently allocated from the pool."""
        return self._attr(_lib.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)

    @property
    def reserved_bytes(self) -> int:
        """Bytes the pool holds from the device (allocated plus cached)."""
        return self._attr(_lib.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)

    @property
    def used_high_bytes(self) -> int:
        return self._attr(_lib.CU_MEMPOOL_ATTR_USED_MEM_HIGH)

    @property
    def reserved_high_bytes(self) -> int:
        return self._attr(_lib.CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)

    def trim(self, keep: int = 0) -> None:
        """Return cached memory to the device, keeping at least ``keep`` bytes reserved.

        Frees queued on streams count only once they have executed: synchronize first to
        return everything.  Small blocks held for reuse (:meth:`release_cached`) are freed
        first, and waited for, since only executed frees can be returned.
        """
        self._release_and_wait()
        st = _lib.get().cuMemPoolTrimTo(self._check(), check_nbytes(keep))
        if st:
            raise_for(st, "cuMemPoolTrimTo")

    def allocate(self, nbytes: int, stream=None) -> DeviceBuffer:
        """Queue an allocation of ``nbytes`` on ``stream`` (the current stream by default).

        The memory may be used by work queued on that stream after this call (or on another
        stream once it waits on an event recorded after it); it is freed on the same stream.
        """
        nbytes = check_nbytes(nbytes)
        self._check()
        dev = self._device
        s = as_stream(stream, dev)
        if nbytes == 0:
            return DeviceBuffer._make(0, 0, dev, stream=s, pool=self)
        return self._allocate(nbytes, s)

    def _allocate(self, nbytes: int, s: Stream) -> DeviceBuffer:
        """:meth:`allocate` after its checks: ``nbytes > 0``, ``s`` live and usable here."""
        dev = self._device
        L = _lib.get()
        cache = key = ptr = None
        size = nbytes
        if nbytes <= CACHE_BLOCK_BYTES and (s._owned or s._handle == 0) \
                and not _capture.OPEN[0]:
            cache = self._cache
            size = _size_class(nbytes)
            key = (s._handle, size)
            ptr = cache.take(key)
        if ptr is None:
            L.cuCtxSetCurrent(dev._ctx)
            p = _lib.CUdeviceptr()
            st = L.cuMemAllocFromPoolAsync(ctypes.byref(p), size, self._check(), s._h)
            if st == _lib.CUDA_ERROR_OUT_OF_MEMORY and self._cache.lists:
                # Cached blocks are free memory the driver cannot see: give them back, wait
                # for those frees (other streams' count only once executed), retry.
                self._release_and_wait()
                L.cuCtxSetCurrent(dev._ctx)
                st = L.cuMemAllocFromPoolAsync(ctypes.byref(p), size, self._h, s._h)
            if st:
                raise_for(st, "cuMemAllocFromPoolAsync",
                          f"requested {nbytes} bytes on device {dev.ordinal}")
            ptr = p.value
        buf = DeviceBuffer._make(ptr, nbytes, dev, stream=s, pool=self)
        buf._finalizer = _Release(buf, _free_async, (
            L.cuMemFreeAsync, L.cuCtxSetCurrent, dev._ctx, ptr, s._h, s._alive, _NULL_STREAM,
            cache, key, bool(_capture.OPEN[0]) and _stream_capturing(L, s._h)))
        return buf

    @property
    def cached_bytes(self) -> int:
        """Bytes of small freed blocks held for reuse on their streams (counted in
        :attr:`used_bytes`, since the driver sees them as allocated)."""
        return self._cache.nbytes

    def release_cached(self, stream=None) -> None:
        """Free the small blocks held for reuse (all, or those of one stream) to the pool.

        Each is freed on the stream it was last used on, so this is safe at any time.
        """
        self._release(None if stream is None else as_stream(stream)._handle)

    def _release_and_wait(self) -> None:
        """Free every cached block and wait for the frees (they count only once executed)."""
        L = _lib.get()
        for handle in self._release(None):
            st = L.cuStreamSynchronize(ctypes.cast(ctypes.c_void_p(handle), _lib.CUstream))
            if st:
                raise_for(st, "cuStreamSynchronize")

    def _release(self, stream_handle) -> set:
        """Free the cached blocks (of one raw stream handle, or all); returns the handles of
        the streams the frees were queued on."""
        if not self._cache.lists:
            return set()
        L = _lib.get()
        L.cuCtxSetCurrent(self._device._ctx)
        return _free_cached(self._cache, stream_handle, L.cuMemFreeAsync)

    def close(self) -> None:
        """Destroy the pool.

        Raises
        ------
        CudaLibsError
            Buffers allocated from the pool are still alive (the pool would free them).
        """
        if self.closed:
            return
        if _capture.OPEN[0]:
            # No pool query is allowed while a stream captures: the destroy waits for the
            # block's end, and frees the cached blocks then.
            Resource.close(self)
            return
        self._release_and_wait()
        used = self.used_bytes
        if used:
            raise CudaLibsError(f"memory pool still has {used} bytes allocated; close those "
                                "buffers (and synchronize their streams) first")
        Resource.close(self)

    def __repr__(self) -> str:
        if self.closed:
            return f"<MemoryPool closed on device {self._device.ordinal}>"
        return (f"<MemoryPool on device {self._device.ordinal}: {self.used_bytes} bytes used "
                f"({self.cached_bytes} cached for reuse), {self.reserved_bytes} reserved>")


_NULL_STREAM = _lib.CUstream()
_pools: "weakref.WeakSet[MemoryPool]" = weakref.WeakSet()


def _stream_destroyed(handle: int) -> None:
    """Before a stream is destroyed, free the blocks cached for it (on it)."""
    for pool in list(_pools):
        if not pool.closed:
            pool._release(handle)


def trim_pools() -> None:
    """Free every live pool's cached blocks and return its idle memory to the device (run by
    :func:`cudalibs.release_all`)."""
    for pool in list(_pools):
        if not pool.closed:
            pool.trim()


# Runs after the hooks registered before it (library workspaces freed on their streams),
# since the blocks those frees return are among what it trims.
_stream_mod.DESTROY_HOOKS.append(_stream_destroyed)
# The device's own pool is made here, where MemoryPool lives (the device layer sits below).
_device_mod.POOL_FACTORY.append(lambda dev: MemoryPool(dev, release_threshold=None))


def alloc_async(nbytes: int, stream=None, device=None) -> DeviceBuffer:
    """Stream-ordered allocation from the device's pool (see :meth:`MemoryPool.allocate`)."""
    nbytes = check_nbytes(nbytes, "alloc_async: nbytes")
    if device is None:
        s = as_stream(stream)
        dev = s.device or as_device(None)
    else:
        dev = as_device(device)
    return dev.memory_pool.allocate(nbytes, stream)
