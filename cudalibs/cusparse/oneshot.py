"""The one-shot sparse operations: plans found in the one plan cache.

Each call keys its problem (:data:`SPARSE_KEY`: the operation, the sparse matrix's
:attr:`~cudalibs.cusparse.SparseMatrix.token`, the operations and the dense operands'
layouts, the device, and for the triangular solves the stream) and asks the one front for
the plan; on a miss it builds one that refers to the matrix weakly, plans it (SpMM:
autotunes it, the choice kept in the tuning store), and notes the key on the matrix, so the
plan is dropped and closed with the matrix.  A hit only checks the operands and queues.

A miss is refused (:class:`~cudalibs.errors.CaptureError`) while the call's stream is
capturing a graph, whoever began the capture, before any allocation: planning asks cuSPARSE
for buffer sizes on scratch operands and (SpMM) times the algorithms.  Run the call once
before capturing it; the captured call is then a hit, which touches the call's stream only
(its buffer comes from the pool on that stream).

SpMV and SpMM take ``deterministic`` (see :mod:`.plan`): by default every algorithm
cuSPARSE offers (SpMM autotunes them; SpMV runs cuSPARSE's default), with
``deterministic=True`` only those it documents as bitwise reproducible.
"""

from __future__ import annotations

import numpy as np

from .._ffi import refuse_in_capture
from ..driver.stream import as_stream
from ..runtime import front as _front
from ..runtime.cache import KeyKind
from ..runtime.handles import refuse_if_capturing
from ..runtime.operand import operand
from .matrix import CSR, SparseMatrix, matrix_operand
from .plan import SDDMM, SpMM, SpMV
from .solve import SpSM, SpSV
from .spgemm import SpGEMM

__all__ = ["SPARSE_KEY", "spmv", "spmm", "sddmm", "spgemm", "spsv", "spsm"]

#: Keys of the one-shots' plans: ``matrix`` the sparse matrix's token (``other`` the second
#: sparse matrix's, or None), ``ops`` the operations and triangle flags, ``dense`` the dense
#: operands' ``(shape, strides, dtype)``, ``stream`` the stream of a triangular solve's plan
#: (None for the others: their plans serve every stream).
SPARSE_KEY = KeyKind("cusparse", ("op", "matrix", "other", "ops", "dense", "stream",
                                  "device"))
_PLANNING = ("a new plan asks cuSPARSE for buffer sizes (a solve: for its analysis) on "
             "operands allocated synchronously, and an autotune times algorithms")


def _plan(key, A: SparseMatrix, build, *, tune=False, stream=None):
    plan = _front.lookup(key)
    if plan is None:
        what = f"planning {key[1]}"
        refuse_in_capture(what, _PLANNING)
        plan = build()          # checks the problem: no library call
        try:
            # A capture this thread did not begin (a framework's) shows on the stream only.
            s = as_stream(stream, A.device, what=f"{key[1]}: stream")
            refuse_if_capturing(s.raw_handle, A.device, what, _PLANNING)
        except BaseException:
            plan.close()
            raise
        plan = _front.insert(key, plan, _front.tuned(stream) if tune else _front.PLAN)
        A._remember(key)
    return plan


def _deterministic(value, op: str) -> bool:
    """``deterministic=`` as a key part, True or False (checked again by the plan)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{op}: deterministic must be True or False, not {value!r}")


def _dense(x, name, op, A, stream):
    x = operand(x, name, op, device=A.device, dtypes=(A.dtype,), ndim=2, stream=stream)
    return x, (x.shape, x.strides, x.dtype)


def spmv(A, x, out=None, *, alpha=1.0, beta=0.0, op="N", deterministic=False, stream=None):
    """``alpha * op(A) @ x + beta * out`` for a sparse matrix ``A`` (``cusparseSpMV``).

    Parameters
    ----------
    A : CSR, CSC, COO or BSR
    x : DeviceArray or CUDA array-like
        A contiguous vector of ``A``'s dtype.
    out : DeviceArray or CUDA array-like, optional
        Written in place (and read when ``beta`` is not 0); default a new vector.
    alpha, beta : number
    op : {"N", "T", "H"}
    deterministic : bool, default False
        As :class:`~.plan.SpMV`'s: by default cuSPARSE's default algorithm (no autotune);
        True: one cuSPARSE documents as bitwise reproducible (``op="N"`` on CSR, COO and
        BSR), refused where there is none.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out`` or the new vector.
    """
    A = matrix_operand(A, "A", "spmv")
    x = operand(x, "x", "spmv", device=A.device, dtypes=(A.dtype,), ndim=1, stream=stream)
    det = _deterministic(deterministic, "spmv")
    key = (SPARSE_KEY, "spmv", A.token, None, (op, det), None, None, A.device)
    plan = _plan(key, A, lambda: SpMV(A, op=op, deterministic=det, _weak=True),
                 stream=stream)
    return plan.execute(x, out, alpha=alpha, beta=beta, stream=stream)


def spmm(A, B, out=None, *, alpha=1.0, beta=0.0, op_a="N", op_b="N", autotune=True,
         deterministic=False, stream=None):
    """``alpha * op_a(A) @ op_b(B) + beta * out`` for a sparse ``A`` (any format, Blocked-ELL
    included) and a dense ``B`` (``cusparseSpMM``).

    The first call of a problem times the algorithms cuSPARSE offers for the format and
    layouts that ``deterministic`` admits (``autotune=False``: the first of them, cuSPARSE's
    default) and keeps the fastest, also in the tuning store; later calls only queue.
    ``deterministic`` is :class:`~.plan.SpMM`'s: by default every algorithm; True only those
    cuSPARSE documents as bitwise reproducible (``op_a="N"`` on CSR, COO and BSR), refused
    where there are none.  ``B`` and ``out`` are 2-D, row- or column-major; ``out`` defaults
    to a new C-contiguous array.
    """
    A = matrix_operand(A, "A", "spmm")
    b, bd = _dense(B, "B", "spmm", A, stream)
    od = None
    if out is not None:
        out, od = _dense(out, "out", "spmm", A, stream)
    det = _deterministic(deterministic, "spmm")
    key = (SPARSE_KEY, "spmm", A.token, None, (op_a, op_b, bool(autotune), det), (bd, od),
           None, A.device)
    plan = _plan(key, A, lambda: SpMM(A, b, out, op_a=op_a, op_b=op_b, deterministic=det,
                                      _weak=True),
                 tune=autotune, stream=stream)
    return plan.execute(b, out, alpha=alpha, beta=beta, stream=stream)


def sddmm(a, b, C, *, alpha=1.0, beta=0.0, op_a="N", op_b="N", stream=None):
    """Write ``alpha * (op_a(a) @ op_b(b))`` sampled at ``C``'s entries ``+ beta * C`` into
    ``C``'s values (``cusparseSDDMM``); returns ``C`` (CSR or BSR)."""
    C = matrix_operand(C, "C", "sddmm")
    a, ad = _dense(a, "a", "sddmm", C, stream)
    b, bd = _dense(b, "b", "sddmm", C, stream)
    key = (SPARSE_KEY, "sddmm", C.token, None, (op_a, op_b), (ad, bd), None, C.device)
    plan = _plan(key, C, lambda: SDDMM(a, b, C, op_a=op_a, op_b=op_b, _weak=True),
                 stream=stream)
    return plan.execute(a, b, alpha=alpha, beta=beta, stream=stream)


def spgemm(A, B, *, alpha=1.0, stream=None) -> CSR:
    """``alpha * A @ B`` for CSR matrices (``cusparseSpGEMM``): a new CSR.  Waits for the
    device once (the product's size), so it cannot be captured into a graph."""
    A = matrix_operand(A, "A", "spgemm")
    B = matrix_operand(B, "B", "spgemm", A.device)
    key = (SPARSE_KEY, "spgemm", A.token, B.token, None, None, None, A.device)
    plan = _front.lookup(key)
    if plan is None:
        plan = _front.insert(key, SpGEMM(A, B, _weak=True), _front.PLAN)
        A._remember(key)
        B._remember(key)
    return plan.execute(alpha=alpha, stream=stream)


def _solve_stream(A, stream, op):
    return as_stream(stream, A.device, what=f"{op}: stream").raw_handle


def spsv(A, x, out=None, *, alpha=1.0, lower=True, unit_diagonal=False, op="N",
         stream=None):
    """Solve ``op(A) @ y = alpha * x`` for a triangular sparse ``A`` (CSR or COO;
    ``cusparseSpSV``); returns ``out`` or a new vector.

    The analysis of ``A`` is made once per stream and kept with the matrix: if ``A``'s
    values change, make a new matrix (or close it and its plans go with it).
    """
    A = matrix_operand(A, "A", "spsv")
    x = operand(x, "x", "spsv", device=A.device, dtypes=(A.dtype,), ndim=1, stream=stream)
    key = (SPARSE_KEY, "spsv", A.token, None, (op, bool(lower), bool(unit_diagonal)), None,
           _solve_stream(A, stream, "spsv"), A.device)
    plan = _plan(key, A, lambda: SpSV(A, op=op, lower=lower, unit_diagonal=unit_diagonal,
                                      _weak=True), stream=stream)
    return plan.execute(x, out, alpha=alpha, stream=stream)


def spsm(A, B, out=None, *, alpha=1.0, lower=True, unit_diagonal=False, op="N", op_b="N",
         stream=None):
    """Solve ``op(A) @ Y = alpha * op_b(B)`` for a triangular sparse ``A`` and dense ``B``
    (``cusparseSpSM``); returns ``out`` or a new C-contiguous array.  As :func:`spsv`."""
    A = matrix_operand(A, "A", "spsm")
    b, bd = _dense(B, "B", "spsm", A, stream)
    key = (SPARSE_KEY, "spsm", A.token, None, (op, op_b, bool(lower), bool(unit_diagonal)),
           bd, _solve_stream(A, stream, "spsm"), A.device)
    plan = _plan(key, A, lambda: SpSM(A, b, op=op, op_b=op_b, lower=lower,
                                      unit_diagonal=unit_diagonal, _weak=True),
                 stream=stream)
    return plan.execute(b, out, alpha=alpha, stream=stream)
