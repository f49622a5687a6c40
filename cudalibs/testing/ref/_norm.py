"""Layer norm and RMS norm references, forward and backward, in float64.

Normalisation runs over the last ``normalized_ndim`` dimensions of ``x``: ``x`` is viewed as
``(rows, features)`` with ``rows`` the product of the leading dimensions.  The statistics come
back the way :func:`cudalibs.cudnn.layer_norm` returns them (and ``torch.native_layer_norm``):
shape ``x.shape[:-normalized_ndim] + (1,) * normalized_ndim``, so ``(x - mean) * inv_std``
broadcasts.

Layer norm::

    mean = E[x],  inv_std = 1 / sqrt(Var[x] + eps)     (biased variance)
    y = (x - mean) * inv_std * weight + bias

RMS norm::

    inv_rms = 1 / sqrt(E[x^2] + eps)
    y = x * inv_rms * weight

The backwards differentiate through the statistics (the true gradient of ``y`` with respect
to ``x``); given saved statistics they use those values, else they recompute them from ``x``.
With ``dresidual`` (the gradient arriving along a residual stream) they add it to ``dx``.

Add and norm (a pre-norm transformer block's residual stream): :func:`add_layer_norm` and
:func:`add_rms_norm` first form ``s = x + residual`` the way torch does in the inputs' dtype --
the sum of the two values widened to float32 (float64 for float64), rounded once to that
dtype -- and normalise ``s``, returning it beside the results.  Their backward is the plain
backward with ``s`` as ``x`` and the gradient of ``s`` from downstream as ``dresidual``: the
one gradient of both ``x`` and ``residual``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward",
           "residual_sum", "add_layer_norm", "add_rms_norm"]


def _rows(x, weight, normalized_ndim):
    """``x`` as float64 ``(rows, features)``, the weight as ``(features,)``, and the shape
    of the statistics."""
    X = np.asarray(x).astype(np.float64)
    k = int(normalized_ndim)
    if not 1 <= k <= X.ndim:
        raise ValueError(f"normalized_ndim must be in [1, {X.ndim}], got {k}")
    norm_shape = X.shape[X.ndim - k:]
    W = np.asarray(weight).astype(np.float64)
    if W.shape != norm_shape:
        raise ValueError(f"weight has shape {W.shape}, expected {norm_shape}")
    lead = X.shape[:X.ndim - k]
    stats_shape = lead + (1,) * k
    feats = int(np.prod(norm_shape))
    return X.reshape(-1, feats), W.reshape(feats), stats_shape


def _column(stat, rows, name):
    s = np.asarray(stat).astype(np.float64).reshape(-1, 1)
    if s.shape[0] != rows:
        raise ValueError(f"{name} has {s.shape[0]} elements, expected {rows} (one per row)")
    return s


def layer_norm(x, weight, bias=None, eps: float = 1e-5, normalized_ndim: int = 1):
    """``(y, mean, inv_std)`` of a layer norm over the last ``normalized_ndim`` dimensions.

    Parameters
    ----------
    x : array-like
    weight : array-like
        Of shape ``x.shape[-normalized_ndim:]``.
    bias : array-like, optional
        Like ``weight``; zero when None.
    eps : float
    normalized_ndim : int

    Returns
    -------
    y : numpy.ndarray
        float64, ``x``'s shape.
    mean, inv_std : numpy.ndarray
        float64, shape ``x.shape[:-normalized_ndim] + (1,) * normalized_ndim``.
    """
    X, W, stats_shape = _rows(x, weight, normalized_ndim)
    mean = X.mean(axis=1, keepdims=True)
    var = ((X - mean) ** 2).mean(axis=1, keepdims=True)
    inv = 1.0 / np.sqrt(var + float(eps))
    Y = (X - mean) * inv * W
    if bias is not None:
        Y = Y + np.asarray(bias).astype(np.float64).reshape(-1)
    return (Y.reshape(np.shape(x)), mean.reshape(stats_shape), inv.reshape(stats_shape))


def layer_norm_backward(dy, x, weight, mean=None, inv_std=None, eps: float = 1e-5,
                        normalized_ndim: int = 1, *, dresidual=None):
    """``(dx, dweight, dbias)`` of :func:`layer_norm` for the output gradient ``dy``.

    With ``xhat = (x - mean) * inv_std`` and ``g = dy * weight`` per row::

        dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)) + dresidual
        dweight = sum over rows of dy * xhat,   dbias = sum over rows of dy

    ``mean`` / ``inv_std`` (saved by the forward) are recomputed from ``x`` with ``eps`` when
    not given; ``dresidual`` (x's shape) is zero when not given.
    """
    X, W, _ = _rows(x, weight, normalized_ndim)
    DY = np.asarray(dy).astype(np.float64).reshape(X.shape)
    if mean is None or inv_std is None:
        _, m, r = layer_norm(x, weight, None, eps, normalized_ndim)
        mean = m if mean is None else mean
        inv_std = r if inv_std is None else inv_std
    mu = _column(mean, X.shape[0], "mean")
    r = _column(inv_std, X.shape[0], "inv_std")
    xhat = (X - mu) * r
    g = DY * W
    dx = r * (g - g.mean(axis=1, keepdims=True)
              - xhat * (g * xhat).mean(axis=1, keepdims=True))
    wshape = np.shape(weight)
    return (_plus(dx, dresidual, x), (DY * xhat).sum(axis=0).reshape(wshape),
            DY.sum(axis=0).reshape(wshape))


def rms_norm(x, weight, eps: float = 1e-5, normalized_ndim: int = 1):
    """``(y, inv_rms)`` of an RMS norm over the last ``normalized_ndim`` dimensions.

    Returns
    -------
    y : numpy.ndarray
        float64, ``x``'s shape.
    inv_rms : numpy.ndarray
        float64, ``1 / sqrt(mean(x**2) + eps)`` of shape
        ``x.shape[:-normalized_ndim] + (1,) * normalized_ndim``.
    """
    X, W, stats_shape = _rows(x, weight, normalized_ndim)
    inv = 1.0 / np.sqrt((X * X).mean(axis=1, keepdims=True) + float(eps))
    return (X * inv * W).reshape(np.shape(x)), inv.reshape(stats_shape)


def rms_norm_backward(dy, x, weight, inv_rms=None, eps: float = 1e-5,
                      normalized_ndim: int = 1, *, dresidual=None):
    """``(dx, dweight)`` of :func:`rms_norm` for the output gradient ``dy``.

    With ``xhat = x * inv_rms`` and ``g = dy * weight`` per row::

        dx = inv_rms * (g - xhat * mean(g * xhat)) + dresidual
        dweight = sum over rows of dy * xhat
    """
    X, W, _ = _rows(x, weight, normalized_ndim)
    DY = np.asarray(dy).astype(np.float64).reshape(X.shape)
    if inv_rms is None:
        inv_rms = rms_norm(x, weight, eps, normalized_ndim)[1]
    r = _column(inv_rms, X.shape[0], "inv_rms")
    xhat = X * r
    g = DY * W
    dx = r * (g - xhat * (g * xhat).mean(axis=1, keepdims=True))
    return _plus(dx, dresidual, x), (DY * xhat).sum(axis=0).reshape(np.shape(weight))


def _plus(dx, dresidual, x):
    """``dx`` in x's shape, plus ``dresidual`` (in float64) when given."""
    out = dx.reshape(np.shape(x))
    if dresidual is None:
        return out
    d = np.asarray(dresidual).astype(np.float64)
    if d.shape != out.shape:
        raise ValueError(f"dresidual has shape {d.shape}, expected {out.shape} (x's)")
    return out + d


def residual_sum(x, residual):
    """``x + residual`` as torch forms it in their dtype: both widened to float32 (float64
    for float64 inputs), added, rounded once to the dtype.

    Parameters
    ----------
    x, residual : numpy.ndarray
        Of one shape and one floating dtype (float16, bfloat16, float32 or float64).

    Returns
    -------
    numpy.ndarray
        Of that dtype: exactly what a kernel that adds in float32 and rounds once writes.
    """
    x, r = np.asarray(x), np.asarray(residual)
    if x.shape != r.shape or x.dtype != r.dtype:
        raise ValueError(f"residual is {r.dtype}{r.shape} but x is {x.dtype}{x.shape}; they "
                         "must have one shape and one dtype")
    wide = np.float64 if x.dtype == np.float64 else np.float32
    with np.errstate(over="ignore"):            # a sum beyond the dtype's range is infinite
        return (x.astype(wide) + r.astype(wide)).astype(x.dtype)


def add_layer_norm(x, residual, weight, bias=None, eps: float = 1e-5,
                   normalized_ndim: int = 1):
    """``(y, s, mean, inv_std)``: :func:`layer_norm` of ``s = residual_sum(x, residual)``.

    ``s`` is returned in the inputs' dtype (the next block's residual); the rest as
    :func:`layer_norm` returns them.  The gradient of ``x`` and of ``residual`` is
    ``layer_norm_backward(dy, s, weight, mean, inv_std, dresidual=ds)``, where ``ds`` is
    the gradient of ``s`` from downstream.
    """
    s = residual_sum(x, residual)
    y, mean, inv = layer_norm(s, weight, bias, eps, normalized_ndim)
    return y, s, mean, inv


def add_rms_norm(x, residual, weight, eps: float = 1e-5, normalized_ndim: int = 1):
    """``(y, s, inv_rms)``: :func:`rms_norm` of ``s = residual_sum(x, residual)`` (see
    :func:`add_layer_norm`)."""
    s = residual_sum(x, residual)
    y, inv = rms_norm(s, weight, eps, normalized_ndim)
    return y, s, inv
