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

from ..driver.args import int_tuple
from ..runtime.operand import operand
from ..runtime import front as _front
from ..runtime.cache import KeyKind
from ..driver.stream import as_stream
from . import _lib
from ._base import raise_for
from ._common import (check_float, hashable, is_double, layout_of, output, pick_layout,
                      resolve, scalar)
from .descriptors import DescriptorSet, packed_strides, pooling_descriptor, tensor_descriptor
from .handle import handle_for

__all__ = ["pooling_forward", "pooling_backward", "pooling_output_shape", "POOLING_KEY"]

#: The cache key of the pooling plans (descriptors and output shape) in the one plan cache.
POOLING_KEY = KeyKind("cudnn_pooling", ("dtype", "x_shape", "x_strides", "window", "stride",
                                        "padding", "mode", "propagate_nan"))


def pooling_output_shape(x_shape, window, *, stride=None, padding=0) -> tuple[int, ...]:
    """Output shape of pooling an input of shape ``x_shape`` (formula only).

    Parameters
    ----------
    x_shape : sequence of int
        Logical ``(N, C, H, W)`` or ``(N, C, D, H, W)``: N, C and one to three spatial
        dimensions, each >= 1.
    window : int or sequence of int
        Per spatial dimension.
    stride : int or sequence of int, optional
        The window by default.
    padding : int or sequence of int

    Returns
    -------
    tuple of int
        ``(N, C, *out)`` with ``out = (in + 2 * padding - window) // stride + 1``.

    Raises
    ------
    ValueError
        A shape without N, C and spatial dimensions, a dimension below 1, a window larger
        than the padded input, or bad parameters.
    """
    return _output_shape(x_shape, window, stride, padding, "pooling_output_shape")


def _output_shape(x_shape, window, stride, padding, op):
    """:func:`pooling_output_shape`, its messages in ``op``'s name."""
    x_shape = int_tuple(x_shape, f"{op}: x_shape", scalar=False)
    nsp = len(x_shape) - 2
    if not 1 <= nsp <= 3:
        raise ValueError(f"{op}: x_shape {x_shape} must be (N, C, spatial...) with 1 to 3 "
                         "spatial dimensions (pooling needs N, C and at least one spatial "
                         "dimension)")
    if any(v < 1 for v in x_shape):
        raise ValueError(f"{op}: x_shape {x_shape} has a dimension below 1")
    window = int_tuple(window, f"{op}: window", nsp)
    stride = window if stride is None else int_tuple(stride, f"{op}: stride", nsp)
    padding = int_tuple(padding, f"{op}: padding", nsp)
    out = list(x_shape[:2])
    for i in range(nsp):
        size = (x_shape[2 + i] + 2 * padding[i] - window[i]) // stride[i] + 1
        if size < 1:
            raise ValueError(f"{op}: output too small: window {window[i]} is larger than "
                             f"spatial dimension {i} of the input ({x_shape[2 + i]} + 2 * "
                             f"padding {padding[i]})")
        out.append(size)
    return tuple(out)


def _plan(x, window, stride, padding, mode, propagate_nan, op):
    """The pooling problem of ``x``: its descriptors, output shape and layout, from the one
    plan cache (built on a miss)."""
    key = (POOLING_KEY, x.dtype, x.shape, x.strides, hashable(window), hashable(stride),
           hashable(padding), mode, propagate_nan)
    d = _front.planned(key, lambda: _build(x, window, stride, padding, mode, propagate_nan, op),
                       prepare=None)
    return (*d.descriptors, d.info["y_shape"], d.info["cl"])


def _build(x, window, stride, padding, mode, propagate_nan, op) -> DescriptorSet:
    check_float(x, f"{op}: x")
    cl = pick_layout((layout_of(x, f"{op}: x"), "x"))
    y_shape = _output_shape(x.shape, window, stride, padding, op)
    nsp = x.ndim - 2
    win = int_tuple(window, f"{op}: window", nsp)
    st = win if stride is None else int_tuple(stride, f"{op}: stride", nsp)
    pad = int_tuple(padding, f"{op}: padding", nsp)
    pdesc = pooling_descriptor(mode, win, pad, st, propagate_nan)
    xdesc = tensor_descriptor(x.dtype, x.shape, packed_strides(x.shape, cl))
    dims = (ctypes.c_int * x.ndim)()
    status = _lib.get().cudnnGetPoolingNdForwardOutputDim(pdesc.raw, xdesc.raw, x.ndim, dims)
    if status:
        raise_for(status, "cudnnGetPoolingNdForwardOutputDim")
    if tuple(dims) != y_shape:
        raise ValueError(f"cuDNN computes a pooling output of {tuple(dims)}, the formula "
                         f"{y_shape}")
    ydesc = tensor_descriptor(x.dtype, y_shape, packed_strides(y_shape, cl))
    return DescriptorSet((pdesc, xdesc, ydesc), y_shape=y_shape, cl=cl)


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
    x = operand(x, "x", "pooling_forward", stream=stream)
    dev = x.device
    s = as_stream(stream, dev)
    pdesc, xdesc, ydesc, y_shape, cl = _plan(x, window, stride, padding, mode, propagate_nan,
                                             "pooling_forward")
    y = output(out, y_shape, x.dtype, cl, dev, s)
    h = handle_for(dev, s.raw_handle)
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
    x, y, dy, dev, s = resolve("pooling_backward", (x, "x"), (y, "y"), (dy, "dy"),
                               stream=stream, required=3)
    pdesc, xdesc, ydesc, y_shape, cl = _plan(x, window, stride, padding, mode, propagate_nan,
                                             "pooling_backward")
    for name, a in (("y", y), ("dy", dy)):
        if a.shape != y_shape or a.dtype != x.dtype:
            raise ValueError(f"{name} must be {x.dtype} of shape {y_shape}, got {a.dtype} "
                             f"{a.shape}")
        if cl not in layout_of(a, name):
            raise ValueError(f"{name} must have x's memory layout")
    dx = output(out, x.shape, x.dtype, cl, dev, s)
    h = handle_for(dev, s.raw_handle)
    d = is_double(x.dtype)
    st = _lib.get().cudnnPoolingBackward(h.raw, pdesc.raw, scalar(alpha, d), ydesc.raw, y.ptr,
                                         ydesc.raw, dy.ptr, xdesc.raw, x.ptr, scalar(beta, d),
                                         xdesc.raw, dx.ptr)
    if st:
        raise_for(st, "cudnnPoolingBackward", f"{pdesc!r} on x {x.dtype} {x.shape}")
    return dx
