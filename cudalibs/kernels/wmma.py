"""Wrapper of ``wmma.ptx``: a float16 product on tensor cores (WMMA fragments), float32
accumulation, any M, N, K."""

from __future__ import annotations

import numpy as np

from ..runtime import ptxlib
from ..driver.stream import as_stream
from ._common import F16, F32, GRID_YZ_MAX, matmul_operands, output

__all__ = ["wmma_gemm"]


def wmma_gemm(a, b, out=None, out_dtype=np.float32, stream=None):
    """``a @ b`` on tensor cores (WMMA), float16 inputs, float32 accumulation.

    Any M, N, K: edges are loaded with guards and zero fill.  Inputs whose rows are a multiple
    of 8 elements and 16-byte aligned load 16 bytes at a time (the fast path).

    Parameters
    ----------
    a : DeviceArray or device array-like
        ``(M, K)`` float16, C-contiguous.
    b : DeviceArray or device array-like
        ``(K, N)`` float16, C-contiguous.
    out : DeviceArray, optional
        ``(M, N)`` of ``out_dtype``, not overlapping ``a`` or ``b``.
    out_dtype : {numpy.float32, numpy.float16}
        float32 keeps the accumulator; float16 rounds it once.  When ``out`` is given, its
        dtype must equal ``out_dtype``.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``(M, N)`` of ``out_dtype``.

    Raises
    ------
    TypeError
        Inputs not float16, or ``out_dtype`` neither float32 nor float16.
    ValueError
        As for :func:`~cudalibs.kernels.matmul_naive`.
    """
    op = "wmma_gemm"
    try:
        odt = np.dtype(out_dtype)
    except TypeError:
        raise TypeError(f"{op}: out_dtype {out_dtype!r} is not a dtype") from None
    if odt not in (F32, F16):
        raise TypeError(f"{op}: out_dtype must be float32 or float16, not {odt}")
    a, b, dev, m, n, k = matmul_operands(op, a, b, (F16,), stream)
    s = as_stream(stream, dev)
    out = output(out, op, (m, n), odt, dev, s, (("a", a), ("b", b)), same_ok=False)
    if m and n:
        grid = (-(-n // 64), min(-(-m // 64), GRID_YZ_MAX), 1)
        name = "wmma_gemm_f16_f32" if odt == F32 else "wmma_gemm_f16_f16"
        ptxlib.launch(dev, name, grid, (128, 1, 1), (a.address, b.address, out.address, m, n, k), s)
    return out
