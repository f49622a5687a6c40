"""Max and average pooling, forward and backward, 2-D and 3-D.

``x`` is logical ``(N, C, H, W)`` or ``(N, C, D, H, W)``, packed channels-first or
channels-last; the output keeps the layout.  ``stride`` defaults to the window (non-overlapping
pooling, as in PyTorch).  Modes: ``"max"``, ``"max_deterministic"``, ``"avg"`` (=
``"avg_include_padding"``, PyTorch's default ``count_include_pad=True``) and
``"avg_exclude_padding"``.  Padding never wins a max.  The output size is
``(in + 2 * padding - window) // stride + 1``, computed by cuDNN and checked against that.
"""

from __future__ import annotations

import ctypes

from . import _lib
from ._base import raise_for
from ._common import (as_array, check_float, is_double, layout_of, operands, output,
                      pick_layout, scalar, stream_of, tuple_arg)
from .descriptors import packed_strides, pooling_descriptor, tensor_descriptor
from .handle import handle_for

__all__ = ["pooling_forward", "pooling_backward", "pooling_output_shape"]

_plans: dict = {}


def pooling_output_shape(x_shape, window, *, stride=None, padding=0) -> tuple[int, ...]:
    """Output shape of pooling ``x_shape`` (formula only).

    Raises
    ------
    ValueError
        A window larger than the padded input, or bad parameters.
    """
    nsp = len(x_shape) - 2
    window = tuple_arg(window, nsp, "window")
    stride = window if stride is None else tuple_arg(stride, nsp, "stride")
    padding = tuple_arg(padding, nsp, "padding")
    out = list(x_shape[:2])
    for i in range(nsp):
        size = (x_shape[2 + i] + 2 * padding[i] - window[i]) // stride[i] + 1
        if size < 1:
            raise ValueError(f"output too small: window {window[i]} is larger than spatial "
                             f"dimension {i} of the input ({x_shape[2 + i]} + 2 * padding "
                             f"{padding[i]})")
        out.append(size)
    return tuple(out)


def _plan(x, window, stride, padding, mode, propagate_nan):
    key = (x.dtype, x.shape, x.strides, window if isinstance(window, int) else tuple(window),
           stride if stride is None or isinstance(stride, int) else tuple(stride),
           padding if isinstance(padding, int) else tuple(padding), mode, propagate_nan)
    plan = _plans.get(key)
    if plan is not None and all(d._finalizer.alive for d in plan[:3]):
        return plan
    check_float(x, "x")
    cl = pick_layout((layout_of(x, "x"), "x"))
    nsp = x.ndim - 2
    win = tuple_arg(window, nsp, "window")
    st = win if stride is None else tuple_arg(stride, nsp, "stride")
    pad = tuple_arg(padding, nsp, "padding")
    pdesc = pooling_descriptor(mode, win, pad, st, propagate_nan)
    y_shape = pooling_output_shape(x.shape, win, stride=st, padding=pad)
    xdesc = tensor_descriptor(x.dtype, x.shape, packed_strides(x.shape, cl))
    dims = (ctypes.c_int * x.ndim)()
    status = _lib.get().cudnnGetPoolingNdForwardOutputDim(pdesc.raw, xdesc.raw, x.ndim, dims)
    if status:
        raise_for(status, "cudnnGetPoolingNdForwardOutputDim")
    if tuple(dims) != y_shape:
        raise ValueError(f"cuDNN computes a pooling output of {tuple(dims)}, the formula "
                         f"{y_shape}")
    ydesc = tensor_descriptor(x.dtype, y_shape, packed_strides(y_shape, cl))
    plan = _plans[key] = (pdesc, xdesc, ydesc, y_shape, cl)
    return plan


def pooling_forward(x, window, *, stride=None, padding=0, mode="max", propagate_nan=True,
                    out=None, alpha=1.0, beta=0.0, stream=None):
    """Pool ``x``: ``out = alpha * pool(x) + beta * out``.

    Parameters
    ----------
    x : DeviceArray
        4-D or 5-D, float32/float16/bfloat16/float64.
    window : int or sequence of int
    stride : int or sequence of int, optional
        The window by default.
    padding : int or sequence of int
        Smaller than the window.
    mode : str
        See the module docstring.
    propagate_nan : bool
        A NaN in a max window gives NaN.
    out : DeviceArray, optional
    alpha, beta : float
    stream : Stream, optional

    Returns
    -------
    DeviceArray
    """
    x = as_array(x, "x")
    dev = x._device
    s = stream_of(stream, dev)
    pdesc, xdesc, ydesc, y_shape, cl = _plan(x, window, stride, padding, mode, propagate_nan)
    y = output(out, y_shape, x.dtype, cl, dev, s)
    h = handle_for(dev, s._handle)
    d = is_double(x.dtype)
    st = _lib.get().cudnnPoolingForward(h.raw, pdesc.raw, scalar(alpha, d), xdesc.raw, x.ptr,
                                        scalar(beta, d), ydesc.raw, y.ptr)
    if st:
        raise_for(st, "cudnnPoolingForward", f"{pdesc!r} on x {x.dtype} {x.shape}")
    return y


def pooling_backward(y, dy, x, window, *, stride=None, padding=0, mode="max",
                     propagate_nan=True, out=None, alpha=1.0, beta=0.0, stream=None):
    """Gradient of pooling with respect to its input.

    Parameters
    ----------
    y, dy : DeviceArray
        The forward output and its gradient.
    x : DeviceArray
        The forward input (max pooling finds the winners in it).
    window, stride, padding, mode, propagate_nan
        The forward's.
    out : DeviceArray, optional
        ``dx``, like ``x``.
    alpha, beta : float
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``dx``.
    """
    x, y, dy, dev, s = operands(stream, (x, "x"), (y, "y"), (dy, "dy"))
    pdesc, xdesc, ydesc, y_shape, cl = _plan(x, window, stride, padding, mode, propagate_nan)
    for name, a in (("y", y), ("dy", dy)):
        if a.shape != y_shape or a.dtype != x.dtype:
            raise ValueError(f"{name} must be {x.dtype} of shape {y_shape}, got {a.dtype} "
                             f"{a.shape}")
        if cl not in layout_of(a, name):
            raise ValueError(f"{name} must have x's memory layout")
    dx = output(out, x.shape, x.dtype, cl, dev, s)
    h = handle_for(dev, s._handle)
    d = is_double(x.dtype)
    st = _lib.get().cudnnPoolingBackward(h.raw, pdesc.raw, scalar(alpha, d), ydesc.raw, y.ptr,
                                         ydesc.raw, dy.ptr, xdesc.raw, x.ptr, scalar(beta, d),
                                         xdesc.raw, dx.ptr)
    if st:
        raise_for(st, "cudnnPoolingBackward", f"{pdesc!r} on x {x.dtype} {x.shape}")
    return dx
