"""Sparse plans on the one plan protocol: the base, SpMV, SpMM and SDDMM.

Each plan is a :class:`~cudalibs.runtime.plan.Plan` of one problem on one sparse matrix:
**construct** (validate; no library call), **plan** (the matrix's own cuSPARSE descriptor,
dense descriptors, the buffer size of each algorithm cuSPARSE offers for the format that
``deterministic`` admits -- an algorithm it refuses there is left out), **autotune** (optional: the one timer over those
algorithms, the choice kept in the tuning store), **execute**, **close**.

Work buffers.  Every execution takes its buffer from the device's stream-ordered pool on the
call's stream and frees it right after queueing, as cuFFT's plans do: reuse on that stream
is ordered after the call, a captured execution records an allocation and a free node, and
two threads never share a buffer.  cuSPARSE's optional preprocessing (``*_preprocess``)
binds a buffer to the plan for its whole life and would make concurrent executions share it,
so these plans do not use it; the analysis the triangular solves need is another matter
(:mod:`.solve`).

Threads.  A plan's descriptors carry the dense operands' addresses, which each execution
sets; an execution does that and queues the call under the plan's lock (host calls only,
never across GPU work), on the calling thread's cuSPARSE handle (one per device and thread,
bound to the call's stream when it changes).  So threads share a plan.

Determinism.  cuSPARSE documents few of its algorithms as giving bitwise-identical results
from run to run (:data:`DETERMINISTIC`); the others may add into one output element from
several threads at once (atomics), so the last bits of a sum depend on the order the threads
happen to run in -- from one call to the next, and between threads sharing a plan.  Only
``op(A) = A`` has such algorithms: with a transposed ``A`` every SpMV and SpMM algorithm
scatters its sums (``CSR_ALG2`` and ``COO_ALG2`` then run as their ``ALG1``), and cuSPARSE
names none for CSC.  SpMV and SpMM take ``deterministic``:

- ``None`` (the default): where cuSPARSE offers a deterministic algorithm for the problem,
  only those are candidates (so an autotune chooses among them); where it offers none, every
  algorithm is, and the plan's :attr:`~SparsePlan.deterministic` is False.  An algorithm
  named by ``alg=`` runs as named.
- ``True``: only deterministic algorithms; a problem that has none is refused when the plan
  is made, before any library call.
- ``False``: every algorithm cuSPARSE offers, the fastest by an autotune (cuSPARSE
  documents its SpMV ALG1s as faster than the deterministic ALG2s).

SDDMM has one algorithm, documented deterministic.

A plan made by a one-shot function refers to its matrix weakly (the plan cache must not keep
matrices alive) and is unusable once the matrix is gone; a plan made by the user holds it.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import weakref

import numpy as np

from .. import dtypes as _dtypes
from .._ffi import refuse_in_capture
from ..driver import _lib as _drv
from ..driver.array import empty
from ..driver.stream import as_stream
from ..errors import ClosedError
from ..runtime.handles import refuse_if_capturing
from ..runtime.operand import operand
from ..runtime.plan import Plan, scratch
from . import _lib
from ._base import raise_for, version
from .handle import cusparse_handle
from .matrix import SparseMatrix, dense_descriptor, dense_layout, descriptor, matrix_operand

__all__ = ["SparsePlan", "SpMV", "SpMM", "SDDMM", "OPS", "SPMV_ALGS", "SPMM_ALGS",
           "DETERMINISTIC", "deterministic_algorithms"]

#: ``op=`` values and the cuSPARSE operation each means.
OPS = {"N": _lib.CUSPARSE_OPERATION_NON_TRANSPOSE, "T": _lib.CUSPARSE_OPERATION_TRANSPOSE,
       "H": _lib.CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE}
#: SpMV algorithms offered per format, cuSPARSE's default first.
SPMV_ALGS = {
    "csr": ("CUSPARSE_SPMV_ALG_DEFAULT", "CUSPARSE_SPMV_CSR_ALG1", "CUSPARSE_SPMV_CSR_ALG2"),
    "csc": ("CUSPARSE_SPMV_ALG_DEFAULT", "CUSPARSE_SPMV_CSR_ALG1", "CUSPARSE_SPMV_CSR_ALG2"),
    "coo": ("CUSPARSE_SPMV_ALG_DEFAULT", "CUSPARSE_SPMV_COO_ALG1", "CUSPARSE_SPMV_COO_ALG2"),
    "bsr": ("CUSPARSE_SPMV_ALG_DEFAULT", "CUSPARSE_SPMV_BSR_ALG1"),
}
#: SpMM algorithms offered per format, cuSPARSE's default first.
SPMM_ALGS = {
    "csr": ("CUSPARSE_SPMM_ALG_DEFAULT", "CUSPARSE_SPMM_CSR_ALG1", "CUSPARSE_SPMM_CSR_ALG2",
            "CUSPARSE_SPMM_CSR_ALG3"),
    "csc": ("CUSPARSE_SPMM_ALG_DEFAULT", "CUSPARSE_SPMM_CSR_ALG1"),
    "coo": ("CUSPARSE_SPMM_ALG_DEFAULT", "CUSPARSE_SPMM_COO_ALG1", "CUSPARSE_SPMM_COO_ALG2",
            "CUSPARSE_SPMM_COO_ALG3", "CUSPARSE_SPMM_COO_ALG4"),
    "bsr": ("CUSPARSE_SPMM_ALG_DEFAULT", "CUSPARSE_SPMM_BSR_ALG1"),
}
#: The algorithms cuSPARSE documents as giving bitwise-identical results for each run, by
#: operation and format, all for ``op(A) = A`` only (see :func:`deterministic_algorithms`):
#: SpMV ``CSR_ALG2``, ``COO_ALG2``, ``BSR_ALG1``; SpMM ``CSR_ALG3`` (CSR only, not with
#: ``op_b="H"``), ``COO_ALG2``, ``BSR_ALG1``; SDDMM's one algorithm.  ``ALG_DEFAULT`` carries
#: no such promise, nor does any CSC algorithm.
DETERMINISTIC = {
    "SpMV": {"csr": ("CUSPARSE_SPMV_CSR_ALG2",), "coo": ("CUSPARSE_SPMV_COO_ALG2",),
             "bsr": ("CUSPARSE_SPMV_BSR_ALG1",)},
    "SpMM": {"csr": ("CUSPARSE_SPMM_CSR_ALG3",), "coo": ("CUSPARSE_SPMM_COO_ALG2",),
             "bsr": ("CUSPARSE_SPMM_BSR_ALG1",)},
    "SDDMM": {"csr": ("CUSPARSE_SDDMM_ALG_DEFAULT",), "bsr": ("CUSPARSE_SDDMM_ALG_DEFAULT",)},
}
_PLANNING = "planning asks cuSPARSE for buffer sizes on scratch operands allocated synchronously"
_N = _lib.CUSPARSE_OPERATION_NON_TRANSPOSE
_H = _lib.CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE


def deterministic_algorithms(kind: str, fmt: str, op_a: int, op_b: int = _N) -> tuple:
    """The algorithms cuSPARSE documents as bitwise reproducible for operation ``kind``
    ("SpMV", "SpMM", "SDDMM") on format ``fmt`` with operations ``op_a`` (on the sparse
    matrix; SDDMM: the first dense factor) and ``op_b``; empty where it documents none."""
    if kind == "SDDMM":
        return DETERMINISTIC[kind].get(fmt, ())
    if op_a != _N or (kind == "SpMM" and fmt == "csr" and op_b == _H):
        return ()
    return DETERMINISTIC[kind].get(fmt, ())


def _why_none(kind: str, fmt: str, op_a: int) -> tuple[str, str]:
    """Why cuSPARSE has no deterministic ``kind`` algorithm for this problem, and the way
    to a problem that has one."""
    if op_a != _N:
        return (f"with a transposed A every cuSPARSE {kind} algorithm adds into an output "
                "element from several threads at once (atomics)",
                "give the transposed matrix as a CSR matrix of its own (scipy: A.T.tocsr())")
    if fmt == "csc":
        return ("cuSPARSE documents no algorithm on CSC as deterministic",
                "give the matrix as CSR (scipy: A.tocsr())")
    return ("CUSPARSE_SPMM_CSR_ALG3, the deterministic one on CSR, does not take op_b='H'",
            "give B's conjugate transpose as an array of its own")


def algorithms(kind: str, fmt: str, offered: tuple, alg, deterministic, op_a: int,
               op_b: int, problem: str) -> tuple[tuple, tuple, object]:
    """Check ``alg`` and ``deterministic`` for a plan of ``kind`` and give ``(algorithms,
    the deterministic ones, the mode)``: the candidates to ask cuSPARSE about, in order.

    Raises
    ------
    TypeError
        ``deterministic`` is not True, False or None.
    ValueError
        ``alg`` is not offered for the format, or ``deterministic=True`` asks for what
        cuSPARSE does not document (no deterministic algorithm for the problem, or ``alg``
        not one).
    """
    if deterministic is not None and not isinstance(deterministic, (bool, np.bool_)):
        raise TypeError(f"{kind}: deterministic must be True, False or None, not "
                        f"{deterministic!r}")
    mode = None if deterministic is None else bool(deterministic)
    det = deterministic_algorithms(kind, fmt, op_a, op_b)
    if alg is not None:
        if alg not in offered:
            raise ValueError(f"{kind}: alg {alg!r} is not offered for {fmt}: "
                             f"{', '.join(offered)}")
        if mode is True and alg not in det:
            raise ValueError(f"{kind}: alg {alg!r} is not deterministic for {problem} (cuSPARSE "
                             f"documents {', '.join(det) or 'none'} as deterministic there); "
                             "drop deterministic=True or pick another")
        offered = (alg,)
    if mode is True and not det:
        why, instead = _why_none(kind, fmt, op_a)
        raise ValueError(f"{kind}: no deterministic algorithm for {problem}: {why}; pass "
                         "deterministic=False to accept results whose last bits may differ "
                         f"from run to run, or {instead}")
    return offered, det, mode


def check_bsr_op(kind: str, fmt: str, op_a: int, name: str) -> None:
    """cuSPARSE's BSR SpMV and SpMM (``BSR_ALG1``, which their default runs on BSR) take
    ``op(A) = A`` only: refused here, before it asks for every algorithm's buffer size in
    vain."""
    if fmt == "bsr" and op_a != _N:
        raise ValueError(f"{kind}: cuSPARSE's BSR {kind} takes {name}='N' only; give the "
                         "transposed matrix as one of its own (scipy: A.T.tobsr())")


def op_code(op, what: str) -> int:
    """The cuSPARSE operation of ``op`` ("N", "T", "H", case-insensitive)."""
    code = OPS.get(op.upper()) if isinstance(op, str) else None
    if code is None:
        raise ValueError(f"{what} must be 'N', 'T' or 'H', not {op!r}")
    return code


def scalar(value, dtype: np.dtype, what: str):
    """A host scalar of the compute type, for cuSPARSE's HOST pointer mode."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, complex,
                                                                      np.number)):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if dtype.kind != "c" and isinstance(value, (complex, np.complexfloating)):
        if complex(value).imag:
            raise TypeError(f"{what} is complex ({value}) but the problem is {dtype}")
        value = complex(value).real
    return np.array(value, dtype=dtype)


def dense_desc(a) -> tuple:
    """``(shape, strides, dtype)`` of a dense operand: what a plan is made for."""
    return (a.shape, a.strides, a.dtype)


def _free(descs: list, bufs: list) -> None:
    while descs:
        descs.pop().close()
    while bufs:
        bufs.pop().close()


class SparsePlan(Plan):
    """Base of the sparse plans: the matrix (held or weakly referred to), owned descriptors,
    the locked launch on the thread's handle with a pool buffer."""

    library = "cuSPARSE"
    #: The algorithms of :attr:`_algs` documented deterministic, and the ``deterministic``
    #: argument (None, True or False); set by the constructor of a plan that offers several.
    _det: tuple = ()
    _mode = None

    def _init_sparse(self, matrix: SparseMatrix, *, weak: bool) -> None:
        self._init_plan(matrix.device)
        self._matrix = weakref.ref(matrix) if weak else matrix
        self._weak = weak
        self._token = matrix.token
        self.format = matrix.format
        self.dtype = matrix.dtype
        self._cuda = _dtypes.lookup(matrix.dtype).cuda
        self._lock = threading.Lock()
        self._descs: list = []
        self._bufs: list = []
        self._ws = 0
        # The candidate a timing run of this thread asks for (autotune), else the choice.
        self._trial = threading.local()
        self._own(_free, self._descs, self._bufs, ctx=matrix.device.raw_context)

    @property
    def matrix(self) -> SparseMatrix:
        """The sparse matrix the plan runs on."""
        m = self._matrix() if self._weak else self._matrix
        if m is None or m.closed:
            raise ClosedError(f"{type(self).__name__}: its sparse matrix was closed or "
                              "collected")
        return m

    def usable(self) -> bool:
        if not self._finalizer.alive:
            return False
        m = self._matrix() if self._weak else self._matrix
        return m is not None and not m.closed

    def _library_version(self) -> str:
        return ".".join(map(str, version()))

    @property
    def deterministic(self):
        """Whether the algorithm :meth:`execute` runs is one cuSPARSE documents as giving
        bitwise-identical results for each run (None before :meth:`plan`; False where
        cuSPARSE documents nothing, as for the triangular solves and SpGEMM)."""
        if not 0 <= self._choice < len(self._candidates):
            return None
        return bool(self._candidates[self._choice].get("deterministic", False))

    def _workspace_bytes(self) -> int:
        if 0 <= self._choice < len(self._candidates):
            return int(self._candidates[self._choice].get("workspace", 0))
        return 0

    def _keep(self, d):
        self._descs.append(d)
        return d

    def _select(self, i: int) -> None:
        self._ws = int(self._candidates[i].get("workspace", 0))

    def _stream(self, stream, op):
        s = as_stream(stream, self._device, what=f"{op}: stream")
        if not self._planned:
            refuse_if_capturing(s.raw_handle, self._device, f"planning {type(self).__name__}",
                                _PLANNING)
            self.plan()
        return s

    def _scratch_dense(self, desc, s):
        shape, strides, dt = desc
        return scratch(shape, dt, self._device, s, strides)

    def _offer(self, names, size_of, refused: list) -> list[dict]:
        """Candidates among algorithm ``names`` (in order): each whose buffer size cuSPARSE
        gives (``size_of(alg) -> bytes``); one it refuses is left out and noted in
        ``refused`` as ``(name, why)``."""
        out = []
        for name in names:
            alg = getattr(_lib, name, None)
            if alg is None:
                refused.append((name, "not in these bindings"))
                continue
            try:
                ws = size_of(alg)
            except Exception as exc:   # noqa: BLE001 - an algorithm the format or layout lacks
                refused.append((name, getattr(exc, "name", None) or type(exc).__name__))
                continue
            out.append({"name": name, "id": name, "alg": alg, "workspace": ws,
                        "deterministic": name in self._det})
        return out

    def _choose(self, kind: str, size_of) -> list[dict]:
        """The candidates of this plan's ``deterministic`` mode (see the module notes): the
        deterministic algorithms cuSPARSE takes, unless the mode is False; the others only
        when the mode is False, or None and cuSPARSE takes no deterministic one."""
        refused: list = []
        det = [n for n in self._algs if n in self._det]
        out = self._offer(det, size_of, refused) if self._mode is not False else []
        if not out and self._mode is not True:
            tried = {n for n, _ in refused}
            out = self._offer([n for n in self._algs if n not in tried], size_of, refused)
        if not out:
            which = "deterministic algorithm" if self._mode is True else "algorithm"
            why = "; ".join(f"{n}: {w}" for n, w in refused) or "none offered"
            raise ValueError(f"{kind}: cuSPARSE takes no {which} for {self._problem()} ({why})")
        return out

    def _sizes(self, kind: str, examples, order, ops) -> list[dict]:
        """Plan a product ``kind`` ("SpMV", "SpMM", "SDDMM"): the matrix's descriptor
        (``_sp``), those of scratch arrays like the dense ``examples`` (``[((shape,
        strides, dtype), name)]``; ``_dn``), and the buffer size of each algorithm offered.
        ``order(sparse, *dense)`` puts the descriptors in the call's order; ``ops`` are the
        call's operations."""
        refuse_in_capture(f"planning {kind}", _PLANNING)
        dev = self._device
        s = as_stream(None, dev)
        arrays = [self._scratch_dense(d, s) for d, _ in examples]
        try:
            _drv.get().cuCtxSetCurrent(dev.raw_context)
            self._sp = self._keep(descriptor(self.matrix))
            self._dn = [self._keep(dense_descriptor(a, name, kind))
                        for a, (_, name) in zip(arrays, examples)]
            mats = order(self._sp.raw, *(d.raw for d in self._dn))
            h = cusparse_handle(dev, s.raw_handle)
            one, zero = scalar(1, self.dtype, "alpha"), scalar(0, self.dtype, "beta")
            fn = f"cusparse{kind}_bufferSize"
            query = getattr(_lib.get(), fn)

            def size(alg):
                n = ctypes.c_size_t()
                st = query(h, *ops, one.ctypes.data, mats[0], mats[1], zero.ctypes.data,
                           mats[2], self._cuda, alg, ctypes.byref(n))
                if st:
                    raise_for(st, fn, repr(self))
                return n.value
            try:
                return self._choose(kind, size)
            except BaseException:
                # Planning may be tried again: the next try makes its own descriptors.
                while self._descs:
                    self._descs.pop().close()
                raise
        finally:
            for a in arrays:
                a.close()

    def _launch(self, s, setters, call, fn: str) -> None:
        """Queue one call on stream ``s``: take the buffer from the pool, then under the
        lock write the operands' addresses (``setters``: ``(function, descriptor,
        address)``) and make ``call(handle, alg, buffer)``; the buffer goes back after."""
        dev = self._device
        i = getattr(self._trial, "i", None)
        cand = self._candidates[self._choice if i is None else i]
        ws = cand["workspace"]
        buf = dev.memory_pool.allocate(ws, s) if ws else None
        L = _lib.get()
        try:
            with self._lock:
                _drv.get().cuCtxSetCurrent(dev.raw_context)
                h = cusparse_handle(dev, s.raw_handle)
                for f, d, p in setters:
                    st = getattr(L, f)(d, p or None)
                    if st:
                        raise_for(st, f, repr(self))
                st = call(h, cand["alg"], buf.ptr if buf is not None else None)
        finally:
            if buf is not None:
                buf.close()
        if st:
            raise_for(st, fn, repr(self))

    def _trial_runner(self, go):
        """``run(i)`` for the one timer: ``go()`` with candidate ``i`` in this thread only."""
        def run(i):
            self._trial.i = i
            try:
                go()
            finally:
                self._trial.i = None
        return run

    def _problem(self) -> str:
        return f"{self.format} {self.matrix_shape} {np.dtype(self.dtype).name}"


class SpMV(SparsePlan):
    """``y = alpha * op(A) @ x + beta * y`` (``cusparseSpMV``) for one sparse matrix.

    Parameters
    ----------
    A : CSR, CSC, COO or BSR
        The matrix (held by the plan).
    op : {"N", "T", "H"}, default "N"
        ``A``, its transpose, or its conjugate transpose (BSR: "N" only).
    alg : str, optional
        One cuSPARSE algorithm (``"CUSPARSE_SPMV_CSR_ALG2"``); by default the algorithms
        cuSPARSE offers for the format that ``deterministic`` admits are the candidates
        (:meth:`autotune` times them), in :data:`SPMV_ALGS`' order.
    deterministic : bool or None, default None
        None: only the algorithms cuSPARSE documents as bitwise reproducible where it has
        any for the problem (``CSR_ALG2``, ``COO_ALG2``, ``BSR_ALG1``, all for ``op="N"``),
        else every one; True: only those, refused here where there are none; False: every
        one (see the module notes).  :attr:`deterministic` tells what the plan runs.

    Notes
    -----
    ``x`` and ``y`` are contiguous vectors of ``A``'s dtype.  The compute type is the
    value type.
    """

    kind = "cusparse_spmv"

    def __init__(self, A, *, op="N", alg=None, deterministic=None, _weak=False):
        A = matrix_operand(A, "A", "SpMV")
        self.op = op_code(op, "SpMV: op")
        self._op_name = op.upper()
        check_bsr_op("SpMV", A.format, self.op, "op")
        problem = f"{self._op_name}({A.format} {A.shape}) @ x"
        self._algs, self._det, self._mode = algorithms(
            "SpMV", A.format, SPMV_ALGS[A.format], alg, deterministic, self.op, _N, problem)
        rows, cols = A.shape
        self.matrix_shape = A.shape
        self.n_in, self.n_out = (cols, rows) if self.op == 0 else (rows, cols)
        self._init_sparse(A, weak=_weak)

    def _problem(self) -> str:
        return f"{self._op_name}({self.format} {self.matrix_shape}) @ x, {self.dtype}"

    def _tuning_key(self):
        m = self.matrix
        return ["spmv", m.format, m.shape, m.nnz, str(m.index_dtype), str(self.dtype),
                self._op_name, {"deterministic": self._mode, "algs": list(self._algs)}]

    def _heuristics(self) -> list[dict]:
        return self._sizes("SpMV", [(((self.n_in,), None, self.dtype), "x"),
                                    (((self.n_out,), None, self.dtype), "out")],
                           lambda sp_, x, y: (sp_, x, y), (self.op,))

    def execute(self, x, out=None, *, alpha=1.0, beta=0.0, stream=None):
        """Queue ``out = alpha * op(A) @ x + beta * out`` on ``stream``.

        Parameters
        ----------
        x : DeviceArray or CUDA array-like
            Contiguous, of the matrix's dtype, of length ``op(A).shape[1]``.
        out : DeviceArray or CUDA array-like, optional
            Contiguous, of length ``op(A).shape[0]``, not overlapping ``x``; default a new
            array (``beta`` must then be 0).
        alpha, beta : number
        stream : Stream, optional

        Returns
        -------
        DeviceArray
            ``out``.
        """
        op = "SpMV.execute"
        self._live()
        m = self.matrix
        dev = self._device
        x = operand(x, "x", op, device=dev, dtypes=(self.dtype,), ndim=1, contiguous=True,
                    stream=stream)
        if x.shape[0] != self.n_in:
            raise ValueError(f"{op}: x has length {x.shape[0]}; {self._op_name}(A) of shape "
                             f"{m.shape} takes {self.n_in}")
        a, b = scalar(alpha, self.dtype, f"{op}: alpha"), scalar(beta, self.dtype, f"{op}: beta")
        s = self._stream(stream, op)
        if out is None:
            if b != 0:
                raise ValueError(f"{op}: beta is {beta} but no out was given to scale")
            out = empty((self.n_out,), self.dtype, device=dev, stream=s)
        else:
            out = operand(out, "out", op, device=dev, dtypes=(self.dtype,), ndim=1,
                          contiguous=True, stream=stream)
            if out.shape[0] != self.n_out:
                raise ValueError(f"{op}: out has length {out.shape[0]}; {self._op_name}(A) of "
                                 f"shape {m.shape} writes {self.n_out}")
        L = _lib.get()
        ad, xd, yd = self._sp.raw, self._dn[0].raw, self._dn[1].raw
        self._launch(s, (("cusparseDnVecSetValues", xd, x.address),
                         ("cusparseDnVecSetValues", yd, out.address)),
                     lambda h, alg, buf: L.cusparseSpMV(h, self.op, a.ctypes.data, ad, xd,
                                                         b.ctypes.data, yd, self._cuda, alg,
                                                         buf), "cusparseSpMV")
        return out

    __call__ = execute

    @contextlib.contextmanager
    def _runner(self, stream):
        dev = self._device
        x = scratch((self.n_in,), self.dtype, dev, stream)
        y = scratch((self.n_out,), self.dtype, dev, stream)

        try:
            yield self._trial_runner(lambda: self.execute(x, y, stream=stream))
        finally:
            x.close()
            y.close()


def _dense_check(arr, desc, name: str, op: str) -> None:
    if dense_desc(arr) != desc:
        raise ValueError(f"{op}: {name} has shape {arr.shape}, strides {arr.strides}, dtype "
                         f"{arr.dtype}; the plan was made for shape {desc[0]}, strides "
                         f"{desc[1]}, dtype {desc[2]}")


class _DensePair(SparsePlan):
    """What SpMM and SDDMM share: two dense operands of fixed layouts, one of them written
    (or read and written), autotuned over the algorithms offered."""

    def _dense_operands(self, b, out, op, out_shape, b_name="b"):
        """Examples checked: ``b`` (2-D, the dtype) and ``out`` (default C-contiguous)."""
        b = operand(b, b_name, op, device=self._dev0, dtypes=(self.dtype,), ndim=2)
        dense_layout(b, b_name, op)
        if out is None:
            strides = (out_shape[1] * self.dtype.itemsize, self.dtype.itemsize)
            out_desc = (out_shape, strides, self.dtype)
        else:
            out = operand(out, "out", op, device=b.device, dtypes=(self.dtype,), ndim=2)
            dense_layout(out, "out", op)
            out_desc = dense_desc(out)
        return dense_desc(b), out_desc

    @contextlib.contextmanager
    def _runner(self, stream):
        args = [self._scratch_dense(d, stream) for d in self._run_descs()]

        try:
            yield self._trial_runner(lambda: self.execute(*args, stream=stream))
        finally:
            for a in args:
                a.close()


class SpMM(_DensePair):
    """``C = alpha * op_a(A) @ op_b(B) + beta * C`` (``cusparseSpMM``): a sparse matrix
    times a dense one.

    Parameters
    ----------
    A : CSR, CSC, COO or BSR
    b : DeviceArray or CUDA array-like
        An example of ``B``: 2-D, ``A``'s dtype, row- or column-major; every execution takes
        arrays of exactly its shape, strides and dtype.
    out : DeviceArray or CUDA array-like, optional
        An example of ``C``; default a C-contiguous ``(op_a(A).shape[0], op_b(B).shape[1])``.
    op_a, op_b : {"N", "T", "H"}
        BSR takes ``op_a="N"`` only.
    alg : str, optional
        One algorithm; by default those cuSPARSE offers for the format and layouts that
        ``deterministic`` admits are the candidates, in :data:`SPMM_ALGS`' order, and
        :meth:`autotune` picks the fastest (kept in the tuning store).
    deterministic : bool or None, default None
        None: only the algorithms cuSPARSE documents as bitwise reproducible where it has
        any for the problem (``CSR_ALG3``, ``COO_ALG2``, ``BSR_ALG1``, all for
        ``op_a="N"``), else every one; True: only those, refused here where there are none;
        False: every one (see the module notes).
    """

    kind = "cusparse_spmm"

    def __init__(self, A, b, out=None, *, op_a="N", op_b="N", alg=None, deterministic=None,
                 _weak=False):
        op = "SpMM"
        A = matrix_operand(A, "A", op)
        self.dtype = A.dtype
        self._dev0 = A.device
        self.op_a, self.op_b = op_code(op_a, f"{op}: op_a"), op_code(op_b, f"{op}: op_b")
        self._ops = (op_a.upper(), op_b.upper())
        check_bsr_op(op, A.format, self.op_a, "op_a")
        rows, cols = A.shape
        m, k = (rows, cols) if self.op_a == 0 else (cols, rows)
        b_arr = operand(b, "b", op, device=A.device, dtypes=(A.dtype,), ndim=2)
        kb, n = b_arr.shape if self.op_b == 0 else b_arr.shape[::-1]
        if kb != k:
            raise ValueError(f"{op}: {self._ops[0]}(A) has shape {(m, k)}, {self._ops[1]}(b) "
                             f"{(kb, n)}: inner sizes differ")
        self.b_desc, self.out_desc = self._dense_operands(b_arr, out, op, (m, n))
        if self.out_desc[0] != (m, n):
            raise ValueError(f"{op}: out has shape {self.out_desc[0]}; the product is "
                             f"{(m, n)}")
        problem = f"{self._ops[0]}({A.format} {A.shape}) @ {self._ops[1]}(b)"
        self._algs, self._det, self._mode = algorithms(
            op, A.format, SPMM_ALGS[A.format], alg, deterministic, self.op_a, self.op_b,
            problem)
        if alg is None and (self.op_a != _N or self.op_b == _H):
            # cuSPARSE documents CSR_ALG3 for op_a="N" without op_b="H" only; asked anyway,
            # it refuses, and says so on stderr.
            self._algs = tuple(a for a in self._algs if a != "CUSPARSE_SPMM_CSR_ALG3")
        self.matrix_shape = A.shape
        self._init_sparse(A, weak=_weak)

    def _problem(self) -> str:
        return (f"{self._ops[0]}({self.format} {self.matrix_shape}) @ {self._ops[1]}(b "
                f"{self.b_desc[0]}), {self.dtype}")

    def _tuning_key(self):
        m = self.matrix
        return ["spmm", m.format, m.shape, m.nnz, str(m.index_dtype), str(self.dtype),
                self._ops, self.b_desc[:2], self.out_desc[:2],
                {"deterministic": self._mode, "algs": list(self._algs)}]

    def _run_descs(self):
        return (self.b_desc, self.out_desc)

    def _heuristics(self) -> list[dict]:
        return self._sizes("SpMM", [(self.b_desc, "b"), (self.out_desc, "out")],
                           lambda sp_, b, c: (sp_, b, c), (self.op_a, self.op_b))

    def execute(self, b, out=None, *, alpha=1.0, beta=0.0, stream=None):
        """Queue ``out = alpha * op_a(A) @ op_b(b) + beta * out`` on ``stream``.

        ``b`` and ``out`` must have the shape, strides and dtype the plan was made for;
        ``out`` defaults to a new C-contiguous array (for a plan made so; ``beta`` must then
        be 0).  Returns ``out``.
        """
        op = "SpMM.execute"
        self._live()
        self.matrix     # noqa: B018 - raises when the matrix is gone
        dev = self._device
        b = operand(b, "b", op, device=dev, dtypes=(self.dtype,), ndim=2, stream=stream)
        _dense_check(b, self.b_desc, "b", op)
        a, bt = scalar(alpha, self.dtype, f"{op}: alpha"), scalar(beta, self.dtype, f"{op}: beta")
        s = self._stream(stream, op)
        out = self._out(out, bt, beta, s, op, stream)
        L = _lib.get()
        ad, bd, cd = self._sp.raw, self._dn[0].raw, self._dn[1].raw
        self._launch(s, (("cusparseDnMatSetValues", bd, b.address),
                         ("cusparseDnMatSetValues", cd, out.address)),
                     lambda h, alg, buf: L.cusparseSpMM(h, self.op_a, self.op_b, a.ctypes.data,
                                                         ad, bd, bt.ctypes.data, cd, self._cuda,
                                                         alg, buf), "cusparseSpMM")
        return out

    __call__ = execute

    def _out(self, out, bt, beta, s, op, stream):
        if out is None:
            shape, strides, dt = self.out_desc
            if strides != (shape[1] * dt.itemsize, dt.itemsize):
                raise ValueError(f"{op}: this plan was made for a strided out; pass out=")
            if bt != 0:
                raise ValueError(f"{op}: beta is {beta} but no out was given to scale")
            return empty(shape, dt, device=self._device, stream=s)
        out = operand(out, "out", op, device=self._device, dtypes=(self.dtype,), ndim=2,
                      stream=stream)
        _dense_check(out, self.out_desc, "out", op)
        return out


class SDDMM(_DensePair):
    """Sampled dense-dense product (``cusparseSDDMM``): ``C = alpha * (op_a(a) @ op_b(b))``
    at ``C``'s stored entries ``+ beta * C``, written into ``C``'s values in place.

    Parameters
    ----------
    a, b : DeviceArray or CUDA array-like
        Examples of the dense factors (2-D, ``C``'s dtype, row- or column-major).
    C : CSR or BSR
        The sparse matrix whose pattern is sampled and whose values are written.
    op_a, op_b : {"N", "T", "H"}

    Notes
    -----
    cuSPARSE's one SDDMM algorithm is documented deterministic: each sampled entry is one
    dot product.
    """

    kind = "cusparse_sddmm"

    def __init__(self, a, b, C, *, op_a="N", op_b="N", _weak=False):
        op = "SDDMM"
        C = matrix_operand(C, "C", op)
        if C.format not in ("csr", "bsr"):
            raise ValueError(f"{op}: C is {C.format}; cuSPARSE samples CSR and BSR matrices")
        self.dtype = C.dtype
        self._dev0 = C.device
        self.op_a, self.op_b = op_code(op_a, f"{op}: op_a"), op_code(op_b, f"{op}: op_b")
        self._ops = (op_a.upper(), op_b.upper())
        aa = operand(a, "a", op, device=C.device, dtypes=(C.dtype,), ndim=2)
        bb = operand(b, "b", op, device=C.device, dtypes=(C.dtype,), ndim=2)
        m, k = aa.shape if self.op_a == 0 else aa.shape[::-1]
        kb, n = bb.shape if self.op_b == 0 else bb.shape[::-1]
        if kb != k or (m, n) != C.shape:
            raise ValueError(f"{op}: {self._ops[0]}(a) {(m, k)} @ {self._ops[1]}(b) {(kb, n)} "
                             f"does not give C's shape {C.shape}")
        dense_layout(aa, "a", op)
        dense_layout(bb, "b", op)
        self.a_desc, self.b_desc = dense_desc(aa), dense_desc(bb)
        self._algs = ("CUSPARSE_SDDMM_ALG_DEFAULT",)
        self._det = deterministic_algorithms(op, C.format, self.op_a, self.op_b)
        self.matrix_shape = C.shape
        self._init_sparse(C, weak=_weak)

    def _problem(self) -> str:
        return (f"{self._ops[0]}(a {self.a_desc[0]}) @ {self._ops[1]}(b {self.b_desc[0]}) at "
                f"{self.format} {self.matrix_shape}, {self.dtype}")

    def _tuning_key(self):
        m = self.matrix
        return ["sddmm", m.format, m.shape, m.nnz, str(self.dtype), self._ops,
                self.a_desc[:2], self.b_desc[:2]]

    def _run_descs(self):
        return (self.a_desc, self.b_desc)

    def _heuristics(self) -> list[dict]:
        return self._sizes("SDDMM", [(self.a_desc, "a"), (self.b_desc, "b")],
                           lambda sp_, a, b: (a, b, sp_), (self.op_a, self.op_b))

    def execute(self, a, b, *, alpha=1.0, beta=0.0, stream=None) -> SparseMatrix:
        """Queue the sampled product into ``C``'s values on ``stream``; returns ``C``."""
        op = "SDDMM.execute"
        self._live()
        C = self.matrix
        dev = self._device
        a = operand(a, "a", op, device=dev, dtypes=(self.dtype,), ndim=2, stream=stream)
        b = operand(b, "b", op, device=dev, dtypes=(self.dtype,), ndim=2, stream=stream)
        _dense_check(a, self.a_desc, "a", op)
        _dense_check(b, self.b_desc, "b", op)
        al, bt = scalar(alpha, self.dtype, f"{op}: alpha"), scalar(beta, self.dtype, f"{op}: beta")
        s = self._stream(stream, op)
        L = _lib.get()
        cd, ad, bd = self._sp.raw, self._dn[0].raw, self._dn[1].raw
        self._launch(s, (("cusparseDnMatSetValues", ad, a.address),
                         ("cusparseDnMatSetValues", bd, b.address)),
                     lambda h, alg, buf: L.cusparseSDDMM(h, self.op_a, self.op_b,
                                                          al.ctypes.data, ad, bd, bt.ctypes.data,
                                                          cd, self._cuda, alg, buf),
                     "cusparseSDDMM")
        return C

    __call__ = execute

