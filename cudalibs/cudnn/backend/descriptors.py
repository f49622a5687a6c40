"""cuDNN's graph (backend) API, part one: descriptors, tensors, operations, operation graphs.

The legacy convolution API (``cudnnFindConvolution*AlgorithmEx``) only reaches a subset of the
kernels cuDNN 9 has; the Hopper engines and the runtime-fused kernels (convolution + bias +
activation generated for the problem), attention and the norm operations are reachable only
through the graph API.  Here: *descriptors* of every kind (:class:`BackendDescriptor`),
created empty, filled with typed attribute arrays (``cudnnBackendSetAttribute``) and
finalized; builders for tensors (:func:`tensor`, each with a unique id), operations
(:func:`conv_operation`, :func:`pointwise_operation` for every pointwise mode,
:func:`matmul_operation`, :func:`reduction_operation`, :func:`rng_operation`,
:func:`reshape_operation`) and the *operation graph* they make (:func:`operation_graph`);
:func:`make` builds any other kind.  Engines and execution plans are
:mod:`cudalibs.cudnn.backend.engines`.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ... import dtypes as _dtypes
from ..._ffi import OwnedHandle
from ...errors import CudnnError
from .. import _lib
from .._base import last_error_string, raise_for

__all__ = ["BackendDescriptor", "tensor", "convolution",
           "conv_operation", "pointwise", "pointwise_operation", "pointwise_backward_operation",
           "matmul", "matmul_operation", "reduction", "reduction_operation", "rng",
           "rng_operation", "reshape_operation", "operation_graph", "make", "attribute_name",
           "descriptor_type_name",
           "NUMERICAL_NOTES", "BEHAVIOR_NOTES", "CONV_OPS", "POINTWISE_MODES", "TERNARY_MODES",
           "BACKWARD_MODES", "REDUCTION_OPS", "RNG_DISTRIBUTIONS"]


def _names(prefix: str) -> dict:
    return {v: k for k, v in vars(_lib).items()
            if k.startswith(prefix) and isinstance(v, int)}


_ATTR_NAMES = _names("CUDNN_ATTR_")
_KIND_NAMES = _names("CUDNN_BACKEND_")
_TYPE_NAMES = _names("CUDNN_TYPE_")
#: cudnnBackendNumericalNote_t value -> short name ("tensor_core", "nondeterministic", ...).
NUMERICAL_NOTES = {v: k[len("CUDNN_NUMERICAL_NOTE_"):].lower()
                   for v, k in _names("CUDNN_NUMERICAL_NOTE_").items()}
#: cudnnBackendBehaviorNote_t value -> short name ("runtime_compilation", ...).
BEHAVIOR_NOTES = {v: k[len("CUDNN_BEHAVIOR_NOTE_"):].lower()
                  for v, k in _names("CUDNN_BEHAVIOR_NOTE_").items()}


def attribute_name(attr: int) -> str:
    """The vendor name of a ``cudnnBackendAttributeName_t`` value (for messages)."""
    return _ATTR_NAMES.get(attr, f"attribute {attr}")


def descriptor_type_name(kind: int) -> str:
    """The vendor name of a ``cudnnBackendDescriptorType_t`` value (for messages)."""
    return _KIND_NAMES.get(kind, f"descriptor type {kind}")


# The C element type of each cudnnBackendAttributeType_t used here.
_ELEMENT = {
    _lib.CUDNN_TYPE_HANDLE: _lib.cudnnHandle_t,
    _lib.CUDNN_TYPE_DATA_TYPE: ctypes.c_int,
    _lib.CUDNN_TYPE_BOOLEAN: ctypes.c_bool,
    _lib.CUDNN_TYPE_INT64: ctypes.c_int64,
    _lib.CUDNN_TYPE_FLOAT: ctypes.c_float,
    _lib.CUDNN_TYPE_DOUBLE: ctypes.c_double,
    _lib.CUDNN_TYPE_VOID_PTR: ctypes.c_void_p,
    _lib.CUDNN_TYPE_CONVOLUTION_MODE: ctypes.c_int,
    _lib.CUDNN_TYPE_HEUR_MODE: ctypes.c_int,
    _lib.CUDNN_TYPE_KNOB_TYPE: ctypes.c_int,
    _lib.CUDNN_TYPE_NUMERICAL_NOTE: ctypes.c_int,
    _lib.CUDNN_TYPE_POINTWISE_MODE: ctypes.c_int,
    _lib.CUDNN_TYPE_BACKEND_DESCRIPTOR: _lib.cudnnBackendDescriptor_t,
    _lib.CUDNN_TYPE_BEHAVIOR_NOTE: ctypes.c_int,
    _lib.CUDNN_TYPE_INT32: ctypes.c_int32,
    _lib.CUDNN_TYPE_CHAR: ctypes.c_char,
}
# Every other enum-valued attribute type is a C enum: an int.
for _t in ("NAN_PROPOGATION", "LAYOUT_TYPE", "ATTRIB_NAME", "GENSTATS_MODE",
           "BN_FINALIZE_STATS_MODE", "REDUCTION_OPERATOR_TYPE", "TENSOR_REORDERING_MODE",
           "RESAMPLE_MODE", "PADDING_MODE", "SIGNAL_MODE", "NORM_MODE", "NORM_FWD_PHASE",
           "RNG_DISTRIBUTION"):
    _ELEMENT[getattr(_lib, "CUDNN_TYPE_" + _t)] = ctypes.c_int
del _t


class BackendDescriptor(OwnedHandle):
    """One ``cudnnBackendDescriptor_t``: created empty of a kind, filled, finalized.

    Parameters
    ----------
    kind : int
        A ``cudnnBackendDescriptorType_t`` (``_lib.CUDNN_BACKEND_TENSOR_DESCRIPTOR``, ...).

    Notes
    -----
    A descriptor holds strong references to the descriptors set into it, so a graph keeps
    its tensors and operations alive (cuDNN may keep pointers to them).  Setting an attribute
    after :meth:`finalize` is an error cuDNN reports.
    """

    __slots__ = ("kind", "finalized", "_refs")

    def __init__(self, kind: int):
        kind = int(kind)
        if kind not in _KIND_NAMES:
            raise ValueError(f"unknown backend descriptor type {kind}; known: "
                             f"{sorted(_KIND_NAMES.values())}")
        L = _lib.get()
        raw = _lib.cudnnBackendDescriptor_t()
        st = L.cudnnBackendCreateDescriptor(kind, ctypes.byref(raw))
        if st:
            raise_for(st, "cudnnBackendCreateDescriptor", descriptor_type_name(kind))
        self.kind = kind
        self.finalized = False
        self._refs = []
        self._own(raw, L.cudnnBackendDestroyDescriptor)

    # -- attributes ------------------------------------------------------------------------
    def set(self, attr: int, atype: int, values) -> "BackendDescriptor":
        """Set attribute ``attr`` of type ``atype`` (a ``cudnnBackendAttributeType_t``) to
        ``values`` (one value or a sequence; descriptors for ``CUDNN_TYPE_BACKEND_DESCRIPTOR``).

        Returns ``self``, so calls chain.
        """
        elem = _ELEMENT.get(atype)
        if elem is None:
            raise ValueError(f"attribute type {_TYPE_NAMES.get(atype, atype)} is not supported "
                             "by this wrapper")
        if isinstance(values, (list, tuple)):
            seq = list(values)
        else:
            seq = [values]
        if atype == _lib.CUDNN_TYPE_BACKEND_DESCRIPTOR:
            for d in seq:
                if not isinstance(d, BackendDescriptor):
                    raise TypeError(f"{attribute_name(attr)} takes backend descriptors, "
                                    f"not {type(d).__name__}")
            self._refs.extend(seq)
            seq = [d.raw for d in seq]
        elif atype == _lib.CUDNN_TYPE_HANDLE:
            seq = [getattr(h, "raw", h) for h in seq]
        arr = (elem * max(len(seq), 1))(*seq)
        st = _lib.get().cudnnBackendSetAttribute(self.raw, attr, atype, len(seq), arr)
        if st:
            raise_for(st, "cudnnBackendSetAttribute",
                      f"{attribute_name(attr)} ({_TYPE_NAMES.get(atype, atype)} x {len(seq)}) "
                      f"on {descriptor_type_name(self.kind)}")
        return self

    def get(self, attr: int, atype: int, count: int | None = None) -> list:
        """Values of attribute ``attr`` (plain Python values; raw handles for descriptors --
        use :meth:`get_descriptors` to receive owned ones).

        ``count`` None asks cuDNN for the number of elements first.
        """
        elem = _ELEMENT[atype]
        L = _lib.get()
        n = ctypes.c_int64()
        if count is None:
            count = self.count(attr, atype)
        arr = (elem * max(count, 1))()
        st = L.cudnnBackendGetAttribute(self.raw, attr, atype, count, ctypes.byref(n), arr)
        if st:
            raise_for(st, "cudnnBackendGetAttribute",
                      f"{attribute_name(attr)} of {descriptor_type_name(self.kind)}")
        out = list(arr[:min(n.value, count)])
        if atype == _lib.CUDNN_TYPE_BOOLEAN:
            out = [bool(v) for v in out]
        return out

    def count(self, attr: int, atype: int) -> int:
        """How many elements attribute ``attr`` holds."""
        n = ctypes.c_int64()
        st = _lib.get().cudnnBackendGetAttribute(self.raw, attr, atype, 0, ctypes.byref(n), None)
        if st:
            raise_for(st, "cudnnBackendGetAttribute",
                      f"element count of {attribute_name(attr)} of "
                      f"{descriptor_type_name(self.kind)}")
        return int(n.value)

    def get_descriptors(self, attr: int, kind: int, count: int) -> list["BackendDescriptor"]:
        """A descriptor-valued attribute: cuDNN fills ``count`` fresh descriptors of ``kind``
        that this call creates (the cuDNN 9 convention for getting descriptors)."""
        ds = [BackendDescriptor(kind) for _ in range(count)]
        arr = (_lib.cudnnBackendDescriptor_t * max(count, 1))(*[d.raw for d in ds])
        n = ctypes.c_int64()
        st = _lib.get().cudnnBackendGetAttribute(self.raw, attr,
                                                 _lib.CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                                 ctypes.byref(n), arr)
        if st:
            raise_for(st, "cudnnBackendGetAttribute",
                      f"{attribute_name(attr)} of {descriptor_type_name(self.kind)}")
        for d in ds[n.value:]:
            d.close()
        return ds[:n.value]

    def finalize(self) -> "BackendDescriptor":
        """``cudnnBackendFinalize``: validate and freeze; returns ``self``."""
        st = _lib.get().cudnnBackendFinalize(self.raw)
        if st:
            raise_for(st, "cudnnBackendFinalize", descriptor_type_name(self.kind))
        self.finalized = True
        return self

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("finalized" if self.finalized else "open")
        return f"<BackendDescriptor {descriptor_type_name(self.kind)} {state}>"


def make(kind, *attrs, finalize=True) -> BackendDescriptor:
    """A descriptor of ``kind`` with ``(attr, type, values)`` triples set, then finalized
    (unless ``finalize`` is False); closed again if any step fails.

    The generic builder behind every specific one here; operations this module has no
    builder for (norms, fused attention...) are made with it where they are used.
    """
    d = BackendDescriptor(kind)
    try:
        for attr, atype, values in attrs:
            d.set(attr, atype, values)
        if finalize:
            d.finalize()
    except BaseException:
        d.close()
        raise
    return d


# -- builders --------------------------------------------------------------------------------
def data_type(dtype) -> int:
    """The ``cudnnDataType_t`` of a numpy dtype (float32/float16/bfloat16/float64, int32...)."""
    row = _dtypes.lookup(dtype)
    if row.cudnn is None:
        raise TypeError(f"cuDNN has no data type for {row.name}")
    return row.cudnn


def tensor(uid: int, dtype, dims, strides, *, alignment: int = 16,
           virtual: bool = False, by_value: bool = False,
           ragged_offset: BackendDescriptor | None = None) -> BackendDescriptor:
    """A finalized tensor descriptor.

    Parameters
    ----------
    uid : int
        Its unique id in the graph (the variant pack binds pointers by it).
    dtype : dtype-like
    dims, strides : sequence of int
        Logical dimensions and *element* strides (cuDNN's order: N, C, spatial...).
    alignment : int
        Byte alignment every pointer bound to it will have.
    virtual : bool
        An intermediate that lives only inside a fused kernel (no pointer).
    by_value : bool
        A scalar passed by value: the variant pack binds a *host* pointer to it, read when
        the plan is executed (an epsilon, a scale).
    ragged_offset : BackendDescriptor, optional
        An int32/int64 ``[b + 1, 1, 1, 1]`` tensor of element offsets: batch entry ``n``
        starts ``offset[n]`` elements from the pointer, replacing the batch stride (packed
        sequences of different lengths, cuDNN's ``CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC``).
    """
    dims, strides = [int(v) for v in dims], [int(v) for v in strides]
    if len(dims) != len(strides) or not 1 <= len(dims) <= _lib.CUDNN_DIM_MAX:
        raise ValueError(f"a tensor needs 1 to {_lib.CUDNN_DIM_MAX} dimensions with one stride "
                         f"each, got dims {dims}, strides {strides}")
    if any(n < 1 for n in dims) or any(s < 0 for s in strides):
        raise ValueError(f"tensor dimensions must be >= 1 and strides >= 0, got {dims}, "
                         f"{strides}")
    if alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two, got {alignment}")
    T = _lib
    return make(T.CUDNN_BACKEND_TENSOR_DESCRIPTOR,
                 (T.CUDNN_ATTR_TENSOR_DATA_TYPE, T.CUDNN_TYPE_DATA_TYPE, data_type(dtype)),
                 (T.CUDNN_ATTR_TENSOR_DIMENSIONS, T.CUDNN_TYPE_INT64, dims),
                 (T.CUDNN_ATTR_TENSOR_STRIDES, T.CUDNN_TYPE_INT64, strides),
                 (T.CUDNN_ATTR_TENSOR_UNIQUE_ID, T.CUDNN_TYPE_INT64, int(uid)),
                 (T.CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, T.CUDNN_TYPE_INT64, int(alignment)),
                 (T.CUDNN_ATTR_TENSOR_IS_VIRTUAL, T.CUDNN_TYPE_BOOLEAN, bool(virtual)),
                 *([(T.CUDNN_ATTR_TENSOR_IS_BY_VALUE, T.CUDNN_TYPE_BOOLEAN, True)]
                   if by_value else []),
                 *([(T.CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR,
                     ragged_offset)] if ragged_offset is not None else []))


def convolution(padding, stride, dilation, *, compute=np.float32) -> BackendDescriptor:
    """A finalized convolution descriptor: cross-correlation (what deep learning calls a
    convolution), symmetric zero padding, one entry per spatial dimension."""
    padding, stride, dilation = ([int(v) for v in a] for a in (padding, stride, dilation))
    if not len(padding) == len(stride) == len(dilation) or not padding:
        raise ValueError("padding, stride and dilation need one entry per spatial dimension")
    if any(p < 0 for p in padding) or any(s < 1 for s in stride) or any(d < 1 for d in dilation):
        raise ValueError(f"bad convolution parameters: padding {padding} (>= 0), stride "
                         f"{stride} (>= 1), dilation {dilation} (>= 1)")
    T = _lib
    return make(T.CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR,
                 (T.CUDNN_ATTR_CONVOLUTION_COMP_TYPE, T.CUDNN_TYPE_DATA_TYPE, data_type(compute)),
                 (T.CUDNN_ATTR_CONVOLUTION_CONV_MODE, T.CUDNN_TYPE_CONVOLUTION_MODE,
                  T.CUDNN_CROSS_CORRELATION),
                 (T.CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, T.CUDNN_TYPE_INT64, len(padding)),
                 (T.CUDNN_ATTR_CONVOLUTION_DILATIONS, T.CUDNN_TYPE_INT64, dilation),
                 (T.CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, T.CUDNN_TYPE_INT64, stride),
                 (T.CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, T.CUDNN_TYPE_INT64, padding),
                 (T.CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, T.CUDNN_TYPE_INT64, padding))


#: Per convolution operation: descriptor type and the attributes of its (input a, input b,
#: output c) tensors, convolution descriptor, alpha and beta -- in the operand order the
#: legacy functions take them (forward: x, w -> y; backward_data: w, dy -> dx;
#: backward_filter: x, dy -> dw).
CONV_OPS = {
    "forward": (_lib.CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA),
    "backward_data": (_lib.CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                      _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                      _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                      _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                      _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                      _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                      _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA),
    "backward_filter": (_lib.CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                        _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                        _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                        _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                        _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                        _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                        _lib.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA),
}


def conv_operation(op: str, a: BackendDescriptor, b: BackendDescriptor, c: BackendDescriptor,
                   conv: BackendDescriptor, *, alpha: float = 1.0, beta: float = 0.0,
                   double: bool = False) -> BackendDescriptor:
    """A finalized convolution operation.

    Parameters
    ----------
    op : {"forward", "backward_data", "backward_filter"}
    a, b, c : BackendDescriptor
        Tensors in :data:`CONV_OPS` order (forward ``x, w, y``; backward_data ``w, dy, dx``;
        backward_filter ``x, dy, dw``).
    conv : BackendDescriptor
        From :func:`convolution`.
    alpha, beta : float
        Baked into the operation (``c = alpha * op(a, b) + beta * c``).
    double : bool
        The compute type is double (alpha/beta are passed as double then, float otherwise).
    """
    if op not in CONV_OPS:
        raise ValueError(f"op must be one of {sorted(CONV_OPS)}, not {op!r}")
    kind, aa, ab, ac, aconv, aalpha, abeta = CONV_OPS[op]
    T = _lib
    st = T.CUDNN_TYPE_DOUBLE if double else T.CUDNN_TYPE_FLOAT
    return make(kind,
                 (aa, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, a),
                 (ab, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, b),
                 (ac, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, c),
                 (aconv, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, conv),
                 (aalpha, st, float(alpha)),
                 (abeta, st, float(beta)))


#: Pointwise mode name -> ``cudnnPointwiseMode_t``: every mode of the header by its name less
#: the prefix, lower case (``"mul"``, ``"cmp_ge"``, ``"gen_index"``, ``"binary_select"``,
#: ``"relu_bwd"``...), plus the short names of the forward activations (``"relu"``, ``"tanh"``,
#: ``"sigmoid"``, ``"elu"``, ``"gelu"``, ``"softplus"``, ``"swish"``, ``"gelu_approx_tanh"``)
#: and ``"select"`` for ``"binary_select"``.
POINTWISE_MODES = {k[len("CUDNN_POINTWISE_"):].lower(): v
                   for k, v in vars(_lib).items()
                   if k.startswith("CUDNN_POINTWISE_") and isinstance(v, int)}
POINTWISE_MODES.update({k[:-len("_fwd")]: v for k, v in list(POINTWISE_MODES.items())
                        if k.endswith("_fwd")})
POINTWISE_MODES["select"] = POINTWISE_MODES["binary_select"]
_POINTWISE_MODES = POINTWISE_MODES      # the name the convolution graphs were built with
#: Modes that read a third operand (``t``, the condition of a select).
TERNARY_MODES = frozenset({"binary_select", "select"})
#: Modes of an activation's backward: ``dx = f'(x) * dy`` (see :func:`pointwise_backward_operation`).
BACKWARD_MODES = frozenset(k for k in POINTWISE_MODES if k.endswith("_bwd"))

# Optional parameters of a pointwise descriptor: keyword -> (attribute, attribute type).
_PW_PARAMS = {
    "axis": (_lib.CUDNN_ATTR_POINTWISE_AXIS, _lib.CUDNN_TYPE_INT64),
    "relu_lower_clip": (_lib.CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, _lib.CUDNN_TYPE_DOUBLE),
    "relu_upper_clip": (_lib.CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, _lib.CUDNN_TYPE_DOUBLE),
    "relu_lower_clip_slope": (_lib.CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE,
                              _lib.CUDNN_TYPE_DOUBLE),
    "elu_alpha": (_lib.CUDNN_ATTR_POINTWISE_ELU_ALPHA, _lib.CUDNN_TYPE_DOUBLE),
    "softplus_beta": (_lib.CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA, _lib.CUDNN_TYPE_DOUBLE),
    "swish_beta": (_lib.CUDNN_ATTR_POINTWISE_SWISH_BETA, _lib.CUDNN_TYPE_DOUBLE),
}


def pointwise(mode: str, *, compute=np.float32, axis: int | None = None,
              **params) -> BackendDescriptor:
    """A finalized pointwise descriptor of ``mode``, computed in ``compute`` precision.

    Parameters
    ----------
    mode : str
        A name of :data:`POINTWISE_MODES`: arithmetic (``"add"``, ``"sub"``, ``"mul"``,
        ``"div"``, ``"exp"``, ``"log"``...), comparisons (``"cmp_lt"``, ``"cmp_ge"``...,
        giving booleans), logic (``"logical_and"``...), ``"gen_index"`` (each element's index
        along ``axis``), ``"binary_select"`` (``y = t ? x : b``), activations and their
        backward modes (``"relu"``, ``"relu_bwd"``...).
    compute : dtype-like
        The math precision (float32; int32 for index arithmetic, bool for logic).
    axis : int, optional
        The dimension ``"gen_index"`` counts along (required for it, refused for others).
    **params : float
        ``relu_lower_clip``, ``relu_upper_clip``, ``relu_lower_clip_slope``, ``elu_alpha``,
        ``softplus_beta``, ``swish_beta``: the activation's parameters.
    """
    if mode not in POINTWISE_MODES:
        raise ValueError(f"pointwise mode must be one of {sorted(POINTWISE_MODES)}, "
                         f"not {mode!r}")
    if (axis is None) == (POINTWISE_MODES[mode] == _lib.CUDNN_POINTWISE_GEN_INDEX):
        raise ValueError("axis is required by the gen_index mode and taken by no other "
                         f"(mode {mode!r}, axis {axis!r})")
    T = _lib
    attrs = [(T.CUDNN_ATTR_POINTWISE_MODE, T.CUDNN_TYPE_POINTWISE_MODE, POINTWISE_MODES[mode]),
             (T.CUDNN_ATTR_POINTWISE_MATH_PREC, T.CUDNN_TYPE_DATA_TYPE, data_type(compute))]
    if axis is not None:
        params["axis"] = int(axis)
    for name, value in params.items():
        if name not in _PW_PARAMS:
            raise TypeError(f"pointwise() got an unknown parameter {name!r}; known: "
                            f"{sorted(_PW_PARAMS)}")
        attr, atype = _PW_PARAMS[name]
        attrs.append((attr, atype, int(value) if atype == T.CUDNN_TYPE_INT64 else float(value)))
    return make(T.CUDNN_BACKEND_POINTWISE_DESCRIPTOR, *attrs)


def pointwise_operation(pw: BackendDescriptor, x: BackendDescriptor, y: BackendDescriptor,
                        b: BackendDescriptor | None = None, *, t: BackendDescriptor | None = None,
                        alpha1: float = 1.0, alpha2: float = 1.0) -> BackendDescriptor:
    """A finalized pointwise operation ``y = pw(alpha1 * x[, alpha2 * b][, t])``.

    ``b`` for the binary modes and ``t`` (the condition) for the ternary select, each
    broadcast where its dimensions are 1; unary modes take ``x`` alone.
    """
    T = _lib
    attrs = [(T.CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, pw),
             (T.CUDNN_ATTR_OPERATION_POINTWISE_XDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, x),
             (T.CUDNN_ATTR_OPERATION_POINTWISE_YDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, y),
             (T.CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, T.CUDNN_TYPE_FLOAT, float(alpha1))]
    if b is not None:
        attrs += [(T.CUDNN_ATTR_OPERATION_POINTWISE_BDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, b),
                  (T.CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, T.CUDNN_TYPE_FLOAT, float(alpha2))]
    if t is not None:
        if b is None:
            raise ValueError("a ternary pointwise operation needs b as well as t")
        attrs.append((T.CUDNN_ATTR_OPERATION_POINTWISE_TDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, t))
    return make(T.CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, *attrs)


def pointwise_backward_operation(pw: BackendDescriptor, x: BackendDescriptor,
                                 dy: BackendDescriptor, dx: BackendDescriptor, *,
                                 alpha1: float = 1.0, alpha2: float = 1.0) -> BackendDescriptor:
    """A finalized activation backward ``dx = f'(x) * dy`` (``pw`` of a ``"*_bwd"`` mode)."""
    T = _lib
    return make(T.CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
                (T.CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, T.CUDNN_TYPE_BACKEND_DESCRIPTOR,
                 pw),
                (T.CUDNN_ATTR_OPERATION_POINTWISE_XDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, x),
                (T.CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, dy),
                (T.CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, dx),
                (T.CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, T.CUDNN_TYPE_FLOAT, float(alpha1)),
                (T.CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, T.CUDNN_TYPE_FLOAT, float(alpha2)))


def matmul(*, compute=np.float32, padding: float | None = None) -> BackendDescriptor:
    """A finalized matmul descriptor accumulating in ``compute`` precision; ``padding`` is the
    value read for rows or columns beyond an override (see :func:`matmul_operation`)."""
    T = _lib
    attrs = [(T.CUDNN_ATTR_MATMUL_COMP_TYPE, T.CUDNN_TYPE_DATA_TYPE, data_type(compute))]
    if padding is not None:
        attrs.append((T.CUDNN_ATTR_MATMUL_PADDING_VALUE, T.CUDNN_TYPE_DOUBLE, float(padding)))
    return make(T.CUDNN_BACKEND_MATMUL_DESCRIPTOR, *attrs)


def matmul_operation(a: BackendDescriptor, b: BackendDescriptor, c: BackendDescriptor,
                     desc: BackendDescriptor, *, m_override: BackendDescriptor | None = None,
                     n_override: BackendDescriptor | None = None,
                     k_override: BackendDescriptor | None = None) -> BackendDescriptor:
    """A finalized batched matmul ``c[..., m, n] = a[..., m, k] @ b[..., k, n]``.

    The leading (batch) dimensions broadcast: a dimension of ``a`` or ``b`` that divides
    ``c``'s is shared by consecutive groups of ``c``'s entries (grouped-query attention's
    heads).  ``m_override``/``n_override``/``k_override`` are int32 tensors of one value per
    batch (``[b, 1, 1, 1]``): the rows, columns or inner extent actually used per batch
    entry (sequence lengths).
    """
    T = _lib
    attrs = [(T.CUDNN_ATTR_OPERATION_MATMUL_ADESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, a),
             (T.CUDNN_ATTR_OPERATION_MATMUL_BDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, b),
             (T.CUDNN_ATTR_OPERATION_MATMUL_CDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, c),
             (T.CUDNN_ATTR_OPERATION_MATMUL_DESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, desc)]
    for attr, t in ((T.CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m_override),
                    (T.CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n_override),
                    (T.CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k_override)):
        if t is not None:
            attrs.append((attr, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, t))
    return make(T.CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, *attrs)


#: Reduction operator name -> ``cudnnReduceTensorOp_t`` (``"add"``, ``"max"``, ``"amax"``...).
REDUCTION_OPS = {k[len("CUDNN_REDUCE_TENSOR_"):].lower(): v for k, v in vars(_lib).items()
                 if k.startswith("CUDNN_REDUCE_TENSOR_") and isinstance(v, int)
                 and not k.endswith(("_INDICES", "_INDICES_32BIT"))}


def reduction(op: str, *, compute=np.float32,
              deterministic: bool | None = None) -> BackendDescriptor:
    """A finalized reduction descriptor: ``op`` one of :data:`REDUCTION_OPS`, accumulated in
    ``compute``; ``deterministic`` asks for a fixed summation order (cuDNN >= 9.11)."""
    if op not in REDUCTION_OPS:
        raise ValueError(f"reduction op must be one of {sorted(REDUCTION_OPS)}, not {op!r}")
    T = _lib
    attrs = [(T.CUDNN_ATTR_REDUCTION_OPERATOR, T.CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
              REDUCTION_OPS[op]),
             (T.CUDNN_ATTR_REDUCTION_COMP_TYPE, T.CUDNN_TYPE_DATA_TYPE, data_type(compute))]
    if deterministic is not None:
        attrs.append((T.CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, T.CUDNN_TYPE_BOOLEAN,
                      bool(deterministic)))
    return make(T.CUDNN_BACKEND_REDUCTION_DESCRIPTOR, *attrs)


def reduction_operation(desc: BackendDescriptor, x: BackendDescriptor,
                        y: BackendDescriptor) -> BackendDescriptor:
    """A finalized reduction of ``x`` into ``y``: every dimension where ``y`` has extent 1 and
    ``x`` more is reduced (a dimension of ``y`` dividing ``x``'s reduces groups of
    consecutive entries)."""
    T = _lib
    return make(T.CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
                (T.CUDNN_ATTR_OPERATION_REDUCTION_DESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, desc),
                (T.CUDNN_ATTR_OPERATION_REDUCTION_XDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, x),
                (T.CUDNN_ATTR_OPERATION_REDUCTION_YDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, y))


#: RNG distribution name -> ``cudnnRngDistribution_t``.
RNG_DISTRIBUTIONS = {"bernoulli": _lib.CUDNN_RNG_DISTRIBUTION_BERNOULLI,
                     "uniform": _lib.CUDNN_RNG_DISTRIBUTION_UNIFORM,
                     "normal": _lib.CUDNN_RNG_DISTRIBUTION_NORMAL}


def rng(distribution: str = "bernoulli", *, probability: float | None = None,
        mean: float | None = None, std: float | None = None, minimum: float | None = None,
        maximum: float | None = None) -> BackendDescriptor:
    """A finalized random-number descriptor: ``"bernoulli"`` (ones with ``probability``),
    ``"uniform"`` (``minimum``..``maximum``) or ``"normal"`` (``mean``, ``std``)."""
    if distribution not in RNG_DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {sorted(RNG_DISTRIBUTIONS)}, "
                         f"not {distribution!r}")
    T = _lib
    want = {"bernoulli": {"probability": (T.CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY,
                                          probability)},
            "uniform": {"minimum": (T.CUDNN_ATTR_RNG_UNIFORM_DIST_MINIMUM, minimum),
                        "maximum": (T.CUDNN_ATTR_RNG_UNIFORM_DIST_MAXIMUM, maximum)},
            "normal": {"mean": (T.CUDNN_ATTR_RNG_NORMAL_DIST_MEAN, mean),
                       "std": (T.CUDNN_ATTR_RNG_NORMAL_DIST_STANDARD_DEVIATION, std)}}
    given = {k for k, v in (("probability", probability), ("mean", mean), ("std", std),
                            ("minimum", minimum), ("maximum", maximum)) if v is not None}
    if given - set(want[distribution]):
        raise TypeError(f"the {distribution} distribution takes {sorted(want[distribution])}, "
                        f"not {sorted(given - set(want[distribution]))}")
    if probability is not None and not 0.0 <= probability <= 1.0:
        raise ValueError(f"probability must be in [0, 1], got {probability}")
    attrs = [(T.CUDNN_ATTR_RNG_DISTRIBUTION, T.CUDNN_TYPE_RNG_DISTRIBUTION,
              RNG_DISTRIBUTIONS[distribution])]
    attrs += [(attr, T.CUDNN_TYPE_DOUBLE, float(v)) for attr, v in want[distribution].values()
              if v is not None]
    return make(T.CUDNN_BACKEND_RNG_DESCRIPTOR, *attrs)


def rng_operation(desc: BackendDescriptor, y: BackendDescriptor, *, seed,
                  offset: BackendDescriptor | None = None) -> BackendDescriptor:
    """A finalized random-number operation filling ``y`` (Philox).

    ``seed`` is an int baked into the operation, or an int64 tensor (one element, on the
    device or by value) read at every execution, with ``offset`` (the same kind of tensor)
    the position in the stream: the same seed and offset give the same numbers.
    """
    T = _lib
    attrs = [(T.CUDNN_ATTR_OPERATION_RNG_DESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, desc),
             (T.CUDNN_ATTR_OPERATION_RNG_YDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, y)]
    if isinstance(seed, BackendDescriptor):
        if offset is None:
            raise ValueError("a seed tensor needs an offset tensor")
        attrs += [(T.CUDNN_ATTR_OPERATION_RNG_SEED, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, seed),
                  (T.CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR,
                   offset)]
    else:
        if offset is not None:
            raise ValueError("an int seed takes no offset tensor")
        attrs.append((T.CUDNN_ATTR_OPERATION_RNG_SEED, T.CUDNN_TYPE_INT64, int(seed)))
    return make(T.CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR, *attrs)


def reshape_operation(x: BackendDescriptor, y: BackendDescriptor) -> BackendDescriptor:
    """A finalized reshape: ``y`` views ``x``'s elements with other dimensions and strides
    (a transpose, when both are virtual: the consumer reads it transposed)."""
    T = _lib
    return make(T.CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR,
                (T.CUDNN_ATTR_OPERATION_RESHAPE_XDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, x),
                (T.CUDNN_ATTR_OPERATION_RESHAPE_YDESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, y))


def operation_graph(ops, handle=None) -> BackendDescriptor:
    """A finalized operation graph of ``ops`` (operations sharing tensors by unique id).

    ``handle`` (a cuDNN handle, raw or :class:`~cudalibs.runtime.handles.Handle`) ties the
    graph to its device; cuDNN 9 also finalizes a graph without one (host-only work).
    """
    T = _lib
    d = make(T.CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
              (T.CUDNN_ATTR_OPERATIONGRAPH_OPS, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, list(ops)),
              finalize=False)
    try:
        if handle is not None:
            try:
                d.set(T.CUDNN_ATTR_OPERATIONGRAPH_HANDLE, T.CUDNN_TYPE_HANDLE, handle)
            except CudnnError:
                # The attribute is deprecated in cuDNN 9; a library that refuses it finalizes
                # the graph without a handle (the execution plan carries one).
                last_error_string()
        d.finalize()
    except BaseException:
        d.close()
        raise
    return d


