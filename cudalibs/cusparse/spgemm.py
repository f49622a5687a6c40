"""Sparse times sparse: ``C = alpha * A @ B`` for CSR ``A`` and ``B`` (``cusparseSpGEMM``).

The number of entries of ``C`` is known only once cuSPARSE has computed it, so every
execution runs cuSPARSE's whole sequence -- work estimation (twice: size, then work),
compute (twice), the read of ``C``'s size, the allocation of ``C``'s arrays, the copy --
with its buffers from the stream-ordered pool, and waits for the device in the middle.  It
is therefore refused under graph capture.  Each execution makes its own descriptors, so
threads share a plan freely.
"""

from __future__ import annotations

import ctypes
import weakref

from .._ffi import refuse_in_capture
from ..driver import _lib as _drv
from ..driver.array import empty
from ..runtime.handles import refuse_if_capturing
from . import _lib
from ._base import raise_for
from .handle import cusparse_handle
from .matrix import CSR, Descriptor, descriptor, matrix_operand
from .plan import SparsePlan, scalar

__all__ = ["SpGEMM"]

_WHY = "SpGEMM reads the product's size on the host to allocate it"


class SpGEMM(SparsePlan):
    """``C = alpha * A @ B`` for sparse CSR matrices of one dtype and index dtype.

    Parameters
    ----------
    A, B : CSR
        ``A.shape[1] == B.shape[0]``.  cuSPARSE's SpGEMM takes no transposes.

    Notes
    -----
    :meth:`execute` returns a new :class:`~cudalibs.cusparse.CSR` owning its arrays, with
    sorted column indices.
    """

    kind = "cusparse_spgemm"

    def __init__(self, A, B, *, _weak=False):
        A = matrix_operand(A, "A", "SpGEMM")
        B = matrix_operand(B, "B", "SpGEMM", A.device)
        for name, m in (("A", A), ("B", B)):
            if m.format != "csr":
                raise ValueError(f"SpGEMM: {name} is {m.format}; cuSPARSE's SpGEMM takes CSR")
        if A.shape[1] != B.shape[0]:
            raise ValueError(f"SpGEMM: A {A.shape} @ B {B.shape}: inner sizes differ")
        if A.dtype != B.dtype or A.index_dtype != B.index_dtype:
            raise TypeError(f"SpGEMM: A is {A.dtype} with {A.index_dtype} indices, B "
                            f"{B.dtype} with {B.index_dtype}; they must match")
        self.matrix_shape = A.shape
        self.out_shape = (A.shape[0], B.shape[1])
        self._init_sparse(A, weak=_weak)
        self._b_ref = _ref(B, _weak)
        self._b_shape = B.shape

    @property
    def b_matrix(self) -> CSR:
        """The right-hand sparse matrix."""
        B = self._b_ref()
        if B is None or B.closed:
            raise ValueError("SpGEMM: its matrix B was closed or collected")
        return B

    def usable(self) -> bool:
        B = self._b_ref()
        return SparsePlan.usable(self) and B is not None and not B.closed

    def _problem(self) -> str:
        return f"csr {self.matrix_shape} @ csr {self._b_shape}, {self.dtype}"

    def _heuristics(self) -> list[dict]:
        return [{"name": "CUSPARSE_SPGEMM_DEFAULT", "id": "CUSPARSE_SPGEMM_DEFAULT",
                 "alg": _lib.CUSPARSE_SPGEMM_DEFAULT, "workspace": 0}]

    def execute(self, *, alpha=1.0, stream=None) -> CSR:
        """Compute ``alpha * A @ B`` on ``stream``; returns a new CSR (waits for the device
        once, to size it)."""
        op = "SpGEMM.execute"
        self._live()
        A, B = self.matrix, self.b_matrix
        dev = self._device
        al = scalar(alpha, self.dtype, f"{op}: alpha")
        zero = scalar(0, self.dtype, "beta")
        refuse_in_capture("SpGEMM", _WHY)
        s = self._stream(stream, op)
        refuse_if_capturing(s.raw_handle, dev, "SpGEMM", _WHY)
        L = _lib.get()
        rows, cols = self.out_shape
        idt = A.index_dtype
        e = _lib.CUSPARSE_INDEX_32I if idt.itemsize == 4 else _lib.CUSPARSE_INDEX_64I
        indptr = empty((rows + 1,), idt, device=dev, stream=s)
        made = [indptr]
        bufs: list = []
        try:
            _drv.get().cuCtxSetCurrent(dev.raw_context)
            h = cusparse_handle(dev, s.raw_handle)
            with descriptor(A) as da, descriptor(B) as db:
                raw = _lib.cusparseSpMatDescr_t()
                st = L.cusparseCreateCsr(ctypes.byref(raw), rows, cols, 0, indptr.ptr, None,
                                         None, e, e, _lib.CUSPARSE_INDEX_BASE_ZERO,
                                         self._cuda)
                if st:
                    raise_for(st, "cusparseCreateCsr", repr(self))
                with Descriptor(raw, L.cusparseDestroySpMat) as dc:
                    g = _lib.cusparseSpGEMMDescr_t()
                    st = L.cusparseSpGEMM_createDescr(ctypes.byref(g))
                    if st:
                        raise_for(st, "cusparseSpGEMM_createDescr", repr(self))
                    with Descriptor(g, L.cusparseSpGEMM_destroyDescr) as dg:
                        nnz = self._compute(L, h, al, zero, da, db, dc, dg, s, bufs)
                        indices = empty((nnz,), idt, device=dev, stream=s)
                        made.append(indices)
                        data = empty((nnz,), self.dtype, device=dev, stream=s)
                        made.append(data)
                        st = L.cusparseCsrSetPointers(dc.raw, indptr.ptr,
                                                      indices.ptr or None, data.ptr or None)
                        if st:
                            raise_for(st, "cusparseCsrSetPointers", repr(self))
                        st = L.cusparseSpGEMM_copy(h, 0, 0, al.ctypes.data, da.raw, db.raw,
                                                   zero.ctypes.data, dc.raw, self._cuda,
                                                   _lib.CUSPARSE_SPGEMM_DEFAULT, dg.raw)
                        if st:
                            raise_for(st, "cusparseSpGEMM_copy", repr(self))
        except BaseException:
            for a in made:
                a.close()
            raise
        finally:
            for b in bufs:
                b.close()
        C = CSR.__new__(CSR)
        C._setup({"indptr": indptr, "indices": indices, "data": data}, self.out_shape, op,
                 owned=True)
        return C

    __call__ = execute

    def _compute(self, L, h, al, zero, da, db, dc, dg, s, bufs) -> int:
        """Work estimation and compute, each asked its buffer size first; returns the
        product's number of entries."""
        pool = self._device.memory_pool
        args = (h, 0, 0, al.ctypes.data, da.raw, db.raw, zero.ctypes.data, dc.raw, self._cuda,
                _lib.CUSPARSE_SPGEMM_DEFAULT, dg.raw)
        for fn in ("cusparseSpGEMM_workEstimation", "cusparseSpGEMM_compute"):
            n = ctypes.c_size_t()
            st = getattr(L, fn)(*args, ctypes.byref(n), None)
            if st:
                raise_for(st, fn, repr(self))
            buf = pool.allocate(max(n.value, 1), s)
            bufs.append(buf)
            st = getattr(L, fn)(*args, ctypes.byref(n), buf.ptr)
            if st:
                raise_for(st, fn, repr(self))
        r, c, nnz = ctypes.c_longlong(), ctypes.c_longlong(), ctypes.c_longlong()
        st = L.cusparseSpMatGetSize(dc.raw, ctypes.byref(r), ctypes.byref(c), ctypes.byref(nnz))
        if st:
            raise_for(st, "cusparseSpMatGetSize", repr(self))
        return nnz.value


def _ref(m, weak: bool):
    """A callable giving ``m``: a weak reference for a cached plan, else a strong one."""
    if weak:
        return weakref.ref(m)
    return lambda: m
