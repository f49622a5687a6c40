"""The GPU self-check behind ``python -m cudalibs``: each library against numpy, briefly.

A check is a function returning a short detail string and raising on failure; :data:`CHECKS`
lists them in order, and each library's binding adds its own.
"""

from __future__ import annotations

import time
import traceback

import numpy as np


def _memory_round_trip() -> str:
    from .driver import Device, Stream, device_count, to_device
    from .testing import assert_close, random_array

    for i in range(device_count()):
        dev = Device(i)
        host = random_array((257, 33), np.float32, rng=np.random.default_rng(i))
        with Stream(dev) as s:
            d = to_device(host, device=dev, stream=s)
            back = d.T.copy().get()
            s.sync()
        assert_close(back, host.T, np.float32)
        d.fill(3.5)
        assert_close(d.get(), np.full_like(host, 3.5), np.float32)
    return f"{device_count()} device(s): H2D, strided D2D, D2H, fill"


def _gemm() -> str:
    from . import cublas
    from .driver import Device, Stream, to_device
    from .testing import assert_close, random_array, ref

    rng = np.random.default_rng(0)
    dev = Device(0)
    a = random_array((97, 64), np.float32, rng=rng)
    b = random_array((64, 33), np.float32, rng=rng)
    bias = random_array((33,), np.float32, rng=rng)
    with Stream(dev) as s:
        da, db, dbias = (to_device(x, device=dev, stream=s) for x in (a, b, bias))
        c = cublas.gemm(da, db.T.copy().T, stream=s).get(stream=s)
        d = cublas.matmul(da, db, bias=dbias, epilogue="bias_relu", stream=s).get(stream=s)
    assert_close(c, ref.gemm(a, b), np.float32)
    assert_close(d, np.maximum(ref.gemm(a, b) + bias, 0), np.float32)
    return "cuBLAS fp32 GEMM (transposed operand) and cuBLASLt matmul + bias + ReLU vs numpy"


def _conv() -> str:
    from . import cudnn
    from .driver import Device, Stream, to_device
    from .testing import assert_close, random_array, ref

    rng = np.random.default_rng(0)
    dev = Device(0)
    x = random_array((2, 6, 11, 9), np.float32, rng=rng)
    w = random_array((4, 3, 3, 3), np.float32, rng=rng)
    with Stream(dev) as s:
        dx, dw = to_device(x, device=dev, stream=s), to_device(w, device=dev, stream=s)
        y = cudnn.conv_forward(dx, dw, stride=(2, 1), padding=1, groups=2, stream=s).get(stream=s)
    assert_close(y, ref.conv_forward(x, w, (2, 1), 1, 1, 2), np.float32)
    return f"cuDNN {'.'.join(map(str, cudnn.version()))} grouped strided conv vs numpy"


def _attention() -> str:
    from . import cudnn
    from .driver import Device, Stream, to_device
    from .testing import assert_close, random_array, ref

    rng = np.random.default_rng(0)
    dev = Device(0)
    # Grouped-query attention (4 query heads over 2 key/value heads), causal, in bfloat16.
    q = random_array((2, 4, 40, 64), "bfloat16", rng=rng)
    k = random_array((2, 2, 40, 64), "bfloat16", rng=rng)
    v = random_array((2, 2, 40, 64), "bfloat16", rng=rng)
    with Stream(dev) as s:
        dq, dk, dv = (to_device(x, device=dev, stream=s) for x in (q, k, v))
        o = cudnn.sdpa(dq, dk, dv, causal=True, stream=s).get(stream=s)
    want = ref.sdpa_forward(q, k, v, causal=True)[0]
    assert_close(o, want, "bfloat16")
    return "cuDNN causal grouped-query attention (bf16) vs numpy"


def _layer_norm() -> str:
    from . import cudnn
    from .driver import Device, Stream, to_device
    from .testing import assert_close, random_array, ref

    rng = np.random.default_rng(0)
    dev = Device(0)
    x = random_array((64, 384), np.float32, rng=rng)
    w = random_array((384,), np.float32, rng=rng, low=0.5, high=1.5)
    b = random_array((384,), np.float32, rng=rng)
    with Stream(dev) as s:
        dx, dw, db = (to_device(a, device=dev, stream=s) for a in (x, w, b))
        y = cudnn.layer_norm(dx, dw, db, eps=1e-5, stream=s).get(stream=s)
    assert_close(y, ref.layer_norm(x, w, b, 1e-5)[0], np.float32)
    return "cuDNN layer norm (fp32) vs numpy"


def _fft() -> str:
    from . import cufft
    from .driver import Device, Stream, to_device
    from .testing import assert_close, random_array

    rng = np.random.default_rng(0)
    dev = Device(0)
    x = random_array((6, 96), np.float32, rng=rng)
    z = random_array((3, 20, 12), np.complex128, rng=rng)
    with Stream(dev) as s:
        dx, dz = to_device(x, device=dev, stream=s), to_device(z, device=dev, stream=s)
        spectrum = cufft.rfft(dx, norm="ortho", stream=s)
        back = cufft.irfft(spectrum, n=96, norm="ortho", stream=s).get(stream=s)
        f = cufft.fftn(dz, axes=(0, 2), stream=s).get(stream=s)
        spectrum = spectrum.get(stream=s)
    x64 = x.astype(np.float64)
    assert_close(spectrum, np.fft.rfft(x64, norm="ortho"), np.float32)
    assert_close(back, x64, np.float32)
    assert_close(f, np.fft.fftn(z, axes=(0, 2)), np.float64)
    return (f"cuFFT {'.'.join(map(str, cufft.version()))} rfft/irfft (fp32, ortho) and a "
            "strided 2-D fftn (fp64) vs numpy")


def _spmv() -> str:
    from . import cusparse
    from .driver import Device, Stream, to_device
    from .testing import assert_close

    rng = np.random.default_rng(0)
    dev = Device(0)
    n = 300
    # A random CSR matrix built on the host (sorted, unique columns per row).
    counts = rng.integers(0, 8, size=n)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    indices = np.concatenate([np.sort(rng.choice(n, size=c, replace=False))
                              for c in counts]).astype(np.int32)
    data = rng.uniform(-1, 1, size=indices.size)
    x = rng.uniform(-1, 1, size=n)
    dense = np.zeros((n, n))
    for r in range(n):
        dense[r, indices[indptr[r]:indptr[r + 1]]] = data[indptr[r]:indptr[r + 1]]
    with Stream(dev) as s:
        A = cusparse.CSR(to_device(indptr, device=dev, stream=s),
                         to_device(indices, device=dev, stream=s),
                         to_device(data, device=dev, stream=s), (n, n))
        y = cusparse.spmv(A, to_device(x, device=dev, stream=s), stream=s).get(stream=s)
        A.close()
    assert_close(y, dense @ x, np.float64, scale=np.abs(dense) @ np.abs(x))
    return f"cuSPARSE {'.'.join(map(str, cusparse.version()))} SpMV (CSR, fp64) vs numpy"


#: (name, check) pairs run in order.
CHECKS = [
    ("memory round trip", _memory_round_trip),
    ("GEMM", _gemm),
    ("convolution", _conv),
    ("attention", _attention),
    ("layer norm", _layer_norm),
    ("FFT", _fft),
    ("sparse matrix-vector product", _spmv),
]


def run():
    """Yield ``(name, passed, detail)`` for each check."""
    for name, check in CHECKS:
        t0 = time.perf_counter()
        try:
            detail = check()
            yield name, True, f"{detail} ({(time.perf_counter() - t0) * 1e3:.0f} ms)"
        except Exception as exc:
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            yield name, False, last
