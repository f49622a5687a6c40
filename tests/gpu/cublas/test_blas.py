"""cuBLAS level 1 and 2 against float64 numpy."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T

from .._sizes import bound, fit, gpu_settings
from ._util import on_device, poisoned

GPU = gpu_settings(15)
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


def _gamma(n: int, u: float) -> float:
    """``γ_n = n u / (1 − n u)``: the relative error bound of ``n`` roundings in a row."""
    return n * u / (1 - n * u)


def _dot_bound(x, y, exact) -> float:
    """The largest error of ``cublas.dot(x, y)`` (or ``dot(x, y, conjugate=True)``) against
    the float64 ``exact``, from the arithmetic ``cublasDotEx`` does.

    Any order of summation errs by at most ``γ_n Σ|x_i||y_i|`` in real arithmetic and
    ``√2 γ_{n+2} Σ|x_i||y_i|`` in complex (Higham, *Accuracy and Stability of Numerical
    Algorithms*, §3.1 and §3.6), with ``u`` that of the accumulation: float32 for float16 and
    bfloat16 (whose products are exact in it, 2 x 11 significand bits < 24), the type itself
    otherwise.  The float64 reference errs in the same way with ``u = 2**-53``.  float16 and
    bfloat16 results are then rounded to their type: twice its unit roundoff relative to the
    value (a faithful rounding, to either neighbour), plus half its smallest subnormal.
    """
    dt, n = x.dtype, len(x)
    terms = float(np.sum(np.abs(x.astype(np.complex128)) * np.abs(y.astype(np.complex128))))
    half = dt in (np.float16, cl.dtypes.bfloat16)
    u_acc = T.unit_roundoff(np.float32 if half else dt)
    k = (np.sqrt(2), n + 2) if dt.kind == "c" else (1.0, n)
    acc = k[0] * _gamma(k[1], u_acc) * terms
    ref = np.sqrt(2) * _gamma(n + 2, 2.0 ** -53) * terms
    if not half:
        return acc + ref
    tiny = float(ml_dtypes.finfo(dt).smallest_subnormal) / 2
    return acc + ref + 2 * T.unit_roundoff(dt) * (abs(exact) + acc) + tiny


@pytest.mark.parametrize("dtype", LEVEL1)
@GPU
@given(n=T.matrix_sizes(bound(500, 1 << 20)), incx=st.integers(1, 3), incy=st.integers(1, 3),
       seed=st.integers(0, 2**31))
def test_level1(device, dtype, n, incx, incy, seed):
    rng = np.random.default_rng(seed)
    dt = _np(dtype)
    x = T.random_array((n,), dt, rng=rng)
    y = T.random_array((n,), dt, rng=rng)
    alpha = (0.5 - 1j) if dt.kind == "c" else -1.5
    wide = np.complex128 if dt.kind == "c" else np.float64
    dx, dy = _vec(x, incx), _vec(y, incy)

    x64, y64 = x.astype(wide), y.astype(wide)
    tol = T.TOLERANCES[dtype]
    # The dot against the error bound of its own arithmetic (see _dot_bound): a product left
    # out or counted twice exceeds it, where a tolerance scaled by the cancellation would not.
    r = cublas.dot(dx, dy)
    assert r.shape == () and r.dtype == dt
    exact = np.sum(x64 * y64)
    T.assert_within(r.get().reshape(1), [exact], _dot_bound(x, y, exact), msg=f"dot n={n}")
    if dt.kind == "c":
        r = cublas.dot(dx, dy, conjugate=True)
        exact = np.vdot(x64, y64)
        T.assert_within(r.get().reshape(1), [exact], _dot_bound(x, y, exact),
                        msg=f"dotc n={n}")
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
    side = T.matrix_sizes(bound(300, 4099))
    m, n = fit((data.draw(side, label="m"), data.draw(side, label="n")), 1 << 23)
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
