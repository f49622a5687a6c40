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
is validated once and kept in a prepared :class:`GemmPlan`, found in the one plan cache
(:data:`cudalibs.plan_cache`) under a ``"gemm"`` key; a repeated call looks the plan
up, checks the operands through the one operand path, allocates the output (stream-ordered)
and makes one ctypes call.  The handle is rebound only when the stream changes
(:mod:`cudalibs.cublas.handle`).

Which call: the floating-point GEMMs with the default algorithm go, by default, through a
``cublasLtMatmul`` whose algorithm the plan chose once (:func:`set_gemm_backend`):
``cublasGemmEx`` runs cuBLAS's algorithm selection on every call, which is most of a small
GEMM's host cost, while the same product through cuBLASLt with a prepared algorithm skips it.
Both compute in the same compute type with the same scale type, so they agree to rounding;
they need not agree bit for bit (another kernel may sum in another order).
``set_gemm_backend("cublas")`` keeps every call on ``cublasGemmEx``.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from ctypes import c_longlong, c_void_p

import numpy as np

from .. import dtypes as _dtypes
from ..driver import _lib as _drv
from ..driver.array import DeviceArray, byte_extent, empty
from ..driver.stream import Stream, as_stream
from ..runtime import front as _front
from ..runtime import options as _options
from ..runtime.options import CURRENT as _CURRENT
from ..runtime.options import PROCESS as _PROCESS
from ..runtime import relaunch as _relaunch
from ..runtime.cache import KeyKind
from ..runtime.operand import check_device, operand
from ..runtime.plan import Plan, scratch
from . import _lib
from ._base import raise_for, version
from ._common import (INT_MAX, SUPPORTED, GemmArgs, alignment, combo, gemm_args, scalar,
                      split_batch)
from .handle import WORKSPACE_BYTES, cublas_handle, thread_handle, workspace
from .lt import Matmul

__all__ = ["gemm", "gemm_strided_batched", "gemm_args", "GemmArgs", "SUPPORTED", "GEMM_ALGOS",
           "GemmPlan", "GEMM_KEY", "set_gemm_backend", "gemm_backend", "plan_for",
           "check_algo", "gemm_operands"]

#: Every ``cublasGemmAlgo_t`` :func:`tune_gemm` tries: DEFAULT, ALGO0..23,
#: DEFAULT_TENSOR_OP, ALGO0..15_TENSOR_OP.
GEMM_ALGOS = ((_lib.CUBLAS_GEMM_DEFAULT,)
              + tuple(range(_lib.CUBLAS_GEMM_ALGO0, _lib.CUBLAS_GEMM_ALGO23 + 1))
              + (_lib.CUBLAS_GEMM_DEFAULT_TENSOR_OP,)
              + tuple(range(_lib.CUBLAS_GEMM_ALGO0_TENSOR_OP,
                            _lib.CUBLAS_GEMM_ALGO15_TENSOR_OP + 1)))


def _algo_name(v: int) -> str:
    if v == _lib.CUBLAS_GEMM_DEFAULT:
        return "CUBLAS_GEMM_DEFAULT"
    if v == _lib.CUBLAS_GEMM_DEFAULT_TENSOR_OP:
        return "CUBLAS_GEMM_DEFAULT_TENSOR_OP"
    if v >= _lib.CUBLAS_GEMM_ALGO0_TENSOR_OP:
        return f"CUBLAS_GEMM_ALGO{v - _lib.CUBLAS_GEMM_ALGO0_TENSOR_OP}_TENSOR_OP"
    return f"CUBLAS_GEMM_ALGO{v}"


def check_algo(algo) -> int:
    if isinstance(algo, bool) or not isinstance(algo, (int, np.integer)) or \
            int(algo) not in GEMM_ALGOS:
        raise ValueError(f"algo must be None, 'tuned' or a cublasGemmAlgo_t value "
                         f"(-1, 0..23, 99, 100..115), not {algo!r}")
    return int(algo)


# -- which library runs the default GEMM ----------------------------------------------------
#: The inputs the cuBLASLt route takes (int8 and complex stay on cublasGemmEx).
_LT_TYPES = frozenset(t for t in (np.dtype(np.float16), np.dtype(np.float32),
                                  np.dtype(np.float64), _dtypes.bfloat16) if t is not None)
#: Pointer alignment the cuBLASLt route's algorithm assumes; a call with a less aligned
#: operand goes through cublasGemmEx.
_LT_ALIGN = 16


def set_gemm_backend(name: str) -> str:
    """Choose the library behind :func:`gemm` / :func:`gemm_strided_batched` calls with the
    default algorithm, process-wide; returns the previous choice.  The same as
    ``cudalibs.set_options(gemm_backend=name)`` (see :class:`cudalibs.Options`; within a block
    use :func:`cudalibs.option_context`).

    Parameters
    ----------
    name : {"auto", "cublas", "lt"}
        ``"auto"`` (the default, also ``$CUDALIBS_GEMM_BACKEND``) and ``"lt"``: float16,
        bfloat16, float32 and float64 products go through a cuBLASLt :class:`Matmul` with an
        algorithm chosen once per problem, where cuBLASLt has one and the operands are
        16-byte aligned; everything else and explicit algorithms through ``cublasGemmEx``.
        ``"cublas"``: always ``cublasGemmEx``.
    """
    if not isinstance(name, str):
        raise TypeError(f"set_gemm_backend: name must be a string, not {type(name).__name__}")
    return _options.set_options(gemm_backend=name.lower()).gemm_backend


def gemm_backend() -> str:
    """The gemm backend in force here (:attr:`cudalibs.Options.gemm_backend`)."""
    return _options.options().gemm_backend


# -- the plan --------------------------------------------------------------------------------
def _ext(e):
    # An empty extent becomes (0, -2**62): it then overlaps nothing.
    return (0, -(1 << 62)) if e is None or e[0] == e[1] else e


def _c_strides(shape, item):
    out, acc = [], item
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


class GemmPlan(Plan):
    """A prepared cuBLAS GEMM (``cublasGemmEx`` / ``cublasGemmStridedBatchedEx``): the
    row-major mapping, dtypes and scalars of one problem, and the ``cublasGemmAlgo_t`` it
    runs.

    :func:`gemm` and :func:`gemm_strided_batched` find these in the one plan cache; build one
    directly to hold, autotune or inspect it.  The candidates are :data:`GEMM_ALGOS`, the
    plan's own algorithm first; :meth:`autotune` times them with the one timer and keeps the
    fastest in the tuning store.

    Parameters
    ----------
    a, b : DeviceArray or CUDA array-like
        Examples of the operands (shapes, strides and dtypes are what matters).
    out : DeviceArray, optional
        Example of the output; default a new C-contiguous one.
    compute : str, optional
        As for :func:`gemm`.
    algo : int or "tuned", optional
        The algorithm to start from (default ``CUBLAS_GEMM_DEFAULT``).
    batched : bool, default False
        Allow 3-D operands (:func:`gemm_strided_batched`).
    """

    kind = "cublas_gemm"
    library = "cuBLAS"

    def __init__(self, a, b, out=None, *, compute=None, algo=None, batched: bool = False):
        a, b, out, dev = gemm_operands("GemmPlan", a, b, out)
        self._init_plan(dev)
        self._validate(a, b, out, compute, algo, batched)
        self._prepare(a, b, out)
        # The handle is per thread; what the plan owns are its recorded cublasGemmEx calls
        # and its cuBLASLt route (a Matmul plan with its own), closed with it.
        self._children = [self.relaunches]
        self._own(_close_children, self._children)

    # -- construction -------------------------------------------------------------------------
    def _validate(self, a, b, out, compute, algo, batched) -> None:
        # The one-shots (gemm, gemm_strided_batched, tune_gemm) check a problem's dtypes and
        # shapes here, on a cache miss: the messages name the plan.
        op = "GemmPlan"
        ab = a.dtype
        if b.dtype != ab:
            raise ValueError(f"{op}: a is {ab} but b is {b.dtype}: cuBLAS needs both inputs of "
                             f"one type (supported: {'; '.join(SUPPORTED)})")
        if compute is not None and not isinstance(compute, str):
            raise TypeError(f"compute must be a string such as 'tf32' or None, not {compute!r}")
        self.combo = row = combo(ab, None if out is None else out.dtype, compute)
        self.compute = compute
        hint = "; use cublas.gemv for matrix-vector products"
        ba, bsa, ashape, astr = split_batch(a.shape, a.strides, f"{op}: a", hint)
        bb, bsb, bshape, bstr = split_batch(b.shape, b.strides, f"{op}: b", hint)
        if not batched and (len(a.shape) != 2 or len(b.shape) != 2):
            raise ValueError(f"{op}: gemm takes matrices, but a is {a.shape} and b is "
                             f"{b.shape} (use gemm_strided_batched for stacks)")
        if ba != bb and ba != 1 and bb != 1:
            raise ValueError(f"batch sizes {ba} and {bb} do not broadcast")
        batch = max(ba, bb)
        bsa = 0 if ba == 1 else bsa
        bsb = 0 if bb == 1 else bsb
        M, K = ashape
        K2, N = bshape
        if K != K2:
            raise ValueError(f"{op}: inner dimensions differ: a is {a.shape}, b is {b.shape} "
                             f"({K} != {K2})")
        out_shape = (M, N) if len(a.shape) == 2 and len(b.shape) == 2 else (batch, M, N)
        item, oitem = ab.itemsize, row.c.itemsize
        if out is not None:
            if out.shape != out_shape:
                raise ValueError(f"out has shape {out.shape}; the product is {out_shape}")
            _, bso, _, out_strides = split_batch(out.shape, out.strides, "out")
        else:
            bso, out_strides = M * N * oitem, None
        args = gemm_args(ashape, astr, bshape, bstr, out_strides, item, oitem,
                         tn_only=ab.kind == "i")
        if batch > 1 and out is not None:
            extent = ((M - 1) * args.ldc + N) * oitem if M and N else 0
            if bso <= 0 or bso % oitem or bso < extent:
                raise ValueError(f"out's batch stride ({bso} bytes) must be positive and leave "
                                 f"the {batch} matrices apart ({extent} bytes each)")
        # A copied operand becomes C-contiguous (or column-major); its batch stride follows.
        if args.copy_a:
            bsa = M * K * item if ba > 1 else 0
        if args.copy_b:
            bsb = K * N * item if bb > 1 else 0
        for what, s in (("a", bsa), ("b", bsb)):
            if s % item or s < 0:
                raise ValueError(f"{what}'s batch stride ({s} bytes) must be a non-negative "
                                 "multiple of its item size (copy it first)")
        for name in ("m", "n", "k", "lda", "ldb", "ldc"):
            if getattr(args, name) > INT_MAX:
                raise ValueError(f"{name}={getattr(args, name)} exceeds cuBLAS's 32-bit int")
        if batch > INT_MAX:
            raise ValueError(f"batch {batch} exceeds cuBLAS's 32-bit int")
        if ab.kind == "i":
            bad = [f"{n}={getattr(args, n)}" for n in ("k", "lda", "ldb", "ldc")
                   if getattr(args, n) % 4]
            if bad:
                raise ValueError("an int8 GEMM needs k and every leading dimension to be a "
                                 f"multiple of 4; here {', '.join(bad)}")
        self.algo_default = _lib.CUBLAS_GEMM_DEFAULT if algo in (None, "tuned") else \
            check_algo(algo)
        self.wants_tuning = algo == "tuned"
        self.args, self.batch = args, batch
        self.sa, self.sb, self.sc = bsa // item, bsb // item, bso // oitem
        self.out_shape, self.out_dtype = out_shape, row.c

    def _prepare(self, a, b, out) -> None:
        """The hot path's flat tuple, scalars and extents; the operands' layouts for timing."""
        row, args, item = self.combo, self.args, self.combo.ab.itemsize
        self.abtype = _dtypes.lookup(row.ab).cuda
        self.ctype = _dtypes.lookup(row.c).cuda
        self.algo = self.algo_default
        self.one = scalar(1, row.scale, "alpha")
        self.zero = scalar(0, row.scale, "beta")
        self.one_p = c_void_p(ctypes.addressof(self.one))
        self.zero_p = c_void_p(ctypes.addressof(self.zero))
        self.memo = {}
        self.a_ext = byte_extent(a.shape, a.strides, item)
        self.b_ext = byte_extent(b.shape, b.strides, item)
        oitem = row.c.itemsize
        self.c_ext = None if out is None else byte_extent(out.shape, out.strides, oitem)
        # The layouts cuBLAS reads (after any copy), for scratch operands when timing.
        self.a_layout = (a.shape, _c_strides(a.shape, item) if args.copy_a else a.strides)
        if args.copy_b == "F":
            sw = _c_strides(b.shape[:-2] + b.shape[:-3:-1], item)
            bst = sw[:-2] + (sw[-1], sw[-2])
        elif args.copy_b:
            bst = _c_strides(b.shape, item)
        else:
            bst = b.strides
        self.b_layout = (b.shape, bst)
        self.out_layout = (self.out_shape, _c_strides(self.out_shape, oitem) if out is None
                           else out.strides)
        self.fast = (args.transa, args.transb, args.m, args.n, args.k, args.lda, args.ldb,
                     args.ldc, self.abtype, self.ctype, row.compute, c_longlong(self.sa),
                     c_longlong(self.sb), c_longlong(self.sc), self.batch,
                     not (self.batch == 1 and len(self.out_shape) == 2), *_ext(self.a_ext),
                     *_ext(self.b_ext), *_ext(self.c_ext), args.copy_a, args.copy_b)
        # The cuBLASLt route: built on first use (None), then a Matmul plan or False.
        self.lt_lock = threading.Lock()
        # The recorded cublasGemmEx calls, by call shape (the cuBLASLt route's are its
        # Matmul's).
        self.relaunches = _relaunch.RelaunchSlots()
        self.gemm_fn = _lib.get().unchecked(
            "cublasGemmStridedBatchedEx" if self.fast[15] else "cublasGemmEx")
        self.lt = None if (row.ab in _LT_TYPES and not args.copy_a and not args.copy_b
                           and min(args.m, args.n, args.k) > 0) else False
        self._a_desc = (a.shape, a.strides, a.dtype)
        self._b_desc = (b.shape, b.strides, b.dtype)

    def scalar(self, value, what):
        """``value`` in the scale type, memoised: a training loop repeats a few values.
        NaN never matches a key, so it always reaches the check in :func:`scalar`."""
        try:
            return self.memo[value]
        except (KeyError, TypeError):
            pass
        c = scalar(value, self.combo.scale, what)
        if len(self.memo) < 64 and isinstance(value, (int, float, complex)) and \
                not isinstance(value, bool):
            self.memo[value] = c
        return c

    # -- the plan protocol ------------------------------------------------------------------
    def _heuristics(self) -> list[dict]:
        first = self.algo_default
        order = (first,) + tuple(v for v in GEMM_ALGOS if v != first)
        return [{"name": _algo_name(v), "id": int(v), "workspace": 0} for v in order]

    def _select(self, i: int) -> None:
        self.algo = self._candidates[i]["id"]

    def _problem(self) -> str:
        x = self.args
        batch = f"{self.batch}x " if self.batch > 1 else ""
        return (f"{batch}{self.combo.ab.name}->{self.combo.c.name} m={x.m} n={x.n} k={x.k} "
                f"trans=({x.transa},{x.transb}) ld=({x.lda},{x.ldb},{x.ldc})")

    def _tuning_key(self):
        x = self.args
        return {"ab": self.combo.ab.name, "c": self.combo.c.name,
                "compute": int(self.combo.compute), "args": [int(v) for v in x[:8]],
                "batch": self.batch, "strides": [self.sa, self.sb, self.sc],
                "align": list(getattr(self, "align", ()) or ())}

    def _library_version(self) -> str:
        return ".".join(map(str, version()))

    @contextlib.contextmanager
    def _runner(self, stream):
        dev, dt = self._device, self.combo.ab
        a = scratch(self.a_layout[0], dt, dev, stream, strides=self.a_layout[1])
        b = scratch(self.b_layout[0], dt, dev, stream, strides=self.b_layout[1])
        # Timing writes a scratch output, never the caller's.
        c = scratch(self.out_layout[0], self.combo.c, dev, stream, strides=self.out_layout[1])
        cands = self._candidates
        _drv.get().cuCtxSetCurrent(dev.raw_context)
        h = cublas_handle(dev, stream.raw_handle)

        def run(i):
            st = _call(self, h, a.address, b.address, c.address, self.one, self.zero,
                       cands[i]["id"])
            if st:
                raise_for(st, "cublasGemmEx", f"{cands[i]['name']} on {self._problem()}")

        try:
            yield run
        finally:
            for x in (a, b, c):
                x.close()

    # -- relaunches -------------------------------------------------------------------------
    def relaunch_slots(self) -> list:
        return [self.relaunches] + (self.lt.relaunch_slots() if self.lt else [])

    def recording(self, key):
        """How to record a cublasGemmEx call shape (see :func:`_exec`) for relaunching."""
        algo_v, c_al, b_al, a_al, alpha_b, beta_b = key
        kind = type(self.one)
        alpha_c = self.one if alpha_b is None else kind.from_buffer_copy(alpha_b)
        beta_c = self.zero if beta_b is None else kind.from_buffer_copy(beta_b)
        dev = self._device
        set_ws = _lib.get().cublasSetWorkspace_v2

        def enqueue(cs, addrs):
            c, bp, ap, w = addrs
            h = thread_handle(dev)
            try:
                h.bind(cs.raw_handle)       # which resets the workspace: the probe next
                st = set_ws(h.raw, w, WORKSPACE_BYTES)
                if st:
                    raise_for(st, "cublasSetWorkspace_v2")
                st = _call(self, h.raw, ap, bp, c, alpha_c, beta_c, algo_v)
            finally:
                h.stream = None         # the next call binds its stream and workspace again
            if st:
                raise_for(st, "cublasGemmStridedBatchedEx" if self.fast[15] else
                          "cublasGemmEx", repr(self))

        return _relaunch.Recording(
            enqueue, (c_al, b_al, a_al, _relaunch.WORKSPACE_ALIGN),
            f"{'cublasGemmStridedBatchedEx' if self.fast[15] else 'cublasGemmEx'} "
            f"{self._problem()}", prepare=lambda cs: thread_handle(dev))

    # -- execution --------------------------------------------------------------------------
    def execute(self, a, b, out=None, *, alpha=1, beta=0, stream=None, replay=False):
        """Run the plan on operands of the shapes, strides and dtypes it was made for
        (``replay`` is accepted for compatibility: every repeated call relaunches).

        Returns
        -------
        DeviceArray
            ``out`` (a new array when not given).
        """
        self._live()
        a, b, out, dev = gemm_operands("GemmPlan.execute", a, b, out)
        check_device(a, self._device, "a", "GemmPlan.execute")
        if (a.shape, a.strides, a.dtype) != self._a_desc or \
                (b.shape, b.strides, b.dtype) != self._b_desc:
            raise ValueError(f"GemmPlan.execute: a {a.shape} {a.strides} and b {b.shape} "
                             f"{b.strides} do not match the plan's {self._a_desc[:2]} and "
                             f"{self._b_desc[:2]}")
        if out is not None and (self.c_ext is None or out.shape != self.out_layout[0] or
                                out.strides != self.out_layout[1] or
                                out.dtype != self.out_dtype):
            raise ValueError("GemmPlan.execute: out does not match the plan's output layout")
        if out is None and self.c_ext is not None:
            raise ValueError("GemmPlan.execute: this plan was made for a given out; pass out=")
        return _exec(self, a, b, out, alpha, beta, stream)

    @property
    def tuning(self) -> dict:
        """``{"algo", "ms", "times", "unsupported"}`` of the candidates timed so far."""
        times = {c["id"]: c["ms"] for c in self._candidates if c.get("ms") is not None}
        ok = {k: v for k, v in times.items() if v != float("inf")}
        return {"algo": self.algo, "ms": ok.get(self.algo), "times": ok,
                "unsupported": sorted(k for k, v in times.items() if v == float("inf"))}


def _close_children(children) -> None:
    """The release of a GEMM plan: the resources its cuBLASLt route made."""
    for c in children:
        c.close()
    children.clear()


def gemm_operands(op, a, b, out, stream=None):
    """The operands through the one operand path, all on ``a``'s device (a producer's stream
    ordered before ``stream``, the call's)."""
    a = operand(a, "a", op, stream=stream)
    dev = a.device
    b = operand(b, "b", op, device=dev, stream=stream)
    if out is not None:
        out = operand(out, "out", op, device=dev, stream=stream)
    return a, b, out, dev


#: The keys of :func:`gemm`'s plans in the one plan cache.  ``align`` is None except for
#: ``algo="tuned"``, whose choice depends on the operands' alignment.
GEMM_KEY = KeyKind("gemm", ("a_shape", "a_strides", "a_dtype", "b_shape", "b_strides",
                            "b_dtype", "out_shape", "out_strides", "out_dtype", "compute",
                            "algo", "batched", "device", "align"))


def _build(key, a, b, out, compute, algo, batched, align):
    """The miss path of the one front: a new plan, planned on first use (algo="tuned":
    autotuned), cached under ``key``."""
    p = GemmPlan(a, b, out, compute=compute, algo=algo, batched=batched)
    p.align = align
    return _front.insert(key, p, None)


def plan_for(op, a, b, out, compute, algo, batched, align=None):
    """The cached plan of a problem (the one front: lookup, then build on a miss)."""
    if out is None:
        key = (GEMM_KEY, a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype,
               None, None, None, compute, algo, batched, a.device, align)
    else:
        key = (GEMM_KEY, a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype,
               out.shape, out.strides, out.dtype, compute, algo, batched, a.device, align)
    return _lookup(key) or _build(key, a, b, out, compute, algo, batched, align)


def _run(a, b, out, alpha, beta, compute, algo, stream, batched):
    """Shared body of :func:`gemm` and :func:`gemm_strided_batched`."""
    op = "gemm_strided_batched" if batched else "gemm"
    if type(a) is not DeviceArray or type(b) is not DeviceArray or (
            out is not None and type(out) is not DeviceArray):
        a, b, out, _ = gemm_operands(op, a, b, out, stream)
    else:
        a = operand(a, "a", op)
        b = operand(b, "b", op)
        if out is not None:
            out = operand(out, "out", op)
    dev = a.device
    if b.device is not dev:
        check_device(b, dev, "b", op)
    if out is not None and out.device is not dev:
        check_device(out, dev, "out", op)
    align = None
    if algo == "tuned" and out is not None:
        align = (alignment(a.address), alignment(b.address), alignment(out.address))
    p = plan_for("gemm", a, b, out, compute, algo, batched, align)
    return _exec(p, a, b, out, alpha, beta, stream)


def _exec(p, a, b, out, alpha, beta, stream):
    """Run plan ``p`` on operands already matched to it (the hot path)."""
    (ta, tb, m, n, k, lda, ldb, ldc, abtype, ctype, ctype_compute, sa, sb, sc, batch,
     strided, alo, ahi, blo, bhi, clo, chi, copy_a, copy_b) = p.fast
    dev = p.device
    # The defaults (the ints 1 and 0) use the plan's prepared scalars.
    if type(alpha) is int and alpha == 1:
        alpha_c = p.one
    else:
        alpha_c = p.scalar(alpha, "alpha")
    if type(beta) is int and beta == 0:
        beta_c = p.zero
    else:
        beta_c = p.scalar(beta, "beta")
    if type(stream) is Stream and stream.device is dev and not stream.closed:
        s = stream
    else:
        s = as_stream(stream, dev)
    if out is None:
        if beta_c is not p.zero and beta != 0:
            raise ValueError("gemm: beta != 0 accumulates into out, so out must be given")
        out = empty(p.out_shape, p.out_dtype, device=dev, stream=s)
        c_ptr = out.address
    else:
        c_ptr = out.address
        # spans_overlap inlined: empty extents have hi far below any address.
        lo, hi, pa, pb = c_ptr + clo, c_ptr + chi, a.address, b.address
        if (lo < pa + ahi and pa + alo < hi) or (lo < pb + bhi and pb + blo < hi):
            raise ValueError("gemm: out overlaps an input; cuBLAS reads the inputs while "
                             "writing out, so they must not share memory")
    if m == 0 or n == 0:
        return out              # nothing to compute (cuBLAS would return at once too)
    if copy_a:
        a = a.copy(s)
    if copy_b:
        b = _copy_operand(b, copy_b, s)
    if p.wants_tuning and not p.tuned:
        p.autotune(stream=s)
    algo_v = p.algo
    a_ptr, b_ptr = a.address, b.address
    if p.lt is not False and algo_v == _lib.CUBLAS_GEMM_DEFAULT and not p.wants_tuning and \
            not (a_ptr | b_ptr | c_ptr) & (_LT_ALIGN - 1) and \
            (_CURRENT.get() or _PROCESS[0]).gemm_backend != "cublas":
        mm = p.lt if p.lt is not None else _lt_prepare(p)
        if mm:
            if alpha_c is p.one and beta_c is p.zero:
                st = mm._run(mm._algo, a_ptr, b_ptr, c_ptr, c_ptr, s)
            else:
                st = mm._run(mm._algo, a_ptr, b_ptr, c_ptr, c_ptr, s, (),
                             c_void_p(ctypes.addressof(alpha_c)),
                             c_void_p(ctypes.addressof(beta_c)))
            if st:
                raise_for(st, "cublasLtMatmul", repr(p))
            return out
    _drv.get().cuCtxSetCurrent(dev.raw_context)
    h = cublas_handle(dev, s.raw_handle)
    if (_CURRENT.get() or _PROCESS[0]).relaunch:
        ws = workspace(dev, s.raw_handle)
        if not ws & _WS_MASK:
            # The call shape: the algorithm, each operand's alignment (cuBLAS picks kernels
            # by it), and scalars other than the plan's (their values are baked into the
            # kernels).
            key = (algo_v, min(c_ptr & -c_ptr, 256), min(b_ptr & -b_ptr, 256),
                   min(a_ptr & -a_ptr, 256), None if alpha_c is p.one else bytes(alpha_c),
                   None if beta_c is p.zero else bytes(beta_c))
            if p.relaunches.launch(key, (c_ptr, b_ptr, a_ptr, ws), s, p, dev):
                return out
    st = _call(p, h, a_ptr, b_ptr, c_ptr, alpha_c, beta_c, algo_v)
    if st:
        raise_for(st, "cublasGemmStridedBatchedEx" if strided else "cublasGemmEx", repr(p))
    return out


_WS_MASK = _relaunch.WORKSPACE_ALIGN - 1
_lookup = _front.lookup


def run_matched(p, a, b, out, alpha, beta, stream):
    """Queue GemmPlan ``p`` on DeviceArrays already matched to its layouts (:func:`gemm`'s
    hot path, no checks of the operands against the plan): for the cuBLAS modules that hold
    GemmPlans of their own (:class:`~cudalibs.cublas.GroupedGemm`'s per-group GEMMs)."""
    return _exec(p, a, b, out, alpha, beta, stream)


def prepare_route(p) -> None:
    """Make GemmPlan ``p``'s cuBLASLt route now, where the gemm backend takes it, rather than
    on its first call (which may be inside a graph capture)."""
    if p.lt is None and gemm_backend() != "cublas":
        _lt_prepare(p)


def _lt_prepare(p):
    """Build plan ``p``'s cuBLASLt route: a :class:`~cudalibs.cublas.Matmul` of the same
    problem with its heuristic's first algorithm, kept by the plan and closed with it; False
    (kept) when cuBLASLt offers no algorithm for it."""
    # Once per plan, under its lock: two threads preparing at once would each make a Matmul.
    with p.lt_lock:
        if p.lt is not None:
            return p.lt
        row = p.combo
        a_shape, a_strides, dt = p._a_desc
        b_shape, b_strides, _ = p._b_desc
        try:
            mm = Matmul((a_shape, dt, a_strides), (b_shape, dt, b_strides),
                        out=(p.out_layout[0], row.c, p.out_layout[1]), compute=p.compute,
                        device=p.device, min_alignment=_LT_ALIGN, max_candidates=1).plan()
        except (ValueError, TypeError, ArithmeticError, OSError):
            p.lt = False
            return False
        except Exception as exc:   # noqa: BLE001 - a library refusal: stay on cublasGemmEx
            if type(exc).__name__ != "CublasError":
                raise
            p.lt = False
            return False
        p._children.append(mm)
        p.lt = mm
        return mm


def _call(p, h, a_ptr, b_ptr, c_ptr, alpha_c, beta_c, algo_v, stream_h=None) -> int:
    """The cuBLAS call of plan ``p`` on raw handle ``h`` (bound to its stream); the
    status."""
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
        return p.gemm_fn(
            h, ta, tb, m, n, k, alpha_p, c_void_p(b_ptr), abtype, lda, sb, c_void_p(a_ptr),
            abtype, ldb, sa, beta_p, c_void_p(c_ptr), ctype, ldc, sc, batch, ctype_compute,
            algo_v)
    return p.gemm_fn(
        h, ta, tb, m, n, k, alpha_p, c_void_p(b_ptr), abtype, lda, c_void_p(a_ptr), abtype,
        ldb, beta_p, c_void_p(c_ptr), ctype, ldc, ctype_compute, algo_v)


def _copy_operand(x, mode, s):
    """A copy of ``x`` laid out as ``gemm_args`` asked: C order, or column-major matrices
    (``"F"``) for the TN-only int8 path."""
    if mode == "F":
        swap = (0, 2, 1) if x.ndim == 3 else (1, 0)
        return x.transpose(*swap).copy(s).transpose(*swap)
    return x.copy(s)


def gemm(a, b, out=None, *, alpha=1, beta=0, compute=None, algo=None, stream=None,
         replay=False, options=None):
    """Matrix product ``out = alpha * a @ b + beta * out`` through cuBLASLt or cuBLAS.

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
        Accepted for compatibility and ignored: every repeated call of a problem now costs
        about one graph launch of host time, whatever its addresses (the library's kernels
        are recorded on the second call and relaunched, :mod:`cudalibs.runtime.relaunch`),
        with the result of the library call.
    options : Options or dict, optional
        :class:`cudalibs.Options` for this call (``{"gemm_backend": "cublas"}``, ...).

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
    if options is not None:
        with _options.option_context(options):
            return _run(a, b, out, alpha, beta, compute, algo, stream, False)
    return _run(a, b, out, alpha, beta, compute, algo, stream, False)


def gemm_strided_batched(a, b, out=None, *, alpha=1, beta=0, compute=None, algo=None,
                         stream=None, replay=False, options=None):
    """Batched matrix products ``out[i] = alpha * a[i] @ b[i] + beta * out[i]``.

    One ``cublasGemmStridedBatchedEx`` call.  ``a`` is ``(batch, M, K)`` or ``(M, K)``, ``b``
    is ``(batch, K, N)`` or ``(K, N)``; as in ``numpy.matmul``, a 2-D operand (or a batch of
    1) is used for every product, through a batch stride of 0, without a copy.  Each matrix
    of an operand follows the layout rules of :func:`gemm`.

    Parameters
    ----------
    a, b : DeviceArray or CUDA array-like
    out : DeviceArray, shape (batch, M, N), optional
    alpha, beta, compute, algo, stream, replay, options
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
    if options is not None:
        with _options.option_context(options):
            return _run(a, b, out, alpha, beta, compute, algo, stream, True)
    return _run(a, b, out, alpha, beta, compute, algo, stream, True)
