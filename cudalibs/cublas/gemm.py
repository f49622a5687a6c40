"""Matrix products through cuBLAS: ``gemm``, strided-batched and pointer-array batched, tuning.

Row-major at the surface, column-major inside
---------------------------------------------
cuBLAS is column-major.  A row-major ``C = A @ B`` (M×N = M×K · K×N) is, read column-major,
``Cᵀ = Bᵀ Aᵀ`` (N×M = N×K · K×M): the call passes ``b`` as cuBLAS's first operand and ``a``
as its second, with ``m=N, n=M``.  Each operand is then used in place whenever one of its two
dimensions has unit stride: a C-ordered operand is already the transposed matrix cuBLAS wants
(``CUBLAS_OP_N``, leading dimension = its row stride), an F-ordered one (``x.T`` of a C-ordered
array) is the matrix itself (``CUBLAS_OP_T``, leading dimension = its column stride).  Any
other layout (both strides non-unit, negative or zero strides) is copied to a C-ordered
temporary first; :func:`gemm_args` says which.  ``out`` must have unit stride in its last
dimension, which makes its row stride ``ldc``.  :func:`gemm_args` is that mapping as a pure
function, so it is tested exhaustively without a GPU.

The hot path
------------
Everything that depends only on the problem (shapes, strides, dtypes, compute mode, algorithm)
is validated once and kept in a prepared :class:`_GemmPlan` keyed by those; a repeated call
looks the plan up, checks the devices and the closed state of the arrays, allocates the output
(stream-ordered) and makes one ctypes call.  The handle is rebound only when the stream
changes (:mod:`cudalibs.cublas.handle`).
"""

from __future__ import annotations

import ctypes
import math
from ctypes import c_longlong, c_void_p
import threading
from typing import NamedTuple

import numpy as np

from .. import dtypes as _dtypes
from ..driver import _capture, _lib as _drv
from ..driver._core import raise_for as _drv_raise
from ..driver.array import DeviceArray, asarray, byte_extent, empty, spans_overlap
from ..driver.stream import Event, Stream, as_stream
from ..errors import ClosedError
from . import _lib
from ._base import raise_for, version
from .handle import (WORKSPACE_BYTES, _cublas_handles, _rebind, _workspace_buffer,
                     cublas_handle)

_local_handles = _cublas_handles._local

__all__ = ["gemm", "gemm_strided_batched", "gemm_batched", "tune_gemm", "algo_cache",
           "clear_algo_cache", "gemm_args", "GemmArgs", "SUPPORTED", "GEMM_ALGOS"]

_OP_N = _lib.CUBLAS_OP_N
_OP_T = _lib.CUBLAS_OP_T
_INT_MAX = 2**31 - 1

#: Every ``cublasGemmAlgo_t`` :func:`tune_gemm` tries: DEFAULT, ALGO0..23,
#: DEFAULT_TENSOR_OP, ALGO0..15_TENSOR_OP.
GEMM_ALGOS = ((_lib.CUBLAS_GEMM_DEFAULT,)
              + tuple(range(_lib.CUBLAS_GEMM_ALGO0, _lib.CUBLAS_GEMM_ALGO23 + 1))
              + (_lib.CUBLAS_GEMM_DEFAULT_TENSOR_OP,)
              + tuple(range(_lib.CUBLAS_GEMM_ALGO0_TENSOR_OP,
                            _lib.CUBLAS_GEMM_ALGO15_TENSOR_OP + 1)))


# -- dtype combinations ----------------------------------------------------------------------
class _Combo(NamedTuple):
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
        (f64, f64, None): _Combo(f64, f64, C["COMPUTE_64F"], f64, False),
        (f64, f64, "f64"): _Combo(f64, f64, C["COMPUTE_64F"], f64, False),
        (f32, f32, None): _Combo(f32, f32, C["COMPUTE_32F"], f32, False),
        (f32, f32, "f32"): _Combo(f32, f32, C["COMPUTE_32F"], f32, False),
        (f32, f32, "tf32"): _Combo(f32, f32, C["COMPUTE_32F_FAST_TF32"], f32, True),
        (f16, f16, None): _Combo(f16, f16, C["COMPUTE_32F"], f32, False),
        (f16, f16, "f32"): _Combo(f16, f16, C["COMPUTE_32F"], f32, False),
        (f16, f16, "f16"): _Combo(f16, f16, C["COMPUTE_16F"], f16, False),
        (f16, f32, None): _Combo(f16, f32, C["COMPUTE_32F"], f32, False),
        (f16, f32, "f32"): _Combo(f16, f32, C["COMPUTE_32F"], f32, False),
        (i8, i32, None): _Combo(i8, i32, C["COMPUTE_32I"], i32, False),
        (i8, i32, "i32"): _Combo(i8, i32, C["COMPUTE_32I"], i32, False),
        (c64, c64, None): _Combo(c64, c64, C["COMPUTE_32F"], c64, False),
        (c64, c64, "f32"): _Combo(c64, c64, C["COMPUTE_32F"], c64, False),
        (c128, c128, None): _Combo(c128, c128, C["COMPUTE_64F"], c128, False),
        (c128, c128, "f64"): _Combo(c128, c128, C["COMPUTE_64F"], c128, False),
    }
    if bf16 is not None:
        rows[(bf16, bf16, None)] = _Combo(bf16, bf16, C["COMPUTE_32F"], f32, False)
        rows[(bf16, bf16, "f32")] = _Combo(bf16, bf16, C["COMPUTE_32F"], f32, False)
        rows[(bf16, f32, None)] = _Combo(bf16, f32, C["COMPUTE_32F"], f32, False)
        rows[(bf16, f32, "f32")] = _Combo(bf16, f32, C["COMPUTE_32F"], f32, False)
    return rows


_COMBOS = _build_combos()

#: The supported combinations, as text: ``"a/b dtype -> out dtype (compute=...)"``.
SUPPORTED = tuple(sorted({f"{ab.name} -> {c.name} (compute={comp or 'default'})"
                          for (ab, c, comp) in _COMBOS}))


def _combo(ab: np.dtype, c: np.dtype | None, compute) -> _Combo:
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
def _scalar(value, scale: np.dtype, what: str):
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


def _operand(rows: int, cols: int, s0: int, s1: int, prefer_t: bool = False):
    """``(op, ld)`` for a row-major ``rows×cols`` operand with element strides ``(s0, s1)``,
    seen column-major as its ``cols×rows`` transpose; ``None`` if it must be copied.

    Where both ops describe the memory (a dimension of extent 1), ``prefer_t`` picks T.
    """
    # Unit stride along the columns: memory is the column-major cols×rows matrix, op N.
    as_n = None
    if cols == 1 or s1 == 1:
        ld = s0 if rows > 1 else max(cols, 1)
        if ld >= max(cols, 1):
            as_n = (_OP_N, ld)
            if not prefer_t:
                return as_n
    # Unit stride along the rows: memory is column-major rows×cols, so op T transposes it.
    if rows == 1 or s0 == 1:
        ld = s1 if cols > 1 else max(rows, 1)
        if ld >= max(rows, 1):
            return _OP_T, ld
    return as_n


def _elem_strides(strides, itemsize):
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
    (M, K), (K2, N) = a_shape, b_shape
    if K != K2:
        raise ValueError(f"inner dimensions differ: a is {tuple(a_shape)}, b is {tuple(b_shape)}")
    out_itemsize = itemsize if out_itemsize is None else out_itemsize
    copy_a = copy_b = False
    sa = _elem_strides(a_strides, itemsize)
    opa = None if sa is None else _operand(M, K, sa[0], sa[1])
    if opa is None:
        copy_a = True
        opa = _operand(M, K, K, 1)
    sb = _elem_strides(b_strides, itemsize)
    opb = None if sb is None else _operand(K, N, sb[0], sb[1], prefer_t=tn_only)
    if tn_only:
        if opa[0] != _OP_N:
            copy_a = True
            opa = _operand(M, K, K, 1)
        if opb is None or opb[0] != _OP_T:
            copy_b = "F"
            opb = (_OP_T, max(K, 1))
    elif opb is None:
        copy_b = True
        opb = _operand(K, N, N, 1)
    if out_strides is None:
        ldc = max(N, 1)
    else:
        so = _elem_strides(out_strides, out_itemsize)
        if so is None or not (N == 1 or so[1] == 1):
            raise ValueError(f"out must have unit stride in its last dimension (row-major rows); "
                             f"its strides are {tuple(out_strides)} bytes")
        ldc = so[0] if M > 1 else max(N, 1)
        if ldc < max(N, 1):
            raise ValueError(f"out's row stride ({ldc} elements) is shorter than a row ({N})")
    # cuBLAS's first operand is b (N×K after op), its second is a (K×M after op).
    return GemmArgs(opb[0], opa[0], N, M, K, opb[1], opa[1], ldc, copy_a, copy_b)


def _copy_operand(x, mode, s):
    """A copy of ``x`` laid out as ``gemm_args`` asked: C order, or column-major matrices
    (``"F"``) for the TN-only int8 path."""
    if mode == "F":
        swap = (0, 2, 1) if x.ndim == 3 else (1, 0)
        return x.transpose(*swap).copy(s).transpose(*swap)
    return x.copy(s)


# -- plans -----------------------------------------------------------------------------------
class _GemmPlan:
    """Everything about one problem that does not change between calls."""

    __slots__ = ("combo", "args", "batch", "sa", "sb", "sc", "out_shape", "out_dtype",
                 "ctype", "abtype", "algo", "one", "zero", "a_ext", "b_ext", "c_ext",
                 "c_nbytes", "key", "memo", "fast", "one_p", "zero_p", "replays")

    def scalar(self, value, what):
        """``value`` in the scale type, memoised: a training loop repeats a few values.
        NaN never matches a key, so it always reaches the check in :func:`_scalar`."""
        try:
            return self.memo[value]
        except (KeyError, TypeError):
            pass
        c = _scalar(value, self.combo.scale, what)
        if len(self.memo) < 64 and isinstance(value, (int, float, complex)) and \
                not isinstance(value, bool):
            self.memo[value] = c
        return c

    def __repr__(self) -> str:
        a = self.args
        return (f"<GemmPlan {self.combo.ab.name}->{self.combo.c.name} m={a.m} n={a.n} k={a.k} "
                f"trans=({a.transa},{a.transb}) ld=({a.lda},{a.ldb},{a.ldc}) batch={self.batch} "
                f"algo={self.algo}>")


_plans: dict = {}
_plans_lock = threading.Lock()
_MAX_PLANS = 4096


def _split(shape, strides, what):
    """(batch, batch stride in bytes, matrix shape, matrix strides) of a 2-D or 3-D operand."""
    if len(shape) == 2:
        return 1, 0, shape, strides
    if len(shape) == 3:
        return shape[0], strides[0] if shape[0] > 1 else 0, shape[1:], strides[1:]
    raise ValueError(f"{what} must be a matrix (2-D) or a stack of matrices (3-D), got shape "
                     f"{shape}" + ("; use cublas.gemv for matrix-vector products"
                                   if len(shape) == 1 else ""))


def _make_plan(a: DeviceArray, b: DeviceArray, out, compute, algo, batched: bool) -> _GemmPlan:
    ab = a._dtype
    if b._dtype != ab:
        raise ValueError(f"a is {ab} but b is {b._dtype}: cuBLAS needs both inputs of one type "
                         f"(supported: {'; '.join(SUPPORTED)})")
    if compute is not None and not isinstance(compute, str):
        raise TypeError(f"compute must be a string such as 'tf32' or None, not {compute!r}")
    combo = _combo(ab, None if out is None else out._dtype, compute)
    ba, bsa, ashape, astr = _split(a._shape, a._strides, "a")
    bb, bsb, bshape, bstr = _split(b._shape, b._strides, "b")
    if not batched and (a.ndim != 2 or b.ndim != 2):
        raise ValueError(f"gemm takes matrices; got shapes {a._shape} and {b._shape} "
                         "(use gemm_strided_batched for stacks)")
    if ba != bb and ba != 1 and bb != 1:
        raise ValueError(f"batch sizes {ba} and {bb} do not broadcast")
    batch = max(ba, bb)
    if ba == 1:
        bsa = 0
    if bb == 1:
        bsb = 0
    M, K = ashape
    K2, N = bshape
    if K != K2:
        raise ValueError(f"inner dimensions differ: a is {a._shape}, b is {b._shape} "
                         f"({K} != {K2})")
    out_shape = (M, N) if a.ndim == 2 and b.ndim == 2 else (batch, M, N)
    item = ab.itemsize
    oitem = combo.c.itemsize
    if out is not None:
        if out._shape != out_shape:
            raise ValueError(f"out has shape {out._shape}; the product is {out_shape}")
        bo, bso, _, ostr = _split(out._shape, out._strides, "out")
        out_strides = ostr
    else:
        bso, out_strides = M * N * oitem, None
    args = gemm_args(ashape, astr, bshape, bstr, out_strides, item, oitem,
                     tn_only=ab.kind == "i")
    if batch > 1 and out is not None:
        extent = ((M - 1) * args.ldc + N) * oitem if M and N else 0
        if bso <= 0 or bso % oitem or bso < extent:
            raise ValueError(f"out's batch stride ({bso} bytes) must be positive and leave "
                             f"the {batch} matrices apart ({extent} bytes each)")
    # A copied operand becomes C-contiguous; its batch stride follows.
    if args.copy_a:
        bsa = M * K * item if ba > 1 else 0
    if args.copy_b:
        bsb = K * N * item if bb > 1 else 0
    for what, s in (("a", bsa), ("b", bsb)):
        if s % item or s < 0:
            raise ValueError(f"{what}'s batch stride ({s} bytes) must be a non-negative "
                             "multiple of its item size (copy it first)")
    for name in ("m", "n", "k", "lda", "ldb", "ldc"):
        if getattr(args, name) > _INT_MAX:
            raise ValueError(f"{name}={getattr(args, name)} exceeds cuBLAS's 32-bit int")
    if batch > _INT_MAX:
        raise ValueError(f"batch {batch} exceeds cuBLAS's 32-bit int")
    if ab.kind == "i":
        bad = [f"{n}={getattr(args, n)}" for n in ("k", "lda", "ldb", "ldc")
               if getattr(args, n) % 4]
        if bad:
            raise ValueError("an int8 GEMM needs k and every leading dimension to be a "
                             f"multiple of 4; here {', '.join(bad)}")
    if algo is None:
        algo_v = _lib.CUBLAS_GEMM_DEFAULT
    elif algo == "tuned":
        algo_v = "tuned"
    else:
        if isinstance(algo, bool) or not isinstance(algo, (int, np.integer)) or \
                int(algo) not in GEMM_ALGOS:
            raise ValueError(f"algo must be None, 'tuned' or a cublasGemmAlgo_t value "
                             f"(-1, 0..23, 99, 100..115), not {algo!r}")
        algo_v = int(algo)
    p = _GemmPlan()
    p.combo = combo
    p.args = args
    p.batch = batch
    p.sa, p.sb, p.sc = bsa // item, bsb // item, bso // oitem
    p.out_shape = out_shape
    p.out_dtype = combo.c
    p.abtype = _dtypes.lookup(ab).cuda
    p.ctype = _dtypes.lookup(combo.c).cuda
    p.algo = algo_v
    p.one = _scalar(1, combo.scale, "alpha")
    p.zero = _scalar(0, combo.scale, "beta")
    p.one_p = c_void_p(ctypes.addressof(p.one))
    p.zero_p = c_void_p(ctypes.addressof(p.zero))
    p.a_ext = byte_extent(a._shape, a._strides, item)
    p.b_ext = byte_extent(b._shape, b._strides, item)
    p.c_ext = None if out is None else byte_extent(out._shape, out._strides, oitem)
    p.c_nbytes = 0
    p.memo = {}
    p.replays = {}
    # What the hot path needs, flat, so one unpacking replaces a dozen attribute reads; the
    # batch strides ready as the long longs the unchecked call passes.  An empty extent
    # becomes (0, -2**62): it then overlaps nothing.
    def ext(e):
        return (0, -(1 << 62)) if e is None or e[0] == e[1] else e
    p.fast = (args.transa, args.transb, args.m, args.n, args.k, args.lda, args.ldb, args.ldc,
              p.abtype, p.ctype, combo.compute, c_longlong(p.sa), c_longlong(p.sb),
              c_longlong(p.sc), batch,
              not (batch == 1 and len(out_shape) == 2), *ext(p.a_ext), *ext(p.b_ext),
              *ext(p.c_ext), args.copy_a, args.copy_b)
    return p


def _as_array(x, what):
    if type(x) is DeviceArray:
        return x
    if isinstance(x, np.ndarray):
        raise TypeError(f"{what} is a host numpy array; copy it to the GPU with "
                        "cudalibs.to_device() first")
    return asarray(x)


def _run(a, b, out, alpha, beta, compute, algo, stream, batched, replay=False):
    """Shared body of :func:`gemm` and :func:`gemm_strided_batched`."""
    if type(a) is not DeviceArray:
        a = _as_array(a, "a")
    if type(b) is not DeviceArray:
        b = _as_array(b, "b")
    if out is not None and type(out) is not DeviceArray:
        out = _as_array(out, "out")
    dev = a._device
    if b._device is not dev:
        raise ValueError(f"a is on device {dev.ordinal} but b is on device {b._device.ordinal}")
    if out is None:
        key = (a._shape, a._strides, a._dtype, b._shape, b._strides, b._dtype, None, compute,
               algo, batched)
    else:
        if out._device is not dev:
            raise ValueError(f"out is on device {out._device.ordinal}, the inputs on "
                             f"{dev.ordinal}")
        key = (a._shape, a._strides, a._dtype, b._shape, b._strides, b._dtype, out._shape,
               out._strides, out._dtype, compute, algo, batched)
    p = _plans.get(key)
    if p is None:
        p = _make_plan(a, b, out, compute, algo, batched)
        p.key = key
        with _plans_lock:
            if len(_plans) >= _MAX_PLANS:
                _plans.clear()
            _plans[key] = p
    (ta, tb, m, n, k, lda, ldb, ldc, abtype, ctype, ctype_compute, sa, sb, sc, batch,
     strided, alo, ahi, blo, bhi, clo, chi, copy_a, copy_b) = p.fast
    # Closed-buffer checks, inlined (DeviceArray._check without the call).
    buf = a._buf
    if buf is not None and buf._ptr is None:
        raise ClosedError("a's buffer is closed")
    buf = b._buf
    if buf is not None and buf._ptr is None:
        raise ClosedError("b's buffer is closed")
    # The defaults (the ints 1 and 0) use the plan's prepared scalars.
    if type(alpha) is int and alpha == 1:
        alpha_c = p.one
    else:
        alpha_c = p.scalar(alpha, "alpha")
    if type(beta) is int and beta == 0:
        beta_c = p.zero
    else:
        beta_c = p.scalar(beta, "beta")
    if type(stream) is Stream and stream._alive[0] and stream._device is dev:
        s = stream
    else:
        s = as_stream(stream, dev)
    if out is None:
        if beta_c is not p.zero and beta != 0:
            raise ValueError("beta != 0 accumulates into out, so out must be given")
        out = empty(p.out_shape, p.out_dtype, device=dev, stream=s)
        c_ptr = out._ptr
    else:
        buf = out._buf
        if buf is not None and buf._ptr is None:
            raise ClosedError("out's buffer is closed")
        c_ptr = out._ptr
        # spans_overlap inlined: empty extents have hi far below any address.
        lo, hi, pa, pb = c_ptr + clo, c_ptr + chi, a._ptr, b._ptr
        if (lo < pa + ahi and pa + alo < hi) or (lo < pb + bhi and pb + blo < hi):
            raise ValueError("out overlaps an input; cuBLAS reads the inputs while writing "
                             "out, so they must not share memory")
    if m == 0 or n == 0:
        return out              # nothing to compute (cuBLAS would return at once too)
    if copy_a:
        a = a.copy(s)
    if copy_b:
        b = _copy_operand(b, copy_b, s)
    algo_v = p.algo
    if algo_v == "tuned":
        algo_v = _tuned_algo(p, a, b, out, s)
    if replay and not (copy_a or copy_b) and s._finalizer is not None \
            and not _capture._open[0]:
        rkey = (a._ptr, b._ptr, c_ptr, s._handle, algo_v,
                None if alpha_c is p.one else bytes(alpha_c),
                None if beta_c is p.zero else bytes(beta_c))
        if _replay(p, rkey, dev, s, lambda h: _call(p, h, a, b, c_ptr, alpha_c, beta_c,
                                                     algo_v)):
            return out
    _drv.get().cuCtxSetCurrent(dev._ctx)
    # cublas_handle() inlined: this thread's handle, rebound only when the stream changed.
    try:
        h = _local_handles.handles[dev._ordinal]
    except (AttributeError, KeyError):
        h = _cublas_handles.get(dev)
    if h.stream != s._handle:
        _rebind(h, dev, s._handle)
    st = _call(p, h, a, b, c_ptr, alpha_c, beta_c, algo_v)
    if st:
        raise_for(st, "cublasGemmStridedBatchedEx" if strided else "cublasGemmEx", repr(p))
    return out


def _call(p, h, a, b, c_ptr, alpha_c, beta_c, algo_v) -> int:
    """The cuBLAS call of plan ``p`` on handle ``h`` (bound to its stream); the status."""
    (ta, tb, m, n, k, lda, ldb, ldc, abtype, ctype, ctype_compute, sa, sb, sc, batch,
     strided, *_) = p.fast
    # The unchecked entry points (no ctypes conversions): every int below was checked to fit
    # a C int when the plan was made, and every pointer is passed as a c_void_p.
    if alpha_c is p.one:
        alpha_p = p.one_p
    else:
        alpha_p = c_void_p(ctypes.addressof(alpha_c))
    if beta_c is p.zero:
        beta_p = p.zero_p
    else:
        beta_p = c_void_p(ctypes.addressof(beta_c))
    if strided:
        return _lib.get().unchecked("cublasGemmStridedBatchedEx")(
            h.raw, ta, tb, m, n, k, alpha_p, c_void_p(b._ptr), abtype, lda, sb, c_void_p(a._ptr),
            abtype, ldb, sa, beta_p, c_void_p(c_ptr), ctype, ldc, sc, batch, ctype_compute, algo_v)
    return _lib.get().unchecked("cublasGemmEx")(
        h.raw, ta, tb, m, n, k, alpha_p, c_void_p(b._ptr), abtype, lda, c_void_p(a._ptr),
        abtype, ldb, beta_p, c_void_p(c_ptr), ctype, ldc, ctype_compute, algo_v)


# -- replay: the same call again as a one-node CUDA graph -----------------------------------
#: Most replayable calls remembered per plan (pointer sets seen, graphs made).
_REPLAYS_PER_PLAN = 32
_capture_streams = threading.local()


class _Replay:
    """A captured call: its executable graph, the workspace buffer it was captured with and
    the liveness cell of the stream it replays on (both checked before each launch)."""

    __slots__ = ("exec", "raw", "workspace", "alive")


def _replay(p, rkey, dev, s, call) -> bool:
    """Launch the graph of a call seen before with these exact pointers, scalars and stream;
    capture it on its second occurrence.  Returns False when the caller must make the call.

    The graph holds the pointers, scalars and the stream's workspace as they were at
    capture, so it computes exactly what the call would: the key holds every pointer and
    scalar, the stream is checked to be the same live object, and the workspace to be the
    buffer still assigned to that stream.
    """
    entry = p.replays.get(rkey)
    if entry is not None:
        if entry.alive is s._alive and entry.workspace is _workspace_buffer(dev, s):
            _drv.get().cuCtxSetCurrent(dev._ctx)
            st = _drv.get().cuGraphLaunch(entry.raw, s._h)
            if st:
                _drv_raise(st, "cuGraphLaunch")
            return True
        p.replays.pop(rkey, None)       # stale: its stream or workspace is gone
        return False
    if rkey not in p.replays:
        if len(p.replays) < _REPLAYS_PER_PLAN:
            p.replays[rkey] = None          # seen once: a second call captures
        return False
    # Second occurrence: capture on a private stream of this thread (no other thread's work
    # can join the capture), with the handle pointed at the target stream's workspace, so
    # replays on that stream stay ordered with everything else using it.
    cs = getattr(_capture_streams, "streams", None)
    if cs is None:
        cs = _capture_streams.streams = {}
    cap = cs.get(dev.ordinal)
    if cap is None or cap.closed:
        cap = cs[dev.ordinal] = Stream(dev)
    ws = _workspace_buffer(dev, s)
    _drv.get().cuCtxSetCurrent(dev._ctx)
    h = _cublas_handles.get(dev)
    h.bind(cap._handle)
    h.stream = None         # the next ordinary call binds its stream and workspace again
    L = _lib.get()
    st = L.cublasSetWorkspace_v2(h.raw, ws.ptr, WORKSPACE_BYTES)
    if st:
        raise_for(st, "cublasSetWorkspace_v2")
    from ..driver import graph as _graph

    with _graph.capture(cap) as g:
        st = call(h)
    try:
        if st:
            raise_for(st, "cublasGemmStridedBatchedEx" if p.fast[15] else "cublasGemmEx",
                      repr(p))
        entry = _Replay()
        entry.exec = g.instantiate()
    finally:
        g.close()           # the executable graph is independent of it
    entry.raw = entry.exec._h
    entry.workspace, entry.alive = ws, s._alive
    p.replays[rkey] = entry
    return _replay(p, rkey, dev, s, call)


def gemm(a, b, out=None, *, alpha=1, beta=0, compute=None, algo=None, stream=None,
         replay=False):
    """Matrix product ``out = alpha * a @ b + beta * out`` through ``cublasGemmEx``.

    numpy (row-major) semantics.  Transposed views (``a.T``) and any matrix with a unit
    stride in one dimension are passed without a copy; other layouts are copied to a
    C-ordered temporary first.

    Parameters
    ----------
    a : DeviceArray or CUDA array-like, shape (M, K)
    b : DeviceArray or CUDA array-like, shape (K, N)
        Same dtype as ``a``: float64, float32, float16, bfloat16, int8, complex64 or
        complex128.
    out : DeviceArray, shape (M, N), optional
        Written in place; needs unit stride in its last dimension and must not overlap an
        input.  Its dtype picks the output type where there is a choice (float16 or bfloat16
        inputs with a float32 ``out``).  Default: a new C-contiguous array of the input type
        (int32 for int8 inputs), allocated on ``stream``.
    alpha, beta : scalar, default 1 and 0
        Finite; ``beta != 0`` needs ``out`` (it accumulates into it).
    compute : str, optional
        ``None`` (fp32 accumulation for float16/bfloat16/float32, fp64 for float64, int32
        for int8), ``"tf32"`` (float32 inputs on tensor cores, about 10 mantissa bits),
        ``"f16"`` (float16 accumulation for float16 inputs), or the default spelled out
        (``"f32"``, ``"f64"``, ``"i32"``).
    algo : int or "tuned", optional
        A ``cublasGemmAlgo_t``; ``"tuned"`` uses the fastest algorithm found by
        :func:`tune_gemm` for this problem (tuning it on the first call).
    stream : Stream, optional
        The current stream by default.
    replay : bool, default False
        Make a repeated call cost one graph launch: the second time this exact call (the
        same arrays -- by address --, shapes, scalars and stream) is made, it is captured
        into a one-node CUDA graph, and from then on that graph is launched instead of
        calling cuBLAS, whose own host work is most of a small GEMM's cost.  The result is
        the same: the graph is the same kernel with the same arguments.  Only on streams
        cudalibs created (``cudalibs.Stream()``), outside capture blocks, and when no
        operand needs a copy; otherwise the call is made as usual.  Up to 32 distinct calls
        per problem are remembered.

    Returns
    -------
    DeviceArray
        ``out``.

    Raises
    ------
    ValueError
        Inner dimensions differ; unsupported dtype combination (the message lists the
        supported ones); int8 with ``k`` or a leading dimension not a multiple of 4; operands
        on different devices; ``out`` of the wrong shape, layout or overlapping an input;
        non-finite ``alpha``/``beta``.
    TypeError
        A host array, or a non-numeric scalar.
    ClosedError
        An array's memory was freed.
    """
    return _run(a, b, out, alpha, beta, compute, algo, stream, False, replay)


def gemm_strided_batched(a, b, out=None, *, alpha=1, beta=0, compute=None, algo=None,
                         stream=None, replay=False):
    """Batched matrix products ``out[i] = alpha * a[i] @ b[i] + beta * out[i]``.

    One ``cublasGemmStridedBatchedEx`` call.  ``a`` is ``(batch, M, K)`` or ``(M, K)``, ``b``
    is ``(batch, K, N)`` or ``(K, N)``; as in ``numpy.matmul``, a 2-D operand (or a batch of
    1) is used for every product, through a batch stride of 0, without a copy.  Each matrix
    of an operand follows the layout rules of :func:`gemm`.

    Parameters
    ----------
    a, b : DeviceArray or CUDA array-like
    out : DeviceArray, shape (batch, M, N), optional
    alpha, beta, compute, algo, stream, replay
        As for :func:`gemm`.

    Returns
    -------
    DeviceArray
        ``out``, of shape ``(batch, M, N)`` (``(M, N)`` when both inputs are 2-D).

    Raises
    ------
    ValueError
        As for :func:`gemm`, and batch sizes that do not broadcast.
    """
    return _run(a, b, out, alpha, beta, compute, algo, stream, True, replay)


# -- pointer-array batches -------------------------------------------------------------------
def gemm_batched(a_list, b_list, out_list=None, *, alpha=1, beta=0, compute=None, algo=None,
                 stream=None):
    """Products of lists of matrices, ``out[i] = alpha * a[i] @ b[i] + beta * out[i]``.

    One ``cublasGemmBatchedEx`` call over device arrays of pointers, which are uploaded on
    ``stream`` for each call (the matrices may live anywhere on the device).  Every ``a[i]``
    must share one shape and layout, and likewise every ``b[i]`` and ``out[i]``.

    Parameters
    ----------
    a_list, b_list : sequence of DeviceArray
        The same, non-zero length.
    out_list : sequence of DeviceArray, optional
        Default: new C-contiguous arrays.
    alpha, beta, compute, algo, stream
        As for :func:`gemm` (``algo="tuned"`` is not supported here).

    Returns
    -------
    list of DeviceArray
    """
    a_list = [_as_array(x, "a") for x in a_list]
    b_list = [_as_array(x, "b") for x in b_list]
    if not a_list or len(a_list) != len(b_list):
        raise ValueError(f"gemm_batched needs equally long, non-empty lists; got {len(a_list)} "
                         f"and {len(b_list)}")
    n = len(a_list)
    if out_list is not None:
        out_list = [_as_array(x, "out") for x in out_list]
        if len(out_list) != n:
            raise ValueError(f"out_list has {len(out_list)} entries; expected {n}")
    if algo == "tuned":
        raise ValueError("algo='tuned' is not supported by gemm_batched")
    a0, b0 = a_list[0], b_list[0]
    dev = a0._device
    for what, lst, ref in (("a", a_list, a0), ("b", b_list, b0)) + (
            (("out", out_list, out_list[0]),) if out_list is not None else ()):
        for x in lst:
            if x._device is not dev:
                raise ValueError(f"every matrix must be on device {dev.ordinal}; a {what} "
                                 f"matrix is on {x._device.ordinal}")
            if x._shape != ref._shape or x._strides != ref._strides or x._dtype != ref._dtype:
                raise ValueError(f"every {what} matrix must have the shape, strides and dtype "
                                 f"of the first ({ref._shape}, {ref._strides}, {ref._dtype})")
            x._check()
    p = _make_plan(a0, b0, None if out_list is None else out_list[0], compute, algo, False)
    if p.args.copy_a or p.args.copy_b:
        if a0.dtype.kind == "i":
            raise ValueError("an int8 gemm_batched needs row-major a matrices and "
                             "column-major b matrices (b = w.T of a row-major w)")
        raise ValueError("gemm_batched needs matrices with a unit stride in one dimension "
                         "(copy them first)")
    s = as_stream(stream, dev)
    alpha_c = _scalar(alpha, p.combo.scale, "alpha")
    beta_c = _scalar(beta, p.combo.scale, "beta")
    if out_list is None:
        if beta != 0:
            raise ValueError("beta != 0 accumulates into out_list, so it must be given")
        out_list = [empty(p.out_shape, p.out_dtype, device=dev, stream=s) for _ in range(n)]
    else:
        for o in out_list:
            for x in a_list + b_list:
                if spans_overlap(o._ptr, p.c_ext, x._ptr, byte_extent(x._shape, x._strides,
                                                               x.itemsize)):
                    raise ValueError("an out matrix overlaps an input")
    host = np.array([[x._ptr for x in b_list], [x._ptr for x in a_list],
                     [x._ptr for x in out_list]], dtype=np.uint64)
    ptrs = empty(host.shape, np.uint64, device=dev, stream=s)
    ptrs.copy_(host, s)
    base = ptrs._ptr
    _drv.get().cuCtxSetCurrent(dev._ctx)
    h = cublas_handle(dev, s._handle)
    x = p.args
    st = _lib.get().cublasGemmBatchedEx(
        h, x.transa, x.transb, x.m, x.n, x.k, ctypes.addressof(alpha_c), base, p.abtype, x.lda,
        base + 8 * n, p.abtype, x.ldb, ctypes.addressof(beta_c), base + 16 * n, p.ctype, x.ldc,
        n, p.combo.compute, p.algo)
    if st:
        raise_for(st, "cublasGemmBatchedEx", repr(p))
    # The pointer array is freed on the stream after the call has read it.
    ptrs.close()
    return out_list


# -- algorithm tuning ------------------------------------------------------------------------
_algo_cache: dict = {}
_algo_lock = threading.Lock()


def _alignment(ptr: int) -> int:
    return min(ptr & -ptr, 256) if ptr else 256


def _tune_key(p: _GemmPlan, a, b, out, dev) -> tuple:
    x = p.args
    return (p.combo.ab.name, p.combo.c.name, p.combo.compute, x.transa, x.transb, x.m, x.n,
            x.k, x.lda, x.ldb, x.ldc, p.batch, p.sa, p.sb, p.sc, _alignment(a._ptr),
            _alignment(b._ptr), _alignment(out._ptr), dev.arch, version())


def _tuned_algo(p, a, b, out, s) -> int:
    key = _tune_key(p, a, b, out, a._device)
    hit = _algo_cache.get(key)
    if hit is not None:
        return hit["algo"]
    return _tune(p, a, b, out, s, key, iterations=5)["algo"]


def _tune(p, a, b, out, s, key, iterations):
    dev = a._device
    # Tuning writes a scratch output, never the caller's (beta may be accumulating into it).
    scratch = empty(out._shape, out._dtype, device=dev, stream=s)
    L = _lib.get()
    _drv.get().cuCtxSetCurrent(dev._ctx)
    h = cublas_handle(dev, s._handle)
    x = p.args
    zero = p.zero
    one = p.one
    times = {}
    skipped = {}
    start, end = Event(dev), Event(dev)
    for algo in GEMM_ALGOS:
        def call():
            if p.batch == 1 and len(p.out_shape) == 2:
                return L.cublasGemmEx(h, x.transa, x.transb, x.m, x.n, x.k,
                                      ctypes.addressof(one), b._ptr, p.abtype, x.lda, a._ptr,
                                      p.abtype, x.ldb, ctypes.addressof(zero), scratch._ptr,
                                      p.ctype, x.ldc, p.combo.compute, algo)
            return L.cublasGemmStridedBatchedEx(
                h, x.transa, x.transb, x.m, x.n, x.k, ctypes.addressof(one), b._ptr, p.abtype,
                x.lda, p.sb, a._ptr, p.abtype, x.ldb, p.sa, ctypes.addressof(zero),
                scratch._ptr, p.ctype, x.ldc, p.sc, p.batch, p.combo.compute, algo)

        st = call()                 # warm-up, and the support check
        if st:
            skipped[algo] = st
            continue
        start.record(s)
        for _ in range(iterations):
            call()
        end.record(s)
        end.sync()
        times[algo] = start.elapsed_ms(end) / iterations
    scratch.close()
    if not times:
        raise_for(next(iter(skipped.values())), "cublasGemmEx",
                  f"no cublasGemmAlgo_t supports {p!r}")
    best = min(times, key=times.get)
    entry = {"algo": best, "ms": times[best], "times": times, "unsupported": sorted(skipped)}
    with _algo_lock:
        _algo_cache[key] = entry
    return entry


def tune_gemm(a, b, out=None, *, compute=None, iterations: int = 10, stream=None) -> dict:
    """Time every GEMM algorithm on this problem and remember the fastest.

    Each ``cublasGemmAlgo_t`` of :data:`GEMM_ALGOS` runs once (those returning
    ``CUBLAS_STATUS_NOT_SUPPORTED`` or another error are skipped), then ``iterations`` times
    between two events.  The winner is cached under the problem key (shapes, dtypes,
    transposes, leading dimensions, pointer alignment, device architecture and cuBLAS
    version); ``gemm(..., algo="tuned")`` uses it.  The caller's ``out`` is not written.
    This synchronises the stream, so it cannot run inside a graph capture.

    Parameters
    ----------
    a, b, out, compute, stream
        As for :func:`gemm` (2-D) or :func:`gemm_strided_batched` (3-D).
    iterations : int, default 10

    Returns
    -------
    dict
        ``{"algo": best, "ms": its time per call, "times": {algo: ms}, "unsupported":
        [algo, ...]}``.
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    a = _as_array(a, "a")
    b = _as_array(b, "b")
    if out is not None:
        out = _as_array(out, "out")
    if b._device is not a._device:
        raise ValueError("a and b are on different devices")
    batched = a.ndim != 2 or b.ndim != 2
    p = _make_plan(a, b, out, compute, None, batched)
    s = as_stream(stream, a._device)
    if p.args.copy_a:
        a = a.copy(s)
    if p.args.copy_b:
        b = _copy_operand(b, p.args.copy_b, s)
    tmp_out = out if out is not None else empty(p.out_shape, p.out_dtype, device=a._device,
                                                stream=s)
    key = _tune_key(p, a, b, tmp_out, a._device)
    return dict(_tune(p, a, b, tmp_out, s, key, iterations))


def algo_cache() -> dict:
    """The tuned algorithms so far: ``{problem key: {"algo", "ms", "times", "unsupported"}}``.

    A key is ``(a/b dtype, out dtype, compute type, transa, transb, m, n, k, lda, ldb, ldc,
    batch, stride_a, stride_b, stride_c, alignment of a, b, out, device arch, cuBLAS
    version)``, in cuBLAS's column-major terms (``m`` is the number of columns of the
    row-major output).
    """
    with _algo_lock:
        return {k: dict(v) for k, v in _algo_cache.items()}


def clear_algo_cache() -> None:
    """Forget every tuned algorithm (and the prepared GEMM plans)."""
    with _algo_lock:
        _algo_cache.clear()
    with _plans_lock:
        _plans.clear()
