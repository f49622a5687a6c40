"""gemm and matmul with transposed views of square operands, against the float64 reference.

A square matrix and its transposed view have one shape and, unpadded, one leading dimension:
only which stride is the unit one tells them apart, and with it the transpose flag cuBLAS
gets.  The other GEMM tests draw sizes that are seldom square, so a mapping that lost the
flag for square operands alone would pass them; reading the view untransposed stays inside
its memory, so nothing crashes either.
"""

import pytest

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T

from ._util import on_device, poisoned

#: (m, k, n): a square, b square, both square (odd sides: no tile multiple).
SIZES = [(40, 40, 24), (24, 40, 40), (33, 33, 33)]
#: (layout of a, layout of b): "T" is the transposed view of a C-ordered copy.
LAYOUTS = [("T", "C"), ("C", "T"), ("T", "T")]


@pytest.mark.parametrize("mkn", SIZES, ids=lambda s: "m{}-k{}-n{}".format(*s))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_transposed_square_operands(device, rng, dtype, mkn):
    dt = cl.dtypes.lookup(dtype).numpy
    m, k, n = mkn
    a = T.random_array((m, k), dt, rng=rng)
    b = T.random_array((k, n), dt, rng=rng)
    want = T.ref.gemm(a, b)
    for la, lb in LAYOUTS:
        da, db = on_device(a, la), on_device(b, lb)
        what = f"{dtype} m={m} k={k} n={n} layouts a={la} b={lb}"
        out = poisoned((m, n), dt)
        assert cublas.gemm(da, db, out) is out
        T.assert_close(out, want, dtype, msg=f"gemm, {what}")
        out = poisoned((m, n), dt)
        assert cublas.matmul(da, db, out=out) is out
        T.assert_close(out, want, dtype, msg=f"matmul, {what}")
