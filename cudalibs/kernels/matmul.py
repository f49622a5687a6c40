"""Wrappers of ``matmul.ptx``: the naive and the shared-memory tiled float32 products, and
the batched product (one batch element per grid z).

These are teaching kernels and baselines to compare cuBLAS against; :func:`cudalibs.cublas.gemm`
is the product to use.
"""

from __future__ import annotations

from ..runtime import ptxlib
from ..driver.stream import as_stream
from ._common import F32, GRID_YZ_MAX, array, dim, matmul_operands, output

__all__ = ["matmul_naive", "matmul_tiled", "bmm"]


def _matmul(op, name, tile, block, a, b, out, stream):
    a, b, dev, m, n, k = matmul_operands(op, a, b, (F32,), stream)
    s = as_stream(stream, dev)
    out = output(out, op, (m, n), F32, dev, s, (("a", a), ("b", b)), same_ok=False)
    if m and n:
        grid = (-(-n // tile), min(-(-m // tile), GRID_YZ_MAX), 1)
        ptxlib.launch(dev, name, grid, block, (a.address, b.address, out.address, m, n, k), s)
    return out


def matmul_naive(a, b, out=None, stream=None):
    """``a @ b`` with the naive kernel: one thread per output element, no data reuse.

    The textbook baseline of :func:`matmul_tiled`; useful to compare against, not to use.

    Parameters
    ----------
    a : DeviceArray or device array-like
        ``(M, K)`` float32, C-contiguous.
    b : DeviceArray or device array-like
        ``(K, N)`` float32, C-contiguous.
    out : DeviceArray, optional
        ``(M, N)`` float32, not overlapping ``a`` or ``b``.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``(M, N)`` float32.  ``K == 0`` gives zeros.

    Raises
    ------
    TypeError
        A dtype other than float32.
    ValueError
        Not 2-D, inner dimensions differ, a dimension above 2**32 - 1, non-contiguous,
        ``out`` of the wrong shape or overlapping an input.
    """
    return _matmul("matmul_naive", "matmul_naive_f32", 16, (16, 16, 1), a, b, out, stream)


def matmul_tiled(a, b, out=None, stream=None):
    """``a @ b`` with the shared-memory tiled kernel (32x32 tiles, float32 accumulation).

    Arguments and errors as for :func:`matmul_naive`.

    Returns
    -------
    DeviceArray
        ``(M, N)`` float32.
    """
    return _matmul("matmul_tiled", "matmul_tiled_f32", 32, (32, 8, 1), a, b, out, stream)


def bmm(a, b, out=None, stream=None):
    """Batched ``a @ b``: one batch element per grid z, 32x32 shared-memory tiles.

    Parameters
    ----------
    a : DeviceArray or device array-like
        ``(B, M, K)``, or ``(M, K)`` shared by every batch element; float32, C-contiguous.
    b : DeviceArray or device array-like
        ``(B, K, N)``, or ``(K, N)`` shared by every batch element.  At least one of ``a``,
        ``b`` is 3-D; when both are, their batch sizes are equal.
    out : DeviceArray, optional
        ``(B, M, N)`` float32, not overlapping ``a`` or ``b``.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``(B, M, N)`` float32.

    Raises
    ------
    TypeError, ValueError
        As for :func:`matmul_naive`; batch sizes that differ.
    """
    op = "bmm"
    a = array(a, op, "a", (F32,), ndim=(2, 3), stream=stream)
    dev = a.device
    b = array(b, op, "b", (F32,), ndim=(2, 3), device=dev, stream=stream)
    a3, b3 = len(a.shape) == 3, len(b.shape) == 3
    if not (a3 or b3):
        raise ValueError(f"{op}: a {a.shape} and b {b.shape} are both 2-D; use "
                         "matmul_tiled, or give one operand a batch axis")
    if a3 and b3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"{op}: batch sizes differ: a {a.shape}, b {b.shape}")
    batch = a.shape[0] if a3 else b.shape[0]
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2:
        raise ValueError(f"{op}: inner dimensions differ: a {a.shape} @ b {b.shape}")
    for what, v in (("batch", batch), ("M", m), ("N", n), ("K", k)):
        dim(op, what, v)
    s = as_stream(stream, dev)
    out = output(out, op, (batch, m, n), F32, dev, s, (("a", a), ("b", b)), same_ok=False)
    if batch and m and n:
        grid = (-(-n // 32), min(-(-m // 32), GRID_YZ_MAX), min(batch, GRID_YZ_MAX))
        stride_a = m * k if a3 else 0
        stride_b = k * n if b3 else 0
        ptxlib.launch(dev, "bmm_f32", grid, (32, 8, 1),
                      (a.address, b.address, out.address, batch, m, n, k, stride_a, stride_b, m * n), s)
    return out
