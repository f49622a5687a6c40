"""NCCL: collective communication between GPUs, in one process or many.

``_lib`` holds the raw prototype table of ``libnccl.so.2``; the wrapper modules build on
:mod:`cudalibs.nccl._base`, which turns an ``ncclResult_t`` into
:class:`~cudalibs.errors.NcclError` carrying ``ncclGetLastError``.  Importing this package
loads nothing.
"""

from ._base import unique_id_bytes, version, version_tuple

__all__ = ["version", "version_tuple", "unique_id_bytes"]
