"""fp8 references: amax, scaled quantization to fp8 with saturation, dequantization, and the
delayed-scaling update (Transformer Engine's rule).

The operations of :mod:`cudalibs.kernels.fp8`.  amax, dequantization and the history are
exact in float64.  Quantization (:func:`quantize_fp8_f32`) returns the fp8 array itself: given
the float32 product it is exact, so it is computed as the kernels define it --
``float32(x) * float32(scale)`` in float32, then ml_dtypes' round-to-nearest-even conversion of
the value clipped to the format's range -- and a kernel must match it bit for bit.  The
delayed-scaling update computes in float64 but stores the scale as the rule does, in float32
(:func:`delayed_scale_update` says where).
"""

from __future__ import annotations

import numpy as np

from ... import dtypes as _dtypes

__all__ = ["FP8_MAX", "amax", "quantize_fp8_f32", "dequantize_fp8", "delayed_scale_update"]

#: The largest finite value of each fp8 type, by numpy dtype.
FP8_MAX = {d: m for d, m in ((_dtypes.float8_e4m3fn, 448.0), (_dtypes.float8_e5m2, 57344.0))
           if d is not None}

_F32_MAX = float(np.finfo(np.float32).max)


def amax(x) -> float:
    """``max(|x|)`` as a float: NaN when any element is NaN (as ``torch.amax``), 0.0 for an
    empty array."""
    a = np.abs(np.asarray(x).astype(np.float64))
    return float(a.max()) if a.size else 0.0


def _fp8_type(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in FP8_MAX:
        raise ValueError(f"dtype must be one of {sorted(map(str, FP8_MAX))}, not {dt}")
    return dt


def quantize_fp8_f32(x, scale, dtype=_dtypes.float8_e4m3fn) -> np.ndarray:
    """``fp8(saturate(float32(x) * float32(scale)))``, exactly as the kernels define it.

    The product is a float32 product, as :func:`cudalibs.kernels.quantize_fp8` computes it
    (:func:`quantize_fp8`, the fp8 attention's reference, multiplies in float64, which can
    round differently at the midpoints between fp8 values).  Then values beyond
    ``±FP8_MAX[dtype]``, infinities included, become ``±FP8_MAX``, the rest round to nearest
    even; a NaN ``x`` gives the fp8 NaN of its sign, a NaN product of a number (``0 * inf``)
    the positive one.

    Parameters
    ----------
    x : array-like
        float32, float16 or bfloat16 values (anything exact in float32).
    scale : float or array-like of one element
        Rounded to float32.
    dtype : dtype-like
        ``float8_e4m3fn`` or ``float8_e5m2``.

    Returns
    -------
    numpy.ndarray
        Of ``dtype``, ``x``'s shape.
    """
    dt = _fp8_type(dtype)
    v = np.asarray(x).astype(np.float32)
    s = np.asarray(scale, dtype=np.float32).reshape(())
    with np.errstate(over="ignore", invalid="ignore"):
        p = v * s
    x_nan = np.isnan(v)
    p = np.where(x_nan, v, np.where(np.isnan(p), np.float32(np.nan), p))
    top = np.float32(FP8_MAX[dt])
    with np.errstate(invalid="ignore"):
        q = np.clip(p, -top, top).astype(dt)
        # clip's NaN need not keep its sign; ml_dtypes' conversion of the NaN itself does
        nan = np.isnan(p)
        q[nan] = p[nan].astype(dt)
    return q


def dequantize_fp8(q, scale_inv) -> np.ndarray:
    """``q * scale_inv`` in float64, exact (an fp8 significand times a float32 one fits a
    float64).  The kernels round this product to float32, then to their output type.

    Parameters
    ----------
    q : array-like
        ``float8_e4m3fn`` or ``float8_e5m2``.
    scale_inv : float or array-like of one element
        Rounded to float32.

    Returns
    -------
    numpy.ndarray
        float64, ``q``'s shape.
    """
    a = np.asarray(q)
    _fp8_type(a.dtype)
    s = float(np.asarray(scale_inv, dtype=np.float32).reshape(()))
    with np.errstate(invalid="ignore"):
        return a.astype(np.float64) * s


def delayed_scale_update(amax_history, amax, scale, *, margin=0, fp8_max=448.0, algo="max"):
    """One step of delayed scaling, for every tensor (column) of the history.

    With ``scaled_max = float32(fp8_max * 2**-margin)``, for each tensor ``j``::

        history[1:, j] = history[:-1, j];  history[0, j] = amax[j]
        ref = max(history[:, j])  ("max", NaN-propagating)  or  amax[j]  ("most_recent")
        scale[j] = float32(scaled_max / ref)  when 0 < ref < inf (FLT_MAX where that
                   overflows float32), else the old scale[j]
        scale_inv[j] = 1 / scale[j]

    ``scale`` is what the kernels store, a float32 value (the quotient computed in float64 and
    rounded once, which is float32's correctly rounded division); ``scale_inv`` is its exact
    reciprocal in float64, which a kernel's float32 division rounds.

    Parameters
    ----------
    amax_history : array-like
        ``[history_len]`` or ``[history_len, n]``, row 0 the newest; not modified.
    amax, scale : array-like
        One value per tensor (``n``, or one for a 1-D history).
    margin, fp8_max : float
    algo : {"max", "most_recent"}

    Returns
    -------
    history : numpy.ndarray
        float64, ``amax_history``'s shape: the rolled history.
    scale, scale_inv : numpy.ndarray
        float64, ``scale``'s shape.
    """
    if algo not in ("max", "most_recent"):
        raise ValueError(f"algo must be 'max' or 'most_recent', not {algo!r}")
    h = np.asarray(amax_history).astype(np.float64)
    if h.ndim not in (1, 2) or h.shape[0] < 1:
        raise ValueError(f"amax_history must be [history_len] or [history_len, n] with "
                         f"history_len >= 1, got shape {h.shape}")
    cols = h.reshape(h.shape[0], -1)
    n = cols.shape[1]
    a = np.asarray(amax).astype(np.float64).reshape(n)
    old_scale = np.asarray(scale)
    old = old_scale.astype(np.float64).reshape(n)
    new = np.concatenate([a[None, :], cols[:-1]], axis=0)
    ref = new.max(axis=0) if algo == "max" else a
    scaled_max = float(np.float32(fp8_max * 2.0 ** -margin))
    ok = (ref > 0) & (ref < np.inf)
    with np.errstate(over="ignore", divide="ignore"):
        quotient = (scaled_max / np.where(ok, ref, 1.0)).astype(np.float32)
        stored = np.where(np.isinf(quotient), np.float32(_F32_MAX), quotient)
        s = np.where(ok, stored.astype(np.float64), old)
        inv = 1.0 / s
    return new.reshape(h.shape), s.reshape(old_scale.shape), inv.reshape(old_scale.shape)
