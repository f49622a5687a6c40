"""NCCL: collective communication between GPUs, in one process or many.

``_lib`` holds the raw prototype table of ``libnccl.so.2``; :mod:`cudalibs.nccl._base` turns an
``ncclResult_t`` into :class:`~cudalibs.errors.NcclError` carrying ``ncclGetLastError``;
:mod:`cudalibs.nccl.comm` holds the Pythonic layer: :class:`UniqueId`, :class:`Communicator`
(created directly, from a ``torch.distributed``-style store, from an mpi4py communicator, or
for all GPUs of this process with ``init_all``), its collectives, and :func:`group`.
Importing this package loads nothing.

>>> from cudalibs import nccl                                         # doctest: +SKIP
>>> comms = nccl.Communicator.init_all([0, 1])                         # doctest: +SKIP
>>> with nccl.group():                                                 # doctest: +SKIP
...     for c, x in zip(comms, xs):
...         c.all_reduce(x, out=x, op="avg")
>>> nccl.close_all(comms)                                              # doctest: +SKIP
"""

from ._base import unique_id_bytes, version, version_tuple
from .comm import OPS, Communicator, NcclTimeoutError, UniqueId, close_all, group

__all__ = ["version", "version_tuple", "unique_id_bytes", "UniqueId", "Communicator",
           "NcclTimeoutError", "group", "close_all", "OPS"]
