"""NCCL: collective communication between GPUs, in one process or many.

``_lib`` holds the raw prototype table of ``libnccl.so.2``; :mod:`cudalibs.nccl._base` turns an
``ncclResult_t`` into :class:`~cudalibs.errors.NcclError` carrying ``ncclGetLastError``;
:mod:`cudalibs.nccl.comm` holds :class:`Communicator` (created directly, from a
``torch.distributed``-style store, from an mpi4py communicator, or for all GPUs of this
process with ``init_all``) and its collectives; :mod:`cudalibs.nccl.bootstrap` the
:class:`UniqueId` and its exchange through a store or MPI; :mod:`cudalibs.nccl.group` the
:func:`group` block.
Importing this package loads nothing.

>>> from cudalibs import nccl                                         # doctest: +SKIP
>>> comms = nccl.Communicator.init_all([0, 1])                         # doctest: +SKIP
>>> with nccl.group():                                                 # doctest: +SKIP
...     for c, x in zip(comms, xs):
...         c.all_reduce(x, out=x, op="avg")
>>> nccl.close_all(comms)                                              # doctest: +SKIP
"""

from ._base import NcclTimeoutError, unique_id_bytes, version, version_int, version_tuple
from .bootstrap import UniqueId
from .comm import OPS, Communicator, close_all
from .group import group

__all__ = ["version", "version_int", "version_tuple", "unique_id_bytes", "UniqueId",
           "Communicator", "NcclTimeoutError", "group", "close_all", "OPS"]
