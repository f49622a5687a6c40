"""Wrappers of ``softmax.ptx``: softmax and log-softmax over the last axis, one block per
row, numerically stable (the row's maximum is subtracted first), accumulated in float32."""

from __future__ import annotations

from ..runtime import ptxlib
from ..driver.stream import as_stream
from ._common import GRID_X_MAX, HALF_FLOAT, array, output, suffix

__all__ = ["softmax", "log_softmax"]


def _softmax(op: str, x, out, stream):
    x = array(x, op, "x", HALF_FLOAT, stream=stream)
    dev = x.device
    if not x.shape:
        raise ValueError(f"{op}: x must have at least one dimension")
    s = as_stream(stream, dev)
    out = output(out, op, x.shape, x.dtype, dev, s, (("x", x),), same_ok=True)
    cols = x.shape[-1]
    rows = x.size // cols if cols else 0
    if rows and cols:
        # Enough threads for about four elements each, 32 to 512 (a multiple of the warp).
        threads = 32 * min(16, max(1, -(-cols // 128)))
        grid = (min(rows, GRID_X_MAX), 1, 1)
        ptxlib.launch(dev, f"{op}_{suffix(x.dtype)}", grid, (threads, 1, 1),
                      (x.address, out.address, rows, cols), s)
    return out


def softmax(x, out=None, stream=None):
    """Numerically stable softmax over the last axis: ``exp(x - max) / sum(exp(x - max))``.

    Parameters
    ----------
    x : DeviceArray or device array-like
        ``(..., cols)``, rows of any length; float32, float16 or bfloat16 (accumulated in
        float32), C-contiguous.
    out : DeviceArray, optional
        Same shape and dtype; may be ``x`` itself.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
    """
    return _softmax("softmax", x, out, stream)


def log_softmax(x, out=None, stream=None):
    """Numerically stable log-softmax over the last axis: ``x - max - log(sum(exp(x - max)))``.

    Arguments as for :func:`softmax`.

    Returns
    -------
    DeviceArray
    """
    return _softmax("log_softmax", x, out, stream)
