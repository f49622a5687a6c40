"""The collectives of a NCCL :class:`~cudalibs.nccl.Communicator`, with their argument
checks: all-reduce, broadcast, reduce, all-gather, reduce-scatter, send / receive,
all-to-all, barrier.

Every argument is checked before NCCL is called: arrays through the one operand path
(C-contiguous, on the communicator's device), element types NCCL knows in the loaded version,
reduction operators, ranks.  ``out=None`` allocates the result stream-ordered; ``out=x`` with
``x`` the input runs in place.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as _dtypes
from ..driver.array import DeviceArray, empty, spans_overlap
from ..driver.stream import as_stream
from ..errors import CudaLibsError
from ..runtime.operand import operand
from . import _base, _lib
from ._base import check_int as _check_int
from .group import group
from .group import in_group as _in_group

_version_cache: list = []


def _version() -> tuple[int, int, int]:
    if not _version_cache:
        _version_cache.append(_base.version())
    return _version_cache[0]


__all__ = ["Collectives", "OPS"]

#: Reduction operators by name (``ncclRedOp_t``).
OPS = {"sum": _lib.ncclSum, "prod": _lib.ncclProd, "max": _lib.ncclMax, "min": _lib.ncclMin,
       "avg": _lib.ncclAvg}
_OP_NAMES = {v: k for k, v in OPS.items()}

# First NCCL versions that know a data type or operator (release notes of 2.10 and 2.24).
_BF16_SINCE = (2, 10, 0)
_AVG_SINCE = (2, 10, 0)
_FP8_SINCE = (2, 24, 0)


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



class Collectives:
    """The collectives of a communicator (a base of :class:`~cudalibs.nccl.Communicator`,
    which provides its state: ``_ready``, ``_done``, ``_device``, ``_size``, ...)."""

    __slots__ = ()

    # -- buffers ---------------------------------------------------------------------------------
    def _buf(self, x, what: str, s, op: str) -> DeviceArray:
        # NCCL addresses a buffer as one flat run of elements: C-contiguous only.
        return operand(x, what, op, device=self._device, contiguous=True, stream=s)

    def _out(self, out, shape, dtype, count: int, s, op: str) -> DeviceArray:
        if out is None:
            return empty(shape, dtype, device=self._device, stream=s)
        o = self._buf(out, "out", s, op)
        if o.dtype != dtype:
            raise TypeError(f"{op}: out has dtype {o.dtype}, expected {dtype}")
        if o.size != count:
            raise ValueError(f"{op}: out has {o.size} elements (shape {o.shape}), expected "
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
        t = _nccl_type(a.dtype, self._device)
        code = _op_code(op, a.dtype)
        n = a.size
        o = self._out(out, a.shape, a.dtype, n, s, "all_reduce")
        sp, rp = a.address, o.address
        if sp != rp and spans_overlap(sp, (0, a.nbytes), rp, (0, o.nbytes)):
            raise ValueError("send and out overlap without being the same memory")
        if n:
            st = _lib.get().ncclAllReduce(sp, rp, n, t, code, raw, s.raw)
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
            o = self._out(out, a.shape, a.dtype, a.size, s, "broadcast")
        t = _nccl_type(o.dtype, self._device)
        sp, rp = a.address, o.address
        if sp != rp and spans_overlap(sp, (0, a.nbytes), rp, (0, o.nbytes)):
            raise ValueError("send and out overlap without being the same memory")
        if o.size:
            st = _lib.get().ncclBroadcast(sp, rp, o.size, t, root, raw, s.raw)
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
        t = _nccl_type(a.dtype, self._device)
        code = _op_code(op, a.dtype)
        n = a.size
        is_root = root == self._rank
        o = self._out(out, a.shape, a.dtype, n, s, "reduce") if (is_root or out is not None) else None
        # Non-root ranks never write recvbuff; NCCL still wants a valid pointer there.
        rp = o.address if o is not None else a.address
        sp = a.address
        if is_root and sp != rp and spans_overlap(sp, (0, a.nbytes), rp, (0, o.nbytes)):
            raise ValueError("send and out overlap without being the same memory")
        if n:
            st = _lib.get().ncclReduce(sp, rp, n, t, code, root, raw, s.raw)
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
        t = _nccl_type(a.dtype, self._device)
        n, size = a.size, self._size
        shape = (size * a.shape[0],) + a.shape[1:] if a.shape else (size,)
        o = self._out(out, shape, a.dtype, size * n, s, "all_gather")
        sp, rp = a.address, o.address
        if sp != rp + self._rank * a.nbytes and spans_overlap(sp, (0, a.nbytes),
                                                               rp, (0, o.nbytes)):
            raise ValueError("send overlaps out without being this rank's slice of it "
                             f"(out[{self._rank * n}:{(self._rank + 1) * n}])")
        if n:
            st = _lib.get().ncclAllGather(sp, rp, n, t, raw, s.raw)
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
        t = _nccl_type(a.dtype, self._device)
        code = _op_code(op, a.dtype)
        size = self._size
        if a.size % size:
            raise ValueError(f"send has {a.size} elements, not a multiple of the {size} ranks")
        k = a.size // size
        if a.shape and a.shape[0] % size == 0:
            shape = (a.shape[0] // size,) + a.shape[1:]
        else:
            shape = (k,)
        o = self._out(out, shape, a.dtype, k, s, "reduce_scatter")
        sp, rp = a.address, o.address
        if rp != sp + self._rank * o.nbytes and spans_overlap(sp, (0, a.nbytes),
                                                               rp, (0, o.nbytes)):
            raise ValueError("out overlaps send without being this rank's block of it")
        if k:
            st = _lib.get().ncclReduceScatter(sp, rp, k, t, code, raw, s.raw)
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
        t = _nccl_type(a.dtype, self._device)
        if a.size:
            st = _lib.get().ncclSend(a.address, a.size, t, p, raw, s.raw)
            if st or _in_group():
                self._done(st, "ncclSend")

    def recv(self, out, peer: int, *, stream=None):
        """Receive into ``out`` from rank ``peer`` (``ncclRecv``); returns ``out``."""
        raw = self._ready()
        p = self._peer(peer)
        s = as_stream(stream, self._device)
        o = self._buf(out, "out", s, "recv")
        t = _nccl_type(o.dtype, self._device)
        if o.size:
            st = _lib.get().ncclRecv(o.address, o.size, t, p, raw, s.raw)
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
        t = _nccl_type(a.dtype, self._device)
        size = self._size
        if a.size % size:
            raise ValueError(f"send has {a.size} elements, not a multiple of the {size} ranks")
        o = self._out(out, a.shape, a.dtype, a.size, s, "all_to_all")
        if spans_overlap(a.address, (0, a.nbytes), o.address, (0, o.nbytes)):
            raise ValueError("all_to_all cannot run in place: out must not overlap send")
        k = a.size // size
        if not k:
            return o
        step = k * a.itemsize
        L = _lib.get()
        h = s.raw
        with group():
            for p in range(size):
                st = L.ncclSend(a.address + p * step, k, t, p, raw, h)
                self._done(st, "ncclSend")
                st = L.ncclRecv(o.address + p * step, k, t, p, raw, h)
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
