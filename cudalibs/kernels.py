"""Python wrappers of the kernel library shipped in :mod:`cudalibs.ptx`.

One function per operation, taking :class:`~cudalibs.DeviceArray` objects (or anything
:func:`cudalibs.asarray` accepts: PyTorch and CuPy arrays, any ``__cuda_array_interface__`` or
DLPack producer), with numpy's row-major semantics::

    >>> import numpy as np, cudalibs as cl
    >>> from cudalibs import kernels as K
    >>> x = cl.to_device(np.random.rand(4, 1000).astype(np.float32))   # doctest: +SKIP
    >>> K.softmax(x).get().sum(axis=-1)                                  # doctest: +SKIP
    array([1., 1., 1., 1.], dtype=float32)

Every wrapper checks its inputs before any driver call (dtype, shape, C-contiguity, device,
closed memory, overlap between inputs and output) and raises ``TypeError``/``ValueError`` (or
:class:`~cudalibs.ClosedError`) naming the argument.  ``out`` is optional: when omitted it is
allocated stream-ordered on the work's stream.  ``stream=None`` means the thread's current
stream.  Empty inputs return at once, launching nothing.

The PTX of a file is loaded once per device, on the first call that needs it; each
(kernel, grid, block, stream) gets a prepared launcher, kept in a bounded per-thread cache, so
a repeated call with the same shapes only writes its arguments and launches.

Supported element types, by operation:

=======================================  ===========================================
add, axpy, scale, fill, relu_backward    float32, float64, float16, bfloat16
bias_relu, bias_gelu, softmax,           float32, float16, bfloat16 (computed in float32)
log_softmax, batch_norm_relu_infer       (batch-norm parameters: float32)
matmul_naive, matmul_tiled, bmm          float32
wmma_gemm                                float16 in; float32 or float16 out
transpose, nchw_to_nhwc, nhwc_to_nchw    any 2-, 4- or 8-byte type
=======================================  ===========================================
"""

from __future__ import annotations

import math

import numpy as np

from . import dtypes as _dtypes
from . import ptx as _ptx
from .driver.array import DeviceArray, arrays_overlap, asarray, empty
from .driver.stream import as_stream
from .errors import ClosedError

__all__ = ["add", "axpy", "scale", "fill", "matmul_naive", "matmul_tiled", "bmm", "softmax",
           "log_softmax", "transpose", "nchw_to_nhwc", "nhwc_to_nchw", "bias_relu",
           "bias_gelu", "channel_bias_act", "batch_norm_relu_infer", "relu_backward",
           "wmma_gemm", "clear_cache"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_F16 = np.dtype(np.float16)
_BF16 = _dtypes.bfloat16

#: Kernel-name suffix of each element type.
_SUFFIX = {_F32: "f32", _F64: "f64", _F16: "f16"}
if _BF16 is not None:
    _SUFFIX[_BF16] = "bf16"

_ALL_FLOATS = tuple(_SUFFIX)
_HALF_FLOAT = tuple(d for d in _ALL_FLOATS if d != _F64)   # float32, float16, bfloat16
_U32_MAX = 2**32 - 1
_GRID_YZ_MAX = 65535
_GRID_X_MAX = 2**31 - 1

# The loading and launching machinery lives one layer down, in cudalibs.driver.ptxlib, so that
# other libraries (cuDNN's fused convolution) reach the same kernels without importing this one.
from .driver.ptxlib import (  # noqa: E402
    clear_cache, elementwise_grid as _elementwise_grid, kernel as _kernel, launch as _launch,
    launch_channel_bias_act as _launch_channel_bias_act)


# -- argument checks ---------------------------------------------------------------------------
def _names(dts) -> str:
    return ", ".join(d.name for d in dts)


def _array(x, op: str, name: str, dts=None, *, ndim=None, device=None, stream=None,
           contiguous: bool = True) -> DeviceArray:
    """``x`` as a live DeviceArray with a supported dtype and dimension, on ``device``."""
    if x is None:
        raise TypeError(f"{op}: {name} is required")
    if isinstance(x, np.ndarray):
        raise TypeError(f"{op}: {name} is a host numpy array; copy it to the GPU with "
                        "cudalibs.to_device() first")
    try:
        arr = asarray(x, stream=stream)
    except TypeError as exc:
        raise TypeError(f"{op}: {name}: {exc}") from None
    if arr.closed:
        raise ClosedError(f"{op}: {name} is closed")
    if dts is not None and arr.dtype not in dts:
        raise TypeError(f"{op}: {name} has dtype {arr.dtype}; supported: {_names(dts)}")
    if ndim is not None:
        ok = arr.ndim in ndim if isinstance(ndim, tuple) else arr.ndim == ndim
        if not ok:
            raise ValueError(f"{op}: {name} must have {ndim} dimensions, got shape {arr.shape}")
    if device is not None and arr.device is not device:
        raise ValueError(f"{op}: {name} is on device {arr.device.ordinal}, the other operands on "
                         f"device {device.ordinal}")
    if contiguous and not arr.is_c_contiguous:
        raise ValueError(f"{op}: {name} must be C-contiguous (shape {arr.shape}, strides "
                         f"{arr.strides}); make a contiguous copy with .copy()")
    return arr


def _check_no_overlap(op: str, out: DeviceArray, inputs, *, same_ok: bool) -> None:
    """Refuse an output that overlaps an input, except (when ``same_ok``) the very same
    elements, which elementwise kernels read before writing."""
    for name, a in inputs:
        if arrays_overlap(out, a):
            if same_ok and out._ptr == a._ptr and out.shape == a.shape and out.dtype == a.dtype:
                continue
            raise ValueError(f"{op}: out overlaps {name}" +
                             ("" if same_ok else "; this kernel cannot work in place"))


def _output(out, op: str, shape, dtype, device, stream, inputs=(), *, same_ok: bool):
    """Check ``out`` (or allocate it, stream-ordered, when None)."""
    dtype = np.dtype(dtype)
    if out is None:
        return empty(shape, dtype, device=device, stream=stream)
    arr = _array(out, op, "out", stream=stream)
    if arr.device is not device:
        raise ValueError(f"{op}: out is on device {arr.device.ordinal}, the inputs on device "
                         f"{device.ordinal}")
    if arr.shape != tuple(shape):
        raise ValueError(f"{op}: out has shape {arr.shape}, expected {tuple(shape)}")
    if arr.dtype != dtype:
        raise TypeError(f"{op}: out has dtype {arr.dtype}, expected {dtype}")
    _check_no_overlap(op, arr, inputs, same_ok=same_ok)
    return arr


def _same(op: str, x: DeviceArray, y: DeviceArray, xname: str, yname: str) -> None:
    if x.shape != y.shape:
        raise ValueError(f"{op}: {xname} has shape {x.shape} but {yname} has {y.shape} "
                         "(no broadcasting)")
    if x.dtype != y.dtype:
        raise TypeError(f"{op}: {xname} is {x.dtype} but {yname} is {y.dtype}")


def _real(op: str, name: str, value) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        raise TypeError(f"{op}: {name} must be a real number, not {type(value).__name__}")
    return float(value)


def _dim(op: str, what: str, n: int) -> int:
    if n > _U32_MAX:
        raise ValueError(f"{op}: {what} = {n} exceeds the kernel's 32-bit limit {_U32_MAX}")
    return n


def _suffix(dt: np.dtype) -> str:
    return _SUFFIX[dt]


# -- elementwise --------------------------------------------------------------------------------
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
        Unsupported or mismatched dtypes, or a non-array argument.
    ValueError
        Mismatched shapes or devices, non-contiguous arrays, ``out`` partly overlapping an input.
    """
    op = "add"
    x = _array(x, op, "x", _ALL_FLOATS, stream=stream)
    dev = x.device
    y = _array(y, op, "y", _ALL_FLOATS, device=dev, stream=stream)
    _same(op, x, y, "x", "y")
    s = as_stream(stream, dev)
    out = _output(out, op, x.shape, x.dtype, dev, s, (("x", x), ("y", y)), same_ok=True)
    n = x.size
    if n:
        grid, block = _elementwise_grid(dev, n)
        _launch(dev, f"add_{_suffix(x.dtype)}", grid, block, (x.ptr, y.ptr, out.ptr, n), s)
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
    a = _real(op, "alpha", alpha)
    x = _array(x, op, "x", _ALL_FLOATS, stream=stream)
    dev = x.device
    y = _array(y, op, "y", _ALL_FLOATS, device=dev, stream=stream)
    _same(op, x, y, "x", "y")
    _check_no_overlap(op, y, (("x", x),), same_ok=True)
    s = as_stream(stream, dev)
    n = y.size
    if n:
        grid, block = _elementwise_grid(dev, n)
        _launch(dev, f"axpy_{_suffix(y.dtype)}", grid, block, (a, x.ptr, y.ptr, n), s)
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
    a = _real(op, "alpha", alpha)
    x = _array(x, op, "x", _ALL_FLOATS, stream=stream)
    dev = x.device
    s = as_stream(stream, dev)
    out = _output(out, op, x.shape, x.dtype, dev, s, (("x", x),), same_ok=True)
    n = x.size
    if n:
        grid, block = _elementwise_grid(dev, n)
        _launch(dev, f"scale_{_suffix(x.dtype)}", grid, block, (x.ptr, a, out.ptr, n), s)
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
    v = _real(op, "value", value)
    x = _array(x, op, "x", _ALL_FLOATS, stream=stream)
    dev = x.device
    with np.errstate(over="ignore"):
        typed = np.asarray(v, dtype=np.float64).astype(x.dtype)
    if math.isfinite(v) and not np.isfinite(typed.astype(np.float64)):
        raise ValueError(f"{op}: {value!r} overflows {x.dtype}")
    if x.dtype.itemsize == 2:
        arg = int(typed.view(np.uint16))
    else:
        arg = float(typed)
    s = as_stream(stream, dev)
    n = x.size
    if n:
        grid, block = _elementwise_grid(dev, n)
        _launch(dev, f"fill_{_suffix(x.dtype)}", grid, block, (x.ptr, arg, n), s)
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
    grad = _array(grad, op, "grad", _ALL_FLOATS, stream=stream)
    dev = grad.device
    act = _array(act, op, "act", _ALL_FLOATS, device=dev, stream=stream)
    _same(op, grad, act, "grad", "act")
    s = as_stream(stream, dev)
    out = _output(out, op, grad.shape, grad.dtype, dev, s, (("grad", grad), ("act", act)),
                  same_ok=True)
    n = grad.size
    if n:
        grid, block = _elementwise_grid(dev, n)
        _launch(dev, f"relu_backward_{_suffix(grad.dtype)}", grid, block,
                (grad.ptr, act.ptr, out.ptr, n), s)
    return out


def _bias_act(act: str, x, bias, out, stream):
    op = f"bias_{act}"
    x = _array(x, op, "x", _HALF_FLOAT, stream=stream)
    dev = x.device
    if x.ndim < 1:
        raise ValueError(f"{op}: x must have at least one dimension (features last)")
    bias = _array(bias, op, "bias", _HALF_FLOAT, ndim=1, device=dev, stream=stream)
    if bias.dtype != x.dtype:
        raise TypeError(f"{op}: bias is {bias.dtype} but x is {x.dtype}")
    features = x.shape[-1]
    if bias.shape[0] != features:
        raise ValueError(f"{op}: bias has {bias.shape[0]} elements but x has {features} "
                         f"features (last axis of shape {x.shape})")
    s = as_stream(stream, dev)
    out = _output(out, op, x.shape, x.dtype, dev, s, (("x", x), ("bias", bias)), same_ok=True)
    n = x.size
    if n:
        grid, block = _elementwise_grid(dev, n)
        _launch(dev, f"{op}_{_suffix(x.dtype)}", grid, block,
                (x.ptr, bias.ptr, out.ptr, n, features), s)
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

    Parameters
    ----------
    y : DeviceArray
        float32, float16 or bfloat16, 2-D to 5-D, packed channels-first (C-contiguous) or
        channels-last (NHWC / NDHWC strides).
    bias : DeviceArray
        ``(C,)`` of ``y``'s dtype, contiguous.
    z : DeviceArray, optional
        Of ``y``'s shape, dtype and strides; must not overlap ``y`` unless it is ``y``.
    alpha2 : float
        Scales ``z``.
    activation : {"relu", "identity"}
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``y``.
    """
    op = "channel_bias_act"
    if activation not in ("relu", "identity"):
        raise ValueError(f"{op}: activation must be 'relu' or 'identity', not {activation!r}")
    y = _array(y, op, "y", _HALF_FLOAT, stream=stream, contiguous=False)
    dev = y.device
    if not 2 <= y.ndim <= 5:
        raise ValueError(f"{op}: y must be (N, C, ...) with 0 to 3 spatial dimensions, got "
                         f"shape {y.shape}")
    item = y.itemsize
    channels = y.shape[1]
    inner = _channel_inner(y)
    if inner is None:
        raise ValueError(f"{op}: y must be packed channels-first or channels-last; "
                         f"strides {y.strides} for shape {y.shape}")
    bias = _array(bias, op, "bias", _HALF_FLOAT, ndim=1, device=dev, stream=stream)
    if bias.dtype != y.dtype or bias.shape != (channels,) or (
            channels > 1 and bias.strides[0] != item):
        raise ValueError(f"{op}: bias must be a contiguous ({channels},) {y.dtype} array, got "
                         f"{bias.shape} {bias.dtype}")
    z_ptr = 0
    reads = [("bias", bias)]
    if z is not None:
        z = _array(z, op, "z", _HALF_FLOAT, device=dev, stream=stream, contiguous=False)
        if z.shape != y.shape or z.dtype != y.dtype or z.strides != y.strides:
            raise ValueError(f"{op}: z must match y ({y.shape} {y.dtype} strides {y.strides}), "
                             f"got {z.shape} {z.dtype} strides {z.strides}")
        z_ptr = z.ptr
        reads.append(("z", z))
    # z may be y itself (each element is read before it is written), nothing else may overlap
    _check_no_overlap(op, y, reads, same_ok=True)
    _launch_channel_bias_act(dev, y.dtype, y.ptr, z_ptr, alpha2, bias.ptr, y.size, channels,
                            inner, activation == "relu", as_stream(stream, dev))
    return y


def _channel_inner(y) -> int | None:
    """The ``inner`` argument of ``channel_bias_act`` for ``y`` of logical shape
    ``(N, C, ...)``: the spatial size when packed channels-first, 1 when packed channels-last,
    None for any other layout."""
    if y.is_c_contiguous:
        return int(np.prod(y.shape[2:], dtype=np.int64))
    if y.transpose(0, *range(2, y.ndim), 1).is_c_contiguous:
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
    x = _array(x, op, "x", _HALF_FLOAT, stream=stream)
    dev = x.device
    if x.ndim < 2:
        raise ValueError(f"{op}: x must be (N, C, ...) with channels on axis 1, got shape "
                         f"{x.shape}")
    e = _real(op, "eps", eps)
    if not (math.isfinite(e) and e >= 0):
        raise ValueError(f"{op}: eps must be finite and >= 0, got {eps!r}")
    channels = x.shape[1]
    params = []
    for name, p in (("scale", scale), ("shift", shift), ("mean", mean), ("var", var)):
        p = _array(p, op, name, (_F32,), ndim=1, device=dev, stream=stream)
        if p.shape[0] != channels:
            raise ValueError(f"{op}: {name} has {p.shape[0]} elements but x has {channels} "
                             f"channels (axis 1 of shape {x.shape})")
        params.append((name, p))
    s = as_stream(stream, dev)
    out = _output(out, op, x.shape, x.dtype, dev, s, [("x", x)] + params, same_ok=True)
    n = x.size
    if n:
        inner = n // (x.shape[0] * channels)
        grid, block = _elementwise_grid(dev, n)
        _launch(dev, f"batch_norm_relu_{_suffix(x.dtype)}", grid, block,
                (x.ptr, *(p.ptr for _, p in params), e, out.ptr, n, channels, inner), s)
    return out


# -- matrix products ---------------------------------------------------------------------------
def _matmul_operands(op, a, b, dts, stream):
    a = _array(a, op, "a", dts, ndim=2, stream=stream)
    dev = a.device
    b = _array(b, op, "b", dts, ndim=2, device=dev, stream=stream)
    if a.dtype != b.dtype:
        raise TypeError(f"{op}: a is {a.dtype} but b is {b.dtype}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"{op}: inner dimensions differ: a {a.shape} @ b {b.shape}")
    for what, v in (("M", m), ("N", n), ("K", k)):
        _dim(op, what, v)
    return a, b, dev, m, n, k


def _matmul(op, name, tile, block, a, b, out, stream):
    a, b, dev, m, n, k = _matmul_operands(op, a, b, (_F32,), stream)
    s = as_stream(stream, dev)
    out = _output(out, op, (m, n), _F32, dev, s, (("a", a), ("b", b)), same_ok=False)
    if m and n:
        grid = (-(-n // tile), min(-(-m // tile), _GRID_YZ_MAX), 1)
        _launch(dev, name, grid, block, (a.ptr, b.ptr, out.ptr, m, n, k), s)
    return out


def matmul_naive(a, b, out=None, stream=None):
    """``a @ b`` with the naive kernel: one thread per output element, no data reuse.

    The textbook baseline of :func:`matmul_tiled`; useful to compare against, not to use.

    Parameters
    ----------
    a : DeviceArray or device array-like
        ``(M, K)`` float32, C-contiguous.
    b : DeviceArray or device array-like
        ``(K, N)`` float32, C-contiguous.
    out : DeviceArray, optional
        ``(M, N)`` float32, not overlapping ``a`` or ``b``.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``(M, N)`` float32.  ``K == 0`` gives zeros.

    Raises
    ------
    TypeError
        A dtype other than float32.
    ValueError
        Not 2-D, inner dimensions differ, a dimension above 2**32 - 1, non-contiguous,
        ``out`` of the wrong shape or overlapping an input.
    """
    return _matmul("matmul_naive", "matmul_naive_f32", 16, (16, 16, 1), a, b, out, stream)


def matmul_tiled(a, b, out=None, stream=None):
    """``a @ b`` with the shared-memory tiled kernel (32x32 tiles, float32 accumulation).

    Arguments and errors as for :func:`matmul_naive`.

    Returns
    -------
    DeviceArray
        ``(M, N)`` float32.
    """
    return _matmul("matmul_tiled", "matmul_tiled_f32", 32, (32, 8, 1), a, b, out, stream)


def bmm(a, b, out=None, stream=None):
    """Batched ``a @ b``: one batch element per grid z, 32x32 shared-memory tiles.

    Parameters
    ----------
    a : DeviceArray or device array-like
        ``(B, M, K)``, or ``(M, K)`` shared by every batch element; float32, C-contiguous.
    b : DeviceArray or device array-like
        ``(B, K, N)``, or ``(K, N)`` shared by every batch element.  At least one of ``a``,
        ``b`` is 3-D; when both are, their batch sizes are equal.
    out : DeviceArray, optional
        ``(B, M, N)`` float32, not overlapping ``a`` or ``b``.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``(B, M, N)`` float32.

    Raises
    ------
    TypeError, ValueError
        As for :func:`matmul_naive`; batch sizes that differ.
    """
    op = "bmm"
    a = _array(a, op, "a", (_F32,), ndim=(2, 3), stream=stream)
    dev = a.device
    b = _array(b, op, "b", (_F32,), ndim=(2, 3), device=dev, stream=stream)
    if a.ndim == 2 and b.ndim == 2:
        raise ValueError(f"{op}: a {a.shape} and b {b.shape} are both 2-D; use matmul_tiled, "
                         "or give one operand a batch axis")
    if a.ndim == 3 and b.ndim == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"{op}: batch sizes differ: a {a.shape}, b {b.shape}")
    batch = a.shape[0] if a.ndim == 3 else b.shape[0]
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2:
        raise ValueError(f"{op}: inner dimensions differ: a {a.shape} @ b {b.shape}")
    for what, v in (("batch", batch), ("M", m), ("N", n), ("K", k)):
        _dim(op, what, v)
    s = as_stream(stream, dev)
    out = _output(out, op, (batch, m, n), _F32, dev, s, (("a", a), ("b", b)), same_ok=False)
    if batch and m and n:
        grid = (-(-n // 32), min(-(-m // 32), _GRID_YZ_MAX), min(batch, _GRID_YZ_MAX))
        stride_a = m * k if a.ndim == 3 else 0
        stride_b = k * n if b.ndim == 3 else 0
        _launch(dev, "bmm_f32", grid, (32, 8, 1),
                (a.ptr, b.ptr, out.ptr, batch, m, n, k, stride_a, stride_b, m * n), s)
    return out


def wmma_gemm(a, b, out=None, out_dtype=np.float32, stream=None):
    """``a @ b`` on tensor cores (WMMA), float16 inputs, float32 accumulation.

    Any M, N, K: edges are loaded with guards and zero fill.  Inputs whose rows are a multiple
    of 8 elements and 16-byte aligned load 16 bytes at a time (the fast path).

    Parameters
    ----------
    a : DeviceArray or device array-like
        ``(M, K)`` float16, C-contiguous.
    b : DeviceArray or device array-like
        ``(K, N)`` float16, C-contiguous.
    out : DeviceArray, optional
        ``(M, N)`` of ``out_dtype``, not overlapping ``a`` or ``b``.
    out_dtype : {numpy.float32, numpy.float16}
        float32 keeps the accumulator; float16 rounds it once.  When ``out`` is given, its
        dtype must equal ``out_dtype``.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``(M, N)`` of ``out_dtype``.

    Raises
    ------
    TypeError
        Inputs not float16, or ``out_dtype`` neither float32 nor float16.
    ValueError
        As for :func:`matmul_naive`.
    """
    op = "wmma_gemm"
    try:
        odt = np.dtype(out_dtype)
    except TypeError:
        raise TypeError(f"{op}: out_dtype {out_dtype!r} is not a dtype") from None
    if odt not in (_F32, _F16):
        raise TypeError(f"{op}: out_dtype must be float32 or float16, not {odt}")
    a, b, dev, m, n, k = _matmul_operands(op, a, b, (_F16,), stream)
    s = as_stream(stream, dev)
    out = _output(out, op, (m, n), odt, dev, s, (("a", a), ("b", b)), same_ok=False)
    if m and n:
        grid = (-(-n // 64), min(-(-m // 64), _GRID_YZ_MAX), 1)
        name = "wmma_gemm_f16_f32" if odt == _F32 else "wmma_gemm_f16_f16"
        _launch(dev, name, grid, (128, 1, 1), (a.ptr, b.ptr, out.ptr, m, n, k), s)
    return out


# -- softmax ------------------------------------------------------------------------------------
def _softmax(op: str, x, out, stream):
    x = _array(x, op, "x", _HALF_FLOAT, stream=stream)
    dev = x.device
    if x.ndim < 1:
        raise ValueError(f"{op}: x must have at least one dimension")
    s = as_stream(stream, dev)
    out = _output(out, op, x.shape, x.dtype, dev, s, (("x", x),), same_ok=True)
    cols = x.shape[-1]
    rows = x.size // cols if cols else 0
    if rows and cols:
        # Enough threads for about four elements each, 32 to 512 (a multiple of the warp).
        threads = 32 * min(16, max(1, -(-cols // 128)))
        grid = (min(rows, _GRID_X_MAX), 1, 1)
        _launch(dev, f"{op}_{_suffix(x.dtype)}", grid, (threads, 1, 1),
                (x.ptr, out.ptr, rows, cols), s)
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


# -- layout -------------------------------------------------------------------------------------
def _batched_transpose(op, x, out_shape, batch, rows, cols, out, stream):
    s = as_stream(stream, x.device)
    out = _output(out, op, out_shape, x.dtype, x.device, s, (("x", x),), same_ok=False)
    if batch and rows and cols:
        name = f"transpose_b{8 * x.itemsize}"
        grid = (-(-cols // 32), min(-(-rows // 32), _GRID_YZ_MAX), min(batch, _GRID_YZ_MAX))
        _launch(x.device, name, grid, (32, 8, 1), (x.ptr, out.ptr, batch, rows, cols), s)
    return out


def _layout_input(op, x, ndim, stream):
    x = _array(x, op, "x", ndim=ndim, stream=stream)
    if x.itemsize not in (2, 4, 8):
        raise TypeError(f"{op}: {x.dtype} has {x.itemsize}-byte elements; supported: any 2-, 4- "
                        "or 8-byte type")
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

