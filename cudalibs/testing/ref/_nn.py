"""Neural-network references: activations, softmax, bias + activation, normalisation, layouts.

Shared by the kernel library (:mod:`cudalibs.kernels`) and the cuDNN bindings.  Every function
computes in float64 and takes its axis or layout as an argument, so one reference serves NCHW
and NHWC data, channels-first and channels-last kernels alike.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["relu", "relu_backward", "gelu", "bias_act", "softmax", "log_softmax",
           "batch_norm_infer", "transpose", "nchw_to_nhwc", "nhwc_to_nchw", "channel_axis"]

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_LAYOUTS = ("NCHW", "NHWC")


def _f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def relu(x) -> np.ndarray:
    """``max(x, 0)`` in float64."""
    return np.maximum(_f64(x), 0.0)


def relu_backward(grad, act) -> np.ndarray:
    """``grad * (act > 0)``: the ReLU gradient given its output (or input) ``act``."""
    g, a = _f64(grad), _f64(act)
    return np.where(a > 0, g, 0.0)


_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x, approximate: str = "none") -> np.ndarray:
    """GELU in float64.

    Parameters
    ----------
    x : array-like
    approximate : {"none", "tanh"}
        ``"none"``: ``0.5 x (1 + erf(x / sqrt 2))``; ``"tanh"``: ``0.5 x (1 + tanh(sqrt(2/pi)
        (x + 0.044715 x**3)))`` (PyTorch's names).
    """
    v = _f64(x)
    if approximate == "tanh":
        return 0.5 * v * (1.0 + np.tanh(_SQRT_2_OVER_PI * (v + 0.044715 * v ** 3)))
    if approximate in ("none", None):
        return 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0)).astype(np.float64))
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")


_ACTS = {
    None: lambda v: v,
    "identity": lambda v: v,
    "relu": relu,
    "gelu": lambda v: gelu(v, "none"),
    "gelu_tanh": lambda v: gelu(v, "tanh"),
}


def bias_act(x, bias, act: str | None = "relu", axis: int = -1) -> np.ndarray:
    """``act(x + bias)``, the 1-D ``bias`` broadcast along ``axis``.

    Parameters
    ----------
    x : array-like
    bias : array-like
        1-D, of length ``x.shape[axis]``.
    act : {"relu", "gelu", "gelu_tanh", "identity", None}
    axis : int, default -1
        The feature axis: -1 for row-major ``(rows, features)``, 1 for NCHW channels.

    Raises
    ------
    ValueError
        ``bias`` is not 1-D of the axis' length, or ``act`` is unknown.
    """
    v = _f64(x)
    b = _f64(bias)
    ax = axis % v.ndim
    if b.ndim != 1 or b.shape[0] != v.shape[ax]:
        raise ValueError(f"bias of shape {b.shape} does not match axis {axis} of {v.shape}")
    if act not in _ACTS:
        raise ValueError(f"act must be one of {sorted(a for a in _ACTS if a)} or None, got {act!r}")
    shape = [1] * v.ndim
    shape[ax] = b.shape[0]
    return _ACTS[act](v + b.reshape(shape))


def softmax(x, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis``, in float64."""
    v = _f64(x)
    m = np.max(v, axis=axis, keepdims=True)
    e = np.exp(v - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis: int = -1) -> np.ndarray:
    """Numerically stable log-softmax along ``axis``, in float64."""
    v = _f64(x)
    m = np.max(v, axis=axis, keepdims=True)
    return v - m - np.log(np.sum(np.exp(v - m), axis=axis, keepdims=True))


def channel_axis(ndim: int, layout: str = "NCHW") -> int:
    """The channel axis of an ``ndim``-D array in ``layout`` ("NCHW": 1, "NHWC": last).

    "NCHW" and "NHWC" stand for channels-first and channels-last of any rank (NCL, NCDHW, ...).
    """
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be one of {_LAYOUTS}, got {layout!r}")
    if ndim < 2:
        raise ValueError(f"need at least (N, C), got {ndim} dimensions")
    return 1 if layout == "NCHW" else ndim - 1


def batch_norm_infer(x, scale, shift, mean, var, eps: float = 1e-5, layout: str = "NCHW",
                     act: str | None = None) -> np.ndarray:
    """Inference batch normalisation, optionally followed by an activation.

    ``act((x - mean[c]) / sqrt(var[c] + eps) * scale[c] + shift[c])`` with ``c`` the channel.

    Parameters
    ----------
    x : array-like
        ``(N, C, ...)`` for "NCHW", ``(N, ..., C)`` for "NHWC".
    scale, shift, mean, var : array-like
        1-D, one value per channel.
    eps : float
    layout : {"NCHW", "NHWC"}
    act : {None, "relu", "gelu", "gelu_tanh", "identity"}
    """
    v = _f64(x)
    ax = channel_axis(v.ndim, layout)
    c = v.shape[ax]
    shape = [1] * v.ndim
    shape[ax] = c
    params = []
    for name, p in (("scale", scale), ("shift", shift), ("mean", mean), ("var", var)):
        p = _f64(p)
        if p.shape != (c,):
            raise ValueError(f"{name} of shape {p.shape} does not match {c} channels")
        params.append(p.reshape(shape))
    sc, sh, mu, va = params
    y = (v - mu) / np.sqrt(va + float(eps)) * sc + sh
    if act not in _ACTS:
        raise ValueError(f"act must be one of {sorted(a for a in _ACTS if a)} or None, got {act!r}")
    return _ACTS[act](y)


def transpose(x, axes=None) -> np.ndarray:
    """``numpy.transpose(x, axes)`` materialised (C-contiguous), in ``x``'s own dtype.

    Layout changes move bits, so unlike the arithmetic references this keeps the dtype.
    """
    return np.ascontiguousarray(np.transpose(np.asarray(x), axes))


def nchw_to_nhwc(x) -> np.ndarray:
    """Channels-first to channels-last (``(N, C, *S)`` -> ``(N, *S, C)``), dtype kept."""
    a = np.asarray(x)
    if a.ndim < 3:
        raise ValueError(f"need (N, C, spatial...), got shape {a.shape}")
    return transpose(a, (0, *range(2, a.ndim), 1))


def nhwc_to_nchw(x) -> np.ndarray:
    """Channels-last to channels-first (``(N, *S, C)`` -> ``(N, C, *S)``), dtype kept."""
    a = np.asarray(x)
    if a.ndim < 3:
        raise ValueError(f"need (N, spatial..., C), got shape {a.shape}")
    return transpose(a, (0, a.ndim - 1, *range(1, a.ndim - 1)))
