"""What the cuBLAS GEMM, the level-1/2 wrappers and the cuBLASLt plans share.

- the supported (input, output, compute) dtype combinations (:func:`combo`);
- host scalars in a GEMM's scale type (:func:`scalar`);
- the row-major -> column-major mapping of one operand (:func:`op_ld`) and of a whole
  product (:func:`gemm_args`), pure functions tested without a GPU;
- batch splitting of 2-D / 3-D operands (:func:`split_batch`) and pointer alignment.
"""

from __future__ import annotations

import ctypes
import math
from typing import NamedTuple

import numpy as np

from .. import dtypes as _dtypes
from ..driver.args import int_tuple
from ..driver.memory import check_nbytes
from . import _lib

__all__ = ["OP_N", "OP_T", "INT_MAX", "Combo", "SUPPORTED", "combo", "scalar", "GemmArgs",
           "op_ld", "elem_strides", "gemm_args", "split_batch", "alignment", "scalar_is_zero"]

OP_N = _lib.CUBLAS_OP_N
OP_T = _lib.CUBLAS_OP_T
INT_MAX = 2**31 - 1


# -- dtype combinations ----------------------------------------------------------------------
class Combo(NamedTuple):
    """One supported (input, output, compute) combination of cublasGemmEx."""

    ab: np.dtype          # A and B element type
    c: np.dtype           # C (output) element type
    compute: int          # cublasComputeType_t
    scale: np.dtype       # type of alpha and beta
    tf32: bool            # the looser tf32 tolerance applies


def _build_combos():
    C = _dtypes.COMPUTE
    f16, f32, f64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
    c64, c128 = np.dtype(np.complex64), np.dtype(np.complex128)
    i8, i32 = np.dtype(np.int8), np.dtype(np.int32)
    bf16 = _dtypes.bfloat16
    rows = {
        (f64, f64, None): Combo(f64, f64, C["COMPUTE_64F"], f64, False),
        (f64, f64, "f64"): Combo(f64, f64, C["COMPUTE_64F"], f64, False),
        (f32, f32, None): Combo(f32, f32, C["COMPUTE_32F"], f32, False),
        (f32, f32, "f32"): Combo(f32, f32, C["COMPUTE_32F"], f32, False),
        (f32, f32, "tf32"): Combo(f32, f32, C["COMPUTE_32F_FAST_TF32"], f32, True),
        (f16, f16, None): Combo(f16, f16, C["COMPUTE_32F"], f32, False),
        (f16, f16, "f32"): Combo(f16, f16, C["COMPUTE_32F"], f32, False),
        (f16, f16, "f16"): Combo(f16, f16, C["COMPUTE_16F"], f16, False),
        (f16, f32, None): Combo(f16, f32, C["COMPUTE_32F"], f32, False),
        (f16, f32, "f32"): Combo(f16, f32, C["COMPUTE_32F"], f32, False),
        (i8, i32, None): Combo(i8, i32, C["COMPUTE_32I"], i32, False),
        (i8, i32, "i32"): Combo(i8, i32, C["COMPUTE_32I"], i32, False),
        (c64, c64, None): Combo(c64, c64, C["COMPUTE_32F"], c64, False),
        (c64, c64, "f32"): Combo(c64, c64, C["COMPUTE_32F"], c64, False),
        (c128, c128, None): Combo(c128, c128, C["COMPUTE_64F"], c128, False),
        (c128, c128, "f64"): Combo(c128, c128, C["COMPUTE_64F"], c128, False),
    }
    if bf16 is not None:
        rows[(bf16, bf16, None)] = Combo(bf16, bf16, C["COMPUTE_32F"], f32, False)
        rows[(bf16, bf16, "f32")] = Combo(bf16, bf16, C["COMPUTE_32F"], f32, False)
        rows[(bf16, f32, None)] = Combo(bf16, f32, C["COMPUTE_32F"], f32, False)
        rows[(bf16, f32, "f32")] = Combo(bf16, f32, C["COMPUTE_32F"], f32, False)
    return rows


_COMBOS = _build_combos()

#: The supported combinations, as text: ``"a/b dtype -> out dtype (compute=...)"``.
SUPPORTED = tuple(sorted({f"{ab.name} -> {c.name} (compute={comp or 'default'})"
                          for (ab, c, comp) in _COMBOS}))


def combo(ab: np.dtype, c: np.dtype | None, compute) -> Combo:
    """The combination for inputs ``ab``, output ``c`` (None: the default) and ``compute``."""
    if ab.kind == "i" or ab.kind == "u":
        c = np.dtype(np.int32) if c is None else c
    elif c is None:
        c = ab
    row = _COMBOS.get((ab, c, compute))
    if row is None:
        raise ValueError(
            f"cuBLAS GEMM does not support inputs of {ab} with an output of {c} and "
            f"compute={compute!r}; supported: {'; '.join(SUPPORTED)}")
    return row


# -- scalars ---------------------------------------------------------------------------------
def scalar(value, scale: np.dtype, what: str):
    """``value`` as a ctypes object holding the scale type's bytes (complex: two reals)."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if scale.kind == "c":
        try:
            z = complex(value)
        except TypeError:
            raise TypeError(f"{what} must be a number, not {type(value).__name__}") from None
        if not (math.isfinite(z.real) and math.isfinite(z.imag)):
            raise ValueError(f"{what} must be finite, got {value!r}")
        part = ctypes.c_float if scale == np.complex64 else ctypes.c_double
        return (part * 2)(z.real, z.imag)
    if isinstance(value, complex) or np.iscomplexobj(value):
        raise TypeError(f"{what} is complex ({value!r}) but the GEMM scale type is {scale}")
    try:
        x = float(value)
    except TypeError:
        raise TypeError(f"{what} must be a number, not {type(value).__name__}") from None
    if not math.isfinite(x):
        raise ValueError(f"{what} must be finite, got {value!r}")
    if scale.kind == "i":
        if x != int(x) or not -2**31 <= x < 2**31:
            raise ValueError(f"{what} must be an int32 for an int8 GEMM, got {value!r}")
        return ctypes.c_int32(int(x))
    if scale == np.float16:
        if abs(x) > 65504.0:
            raise ValueError(f"{what}={value!r} overflows the float16 scale type")
        return ctypes.c_uint16(int(np.float16(x).view(np.uint16)))
    if scale == np.float32:
        if abs(x) > 3.4028234663852886e38:
            raise ValueError(f"{what}={value!r} overflows the float32 scale type")
        return ctypes.c_float(x)
    return ctypes.c_double(x)


# -- the row-major -> column-major mapping (pure) --------------------------------------------
class GemmArgs(NamedTuple):
    """cuBLAS arguments for a row-major ``out = a @ b`` (see the module docstring).

    ``transa``/``lda`` describe cuBLAS's first operand, which is ``b``; ``transb``/``ldb``
    describe ``a``.  ``copy_a``/``copy_b`` say that the operand's layout cannot be passed
    as is and a C-ordered copy must be made (the other fields then assume that copy).
    """

    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    copy_a: bool
    copy_b: bool | str


def op_ld(rows: int, cols: int, s0: int, s1: int, prefer_t: bool = False):
    """``(op, ld)`` for a row-major ``rows×cols`` operand with element strides ``(s0, s1)``,
    seen column-major as its ``cols×rows`` transpose; ``None`` if it must be copied.

    Where both ops describe the memory (a dimension of extent 1), ``prefer_t`` picks T.
    """
    # Unit stride along the columns: memory is the column-major cols×rows matrix, op N.
    as_n = None
    if cols == 1 or s1 == 1:
        ld = s0 if rows > 1 else max(cols, 1)
        if ld >= max(cols, 1):
            as_n = (OP_N, ld)
            if not prefer_t:
                return as_n
    # Unit stride along the rows: memory is column-major rows×cols, so op T transposes it.
    if rows == 1 or s0 == 1:
        ld = s1 if cols > 1 else max(rows, 1)
        if ld >= max(rows, 1):
            return OP_T, ld
    return as_n


def elem_strides(strides, itemsize):
    """Byte strides as element strides, or None if one is not a multiple of ``itemsize``."""
    out = []
    for st in strides:
        if st % itemsize:
            return None
        out.append(st // itemsize)
    return out


def gemm_args(a_shape, a_strides, b_shape, b_strides, out_strides, itemsize: int,
              out_itemsize: int | None = None, tn_only: bool = False) -> GemmArgs:
    """Map a row-major ``out = a @ b`` onto ``cublasGemmEx`` arguments.

    Parameters
    ----------
    a_shape, b_shape : tuple of int
        ``(M, K)`` and ``(K, N)``.
    a_strides, b_strides : tuple of int
        Byte strides of ``a`` and ``b``.
    out_strides : tuple of int or None
        Byte strides of ``out``, or None for a new C-contiguous output.
    itemsize : int
        Bytes per element of ``a`` and ``b``.
    out_itemsize : int, optional
        Bytes per element of ``out`` (default ``itemsize``).
    tn_only : bool, default False
        Only cuBLAS's "TN" form may be used (``transa`` T, ``transb`` N), as for int8 on
        current GPUs, which refuse the other forms for most shapes: ``a`` must then be
        row-major and ``b`` column-major, and an operand that is not gets a copy that is
        (``copy_b`` is ``"F"`` for a column-major copy of ``b``).

    Returns
    -------
    GemmArgs

    Raises
    ------
    ValueError
        The inner dimensions differ, or ``out`` has no unit stride in its last dimension or
        a row stride shorter than a row.
    """
    what = "gemm_args: "
    a_shape, a_strides, b_shape, b_strides = (
        int_tuple(v, what + n, 2, scalar=False) for v, n in (
            (a_shape, "a_shape"), (a_strides, "a_strides"), (b_shape, "b_shape"),
            (b_strides, "b_strides")))
    if out_strides is not None:
        out_strides = int_tuple(out_strides, what + "out_strides", 2, scalar=False)
    itemsize = check_nbytes(itemsize, what + "itemsize")
    (M, K), (K2, N) = a_shape, b_shape
    if K != K2:
        raise ValueError(f"inner dimensions differ: a is {tuple(a_shape)}, b is {tuple(b_shape)}")
    out_itemsize = itemsize if out_itemsize is None else out_itemsize
    copy_a = copy_b = False
    sa = elem_strides(a_strides, itemsize)
    opa = None if sa is None else op_ld(M, K, sa[0], sa[1])
    if opa is None:
        copy_a = True
        opa = op_ld(M, K, K, 1)
    sb = elem_strides(b_strides, itemsize)
    opb = None if sb is None else op_ld(K, N, sb[0], sb[1], prefer_t=tn_only)
    if tn_only:
        if opa[0] != OP_N:
            copy_a = True
            opa = op_ld(M, K, K, 1)
        if opb is None or opb[0] != OP_T:
            copy_b = "F"
            opb = (OP_T, max(K, 1))
    elif opb is None:
        copy_b = True
        opb = op_ld(K, N, N, 1)
    if out_strides is None:
        ldc = max(N, 1)
    else:
        so = elem_strides(out_strides, out_itemsize)
        if so is None or not (N == 1 or so[1] == 1):
            raise ValueError(f"out must have unit stride in its last dimension (row-major rows); "
                             f"its strides are {tuple(out_strides)} bytes")
        ldc = so[0] if M > 1 else max(N, 1)
        if ldc < max(N, 1):
            raise ValueError(f"out's row stride ({ldc} elements) is shorter than a row ({N})")
    # cuBLAS's first operand is b (N×K after op), its second is a (K×M after op).
    return GemmArgs(opb[0], opa[0], N, M, K, opb[1], opa[1], ldc, copy_a, copy_b)


def split_batch(shape, strides, what, hint: str = ""):
    """``(batch, batch stride in bytes, matrix shape, matrix strides)`` of a 2-D or 3-D
    operand (a batch of one has stride 0)."""
    if len(shape) == 2:
        return 1, 0, shape, strides
    if len(shape) == 3:
        return shape[0], strides[0] if shape[0] > 1 else 0, shape[1:], strides[1:]
    raise ValueError(f"{what} must be a matrix (2-D) or a stack of matrices (3-D), got shape "
                     f"{shape}" + (hint if len(shape) == 1 else ""))


def alignment(ptr: int) -> int:
    """The largest power of two up to 256 dividing ``ptr`` (256 for a null pointer)."""
    return min(ptr & -ptr, 256) if ptr else 256


def scalar_is_zero(c) -> bool:
    """Whether a ctypes scalar made by :func:`scalar` holds zero."""
    return not any(bytes(c))
