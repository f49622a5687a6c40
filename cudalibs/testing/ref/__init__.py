"""numpy reference implementations of the library operations.

Each takes host arrays (anything ``numpy.asarray`` accepts), computes in float64 (complex128
when any input is complex) and returns that wide result; compare with
:func:`cudalibs.testing.assert_close` passing the input dtype.  One private module per area
(``_blas``: GEMM; the others add theirs), all re-exported here:
``cudalibs.testing.ref.gemm(a, b)``.
"""

from ._blas import gemm

__all__ = ["gemm"]
