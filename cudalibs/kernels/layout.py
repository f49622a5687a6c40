"""Wrappers of ``layout.ptx``: materialised transposes through a padded shared-memory tile,
for any 2-, 4- or 8-byte element type (the kernels move bits, not values)."""

from __future__ import annotations

from ..runtime import ptxlib
from ..driver.stream import as_stream
from ._common import GRID_YZ_MAX, array, output

__all__ = ["transpose", "nchw_to_nhwc", "nhwc_to_nchw"]


def _batched_transpose(op, x, out_shape, batch, rows, cols, out, stream):
    dev = x.device
    s = as_stream(stream, dev)
    out = output(out, op, out_shape, x.dtype, dev, s, (("x", x),), same_ok=False)
    if batch and rows and cols:
        name = f"transpose_b{8 * x.dtype.itemsize}"
        grid = (-(-cols // 32), min(-(-rows // 32), GRID_YZ_MAX), min(batch, GRID_YZ_MAX))
        ptxlib.launch(dev, name, grid, (32, 8, 1), (x.address, out.address, batch, rows, cols), s)
    return out


def _layout_input(op, x, ndim, stream):
    x = array(x, op, "x", ndim=ndim, stream=stream)
    item = x.dtype.itemsize
    if item not in (2, 4, 8):
        raise TypeError(f"{op}: x is {x.dtype}, of {item}-byte elements; supported: any 2-, "
                        "4- or 8-byte type")
    return x


def transpose(x, out=None, stream=None):
    """The transpose of a 2-D array, materialised: ``out[j, i] = x[i, j]``.

    (``x.T`` is a free view; this makes the C-contiguous copy, through a padded shared tile.)

    Parameters
    ----------
    x : DeviceArray or device array-like
        ``(R, C)``, any 2-, 4- or 8-byte dtype, C-contiguous.
    out : DeviceArray, optional
        ``(C, R)``, same dtype, not overlapping ``x``.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``(C, R)``.
    """
    op = "transpose"
    x = _layout_input(op, x, 2, stream)
    r, c = x.shape
    return _batched_transpose(op, x, (c, r), 1, r, c, out, stream)


def nchw_to_nhwc(x, out=None, stream=None):
    """``(N, C, H, W)`` -> ``(N, H, W, C)``, materialised (channels last).

    Parameters
    ----------
    x : DeviceArray or device array-like
        4-D, any 2-, 4- or 8-byte dtype (float32, float16, bfloat16, ...), C-contiguous.
    out : DeviceArray, optional
        ``(N, H, W, C)``, same dtype, not overlapping ``x``.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
    """
    op = "nchw_to_nhwc"
    x = _layout_input(op, x, 4, stream)
    n, c, h, w = x.shape
    return _batched_transpose(op, x, (n, h, w, c), n, c, h * w, out, stream)


def nhwc_to_nchw(x, out=None, stream=None):
    """``(N, H, W, C)`` -> ``(N, C, H, W)``, materialised (channels first).

    Arguments as for :func:`nchw_to_nhwc`.

    Returns
    -------
    DeviceArray
    """
    op = "nhwc_to_nchw"
    x = _layout_input(op, x, 4, stream)
    n, h, w, c = x.shape
    return _batched_transpose(op, x, (n, c, h, w), n, h * w, c, out, stream)
