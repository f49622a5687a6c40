"""Convolution, pooling, batch-norm and activation references (the cuDNN operations).

Arrays are logical ``(N, C, *spatial)`` with any number of spatial dimensions, filters
``(K, C/groups, *window)``, whatever memory layout the library under test used.  Convolution
is a cross-correlation computed one filter tap at a time: each tap is a strided slice of the
padded input contracted with ``einsum`` over the channels of its group (im2col without
materialising the column matrix).  Everything is float64.
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["conv_forward", "conv_backward_data", "conv_backward_filter", "conv_backward_bias",
           "conv_output_shape", "pooling_forward", "pooling_backward", "batch_norm_train",
           "batch_norm_backward", "activation", "activation_backward", "softmax_backward"]


def _f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _tup(v, n):
    return (int(v),) * n if np.ndim(v) == 0 else tuple(int(i) for i in v)


def conv_output_shape(x_shape, w_shape, stride=1, padding=0, dilation=1) -> tuple[int, ...]:
    """``(N, K, *out)`` with ``out = (in + 2p - d(r - 1) - 1) // s + 1``."""
    nsp = len(x_shape) - 2
    s, p, d = _tup(stride, nsp), _tup(padding, nsp), _tup(dilation, nsp)
    out = tuple((x_shape[2 + i] + 2 * p[i] - d[i] * (w_shape[2 + i] - 1) - 1) // s[i] + 1
                for i in range(nsp))
    return (x_shape[0], w_shape[0]) + out


def _taps(w_shape, out_sp, s, d):
    """For every filter tap: its index and the strided slices of the padded input it reads."""
    nsp = len(out_sp)
    for r in itertools.product(*(range(k) for k in w_shape[2:])):
        sl = tuple(slice(r[i] * d[i], r[i] * d[i] + s[i] * (out_sp[i] - 1) + 1, s[i])
                   for i in range(nsp))
        yield r, sl


def _letters(nsp):
    return "".join("uvwxyz"[:nsp])


def conv_forward(x, w, stride=1, padding=0, dilation=1, groups=1, bias=None) -> np.ndarray:
    """Cross-correlation ``y[n, k, o] = sum_{c, r} x_pad[n, g c, o*s + r*d] w[k, c, r]``
    (+ ``bias[k]``), in float64.

    Parameters
    ----------
    x : array-like
        ``(N, C, *spatial)``.
    w : array-like
        ``(K, C/groups, *window)``.
    stride, padding, dilation : int or sequence of int
    groups : int
    bias : array-like, optional
        ``(K,)``.
    """
    X, W = _f64(x), _f64(w)
    nsp = X.ndim - 2
    s, p, d = _tup(stride, nsp), _tup(padding, nsp), _tup(dilation, nsp)
    N, C = X.shape[:2]
    K, Cg = W.shape[:2]
    G = int(groups)
    assert Cg * G == C and K % G == 0, "channel/group mismatch"
    out_shape = conv_output_shape(X.shape, W.shape, s, p, d)
    Xp = np.pad(X, [(0, 0), (0, 0)] + [(pi, pi) for pi in p])
    Xg = Xp.reshape((N, G, Cg) + Xp.shape[2:])
    Wg = W.reshape((G, K // G, Cg) + W.shape[2:])
    sp = _letters(nsp)
    Y = np.zeros((N, G, K // G) + out_shape[2:])
    for r, sl in _taps(W.shape, out_shape[2:], s, d):
        Y += np.einsum(f"ngc{sp},gkc->ngk{sp}", Xg[(Ellipsis,) + sl], Wg[(Ellipsis,) + r])
    Y = Y.reshape(out_shape)
    if bias is not None:
        Y += _f64(bias).reshape((1, K) + (1,) * nsp)
    return Y


def conv_backward_data(dy, w, x_shape, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """Gradient of :func:`conv_forward` with respect to ``x`` (shape ``x_shape``)."""
    DY, W = _f64(dy), _f64(w)
    nsp = DY.ndim - 2
    s, p, d = _tup(stride, nsp), _tup(padding, nsp), _tup(dilation, nsp)
    N, C = x_shape[:2]
    K, Cg = W.shape[:2]
    G = int(groups)
    padded = tuple(x_shape[2 + i] + 2 * p[i] for i in range(nsp))
    DXp = np.zeros((N, G, Cg) + padded)
    DYg = DY.reshape((N, G, K // G) + DY.shape[2:])
    Wg = W.reshape((G, K // G, Cg) + W.shape[2:])
    sp = _letters(nsp)
    for r, sl in _taps(W.shape, DY.shape[2:], s, d):
        DXp[(Ellipsis,) + sl] += np.einsum(f"ngk{sp},gkc->ngc{sp}", DYg, Wg[(Ellipsis,) + r])
    DXp = DXp.reshape((N, C) + padded)
    crop = tuple(slice(p[i], p[i] + x_shape[2 + i]) for i in range(nsp))
    return DXp[(slice(None), slice(None)) + crop].copy()


def conv_backward_filter(x, dy, w_shape, stride=1, padding=0, dilation=1, groups=1
                         ) -> np.ndarray:
    """Gradient of :func:`conv_forward` with respect to ``w`` (shape ``w_shape``)."""
    X, DY = _f64(x), _f64(dy)
    nsp = X.ndim - 2
    s, p, d = _tup(stride, nsp), _tup(padding, nsp), _tup(dilation, nsp)
    N, C = X.shape[:2]
    K, Cg = w_shape[:2]
    G = int(groups)
    Xp = np.pad(X, [(0, 0), (0, 0)] + [(pi, pi) for pi in p])
    Xg = Xp.reshape((N, G, Cg) + Xp.shape[2:])
    DYg = DY.reshape((N, G, K // G) + DY.shape[2:])
    DW = np.zeros((G, K // G, Cg) + tuple(w_shape[2:]))
    sp = _letters(nsp)
    for r, sl in _taps(w_shape, DY.shape[2:], s, d):
        DW[(Ellipsis,) + r] = np.einsum(f"ngc{sp},ngk{sp}->gkc", Xg[(Ellipsis,) + sl], DYg)
    return DW.reshape(tuple(w_shape))


def conv_backward_bias(dy) -> np.ndarray:
    """``dy`` summed over every axis but the channels (axis 1)."""
    DY = _f64(dy)
    return DY.sum(axis=(0,) + tuple(range(2, DY.ndim)))


# -- pooling --------------------------------------------------------------------------------------
def _pool_setup(x, window, stride, padding):
    X = _f64(x)
    nsp = X.ndim - 2
    k = _tup(window, nsp)
    s = k if stride is None else _tup(stride, nsp)
    p = _tup(padding, nsp)
    out = tuple((X.shape[2 + i] + 2 * p[i] - k[i]) // s[i] + 1 for i in range(nsp))
    return X, nsp, k, s, p, out


def pooling_forward(x, window, stride=None, padding=0, mode="max") -> np.ndarray:
    """Max or average pooling of ``(N, C, *spatial)``.

    Parameters
    ----------
    mode : {"max", "avg", "avg_include_padding", "avg_exclude_padding"}
        ``"avg"`` counts the padding (divides by the window size); padding never wins a max.
    """
    X, nsp, k, s, p, out = _pool_setup(x, window, stride, padding)
    pads = [(0, 0), (0, 0)] + [(pi, pi) for pi in p]
    if mode.startswith("max"):
        Xp = np.pad(X, pads, constant_values=-np.inf)
        Y = np.full(X.shape[:2] + out, -np.inf)
        for _, sl in _taps((0, 0) + k, out, s, (1,) * nsp):
            Y = np.maximum(Y, Xp[(Ellipsis,) + sl])
        return Y
    Xp = np.pad(X, pads)
    ones = np.pad(np.ones(X.shape[2:]), [(pi, pi) for pi in p])
    total = np.zeros(X.shape[:2] + out)
    count = np.zeros(out)
    for _, sl in _taps((0, 0) + k, out, s, (1,) * nsp):
        total += Xp[(Ellipsis,) + sl]
        count += ones[sl]
    if mode in ("avg", "avg_include_padding"):
        return total / float(np.prod(k))
    if mode == "avg_exclude_padding":
        return total / count
    raise ValueError(f"unknown pooling mode {mode!r}")


def pooling_backward(x, dy, window, stride=None, padding=0, mode="max") -> np.ndarray:
    """Gradient of :func:`pooling_forward` with respect to ``x``.

    Max pooling sends each window's gradient to its first maximum (in row-major window order);
    ties are the only place implementations may differ, and random inputs make them rare.
    """
    X, nsp, k, s, p, out = _pool_setup(x, window, stride, padding)
    DY = _f64(dy)
    pads = [(0, 0), (0, 0)] + [(pi, pi) for pi in p]
    DXp = np.zeros(X.shape[:2] + tuple(X.shape[2 + i] + 2 * p[i] for i in range(nsp)))
    taps = list(_taps((0, 0) + k, out, s, (1,) * nsp))
    if mode.startswith("max"):
        Xp = np.pad(X, pads, constant_values=-np.inf)
        Y = pooling_forward(X, k, s, p, "max")
        taken = np.zeros(Y.shape, dtype=bool)
        for _, sl in taps:
            hit = (Xp[(Ellipsis,) + sl] == Y) & ~taken
            DXp[(Ellipsis,) + sl] += np.where(hit, DY, 0.0)
            taken |= hit
    else:
        if mode in ("avg", "avg_include_padding"):
            scale = np.full(out, 1.0 / float(np.prod(k)))
        elif mode == "avg_exclude_padding":
            ones = np.pad(np.ones(X.shape[2:]), [(pi, pi) for pi in p])
            count = np.zeros(out)
            for _, sl in taps:
                count += ones[sl]
            scale = 1.0 / count
        else:
            raise ValueError(f"unknown pooling mode {mode!r}")
        for _, sl in taps:
            DXp[(Ellipsis,) + sl] += DY * scale
    crop = tuple(slice(p[i], p[i] + X.shape[2 + i]) for i in range(nsp))
    return DXp[(slice(None), slice(None)) + crop].copy()


# -- batch normalization --------------------------------------------------------------------------
def _bn_axes(ndim, mode):
    if mode == "spatial":
        return (0,) + tuple(range(2, ndim))
    if mode == "per_activation":
        return (0,)
    raise ValueError(f"mode must be 'spatial' or 'per_activation', not {mode!r}")


def batch_norm_train(x, scale, bias, running_mean=None, running_var=None, momentum=0.1,
                     eps=1e-5, mode="spatial"):
    """Training batch-norm of ``(N, C, *spatial)``.

    Returns
    -------
    y, mean, inv_std, new_running_mean, new_running_var : numpy.ndarray
        ``inv_std = 1 / sqrt(var + eps)`` with the biased batch variance;
        ``new_running = (1 - momentum) * running + momentum * batch`` with the *unbiased*
        variance (``n / (n - 1)`` times the biased one), as cuDNN and PyTorch do.  The running
        results are None when the inputs are.  Parameters have shape ``(C,)`` (spatial) or
        ``(C, *spatial)`` (per_activation).
    """
    X = _f64(x)
    axes = _bn_axes(X.ndim, mode)
    n = int(np.prod([X.shape[a] for a in axes]))
    mean = X.mean(axis=axes, keepdims=True)
    var = X.var(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    shape = mean.shape
    y = (X - mean) * inv * _f64(scale).reshape(shape) + _f64(bias).reshape(shape)
    out_shape = shape[1:] if mode == "per_activation" else (X.shape[1],)
    rm = rv = None
    if running_mean is not None:
        rm = (1 - momentum) * _f64(running_mean) + momentum * mean.reshape(out_shape)
        rv = (1 - momentum) * _f64(running_var) + momentum * (var * n / (n - 1)).reshape(
            out_shape)
    return y, mean.reshape(out_shape), inv.reshape(out_shape), rm, rv


def batch_norm_backward(x, dy, scale, eps=1e-5, mode="spatial"):
    """Gradients of training batch-norm: ``(dx, dscale, dbias)``.

    ``dx = scale * inv_std / n * (n * dy - sum(dy) - xhat * sum(dy * xhat))``.
    """
    X, DY = _f64(x), _f64(dy)
    axes = _bn_axes(X.ndim, mode)
    n = int(np.prod([X.shape[a] for a in axes]))
    mean = X.mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(X.var(axis=axes, keepdims=True) + eps)
    xhat = (X - mean) * inv
    dbias = DY.sum(axis=axes, keepdims=True)
    dscale = (DY * xhat).sum(axis=axes, keepdims=True)
    g = _f64(scale).reshape(mean.shape)
    dx = g * inv / n * (n * DY - dbias - xhat * dscale)
    out_shape = mean.shape[1:] if mode == "per_activation" else (X.shape[1],)
    return dx, dscale.reshape(out_shape), dbias.reshape(out_shape)


# -- activations ----------------------------------------------------------------------------------
def _sigmoid(v):
    return 0.5 * (1.0 + np.tanh(0.5 * v))


def activation(x, mode="relu", coef=0.0, swish_beta=1.0) -> np.ndarray:
    """relu, sigmoid, tanh, clipped_relu (ceiling ``coef``), elu (alpha ``coef``), swish
    (``x * sigmoid(swish_beta * x)``) or identity, in float64."""
    v = _f64(x)
    if mode == "relu":
        return np.maximum(v, 0.0)
    if mode == "sigmoid":
        return _sigmoid(v)
    if mode == "tanh":
        return np.tanh(v)
    if mode == "clipped_relu":
        return np.minimum(np.maximum(v, 0.0), coef)
    if mode == "elu":
        return np.where(v > 0, v, coef * np.expm1(v))
    if mode == "swish":
        return v * _sigmoid(swish_beta * v)
    if mode == "identity":
        return v
    raise ValueError(f"unknown activation {mode!r}")


def activation_backward(x, dy, mode="relu", coef=0.0, swish_beta=1.0) -> np.ndarray:
    """``dy * act'(x)`` for the modes of :func:`activation`."""
    v, g = _f64(x), _f64(dy)
    if mode == "relu":
        return np.where(v > 0, g, 0.0)
    if mode == "sigmoid":
        sg = _sigmoid(v)
        return g * sg * (1 - sg)
    if mode == "tanh":
        return g * (1 - np.tanh(v) ** 2)
    if mode == "clipped_relu":
        return np.where((v > 0) & (v < coef), g, 0.0)
    if mode == "elu":
        return np.where(v > 0, g, g * coef * np.exp(v))
    if mode == "swish":
        sg = _sigmoid(swish_beta * v)
        return g * (sg + swish_beta * v * sg * (1 - sg))
    if mode == "identity":
        return g
    raise ValueError(f"unknown activation {mode!r}")


def softmax_backward(y, dy, axis=1, log=False) -> np.ndarray:
    """Gradient of softmax (``log=False``) or log-softmax given its output ``y``.

    ``axis`` may be a tuple (instance mode: all of C and the spatial axes).
    """
    Y, G = _f64(y), _f64(dy)
    if log:
        return G - np.exp(Y) * G.sum(axis=axis, keepdims=True)
    return Y * (G - (G * Y).sum(axis=axis, keepdims=True))
