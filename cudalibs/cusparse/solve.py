"""Triangular solves: SpSV (one right-hand side) and SpSM (several), as plans.

``op(A) @ y = alpha * x`` for a triangular sparse ``A`` (CSR or COO; the triangle and the
diagonal's kind are attributes of the plan's own descriptor of ``A``).  Unlike the products,
a solve needs an **analysis** of ``A``'s structure and values, made in :meth:`plan` into a
buffer that the plan holds for its whole life: every solve reads it.  Two solves of one plan
on different streams could therefore run at once on that buffer; so a plan's solves must be
ordered (one stream, or the caller's events), and the one-shots :func:`~.oneshot.spsv` /
:func:`~.oneshot.spsm` keep one plan per stream.  Planning waits for the analysis; change
``A``'s values and a new plan (a new analysis) is needed.
"""

from __future__ import annotations

import ctypes

from .._ffi import refuse_in_capture
from ..driver import _lib as _drv
from ..driver.array import empty
from ..driver.stream import as_stream
from ..runtime.operand import operand
from . import _lib
from ._base import raise_for
from .handle import cusparse_handle
from .matrix import Descriptor, dense_descriptor, dense_layout, descriptor, matrix_operand
from .plan import SparsePlan, dense_desc, op_code

__all__ = ["SpSV", "SpSM"]

_ANALYSIS = "the analysis of a triangular solve waits for the device"


class _Triangular(SparsePlan):
    """What SpSV and SpSM share: the triangle attributes, the analysis buffer."""

    _NAME = ""

    def _setup(self, A, op, lower, unit_diagonal, weak):
        A = matrix_operand(A, "A", self._NAME)
        if A.format not in ("csr", "coo"):
            raise ValueError(f"{self._NAME}: A is {A.format}; cuSPARSE's triangular solves "
                             "take CSR and COO matrices")
        if A.shape[0] != A.shape[1]:
            raise ValueError(f"{self._NAME}: A has shape {A.shape}; a triangular solve needs a "
                             "square matrix")
        self.op = op_code(op, f"{self._NAME}: op")
        self._op_name = op.upper()
        self.lower, self.unit_diagonal = bool(lower), bool(unit_diagonal)
        self.matrix_shape = A.shape
        self._init_sparse(A, weak=weak)
        return A

    def _matrix_descriptor(self):
        d = self._keep(descriptor(self.matrix))
        L = _lib.get()
        for attr, value in ((_lib.CUSPARSE_SPMAT_FILL_MODE,
                             _lib.CUSPARSE_FILL_MODE_LOWER if self.lower
                             else _lib.CUSPARSE_FILL_MODE_UPPER),
                            (_lib.CUSPARSE_SPMAT_DIAG_TYPE,
                             _lib.CUSPARSE_DIAG_TYPE_UNIT if self.unit_diagonal
                             else _lib.CUSPARSE_DIAG_TYPE_NON_UNIT)):
            v = ctypes.c_int(value)
            st = L.cusparseSpMatSetAttribute(d.raw, attr, ctypes.byref(v), ctypes.sizeof(v))
            if st:
                raise_for(st, "cusparseSpMatSetAttribute", repr(self))
        return d

    def _prepare(self, kind: str, dense, s) -> list[dict]:
        """Plan a solve of ``kind`` ("SpSV" or "SpSM"): the matrix's descriptor, those of the
        dense examples ``[(array, name)]`` (closed after), the solve's descriptor and its
        analysis; returns the one candidate."""
        L = _lib.get()
        alg_name = f"CUSPARSE_{kind.upper()}_ALG_DEFAULT"
        alg = getattr(_lib, alg_name)
        try:
            _drv.get().cuCtxSetCurrent(self._device.raw_context)
            self._a = self._matrix_descriptor()
            self._d = [self._keep(dense_descriptor(a, name, kind)) for a, name in dense]
            self._bind(self._d, "cusparseDnVecSetValues" if kind == "SpSV" else
                       "cusparseDnMatSetValues")
            raw = getattr(_lib, f"cusparse{kind}Descr_t")()
            st = getattr(L, f"cusparse{kind}_createDescr")(ctypes.byref(raw))
            if st:
                raise_for(st, f"cusparse{kind}_createDescr", repr(self))
            self._solve = self._keep(Descriptor(raw, getattr(L, f"cusparse{kind}_destroyDescr")))
            h = cusparse_handle(self._device, s.raw_handle)
            ops = (self.op,) if kind == "SpSV" else (self.op, self.op_b)
            args = (h, *ops, self._units[0], self._a.raw, *(d.raw for d in self._d),
                    self._cuda, alg, self._solve.raw)
            self._call = (getattr(L, f"cusparse{kind}_solve"), f"cusparse{kind}_solve")
            ws = self._analyse(f"cusparse{kind}_bufferSize", f"cusparse{kind}_analysis", args,
                               s)
        finally:
            for a, _ in dense:
                a.close()
        return [{"name": alg_name, "id": alg_name, "alg": alg, "workspace": 0, "analysis": ws}]

    def _analyse(self, fn_size, fn_analysis, args, s):
        """Buffer size, the plan's buffer, the analysis; waits for it."""
        L = _lib.get()
        n = ctypes.c_size_t()
        st = getattr(L, fn_size)(*args, ctypes.byref(n))
        if st:
            raise_for(st, fn_size, repr(self))
        buf = self._device.memory_pool.allocate(max(n.value, 1), s)
        self._bufs.append(buf)
        st = getattr(L, fn_analysis)(*args, buf.ptr)
        if st:
            raise_for(st, fn_analysis, repr(self))
        s.sync()
        return n.value

    def _solve_call(self, s, rhs, out, ops, a_p) -> None:
        """Queue the solve of checked operands: ``cusparse{kind}_solve(handle, *ops, alpha,
        A, rhs, out, compute type, algorithm, the solve's descriptor)``."""
        self._launch(s, self._run, (rhs.address, out.address), self._call,
                     (*ops, a_p, self._a.raw, *self._set_raw, self._cuda),
                     tail=self._solve.raw)

    def _problem(self) -> str:
        tri = "lower" if self.lower else "upper"
        diag = ", unit diagonal" if self.unit_diagonal else ""
        return (f"{self._op_name}({self.format} {self.matrix_shape}, {tri}{diag}) \\ "
                f"{self._rhs()}, {self.dtype}")

    def _workspace_bytes(self) -> int:
        return sum(b.size for b in self._bufs)


class SpSV(_Triangular):
    """Solve ``op(A) @ y = alpha * x`` for a triangular sparse ``A`` (``cusparseSpSV``).

    Parameters
    ----------
    A : CSR or COO
        Square; only the chosen triangle is read.
    op : {"N", "T", "H"}
    lower : bool, default True
        Which triangle of ``A`` is the matrix.
    unit_diagonal : bool, default False
        Take the diagonal as ones (not read).
    """

    kind = "cusparse_spsv"
    _NAME = "SpSV"

    def __init__(self, A, *, op="N", lower=True, unit_diagonal=False, _weak=False):
        self._setup(A, op, lower, unit_diagonal, _weak)

    def _rhs(self) -> str:
        return "x"

    def _heuristics(self) -> list[dict]:
        refuse_in_capture("planning SpSV", _ANALYSIS)
        dev = self._device
        s = as_stream(None, dev)
        n = self.matrix_shape[0]
        return self._prepare("SpSV", [(empty((n,), self.dtype, device=dev, stream=s), "x"),
                                      (empty((n,), self.dtype, device=dev, stream=s), "out")],
                             s)

    def execute(self, x, out=None, *, alpha=1.0, stream=None):
        """Queue the solve of ``op(A) @ out = alpha * x`` on ``stream``; returns ``out``
        (default a new vector).  ``x`` and ``out`` are contiguous vectors of ``A``'s dtype
        and length, and must not overlap."""
        op = "SpSV.execute"
        self._live()
        self.matrix     # noqa: B018 - raises when the matrix is gone
        dev, n = self._device, self.matrix_shape[0]
        x = operand(x, "x", op, device=dev, dtypes=(self.dtype,), ndim=1, contiguous=True,
                    stream=stream)
        if x.shape[0] != n:
            raise ValueError(f"{op}: x has length {x.shape[0]}; A is {self.matrix_shape}")
        # The scalar's array (if any) stays alive in _keep until the call is queued.
        a_p, _, _keep, _ = self._scalars(alpha, 0, op)
        s = self._stream(stream, op)
        if out is None:
            out = empty((n,), self.dtype, device=dev, stream=s)
        else:
            out = operand(out, "out", op, device=dev, dtypes=(self.dtype,), ndim=1,
                          contiguous=True, stream=stream)
            if out.shape[0] != n:
                raise ValueError(f"{op}: out has length {out.shape[0]}; A is "
                                 f"{self.matrix_shape}")
        self._solve_call(s, x, out, (self.op,), a_p)
        return out

    __call__ = execute


class SpSM(_Triangular):
    """Solve ``op(A) @ Y = alpha * op_b(B)`` for a triangular sparse ``A`` and a dense
    ``B`` of several right-hand sides (``cusparseSpSM``).

    Parameters
    ----------
    A : CSR or COO
    b : DeviceArray or CUDA array-like
        An example of ``B`` (2-D, ``A``'s dtype, row- or column-major); executions take
        arrays of its shape, strides and dtype, and write a C-contiguous ``Y`` (or ``out`` of
        ``Y``'s shape and ``b``'s layout kind).
    op, op_b : {"N", "T", "H"}
    lower, unit_diagonal : bool
    """

    kind = "cusparse_spsm"
    _NAME = "SpSM"

    def __init__(self, A, b, *, op="N", op_b="N", lower=True, unit_diagonal=False,
                 _weak=False):
        A = matrix_operand(A, "A", "SpSM")
        self.op_b = op_code(op_b, "SpSM: op_b")
        self._op_b_name = op_b.upper()
        bb = operand(b, "b", "SpSM", device=A.device, dtypes=(A.dtype,), ndim=2)
        dense_layout(bb, "b", "SpSM")
        rows, k = bb.shape if self.op_b == 0 else bb.shape[::-1]
        if rows != A.shape[0]:
            raise ValueError(f"SpSM: {op_b.upper()}(b) has {rows} rows; A is {A.shape}")
        self.b_desc = dense_desc(bb)
        self.out_shape = (rows, k)
        self._setup(A, op, lower, unit_diagonal, _weak)

    def _rhs(self) -> str:
        return f"{self._op_b_name}(b {self.b_desc[0]})"

    def _heuristics(self) -> list[dict]:
        refuse_in_capture("planning SpSM", _ANALYSIS)
        dev = self._device
        s = as_stream(None, dev)
        return self._prepare("SpSM", [(self._scratch_dense(self.b_desc, s), "b"),
                                      (empty(self.out_shape, self.dtype, device=dev, stream=s),
                                       "out")], s)

    def execute(self, b, out=None, *, alpha=1.0, stream=None):
        """Queue the solve on ``stream``; returns ``out`` (default a new C-contiguous
        array).  ``b`` must have the shape, strides and dtype the plan was made for."""
        op = "SpSM.execute"
        self._live()
        self.matrix     # noqa: B018 - raises when the matrix is gone
        dev = self._device
        b = operand(b, "b", op, device=dev, dtypes=(self.dtype,), ndim=2, stream=stream)
        if dense_desc(b) != self.b_desc:
            raise ValueError(f"{op}: b has shape {b.shape}, strides {b.strides}; the plan was "
                             f"made for shape {self.b_desc[0]}, strides {self.b_desc[1]}")
        # The scalar's array (if any) stays alive in _keep until the call is queued.
        a_p, _, _keep, _ = self._scalars(alpha, 0, op)
        s = self._stream(stream, op)
        if out is None:
            out = empty(self.out_shape, self.dtype, device=dev, stream=s)
        else:
            out = operand(out, "out", op, device=dev, dtypes=(self.dtype,), ndim=2,
                          contiguous=True, stream=stream)
            if out.shape != self.out_shape:
                raise ValueError(f"{op}: out has shape {out.shape}; the solution is "
                                 f"{self.out_shape}")
        self._solve_call(s, b, out, (self.op, self.op_b), a_p)
        return out

    __call__ = execute
