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
"""

from __future__ import annotations

import numpy as np

__all__ = ["layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward"]


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
                        normalized_ndim: int = 1):
    """``(dx, dweight, dbias)`` of :func:`layer_norm` for the output gradient ``dy``.

    With ``xhat = (x - mean) * inv_std`` and ``g = dy * weight`` per row::

        dx = inv_std * (g - mean(g) - xhat * mean(g * xhat))
        dweight = sum over rows of dy * xhat,   dbias = sum over rows of dy

    ``mean`` / ``inv_std`` (saved by the forward) are recomputed from ``x`` with ``eps`` when
    not given.
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
    return (dx.reshape(np.shape(x)), (DY * xhat).sum(axis=0).reshape(wshape),
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
                      normalized_ndim: int = 1):
    """``(dx, dweight)`` of :func:`rms_norm` for the output gradient ``dy``.

    With ``xhat = x * inv_rms`` and ``g = dy * weight`` per row::

        dx = inv_rms * (g - xhat * mean(g * xhat)),   dweight = sum over rows of dy * xhat
    """
    X, W, _ = _rows(x, weight, normalized_ndim)
    DY = np.asarray(dy).astype(np.float64).reshape(X.shape)
    if inv_rms is None:
        inv_rms = rms_norm(x, weight, eps, normalized_ndim)[1]
    r = _column(inv_rms, X.shape[0], "inv_rms")
    xhat = X * r
    g = DY * W
    dx = r * (g - xhat * (g * xhat).mean(axis=1, keepdims=True))
    return dx.reshape(np.shape(x)), (DY * xhat).sum(axis=0).reshape(np.shape(weight))
