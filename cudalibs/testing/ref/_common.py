"""Helpers shared by the reference implementations."""

from __future__ import annotations

import numpy as np


def wide_type(*arrays) -> type:
    """The float64 (or complex128) type a reference computes ``arrays`` in."""
    return np.complex128 if any(np.asarray(x).dtype.kind == "c" for x in arrays) else np.float64


def blas_op(x: np.ndarray, trans) -> np.ndarray:
    """Apply a BLAS ``op``: False/"N" none, True/"T" transpose, "C" conjugate transpose."""
    if trans in (False, None, "N", "n"):
        return x
    if x.ndim < 2:
        raise ValueError(f"cannot transpose an operand of shape {x.shape}")
    if trans in (True, "T", "t"):
        return np.swapaxes(x, -1, -2)
    if trans in ("C", "c", "H", "h"):
        return np.swapaxes(x, -1, -2).conj()
    raise ValueError(f"trans must be a bool or one of 'N', 'T', 'C', got {trans!r}")
