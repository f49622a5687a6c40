"""cuBLAS level 1 and 2, for completeness: ``axpy``, ``scal``, ``dot``, ``nrm2``, ``gemv``.

Vectors are 1-D arrays with any positive element stride (the stride is cuBLAS's ``inc``).
Level 1 goes through the ``*Ex`` entry points, so float16 and bfloat16 work too (computed in
float32).  ``dot`` and ``nrm2`` leave their result on the device, as a 0-d array, so they
never synchronise: the handle is switched to device pointer mode for the call and back to
host mode after it.  ``gemv`` uses the typed ``cublas?gemv_v2`` functions (float32, float64,
complex64, complex128) with the row-major mapping of :mod:`cudalibs.cublas.gemm`.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .. import dtypes as _dtypes
from ..driver import _lib as _drv
from ..driver.array import DeviceArray, empty
from ..driver.stream import as_stream
from . import _lib
from ._base import raise_for
from ..runtime.operand import check_device, operand
from ._common import INT_MAX as _INT_MAX, OP_N as _OP_N, OP_T as _OP_T, scalar as _scalar
from .handle import cublas_handle

__all__ = ["axpy", "scal", "dot", "nrm2", "gemv"]

_R32F = _dtypes.CUDA_R["R_32F"]


def _exec_type(dt: np.dtype, op: str) -> tuple[int, np.dtype]:
    """(execution cudaDataType, scale numpy dtype) for level-1 calls on ``dt``."""
    row = _dtypes.lookup(dt)
    if dt.kind == "c" or dt in (np.float32, np.float64):
        return row.cuda, dt
    if dt == np.float16 or dt == _dtypes.bfloat16:
        return _R32F, np.dtype(np.float32)
    raise ValueError(f"{op}: x is {dt}; cuBLAS level 1 takes float16, bfloat16, float32, "
                     "float64, complex64 or complex128 vectors")


def _vector(x, name, op, written=False) -> tuple[DeviceArray, int]:
    x = operand(x, name, op, written=written)
    if x.ndim != 1:
        raise ValueError(f"{op}: {name} must be 1-D, got shape {x.shape}")
    st = x.strides[0] if x.shape[0] > 1 else x.itemsize
    if st <= 0 or st % x.itemsize:
        raise ValueError(f"{op}: {name} needs a positive stride that is a multiple of its item "
                         f"size (got {st} bytes); copy it first")
    if x.shape[0] > _INT_MAX or st // x.itemsize > _INT_MAX:
        raise ValueError(f"{op}: {name} is too long for cuBLAS's 32-bit sizes")
    return x, st // x.itemsize


def _pair(x, y, op, write_y=False):
    x, incx = _vector(x, "x", op)
    y, incy = _vector(y, "y", op, written=write_y)
    if x.shape != y.shape:
        raise ValueError(f"{op}: x has shape {x.shape} but y has {y.shape}")
    if x.dtype != y.dtype:
        raise ValueError(f"{op}: x is {x.dtype} but y is {y.dtype}")
    check_device(y, x.device, "y", op)
    return x, incx, y, incy


def _handle(dev, stream):
    s = as_stream(stream, dev)
    _drv.get().cuCtxSetCurrent(dev.raw_context)
    return s, cublas_handle(dev, s.raw_handle)


def axpy(alpha, x, y, *, stream=None) -> DeviceArray:
    """``y += alpha * x`` in place (``cublasAxpyEx``); returns ``y``."""
    x, incx, y, incy = _pair(x, y, "axpy", write_y=True)
    ex, scale = _exec_type(x.dtype, "axpy")
    a = _scalar(alpha, scale, "axpy: alpha")
    s, h = _handle(x.device, stream)
    t = _dtypes.lookup(x.dtype).cuda
    st = _lib.get().cublasAxpyEx(h, x.shape[0], ctypes.addressof(a), ex, x.address, t, incx,
                                 y.address, t, incy, ex)
    if st:
        raise_for(st, "cublasAxpyEx")
    return y


def scal(alpha, x, *, stream=None) -> DeviceArray:
    """``x *= alpha`` in place (``cublasScalEx``); returns ``x``."""
    x, incx = _vector(x, "x", "scal", written=True)
    ex, scale = _exec_type(x.dtype, "scal")
    a = _scalar(alpha, scale, "scal: alpha")
    s, h = _handle(x.device, stream)
    t = _dtypes.lookup(x.dtype).cuda
    st = _lib.get().cublasScalEx(h, x.shape[0], ctypes.addressof(a), ex, x.address, t, incx, ex)
    if st:
        raise_for(st, "cublasScalEx")
    return x


def _device_result(fn, name, h, args):
    """Call a level-1 reduction with its result pointer on the device."""
    L = _lib.get()
    st = L.cublasSetPointerMode_v2(h, _lib.CUBLAS_POINTER_MODE_DEVICE)
    if st:
        raise_for(st, "cublasSetPointerMode_v2")
    try:
        st = fn(h, *args)
    finally:
        # Every other wrapper passes host scalars: restore the handle's mode whatever happens.
        L.cublasSetPointerMode_v2(h, _lib.CUBLAS_POINTER_MODE_HOST)
    if st:
        raise_for(st, name)


def dot(x, y, *, conjugate: bool = False, stream=None) -> DeviceArray:
    """``sum(x * y)`` (``sum(conj(x) * y)`` with ``conjugate=True``), as a 0-d device array.

    Uses ``cublasDotEx`` / ``cublasDotcEx``; float16/bfloat16 accumulate in float32 and
    return their own type.  Does not synchronise: ``float(result.get())`` when you need it.
    """
    x, incx, y, incy = _pair(x, y, "dot")
    ex, _ = _exec_type(x.dtype, "dot")
    s, h = _handle(x.device, stream)
    out = empty((), x.dtype, device=x.device, stream=s)
    t = _dtypes.lookup(x.dtype).cuda
    L = _lib.get()
    fn, name = (L.cublasDotcEx, "cublasDotcEx") if conjugate and x.dtype.kind == "c" else (
        L.cublasDotEx, "cublasDotEx")
    _device_result(fn, name, h, (x.shape[0], x.address, t, incx, y.address, t, incy, out.address, t,
                                 ex))
    return out


def nrm2(x, *, stream=None) -> DeviceArray:
    """The Euclidean norm of ``x`` (``cublasNrm2Ex``), as a 0-d device array of the real
    type (float32 for complex64)."""
    x, incx = _vector(x, "x", "nrm2")
    ex, _ = _exec_type(x.dtype, "nrm2")
    s, h = _handle(x.device, stream)
    rt = {np.dtype(np.complex64): np.dtype(np.float32),
          np.dtype(np.complex128): np.dtype(np.float64)}.get(x.dtype, x.dtype)
    if x.dtype.kind == "c":
        ex = _dtypes.lookup(rt).cuda
    out = empty((), rt, device=x.device, stream=s)
    _device_result(_lib.get().cublasNrm2Ex, "cublasNrm2Ex", h,
                   (x.shape[0], x.address, _dtypes.lookup(x.dtype).cuda, incx, out.address,
                    _dtypes.lookup(rt).cuda, ex))
    return out


_GEMV = {np.dtype(np.float32): "cublasSgemv_v2", np.dtype(np.float64): "cublasDgemv_v2",
         np.dtype(np.complex64): "cublasCgemv_v2", np.dtype(np.complex128): "cublasZgemv_v2"}


def gemv(a, x, y=None, *, alpha=1, beta=0, trans: bool = False, stream=None) -> DeviceArray:
    """Matrix-vector product ``y = alpha * op(a) @ x + beta * y``.

    Parameters
    ----------
    a : DeviceArray, shape (M, N)
        Row-major semantics; needs a unit stride in one dimension (``a.T`` views are fine).
    x : DeviceArray, shape (N,) (``(M,)`` with ``trans=True``)
    y : DeviceArray, optional
        Written in place; needed when ``beta != 0``.
    alpha, beta : scalar
    trans : bool, default False
        Use ``a.T`` (no conjugation).
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``y``.
    """
    a = operand(a, "a", "gemv")
    dt = a.dtype
    name = _GEMV.get(dt)
    if name is None:
        raise ValueError(f"gemv: a is {dt}; gemv takes float32, float64, complex64 or "
                         "complex128 (use cublas.gemm with an (N, 1) matrix for other types)")
    if a.ndim != 2:
        raise ValueError(f"gemv: a must be 2-D, got shape {a.shape}")
    M, N = a.shape
    rows, cols = (N, M) if trans else (M, N)
    x, incx = _vector(x, "x", "gemv")
    if x.shape != (cols,) or x.dtype != dt or x.device is not a.device:
        raise ValueError(f"gemv: x must be a ({cols},) {dt} vector on device "
                         f"{a.device.ordinal}, not {x.shape} {x.dtype}")
    item = a.itemsize
    if any(st % item for st in a.strides):
        raise ValueError("a's strides are not multiples of its item size")
    s0, s1 = a.strides[0] // item, a.strides[1] // item
    # Row-major a (M×N) with unit column stride is the column-major N×M matrix aᵀ (ld = s0):
    # a @ x is then op T on it.  With unit row stride it is column-major M×N a itself.
    if N == 1 or s1 == 1:
        cm, cn, ld, op = N, M, (s0 if M > 1 else max(N, 1)), _OP_T
    elif M == 1 or s0 == 1:
        cm, cn, ld, op = M, N, (s1 if N > 1 else max(M, 1)), _OP_N
    else:
        raise ValueError("a needs a unit stride in one dimension; copy it first")
    if ld < max(cm, 1):
        raise ValueError("a's leading dimension is shorter than its rows")
    if trans:
        op = _OP_N if op == _OP_T else _OP_T
    a_c = _scalar(alpha, dt, "gemv: alpha")
    b_c = _scalar(beta, dt, "gemv: beta")
    if y is None:
        if beta != 0:
            raise ValueError("gemv: beta != 0 accumulates into y, so y must be given")
        s = as_stream(stream, a.device)
        y = empty((rows,), dt, device=a.device, stream=s)
    y, incy = _vector(y, "y", "gemv", written=True)
    if y.shape != (rows,) or y.dtype != dt or y.device is not a.device:
        raise ValueError(f"gemv: y must be a ({rows},) {dt} vector on device "
                         f"{a.device.ordinal}")
    s, h = _handle(a.device, stream)
    if rows == 0:
        return y
    st = getattr(_lib.get(), name)(h, op, cm, cn, ctypes.addressof(a_c), a.address, ld, x.address,
                                   incx, ctypes.addressof(b_c), y.address, incy)
    if st:
        raise_for(st, name)
    return y
