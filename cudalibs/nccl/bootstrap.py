"""Bootstrap: how the ranks of a communicator agree on its :class:`UniqueId`.

Rank 0 makes the id (``ncclGetUniqueId``) and every other rank must receive its 128 bytes
before any of them can create the communicator.  cudalibs opens no rendezvous of its own; it
uses the channel the program already has:

- a key-value **store** (:func:`from_store`) with the ``torch.distributed.Store`` methods
  (``TCPStore``, ``FileStore`` or ``HashStore`` under ``torchrun``).  Each communicator gets a
  key of its own, which is deleted once every rank has read it;
- an **MPI** communicator (:func:`from_mpi`): rank 0's 128 bytes go out by a buffer
  ``Bcast`` (never a pickle).

Both also pick this rank's GPU when none is given: its index among the ranks of its node
(the launcher's local-rank variable, or an MPI shared-memory split) modulo the visible GPUs.

:class:`~cudalibs.nccl.Communicator` exposes both as class methods
(``Communicator.from_store``, ``Communicator.from_mpi``).
"""

from __future__ import annotations

import datetime
import hashlib
import sys
import time

from .. import _env
from ..driver.device import Device, device_count
from ..errors import CudaLibsError
from . import _base, _lib
from ._base import check_ranks, check_timeout

__all__ = ["UniqueId", "id_bytes", "from_store", "from_mpi", "local_rank_from_env",
           "default_device", "DEFAULT_STORE_KEY"]

#: The prefix of the store keys :func:`from_store` uses unless told otherwise.
DEFAULT_STORE_KEY = "cudalibs/nccl/uid"

class UniqueId:
    """The name of one communicator (``ncclUniqueId``): 128 opaque bytes.

    ``UniqueId()`` makes a new one (``ncclGetUniqueId``; no GPU needed, but NCCL opens a
    bootstrap socket on the interface ``NCCL_SOCKET_IFNAME`` selects).  Send ``bytes(uid)``
    (or the pickled object) to every other rank; ``UniqueId(data)`` or
    :meth:`from_bytes` turns the bytes back into the id.

    Parameters
    ----------
    data : bytes-like or UniqueId, optional
        An existing id's 128 bytes; a new id is made when omitted.

    Raises
    ------
    ValueError
        ``data`` is not exactly 128 bytes.
    TypeError
        ``data`` is not bytes-like.

    Examples
    --------
    >>> uid = nccl.UniqueId()                             # doctest: +SKIP
    >>> nccl.UniqueId.from_bytes(bytes(uid)) == uid       # doctest: +SKIP
    True
    """

    __slots__ = ("_bytes",)

    def __init__(self, data=None):
        if data is None:
            self._bytes = _base.unique_id_bytes()
            return
        self._bytes = id_bytes(data, "UniqueId: data")

    @classmethod
    def from_bytes(cls, data) -> "UniqueId":
        """The id whose raw bytes are ``data`` (as ``bytes(uid)`` or :attr:`bytes` gives)."""
        return cls(id_bytes(data, "from_bytes: data"))

    @property
    def bytes(self) -> bytes:
        """The raw 128 bytes (the same as ``bytes(uid)``)."""
        return self._bytes

    def __bytes__(self) -> bytes:
        return self._bytes

    def _struct(self) -> "_lib.ncclUniqueId":
        return _lib.ncclUniqueId.from_buffer_copy(self._bytes)

    def __reduce__(self):
        return (UniqueId.from_bytes, (self._bytes,))

    def __eq__(self, other) -> bool:
        if not isinstance(other, UniqueId):
            return NotImplemented
        return other._bytes == self._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __repr__(self) -> str:
        # A digest, not the bytes: the id holds the root's address, and 128 bytes of it
        # would flood a log line.  Equal ids show the same digest.
        return f"<nccl.UniqueId sha1:{hashlib.sha1(self._bytes).hexdigest()[:12]}>"


# -- choosing this rank's GPU -------------------------------------------------------------------
def local_rank_from_env() -> int | None:
    """This process's index among the ranks of its node, as the launcher says it, or None."""
    return _env.local_rank()


def default_device(local_rank: int) -> Device:
    """The GPU of the rank with index ``local_rank`` on its node: that index modulo the
    number of visible GPUs."""
    n = device_count()
    if n == 0:
        raise CudaLibsError("no CUDA device is visible")
    return Device(local_rank % n)


def _mpi_local_rank(mpi_comm, rank: int) -> int:
    """The index of ``rank`` among the ranks of its node: an MPI shared-memory split where
    mpi4py offers one, else the launcher's variable, else the global rank."""
    split = getattr(mpi_comm, "Split_type", None)
    mod = sys.modules.get(type(mpi_comm).__module__)
    shared = getattr(mod, "COMM_TYPE_SHARED", None)
    if callable(split) and shared is not None:
        node = split(shared, key=rank)
        try:
            return int(node.Get_rank())
        finally:
            free = getattr(node, "Free", None)
            if callable(free):
                free()
    local = local_rank_from_env()
    return rank if local is None else local


def id_bytes(data, what: str) -> bytes:
    """The 128 bytes of a unique id given as an argument, a :class:`UniqueId` or those bytes,
    checked before any C call; ``what`` names it in messages (``"Communicator: uid"``).

    Raises
    ------
    TypeError
        ``data`` is None, a str, or neither a UniqueId nor bytes-like.
    ValueError
        ``data`` is not exactly 128 bytes long.
    """
    if isinstance(data, UniqueId):
        return data._bytes
    if data is None:
        raise TypeError(f"{what} is required (got None)")
    if isinstance(data, str) or not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be a UniqueId or its {_lib.NCCL_UNIQUE_ID_BYTES} bytes, "
                        f"not {type(data).__name__}")
    return _id_bytes(bytes(data), what)

# -- the two exchanges ----------------------------------------------------------------------------
def from_store(cls, store, rank: int, world_size: int, device=None, *,
               key: str = DEFAULT_STORE_KEY, blocking: bool = True,
               timeout: float | None = None):
    """Create this rank's communicator, exchanging the id through a key-value store.

    Each call takes the next sequence number ``n`` of this rank (``store.add`` on a counter of
    the rank's own, so the ranks agree on ``n`` as long as they make their communicators in
    the same order); rank 0 makes a :class:`UniqueId` and sets it under ``f"{key}/{n}"``,
    every other rank waits for it and reads it, and the last rank to be done deletes it.  A
    second communicator made through the same store therefore never reads the id of the
    first.

    Parameters
    ----------
    store : torch.distributed.Store or alike
        Needs ``set(key, bytes)``, ``get(key) -> bytes`` (which waits for the key, up to the
        store's own timeout) and ``add(key, int) -> int``; ``check(keys) -> bool`` or
        ``wait(keys, timedelta)`` when ``timeout`` is given; ``delete_key(key)``, where it has
        one, to remove the id once read.
    rank, world_size : int
    device : Device or int, optional
        Default: ``LOCAL_RANK`` (or the MPI launchers' local-rank variables) modulo the
        number of visible GPUs when set, else ``rank`` modulo that number.
    key : str
        The prefix of this exchange's keys.  Groups of ranks that make communicators of
        their own through one store each need a prefix of their own.
    blocking, timeout
        As for :class:`~cudalibs.nccl.Communicator`; ``timeout`` also bounds the wait for
        rank 0's id.

    Returns
    -------
    Communicator

    Raises
    ------
    TypeError
        ``store`` lacks a method it needs, or returned something other than bytes.
    ValueError
        ``rank`` out of range, or the stored id is not 128 bytes.
    TimeoutError
        Rank 0's id did not arrive within ``timeout`` seconds.
    """
    world_size, rank = check_ranks(world_size, rank, "from_store", "world_size")
    timeout = check_timeout(timeout, bool(blocking))
    deadline = None if timeout is None else time.monotonic() + timeout
    _check_store(store, timeout)
    # The counter is this rank's own: the n-th communicator of every rank gets the same n.
    seq = int(store.add(f"{key}/seq/{rank}", 1))
    id_key = f"{key}/{seq}"
    if rank == 0:
        uid = UniqueId()
        store.set(id_key, bytes(uid))
    else:
        _wait_for_key(store, id_key, deadline, timeout)
        uid = UniqueId(_id_bytes(store.get(id_key), f"the store's {id_key!r}"))
    # Every rank counts itself done; the last one removes the id, so a store that lives on
    # (a FileStore, a long job's TCPStore) does not keep one key per communicator.
    if int(store.add(f"{id_key}/read", 1)) == world_size:
        delete = getattr(store, "delete_key", None)
        if callable(delete):
            try:
                delete(id_key)
                delete(f"{id_key}/read")
            except Exception:   # noqa: BLE001 - a store without deletion keeps used keys;
                pass            # the next communicator's key differs, so none is read again
    if device is None:
        local = local_rank_from_env()
        device = default_device(rank if local is None else local)
    return cls(world_size, rank, uid, device, blocking=blocking, timeout=timeout)


def _check_store(store, timeout) -> None:
    """Refuse a store without the methods the exchange calls, before any of them is called."""
    need = ["set", "get", "add"]
    missing = [m for m in need if not callable(getattr(store, m, None))]
    if missing:
        raise TypeError(f"from_store: store must have {', '.join(m + '()' for m in need)} "
                        f"methods (a torch.distributed store has them); {type(store).__name__} "
                        f"lacks {', '.join(m + '()' for m in missing)}")
    if timeout is not None and not (callable(getattr(store, "check", None))
                                    or callable(getattr(store, "wait", None))):
        raise TypeError(f"timeout needs a store with check() or wait(); "
                        f"{type(store).__name__} has neither")


def _wait_for_key(store, key: str, deadline, timeout) -> None:
    """Wait until ``key`` is in the store, raising :class:`TimeoutError` at ``deadline``
    (``None``: the store's own ``get`` does the waiting, up to the store's own timeout)."""
    if deadline is None:
        return
    late = TimeoutError(f"rank 0's NCCL unique id did not arrive under the store key {key!r} "
                        f"within {timeout:g} s: is rank 0 running, with the same key prefix "
                        "and the same number of communicators made before this one?")
    check = getattr(store, "check", None)
    if callable(check):
        delay = 1e-3
        while not check([key]):
            left = deadline - time.monotonic()
            if left <= 0:
                raise late
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.1)
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise late
    try:
        store.wait([key], datetime.timedelta(seconds=left))
    except Exception as exc:
        # A store's wait raises its own error class on timeout (torch: DistStoreError); it
        # counts as the timeout when it came at the deadline (up to the store's rounding).
        if time.monotonic() >= deadline - min(0.05, timeout / 10):
            raise late from exc
        raise


def _id_bytes(data, source: str) -> bytes:
    """``data`` checked to be the 128 bytes of an id: bytes-like only (``bytes(128)`` of an
    int would make 128 zero bytes), of exactly that length."""
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"{source} holds an object of type {type(data).__name__}, not the "
                        f"{_lib.NCCL_UNIQUE_ID_BYTES} bytes of an NCCL unique id")
    if len(data) != _lib.NCCL_UNIQUE_ID_BYTES:
        raise ValueError(f"{source} is {len(data)} bytes; an NCCL unique id is "
                         f"{_lib.NCCL_UNIQUE_ID_BYTES} bytes")
    return bytes(data)


def from_mpi(cls, mpi_comm, device=None, *, blocking: bool = True,
             timeout: float | None = None):
    """Create a communicator spanning the ranks of an mpi4py communicator.

    Rank 0 of ``mpi_comm`` makes the :class:`UniqueId` and ``mpi_comm.Bcast`` sends its 128
    bytes to the others as a byte buffer (no pickle is made or loaded); works under
    ``mpirun`` / ``srun`` across nodes.  mpi4py is not imported here: any object with
    ``Get_rank``, ``Get_size`` and ``Bcast`` serves.  If rank 0 cannot make the id it sends
    128 zero bytes, so that the other ranks raise too instead of waiting for ever.

    Parameters
    ----------
    mpi_comm : mpi4py.MPI.Comm
    device : Device or int, optional
        Default: the rank's index among the ranks on its node (``Split_type`` with
        ``COMM_TYPE_SHARED`` where available, else the launcher's local-rank variable, else
        the global rank), modulo the number of visible GPUs.
    blocking, timeout
        As for :class:`~cudalibs.nccl.Communicator`.

    Returns
    -------
    Communicator

    Raises
    ------
    TypeError
        ``mpi_comm`` has no ``Bcast``.
    CudaLibsError
        Rank 0 could not make the id (on the other ranks).
    """
    timeout = check_timeout(timeout, bool(blocking))
    if not callable(getattr(mpi_comm, "Bcast", None)):
        raise TypeError(f"from_mpi: mpi_comm must have a Bcast() method (an mpi4py "
                        "communicator); "
                        f"{type(mpi_comm).__name__} has not")
    rank, size = int(mpi_comm.Get_rank()), int(mpi_comm.Get_size())
    buf = bytearray(_lib.NCCL_UNIQUE_ID_BYTES)
    failed = None
    if rank == 0:
        try:
            buf[:] = bytes(UniqueId())
        except Exception as exc:   # noqa: BLE001 - sent as zeros, raised below
            failed = exc
    mpi_comm.Bcast(buf, root=0)
    if failed is not None:
        raise failed
    data = _id_bytes(bytes(buf), "the id rank 0 broadcast")
    if not any(data):
        raise CudaLibsError("rank 0 could not make the NCCL unique id (see its error)")
    uid = UniqueId(data)
    if device is None:
        device = default_device(_mpi_local_rank(mpi_comm, rank))
    return cls(size, rank, uid, device, blocking=blocking, timeout=timeout)
