"""Bootstrap: how the ranks of a communicator agree on its :class:`UniqueId`.

Rank 0 makes the id (``ncclGetUniqueId``) and every other rank must receive its 128 bytes
before any of them can create the communicator.  cudalibs opens no rendezvous of its own; it
uses the channel the program already has:

- a key-value **store** (:func:`from_store`): anything with ``set(key, bytes)`` and
  ``get(key) -> bytes`` where ``get`` waits for the key -- ``torch.distributed.TCPStore`` or
  ``FileStore`` under ``torchrun``, a Redis client.  Rank 0 sets the key, the others get it;
- an **MPI** communicator (:func:`from_mpi`): rank 0's bytes go out by ``bcast``.

Both also pick this rank's GPU when none is given: its index among the ranks of its node
(the launcher's local-rank variable, or an MPI shared-memory split) modulo the visible GPUs.

:class:`~cudalibs.nccl.Communicator` exposes both as class methods
(``Communicator.from_store``, ``Communicator.from_mpi``).
"""

from __future__ import annotations

import hashlib
import sys

from .. import _env
from ..driver.device import Device, device_count
from ..errors import CudaLibsError
from . import _base, _lib
from ._base import check_ranks, check_timeout

__all__ = ["UniqueId", "from_store", "from_mpi", "local_rank_from_env", "default_device",
           "DEFAULT_STORE_KEY"]

#: The store key :func:`from_store` uses unless told otherwise.
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
        if isinstance(data, UniqueId):
            self._bytes = data._bytes
            return
        if isinstance(data, str) or not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"a unique id is {_lib.NCCL_UNIQUE_ID_BYTES} bytes, not "
                            f"{type(data).__name__}")
        data = bytes(data)
        if len(data) != _lib.NCCL_UNIQUE_ID_BYTES:
            raise ValueError(f"a unique id is {_lib.NCCL_UNIQUE_ID_BYTES} bytes, got "
                             f"{len(data)}")
        self._bytes = data

    @classmethod
    def from_bytes(cls, data) -> "UniqueId":
        """The id whose raw bytes are ``data`` (as ``bytes(uid)`` or :attr:`bytes` gives)."""
        return cls(data)

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


# -- the two exchanges ----------------------------------------------------------------------------
def from_store(cls, store, rank: int, world_size: int, device=None, *,
               key: str = DEFAULT_STORE_KEY, blocking: bool = True,
               timeout: float | None = None):
    """Create this rank's communicator, exchanging the id through a key-value store.

    Rank 0 makes a :class:`UniqueId` and ``store.set(key, bytes(uid))``; every other rank
    ``store.get(key)`` (which waits for the key).  Any object with those two methods works:
    ``torch.distributed.TCPStore`` / ``FileStore`` (under ``torchrun``), a Redis client.  Use
    a fresh ``key`` for each communicator made through the same store.

    Parameters
    ----------
    store : object with ``set(key, bytes)`` and ``get(key) -> bytes``
    rank, world_size : int
    device : Device or int, optional
        Default: ``LOCAL_RANK`` (or the MPI launchers' local-rank variables) modulo the
        number of visible GPUs when set, else ``rank`` modulo that number.
    key : str
    blocking, timeout
        As for :class:`~cudalibs.nccl.Communicator`.

    Returns
    -------
    Communicator

    Raises
    ------
    TypeError
        ``store`` lacks ``set`` or ``get``.
    ValueError
        ``rank`` out of range, or the stored id is not 128 bytes.
    """
    world_size, rank = check_ranks(world_size, rank)
    timeout = check_timeout(timeout, bool(blocking))
    if not (callable(getattr(store, "set", None)) and callable(getattr(store, "get", None))):
        raise TypeError(f"store must have set() and get() methods; {type(store).__name__} "
                        "has not")
    if rank == 0:
        uid = UniqueId()
        store.set(key, bytes(uid))
    else:
        uid = UniqueId(bytes(store.get(key)))
    if device is None:
        local = local_rank_from_env()
        device = default_device(rank if local is None else local)
    return cls(world_size, rank, uid, device, blocking=blocking, timeout=timeout)


def from_mpi(cls, mpi_comm, device=None, *, blocking: bool = True,
             timeout: float | None = None):
    """Create a communicator spanning the ranks of an mpi4py communicator.

    Rank 0 of ``mpi_comm`` makes the :class:`UniqueId` and ``mpi_comm.bcast`` sends it to the
    others; works under ``mpirun`` / ``srun`` across nodes.  mpi4py is not imported here: any
    object with ``Get_rank``, ``Get_size`` and ``bcast`` serves.

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
    """
    timeout = check_timeout(timeout, bool(blocking))
    rank, size = int(mpi_comm.Get_rank()), int(mpi_comm.Get_size())
    data = mpi_comm.bcast(bytes(UniqueId()) if rank == 0 else None, root=0)
    uid = UniqueId(data)
    if device is None:
        device = default_device(_mpi_local_rank(mpi_comm, rank))
    return cls(size, rank, uid, device, blocking=blocking, timeout=timeout)
