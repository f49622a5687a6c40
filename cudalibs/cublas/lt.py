"""cuBLASLt matmul plans: layouts, descriptors, heuristics, autotuning and fused epilogues.

A :class:`Matmul` is a stateful plan in the style of nvmath-python: **plan** (built from
shapes/dtypes/strides or from example arrays: matrix layouts, the matmul descriptor, a
preference with the workspace limit, and the heuristic's top candidates), **autotune**
(optional: time the candidates on fresh inputs with the L2 cache flushed), **execute** (as
often as wanted: writes only the pointers that changed and makes one ``cublasLtMatmul``
call), **free**.

Row-major at the surface, as everywhere in cudalibs: the row-major ``D = A @ B`` (M×N) is the
column-major ``Dᵀ = Bᵀ Aᵀ`` (N×M), so cuBLASLt's matrix "A" is our ``b``, its "B" our ``a``,
and its D has N rows.  cuBLASLt's bias vector has one entry per *row of its D*, which is one
entry per **column of our output** (length N, broadcast over the M rows), the convention of a
linear layer (``x @ w.T + bias``).  The epilogue's auxiliary matrix (GELU input, ReLU mask) is
column-major N×M with leading dimension ``aux_ld``, i.e. a row-major ``(M, aux_ld)`` array
whose first N columns are used.

The smaller pieces, :class:`MatrixLayout`, :class:`MatmulDesc` and :class:`MatmulPreference`,
are public too: they need no GPU, and their attributes can be set and read back by name.
"""

from __future__ import annotations

import ctypes
from ctypes import c_size_t, c_void_p
import statistics
import threading

import numpy as np

from .. import dtypes as _dtypes
from .._ffi import OwnedHandle
from ..driver import _lib as _drv
from ..driver.array import (DeviceArray, asarray, byte_extent, empty, spans_overlap,
                            to_device)
from ..driver.device import as_device
from ..driver.stream import Event, as_stream
from ..errors import ClosedError
from . import _lib
from ._base import raise_for
from .gemm import _OP_N, _OP_T, _combo, _elem_strides, _operand, _scalar
from .handle import WORKSPACE_BYTES, lt_handle, workspace

_WS_BYTES = c_size_t(WORKSPACE_BYTES)

__all__ = ["MatrixLayout", "MatmulDesc", "MatmulPreference", "Matmul", "matmul", "EPILOGUES",
           "plan_cache", "clear_plan_cache"]


# -- attribute plumbing ----------------------------------------------------------------------
def _names(prefix: str, types: dict) -> dict:
    """``{"rows": (enum value, ctype), ...}`` from the vendor constants with ``prefix``."""
    out = {}
    for name, value in vars(_lib).items():
        if name.startswith(prefix) and isinstance(value, int) and value in types:
            out[name[len(prefix):].lower()] = (value, types[value])
    return out


_LAYOUT_ATTRS = _names("CUBLASLT_MATRIX_LAYOUT_", _lib.LAYOUT_ATTRIBUTE_TYPES)
_DESC_ATTRS = _names("CUBLASLT_MATMUL_DESC_", _lib.MATMUL_DESC_ATTRIBUTE_TYPES)
_PREF_ATTRS = _names("CUBLASLT_MATMUL_PREF_", _lib.PREFERENCE_ATTRIBUTE_TYPES)


def _resolve(attr, table: dict, what: str):
    if isinstance(attr, str):
        try:
            return table[attr.lower()]
        except KeyError:
            raise ValueError(f"unknown {what} attribute {attr!r}; known: "
                             f"{', '.join(sorted(table))}") from None
    for value, ctype in table.values():
        if value == attr:
            return value, ctype
    raise ValueError(f"unknown {what} attribute {attr!r}")


class _Descriptor(OwnedHandle):
    """Shared lifetime and attribute access of the three cuBLASLt descriptor kinds."""

    __slots__ = ()
    _what = "descriptor"
    _attrs: dict = {}
    _set_name = _get_name = ""

    def set(self, attr, value) -> None:
        """Set an attribute, by vendor enum value or lower-case short name (``"ld"``)."""
        code, ctype = _resolve(attr, self._attrs, self._what)
        if ctype is ctypes.c_void_p:
            buf = ctypes.c_void_p(int(value) if value else None)
        elif ctype is ctypes.c_float:
            buf = ctype(float(value))
        else:
            buf = ctype(int(value))
        st = getattr(self._lib(), self._set_name)(self.raw, code, ctypes.byref(buf),
                                                  ctypes.sizeof(buf))
        if st:
            raise_for(st, self._set_name, f"attribute {attr!r} = {value!r}")

    def get(self, attr):
        """Read an attribute back (an int, a float, or a pointer as an int)."""
        code, ctype = _resolve(attr, self._attrs, self._what)
        buf = ctype()
        written = ctypes.c_size_t()
        st = getattr(self._lib(), self._get_name)(self.raw, code, ctypes.byref(buf),
                                                  ctypes.sizeof(buf), ctypes.byref(written))
        if st:
            raise_for(st, self._get_name, f"attribute {attr!r}")
        return buf.value if buf.value is not None else 0

    @staticmethod
    def _lib():
        return _lib.get_lt()


class MatrixLayout(_Descriptor):
    """A ``cublasLtMatrixLayout_t``: element type, rows, columns, leading dimension, order,
    strided batch.  Creating one needs no GPU.

    Parameters
    ----------
    dtype : dtype-like
    rows, cols : int
    ld : int, optional
        Leading dimension in elements; default ``rows`` for column order, ``cols`` for row
        order.
    order : {"col", "row"}, default "col"
        ``CUBLASLT_MATRIX_LAYOUT_ORDER``.
    batch : int, default 1
        ``CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT``.
    batch_stride : int, default 0
        Elements between matrices of a batch (0 broadcasts one matrix).
    """

    __slots__ = ("dtype", "rows", "cols", "ld", "order", "batch", "batch_stride")
    _what = "matrix layout"
    _attrs = _LAYOUT_ATTRS
    _set_name = "cublasLtMatrixLayoutSetAttribute"
    _get_name = "cublasLtMatrixLayoutGetAttribute"

    def __init__(self, dtype, rows: int, cols: int, ld: int | None = None, *,
                 order: str = "col", batch: int = 1, batch_stride: int = 0):
        dt = _dtypes.lookup(dtype)
        if dt.cuda is None:
            raise TypeError(f"cuBLASLt has no matrix type for {dt.name}")
        if order not in ("col", "row"):
            raise ValueError(f"order must be 'col' or 'row', not {order!r}")
        rows, cols, batch = int(rows), int(cols), int(batch)
        if rows < 0 or cols < 0 or batch < 1:
            raise ValueError(f"bad layout: rows={rows}, cols={cols}, batch={batch}")
        if ld is None:
            ld = max(rows if order == "col" else cols, 1)
        ld = int(ld)
        if ld < max(rows if order == "col" else cols, 1):
            raise ValueError(f"ld={ld} is smaller than a {'column' if order == 'col' else 'row'}")
        L = _lib.get_lt()
        raw = _lib.cublasLtMatrixLayout_t()
        st = L.cublasLtMatrixLayoutCreate(ctypes.byref(raw), dt.cuda, rows, cols, ld)
        if st:
            raise_for(st, "cublasLtMatrixLayoutCreate")
        self._own(raw, L.cublasLtMatrixLayoutDestroy)
        self.dtype, self.rows, self.cols, self.ld = dt.numpy, rows, cols, ld
        self.order, self.batch, self.batch_stride = order, batch, int(batch_stride)
        try:
            if order == "row":
                self.set("order", _lib.CUBLASLT_ORDER_ROW)
            if batch != 1:
                self.set("batch_count", batch)
            if batch_stride:
                self.set("strided_batch_offset", batch_stride)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        batch = f", batch={self.batch} stride={self.batch_stride}" if self.batch != 1 else ""
        return (f"<MatrixLayout{state} {self.dtype.name} {self.rows}x{self.cols} ld={self.ld} "
                f"order={self.order}{batch}>")


class MatmulDesc(_Descriptor):
    """A ``cublasLtMatmulDesc_t``: compute type, scale type and the per-operation attributes
    (transposes, epilogue, bias/aux/scale pointers).  Creating one needs no GPU.

    Parameters
    ----------
    compute_type : int
        A ``cublasComputeType_t`` (:data:`cudalibs.dtypes.COMPUTE`).
    scale_type : int
        The ``cudaDataType`` of alpha and beta.
    """

    __slots__ = ("compute_type", "scale_type")
    _what = "matmul descriptor"
    _attrs = _DESC_ATTRS
    _set_name = "cublasLtMatmulDescSetAttribute"
    _get_name = "cublasLtMatmulDescGetAttribute"

    def __init__(self, compute_type: int, scale_type: int):
        L = _lib.get_lt()
        raw = _lib.cublasLtMatmulDesc_t()
        st = L.cublasLtMatmulDescCreate(ctypes.byref(raw), int(compute_type), int(scale_type))
        if st:
            raise_for(st, "cublasLtMatmulDescCreate")
        self._own(raw, L.cublasLtMatmulDescDestroy)
        self.compute_type, self.scale_type = int(compute_type), int(scale_type)

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return (f"<MatmulDesc{state} compute={self.compute_type} scale={self.scale_type}>")


class MatmulPreference(_Descriptor):
    """A ``cublasLtMatmulPreference_t`` for the heuristic: workspace limit, alignments.
    Creating one needs no GPU.

    Parameters
    ----------
    max_workspace : int, default :data:`~cudalibs.cublas.handle.WORKSPACE_BYTES`
    """

    __slots__ = ()
    _what = "matmul preference"
    _attrs = _PREF_ATTRS
    _set_name = "cublasLtMatmulPreferenceSetAttribute"
    _get_name = "cublasLtMatmulPreferenceGetAttribute"

    def __init__(self, max_workspace: int = WORKSPACE_BYTES):
        L = _lib.get_lt()
        raw = _lib.cublasLtMatmulPreference_t()
        st = L.cublasLtMatmulPreferenceCreate(ctypes.byref(raw))
        if st:
            raise_for(st, "cublasLtMatmulPreferenceCreate")
        self._own(raw, L.cublasLtMatmulPreferenceDestroy)
        try:
            self.set("max_workspace_bytes", int(max_workspace))
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        if self.closed:
            return "<MatmulPreference closed>"
        return f"<MatmulPreference max_workspace={self.get('max_workspace_bytes')}>"


# -- epilogues -------------------------------------------------------------------------------
class _Epilogue:
    __slots__ = ("name", "value", "bias", "aux", "aux_kind")

    def __init__(self, name, value, bias=None, aux=None, aux_kind=None):
        self.name = name
        self.value = value
        self.bias = bias          # None, "in" (added) or "out" (bias gradient written)
        self.aux = aux            # None, "out" (forward) or "in" (backward)
        self.aux_kind = aux_kind  # "gelu" (matrix in the output type) or "relu" (bit mask)


def _ep(name, value, **kw):
    return name, _Epilogue(name, value, **kw)


#: Epilogue name -> its definition.  Names are underscore-joined parts in any order
#: (``"bias_gelu"`` == ``"gelu_bias"`` == ``"bias+gelu"``).
EPILOGUES = dict([
    _ep("default", _lib.CUBLASLT_EPILOGUE_DEFAULT),
    _ep("bias", _lib.CUBLASLT_EPILOGUE_BIAS, bias="in"),
    _ep("relu", _lib.CUBLASLT_EPILOGUE_RELU),
    _ep("relu_bias", _lib.CUBLASLT_EPILOGUE_RELU_BIAS, bias="in"),
    _ep("gelu", _lib.CUBLASLT_EPILOGUE_GELU),
    _ep("gelu_bias", _lib.CUBLASLT_EPILOGUE_GELU_BIAS, bias="in"),
    _ep("relu_aux", _lib.CUBLASLT_EPILOGUE_RELU_AUX, aux="out", aux_kind="relu"),
    _ep("relu_aux_bias", _lib.CUBLASLT_EPILOGUE_RELU_AUX_BIAS, bias="in", aux="out",
        aux_kind="relu"),
    _ep("gelu_aux", _lib.CUBLASLT_EPILOGUE_GELU_AUX, aux="out", aux_kind="gelu"),
    _ep("gelu_aux_bias", _lib.CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias="in", aux="out",
        aux_kind="gelu"),
    _ep("drelu", _lib.CUBLASLT_EPILOGUE_DRELU, aux="in", aux_kind="relu"),
    _ep("drelu_bgrad", _lib.CUBLASLT_EPILOGUE_DRELU_BGRAD, bias="out", aux="in",
        aux_kind="relu"),
    _ep("dgelu", _lib.CUBLASLT_EPILOGUE_DGELU, aux="in", aux_kind="gelu"),
    _ep("dgelu_bgrad", _lib.CUBLASLT_EPILOGUE_DGELU_BGRAD, bias="out", aux="in",
        aux_kind="gelu"),
])
_BY_PARTS = {frozenset(name.split("_")): ep for name, ep in EPILOGUES.items()}


def _epilogue(name) -> _Epilogue:
    if name is None:
        return EPILOGUES["default"]
    if not isinstance(name, str):
        raise TypeError(f"epilogue must be a name such as 'bias_gelu', not {name!r}")
    parts = frozenset(p for p in name.lower().replace("+", "_").replace("-", "_").split("_") if p)
    ep = _BY_PARTS.get(parts)
    if ep is None:
        raise ValueError(f"unknown epilogue {name!r}; known: {', '.join(EPILOGUES)}")
    return ep


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


# -- operand specs ---------------------------------------------------------------------------
def _spec(x, what):
    """``(shape, byte strides, dtype, array or None)`` from an array-like or a tuple
    ``(shape, dtype)`` / ``(shape, dtype, byte strides)``."""
    if isinstance(x, tuple) and len(x) in (2, 3) and not hasattr(x, "shape"):
        shape = tuple(int(n) for n in x[0])
        dt = _dtypes.lookup(x[1]).numpy
        if len(x) == 3:
            strides = tuple(int(s) for s in x[2])
        else:
            strides, acc = [], dt.itemsize
            for n in reversed(shape):
                strides.append(acc)
                acc *= max(n, 1)
            strides = tuple(reversed(strides))
        return shape, strides, dt, None
    if isinstance(x, np.ndarray):
        raise TypeError(f"{what} is a host numpy array; pass a device array or a "
                        "(shape, dtype[, strides]) tuple")
    arr = x if type(x) is DeviceArray else asarray(x)
    return arr._shape, arr._strides, arr._dtype, arr


def _split3(shape, strides, what):
    if len(shape) == 2:
        return 1, 0, shape, strides
    if len(shape) == 3:
        return shape[0], (strides[0] if shape[0] > 1 else 0), shape[1:], strides[1:]
    raise ValueError(f"{what} must be 2-D or 3-D (batch, rows, cols), got shape {shape}")


def _alignment(ptr: int) -> int:
    return min(ptr & -ptr, 256) if ptr else 256


_FP8 = tuple(t for t in (_dtypes.float8_e4m3fn, _dtypes.float8_e5m2) if t is not None)


# -- the plan --------------------------------------------------------------------------------
class Matmul:
    """A cuBLASLt matmul plan: ``out = epilogue(alpha * a @ b + beta * c [+ bias])``.

    Parameters
    ----------
    a, b : DeviceArray, CUDA array-like, or ``(shape, dtype[, strides])``
        Examples or descriptions of the operands: ``a`` is ``(M, K)`` or ``(batch, M, K)``,
        ``b`` is ``(K, N)`` or ``(batch, K, N)`` (a 2-D operand is broadcast over the batch).
        Each matrix needs a unit stride in one dimension.  Strides are in bytes.
    c : same kinds, optional
        The addend for ``beta != 0``; must have the layout of ``out``.
    out : same kinds, optional
        Describes the output; default a new C-contiguous array.
    out_dtype : dtype-like, optional
        Output type where there is a choice (float16/bfloat16 inputs with float32 output;
        fp8 inputs: bfloat16 (default), float16 or float32).
    compute : str, optional
        As for :func:`cudalibs.cublas.gemm` (``"tf32"``, ``"f16"``, ...).
    epilogue : str, optional
        One of :data:`EPILOGUES`: ``"bias"``, ``"relu"``, ``"gelu"``, ``"relu_bias"``,
        ``"gelu_bias"``, the ``*_aux`` forms that also write the epilogue's input (GELU) or
        mask (ReLU) for the backward pass, and the backward ``"dgelu"``, ``"drelu"``,
        ``"dgelu_bgrad"``, ``"drelu_bgrad"``.  The bias has one entry per output column (N),
        of the output dtype.
    alpha, beta : scalar, default 1 and 0
    aux_ld : int, optional
        Leading dimension of the auxiliary matrix, in elements (bits for the ReLU mask):
        default N rounded up to 8 (GELU) or 128 (ReLU mask), as cuBLASLt requires.
    fast_accum : bool, default False
        fp8 only: ``CUBLASLT_MATMUL_DESC_FAST_ACCUM``.
    device : Device or int, optional
        Default: the examples' device, else the current one.
    min_alignment : int, optional
        Pointer alignment (bytes) the plan may assume; default the examples' pointer
        alignment, or 256 (cuBLASLt's own default) when built from descriptions.
        :meth:`execute` checks every pointer against it.
    max_candidates : int, default 8
        How many heuristic results to keep (top-k).
    workspace_bytes : int, default 32 MiB

    Notes
    -----
    fp8 (``float8_e4m3fn`` / ``float8_e5m2`` inputs, not both e5m2) needs compute capability
    8.9 or newer and the layout cuBLASLt's fp8 kernels take: ``a`` row-major (unit stride in
    its last dimension) and ``b`` column-major, i.e. ``w.T`` of a row-major ``(N, K)`` weight,
    with ``K`` a multiple of 16.  Per-tensor scales are float32 device scalars passed to
    :meth:`execute` (``a_scale``, ``b_scale``).
    """

    __slots__ = ("_device", "_desc", "_layouts", "_pref", "_candidates", "_choice", "_algo",
                 "_alpha", "_beta", "_alpha_p", "_beta_p", "_specs", "_out_shape", "_out_dtype",
                 "_epi", "_bias_len",
                 "_bias_dtype", "_aux_shape", "_aux_dtype", "_aux_ld", "_align", "_set_ptrs",
                 "_fp8", "_batch", "_mnk", "_tuned", "_closed", "_exts", "__weakref__")

    def __init__(self, a, b, c=None, *, out=None, out_dtype=None, compute=None, epilogue=None,
                 alpha=1, beta=0, aux_ld=None, fast_accum=False, device=None,
                 min_alignment=None, max_candidates: int = 8,
                 workspace_bytes: int = WORKSPACE_BYTES):
        self._closed = True          # until fully built
        self._layouts = ()
        self._desc = self._pref = None
        sa, sb = _spec(a, "a"), _spec(b, "b")
        sc = None if c is None else _spec(c, "c")
        so = None if out is None else _spec(out, "out")
        examples = [s[3] for s in (sa, sb, sc, so) if s is not None and s[3] is not None]
        if device is None and examples:
            dev = examples[0]._device
        else:
            dev = as_device(device)
        for x in examples:
            if x._device is not dev:
                raise ValueError(f"operands must all be on device {dev.ordinal}; one is on "
                                 f"{x._device.ordinal}")
        self._device = dev
        ab, bb = sa[2], sb[2]
        fp8 = ab in _FP8 or bb in _FP8
        epi = _epilogue(epilogue)
        if fp8:
            if ab not in _FP8 or bb not in _FP8:
                raise ValueError(f"fp8 matmul needs both inputs in fp8, got {ab} and {bb}")
            if ab == bb == _dtypes.float8_e5m2:
                raise ValueError("cuBLASLt has no e5m2 x e5m2 matmul; use e4m3 for one input")
            cc = dev.compute_capability
            if cc < (8, 9):
                raise ValueError(f"fp8 matmul needs compute capability >= 8.9 (Ada/Hopper); "
                                 f"device {dev.ordinal} is {cc[0]}.{cc[1]}")
            od = np.dtype(_dtypes.bfloat16) if out_dtype is None else _dtypes.lookup(
                out_dtype).numpy
            if so is not None:
                od = so[2]
            if od not in (_dtypes.bfloat16, np.dtype(np.float16), np.dtype(np.float32)):
                raise ValueError(f"fp8 matmul writes bfloat16, float16 or float32, not {od}")
            if compute not in (None, "f32"):
                raise ValueError("fp8 matmul computes in fp32 (compute=None)")
            if epi.bias is not None and od == np.float32:
                raise ValueError("an fp8 matmul with a bias needs a bfloat16 or float16 output")
            compute_type, scale_np = _dtypes.COMPUTE["COMPUTE_32F"], np.dtype(np.float32)
            tf32 = False
        else:
            if ab != bb:
                raise ValueError(f"a is {ab} but b is {bb}; cuBLASLt needs one input type "
                                 "(or two fp8 types)")
            if ab.kind not in "f" and ab != _dtypes.bfloat16:
                raise ValueError(f"cudalibs' cuBLASLt plans take float64, float32, float16, "
                                 f"bfloat16 or fp8 inputs, not {ab}; use cublas.gemm")
            want = so[2] if so is not None else (None if out_dtype is None
                                                 else _dtypes.lookup(out_dtype).numpy)
            combo = _combo(ab, want, compute)
            od, compute_type, scale_np = combo.c, combo.compute, combo.scale
            tf32 = combo.tf32
        del tf32
        # Shapes and batching.
        ba, bsa, ashape, astr = _split3(sa[0], sa[1], "a")
        bbt, bsb, bshape, bstr = _split3(sb[0], sb[1], "b")
        if ba != bbt and 1 not in (ba, bbt):
            raise ValueError(f"batch sizes {ba} and {bbt} do not broadcast")
        batch = max(ba, bbt)
        (M, K), (K2, N) = ashape, bshape
        if K != K2:
            raise ValueError(f"inner dimensions differ: a is {sa[0]}, b is {sb[0]}")
        if min(M, N, K) < 1:
            raise ValueError(f"cuBLASLt needs non-empty matrices, got M={M}, N={N}, K={K}")
        out_shape = (M, N) if len(sa[0]) == 2 and len(sb[0]) == 2 else (batch, M, N)
        ia, io = ab.itemsize, od.itemsize
        ea = _elem_strides(astr, ia)
        eb = _elem_strides(bstr, bb.itemsize)
        # cuBLASLt's A is our b (N×K after op), its B is our a (K×M after op).
        opa = None if ea is None else _operand(M, K, ea[0], ea[1], prefer_t=False)
        opb = None if eb is None else _operand(K, N, eb[0], eb[1], prefer_t=fp8)
        if opa is None or opb is None:
            raise ValueError("each matrix needs a unit stride in one dimension and a leading "
                             "dimension at least as long as that dimension; call .copy() "
                             f"first (a strides {sa[1]}, b strides {sb[1]})")
        if fp8:
            if opb[0] != _OP_T or opa[0] != _OP_N:
                raise ValueError("fp8 matmul needs a row-major a (unit stride in its last "
                                 "dimension) and a column-major b (b = w.T of a row-major "
                                 "(N, K) w): cuBLASLt's fp8 kernels take only the 'TN' layout")
            if K % 16 or opa[1] % 16 or opb[1] % 16:
                raise ValueError(f"fp8 matmul needs K and the leading dimensions to be "
                                 f"multiples of 16 (K={K}, lda={opb[1]}, ldb={opa[1]})")
        # Output / C layout: unit stride in the last dimension.
        def out_ld(spec, what):
            bo, bso, oshape, ostr = _split3(spec[0], spec[1], what)
            if spec[0] != out_shape:
                raise ValueError(f"{what} has shape {spec[0]}; the product is {out_shape}")
            if spec[2] != od:
                raise ValueError(f"{what} is {spec[2]}; this matmul writes {od}")
            eo = _elem_strides(ostr, io)
            if eo is None or not (N == 1 or eo[1] == 1):
                raise ValueError(f"{what} must have unit stride in its last dimension")
            ld = eo[0] if M > 1 else N
            if ld < N:
                raise ValueError(f"{what}'s row stride is shorter than a row")
            if batch > 1 and (bso <= 0 or bso % io):
                raise ValueError(f"{what} needs a positive batch stride")
            return ld, (bso // io if batch > 1 else 0)

        # C and D share one layout: the output's (cudalibs does not convert between them).
        if so is not None:
            ldo, bso = out_ld(so, "out")
            if sc is not None and out_ld(sc, "c") != (ldo, bso):
                raise ValueError("c must have the strides of out")
        else:
            ldo, bso = N, (M * N if batch > 1 else 0)
            if sc is not None and out_ld(sc, "c") != (ldo, bso):
                raise ValueError("c must be C-contiguous when out is not described (or "
                                 "describe out with c's strides)")
        for name, s, item in (("a", bsa, ia), ("b", bsb, bb.itemsize)):
            if s % item or s < 0:
                raise ValueError(f"{name}'s batch stride must be a non-negative multiple of "
                                 "its item size")
        self._alpha = _scalar(alpha, scale_np, "alpha")
        self._beta = _scalar(beta, scale_np, "beta")
        self._alpha_p = c_void_p(ctypes.addressof(self._alpha))
        self._beta_p = c_void_p(ctypes.addressof(self._beta))
        if beta != 0 and sc is None and so is None:
            raise ValueError("beta != 0 needs c (or out) to describe the addend")
        # Alignment the heuristic may assume.
        if min_alignment is None:
            ptrs = [x._ptr for x in examples]
            min_alignment = min([_alignment(p) for p in ptrs] or [256])
        min_alignment = int(min_alignment)
        if min_alignment < 1 or min_alignment & (min_alignment - 1):
            raise ValueError(f"min_alignment must be a power of two, not {min_alignment}")
        # Epilogue inputs/outputs.
        bias_dtype = od if epi.bias else None
        aux_shape = aux_dtype = None
        if epi.aux:
            if epi.aux_kind == "gelu":
                ld_aux = _round_up(N, 8) if aux_ld is None else int(aux_ld)
                if ld_aux < N or ld_aux % 8:
                    raise ValueError(f"aux_ld={ld_aux} must be >= N={N} and a multiple of 8")
                aux_dtype = od
                aux_cols = ld_aux
            else:
                ld_aux = _round_up(N, 128) if aux_ld is None else int(aux_ld)
                if ld_aux < N or ld_aux % 128:
                    raise ValueError(f"aux_ld={ld_aux} (bits) must be >= N={N} and a "
                                     "multiple of 128")
                aux_dtype = np.dtype(np.uint8)
                aux_cols = ld_aux // 8
            aux_shape = (M, aux_cols) if len(out_shape) == 2 else (batch, M, aux_cols)
        else:
            ld_aux = None
            if aux_ld is not None:
                raise ValueError(f"aux_ld given, but epilogue {epi.name!r} has no aux matrix")
        # Build the descriptors (no GPU needed), then ask the heuristic (needs the device).
        try:
            ad, bd, odt = _dtypes.lookup(bb), _dtypes.lookup(ab), _dtypes.lookup(od)
            rows_a, cols_a = (N, K) if opb[0] == _OP_N else (K, N)
            rows_b, cols_b = (K, M) if opa[0] == _OP_N else (M, K)
            la = MatrixLayout(ad.numpy, rows_a, cols_a, opb[1], batch=batch,
                              batch_stride=bsb // bb.itemsize)
            lb = MatrixLayout(bd.numpy, rows_b, cols_b, opa[1], batch=batch,
                              batch_stride=bsa // ia)
            lc = MatrixLayout(odt.numpy, N, M, max(ldo, 1), batch=batch, batch_stride=bso)
            self._layouts = (la, lb, lc)
            desc = MatmulDesc(compute_type, _dtypes.lookup(scale_np).cuda)
            self._desc = desc
            desc.set("transa", opb[0])
            desc.set("transb", opa[0])
            desc.set("epilogue", epi.value)
            if epi.bias:
                desc.set("bias_data_type", odt.cuda)
            if epi.aux:
                desc.set("epilogue_aux_ld", ld_aux)
                if batch > 1:
                    desc.set("epilogue_aux_batch_stride", ld_aux * M)
            if fp8 and fast_accum:
                desc.set("fast_accum", 1)
            pref = MatmulPreference(min(int(workspace_bytes), WORKSPACE_BYTES))
            self._pref = pref
            for which in "abcd":
                pref.set(f"min_alignment_{which}_bytes", min_alignment)
            self._specs = ((sa[0], sa[1], ab), (sb[0], sb[1], bb))
            self._out_shape = out_shape
            self._out_dtype = od
            self._epi = epi
            self._bias_len = N
            self._bias_dtype = bias_dtype
            self._aux_shape, self._aux_dtype, self._aux_ld = aux_shape, aux_dtype, ld_aux
            self._align = min_alignment
            self._fp8 = fp8
            self._batch = batch
            self._mnk = (M, N, K)
            # Byte extents of a, b and out (their strides are fixed by the plan), so that
            # execute() checks aliasing with additions only.
            oi = od.itemsize
            self._exts = (byte_extent(*self._specs[0][:2], ab.itemsize),
                          byte_extent(*self._specs[1][:2], bb.itemsize),
                          byte_extent(out_shape, tuple(
                              v * oi for v in ((bso, ldo, 1) if len(out_shape) == 3
                                               else (ldo, 1))), oi))
            self._tuned = False
            # Last pointer written to each descriptor attribute, so execute() sets only
            # those that changed.
            self._set_ptrs = {}
            self._closed = False
            # Pointer attributes affect the heuristic's alignment checks: set placeholders
            # aligned like real buffers before asking it.
            if epi.bias:
                self._set_ptr("bias_pointer", 256)
            if epi.aux:
                self._set_ptr("epilogue_aux_pointer", 256)
            self._candidates = self._heuristic(max_candidates)
            self._choice = 0
            self._algo = self._candidates[0]["algo"]
        except BaseException:
            self.free()
            raise

    # -- planning ---------------------------------------------------------------------------
    def _set_ptr(self, name: str, value: int) -> None:
        if self._set_ptrs.get(name) != value:
            self._desc.set(name, value)
            self._set_ptrs[name] = value

    def _heuristic(self, k: int) -> list:
        if k < 1:
            raise ValueError(f"max_candidates must be >= 1, got {k}")
        dev = self._device
        _drv.get().cuCtxSetCurrent(dev._ctx)
        h = lt_handle(dev)
        results = (_lib.cublasLtMatmulHeuristicResult_t * k)()
        count = ctypes.c_int()
        la, lb, lc = self._layouts
        st = _lib.get_lt().cublasLtMatmulAlgoGetHeuristic(
            h, self._desc.raw, la.raw, lb.raw, lc.raw, lc.raw, self._pref.raw, k, results,
            ctypes.byref(count))
        if st:
            raise_for(st, "cublasLtMatmulAlgoGetHeuristic", f"no cuBLASLt algorithm for {self!r}")
        out = []
        for i in range(count.value):
            r = results[i]
            if r.state != 0:
                continue
            algo = _lib.cublasLtMatmulAlgo_t()
            ctypes.memmove(ctypes.byref(algo), ctypes.byref(r.algo), ctypes.sizeof(algo))
            out.append({"index": i, "algo": algo, "workspace": int(r.workspaceSize),
                        "waves": float(r.wavesCount), "id": _algo_id(algo), "ms": None})
        if not out:
            raise ValueError(f"cuBLASLt found no algorithm for {self!r} (check dtypes, "
                             "alignment and the epilogue's requirements)")
        return out

    @property
    def candidates(self) -> list[dict]:
        """The heuristic's candidates, best first: index, algorithm id, workspace bytes,
        waves count and (after :meth:`autotune`) measured ms."""
        self._check()
        return [{k: v for k, v in c.items() if k != "algo"} for c in self._candidates]

    @property
    def algorithm(self) -> dict:
        """The candidate :meth:`execute` uses (see :attr:`candidates`)."""
        self._check()
        c = self._candidates[self._choice]
        return {k: v for k, v in c.items() if k != "algo"}

    def select(self, index: int) -> "Matmul":
        """Use candidate ``index`` of :attr:`candidates` from now on."""
        self._check()
        if not 0 <= index < len(self._candidates):
            raise IndexError(f"candidate {index} of {len(self._candidates)}")
        self._choice = index
        self._algo = self._candidates[index]["algo"]
        return self

    @property
    def out_shape(self) -> tuple:
        return self._out_shape

    @property
    def out_dtype(self) -> np.dtype:
        return self._out_dtype

    @property
    def aux_shape(self) -> tuple | None:
        """Shape of the auxiliary array (``(M, aux_ld)`` elements for GELU; ``(M, aux_ld //
        8)`` bytes of uint8 for the ReLU mask), or None."""
        return self._aux_shape

    @property
    def epilogue(self) -> str:
        return self._epi.name

    @property
    def closed(self) -> bool:
        return self._closed

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("this Matmul plan was freed")

    # -- autotuning -------------------------------------------------------------------------
    def autotune(self, iterations: int = 10, *, stream=None) -> list[dict]:
        """Time every candidate on fresh random inputs and select the fastest.

        Each run is preceded by writing a buffer twice the size of the L2 cache, so every
        candidate reads its operands from memory as in a real network, not from a warm
        cache.  The times are CUDA-event times of the matmul alone; the median of
        ``iterations`` runs is kept per candidate.

        Returns
        -------
        list of dict
            :attr:`candidates`, with ``ms`` filled in, fastest first is *not* implied: the
            order is the heuristic's.
        """
        self._check()
        if iterations < 1:
            raise ValueError(f"iterations must be >= 1, got {iterations}")
        dev = self._device
        s = as_stream(stream, dev)
        rng = np.random.default_rng()
        arrays = [self._fresh(shape, strides, dtype, rng, s)
                  for shape, strides, dtype in self._specs]
        extras = {}
        lc = self._layouts[2]
        item = self._out_dtype.itemsize
        out_strides = (lc.ld * item, item)
        if len(self._out_shape) == 3:
            out_strides = (lc.batch_stride * item,) + out_strides
        out = self._fresh(self._out_shape, out_strides, self._out_dtype, rng, s)
        if self._epi.bias:
            extras["bias"] = self._fresh((self._bias_len,), None, self._bias_dtype, rng, s)
        if self._epi.aux:
            extras["aux"] = self._fresh(self._aux_shape, None, self._aux_dtype, rng, s)
        if self._fp8:
            extras["a_scale"] = to_device(np.ones(1, np.float32), device=dev, stream=s)
            extras["b_scale"] = extras["a_scale"]
        c = out if self._beta_nonzero() else None
        l2 = dev.properties.l2_cache_size or (50 << 20)
        flush = empty(2 * l2, np.uint8, device=dev, stream=s)
        start, end = Event(dev), Event(dev)
        keep = self._choice
        first_error = None
        try:
            for i, cand in enumerate(self._candidates):
                self.select(i)
                try:
                    self.execute(arrays[0], arrays[1], c, out=out, stream=s, **extras)
                except Exception as exc:   # a candidate that fails to run is not a choice
                    cand["ms"] = float("inf")
                    first_error = first_error or exc
                    continue
                times = []
                for _ in range(iterations):
                    flush.fill(i & 0xFF, s)
                    start.record(s)
                    self.execute(arrays[0], arrays[1], c, out=out, stream=s, **extras)
                    end.record(s)
                    end.sync()
                    times.append(start.elapsed_ms(end))
                cand["ms"] = statistics.median(times)
        finally:
            self.select(keep)
        ok = [i for i, cand in enumerate(self._candidates) if cand["ms"] != float("inf")]
        if not ok:
            flush.close()
            raise first_error
        self.select(min(ok, key=lambda i: self._candidates[i]["ms"]))
        self._tuned = True
        flush.close()
        return self.candidates

    def _beta_nonzero(self) -> bool:
        raw = bytes(self._beta)
        return any(raw)

    def _fresh(self, shape, strides, dtype, rng, s):
        """A new device array of ``shape``/``strides`` holding random values."""
        from ..testing import random_array

        item = np.dtype(dtype).itemsize
        if strides is None:
            arr = random_array(shape, dtype, rng=rng)
            return to_device(arr, device=self._device, stream=s)
        lo, hi = 0, item
        for n, st in zip(shape, strides):
            if n > 1:
                if st < 0:
                    lo += (n - 1) * st
                else:
                    hi += (n - 1) * st
        count = (hi - lo + item - 1) // item
        flat = to_device(random_array((count,), dtype, rng=rng), device=self._device, stream=s)
        return DeviceArray.from_buffer(flat.base, shape, dtype, strides, offset=-lo)

    # -- execution --------------------------------------------------------------------------
    def execute(self, a, b, c=None, *, out=None, bias=None, aux=None, a_scale=None,
                b_scale=None, stream=None):
        """Run the plan: write the pointers into the prepared call and make it.

        Parameters
        ----------
        a, b : DeviceArray or CUDA array-like
            Exactly the shapes, strides and dtypes the plan was made for.
        c : DeviceArray, optional
            The addend when ``beta != 0`` (default: ``out``, accumulated in place).
        out : DeviceArray, optional
            Default: a new C-contiguous array on ``stream``.
        bias : DeviceArray, shape (N,), optional
            Required by the bias epilogues (added per output column); written by the
            ``*_bgrad`` ones.
        aux : DeviceArray, optional
            The auxiliary array of the ``*_aux`` (written; allocated when omitted) and
            backward (read) epilogues, of :attr:`aux_shape`.
        a_scale, b_scale : DeviceArray, optional
            fp8 only: float32 device scalars dequantising ``a`` and ``b`` (default 1).
        stream : Stream, optional

        Returns
        -------
        DeviceArray or tuple of DeviceArray
            ``out``, or ``(out, aux)`` for the forward ``*_aux`` epilogues.

        Raises
        ------
        ClosedError
            The plan was freed, or an array's memory was.
        ValueError
            An operand does not match the plan, is on another device, is misaligned, or a
            required epilogue input is missing.
        """
        if self._closed:
            raise ClosedError("this Matmul plan was freed")
        dev = self._device
        # a and b checked inline (this is the hot path of cublas.matmul); any mismatch goes
        # through the explanatory checks below.
        if type(a) is not DeviceArray:
            a = asarray(a)
        if type(b) is not DeviceArray:
            b = asarray(b)
        spec_a, spec_b = self._specs[0], self._specs[1]
        if (a._shape, a._strides, a._dtype) != spec_a or a._device is not dev or \
                (a._buf is not None and a._buf._ptr is None) or a._ptr & (self._align - 1):
            self._check_operand(a, spec_a, "a", dev)
        if (b._shape, b._strides, b._dtype) != spec_b or b._device is not dev or \
                (b._buf is not None and b._buf._ptr is None) or b._ptr & (self._align - 1):
            self._check_operand(b, spec_b, "b", dev)
        a_ptr, b_ptr = a._ptr, b._ptr
        s = as_stream(stream, dev)
        if out is None:
            lc = self._layouts[2]
            M, N, _ = self._mnk
            if (M > 1 and lc.ld != N) or (self._batch > 1 and lc.batch_stride != M * N):
                raise ValueError("this plan was made for a strided out; pass out=")
            out = empty(self._out_shape, self._out_dtype, device=dev, stream=s)
            d_ptr = out._ptr
        else:
            if type(out) is not DeviceArray:
                out = asarray(out)
            self._check_out(out, "out")
            d_ptr = self._ptr(out, "out", dev)
        if c is None:
            c_ptr = d_ptr
        else:
            if type(c) is not DeviceArray:
                c = asarray(c)
            self._check_out(c, "c")
            c_ptr = self._ptr(c, "c", dev)
        epi = self._epi
        if epi.bias:
            if bias is None:
                raise ValueError(f"epilogue {epi.name!r} needs bias (shape ({self._bias_len},), "
                                 f"{self._bias_dtype})")
            if type(bias) is not DeviceArray:
                bias = asarray(bias)
            if bias._shape != (self._bias_len,) or bias._dtype != self._bias_dtype or (
                    self._bias_len > 1 and bias._strides[0] != bias.itemsize):
                raise ValueError(f"bias must be a contiguous ({self._bias_len},) "
                                 f"{self._bias_dtype} array (one entry per output column), "
                                 f"not {bias._shape} {bias._dtype}")
            self._set_ptr("bias_pointer", self._ptr(bias, "bias", dev))
        elif bias is not None:
            raise ValueError(f"epilogue {epi.name!r} takes no bias; use 'bias', 'relu_bias' or "
                             "'gelu_bias'")
        aux_out = None
        if epi.aux:
            if aux is None:
                if epi.aux == "in":
                    raise ValueError(f"epilogue {epi.name!r} needs aux (the forward pass's "
                                     f"{'GELU input' if epi.aux_kind == 'gelu' else 'ReLU mask'})")
                aux = empty(self._aux_shape, self._aux_dtype, device=dev, stream=s)
            elif type(aux) is not DeviceArray:
                aux = asarray(aux)
            if aux._shape != self._aux_shape or aux._dtype != self._aux_dtype or \
                    not aux.is_c_contiguous:
                raise ValueError(f"aux must be a C-contiguous {self._aux_shape} "
                                 f"{self._aux_dtype} array, not {aux._shape} {aux._dtype}")
            self._set_ptr("epilogue_aux_pointer", self._ptr(aux, "aux", dev))
            aux_out = aux
        elif aux is not None:
            raise ValueError(f"epilogue {epi.name!r} has no aux matrix")
        if self._fp8:
            # cuBLASLt's A is our b: its A scale is b's.
            self._set_ptr("a_scale_pointer", self._scale_ptr(b_scale, "b_scale", dev))
            self._set_ptr("b_scale_pointer", self._scale_ptr(a_scale, "a_scale", dev))
        elif a_scale is not None or b_scale is not None:
            raise ValueError("a_scale/b_scale apply to fp8 matmuls only")
        ea, eb, ed = self._exts
        if spans_overlap(d_ptr, ed, a_ptr, ea) or spans_overlap(d_ptr, ed, b_ptr, eb):
            raise ValueError("out overlaps an input: cuBLASLt reads the inputs while writing "
                             "out, so they must not share the same memory")
        _drv.get().cuCtxSetCurrent(dev._ctx)
        la, lb, lc = self._layouts
        ws = workspace(dev, s._handle)
        # The unchecked entry point: every argument below is already a ctypes pointer or
        # the size_t the prototype wants, so ctypes converts nothing.
        st = _lib.get_lt().unchecked("cublasLtMatmul")(
            lt_handle(dev), self._desc._raw, self._alpha_p, c_void_p(b_ptr), la._raw,
            c_void_p(a_ptr), lb._raw, self._beta_p, c_void_p(c_ptr), lc._raw, c_void_p(d_ptr),
            lc._raw, ctypes.byref(self._algo), c_void_p(ws), _WS_BYTES, s._h)
        if st:
            raise_for(st, "cublasLtMatmul", repr(self))
        if epi.aux == "out":
            return out, aux_out
        return out

    __call__ = execute

    def _check_operand(self, x: DeviceArray, spec, what: str, dev) -> None:
        shape, strides, dtype = spec
        if x._shape != shape or x._strides != strides or x._dtype != dtype:
            raise ValueError(f"{what} is {x._shape} {x._dtype} with strides {x._strides}; "
                             f"the plan was made for {shape} {dtype} strides {strides}")
        self._ptr(x, what, dev)

    def _ptr(self, x: DeviceArray, what: str, dev) -> int:
        if x._device is not dev:
            raise ValueError(f"{what} is on device {x._device.ordinal}; the plan is for device "
                             f"{dev.ordinal}")
        ptr = x._check()
        if ptr & (self._align - 1):
            raise ValueError(f"{what} at 0x{ptr:x} is not aligned to {self._align} bytes, which "
                             "the plan assumed (make the plan from this array, or pass "
                             "min_alignment=)")
        return ptr

    def _check_out(self, x: DeviceArray, what: str) -> None:
        if x._shape != self._out_shape or x._dtype != self._out_dtype:
            raise ValueError(f"{what} is {x._shape} {x._dtype}; the plan writes "
                             f"{self._out_shape} {self._out_dtype}")
        la, lb, lc = self._layouts
        M, N, _ = self._mnk
        item = self._out_dtype.itemsize
        if (N > 1 and x._strides[-1] != item) or (M > 1 and x._strides[-2] != lc.ld * item) or (
                self._batch > 1 and x._strides[0] != lc.batch_stride * item):
            raise ValueError(f"{what} has strides {x._strides}; the plan was made for a row "
                             f"stride of {lc.ld} elements")

    def _scale_ptr(self, x, what, dev) -> int:
        if x is None:
            return 0
        if type(x) is not DeviceArray:
            x = asarray(x)
        if x._dtype != np.float32 or x.size != 1:
            raise ValueError(f"{what} must be a single float32 on the device")
        return self._ptr(x, what, dev)

    # -- lifetime ---------------------------------------------------------------------------
    def free(self) -> None:
        """Destroy the descriptors.  :meth:`execute` then raises :class:`ClosedError`;
        calling ``free`` again does nothing."""
        self._closed = True
        for x in self._layouts:
            x.close()
        for x in (self._desc, self._pref):
            if x is not None:
                x.close()

    close = free

    def __enter__(self) -> "Matmul":
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __repr__(self) -> str:
        try:
            M, N, K = self._mnk
            a, b = self._specs
        except AttributeError:
            return "<Matmul (incomplete)>"
        batch = f"{self._batch}x " if self._batch > 1 else ""
        state = "freed" if self._closed else (
            f"candidate {self._choice} of {len(self._candidates)}"
            f"{' (autotuned)' if self._tuned else ''}"
            if getattr(self, "_candidates", None) else "planning")
        return (f"<Matmul {batch}({M}x{K} {a[2].name}) @ ({K}x{N} {b[2].name}) -> "
                f"{self._out_dtype.name}, epilogue={self._epi.name}, {state}>")


def _algo_id(algo) -> int:
    value = ctypes.c_int()
    written = ctypes.c_size_t()
    st = _lib.get_lt().cublasLtMatmulAlgoConfigGetAttribute(
        ctypes.byref(algo), _lib.CUBLASLT_ALGO_CONFIG_ID, ctypes.byref(value),
        ctypes.sizeof(value), ctypes.byref(written))
    return value.value if st == 0 else -1


# -- one-shot convenience with a plan cache --------------------------------------------------
_plan_cache: dict = {}
_plan_lock = threading.Lock()
_MAX_CACHED = 512


def matmul(a, b, *, bias=None, epilogue=None, out=None, compute=None, out_dtype=None,
           a_scale=None, b_scale=None, aux=None, stream=None):
    """``epilogue(a @ b + bias)`` through a cached cuBLASLt :class:`Matmul` plan.

    The plan for this problem (shapes, strides, dtypes, epilogue, compute, pointer
    alignment, device) is made on the first call and reused, so repeated calls pay only for
    :meth:`Matmul.execute`.

    Parameters
    ----------
    a, b : DeviceArray or CUDA array-like
        ``(M, K)`` / ``(K, N)``, or stacks ``(batch, M, K)`` / ``(batch, K, N)``.
    bias : DeviceArray, shape (N,), optional
        One entry per output column, in the output dtype.  Given without ``epilogue``, it
        means ``epilogue="bias"``.
    epilogue : str, optional
        See :data:`EPILOGUES` (``"relu"``, ``"gelu"``, ``"bias_relu"``, ``"bias_gelu"``,
        ...).
    out : DeviceArray, optional
    compute, out_dtype
        As for :class:`Matmul`.
    a_scale, b_scale : DeviceArray, optional
        fp8 per-tensor scales.
    aux : DeviceArray, optional
        For the epilogues with an auxiliary matrix.
    stream : Stream, optional

    Returns
    -------
    DeviceArray, or ``(out, aux)`` for the forward ``*_aux`` epilogues.
    """
    if type(a) is not DeviceArray:
        a = _as_dev(a, "a")
    if type(b) is not DeviceArray:
        b = _as_dev(b, "b")
    if epilogue is None and bias is not None:
        epilogue = "bias"
    if out is not None and type(out) is not DeviceArray:
        out = _as_dev(out, "out")
    key = (a._shape, a._strides, a._dtype, b._shape, b._strides, b._dtype,
           None if out is None else (out._shape, out._strides, out._dtype), epilogue, compute,
           None if out_dtype is None else np.dtype(out_dtype), a._device.ordinal,
           _alignment(a._ptr), _alignment(b._ptr),
           None if out is None else _alignment(out._ptr),
           None if bias is None else _alignment(asarray(bias)._ptr),
           None if aux is None else (aux.shape, _alignment(asarray(aux)._ptr)))
    plan = _plan_cache.get(key)
    if plan is None or plan._closed:
        aux_ld = None
        if aux is not None:
            aux_arr = asarray(aux)
            aux_ld = aux_arr.shape[-1] * (8 if aux_arr.dtype == np.uint8 else 1)
        align = min(_alignment(x) for x in (
            a._ptr, b._ptr, *(() if out is None else (out._ptr,)),
            *(() if bias is None else (asarray(bias)._ptr,)),
            *(() if aux is None else (asarray(aux)._ptr,))))
        plan = Matmul(a, b, out=out, out_dtype=out_dtype, compute=compute, epilogue=epilogue,
                      aux_ld=aux_ld, min_alignment=align)
        with _plan_lock:
            if len(_plan_cache) >= _MAX_CACHED:
                for old in _plan_cache.values():
                    old.free()
                _plan_cache.clear()
            _plan_cache[key] = plan
    return plan.execute(a, b, out=out, bias=bias, aux=aux, a_scale=a_scale, b_scale=b_scale,
                        stream=stream)


def _as_dev(x, what):
    if isinstance(x, np.ndarray):
        raise TypeError(f"{what} is a host numpy array; copy it with cudalibs.to_device() first")
    return asarray(x)


def plan_cache() -> dict:
    """The plans :func:`matmul` has made, by problem key (a copy of the mapping)."""
    with _plan_lock:
        return dict(_plan_cache)


def clear_plan_cache() -> None:
    """Free every cached :func:`matmul` plan."""
    with _plan_lock:
        for p in _plan_cache.values():
            p.free()
        _plan_cache.clear()
