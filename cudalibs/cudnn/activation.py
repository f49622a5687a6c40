"""Element-wise activations, softmax and broadcast addition.

Inputs are logical ``(N, C, ...)`` arrays of 2 to 5 dimensions (a 2-D ``(N, C)`` array is a
batch of feature vectors), packed channels-first or channels-last; outputs keep the layout.

Activations (``mode=``): ``"relu"``, ``"sigmoid"``, ``"tanh"``, ``"clipped_relu"``
(``min(max(x, 0), coef)``), ``"elu"`` (``x if x > 0 else coef * (exp(x) - 1)``), ``"swish"``
(``x * sigmoid(swish_beta * x)``) and ``"identity"``.

Softmax (``algorithm=``): ``"accurate"`` (subtracts the maximum first), ``"log"`` (log-softmax)
or ``"fast"``; ``mode="channel"`` normalizes over C at each (N, spatial) position,
``mode="instance"`` over all of C and the spatial dimensions of each N.
"""

from __future__ import annotations

from ..runtime.operand import operand
from ..runtime import front as _front
from ..runtime.cache import KeyKind
from ..driver.stream import as_stream
from . import _lib
from ._base import raise_for
from ._common import (check_float, check_in_place, is_double, layout_padded, output, padded,
                      resolve, scalar)
from .descriptors import (DescriptorSet, activation_descriptor, packed_strides,
                          tensor_descriptor)
from .handle import handle_for

__all__ = ["activation_forward", "activation_backward", "softmax_forward", "softmax_backward",
           "add_tensor", "activation", "softmax", "SOFTMAX_ALGORITHMS", "SOFTMAX_MODES"]

#: algorithm= names -> cudnnSoftmaxAlgorithm_t.
SOFTMAX_ALGORITHMS = {"fast": _lib.CUDNN_SOFTMAX_FAST, "accurate": _lib.CUDNN_SOFTMAX_ACCURATE,
                      "log": _lib.CUDNN_SOFTMAX_LOG}
#: mode= names -> cudnnSoftmaxMode_t.
SOFTMAX_MODES = {"instance": _lib.CUDNN_SOFTMAX_MODE_INSTANCE,
                 "channel": _lib.CUDNN_SOFTMAX_MODE_CHANNEL}

#: The cache key of the element-wise ops' tensor descriptors (in the one plan cache).
TENSOR_KEY = KeyKind("cudnn_elementwise_tensor", ("dtype", "shape", "strides"))


def _tensor(x, name):
    """(descriptor, channels_last) of a padded 4-D/5-D view of ``x``, cached in the one
    plan cache (bounded, clearable)."""
    d = _front.planned((TENSOR_KEY, x.dtype, x.shape, x.strides),
                       lambda: _build_tensor(x, name), prepare=None)
    return d.descriptors[0], d.info["cl"]


def _build_tensor(x, name) -> DescriptorSet:
    check_float(x, name)
    shape, strides = padded(x, name)
    cl = layout_padded(shape, strides, x.itemsize, name)[0]
    return DescriptorSet((tensor_descriptor(x.dtype, shape, packed_strides(shape, cl)),), cl=cl)


def _same(a, name, ref, ref_name) -> None:
    """``a`` of ``ref``'s shape and dtype: checked before any descriptor is made."""
    if a.shape != ref.shape or a.dtype != ref.dtype:
        raise ValueError(f"{name} ({a.dtype} {a.shape}) must match {ref_name} ({ref.dtype} "
                         f"{ref.shape})")


def _like(a, name, ref, ref_cl, ref_name):
    """The descriptor of ``a`` (checked by :func:`_same`), in ``ref``'s memory layout."""
    desc, cl = _tensor(a, name)
    if a.ndim >= 3 and cl != ref_cl and ref_cl not in layout_padded(
            *padded(a, name), a.itemsize, name):
        raise ValueError(f"{name} must have {ref_name}'s memory layout")
    return desc


def _act_desc(mode, coef, swish_beta):
    if mode in ("clipped_relu", "elu") and coef is None:
        what = "ceiling" if mode == "clipped_relu" else "alpha"
        raise ValueError(f"{mode} needs coef (the {what})")
    return activation_descriptor(mode, 0.0 if coef is None else coef, swish_beta)


def activation_forward(x, mode="relu", *, coef=None, swish_beta=1.0, out=None, alpha=1.0,
                       beta=0.0, stream=None):
    """``out = alpha * act(x) + beta * out``.

    Parameters
    ----------
    x : DeviceArray
    mode : str
        See the module docstring.
    coef : float, optional
        The ceiling of ``clipped_relu``, the alpha of ``elu`` (required for those two).
    swish_beta : float
    out : DeviceArray, optional
        May be ``x`` itself (in place).
    alpha, beta : float
    stream : Stream, optional

    Returns
    -------
    DeviceArray
    """
    x = operand(x, "x", "activation_forward", stream=stream)
    dev = x.device
    s = as_stream(stream, dev)
    xd, cl = _tensor(x, "activation_forward: x")
    ad = _act_desc(mode, coef, swish_beta)
    y = output(out, x.shape, x.dtype, cl, dev, s)
    if out is not None:
        check_in_place("activation_forward", y, "x", x)
    if mode == "identity":
        # cudnnActivationForward refuses CUDNN_ACTIVATION_IDENTITY (it exists for the fused
        # convolution only); alpha * x + beta * y is an add.
        return _scaled_copy(x, y, alpha, beta, s)
    h = handle_for(dev, s.raw_handle)
    d = is_double(x.dtype)
    st = _lib.get().cudnnActivationForward(h.raw, ad.raw, scalar(alpha, d), xd.raw, x.ptr,
                                           scalar(beta, d), xd.raw, y.ptr)
    if st:
        raise_for(st, "cudnnActivationForward", f"{ad!r} on {x.dtype} {x.shape}")
    return y


def activation_backward(y, dy, x, mode="relu", *, coef=None, swish_beta=1.0, out=None,
                        alpha=1.0, beta=0.0, stream=None):
    """Gradient of an activation: ``dx = alpha * act'(x) * dy + beta * dx``.

    Parameters
    ----------
    y, dy, x : DeviceArray
        The forward output, its gradient and the forward input (same shape, dtype, layout).
    mode, coef, swish_beta
        The forward's.
    out : DeviceArray, optional
    alpha, beta : float
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``dx``.
    """
    x, y, dy, dev, s = resolve("activation_backward", (x, "x"), (y, "y"), (dy, "dy"),
                               stream=stream, required=3)
    op = "activation_backward"
    _same(y, f"{op}: y", x, "x")
    _same(dy, f"{op}: dy", x, "x")
    xd, cl = _tensor(x, f"{op}: x")
    yd = _like(y, f"{op}: y", x, cl, "x")
    dyd = _like(dy, f"{op}: dy", x, cl, "x")
    ad = _act_desc(mode, coef, swish_beta)
    dx = output(out, x.shape, x.dtype, cl, dev, s)
    if mode == "identity":
        return _scaled_copy(dy, dx, alpha, beta, s)
    h = handle_for(dev, s.raw_handle)
    d = is_double(x.dtype)
    st = _lib.get().cudnnActivationBackward(h.raw, ad.raw, scalar(alpha, d), yd.raw, y.ptr,
                                            dyd.raw, dy.ptr, xd.raw, x.ptr, scalar(beta, d),
                                            xd.raw, dx.ptr)
    if st:
        raise_for(st, "cudnnActivationBackward", f"{ad!r} on {x.dtype} {x.shape}")
    return dx


def _softmax_args(algorithm, mode):
    if algorithm not in SOFTMAX_ALGORITHMS:
        raise ValueError(f"algorithm must be one of {sorted(SOFTMAX_ALGORITHMS)}, "
                         f"not {algorithm!r}")
    if mode not in SOFTMAX_MODES:
        raise ValueError(f"mode must be one of {sorted(SOFTMAX_MODES)}, not {mode!r}")
    return SOFTMAX_ALGORITHMS[algorithm], SOFTMAX_MODES[mode]


def softmax_forward(x, *, algorithm="accurate", mode="channel", out=None, alpha=1.0,
                    beta=0.0, stream=None):
    """Softmax (or log-softmax) of ``x`` over its channels or over each instance.

    Parameters
    ----------
    x : DeviceArray
        ``(N, C, ...)``; for a 2-D ``(N, C)`` array both modes are a row-wise softmax.
    algorithm : {"accurate", "log", "fast"}
    mode : {"channel", "instance"}
    out : DeviceArray, optional
    alpha, beta : float
    stream : Stream, optional

    Returns
    -------
    DeviceArray
    """
    algo, m = _softmax_args(algorithm, mode)
    x = operand(x, "x", "softmax_forward", stream=stream)
    dev = x.device
    s = as_stream(stream, dev)
    xd, cl = _tensor(x, "softmax_forward: x")
    y = output(out, x.shape, x.dtype, cl, dev, s)
    h = handle_for(dev, s.raw_handle)
    d = is_double(x.dtype)
    st = _lib.get().cudnnSoftmaxForward(h.raw, algo, m, scalar(alpha, d), xd.raw, x.ptr,
                                        scalar(beta, d), xd.raw, y.ptr)
    if st:
        raise_for(st, "cudnnSoftmaxForward", f"{algorithm}/{mode} on {x.dtype} {x.shape}")
    return y


def softmax_backward(y, dy, *, algorithm="accurate", mode="channel", out=None, alpha=1.0,
                     beta=0.0, stream=None):
    """Gradient of :func:`softmax_forward` given its output ``y`` and the gradient ``dy``.

    For ``"accurate"``/``"fast"``: ``dx = y * (dy - sum(dy * y))``; for ``"log"``:
    ``dx = dy - exp(y) * sum(dy)`` (sums over the softmax axis).

    Returns
    -------
    DeviceArray
        ``dx``.
    """
    algo, m = _softmax_args(algorithm, mode)
    y, dy, dev, s = resolve("softmax_backward", (y, "y"), (dy, "dy"), stream=stream,
                            required=2)
    _same(dy, "softmax_backward: dy", y, "y")
    yd, cl = _tensor(y, "softmax_backward: y")
    dyd = _like(dy, "softmax_backward: dy", y, cl, "y")
    dx = output(out, y.shape, y.dtype, cl, dev, s)
    h = handle_for(dev, s.raw_handle)
    d = is_double(y.dtype)
    st = _lib.get().cudnnSoftmaxBackward(h.raw, algo, m, scalar(alpha, d), yd.raw, y.ptr,
                                         dyd.raw, dy.ptr, scalar(beta, d), yd.raw, dx.ptr)
    if st:
        raise_for(st, "cudnnSoftmaxBackward", f"{algorithm}/{mode} on {y.dtype} {y.shape}")
    return dx


def _scaled_copy(a, c, alpha, beta, s):
    """``c = alpha * a + beta * c`` for same-shape, same-layout ``a`` and ``c``."""
    if a.ptr == c.ptr and alpha == 1.0 and beta == 0.0:
        return c
    if beta == 0.0 and a.ptr != c.ptr:
        # beta = 0 must ignore whatever c holds (NaN included), as cuDNN's own calls do.
        c.copy_(a, stream=s)
        if alpha == 1.0:
            return c
        return add_tensor(c, c, alpha=alpha, beta=0.0, stream=s)
    return add_tensor(a, c, alpha=alpha, beta=beta, stream=s)


def add_tensor(a, c, *, alpha=1.0, beta=1.0, stream=None):
    """``c = alpha * a + beta * c`` in place, broadcasting ``a`` (a bias).

    Parameters
    ----------
    a : DeviceArray
        Same number of dimensions as ``c`` with each one equal to ``c``'s or 1 (a ``(C,)``
        vector is taken as ``(1, C, 1, ...)``), same dtype.
    c : DeviceArray
        4-D or 5-D (or 2-D), updated in place.
    alpha, beta : float
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``c``.
    """
    c, a, dev, s = resolve("add_tensor", (c, "c"), (a, "a"), stream=stream, required=2)
    if a.dtype != c.dtype:
        raise TypeError(f"add_tensor: a has dtype {a.dtype}, c has {c.dtype}; they must match")
    cd, cl = _tensor(c, "add_tensor: c")
    if a.ndim == 1 and c.ndim >= 2 and a.shape[0] == c.shape[1]:
        shape = (1, a.shape[0]) + (1,) * (max(c.ndim, 4) - 2)
        if a.strides[0] != a.itemsize and a.shape[0] > 1:
            raise ValueError("a must be contiguous")
        ad = tensor_descriptor(a.dtype, shape, packed_strides(shape, False))
    else:
        if a.ndim != c.ndim or any(m not in (1, n) for m, n in zip(a.shape, c.shape)):
            raise ValueError(f"a of shape {a.shape} does not broadcast to c's {c.shape} "
                             "(each dimension must equal c's or be 1)")
        shape, strides = padded(a, "a")
        a_fits = layout_padded(shape, strides, a.itemsize, "a")
        if cl not in a_fits:
            cshape, cstrides = padded(c, "c")
            if len(layout_padded(cshape, cstrides, c.itemsize, "c")) == 2:
                # c's memory reads the same in both layouts; describe it in a's.
                cl = a_fits[0]
                cd = tensor_descriptor(c.dtype, cshape, packed_strides(cshape, cl))
            else:
                raise ValueError("a must have c's memory layout (layout mismatch)")
        ad = tensor_descriptor(a.dtype, shape, packed_strides(shape, cl))
    check_in_place("add_tensor", c, "a", a)
    h = handle_for(dev, s.raw_handle)
    d = is_double(c.dtype)
    st = _lib.get().cudnnAddTensor(h.raw, scalar(alpha, d), ad.raw, a.ptr, scalar(beta, d),
                                   cd.raw, c.ptr)
    if st:
        raise_for(st, "cudnnAddTensor", f"a {a.shape} onto c {c.shape}")
    return c


#: Short names.
activation = activation_forward
softmax = softmax_forward
