"""Sparse plans on the one plan protocol: the base, SpMV, SpMM and SDDMM.

Each plan is a :class:`~cudalibs.runtime.plan.Plan` of one problem on one sparse matrix:
**construct** (validate; no library call), **plan** (the matrix's own cuSPARSE descriptor,
dense descriptors, the buffer size of each algorithm cuSPARSE offers for the format that
``deterministic`` admits -- an algorithm it refuses there is left out), **autotune**
(optional: the one timer over those algorithms, the choice kept in the tuning store),
**execute**, **close**.

Work buffers.  Every execution takes its buffer from the device's stream-ordered pool on the
call's stream and frees it right after queueing, as cuFFT's plans do: reuse on that stream
is ordered after the call, a captured execution records an allocation and a free node, and
two threads never share a buffer; an algorithm that needs none makes no pool call at all.
cuSPARSE's optional preprocessing (``*_preprocess``) binds a buffer to the plan for its
whole life and would make concurrent executions share it, so these plans do not use it; the
analysis the triangular solves need is another matter (:mod:`.solve`).

Threads.  A plan's descriptors carry the dense operands' addresses; under the plan's lock an
execution writes those that differ from the last ones written (``cusparseDn*SetValues`` is
skipped for an operand at the same address as before) and queues the call (host calls only,
never across GPU work), on the calling thread's cuSPARSE handle (one per device and thread,
bound to the call's stream when it changes).  So threads share a plan.

The hot path.  Planning prepares what every execution passes: the library functions, the
raw descriptors, and ``alpha = 1`` / ``beta = 0`` as read-only host scalars of the compute
type, used whenever an execution is called with those values (other values get scalars of
their own for that call).  An execution checks its operands, makes the device's context
current (cuSPARSE launches into the current context, which other code on the thread may
have changed), and queues.

Algorithms and determinism (:mod:`.algs`).  SpMV and SpMM take ``deterministic``:

- ``False`` (the default): every algorithm cuSPARSE offers for the format is a candidate;
  an autotune picks the fastest, and without one the plan runs the first cuSPARSE takes --
  ``ALG_DEFAULT``, what cuSPARSE recommends (for a CSR SpMV that is ``CSR_ALG1``, faster than
  the deterministic ``CSR_ALG2``).  Results may differ in their last bits from run to run,
  and between threads sharing a plan: several of these algorithms add into one output
  element from several threads at once (atomics), so the order of a sum is the order the
  threads happen to run in.
- ``True``: only the algorithms cuSPARSE documents as bitwise reproducible
  (:data:`~.algs.DETERMINISTIC`); a problem that has none -- any transposed ``A``, CSC,
  Blocked-ELL, CSR with ``op_b="H"`` -- is refused when the plan is made, before any
  library call.

An algorithm named by ``alg=`` runs as named (with ``deterministic=True`` it must be a
deterministic one).  A plan's :attr:`~SparsePlan.deterministic` says whether the algorithm
it runs is documented deterministic, whichever way it was chosen.  SDDMM has one algorithm,
documented deterministic.

Value types: the matrix's, computed in it -- but float16 and bfloat16 (Blocked-ELL SpMM
only) are computed in float32, with ``alpha`` and ``beta`` float32.

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
from .algs import (DETERMINISTIC, OPS, SPMM_ALGS, SPMV_ALGS, algorithms, check_blocked_ell_spmm,
                   check_op_a, compute_dtype, deterministic_algorithms, op_code)
from .handle import cusparse_handle
from .matrix import SparseMatrix, dense_descriptor, dense_layout, descriptor, matrix_operand

__all__ = ["SparsePlan", "SpMV", "SpMM", "SDDMM", "OPS", "SPMV_ALGS", "SPMM_ALGS",
           "DETERMINISTIC", "deterministic_algorithms", "unit_scalars", "scalar", "op_code",
           "dense_desc"]

_PLANNING = "planning asks cuSPARSE for buffer sizes on scratch operands allocated synchronously"
_N = _lib.CUSPARSE_OPERATION_NON_TRANSPOSE
_H = _lib.CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE
#: ``(address of 1, address of 0, the arrays)`` by compute type (see :func:`unit_scalars`).
_UNITS: dict = {}


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


def unit_scalars(dtype) -> tuple[int, int]:
    """The addresses of a 1 and a 0 of ``dtype``: read-only host scalars made once per type
    and kept for the life of the process, the ``alpha`` and ``beta`` of most calls."""
    dt = np.dtype(dtype)
    units = _UNITS.get(dt)
    if units is None:
        one, zero = np.ones((), dt), np.zeros((), dt)
        one.flags.writeable = zero.flags.writeable = False
        units = _UNITS.setdefault(dt, (one.ctypes.data, zero.ctypes.data, one, zero))
    return units[0], units[1]


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
    #: The algorithms of :attr:`_algs` documented deterministic, and whether only those may
    #: run (``deterministic=``); set by the constructor of a plan that offers several.
    _det: tuple = ()
    _mode = False

    def _init_sparse(self, matrix: SparseMatrix, *, weak: bool) -> None:
        self._init_plan(matrix.device)
        self._matrix = weakref.ref(matrix) if weak else matrix
        self._weak = weak
        self._token = matrix.token
        self.format = matrix.format
        self.dtype = matrix.dtype
        self._compute_dtype = compute_dtype(matrix.dtype)
        self._cuda = _dtypes.lookup(self._compute_dtype).cuda
        self._units = unit_scalars(self._compute_dtype)
        self._lock = threading.Lock()
        self._descs: list = []
        self._bufs: list = []
        self._ws = 0
        #: ``(algorithm, workspace bytes)`` of the choice, what an execution runs.
        self._run = None
        #: The address each dense descriptor holds, as last written (under the lock).
        self._last: list = []
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
        bitwise-identical results for each run, however it was chosen (None before
        :meth:`plan`; False where cuSPARSE documents nothing, as for the triangular solves
        and SpGEMM)."""
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
        self._run = self._trial(i)

    def _trial(self, i: int) -> tuple:
        """``(algorithm, workspace bytes)`` of candidate ``i``."""
        c = self._candidates[i]
        return c["alg"], int(c.get("workspace", 0))

    def _stream(self, stream, op):
        s = as_stream(stream, self._device, what=f"{op}: stream")
        if not self._planned:
            refuse_if_capturing(s.raw_handle, self._device, f"planning {type(self).__name__}",
                                _PLANNING)
            self.plan()
        return s

    def _scalars(self, alpha, beta, op: str):
        """``(alpha's address, beta's address, arrays to keep alive, beta is 0)`` of host
        scalars of the compute type.  ``alpha == 1`` and ``beta == 0`` given as Python
        numbers (the defaults) are the plan's read-only constants."""
        ta, tb = type(alpha), type(beta)
        if (ta is float or ta is int) and (tb is float or tb is int) and alpha == 1 \
                and beta == 0:
            return self._units[0], self._units[1], None, True
        a = scalar(alpha, self._compute_dtype, f"{op}: alpha")
        b = scalar(beta, self._compute_dtype, f"{op}: beta")
        return a.ctypes.data, b.ctypes.data, (a, b), not b

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
        """The candidates of this plan's ``deterministic`` mode (see the module notes): every
        algorithm offered that cuSPARSE takes, or with ``deterministic=True`` the
        deterministic ones only."""
        refused: list = []
        names = [n for n in self._algs if n in self._det] if self._mode else self._algs
        out = self._offer(names, size_of, refused)
        if not out:
            which = "deterministic algorithm" if self._mode else "algorithm"
            why = "; ".join(f"{n}: {w}" for n, w in refused) or "none offered"
            raise ValueError(f"{kind}: cuSPARSE takes no {which} for {self._problem()} ({why})")
        return out

    def _sizes(self, kind: str, examples, order, ops, setter: str) -> list[dict]:
        """Plan a product ``kind`` ("SpMV", "SpMM", "SDDMM"): the matrix's descriptor
        (``_sp``), those of scratch arrays like the dense ``examples`` (``[((shape,
        strides, dtype), name)]``; ``_dn``, whose addresses ``setter`` writes), and the
        buffer size of each algorithm offered.  ``order(sparse, *dense)`` puts the
        descriptors in the call's order; ``ops`` are the call's operations."""
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
            one, zero = self._units
            fn = f"cusparse{kind}_bufferSize"
            L = _lib.get()
            query = getattr(L, fn)

            def size(alg):
                n = ctypes.c_size_t()
                st = query(h, *ops, one, mats[0], mats[1], zero, mats[2], self._cuda, alg,
                           ctypes.byref(n))
                if st:
                    raise_for(st, fn, repr(self))
                return n.value
            try:
                cands = self._choose(kind, size)
            except BaseException:
                # Planning may be tried again: the next try makes its own descriptors.
                while self._descs:
                    self._descs.pop().close()
                raise
            # What every execution passes around its scalars: (ops, alpha, the first two
            # descriptors, beta, the last one, the compute type).
            self._call = (getattr(L, f"cusparse{kind}"), f"cusparse{kind}")
            self._head, self._mid, self._tail = tuple(ops), mats[:2], (mats[2], self._cuda)
            self._bind(self._dn, setter)
            return cands
        finally:
            for a in arrays:
                a.close()

    def _bind(self, dense, setter: str) -> None:
        """Prepare the hot path once the descriptors exist: the function that writes an
        address into the ``dense`` descriptors (``setter``), their raw handles, the
        addresses they hold (none known yet), the context and pool each execution uses."""
        self._set = (getattr(_lib.get(), setter), setter)
        self._set_raw = tuple(d.raw for d in dense)
        self._last = [None] * len(dense)
        self._ctx_set = _drv.get().cuCtxSetCurrent
        self._ctx = self._device.raw_context
        self._pool = self._device.memory_pool

    def _launch(self, s, run, addrs, call, args, tail=None) -> None:
        """Queue ``fn(handle, *args, algorithm, buffer)`` (``call``: ``(fn, name)``;
        ``tail`` in the buffer's place if given) on stream ``s`` with candidate ``run``
        (``(algorithm, workspace bytes)``): the buffer from the pool on ``s`` (none for an
        algorithm that needs none), then under the lock each dense descriptor whose address
        differs from ``addrs`` rewritten and the call queued; the buffer goes back after."""
        alg, ws = run
        buf = self._pool.allocate(ws, s) if ws else None
        try:
            self._ctx_set(self._ctx)
            h = cusparse_handle(self._device, s.raw_handle)
            with self._lock:
                last = self._last
                for i, p in enumerate(addrs):
                    if last[i] != p:
                        last[i] = None          # unknown until the write succeeds
                        st = self._set[0](self._set_raw[i], p or None)
                        if st:
                            raise_for(st, self._set[1], repr(self))
                        last[i] = p
                st = call[0](h, *args, alg, tail if tail is not None else
                             buf.ptr if buf is not None else None)
        finally:
            if buf is not None:
                buf.close()
        if st:
            raise_for(st, call[1], repr(self))

    @contextlib.contextmanager
    def _runner(self, stream):
        """``run(i)`` for the one timer: candidate ``i`` on scratch operands like the plan's,
        in the timing thread only (the choice stays as it is for other threads)."""
        args = [self._scratch_dense(d, stream) for d in self._run_descs()]
        try:
            yield lambda i: self._execute(*args, 1.0, 0.0, stream, self._trial(i))
        finally:
            for a in args:
                a.close()

    def _problem(self) -> str:
        return f"{self.format} {self.matrix_shape} {np.dtype(self.dtype).name}"


class SpMV(SparsePlan):
    """``y = alpha * op(A) @ x + beta * y`` (``cusparseSpMV``) for one sparse matrix.

    Parameters
    ----------
    A : CSR, CSC, COO or BSR
        The matrix (held by the plan).  cuSPARSE's SpMV does not take Blocked-ELL.
    op : {"N", "T", "H"}, default "N"
        ``A``, its transpose, or its conjugate transpose (BSR: "N" only).
    alg : str, optional
        One cuSPARSE algorithm (``"CUSPARSE_SPMV_CSR_ALG2"``); by default every algorithm
        cuSPARSE offers for the format that ``deterministic`` admits is a candidate, in
        :data:`SPMV_ALGS`' order (cuSPARSE's default first: what runs without
        :meth:`autotune`, which times them all).
    deterministic : bool, default False
        True: only the algorithms cuSPARSE documents as bitwise reproducible (``CSR_ALG2``,
        ``COO_ALG2``, ``BSR_ALG1``, all for ``op="N"``; slower), refused here where there are
        none; False: every one (see the module notes).  :attr:`deterministic` tells what the
        plan runs.

    Notes
    -----
    ``x`` and ``y`` are contiguous vectors of ``A``'s dtype.  The compute type is the
    value type.
    """

    kind = "cusparse_spmv"

    def __init__(self, A, *, op="N", alg=None, deterministic=False, _weak=False):
        A = matrix_operand(A, "A", "SpMV")
        if A.format not in SPMV_ALGS:
            raise ValueError("SpMV: A is Blocked-ELL, which cuSPARSE's SpMV does not take "
                             "(it takes CSR, CSC, COO and BSR); multiply by a one-column b "
                             "with SpMM, or give A in another format (A.to_scipy() is BSR)")
        self.op = op_code(op, "SpMV: op")
        self._op_name = op.upper()
        check_op_a("SpMV", A.format, self.op, "op")
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

    def _run_descs(self):
        return (((self.n_in,), None, self.dtype), ((self.n_out,), None, self.dtype))

    def _heuristics(self) -> list[dict]:
        x, y = self._run_descs()
        return self._sizes("SpMV", [(x, "x"), (y, "out")], lambda sp_, x, y: (sp_, x, y),
                           (self.op,), "cusparseDnVecSetValues")

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
        return self._execute(x, out, alpha, beta, stream, None)

    __call__ = execute

    def _execute(self, x, out, alpha, beta, stream, run):
        """:meth:`execute` with candidate ``run`` (``(algorithm, workspace)``; None: the
        choice)."""
        op = "SpMV.execute"
        self._live()
        m = self.matrix
        dev = self._device
        x = operand(x, "x", op, device=dev, dtypes=(self.dtype,), ndim=1, contiguous=True,
                    stream=stream)
        if x.shape[0] != self.n_in:
            raise ValueError(f"{op}: x has length {x.shape[0]}; {self._op_name}(A) of shape "
                             f"{m.shape} takes {self.n_in}")
        # The scalars' arrays (if any) stay alive in _keep until the call is queued.
        a_p, b_p, _keep, zero = self._scalars(alpha, beta, op)
        s = self._stream(stream, op)
        if out is None:
            if not zero:
                raise ValueError(f"{op}: beta is {beta} but no out was given to scale")
            out = empty((self.n_out,), self.dtype, device=dev, stream=s)
        else:
            out = operand(out, "out", op, device=dev, dtypes=(self.dtype,), ndim=1,
                          contiguous=True, stream=stream)
            if out.shape[0] != self.n_out:
                raise ValueError(f"{op}: out has length {out.shape[0]}; {self._op_name}(A) of "
                                 f"shape {m.shape} writes {self.n_out}")
        self._launch(s, run or self._run, (x.address, out.address), self._call,
                     (*self._head, a_p, *self._mid, b_p, *self._tail))
        return out


def _dense_check(arr, desc, name: str, op: str) -> None:
    if (arr.shape, arr.strides, arr.dtype) != desc:
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


class SpMM(_DensePair):
    """``C = alpha * op_a(A) @ op_b(B) + beta * C`` (``cusparseSpMM``): a sparse matrix
    times a dense one.

    Parameters
    ----------
    A : CSR, CSC, COO, BSR or BlockedELL
    b : DeviceArray or CUDA array-like
        An example of ``B``: 2-D, ``A``'s dtype, row- or column-major; every execution takes
        arrays of exactly its shape, strides and dtype.
    out : DeviceArray or CUDA array-like, optional
        An example of ``C``; default a C-contiguous ``(op_a(A).shape[0], op_b(B).shape[1])``.
    op_a, op_b : {"N", "T", "H"}
        BSR and Blocked-ELL take ``op_a="N"`` only; Blocked-ELL takes ``op_b`` "N" or "T".
    alg : str, optional
        One algorithm; by default every one cuSPARSE offers for the format and layouts that
        ``deterministic`` admits is a candidate, in :data:`SPMM_ALGS`' order (cuSPARSE's
        default first: what runs without :meth:`autotune`, which picks the fastest and keeps
        it in the tuning store).
    deterministic : bool, default False
        True: only the algorithms cuSPARSE documents as bitwise reproducible (``CSR_ALG3``,
        ``COO_ALG2``, ``BSR_ALG1``, all for ``op_a="N"``; often much slower), refused here
        where there are none (CSC, Blocked-ELL, a transposed ``A``, CSR with ``op_b="H"``);
        False: every one (see the module notes).

    Notes
    -----
    Blocked-ELL (:class:`~cudalibs.cusparse.BlockedELL`) runs on tensor cores: float16
    from compute capability 7.0, bfloat16, float32 and float64 from 8.0, refused here on an
    older device; float16 and bfloat16 are computed in float32 and written in their own type,
    and float32 is multiplied at TF32 precision (errors near 1e-4; BSR and CSR keep float32's
    accuracy).
    """

    kind = "cusparse_spmm"

    def __init__(self, A, b, out=None, *, op_a="N", op_b="N", alg=None, deterministic=False,
                 _weak=False):
        op = "SpMM"
        A = matrix_operand(A, "A", op)
        self.dtype = A.dtype
        self._dev0 = A.device
        self.op_a, self.op_b = op_code(op_a, f"{op}: op_a"), op_code(op_b, f"{op}: op_b")
        self._ops = (op_a.upper(), op_b.upper())
        check_op_a(op, A.format, self.op_a, "op_a")
        check_blocked_ell_spmm(A, self.op_b)
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
                           lambda sp_, b, c: (sp_, b, c), (self.op_a, self.op_b),
                           "cusparseDnMatSetValues")

    def execute(self, b, out=None, *, alpha=1.0, beta=0.0, stream=None):
        """Queue ``out = alpha * op_a(A) @ op_b(b) + beta * out`` on ``stream``.

        ``b`` and ``out`` must have the shape, strides and dtype the plan was made for;
        ``out`` defaults to a new C-contiguous array (for a plan made so; ``beta`` must then
        be 0).  Returns ``out``.
        """
        return self._execute(b, out, alpha, beta, stream, None)

    __call__ = execute

    def _execute(self, b, out, alpha, beta, stream, run):
        op = "SpMM.execute"
        self._live()
        self.matrix     # noqa: B018 - raises when the matrix is gone
        dev = self._device
        b = operand(b, "b", op, device=dev, dtypes=(self.dtype,), ndim=2, stream=stream)
        _dense_check(b, self.b_desc, "b", op)
        # The scalars' arrays (if any) stay alive in _keep until the call is queued.
        a_p, b_p, _keep, zero = self._scalars(alpha, beta, op)
        s = self._stream(stream, op)
        out = self._out(out, zero, beta, s, op, stream)
        self._launch(s, run or self._run, (b.address, out.address), self._call,
                     (*self._head, a_p, *self._mid, b_p, *self._tail))
        return out

    def _out(self, out, zero, beta, s, op, stream):
        if out is None:
            shape, strides, dt = self.out_desc
            if strides != (shape[1] * dt.itemsize, dt.itemsize):
                raise ValueError(f"{op}: this plan was made for a strided out; pass out=")
            if not zero:
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
        cuSPARSE's SDDMM takes no other format (no Blocked-ELL).
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
                           lambda sp_, a, b: (a, b, sp_), (self.op_a, self.op_b),
                           "cusparseDnMatSetValues")

    def execute(self, a, b, *, alpha=1.0, beta=0.0, stream=None) -> SparseMatrix:
        """Queue the sampled product into ``C``'s values on ``stream``; returns ``C``."""
        return self._execute(a, b, alpha, beta, stream, None)

    __call__ = execute

    def _execute(self, a, b, alpha, beta, stream, run):
        op = "SDDMM.execute"
        self._live()
        C = self.matrix
        dev = self._device
        a = operand(a, "a", op, device=dev, dtypes=(self.dtype,), ndim=2, stream=stream)
        b = operand(b, "b", op, device=dev, dtypes=(self.dtype,), ndim=2, stream=stream)
        _dense_check(a, self.a_desc, "a", op)
        _dense_check(b, self.b_desc, "b", op)
        # The scalars' arrays (if any) stay alive in _keep until the call is queued.
        a_p, b_p, _keep, _ = self._scalars(alpha, beta, op)
        s = self._stream(stream, op)
        self._launch(s, run or self._run, (a.address, b.address), self._call,
                     (*self._head, a_p, *self._mid, b_p, *self._tail))
        return C
