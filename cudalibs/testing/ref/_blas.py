"""Dense linear algebra references (cuBLAS, cuBLASLt and the matmul kernels)."""

from __future__ import annotations

import numpy as np

from ._common import blas_op, wide_type

__all__ = ["gemm"]


def gemm(a, b, c=None, alpha=1, beta=0, trans_a=False, trans_b=False) -> np.ndarray:
    """``alpha * op(a) @ op(b) + beta * c``, row-major, in float64 or complex128.

    Parameters
    ----------
    a, b : array-like
        Matrices, or stacks of them (leading axes broadcast as in ``numpy.matmul``).
    c : array-like, optional
        Added as ``beta * c``; omitted means zero, whatever ``beta`` is.
    alpha, beta : scalar
    trans_a, trans_b : bool or {"N", "T", "C"}
        ``op``: none, transpose of the last two axes, or conjugate transpose.

    Returns
    -------
    numpy.ndarray
        float64, or complex128 when any operand or scalar is complex.

    Raises
    ------
    ValueError
        Inner dimensions differ, or ``c`` does not broadcast to the product's shape.
    """
    wide = wide_type(a, b, *(() if c is None else (c,)), alpha, beta)
    A = blas_op(np.asarray(a).astype(wide), trans_a)
    B = blas_op(np.asarray(b).astype(wide), trans_b)
    if A.ndim < 2 or B.ndim < 2:
        raise ValueError(f"gemm needs matrices, got op(a) {A.shape} and op(b) {B.shape}")
    if A.shape[-1] != B.shape[-2]:
        raise ValueError(f"inner dimensions differ: op(a) {A.shape} @ op(b) {B.shape}")
    out = wide(alpha) * np.matmul(A, B)
    if c is not None:
        C = np.asarray(c).astype(wide)
        try:
            fits = np.broadcast_shapes(C.shape, out.shape) == out.shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"c of shape {C.shape} does not fit the product {out.shape}")
        out = out + wide(beta) * C
    return out
