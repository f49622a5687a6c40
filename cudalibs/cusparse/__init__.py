"""cuSPARSE: sparse matrices on the device and the generic API's operations, as plans on the
one front.

- :class:`CSR`, :class:`CSC`, :class:`COO`, :class:`BSR`: sparse matrices over device
  arrays, checked when made (index and value dtypes, lengths, shape; the canonical structure
  cuSPARSE needs on request); :func:`from_scipy` (a canonical copy: sorted, duplicates
  summed), :func:`from_torch`, :func:`from_dense`; ``to_scipy()``, ``to_numpy()``,
  ``to_dense()``.
- :class:`BlockedELL`: square blocks, the same number of block slots in every block row
  (-1 for an empty one); from device arrays, ``BlockedELL.from_scipy`` (a BSR matrix, or any
  with a block size), ``BlockedELL.from_dense`` (host, or device through
  ``cusparseDenseToSparse``); float16, bfloat16, float32, float64 values, int32 indices.
  cuSPARSE multiplies it in SpMM only (on tensor cores).
- One-shots :func:`spmv`, :func:`spmm` (autotuned), :func:`sddmm`, :func:`spgemm`,
  :func:`spsv`, :func:`spsm`: their plans are found in the one plan cache
  (:data:`SPARSE_KEY`, kind ``"cusparse"``) and close with their matrix.
- Plans :class:`SpMV`, :class:`SpMM`, :class:`SDDMM`, :class:`SpGEMM`, :class:`SpSV`,
  :class:`SpSM`: construct, ``plan()`` / ``autotune()``, ``execute()``, ``close()``; work
  buffers from the stream-ordered pool, one cuSPARSE handle per device and thread.  SpMV and
  SpMM offer every algorithm cuSPARSE has for the problem (the fastest wins an autotune;
  cuSPARSE's default runs without one); ``deterministic=True`` keeps only those it documents
  as bitwise reproducible (:data:`.algs.DETERMINISTIC`) and refuses a problem that has none.
- :func:`version`, :func:`version_int`, :func:`error_name`, :func:`error_string`.

float32, float64, complex64 and complex128 values (Blocked-ELL: see above); int32 or int64
indices.  ``_lib`` holds the raw prototype table of ``libcusparse``, loaded on first use;
importing this package loads nothing.

>>> import numpy as np, scipy.sparse as sp, cudalibs as cl
>>> A = cl.cusparse.from_scipy(sp.random(1000, 1000, density=0.01, format="csr"))  # doctest: +SKIP
>>> x = cl.to_device(np.ones(1000))                                    # doctest: +SKIP
>>> y = cl.cusparse.spmv(A, x)                                         # doctest: +SKIP
"""

from ._base import error_name, error_string, version, version_int
from .ell import BlockedELL
from .matrix import BSR, COO, CSC, CSR, SparseMatrix, from_dense, from_scipy, from_torch
from .oneshot import SPARSE_KEY, sddmm, spgemm, spmm, spmv, spsm, spsv
from .plan import SDDMM, SpMM, SpMV
from .solve import SpSM, SpSV
from .spgemm import SpGEMM

__all__ = ["version", "version_int", "error_name", "error_string", "SparseMatrix", "CSR",
           "CSC", "COO", "BSR", "BlockedELL", "from_scipy", "from_torch", "from_dense", "SpMV",
           "SpMM", "SDDMM", "SpGEMM", "SpSV", "SpSM", "SPARSE_KEY", "spmv", "spmm", "sddmm",
           "spgemm", "spsv", "spsm"]
