"""cuBLAS and cuBLASLt: dense linear algebra on the GPU.

``_lib`` holds the raw prototype tables of both libraries (``libcublas`` and ``libcublasLt``,
loaded separately and lazily); the wrapper modules build on :mod:`cudalibs.cublas._base`,
which turns a ``cublasStatus_t`` into :class:`~cudalibs.errors.CublasError`.  Importing this
package loads nothing.
"""

from ._base import lt_version, version

__all__ = ["version", "lt_version"]
