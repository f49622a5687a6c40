"""NCCL communicators and their collectives.

Design
------
* :class:`Communicator` owns one ``ncclComm_t``.  Its lifetime is explicit: ``close()``
  (``ncclCommFinalize`` + ``ncclCommDestroy``) or ``abort()`` (``ncclCommAbort``).  Its
  finalizer (the :class:`~cudalibs._ffi.Resource` one, so it shares the capture deferral and
  the interpreter-exit rule of every handle owner) only *warns* about a communicator nobody
  closed: destroying one waits for its peers, and the garbage collector may run in any thread
  at any moment, where a blocking collective teardown could deadlock the program.
* How the ranks agree on the communicator's :class:`~cudalibs.nccl.UniqueId` (a store, MPI)
  is :mod:`cudalibs.nccl.bootstrap`; group calls are :mod:`cudalibs.nccl.group`.
* Non-blocking mode (``blocking=False``) makes every NCCL call return at once; cudalibs then
  polls ``ncclCommGetAsyncError`` until the call has finished, and past ``timeout`` seconds
  aborts the communicator and raises :class:`NcclTimeoutError`, so a peer that died or never
  arrived ends in an exception instead of a hung process.
* Collectives take :class:`~cudalibs.DeviceArray` or any ``__cuda_array_interface__`` /
  DLPack array, through the driver's one operand path: C-contiguous only (NCCL addresses
  memory as one flat run of elements), on the communicator's device.  Every argument is
  checked before NCCL is called.  ``out=None`` allocates the result stream-ordered;
  ``out=x`` with ``x`` the input runs in place.
* Nothing is kept per stream: a collective passes its stream's handle to NCCL and keeps no
  reference to it, so a stream made per request can be closed right after its work.
"""

from __future__ import annotations

import ctypes
import time
import warnings

import numpy as np

from .._ffi import Resource
from ..driver.args import sequence
from ..driver.device import Device, as_device
from ..driver.stream import as_stream
from ..errors import ClosedError, CudaLibsError, NcclError
from . import _base, _lib, bootstrap
from ._base import IN_PROGRESS as _IN_PROGRESS
from ._base import NcclTimeoutError, raise_for
from ._base import abort_raw as _abort_raw
from ._base import check_int as _check_int
from ._base import check_ranks as _check_ranks
from ._base import check_timeout as _check_timeout
from ._base import comm_last_error as _last_error
from ._base import poll as _poll
from .bootstrap import UniqueId, id_bytes
from .collectives import OPS, Collectives
from .group import group
from .group import in_group as _in_group
from .group import make_clique as _make_clique
from .group import state as _gstate

__all__ = ["UniqueId", "Communicator", "NcclTimeoutError", "group", "close_all", "OPS"]


# ---------------------------------------------------------------------------- library helpers
def _warn_unclosed(text: str) -> None:
    warnings.warn(f"{text} was never closed: call close() or abort() (the garbage collector "
                  "does not destroy communicators, since ncclCommDestroy waits for the peers)",
                  ResourceWarning, stacklevel=2)


# ---------------------------------------------------------------------------- Communicator
class Communicator(Collectives, Resource):
    """One rank of an NCCL communicator, bound to one GPU.

    Parameters
    ----------
    nranks : int
        Number of ranks in the communicator.
    rank : int
        This rank, ``0 <= rank < nranks``; unique across the communicator.
    uid : UniqueId or bytes
        The id rank 0 made (:class:`UniqueId`), the same on every rank.
    device : Device or int, optional
        This rank's GPU; the current device by default.  Two ranks of one communicator must
        not share a GPU.
    blocking : bool, default True
        ``False`` makes NCCL calls non-blocking: cudalibs polls them, with ``timeout``.
    timeout : float, optional
        Seconds a non-blocking call (creation included) may take before the communicator is
        aborted and :class:`NcclTimeoutError` raised.  ``None`` waits forever.  Only with
        ``blocking=False``.

    Raises
    ------
    ValueError
        ``rank`` out of range, ``nranks < 1``, a unique id of the wrong length, ``timeout``
        with ``blocking=True``.
    NcclError, NcclTimeoutError
        NCCL failed, or (non-blocking) a peer did not arrive in time.

    Notes
    -----
    Creation is collective: every rank must construct its communicator, from its own process
    or thread (or, from one thread, inside :func:`group`, or with :meth:`init_all`).
    Release it with :meth:`close` (collective too) or :meth:`abort`; ``with Communicator(...)
    as c:`` closes it, or aborts it when the block raises.  Buffers must be C-contiguous and
    on :attr:`device`.
    """

    # The finalizer and the weak-reference slot come from Resource.
    __slots__ = ("_comm", "_handle", "_rank", "_size", "_device", "_blocking", "_timeout",
                 "_state", "_scratch", "_clique")

    def __init__(self, nranks: int, rank: int, uid, device=None, *, blocking: bool = True,
                 timeout: float | None = None):
        nranks, rank = _check_ranks(nranks, rank, "Communicator")
        uid = uid if isinstance(uid, UniqueId) else UniqueId(id_bytes(uid, "Communicator: uid"))
        timeout = _check_timeout(timeout, bool(blocking))
        dev = as_device(device)
        L = _lib.get()
        cfg = _base.new_config(blocking=1 if blocking else 0)
        raw = _lib.ncclComm_t()
        with dev:  # NCCL binds the communicator to the device current at this call
            st = L.ncclCommInitRankConfig(ctypes.byref(raw), nranks, uid._struct(), rank,
                                          ctypes.byref(cfg))
        if st and st != _IN_PROGRESS:
            detail = _last_error(raw) if raw else None
            if raw:
                _abort_raw(raw)
            raise_for(st, "ncclCommInitRankConfig", detail)
        self._setup(raw, bool(blocking), timeout, dev)
        self._after_create("ncclCommInitRankConfig", (rank, nranks))

    # -- construction helpers ------------------------------------------------------------------
    def _setup(self, raw, blocking: bool, timeout, device: Device | None) -> None:
        self._comm = raw
        self._handle = ctypes.cast(raw, ctypes.c_void_p).value or 0
        self._rank = self._size = None
        self._device = device
        self._blocking = blocking
        self._timeout = timeout
        self._state = "pending"
        self._scratch = None
        self._clique = False
        # The one lifetime base, with a "free" that only warns: no destroy from the garbage
        # collector (see the module's notes); nothing at interpreter exit either.
        self._own(_warn_unclosed, f"NCCL communicator 0x{self._handle:x}")

    @classmethod
    def _from_raw(cls, raw, blocking: bool, timeout, device=None) -> "Communicator":
        self = object.__new__(cls)
        self._setup(raw, blocking, timeout, device)
        return self

    def _after_create(self, function: str, expect=None) -> None:
        """Finish creation now, or at the end of the enclosing group."""
        if _in_group():
            g = _gstate()
            g.comms[id(self)] = self
            g.created.append(self)
            g.after.append(lambda: self._finish(expect))
            return
        if not self._blocking:
            self._wait(function)
        self._finish(expect)

    def _finish(self, expect=None) -> None:
        """Read rank, size and device back from NCCL (the communicator is ready now)."""
        L = _lib.get()
        raw = self._comm
        # ncclCommSplit writes the handle only once the new communicator is ready.
        self._handle = ctypes.cast(raw, ctypes.c_void_p).value or 0
        out = []
        for fn in ("ncclCommUserRank", "ncclCommCount", "ncclCommCuDevice"):
            v = ctypes.c_int()
            st = getattr(L, fn)(raw, ctypes.byref(v))
            if st:
                self._state = "aborted"
                self._detach()
                _abort_raw(raw)
                raise_for(st, fn)
            out.append(v.value)
        rank, size, cu_device = out
        if expect is not None and (rank, size) != tuple(expect):
            self.abort()
            raise CudaLibsError(f"NCCL reports rank {rank} of {size}, but rank {expect[0]} of "
                                f"{expect[1]} was asked for")
        dev = Device(cu_device)
        if self._device is not None and dev is not self._device:
            self.abort()
            raise CudaLibsError(f"NCCL bound the communicator to device {cu_device}, not "
                                f"{self._device.ordinal}")
        self._rank, self._size, self._device = rank, size, dev
        self._state = "open"

    @classmethod
    def init_all(cls, devices, *, blocking: bool = True,
                 timeout: float | None = None) -> list["Communicator"]:
        """One communicator per GPU, all in this process (``ncclCommInitAll``).

        Parameters
        ----------
        devices : int or sequence of Device or int
            The GPUs, in rank order; an int ``n`` means devices ``0 .. n-1``.
        blocking, timeout
            As for :class:`Communicator`; non-blocking creation uses a group of
            ``ncclCommInitRankConfig`` calls instead of ``ncclCommInitAll``.

        Returns
        -------
        list of Communicator
            Rank ``i`` on ``devices[i]``.  Drive them from one thread inside :func:`group`,
            and release them with :func:`close_all` (or ``close()`` each inside a group).

        Raises
        ------
        ValueError
            No devices, or one device listed twice.
        """
        if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
            devices = range(int(devices))
        devs = [as_device(d) for d in sequence(devices, "init_all: devices", "devices")]
        if not devs:
            raise ValueError("init_all needs at least one device")
        if len(set(d.ordinal for d in devs)) != len(devs):
            raise ValueError(f"devices {[d.ordinal for d in devs]} list a GPU twice; NCCL "
                             "allows one rank per GPU")
        timeout = _check_timeout(timeout, bool(blocking))
        n = len(devs)
        if not blocking:
            uid = UniqueId()
            comms: list[Communicator] = []
            try:
                with group():
                    for i, d in enumerate(devs):
                        comms.append(cls(n, i, uid, d, blocking=False, timeout=timeout))
            except BaseException:
                for c in comms:
                    c.abort()
                raise
            return comms
        L = _lib.get()
        raws = (_lib.ncclComm_t * n)()
        devlist = (ctypes.c_int * n)(*[d.ordinal for d in devs])
        with devs[0]:  # NCCL switches devices while it works; restore the caller's context
            st = L.ncclCommInitAll(raws, n, devlist)
        if st:
            raise_for(st, "ncclCommInitAll")
        # Copy each handle out of the array: the wrappers must not share its memory.
        comms = [cls._from_raw(ctypes.cast(ctypes.c_void_p(ctypes.cast(raws[i], ctypes.c_void_p).value),
                                           _lib.ncclComm_t), True, None, devs[i])
                 for i in range(n)]
        _make_clique(comms)
        try:
            for i, c in enumerate(comms):
                c._finish((i, n))
        except BaseException:
            for c in comms:
                c.abort()
            raise
        return comms

    # The bootstrap (the unique-id exchange and the choice of this rank's GPU) lives in
    # cudalibs.nccl.bootstrap; these are its entry points as constructors.
    from_store = classmethod(bootstrap.from_store)
    from_mpi = classmethod(bootstrap.from_mpi)

    # -- state -----------------------------------------------------------------------------------
    def _ready(self):
        state = self._state
        if state == "open":
            return self._comm
        if state == "pending":
            raise CudaLibsError("the communicator is still being created: use it after the "
                                "nccl.group() block that created it")
        raise ClosedError(f"the communicator was {'aborted' if state == 'aborted' else 'closed'}")

    def _wait(self, function: str) -> None:
        try:
            _poll(self._comm, self._timeout, function)
        except NcclError:
            # _poll aborted the communicator
            self._state = "aborted"
            self._detach()
            raise

    def _done(self, st: int, function: str) -> None:
        """Status handling after a queued operation."""
        if _in_group():
            _gstate().comms[id(self)] = self
            if st and st != _IN_PROGRESS:
                raise_for(st, function, _last_error(self._comm) or None)
            return
        if st == _IN_PROGRESS and not self._blocking:
            self._wait(function)
        elif st:
            raise_for(st, function, _last_error(self._comm) or None)

    @property
    def rank(self) -> int:
        """This rank (``ncclCommUserRank``)."""
        self._ready()
        return self._rank

    @property
    def size(self) -> int:
        """Number of ranks (``ncclCommCount``)."""
        self._ready()
        return self._size

    @property
    def device(self) -> Device:
        """The GPU of this rank."""
        self._ready()
        return self._device

    @property
    def cu_device(self) -> int:
        """The CUDA device ordinal NCCL reports now (``ncclCommCuDevice``)."""
        raw = self._ready()
        v = ctypes.c_int()
        st = _lib.get().ncclCommCuDevice(raw, ctypes.byref(v))
        if st:
            raise_for(st, "ncclCommCuDevice")
        return v.value

    @property
    def handle(self) -> int:
        """The ``ncclComm_t`` address."""
        return self._handle

    @property
    def blocking(self) -> bool:
        return self._blocking

    @property
    def timeout(self) -> float | None:
        """Seconds a non-blocking call may take before the communicator is aborted.

        May be changed at any time, for example generous while the peers start up and short
        once they run.  Setting it on a blocking communicator raises ``ValueError``.
        """
        return self._timeout

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        self._timeout = _check_timeout(value, self._blocking)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` or :meth:`abort` was called (or a timeout aborted it)."""
        return self._state in ("closed", "aborted")

    def async_error(self) -> NcclError | None:
        """The communicator's asynchronous error (``ncclCommGetAsyncError``), if any.

        Returns
        -------
        NcclError or None
            ``None`` when no error occurred (``ncclInProgress`` counts as none).
        """
        raw = self._ready()
        state = ctypes.c_int()
        st = _lib.get().ncclCommGetAsyncError(raw, ctypes.byref(state))
        if st:
            raise_for(st, "ncclCommGetAsyncError")
        if state.value in (0, _IN_PROGRESS):
            return None
        return NcclError.from_status(state.value, "ncclCommGetAsyncError", None,
                                     _last_error(raw) or None)

    def last_error(self) -> str:
        """``ncclGetLastError`` of this communicator."""
        return _last_error(self._comm)

    # -- lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        """Finalize and destroy the communicator (collective: every rank closes its own).

        ``ncclCommFinalize`` (where the loaded NCCL has it) flushes outstanding work with the
        peers, then ``ncclCommDestroy`` frees the local resources.  Inside :func:`group` the
        finalize joins the group and the destroy runs at its end: that is how one thread
        closes all communicators of :meth:`init_all` (see :func:`close_all`).  Closed one by
        one outside a group, the ranks one thread drives (from :meth:`init_all`, or created
        in one group) skip the finalize, whose barrier would wait for ranks this thread has
        not reached yet; NCCL finalizes them all when the last one is destroyed.  Calling
        ``close()`` again, or after :meth:`abort`, does nothing.
        """
        if self._state in ("closed", "aborted"):
            return
        self._detach()
        self._free_scratch()
        L = _lib.get()
        raw = self._comm
        pending = self._state == "pending"
        self._state = "closed"
        if pending:  # never became usable (created inside a group that failed)
            _abort_raw(raw)
            return
        if _in_group():
            if L.ncclCommFinalize:
                st = L.ncclCommFinalize(raw)
                if st and st != _IN_PROGRESS:
                    _abort_raw(raw)
                    raise_for(st, "ncclCommFinalize")
                g = _gstate()
                g.comms[id(self)] = self
            _gstate().after.append(lambda: self._destroy(raw))
            return
        # ncclCommFinalize ends with a barrier among the ranks of this host: for one rank of a
        # communicator whose other ranks this very thread drives, it would wait for finalizes
        # that can only come after it returns.  ncclCommDestroy alone is safe there: NCCL
        # finalizes all ranks of the process together when the last of them is destroyed.
        with self._device:
            if not self._clique and L.ncclCommFinalize:
                st = L.ncclCommFinalize(raw)
                if st == _IN_PROGRESS and not self._blocking:
                    try:
                        _poll(raw, self._timeout, "ncclCommFinalize")
                    except NcclError:
                        self._state = "aborted"
                        raise
                elif st:
                    self._state = "aborted"
                    _abort_raw(raw)
                    raise_for(st, "ncclCommFinalize")
            self._destroy(raw)

    def _destroy(self, raw) -> None:
        st = _lib.get().ncclCommDestroy(raw)
        if st and st != _IN_PROGRESS:
            raise_for(st, "ncclCommDestroy")

    def abort(self) -> None:
        """Abort outstanding operations and free the communicator (``ncclCommAbort``).

        Local: needs no peer, so it is the way out after a peer failed.  Idempotent; does
        nothing after :meth:`close`.
        """
        if self._state in ("closed", "aborted"):
            return
        self._detach()
        self._free_scratch()
        self._state = "aborted"
        st = _lib.get().ncclCommAbort(self._comm)
        if st and st != _IN_PROGRESS:
            raise_for(st, "ncclCommAbort")

    def _free_scratch(self) -> None:
        buf, self._scratch = self._scratch, None
        if buf is not None:
            buf.close()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # After a failure the peers may be gone, and close() would wait for them.
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        mode = "blocking" if self._blocking else (
            f"non-blocking, timeout {self._timeout:g} s" if self._timeout is not None
            else "non-blocking")
        where = "" if self._device is None else f" on device {self._device.ordinal}"
        if self._state in ("open",):
            return (f"<nccl.Communicator rank {self._rank}/{self._size}{where}, {mode}, "
                    f"0x{self._handle:x}>")
        who = "" if self._rank is None else f" rank {self._rank}/{self._size}"
        return f"<nccl.Communicator{who}{where} ({self._state})>"

    # -- derived communicators -------------------------------------------------------------------
    def split(self, color, key: int | None = None, *, blocking: bool | None = None,
              timeout: float | None = None) -> "Communicator | None":
        """Split into sub-communicators by ``color`` (``ncclCommSplit``; collective).

        Parameters
        ----------
        color : int or None
            Ranks with the same color form one new communicator; ``None``
            (``NCCL_SPLIT_NOCOLOR``) joins none, and this rank gets ``None``.
        key : int, optional
            Orders the ranks of the new communicator; default: this rank.
        blocking, timeout : optional
            Mode of the new communicator; default: this one's.

        Returns
        -------
        Communicator or None
        """
        raw_parent = self._ready()
        if color is None:
            c = _lib.NCCL_SPLIT_NOCOLOR
        else:
            c = _check_int(color, "color")
            if c < 0:
                raise ValueError(f"color must be >= 0 (or None to join no communicator), "
                                 f"got {c}")
        k = self._rank if key is None else _check_int(key, "key")
        cfg = None
        child_blocking, child_timeout = self._blocking, self._timeout
        if blocking is not None or timeout is not None:
            child_blocking = self._blocking if blocking is None else bool(blocking)
            child_timeout = _check_timeout(timeout, child_blocking)
            cfg = ctypes.byref(_base.new_config(blocking=1 if child_blocking else 0))
        L = _lib.get()
        # NCCL writes the new handle into ``raw`` only once the new communicator is ready: at
        # the return of a blocking call, at the end of the enclosing group, or (non-blocking)
        # later from NCCL's own thread.  ``raw`` therefore lives on as the child's ``_comm``.
        raw = _lib.ncclComm_t()
        with self._device:
            st = L.ncclCommSplit(raw_parent, c, k, ctypes.byref(raw), cfg)
        if st and st != _IN_PROGRESS:
            raise_for(st, "ncclCommSplit", _last_error(raw_parent) or None)
        nocolor = color is None
        if _in_group():
            g = _gstate()
            g.comms[id(self)] = self
            if nocolor:
                return None
            child = Communicator._from_raw(raw, child_blocking, child_timeout, self._device)
            g.created.append(child)

            def complete():
                self._await_split(raw, False, child_timeout)
                child._finish()

            g.after.append(complete)
            return child
        if st == _IN_PROGRESS or not self._blocking or not child_blocking:
            self._await_split(raw, nocolor, child_timeout)
        if nocolor:
            return None
        if not raw:
            raise CudaLibsError("ncclCommSplit returned without a new communicator")
        child = Communicator._from_raw(raw, child_blocking, child_timeout, self._device)
        child._finish()
        return child

    def _await_split(self, holder, nocolor: bool, timeout) -> None:
        """Wait for a split to finish: until NCCL has written the child's handle into
        ``holder`` and the child is ready (or, with no color, until the parent is idle).
        Past ``timeout`` the parent -- and with it the child being made -- is aborted."""
        L = _lib.get()
        parent = self._comm
        state = ctypes.c_int()
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 1e-5
        idle = 0.0
        while True:
            if holder:
                left = None if deadline is None else max(deadline - time.monotonic(), 1e-3)
                _poll(holder, left, "ncclCommSplit")
                return
            st = L.ncclCommGetAsyncError(parent, ctypes.byref(state))
            if st or state.value not in (0, _IN_PROGRESS):
                raise_for(st or state.value, "ncclCommSplit", _last_error(parent) or None)
            if state.value == 0:
                if nocolor:
                    return
                # The parent is idle but no handle arrived: the split failed without saying
                # so.  Non-blocking NCCL writes the handle from its own thread just before the
                # parent turns idle, so give that a moment before concluding.
                idle = idle or time.monotonic()
                if self._blocking or time.monotonic() - idle > 1.0:
                    raise CudaLibsError("ncclCommSplit finished without creating a "
                                        "communicator: " + (_last_error(parent) or
                                                            "no NCCL error recorded"))
            if deadline is not None and time.monotonic() >= deadline:
                detail = _last_error(parent)
                self.abort()
                raise NcclTimeoutError(_IN_PROGRESS, "ncclCommSplit",
                                       f"not finished after {timeout:g} s; the parent "
                                       "communicator was aborted", detail or None)
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)

    def sync(self, stream=None, timeout: float | None = None) -> None:
        """Wait until ``stream`` is idle, watching for NCCL errors.

        A plain stream synchronization would wait forever on a collective whose peer died;
        this polls the stream and ``ncclCommGetAsyncError`` and, past ``timeout`` seconds
        (default: the communicator's), aborts the communicator and raises
        :class:`NcclTimeoutError`.
        """
        raw = self._ready()
        s = as_stream(stream, self._device)
        timeout = self._timeout if timeout is None else float(timeout)
        if timeout is None:
            s.sync()
            err = self.async_error()
            if err is not None:
                self.abort()
                raise err
            return
        deadline = time.monotonic() + timeout
        L = _lib.get()
        state = ctypes.c_int()
        delay = 1e-5
        while not s.query():
            st = L.ncclCommGetAsyncError(raw, ctypes.byref(state))
            if st or state.value not in (0, _IN_PROGRESS):
                detail = _last_error(raw)
                self.abort()
                raise_for(st or state.value, "ncclCommGetAsyncError", detail or None)
            if time.monotonic() >= deadline:
                detail = _last_error(raw)
                self.abort()
                raise NcclTimeoutError(_IN_PROGRESS, "sync",
                                       f"stream work not finished after {timeout:g} s; the "
                                       "communicator was aborted", detail or None)
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)


def close_all(comms) -> None:
    """Close several communicators driven by this thread (from :meth:`Communicator.init_all`).

    Their finalizes run in one :func:`group`, since each waits for its peers, which live in
    this same thread.
    """
    comms = sequence(comms, "close_all: comms", "Communicators")
    for c in comms:
        if not isinstance(c, Communicator):
            raise TypeError(f"close_all: comms must hold Communicators, not "
                            f"{type(c).__name__}")
    comms = [c for c in comms if not c.closed]
    if not comms:
        return
    with group():
        for c in comms:
            c.close()

