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

from .. import dtypes as _dtypes
from .._ffi import Resource
from ..driver.array import DeviceArray, empty, spans_overlap
from ..driver.device import Device, as_device
from ..driver.operand import operand
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
from .bootstrap import UniqueId
from .group import group
from .group import in_group as _in_group
from .group import make_clique as _make_clique
from .group import state as _gstate

__all__ = ["UniqueId", "Communicator", "NcclTimeoutError", "group", "close_all", "OPS"]


#: Reduction operators by name (``ncclRedOp_t``).
OPS = {"sum": _lib.ncclSum, "prod": _lib.ncclProd, "max": _lib.ncclMax, "min": _lib.ncclMin,
       "avg": _lib.ncclAvg}
_OP_NAMES = {v: k for k, v in OPS.items()}

# First NCCL versions that know a data type or operator (release notes of 2.10 and 2.24).
_BF16_SINCE = (2, 10, 0)
_AVG_SINCE = (2, 10, 0)
_FP8_SINCE = (2, 24, 0)


# ---------------------------------------------------------------------------- library helpers
_version_cache: list = []


def _version() -> tuple[int, int, int]:
    if not _version_cache:
        _version_cache.append(_base.version_tuple())
    return _version_cache[0]


def _warn_unclosed(text: str) -> None:
    warnings.warn(f"{text} was never closed: call close() or abort() (the garbage collector "
                  "does not destroy communicators, since ncclCommDestroy waits for the peers)",
                  ResourceWarning, stacklevel=2)


# ---------------------------------------------------------------------------- validation
def _op_code(op, dtype) -> int:
    if isinstance(op, str):
        code = OPS.get(op.lower())
        if code is None:
            raise ValueError(f"unknown reduction {op!r}; one of {', '.join(OPS)}")
    else:
        code = _check_int(op, "op")
        if code not in _OP_NAMES:
            raise ValueError(f"unknown reduction {op!r}; one of {', '.join(OPS)}")
    if code == _lib.ncclAvg and _version() < _AVG_SINCE:
        raise CudaLibsError("op='avg' needs NCCL >= 2.10; the loaded NCCL is "
                            + ".".join(map(str, _version())))
    return code


_type_cache: dict = {}


def _nccl_type(dtype: np.dtype, device) -> int:
    """The ``ncclDataType_t`` of ``dtype``, checked against the loaded NCCL and the GPU."""
    key = (dtype, device)
    code = _type_cache.get(key)
    if code is not None:
        return code
    row = _dtypes.lookup(dtype)
    if row.nccl is None:
        supported = sorted(r.name for r in _dtypes.TABLE.values() if r.nccl is not None)
        raise TypeError(f"NCCL has no {row.name} type; supported: {', '.join(supported)}")
    ver = _version()
    have = ".".join(map(str, ver))
    if row.nccl == _lib.ncclBfloat16 and ver < _BF16_SINCE:
        raise TypeError(f"bfloat16 needs NCCL >= 2.10; the loaded NCCL is {have}")
    if row.nccl in (_lib.ncclFloat8e4m3, _lib.ncclFloat8e5m2):
        if ver < _FP8_SINCE:
            raise TypeError(f"{row.name} needs NCCL >= 2.24; the loaded NCCL is {have}")
        cc = device.compute_capability
        if tuple(cc) < (9, 0):
            raise TypeError(f"NCCL reduces {row.name} only on sm_90 and newer; device "
                            f"{device.ordinal} is sm_{cc[0]}{cc[1]}")
    _type_cache[key] = row.nccl
    return row.nccl


# ---------------------------------------------------------------------------- Communicator
class Communicator(Resource):
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
        nranks, rank = _check_ranks(nranks, rank)
        uid = uid if isinstance(uid, UniqueId) else UniqueId(uid)
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
        devs = [as_device(d) for d in devices]
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

    # -- buffers ---------------------------------------------------------------------------------
    def _buf(self, x, what: str, s, op: str) -> DeviceArray:
        # NCCL addresses a buffer as one flat run of elements: C-contiguous only.
        return operand(x, what, op, device=self._device, contiguous=True, stream=s)

    def _out(self, out, shape, dtype, count: int, s, op: str) -> DeviceArray:
        if out is None:
            return empty(shape, dtype, device=self._device, stream=s)
        o = self._buf(out, "out", s, op)
        if o._dtype != dtype:
            raise TypeError(f"{op}: out has dtype {o._dtype}, expected {dtype}")
        if o.size != count:
            raise ValueError(f"{op}: out has {o.size} elements (shape {o._shape}), expected "
                             f"{count}")
        return o

    def _peer(self, peer, what: str = "peer") -> int:
        p = _check_int(peer, what)
        if not 0 <= p < self._size:
            raise ValueError(f"{what} {p} is out of range for {self._size} rank(s)")
        return p

    # -- collectives -----------------------------------------------------------------------------
    def all_reduce(self, send, out=None, *, op="sum", stream=None):
        """Reduce ``send`` over all ranks; every rank receives the result (``ncclAllReduce``).

        Parameters
        ----------
        send : DeviceArray or CAI/DLPack array
            C-contiguous, on this communicator's device.
        out : array, optional
            Same dtype and element count as ``send``; ``out=send`` runs in place.  Default: a
            new array shaped like ``send``.
        op : {"sum", "prod", "max", "min", "avg"}
        stream : Stream, optional
            Default: the thread's current stream.

        Returns
        -------
        DeviceArray
            ``out``.
        """
        raw = self._ready()
        s = as_stream(stream, self._device)
        a = self._buf(send, "send", s, "all_reduce")
        t = _nccl_type(a._dtype, self._device)
        code = _op_code(op, a._dtype)
        n = a.size
        o = self._out(out, a._shape, a._dtype, n, s, "all_reduce")
        sp, rp = a._ptr, o._ptr
        if sp != rp and spans_overlap(sp, (0, a.nbytes), rp, (0, o.nbytes)):
            raise ValueError("send and out overlap without being the same memory")
        if n:
            st = _lib.get().ncclAllReduce(sp, rp, n, t, code, raw, s._h)
            if st or _in_group():
                self._done(st, "ncclAllReduce")
        return o

    def broadcast(self, send, out=None, *, root: int = 0, stream=None):
        """Copy ``send`` of rank ``root`` to ``out`` of every rank (``ncclBroadcast``).

        Parameters
        ----------
        send : array or None
            The data on the root.  On other ranks it is not read (it may be ``None`` when
            ``out`` is given) but, when given, must match ``out``.
        out : array, optional
            Receives the data; ``out=send`` runs in place.  Default: a new array like
            ``send``.
        root : int
        stream : Stream, optional

        Returns
        -------
        DeviceArray
        """
        raw = self._ready()
        root = self._peer(root, "root")
        s = as_stream(stream, self._device)
        if send is None:
            if root == self._rank:
                raise ValueError("the root rank must pass send")
            if out is None:
                raise ValueError("pass send or out: the result's shape is unknown")
            o = self._buf(out, "out", s, "broadcast")
            a = o
        else:
            a = self._buf(send, "send", s, "broadcast")
            o = self._out(out, a._shape, a._dtype, a.size, s, "broadcast")
        t = _nccl_type(o._dtype, self._device)
        sp, rp = a._ptr, o._ptr
        if sp != rp and spans_overlap(sp, (0, a.nbytes), rp, (0, o.nbytes)):
            raise ValueError("send and out overlap without being the same memory")
        if o.size:
            st = _lib.get().ncclBroadcast(sp, rp, o.size, t, root, raw, s._h)
            if st or _in_group():
                self._done(st, "ncclBroadcast")
        return o

    def reduce(self, send, out=None, *, op="sum", root: int = 0, stream=None):
        """Reduce ``send`` over all ranks into ``out`` of rank ``root`` (``ncclReduce``).

        Returns
        -------
        DeviceArray or None
            On the root, ``out`` (a new array like ``send`` by default); on other ranks
            ``out`` as given, untouched, or ``None``.
        """
        raw = self._ready()
        root = self._peer(root, "root")
        s = as_stream(stream, self._device)
        a = self._buf(send, "send", s, "reduce")
        t = _nccl_type(a._dtype, self._device)
        code = _op_code(op, a._dtype)
        n = a.size
        is_root = root == self._rank
        o = self._out(out, a._shape, a._dtype, n, s, "reduce") if (is_root or out is not None) else None
        # Non-root ranks never write recvbuff; NCCL still wants a valid pointer there.
        rp = o._ptr if o is not None else a._ptr
        sp = a._ptr
        if is_root and sp != rp and spans_overlap(sp, (0, a.nbytes), rp, (0, o.nbytes)):
            raise ValueError("send and out overlap without being the same memory")
        if n:
            st = _lib.get().ncclReduce(sp, rp, n, t, code, root, raw, s._h)
            if st or _in_group():
                self._done(st, "ncclReduce")
        return o

    def all_gather(self, send, out=None, *, stream=None):
        """Concatenate ``send`` of every rank, in rank order, on every rank (``ncclAllGather``).

        Parameters
        ----------
        send : array
        out : array, optional
            ``size * send.size`` elements of ``send``'s dtype.  Default: shape
            ``(size * send.shape[0], *send.shape[1:])`` (``(size,)`` for a 0-d ``send``).
            In place when ``send`` is this rank's slice of ``out``
            (``out[rank * n:(rank + 1) * n]``).

        Returns
        -------
        DeviceArray
        """
        raw = self._ready()
        s = as_stream(stream, self._device)
        a = self._buf(send, "send", s, "all_gather")
        t = _nccl_type(a._dtype, self._device)
        n, size = a.size, self._size
        shape = (size * a._shape[0],) + a._shape[1:] if a._shape else (size,)
        o = self._out(out, shape, a._dtype, size * n, s, "all_gather")
        sp, rp = a._ptr, o._ptr
        if sp != rp + self._rank * a.nbytes and spans_overlap(sp, (0, a.nbytes),
                                                               rp, (0, o.nbytes)):
            raise ValueError("send overlaps out without being this rank's slice of it "
                             f"(out[{self._rank * n}:{(self._rank + 1) * n}])")
        if n:
            st = _lib.get().ncclAllGather(sp, rp, n, t, raw, s._h)
            if st or _in_group():
                self._done(st, "ncclAllGather")
        return o

    def reduce_scatter(self, send, out=None, *, op="sum", stream=None):
        """Reduce ``send`` over all ranks; rank ``i`` receives block ``i`` (``ncclReduceScatter``).

        Parameters
        ----------
        send : array
            ``size * k`` elements.
        out : array, optional
            ``k`` elements.  Default: shape ``(send.shape[0] // size, *send.shape[1:])`` when
            the first axis divides, else ``(k,)``.  In place when ``out`` is this rank's block
            of ``send``.
        op : {"sum", "prod", "max", "min", "avg"}

        Returns
        -------
        DeviceArray
        """
        raw = self._ready()
        s = as_stream(stream, self._device)
        a = self._buf(send, "send", s, "reduce_scatter")
        t = _nccl_type(a._dtype, self._device)
        code = _op_code(op, a._dtype)
        size = self._size
        if a.size % size:
            raise ValueError(f"send has {a.size} elements, not a multiple of the {size} ranks")
        k = a.size // size
        if a._shape and a._shape[0] % size == 0:
            shape = (a._shape[0] // size,) + a._shape[1:]
        else:
            shape = (k,)
        o = self._out(out, shape, a._dtype, k, s, "reduce_scatter")
        sp, rp = a._ptr, o._ptr
        if rp != sp + self._rank * o.nbytes and spans_overlap(sp, (0, a.nbytes),
                                                               rp, (0, o.nbytes)):
            raise ValueError("out overlaps send without being this rank's block of it")
        if k:
            st = _lib.get().ncclReduceScatter(sp, rp, k, t, code, raw, s._h)
            if st or _in_group():
                self._done(st, "ncclReduceScatter")
        return o

    def send(self, x, peer: int, *, stream=None) -> None:
        """Send ``x`` to rank ``peer`` (``ncclSend``), which must :meth:`recv` as many
        elements of the same dtype.  Pair sends and receives that must progress together
        inside :func:`group`."""
        raw = self._ready()
        p = self._peer(peer)
        s = as_stream(stream, self._device)
        a = self._buf(x, "x", s, "send")
        t = _nccl_type(a._dtype, self._device)
        if a.size:
            st = _lib.get().ncclSend(a._ptr, a.size, t, p, raw, s._h)
            if st or _in_group():
                self._done(st, "ncclSend")

    def recv(self, out, peer: int, *, stream=None):
        """Receive into ``out`` from rank ``peer`` (``ncclRecv``); returns ``out``."""
        raw = self._ready()
        p = self._peer(peer)
        s = as_stream(stream, self._device)
        o = self._buf(out, "out", s, "recv")
        t = _nccl_type(o._dtype, self._device)
        if o.size:
            st = _lib.get().ncclRecv(o._ptr, o.size, t, p, raw, s._h)
            if st or _in_group():
                self._done(st, "ncclRecv")
        return o

    def all_to_all(self, send, out=None, *, stream=None):
        """Block ``j`` of ``send`` goes to rank ``j``; block ``i`` of ``out`` comes from rank
        ``i`` (grouped ``ncclSend`` / ``ncclRecv``).

        Parameters
        ----------
        send : array
            ``size * k`` elements, split into ``size`` blocks of ``k`` in memory order.
        out : array, optional
            Same dtype and element count, not overlapping ``send``.  Default: like ``send``.

        Returns
        -------
        DeviceArray
        """
        raw = self._ready()
        s = as_stream(stream, self._device)
        a = self._buf(send, "send", s, "all_to_all")
        t = _nccl_type(a._dtype, self._device)
        size = self._size
        if a.size % size:
            raise ValueError(f"send has {a.size} elements, not a multiple of the {size} ranks")
        o = self._out(out, a._shape, a._dtype, a.size, s, "all_to_all")
        if spans_overlap(a._ptr, (0, a.nbytes), o._ptr, (0, o.nbytes)):
            raise ValueError("all_to_all cannot run in place: out must not overlap send")
        k = a.size // size
        if not k:
            return o
        step = k * a.itemsize
        L = _lib.get()
        h = s._h
        with group():
            for p in range(size):
                st = L.ncclSend(a._ptr + p * step, k, t, p, raw, h)
                self._done(st, "ncclSend")
                st = L.ncclRecv(o._ptr + p * step, k, t, p, raw, h)
                self._done(st, "ncclRecv")
        return o

    def barrier(self, stream=None) -> None:
        """Wait (on the host) until every rank has reached this call.

        A one-element all-reduce, then a wait for ``stream``; with a timeout in non-blocking
        mode (see :meth:`sync`).
        """
        self._ready()
        s = as_stream(stream, self._device)
        if self._scratch is None:
            # Its value never matters; only the rendezvous of the all-reduce does.
            self._scratch = empty((1,), np.int32, device=self._device, stream=s)
        self.all_reduce(self._scratch, out=self._scratch, stream=s)
        self.sync(s)

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
    comms = [c for c in comms if not c.closed]
    if not comms:
        return
    with group():
        for c in comms:
            c.close()

