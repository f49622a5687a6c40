"""Shared helpers of the cuBLAS GPU tests: operands in a chosen memory layout."""

import numpy as np

import cudalibs as cl
from cudalibs import testing as T

#: Layouts an operand is drawn in: C-ordered, a transposed view (F-ordered), rows padded
#: (row stride longer than a row), and every other row and column (no unit stride: gemm
#: copies it; cuBLASLt plans refuse it).
LAYOUTS = ("C", "T", "padded", "strided")


def on_device(host: np.ndarray, layout: str, stream=None) -> cl.DeviceArray:
    """A device array equal to ``host`` (2-D or 3-D) whose last two axes are in ``layout``."""
    if layout == "C":
        return cl.to_device(host, stream=stream)
    if layout == "T":
        return cl.to_device(np.ascontiguousarray(np.swapaxes(host, -1, -2)),
                            stream=stream).transpose(*range(host.ndim - 2), host.ndim - 1,
                                                     host.ndim - 2)
    if layout == "padded":
        pad = np.zeros(host.shape[:-1] + (host.shape[-1] + 4,), host.dtype)
        pad[..., :host.shape[-1]] = host
        return cl.to_device(pad, stream=stream)[..., :host.shape[-1]]
    if layout == "strided":
        big = np.zeros(host.shape[:-2] + (2 * host.shape[-2], 2 * host.shape[-1]), host.dtype)
        big[..., ::2, ::2] = host
        return cl.to_device(big, stream=stream)[..., ::2, ::2]
    raise AssertionError(layout)


def poisoned(shape, dtype, stream=None) -> cl.DeviceArray:
    """A new device array filled with :func:`cudalibs.testing.poison_value`."""
    return cl.full(shape, T.poison_value(dtype), dtype, stream=stream)


def gelu(x):
    """GELU in the tanh form cuBLASLt implements, in float64."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def dgelu(x):
    """Derivative of :func:`gelu`."""
    x = np.asarray(x, np.float64)
    c = np.sqrt(2.0 / np.pi)
    t = np.tanh(c * (x + 0.044715 * x ** 3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t ** 2) * c * (1.0 + 3 * 0.044715 * x ** 2)
