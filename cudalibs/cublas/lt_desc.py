"""cuBLASLt descriptors: matrix layouts, the matmul descriptor, the heuristic preference,
and the table of fused epilogues.

They need no GPU: creating one and setting or reading its attributes (by vendor enum value or
lower-case short name) works wherever libcublasLt loads.  :class:`cudalibs.cublas.Matmul`
builds its plans from them.
"""

from __future__ import annotations

import ctypes

from .. import dtypes as _dtypes
from .._ffi import OwnedHandle
from ..driver.args import int_arg
from . import _lib
from ._base import raise_for
from .handle import WORKSPACE_BYTES

__all__ = ["MatrixLayout", "MatmulDesc", "MatmulPreference", "Epilogue", "EPILOGUES",
           "epilogue", "round_up", "SCALE_MODES"]


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
        dt = _dtypes.lookup(dtype, "MatrixLayout: dtype")
        if dt.cuda is None:
            raise TypeError(f"MatrixLayout: dtype {dt.name} has no cuBLASLt matrix type")
        if order not in ("col", "row"):
            raise ValueError(f"MatrixLayout: order must be 'col' or 'row', not {order!r}")
        rows, cols, batch = (int_arg(v, f"MatrixLayout: {n}")
                             for v, n in ((rows, "rows"), (cols, "cols"), (batch, "batch")))
        if rows < 0 or cols < 0 or batch < 1:
            raise ValueError(f"MatrixLayout: bad layout: rows={rows}, cols={cols}, "
                             f"batch={batch}")
        if ld is None:
            ld = max(rows if order == "col" else cols, 1)
        ld = int_arg(ld, "MatrixLayout: ld")
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
        compute_type = int_arg(compute_type, "MatmulDesc: compute_type")
        scale_type = int_arg(scale_type, "MatmulDesc: scale_type")
        L = _lib.get_lt()
        raw = _lib.cublasLtMatmulDesc_t()
        st = L.cublasLtMatmulDescCreate(ctypes.byref(raw), compute_type, scale_type)
        if st:
            raise_for(st, "cublasLtMatmulDescCreate")
        self._own(raw, L.cublasLtMatmulDescDestroy)
        self.compute_type, self.scale_type = compute_type, scale_type

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
class Epilogue:
    """One cuBLASLt epilogue: what it computes after the product and which extra operands it
    reads or writes.

    Attributes
    ----------
    name : str
        The canonical name (``"gelu_bias"``).
    value : int
        The ``cublasLtEpilogue_t`` value.
    bias : {None, "in", "out"}
        ``"in"``: a bias vector is added; ``"out"``: the bias gradient is written.
    aux : {None, "out", "in"}
        ``"out"``: the forward pass writes an auxiliary matrix; ``"in"``: the backward pass
        reads it.
    aux_kind : {None, "gelu", "relu"}
        The auxiliary matrix holds the GELU input (output dtype) or the ReLU bit mask.
    """

    __slots__ = ("name", "value", "bias", "aux", "aux_kind")

    def __init__(self, name, value, bias=None, aux=None, aux_kind=None):
        self.name = name
        self.value = value
        self.bias = bias          # None, "in" (added) or "out" (bias gradient written)
        self.aux = aux            # None, "out" (forward) or "in" (backward)
        self.aux_kind = aux_kind  # "gelu" (matrix in the output type) or "relu" (bit mask)

    def __repr__(self) -> str:
        parts = []
        if self.bias:
            parts.append("adds a bias" if self.bias == "in" else "writes the bias gradient")
        if self.aux:
            what = "GELU input" if self.aux_kind == "gelu" else "ReLU mask"
            parts.append(f"{'writes' if self.aux == 'out' else 'reads'} the {what} (aux)")
        extra = f": {', '.join(parts)}" if parts else ""
        return f"<Epilogue {self.name!r} (CUBLASLT_EPILOGUE value {self.value}){extra}>"


def _ep(name, value, **kw):
    return name, Epilogue(name, value, **kw)


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


def epilogue(name) -> Epilogue:
    """The :class:`Epilogue` named ``name`` (parts in any order; None: ``"default"``)."""
    if name is None:
        return EPILOGUES["default"]
    if not isinstance(name, str):
        raise TypeError(f"epilogue must be a name such as 'bias_gelu', not {name!r}")
    parts = frozenset(p for p in name.lower().replace("+", "_").replace("-", "_").split("_") if p)
    ep = _BY_PARTS.get(parts)
    if ep is None:
        raise ValueError(f"unknown epilogue {name!r}; known: {', '.join(EPILOGUES)}")
    return ep


#: fp8 ``scale_mode`` name -> the ``cublasLtMatmulMatrixScale_t`` of that operand's scale:
#: one float32 for the tensor, one per row of ``a`` / column of ``b`` (cuBLASLt's outer
#: vector), one per 128 elements along K of each such row / column (1x128 blocks), one per
#: 128x128 block.  Their layouts: :class:`cudalibs.cublas.Matmul`.
SCALE_MODES = {
    "tensor": _lib.CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
    "row": _lib.CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
    "block128": _lib.CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
    "block128x128": _lib.CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
}


def round_up(x: int, m: int) -> int:
    """``x`` rounded up to a multiple of ``m``."""
    return (x + m - 1) // m * m
