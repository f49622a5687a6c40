"""gemm finds its cached plan by the whole problem: one shape in several layouts, called in
turn, each product against the float64 reference.

A plan keyed by less than the operands' strides (a transposed or padded operand of a shape
seen before) would run the leading dimensions and transpose flags of another layout; the
other GEMM tests draw a new shape for nearly every call and would not notice.
"""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T

from ._util import on_device, poisoned

#: (layout of a, layout of b) in call order: one shape, each operand's strides changing in
#: turn and coming back.
SEQUENCE = [("C", "C"), ("C", "T"), ("C", "padded"), ("T", "C"), ("padded", "T"), ("C", "C"),
            ("T", "T"), ("padded", "padded")]


@pytest.mark.parametrize("dtype", ["float32", "float16", "complex64"])
def test_one_shape_in_every_layout_computes_each_product(device, rng, dtype):
    dt = cl.dtypes.lookup(dtype).numpy
    m, k, n = 37, 29, 23
    a = T.random_array((m, k), dt, rng=rng)
    b = T.random_array((k, n), dt, rng=rng)
    want = T.ref.gemm(a, b)
    for la, lb in SEQUENCE:
        out = poisoned((m, n), dt)
        assert cublas.gemm(on_device(a, la), on_device(b, lb), out) is out
        T.assert_close(out, want, dtype, msg=f"into out, layouts a={la} b={lb}")
        res = cublas.gemm(on_device(a, la), on_device(b, lb))
        T.assert_close(res, want, dtype, msg=f"allocated out, layouts a={la} b={lb}")


def test_strided_batched_in_every_layout_computes_each_product(device, rng):
    batch, m, k, n = 3, 21, 18, 26
    a = T.random_array((batch, m, k), np.float32, rng=rng)
    b = T.random_array((batch, k, n), np.float32, rng=rng)
    want = T.ref.gemm(a, b)
    for la, lb in SEQUENCE:
        out = poisoned((batch, m, n), np.float32)
        cublas.gemm_strided_batched(on_device(a, la), on_device(b, lb), out=out)
        T.assert_close(out, want, np.float32, msg=f"layouts a={la} b={lb}")
