"""Streams and events.

Every cudalibs operation takes ``stream=None``, meaning the calling thread's *current* stream:
the innermost ``with stream:`` block, else the legacy default stream (handle 0, the one PyTorch
and CuPy use by default, which orders itself with every blocking stream of its context).

Streams interoperate both ways through the ``__cuda_stream__`` protocol: ``Stream.from_handle``
wraps a raw ``CUstream`` (or anything with ``__cuda_stream__``, a PyTorch or CuPy stream) without
taking ownership, and every :class:`Stream` exposes ``__cuda_stream__``.
"""

from __future__ import annotations

import collections
import ctypes
import threading

from .._ffi import Resource, refuse_in_capture
from ..errors import ClosedError
from . import _lib
from ._core import raise_for, ready
from .device import Device, as_device

__all__ = ["Stream", "Event", "current_stream", "default_stream", "as_stream", "order_before",
           "hold_until_done"]

#: Per thread: ``streams``, the stack of streams made current by ``with stream:`` blocks
#: (read by the launch path of :mod:`cudalibs.driver.launch` without a call).
thread_streams = threading.local()

#: Called with the raw handle (int) of an owned stream just before it is destroyed, with the
#: stream's context current: per-stream state kept elsewhere (the memory pools' cached blocks,
#: library workspaces and handle bindings) is released here, stream-ordered where it can be,
#: so the work already queued on the stream finishes first.
DESTROY_HOOKS: list = []


def _destroy_stream(destroy, h, raw, alive):
    """The release of an owned stream (run by the lifetime base, deferred while a capture is
    open, with the stream's context current)."""
    alive[0] = False
    for hook in DESTROY_HOOKS:
        try:
            hook(raw)
        except Exception:   # noqa: BLE001 - the stream must still be destroyed
            pass
    destroy(h)


class _StreamFields(Resource):
    """The fields of a :class:`Stream` (a Stream refuses writes to its public ones)."""

    __slots__ = ("_h", "_handle", "_device", "_owner", "_alive", "_owned")


#: The public names of :class:`Stream`'s fields (read at slot speed, never written).
_PUBLIC_FIELDS = {"raw": "_h", "raw_handle": "_handle", "device": "_device", "owned": "_owned"}


class Stream(_StreamFields):
    """A CUDA stream: an ordered queue of device work.

    Parameters
    ----------
    device : Device or int, optional
        Device whose primary context owns the stream; the current device by default.
    non_blocking : bool, default True
        Create with ``CU_STREAM_NON_BLOCKING``, so the stream does not wait on the legacy default
        stream (what PyTorch and CuPy streams do).
    priority : int, default 0
        Lower numbers are higher priority; clamped by the driver to its supported range
        (see :meth:`priority_range`).

    Attributes
    ----------
    device : Device or None
        The owning device; ``None`` for a default stream (it belongs to whichever device an
        operation runs on).
    owned : bool
        Whether this object destroys the stream (``False`` for wrapped foreign streams and
        the default streams).
    raw : CUstream
        The ctypes handle, unchecked: what the libraries pass to C after taking the stream
        through :func:`as_stream`, which checked it is open.
    raw_handle : int
        Its value (0 for the legacy default stream), unchecked; :attr:`handle` checks.

    ``device``, ``owned``, ``raw`` and ``raw_handle`` cost one slot read each and are
    read-only.

    Notes
    -----
    ``with stream:`` makes the stream current on this thread for the block. ``close()``
    destroys it (work already queued still runs); a closed stream raises
    :class:`~cudalibs.errors.ClosedError` on use.
    """

    __slots__ = ()

    def __setattr__(self, name, value):
        if name in _PUBLIC_FIELDS:
            raise AttributeError(f"Stream.{name} is read-only")
        object.__setattr__(self, name, value)

    def __init__(self, device=None, *, non_blocking: bool = True, priority: int = 0):
        dev = as_device(device)
        L = _lib.get()
        L.cuCtxSetCurrent(dev._ctx)
        h = _lib.CUstream()
        flags = _lib.CU_STREAM_NON_BLOCKING if non_blocking else _lib.CU_STREAM_DEFAULT
        st = L.cuStreamCreateWithPriority(ctypes.byref(h), flags, int(priority))
        if st:
            raise_for(st, "cuStreamCreateWithPriority")
        self._h = h
        self._handle = ctypes.cast(h, ctypes.c_void_p).value or 0
        self._device = dev
        self._owner = None
        # The liveness cell of the hot paths (one list index): buffers freed on this stream
        # read it, so a free after close() falls back to the legacy stream instead of using a
        # destroyed handle, and launches check it without a property call.
        self._alive = [True]
        self._owned = True
        self._own(_destroy_stream, L.cuStreamDestroy_v2, h, self._handle, self._alive,
                  ctx=dev._ctx)

    @classmethod
    def _wrap(cls, handle: int, device, owner) -> "Stream":
        # Filled as the bare fields class (no __setattr__ guard), then made a Stream.
        self = object.__new__(_StreamFields)
        self._h = ctypes.cast(ctypes.c_void_p(handle), _lib.CUstream)
        self._handle = handle
        self._device = device
        self._owner = owner
        self._alive = [True]
        self._owned = False
        self._borrow()
        self.__class__ = cls
        return self

    @classmethod
    def from_handle(cls, handle, device=None, *, owner=None) -> "Stream":
        """Wrap an existing stream without taking ownership (it is never destroyed here).

        Parameters
        ----------
        handle : int or object
            A raw ``CUstream``/``cudaStream_t`` value, or any object with ``__cuda_stream__``
            (cuda.core), a ``cuda_stream`` attribute (PyTorch) or a ``ptr`` attribute (CuPy).
            0 is the legacy default stream, 2 the per-thread default stream.
        device : Device or int, optional
            The stream's device. Found from the driver when omitted (and for handle 0 it is
            whichever device an operation runs on).
        owner : object, optional
            Kept alive as long as the returned Stream (the foreign stream object).
        """
        return cls._foreign(handle, device, owner, "from_handle: handle")

    @classmethod
    def _foreign(cls, handle, device, owner, what: str) -> "Stream":
        """:meth:`from_handle`, naming the argument ``what`` in messages."""
        if not isinstance(handle, int):
            obj = handle
            handle = _handle_of(obj, what)
            if owner is None:
                owner = obj
        if handle < 0:
            raise ValueError(f"{what} {handle} is not a stream handle")
        if handle in (0, 1):  # CAI and DLPack spell the legacy default stream 1
            return default_stream() if device is None else cls._wrap(0, as_device(device), owner)
        if device is None and handle != 2:
            device = _device_of_stream(handle)
        return cls._wrap(handle, None if device is None else as_device(device), owner)

    # -- state ------------------------------------------------------------------------------
    @property
    def handle(self) -> int:
        """The raw ``CUstream`` value (0 for the legacy default stream)."""
        if not self._alive[0]:
            self._live()
        return self._handle

    @property
    def closed(self) -> bool:
        """Whether the stream was closed (or, for an owned stream, collected); one list read,
        cheap enough for every call of a library's hot path."""
        return not self._alive[0]

    @property
    def is_default(self) -> bool:
        """Whether this is the legacy (0) or per-thread (2) default stream."""
        return self._handle in (0, 2)

    def close(self) -> None:
        """Destroy the stream (if owned); work already queued still runs. Idempotent.

        Per-stream state (cached memory blocks, library workspaces and handle bindings) is
        released first.  The stream is unusable at once, also inside a capture block, where
        the destroy itself waits for the block's end.
        """
        self._alive[0] = False
        self._owner = None
        Resource.close(self)

    def _check(self):
        if not self._alive[0]:
            raise ClosedError("Stream is closed")
        return self._h

    def _activate(self) -> None:
        if self._device is not None:
            _lib.get().cuCtxSetCurrent(self._device._ctx)

    # -- operations -------------------------------------------------------------------------
    def sync(self) -> None:
        """Block until all work queued on the stream has finished."""
        refuse_in_capture("Stream.synchronize()", "a graph cannot wait on the host")
        h = self._check()
        self._activate()
        st = _lib.get().cuStreamSynchronize(h)
        if st:
            raise_for(st, "cuStreamSynchronize")

    synchronize = sync

    def query(self) -> bool:
        """``True`` when all queued work has finished (never blocks)."""
        h = self._check()
        self._activate()
        return ready(_lib.get().cuStreamQuery(h), "cuStreamQuery")

    def wait(self, event_or_stream) -> "Stream":
        """Make future work on this stream wait for an :class:`Event` (or for everything
        queued so far on another stream). Does not block the host."""
        h = self._check()
        if isinstance(event_or_stream, Event):
            event = event_or_stream
        else:
            other = as_stream(event_or_stream)
            event = Event(other._device or self._device, timing=False)
            event.record(other)
        self._activate()
        st = _lib.get().cuStreamWaitEvent(h, event._check(), 0)
        if st:
            raise_for(st, "cuStreamWaitEvent")
        return self

    def record(self, event: "Event | None" = None) -> "Event":
        """Record ``event`` (a new timing-disabled one if omitted) at this point of the stream."""
        if event is None:
            event = Event(self._device, timing=False)
        return event.record(self)

    @property
    def priority(self) -> int:
        h = self._check()
        v = ctypes.c_int()
        st = _lib.get().cuStreamGetPriority(h, ctypes.byref(v))
        if st:
            raise_for(st, "cuStreamGetPriority")
        return v.value

    @property
    def non_blocking(self) -> bool:
        h = self._check()
        v = ctypes.c_uint()
        st = _lib.get().cuStreamGetFlags(h, ctypes.byref(v))
        if st:
            raise_for(st, "cuStreamGetFlags")
        return bool(v.value & _lib.CU_STREAM_NON_BLOCKING)

    @staticmethod
    def priority_range(device=None) -> tuple[int, int]:
        """``(least, greatest)`` priority; greatest is the most urgent (numerically lowest)."""
        dev = as_device(device)
        L = _lib.get()
        L.cuCtxSetCurrent(dev._ctx)
        lo, hi = ctypes.c_int(), ctypes.c_int()
        st = L.cuCtxGetStreamPriorityRange(ctypes.byref(lo), ctypes.byref(hi))
        if st:
            raise_for(st, "cuCtxGetStreamPriorityRange")
        return lo.value, hi.value

    # -- protocols --------------------------------------------------------------------------
    def __cuda_stream__(self) -> tuple[int, int]:
        """The cuda.core stream protocol: ``(version, handle)``."""
        return (0, self.handle)

    def __enter__(self) -> "Stream":
        self._check()
        stack = getattr(thread_streams, "streams", None)
        if stack is None:
            stack = thread_streams.streams = []
        stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        thread_streams.streams.pop()

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other._handle == self._handle and (
            self._handle in (0, 2) or other._device is self._device)

    def __hash__(self) -> int:
        return hash(self._handle)

    def __repr__(self) -> str:
        if self._handle == 0:
            what = "legacy default stream"
        elif self._handle == 2:
            what = "per-thread default stream"
        else:
            what = f"0x{self._handle:x}"
        dev = "" if self._device is None else f" on device {self._device.ordinal}"
        state = " (closed)" if not self._alive[0] else ""
        owned = "" if self._owned or self._handle in (0, 2) else " borrowed"
        return f"<Stream{owned} {what}{dev}{state}>"


def _handle_of(obj, what: str) -> int:
    proto = getattr(obj, "__cuda_stream__", None)
    if proto is not None:
        version, handle = proto() if callable(proto) else proto
        return int(handle)
    for attr in ("cuda_stream", "ptr", "handle"):  # PyTorch, CuPy, cuda-bindings
        v = getattr(obj, attr, None)
        if isinstance(v, int):
            return v
    raise TypeError(f"{what} is a {type(obj).__name__}, not a stream: it has no "
                    "__cuda_stream__, cuda_stream or ptr")


def _device_of_stream(handle: int) -> Device | None:
    """The device of a foreign stream, or None while it is capturing: the driver refuses a
    device query on a capturing stream, and the refusal invalidates the capture (a
    framework's ``torch.cuda.graph``), so the operation's own device stands in."""
    L = _lib.get()
    h = ctypes.cast(ctypes.c_void_p(handle), _lib.CUstream)
    status = ctypes.c_int()
    if not L.cuStreamIsCapturing(h, ctypes.byref(status)) and \
            status.value == _lib.CU_STREAM_CAPTURE_STATUS_ACTIVE:
        return None
    if L.cuStreamGetDevice:
        dev = _lib.CUdevice()
        st = L.cuStreamGetDevice(h, ctypes.byref(dev))
        if st:
            raise_for(st, "cuStreamGetDevice")
        return Device(dev.value)
    ctx = _lib.CUcontext()
    st = L.cuStreamGetCtx(h, ctypes.byref(ctx))
    if st:
        raise_for(st, "cuStreamGetCtx")
    addr = ctypes.cast(ctx, ctypes.c_void_p).value
    for i in range(Device.count()):
        if Device(i).context == addr:
            return Device(i)
    raise ValueError(f"stream 0x{handle:x} belongs to a context that is not a primary context; "
                     "pass device= explicitly")


_default = None


def default_stream() -> Stream:
    """The legacy default stream (handle 0), usable on any device."""
    global _default
    if _default is None:
        _default = Stream._wrap(0, None, None)
    return _default


def current_stream() -> Stream:
    """The calling thread's current stream: the innermost ``with stream:``, else the legacy
    default stream."""
    stack = getattr(thread_streams, "streams", None)
    if stack:
        return stack[-1]
    return default_stream()


def as_stream(stream, device: Device | None = None, *, what: str = "as_stream: stream"
              ) -> Stream:
    """Resolve a ``stream=`` argument and check it may be used with ``device``.

    ``what`` names the argument in messages, as the caller's own messages do
    (``"capture: stream"``).  None is the current stream.

    Raises
    ------
    ValueError
        The stream belongs to another device.
    ClosedError
        The stream was closed.
    """
    if stream is None:
        stack = getattr(thread_streams, "streams", None)
        s = stack[-1] if stack else default_stream()
    elif type(stream) is Stream:
        s = stream
    else:
        s = Stream._foreign(stream, None, None, what)
    if not s._alive[0]:
        raise ClosedError("Stream is closed")
    if device is not None and s._device is not None and s._device is not device:
        raise ValueError(f"stream is on device {s._device.ordinal} but the data is on device "
                         f"{device.ordinal}")
    return s


for _public, _private in _PUBLIC_FIELDS.items():
    setattr(Stream, _public, _StreamFields.__dict__[_private])
del _public, _private


class Event(Resource):
    """A marker in a stream, for ordering and timing.

    Parameters
    ----------
    device : Device or int, optional
        The current device by default.
    timing : bool, default True
        Record timestamps (needed for :meth:`elapsed_ms`; slightly costlier).
    blocking : bool, default False
        :meth:`sync` yields the CPU instead of spinning.
    """

    __slots__ = ("_h", "_device", "_recorded")

    def __init__(self, device=None, *, timing: bool = True, blocking: bool = False):
        dev = as_device(device)
        L = _lib.get()
        L.cuCtxSetCurrent(dev._ctx)
        flags = (0 if timing else _lib.CU_EVENT_DISABLE_TIMING) | (
            _lib.CU_EVENT_BLOCKING_SYNC if blocking else 0)
        h = _lib.CUevent()
        st = L.cuEventCreate(ctypes.byref(h), flags)
        if st:
            raise_for(st, "cuEventCreate")
        self._h = h
        self._device = dev
        self._recorded = False
        self._own(L.cuEventDestroy_v2, h, ctx=dev._ctx)

    def _check(self):
        self._live()
        return self._h

    @property
    def handle(self) -> int:
        return ctypes.cast(self._check(), ctypes.c_void_p).value or 0

    @property
    def device(self) -> Device:
        return self._device

    def record(self, stream=None) -> "Event":
        """Record the event on ``stream`` (the current stream by default); returns self."""
        h = self._check()
        s = as_stream(stream, self._device)
        L = _lib.get()
        L.cuCtxSetCurrent(self._device._ctx)
        st = L.cuEventRecord(h, s._h)
        if st:
            raise_for(st, "cuEventRecord")
        self._recorded = True
        return self

    def sync(self) -> None:
        """Block until the work before the recorded point has finished."""
        refuse_in_capture("Event.synchronize()", "a graph cannot wait on the host")
        h = self._check()
        _lib.get().cuCtxSetCurrent(self._device._ctx)
        st = _lib.get().cuEventSynchronize(h)
        if st:
            raise_for(st, "cuEventSynchronize")

    synchronize = sync

    def query(self) -> bool:
        """``True`` when the recorded work has finished (never blocks)."""
        h = self._check()
        return ready(_lib.get().cuEventQuery(h), "cuEventQuery")

    def elapsed_ms(self, end: "Event") -> float:
        """Milliseconds from this event to ``end`` (both recorded and complete).

        ``start.elapsed_ms(end)``, or ``Event.elapsed_ms(start, end)``.
        """
        if not isinstance(end, Event):
            raise TypeError(f"end must be an Event, not {type(end).__name__}")
        if not (self._recorded and end._recorded):
            raise ValueError("both events must be recorded before timing them")
        ms = ctypes.c_float()
        L = _lib.get()
        L.cuCtxSetCurrent(self._device._ctx)
        st = L.cuEventElapsedTime_v2(ctypes.byref(ms), self._check(), end._check())
        if st:
            raise_for(st, "cuEventElapsedTime_v2",
                      "events created with timing=False cannot be timed" if st == 400 else None)
        return ms.value

    def __sub__(self, start: "Event") -> float:
        """``end - start`` is the elapsed time in milliseconds."""
        return start.elapsed_ms(self)

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("recorded" if self._recorded else "not recorded")
        return f"<Event on device {self._device.ordinal}, {state}>"


# -- ordering helpers of the array layer -----------------------------------------------------
_pending: collections.deque = collections.deque()
_pending_lock = threading.Lock()


def hold_until_done(obj, s: Stream, device: Device) -> None:
    """Keep ``obj`` alive until the work queued so far on ``s`` has run."""
    with _pending_lock:
        while _pending and _pending[0][0].query():
            _pending.popleft()
        _pending.append((Event(device, timing=False).record(s), obj))


def order_before(producer: Stream, consumer, device: Device) -> None:
    """Make the consumer's stream (a raw handle or stream object) wait for the producer's
    queued work, unless both are the same stream."""
    if isinstance(consumer, int):
        cons_handle = 0 if consumer in (0, 1) else consumer
    else:
        cons_handle = Stream.from_handle(consumer)._handle
    if cons_handle == producer._handle:
        return
    if producer._handle == 0 and cons_handle == 0:
        return
    ev = Event(device, timing=False)
    ev.record(producer)
    L = _lib.get()
    L.cuCtxSetCurrent(device._ctx)
    h = ctypes.cast(ctypes.c_void_p(cons_handle), _lib.CUstream)
    st = L.cuStreamWaitEvent(h, ev._h, 0)
    if st:
        raise_for(st, "cuStreamWaitEvent")
