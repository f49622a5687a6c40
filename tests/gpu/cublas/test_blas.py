"""cuBLAS level 1 and 2 against float64 numpy."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T

from ._util import on_device, poisoned

GPU = settings(max_examples=15, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])
LEVEL1 = ["float32", "float64", "float16", "bfloat16", "complex64", "complex128"]


def _np(name):
    return cl.dtypes.lookup(name).numpy


def _vec(host, step):
    """A device vector equal to ``host`` with element stride ``step``."""
    big = np.zeros(len(host) * step, host.dtype)
    big[::step] = host
    return cl.to_device(big)[::step]


def _cancellation(terms: float, total) -> float:
    """``terms / |total|``: 1 when nothing cancels."""
    total = abs(total)
    return float(terms / total) if total else float("inf")


@pytest.mark.parametrize("dtype", LEVEL1)
@GPU
@given(n=T.matrix_sizes(500), incx=st.integers(1, 3), incy=st.integers(1, 3),
       seed=st.integers(0, 2**31))
def test_level1(device, dtype, n, incx, incy, seed):
    rng = np.random.default_rng(seed)
    dt = _np(dtype)
    x = T.random_array((n,), dt, rng=rng)
    y = T.random_array((n,), dt, rng=rng)
    alpha = (0.5 - 1j) if dt.kind == "c" else -1.5
    wide = np.complex128 if dt.kind == "c" else np.float64
    dx, dy = _vec(x, incx), _vec(y, incy)

    # A sum's rounding error is relative to its summands, not to the (possibly cancelled)
    # sum: the tolerance grows by how much cancels.
    x64, y64 = x.astype(wide), y.astype(wide)
    tol = T.TOLERANCES[dtype]
    r = cublas.dot(dx, dy)
    assert r.shape == () and r.dtype == dt
    exact = np.sum(x64 * y64)
    T.assert_close(r.get().reshape(1), [exact],
                   rtol=tol * max(1.0, _cancellation(np.abs(x64 * y64).sum(), exact)))
    if dt.kind == "c":
        r = cublas.dot(dx, dy, conjugate=True)
        exact = np.vdot(x64, y64)
        T.assert_close(r.get().reshape(1), [exact],
                       rtol=tol * max(1.0, _cancellation(np.abs(x64 * y64).sum(), exact)))
    nrm = cublas.nrm2(dx)
    T.assert_close(nrm.get().reshape(1), [np.linalg.norm(x.astype(wide))], dtype)

    assert cublas.axpy(alpha, dx, dy) is dy
    exact = alpha * x64 + y64
    T.assert_close(dy, exact, rtol=tol * max(1.0, _cancellation(
        np.linalg.norm(np.abs(alpha * x64) + np.abs(y64)), np.linalg.norm(exact))))
    assert cublas.scal(alpha, dx) is dx
    T.assert_close(dx, alpha * x.astype(wide), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@GPU
@given(data=st.data())
def test_gemv(device, dtype, data):
    m, n = data.draw(T.matrix_sizes(300), label="m"), data.draw(T.matrix_sizes(300), label="n")
    layout = data.draw(st.sampled_from(["C", "T", "padded"]), label="layout")
    trans = data.draw(st.booleans(), label="trans")
    accumulate = data.draw(st.booleans(), label="accumulate")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    dt = _np(dtype)
    a = T.random_array((m, n), dt, rng=rng)
    op = a.T if trans else a
    x = T.random_array((op.shape[1],), dt, rng=rng)
    alpha, beta = (1.5, -0.5) if accumulate else (2.0, 0)
    y0 = T.random_array((op.shape[0],), dt, rng=rng)
    y = cl.to_device(y0) if accumulate else poisoned((op.shape[0],), dt)
    res = cublas.gemv(on_device(a, layout), cl.to_device(x), y, alpha=alpha, beta=beta,
                      trans=trans)
    assert res is y
    wide = np.complex128 if dt.kind == "c" else np.float64
    expected = alpha * op.astype(wide) @ x.astype(wide) + (beta * y0.astype(wide)
                                                            if accumulate else 0)
    T.assert_close(res, expected, dtype, msg=f"m={m} n={n} layout={layout} trans={trans}")


def test_results_stay_on_device_without_sync(device, rng):
    x = cl.to_device(T.random_array((1000,), np.float32, rng=rng))
    with cl.Stream() as s:
        r = cublas.nrm2(x, stream=s)
        assert isinstance(r, cl.DeviceArray)
        T.assert_close(r.get(stream=s).reshape(1), [np.linalg.norm(x.get().astype(np.float64))],
                       np.float32)
    # The handle is back in host pointer mode: a gemm with host scalars still works.
    a = T.random_array((8, 8), np.float32, rng=rng)
    T.assert_close(cublas.gemm(cl.to_device(a), cl.to_device(a), alpha=2.0),
                   T.ref.gemm(a, a, alpha=2.0), np.float32)
