"""Wrappers of ``elementwise.ptx``: arithmetic, fill, the bias + activation epilogues, the
per-channel epilogue of a convolution, inference batch-norm + ReLU and the ReLU gradient.

Every kernel here is a grid-stride loop over the elements (:func:`ptxlib.elementwise_grid`),
so any size launches one modest grid; 16-bit types are computed in float32 and rounded once.
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime import ptxlib
from ..driver.stream import as_stream
from ._common import (ALL_FLOATS, F32, HALF_FLOAT, array, check_no_overlap, launch_elementwise,
                      output, real, same, suffix)

__all__ = ["add", "axpy", "scale", "fill", "relu_backward", "bias_relu", "bias_gelu",
           "channel_bias_act", "batch_norm_relu_infer"]


def add(x, y, out=None, stream=None):
    """``out = x + y``, elementwise.

    Parameters
    ----------
    x, y : DeviceArray or device array-like
        Same shape (no broadcasting) and dtype: float32, float64, float16 or bfloat16;
        C-contiguous, on one device.  16-bit values are added in float32 and rounded once.
    out : DeviceArray, optional
        Result, same shape and dtype; may be ``x`` or ``y`` itself.  Allocated when omitted.
    stream : Stream, optional
        Default: the thread's current stream.

    Returns
    -------
    DeviceArray
        ``out``.

    Raises
    ------
    TypeError
        Unsupported or mismatched dtypes, host data, or a non-array argument.
    ValueError
        Mismatched shapes or devices, non-contiguous arrays, ``out`` partly overlapping an input.
    """
    op = "add"
    x = array(x, op, "x", ALL_FLOATS, stream=stream)
    dev = x.device
    y = array(y, op, "y", ALL_FLOATS, device=dev, stream=stream)
    same(op, x, y, "x", "y")
    s = as_stream(stream, dev)
    out = output(out, op, x.shape, x.dtype, dev, s, (("x", x), ("y", y)), same_ok=True)
    n = x.size
    launch_elementwise(dev, f"add_{suffix(x.dtype)}", n, (x.address, y.address, out.address, n), s)
    return out


def axpy(alpha, x, y, stream=None):
    """``y += alpha * x`` in place (BLAS axpy), rounded once to y's type.

    Parameters
    ----------
    alpha : float
        Applied in float32 (float64 for float64 arrays).
    x, y : DeviceArray or device array-like
        Same shape and dtype (float32, float64, float16, bfloat16), C-contiguous.  ``x`` may
        be ``y`` itself; any other overlap is refused.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``y``.

    Raises
    ------
    TypeError, ValueError
        As for :func:`add`.
    """
    op = "axpy"
    a = real(op, "alpha", alpha)
    x = array(x, op, "x", ALL_FLOATS, stream=stream)
    dev = x.device
    y = array(y, op, "y", ALL_FLOATS, device=dev, stream=stream)
    same(op, x, y, "x", "y")
    check_no_overlap(op, y, (("x", x),), same_ok=True)
    s = as_stream(stream, dev)
    n = y.size
    launch_elementwise(dev, f"axpy_{suffix(y.dtype)}", n, (a, x.address, y.address, n), s)
    return y


def scale(x, alpha, out=None, stream=None):
    """``out = alpha * x``, elementwise.

    Parameters
    ----------
    x : DeviceArray or device array-like
        float32, float64, float16 or bfloat16, C-contiguous.
    alpha : float
        Applied in float32 (float64 for float64 arrays).
    out : DeviceArray, optional
        Same shape and dtype as ``x``; may be ``x`` (scale in place).
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``.
    """
    op = "scale"
    a = real(op, "alpha", alpha)
    x = array(x, op, "x", ALL_FLOATS, stream=stream)
    dev = x.device
    s = as_stream(stream, dev)
    out = output(out, op, x.shape, x.dtype, dev, s, (("x", x),), same_ok=True)
    n = x.size
    launch_elementwise(dev, f"scale_{suffix(x.dtype)}", n, (x.address, a, out.address, n), s)
    return out


def fill(x, value, stream=None):
    """Set every element of ``x`` to ``value``.

    Parameters
    ----------
    x : DeviceArray or device array-like
        float32, float64, float16 or bfloat16, C-contiguous.
    value : float
        Rounded to ``x``'s type on the host (as ``numpy.asarray(value, x.dtype)`` does).
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``x``.

    Raises
    ------
    ValueError
        A finite ``value`` that overflows ``x``'s type.
    """
    op = "fill"
    v = real(op, "value", value)
    x = array(x, op, "x", ALL_FLOATS, stream=stream)
    dev = x.device
    with np.errstate(over="ignore"):
        typed = np.asarray(v, dtype=np.float64).astype(x.dtype)
    if math.isfinite(v) and not np.isfinite(typed.astype(np.float64)):
        raise ValueError(f"{op}: {value!r} overflows {x.dtype}")
    # 16-bit values travel as their bit pattern: the kernel takes them as unsigned short.
    arg = int(typed.view(np.uint16)) if x.dtype.itemsize == 2 else float(typed)
    s = as_stream(stream, dev)
    n = x.size
    launch_elementwise(dev, f"fill_{suffix(x.dtype)}", n, (x.address, arg, n), s)
    return x


def relu_backward(grad, act, out=None, stream=None):
    """The gradient of ReLU: ``out = grad * (act > 0)``.

    Parameters
    ----------
    grad : DeviceArray or device array-like
        Gradient with respect to the ReLU's output; float32, float64, float16 or bfloat16.
    act : DeviceArray or device array-like
        The ReLU's output (or its input: the sign is the same); same shape and dtype.
    out : DeviceArray, optional
        May be ``grad`` itself.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
    """
    op = "relu_backward"
    grad = array(grad, op, "grad", ALL_FLOATS, stream=stream)
    dev = grad.device
    act = array(act, op, "act", ALL_FLOATS, device=dev, stream=stream)
    same(op, grad, act, "grad", "act")
    s = as_stream(stream, dev)
    out = output(out, op, grad.shape, grad.dtype, dev, s, (("grad", grad), ("act", act)),
                 same_ok=True)
    n = grad.size
    launch_elementwise(dev, f"relu_backward_{suffix(grad.dtype)}", n,
                       (grad.address, act.address, out.address, n), s)
    return out


def _bias_act(act: str, x, bias, out, stream):
    op = f"bias_{act}"
    x = array(x, op, "x", HALF_FLOAT, stream=stream)
    dev = x.device
    if not x.shape:
        raise ValueError(f"{op}: x must have at least one dimension (features last)")
    bias = array(bias, op, "bias", HALF_FLOAT, ndim=1, device=dev, stream=stream)
    if bias.dtype != x.dtype:
        raise TypeError(f"{op}: bias is {bias.dtype} but x is {x.dtype}")
    features = x.shape[-1]
    if bias.shape[0] != features:
        raise ValueError(f"{op}: bias has {bias.shape[0]} elements but x has {features} "
                         f"features (last axis of shape {x.shape})")
    s = as_stream(stream, dev)
    out = output(out, op, x.shape, x.dtype, dev, s, (("x", x), ("bias", bias)), same_ok=True)
    n = x.size
    launch_elementwise(dev, f"{op}_{suffix(x.dtype)}", n,
                       (x.address, bias.address, out.address, n, features), s)
    return out


def bias_relu(x, bias, out=None, stream=None):
    """``out = max(x + bias, 0)``, the bias broadcast along the last axis.

    Parameters
    ----------
    x : DeviceArray or device array-like
        Row-major ``(..., features)`` (typically ``(rows, features)``); float32, float16 or
        bfloat16, C-contiguous.  Computed in float32, rounded once.
    bias : DeviceArray or device array-like
        ``(features,)``, same dtype.
    out : DeviceArray, optional
        Same shape and dtype as ``x``; may be ``x`` itself.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
    """
    return _bias_act("relu", x, bias, out, stream)


def bias_gelu(x, bias, out=None, stream=None):
    """``out = gelu(x + bias)`` with GELU's tanh approximation, bias along the last axis.

    ``gelu(v) = 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v**3)))`` (PyTorch's
    ``approximate="tanh"``).  Arguments as for :func:`bias_relu`.

    Returns
    -------
    DeviceArray
    """
    return _bias_act("gelu", x, bias, out, stream)


def channel_bias_act(y, bias, *, z=None, alpha2=1.0, activation="relu", stream=None):
    """In place, ``y = act(y + alpha2 * z + bias[c])`` for ``y`` of logical shape
    ``(N, C, ...)``: a convolution's bias, residual and activation in one pass.

    This is the epilogue cuDNN's fused convolution runs after the convolution when the
    runtime-fused engine is not available; it is public so that a framework can run the same
    epilogue after any producer.  Both memory layouts a convolution writes are accepted
    without a copy: packed channels-first (NCHW, C-contiguous) and packed channels-last
    (NHWC strides, as ``x.transpose(0, 2, 3, 1)`` of a C-contiguous NHWC array presents it).

    Parameters
    ----------
    y : DeviceArray or device array-like
        float32, float16 or bfloat16, 2-D to 5-D, packed channels-first (C-contiguous) or
        channels-last (NHWC / NDHWC strides).  Updated in place.
    bias : DeviceArray or device array-like
        ``(C,)`` of ``y``'s dtype, contiguous.
    z : DeviceArray or device array-like, optional
        A residual of ``y``'s shape, dtype and strides; must not overlap ``y`` unless it is
        ``y`` itself.
    alpha2 : float, default 1.0
        Scales ``z`` (ignored without ``z``).
    activation : {"relu", "identity"}
        Applied last.
    stream : Stream, optional
        Default: the thread's current stream.

    Returns
    -------
    DeviceArray
        ``y``.

    Raises
    ------
    TypeError
        Unsupported dtypes, host data, or a non-array argument.
    ValueError
        An unknown ``activation``; ``y`` neither packed channels-first nor channels-last;
        ``bias`` or ``z`` not matching ``y``; ``z`` partly overlapping ``y``.

    Examples
    --------
    >>> y = cl.to_device(np.random.rand(2, 3, 4, 4).astype(np.float32))  # doctest: +SKIP
    >>> b = cl.to_device(np.arange(3, dtype=np.float32))                  # doctest: +SKIP
    >>> kernels.channel_bias_act(y, b)                                    # doctest: +SKIP
    """
    op = "channel_bias_act"
    if activation not in ("relu", "identity"):
        raise ValueError(f"{op}: activation must be 'relu' or 'identity', not {activation!r}")
    a2 = real(op, "alpha2", alpha2)
    y = array(y, op, "y", HALF_FLOAT, stream=stream, contiguous=False, written=True)
    dev = y.device
    if not 2 <= len(y.shape) <= 5:
        raise ValueError(f"{op}: y must be (N, C, ...) with 0 to 3 spatial dimensions, got "
                         f"shape {y.shape}")
    channels = y.shape[1]
    inner = _channel_inner(y)
    if inner is None:
        raise ValueError(f"{op}: y must be packed channels-first or channels-last; "
                         f"strides {y.strides} for shape {y.shape}")
    bias = array(bias, op, "bias", HALF_FLOAT, ndim=1, device=dev, stream=stream)
    if bias.dtype != y.dtype or bias.shape != (channels,) or (
            channels > 1 and bias.strides[0] != y.dtype.itemsize):
        raise ValueError(f"{op}: bias must be a contiguous ({channels},) {y.dtype} array, got "
                         f"{bias.shape} {bias.dtype}")
    z_ptr = 0
    reads = [("bias", bias)]
    if z is not None:
        z = array(z, op, "z", HALF_FLOAT, device=dev, stream=stream, contiguous=False)
        if z.shape != y.shape or z.dtype != y.dtype or z.strides != y.strides:
            raise ValueError(f"{op}: z must match y ({y.shape} {y.dtype} strides "
                             f"{y.strides}), got {z.shape} {z.dtype} strides {z.strides}")
        z_ptr = z.address
        reads.append(("z", z))
    # z may be y itself (each element is read before it is written), nothing else may overlap
    check_no_overlap(op, y, reads, same_ok=True)
    ptxlib.launch_channel_bias_act(dev, y.dtype, y.address, z_ptr, a2, bias.address, y.size,
                                   channels, inner, activation == "relu", as_stream(stream, dev))
    return y


def _channel_inner(y) -> int | None:
    """The ``inner`` argument of ``channel_bias_act`` for ``y`` of logical shape
    ``(N, C, ...)``: the spatial size when packed channels-first, 1 when packed channels-last,
    None for any other layout."""
    if y.is_c_contiguous:
        return int(np.prod(y.shape[2:], dtype=np.int64))
    if y.transpose(0, *range(2, len(y.shape)), 1).is_c_contiguous:
        return 1
    return None


def batch_norm_relu_infer(x, scale, shift, mean, var, eps=1e-5, out=None, stream=None):
    """Inference batch normalisation fused with ReLU, on NCHW data.

    ``out = max((x - mean[c]) / sqrt(var[c] + eps) * scale[c] + shift[c], 0)`` for the
    channel ``c`` of each element (axis 1).

    Parameters
    ----------
    x : DeviceArray or device array-like
        ``(N, C, ...)``: NCHW, or any layout with channels on axis 1 and at least two axes;
        float32, float16 or bfloat16, C-contiguous.  Computed in float32, rounded once.
    scale, shift, mean, var : DeviceArray or device array-like
        float32 ``(C,)`` each (float32 whatever ``x``'s type, as cuDNN does).
    eps : float, default 1e-5
        Added to the variance; finite and >= 0.
    out : DeviceArray, optional
        Same shape and dtype as ``x``; may be ``x`` itself.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
    """
    op = "batch_norm_relu_infer"
    x = array(x, op, "x", HALF_FLOAT, stream=stream)
    dev = x.device
    if len(x.shape) < 2:
        raise ValueError(f"{op}: x must be (N, C, ...) with channels on axis 1, got shape "
                         f"{x.shape}")
    e = real(op, "eps", eps)
    if not (math.isfinite(e) and e >= 0):
        raise ValueError(f"{op}: eps must be finite and >= 0, got {eps!r}")
    channels = x.shape[1]
    params = []
    for name, p in (("scale", scale), ("shift", shift), ("mean", mean), ("var", var)):
        p = array(p, op, name, (F32,), ndim=1, device=dev, stream=stream)
        if p.shape[0] != channels:
            raise ValueError(f"{op}: {name} has {p.shape[0]} elements but x has {channels} "
                             f"channels (axis 1 of shape {x.shape})")
        params.append((name, p))
    s = as_stream(stream, dev)
    out = output(out, op, x.shape, x.dtype, dev, s, [("x", x)] + params, same_ok=True)
    n = x.size
    inner = n // (x.shape[0] * channels) if n else 0
    launch_elementwise(dev, f"batch_norm_relu_{suffix(x.dtype)}", n,
                       (x.address, *(p.address for _, p in params), e, out.address, n, channels, inner),
                       s)
    return out
