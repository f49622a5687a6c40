"""RAII cuDNN descriptors, built from plain Python parameters and cached by them.

A descriptor is a small host-side object (no GPU needed to create one) that tells cuDNN the
shape and type of a tensor, filter, convolution, pooling window or activation.  Building one
costs a few microseconds of C calls, so the functions :func:`tensor_descriptor`,
:func:`filter_descriptor`, :func:`convolution_descriptor`, :func:`pooling_descriptor` and
:func:`activation_descriptor` return a cached, immutable descriptor for their arguments: a
repeated call creates nothing.  Each descriptor is destroyed by ``close()``, a ``with`` block
or when the last reference goes (a ``weakref.finalize`` holding the C function and raw handle,
never the object).  The cache is bounded; an evicted descriptor lives on while a plan still
holds it.

Layouts
-------
Arrays are always *logical* ``(N, C, H, W)`` (``(N, C, D, H, W)`` in 3-D), as in PyTorch; the
memory layout is read from the strides: C-contiguous data is ``NCHW``/``NCDHW``, a
channels-last array (what ``torch.Tensor.contiguous(memory_format=torch.channels_last)``
gives, or ``x.transpose(0, 2, 3, 1).copy().transpose(0, 3, 1, 2)`` in numpy terms) is
``NHWC``/``NDHWC``.  :func:`layouts_of` does the reading.  These are the only two layouts this
package hands to cuDNN, and every tensor is described with the packed strides of its layout.

This layer describes problems by value (shapes, strides, dtypes, parameters) only, so a backend
built on the cuDNN graph API could replace the legacy descriptors without changing a public
function.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .. import dtypes as _dtypes
from .._ffi import OwnedHandle
from ..driver.args import int_arg, int_tuple
from ..runtime import front as _front
from ..runtime.cache import KeyKind, cache as _plan_cache
from . import _lib
from ._base import raise_for

__all__ = [
    "DescriptorSet", "Descriptor", "TensorDescriptor", "FilterDescriptor", "ConvolutionDescriptor", "PoolingDescriptor",
    "ActivationDescriptor", "tensor_descriptor", "filter_descriptor",
    "convolution_descriptor", "pooling_descriptor", "activation_descriptor",
    "descriptor_cache_size", "clear_descriptor_cache", "layouts_of", "packed_strides",
    "layout_name", "cudnn_dtype", "MATH_TYPES", "POOLING_MODES", "ACTIVATION_MODES",
]

#: numpy dtypes this package passes to cuDNN, and their cudnnDataType_t.
_CUDNN_FLOAT_TYPES = ("float32", "float16", "bfloat16", "float64")

#: math= names -> cudnnMathType_t.
MATH_TYPES = {
    "fma": _lib.CUDNN_FMA_MATH,
    "default": _lib.CUDNN_DEFAULT_MATH,
    "tf32": _lib.CUDNN_DEFAULT_MATH,
    "tensor_op": _lib.CUDNN_TENSOR_OP_MATH,
    "allow_conversion": _lib.CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,
}

#: mode= names of pooling -> cudnnPoolingMode_t.  "avg" counts the padding, as PyTorch's
#: ``avg_pool2d`` does by default.
POOLING_MODES = {
    "max": _lib.CUDNN_POOLING_MAX,
    "max_deterministic": _lib.CUDNN_POOLING_MAX_DETERMINISTIC,
    "avg": _lib.CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
    "avg_include_padding": _lib.CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
    "avg_exclude_padding": _lib.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
}

#: mode= names of activation -> cudnnActivationMode_t.
ACTIVATION_MODES = {
    "sigmoid": _lib.CUDNN_ACTIVATION_SIGMOID,
    "relu": _lib.CUDNN_ACTIVATION_RELU,
    "tanh": _lib.CUDNN_ACTIVATION_TANH,
    "clipped_relu": _lib.CUDNN_ACTIVATION_CLIPPED_RELU,
    "elu": _lib.CUDNN_ACTIVATION_ELU,
    "identity": _lib.CUDNN_ACTIVATION_IDENTITY,
    "swish": _lib.CUDNN_ACTIVATION_SWISH,
}


def cudnn_dtype(dtype, what: str = "dtype") -> int:
    """The ``cudnnDataType_t`` of a floating dtype cuDNN computes in; ``what`` names the
    argument in messages (``"TensorDescriptor: dtype"``).

    Raises
    ------
    TypeError
        Not float32, float16, bfloat16 or float64.
    """
    row = _dtypes.lookup(dtype, what)
    if row.name not in _CUDNN_FLOAT_TYPES:
        raise TypeError(f"{what} is {row.name}; cuDNN operations here take "
                        f"{', '.join(_CUDNN_FLOAT_TYPES)} data")
    return row.cudnn


# -- layouts ---------------------------------------------------------------------------------
def layout_name(ndim: int, channels_last: bool) -> str:
    """``"NCHW"``, ``"NHWC"``, ``"NCDHW"`` or ``"NDHWC"`` (others: ``"N C <k spatial>"``)."""
    spatial = {1: "W", 2: "HW", 3: "DHW"}.get(ndim - 2, f"{ndim - 2}d")
    return f"N{spatial}C" if channels_last else f"NC{spatial}"


def packed_strides(shape, channels_last: bool) -> tuple[int, ...]:
    """Element strides of a packed logical ``(N, C, *spatial)`` array in either layout."""
    shape = tuple(shape)
    if not channels_last:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.append(acc)
            acc *= n
        return tuple(reversed(strides))
    n, c, spatial = shape[0], shape[1], shape[2:]
    out = [0] * len(shape)
    out[1] = 1
    acc = c
    for i in range(len(spatial) - 1, -1, -1):
        out[2 + i] = acc
        acc *= spatial[i]
    out[0] = acc
    return tuple(out)


def layouts_of(shape, strides, itemsize: int) -> tuple[bool, ...]:
    """Which packed layouts the byte ``strides`` of a logical ``(N, C, ...)`` array match.

    Returns
    -------
    tuple of bool
        ``channels_last`` values that fit: ``(False,)`` for NCHW-packed data, ``(True,)`` for
        channels-last data, both when size-1 dimensions make the two coincide (the one the
        strides match exactly first), ``()`` for any other stride pattern (a slice, a
        transposed or padded view).
    """
    fits, exact = [], []
    for cl in (False, True):
        want = packed_strides(shape, cl)
        if all(n == 1 or s == w * itemsize for n, s, w in zip(shape, strides, want)):
            fits.append(cl)
            exact.append(all(s == w * itemsize for s, w in zip(strides, want)))
    if len(fits) == 2 and exact == [False, True]:
        # Both describe the memory; the strides say which one the array was made in (as a
        # channels_last torch tensor with one channel): list that one first.
        return (True, False)
    return tuple(fits)


# -- the descriptor objects --------------------------------------------------------------------
def _ints(values):
    return (ctypes.c_int * max(len(values), 1))(*values)


class Descriptor(OwnedHandle):
    """Shared lifetime logic: create, set (freeing on failure), finalize, close."""

    __slots__ = ("_key",)
    _kind = ""

    def __init__(self, key):
        L = _lib.get()
        raw = getattr(_lib, f"cudnn{self._kind}Descriptor_t")()
        fn = f"cudnnCreate{self._kind}Descriptor"
        st = getattr(L, fn)(ctypes.byref(raw))
        if st:
            raise_for(st, fn)
        self._key = key
        self._own(raw, getattr(L, f"cudnnDestroy{self._kind}Descriptor"))
        try:
            self._set(L, raw, *key)
        except BaseException:
            self._finalizer()
            raise

    def _set(self, L, raw, *key):  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    @property
    def key(self) -> tuple:
        """The parameters this descriptor was built from (its cache key)."""
        return self._key

    def _describe(self) -> str:
        return repr(self._key)

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        return f"<{type(self).__name__} {self._describe()}{state}>"


class TensorDescriptor(Descriptor):
    """``cudnnTensorDescriptor_t``: element type, dimensions and element strides.

    Parameters
    ----------
    dtype : dtype-like
        float32, float16, bfloat16 or float64.
    shape : tuple of int
        3 to 8 positive dimensions.
    strides : tuple of int
        Element (not byte) strides, one per dimension.
    """

    __slots__ = ()
    _kind = "Tensor"

    def __init__(self, dtype, shape, strides):
        super().__init__(_tensor_key(dtype, shape, strides, "TensorDescriptor"))

    def _set(self, L, raw, dt, shape, strides):
        st = L.cudnnSetTensorNdDescriptor(raw, cudnn_dtype(dt), len(shape), _ints(shape),
                                          _ints(strides))
        if st:
            raise_for(st, "cudnnSetTensorNdDescriptor",
                      f"dtype {dt}, shape {shape}, strides {strides}")

    def _describe(self):
        dt, shape, strides = self._key
        return f"{dt} shape={shape} strides={strides}"


class FilterDescriptor(Descriptor):
    """``cudnnFilterDescriptor_t``: a packed ``(K, C/groups, *window)`` filter.

    Parameters
    ----------
    dtype : dtype-like
    shape : tuple of int
        Logical ``(K, C/groups, R, S)`` (or 3-D ``(K, C/groups, T, R, S)``).
    channels_last : bool
        The memory is ``KRSC`` (``CUDNN_TENSOR_NHWC``) instead of ``KCRS``.
    """

    __slots__ = ()
    _kind = "Filter"

    def __init__(self, dtype, shape, channels_last: bool = False):
        super().__init__(_filter_key(dtype, shape, channels_last, "FilterDescriptor"))

    def _set(self, L, raw, dt, shape, cl):
        fmt = _lib.CUDNN_TENSOR_NHWC if cl else _lib.CUDNN_TENSOR_NCHW
        st = L.cudnnSetFilterNdDescriptor(raw, cudnn_dtype(dt), fmt, len(shape), _ints(shape))
        if st:
            raise_for(st, "cudnnSetFilterNdDescriptor", f"dtype {dt}, shape {shape}")

    def _describe(self):
        dt, shape, cl = self._key
        return f"{dt} shape={shape} {'channels-last' if cl else 'channels-first'}"


class ConvolutionDescriptor(Descriptor):
    """``cudnnConvolutionDescriptor_t``: a cross-correlation (what deep learning calls a
    convolution) with its padding, stride, dilation, groups, compute type and math type.

    Parameters
    ----------
    padding, stride, dilation : tuple of int
        One per spatial dimension.
    groups : int
    compute : int
        ``cudnnDataType_t`` of the accumulation.
    math : int
        ``cudnnMathType_t``.
    """

    __slots__ = ()
    _kind = "Convolution"

    def __init__(self, padding, stride, dilation, groups: int, compute: int, math: int):
        super().__init__(_conv_key(padding, stride, dilation, groups, compute, math,
                                   "ConvolutionDescriptor"))

    def _set(self, L, raw, pad, stride, dil, groups, compute, math):
        st = L.cudnnSetConvolutionNdDescriptor(raw, len(pad), _ints(pad), _ints(stride),
                                               _ints(dil), _lib.CUDNN_CROSS_CORRELATION,
                                               compute)
        if st:
            raise_for(st, "cudnnSetConvolutionNdDescriptor",
                      f"padding {pad}, stride {stride}, dilation {dil}")
        st = L.cudnnSetConvolutionGroupCount(raw, groups)
        if st:
            raise_for(st, "cudnnSetConvolutionGroupCount")
        st = L.cudnnSetConvolutionMathType(raw, math)
        if st:
            raise_for(st, "cudnnSetConvolutionMathType")

    def _describe(self):
        pad, stride, dil, groups, compute, math = self._key
        m = {v: k for k, v in MATH_TYPES.items() if k != "tf32"}.get(math, math)
        return (f"padding={pad} stride={stride} dilation={dil} groups={groups} "
                f"compute={compute} math={m}")


# -- the descriptors' arguments, checked before any C call, in the caller's name -------------
def _tensor_key(dtype, shape, strides, op) -> tuple:
    dt = np.dtype(_dtypes.lookup(dtype, f"{op}: dtype").numpy)
    cudnn_dtype(dt, f"{op}: dtype")
    shape = int_tuple(shape, f"{op}: shape", scalar=False)
    strides = int_tuple(strides, f"{op}: strides", scalar=False)
    if not 3 <= len(shape) <= _lib.CUDNN_DIM_MAX or len(strides) != len(shape):
        raise ValueError(f"{op}: a tensor descriptor takes 3 to {_lib.CUDNN_DIM_MAX} dimensions "
                         f"with one stride each, got shape {shape}, strides {strides}")
    if any(n < 1 for n in shape) or any(s < 1 for s in strides):
        raise ValueError(f"{op}: tensor dimensions and strides must be >= 1, got shape {shape}, "
                         f"strides {strides}")
    return dt, shape, strides


def _filter_key(dtype, shape, channels_last, op) -> tuple:
    dt = np.dtype(_dtypes.lookup(dtype, f"{op}: dtype").numpy)
    cudnn_dtype(dt, f"{op}: dtype")
    shape = int_tuple(shape, f"{op}: shape", scalar=False)
    if not 3 <= len(shape) <= _lib.CUDNN_DIM_MAX or any(n < 1 for n in shape):
        raise ValueError(f"{op}: a filter descriptor takes 3 to {_lib.CUDNN_DIM_MAX} positive "
                         f"dimensions, got shape {shape}")
    return dt, shape, bool(channels_last)


def _conv_key(padding, stride, dilation, groups, compute, math, op) -> tuple:
    key = (int_tuple(padding, f"{op}: padding", scalar=False),
           int_tuple(stride, f"{op}: stride", scalar=False),
           int_tuple(dilation, f"{op}: dilation", scalar=False),
           int_arg(groups, f"{op}: groups"), int_arg(compute, f"{op}: compute"),
           int_arg(math, f"{op}: math"))
    check_conv_params(*key[:4], f"{op}: ")
    return key


def _pool_key(mode, window, padding, stride, propagate_nan, op) -> tuple:
    if not isinstance(mode, str) or mode not in POOLING_MODES:
        raise ValueError(f"{op}: mode {mode!r} is not a pooling mode; the pooling modes are "
                         f"{sorted(POOLING_MODES)}")
    window = int_tuple(window, f"{op}: window", scalar=False)
    padding = int_tuple(padding, f"{op}: padding", scalar=False)
    stride = int_tuple(stride, f"{op}: stride", scalar=False)
    if not len(window) == len(padding) == len(stride) or not window:
        raise ValueError(f"{op}: window, padding and stride need one entry per spatial "
                         "dimension")
    if any(w < 1 for w in window):
        raise ValueError(f"{op}: window must be >= 1, got {window}")
    _check_steps(padding, stride, f"{op}: ")
    if any(p >= w for p, w in zip(padding, window)):
        # cuDNN rejects it too, with a bare BAD_PARAM; a window entirely in padding has
        # no input to reduce.
        raise ValueError(f"{op}: padding {padding} must be smaller than the window {window}")
    return mode, window, padding, stride, bool(propagate_nan)


def _act_key(mode, coef, swish_beta, propagate_nan, op) -> tuple:
    if not isinstance(mode, str) or mode not in ACTIVATION_MODES:
        raise ValueError(f"{op}: mode {mode!r} is not an activation mode; the activation "
                         f"modes are {sorted(ACTIVATION_MODES)}")
    return mode, float(coef), float(swish_beta), bool(propagate_nan)


def _check_steps(padding, stride, lead: str = "") -> None:
    """Negative padding or a stride below 1 refused (``lead``: ``"<op>: "``)."""
    if any(p < 0 for p in padding):
        raise ValueError(f"{lead}padding must be >= 0, got {padding}")
    if any(s < 1 for s in stride):
        raise ValueError(f"{lead}stride must be >= 1, got {stride}")


def check_conv_params(padding, stride, dilation, groups, lead: str = "") -> None:
    """Raise ValueError for negative padding, stride or dilation below 1, groups below 1;
    ``lead`` (``"<op>: "``) starts each message."""
    _check_steps(padding, stride, lead)
    if any(d < 1 for d in dilation):
        raise ValueError(f"{lead}dilation must be >= 1, got {dilation}")
    if groups < 1:
        raise ValueError(f"{lead}groups must be >= 1, got {groups}")


class PoolingDescriptor(Descriptor):
    """``cudnnPoolingDescriptor_t``.

    Parameters
    ----------
    mode : str
        A key of :data:`POOLING_MODES`.
    window, padding, stride : tuple of int
        One per spatial dimension.
    propagate_nan : bool
        Max pooling passes NaN through.
    """

    __slots__ = ()
    _kind = "Pooling"

    def __init__(self, mode: str, window, padding, stride, propagate_nan: bool = True):
        super().__init__(_pool_key(mode, window, padding, stride, propagate_nan,
                                   "PoolingDescriptor"))

    def _set(self, L, raw, mode, window, padding, stride, nan):
        st = L.cudnnSetPoolingNdDescriptor(
            raw, POOLING_MODES[mode],
            _lib.CUDNN_PROPAGATE_NAN if nan else _lib.CUDNN_NOT_PROPAGATE_NAN,
            len(window), _ints(window), _ints(padding), _ints(stride))
        if st:
            raise_for(st, "cudnnSetPoolingNdDescriptor")

    def _describe(self):
        mode, window, padding, stride, _ = self._key
        return f"{mode} window={window} padding={padding} stride={stride}"


class ActivationDescriptor(Descriptor):
    """``cudnnActivationDescriptor_t``.

    Parameters
    ----------
    mode : str
        A key of :data:`ACTIVATION_MODES`.
    coef : float
        The ceiling of ``clipped_relu``, the alpha of ``elu``; ignored otherwise.
    swish_beta : float
        The beta of ``swish`` (``x * sigmoid(beta * x)``).
    propagate_nan : bool
    """

    __slots__ = ()
    _kind = "Activation"

    def __init__(self, mode: str, coef: float = 0.0, swish_beta: float = 1.0,
                 propagate_nan: bool = True):
        super().__init__(_act_key(mode, coef, swish_beta, propagate_nan,
                                  "ActivationDescriptor"))

    def _set(self, L, raw, mode, coef, beta, nan):
        st = L.cudnnSetActivationDescriptor(
            raw, ACTIVATION_MODES[mode],
            _lib.CUDNN_PROPAGATE_NAN if nan else _lib.CUDNN_NOT_PROPAGATE_NAN, coef)
        if st:
            raise_for(st, "cudnnSetActivationDescriptor")
        if mode == "swish":
            st = L.cudnnSetActivationDescriptorSwishBeta(raw, beta)
            if st:
                raise_for(st, "cudnnSetActivationDescriptorSwishBeta")

    def _describe(self):
        mode, coef, beta, _ = self._key
        extra = {"clipped_relu": f" ceiling={coef}", "elu": f" alpha={coef}",
                 "swish": f" beta={beta}"}.get(mode, "")
        return mode + extra


# -- the cache ---------------------------------------------------------------------------------
class DescriptorSet:
    """The descriptors and facts of one problem of a descriptor-based one-shot (pooling, an
    element-wise op, the bias gradient), as the one plan cache holds them: usable while every
    descriptor is open (the descriptors are the shared, cached ones, so closing the set frees
    nothing).

    Attributes
    ----------
    descriptors : tuple
        The descriptors, in the order the call takes them.
    info : dict
        What else the problem fixed (output shape, layout, ...).
    """

    __slots__ = ("descriptors", "info")

    def __init__(self, descriptors, **info):
        self.descriptors = tuple(descriptors)
        self.info = info

    def usable(self) -> bool:
        return not any(d.closed for d in self.descriptors)

    def close(self) -> None:
        """Nothing of its own to free."""

    def __repr__(self) -> str:
        return f"<DescriptorSet {list(self.descriptors)!r} {self.info!r}>"



#: The key of cached descriptors in the one plan cache (bounded and cleared with the plans).
DESCRIPTOR_KEY = KeyKind("cudnn_descriptor", ("type", "params"))


def _cached(cls, *args):
    return _front.planned((DESCRIPTOR_KEY, cls.__name__, args), lambda: cls(*args),
                          prepare=None)


# The factories key the cache by the checked, normalized arguments; the libraries' own calls
# (a numpy dtype and tuples, from arrays they took through the operand path) skip the checks.
def tensor_descriptor(dtype, shape, strides) -> TensorDescriptor:
    """A cached :class:`TensorDescriptor` (``strides`` in elements)."""
    if type(dtype) is not np.dtype or type(shape) is not tuple or type(strides) is not tuple:
        dtype, shape, strides = _tensor_key(dtype, shape, strides, "tensor_descriptor")
    return _cached(TensorDescriptor, dtype, shape, strides)


def filter_descriptor(dtype, shape, channels_last: bool = False) -> FilterDescriptor:
    """A cached :class:`FilterDescriptor`."""
    if type(dtype) is not np.dtype or type(shape) is not tuple:
        dtype, shape, channels_last = _filter_key(dtype, shape, channels_last,
                                                  "filter_descriptor")
    return _cached(FilterDescriptor, dtype, shape, bool(channels_last))


def convolution_descriptor(padding, stride, dilation, groups, compute, math
                           ) -> ConvolutionDescriptor:
    """A cached :class:`ConvolutionDescriptor`."""
    return _cached(ConvolutionDescriptor, *_conv_key(padding, stride, dilation, groups, compute,
                                                     math, "convolution_descriptor"))


def pooling_descriptor(mode, window, padding, stride, propagate_nan=True) -> PoolingDescriptor:
    """A cached :class:`PoolingDescriptor`."""
    return _cached(PoolingDescriptor, *_pool_key(mode, window, padding, stride, propagate_nan,
                                                 "pooling_descriptor"))


def activation_descriptor(mode, coef=0.0, swish_beta=1.0, propagate_nan=True
                          ) -> ActivationDescriptor:
    """A cached :class:`ActivationDescriptor`."""
    return _cached(ActivationDescriptor, *_act_key(mode, coef, swish_beta, propagate_nan,
                                                   "activation_descriptor"))


def descriptor_cache_size() -> int:
    """How many descriptors the one plan cache holds."""
    return _plan_cache.kinds().get(DESCRIPTOR_KEY.name, 0)


def clear_descriptor_cache() -> None:
    """Drop every cached descriptor (each is destroyed once nothing else holds it)."""
    _plan_cache.clear(DESCRIPTOR_KEY.name)
