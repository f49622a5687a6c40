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
(:data:`cudalibs.driver.plan.cache`) under a ``"gemm"`` key; a repeated call looks the plan
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
import os
import threading
import weakref
from ctypes import c_longlong, c_size_t, c_void_p

import numpy as np

from .. import dtypes as _dtypes
from .._ffi import capture_open
from ..driver import _lib as _drv
from ..driver._core import raise_for as _drv_raise
from ..driver.array import DeviceArray, byte_extent, empty, spans_overlap
from ..driver.operand import check_device, operand
from ..driver import relaunch as _relaunch
from ..driver.plan import KeyKind, Plan, cache, scratch
from ..driver.stream import Stream, as_stream
from . import _lib
from ._base import raise_for, version
from ._common import (INT_MAX, SUPPORTED, GemmArgs, alignment, combo, gemm_args, scalar,
                      split_batch)
from .handle import (WORKSPACE_BYTES, _rebind, _tls, _workspace_buffer,
                     cublas_handle, lt_handle, thread_handle, workspace)

__all__ = ["gemm", "gemm_strided_batched", "gemm_batched", "tune_gemm", "algo_cache",
           "clear_algo_cache", "gemm_args", "GemmArgs", "SUPPORTED", "GEMM_ALGOS", "GemmPlan",
           "GEMM_KEY", "set_gemm_backend", "gemm_backend"]

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


def _check_algo(algo) -> int:
    if isinstance(algo, bool) or not isinstance(algo, (int, np.integer)) or \
            int(algo) not in GEMM_ALGOS:
        raise ValueError(f"algo must be None, 'tuned' or a cublasGemmAlgo_t value "
                         f"(-1, 0..23, 99, 100..115), not {algo!r}")
    return int(algo)


# -- which library runs the default GEMM ----------------------------------------------------
_BACKENDS = ("auto", "cublas", "lt")
_backend = [os.environ.get("CUDALIBS_GEMM_BACKEND", "auto").strip().lower() or "auto"]
if _backend[0] not in _BACKENDS:
    _backend[0] = "auto"
#: The inputs the cuBLASLt route takes (int8 and complex stay on cublasGemmEx).
_LT_TYPES = frozenset(t for t in (np.dtype(np.float16), np.dtype(np.float32),
                                  np.dtype(np.float64), _dtypes.bfloat16) if t is not None)
#: Pointer alignment the cuBLASLt route's algorithm assumes; a call with a less aligned
#: operand goes through cublasGemmEx.
_LT_ALIGN = 16


def set_gemm_backend(name: str) -> str:
    """Choose the library behind :func:`gemm` / :func:`gemm_strided_batched` calls with the
    default algorithm; returns the previous choice.

    Parameters
    ----------
    name : {"auto", "cublas", "lt"}
        ``"auto"`` (the default, also ``$CUDALIBS_GEMM_BACKEND``) and ``"lt"``: float16,
        bfloat16, float32 and float64 products go through ``cublasLtMatmul`` with an
        algorithm chosen once per problem, where cuBLASLt has one and the operands are
        16-byte aligned; everything else, ``replay=True`` and explicit algorithms through
        ``cublasGemmEx``.  ``"cublas"``: always ``cublasGemmEx``.
    """
    name = str(name).lower()
    if name not in _BACKENDS:
        raise ValueError(f"gemm backend must be one of {_BACKENDS}, not {name!r}")
    old, _backend[0] = _backend[0], name
    return old


def gemm_backend() -> str:
    """The current choice of :func:`set_gemm_backend`."""
    return _backend[0]


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
        a, b, out, dev = _operands("GemmPlan", a, b, out)
        self._init_plan(dev)
        self._validate(a, b, out, compute, algo, batched)
        self._prepare(a, b, out)
        # The handle is per thread; what the plan owns are the resources of its cuBLASLt
        # route (the Matmul plan, the recorded kernel), closed with it.
        self._children = [self.relaunches]
        self._own(_close_children, self._children)

    # -- construction -------------------------------------------------------------------------
    def _validate(self, a, b, out, compute, algo, batched) -> None:
        ab = a._dtype
        if b._dtype != ab:
            raise ValueError(f"a is {ab} but b is {b._dtype}: cuBLAS needs both inputs of one "
                             f"type (supported: {'; '.join(SUPPORTED)})")
        if compute is not None and not isinstance(compute, str):
            raise TypeError(f"compute must be a string such as 'tf32' or None, not {compute!r}")
        self.combo = row = combo(ab, None if out is None else out._dtype, compute)
        self.compute = compute
        hint = "; use cublas.gemv for matrix-vector products"
        ba, bsa, ashape, astr = split_batch(a._shape, a._strides, "a", hint)
        bb, bsb, bshape, bstr = split_batch(b._shape, b._strides, "b", hint)
        if not batched and (len(a._shape) != 2 or len(b._shape) != 2):
            raise ValueError(f"gemm takes matrices; got shapes {a._shape} and {b._shape} "
                             "(use gemm_strided_batched for stacks)")
        if ba != bb and ba != 1 and bb != 1:
            raise ValueError(f"batch sizes {ba} and {bb} do not broadcast")
        batch = max(ba, bb)
        bsa = 0 if ba == 1 else bsa
        bsb = 0 if bb == 1 else bsb
        M, K = ashape
        K2, N = bshape
        if K != K2:
            raise ValueError(f"inner dimensions differ: a is {a._shape}, b is {b._shape} "
                             f"({K} != {K2})")
        out_shape = (M, N) if len(a._shape) == 2 and len(b._shape) == 2 else (batch, M, N)
        item, oitem = ab.itemsize, row.c.itemsize
        if out is not None:
            if out._shape != out_shape:
                raise ValueError(f"out has shape {out._shape}; the product is {out_shape}")
            _, bso, _, out_strides = split_batch(out._shape, out._strides, "out")
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
            _check_algo(algo)
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
        self.replays = {}
        self.a_ext = byte_extent(a._shape, a._strides, item)
        self.b_ext = byte_extent(b._shape, b._strides, item)
        oitem = row.c.itemsize
        self.c_ext = None if out is None else byte_extent(out._shape, out._strides, oitem)
        # The layouts cuBLAS reads (after any copy), for scratch operands when timing.
        self.a_layout = (a._shape, _c_strides(a._shape, item) if args.copy_a else a._strides)
        if args.copy_b == "F":
            sw = _c_strides(b._shape[:-2] + b._shape[:-3:-1], item)
            bst = sw[:-2] + (sw[-1], sw[-2])
        elif args.copy_b:
            bst = _c_strides(b._shape, item)
        else:
            bst = b._strides
        self.b_layout = (b._shape, bst)
        self.out_layout = (self.out_shape, _c_strides(self.out_shape, oitem) if out is None
                           else out._strides)
        self.fast = (args.transa, args.transb, args.m, args.n, args.k, args.lda, args.ldb,
                     args.ldc, self.abtype, self.ctype, row.compute, c_longlong(self.sa),
                     c_longlong(self.sb), c_longlong(self.sc), self.batch,
                     not (self.batch == 1 and len(self.out_shape) == 2), *_ext(self.a_ext),
                     *_ext(self.b_ext), *_ext(self.c_ext), args.copy_a, args.copy_b)
        # The cuBLASLt route: built on first use (None), then a prepared call or False.
        self.lt_lock = threading.Lock()
        # The recorded cuBLASLt kernel of the default-scalar call (one call shape).
        self.relaunches = _relaunch.RelaunchSlots()
        self.lt = None if (row.ab in _LT_TYPES and not args.copy_a and not args.copy_b
                           and min(args.m, args.n, args.k) > 0) else False
        self._a_desc = (a._shape, a._strides, a._dtype)
        self._b_desc = (b._shape, b._strides, b._dtype)

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
        _drv.get().cuCtxSetCurrent(dev._ctx)
        h = thread_handle(dev)
        if h.stream != stream._handle:
            _rebind(h, dev, stream._handle)

        def run(i):
            st = _call(self, h, a, b, c._ptr, self.one, self.zero, cands[i]["id"])
            if st:
                raise_for(st, "cublasGemmEx", f"{cands[i]['name']} on {self._problem()}")

        try:
            yield run
        finally:
            for x in (a, b, c):
                x.close()

    # -- execution --------------------------------------------------------------------------
    def execute(self, a, b, out=None, *, alpha=1, beta=0, stream=None, replay=False):
        """Run the plan on operands of the shapes, strides and dtypes it was made for.

        Returns
        -------
        DeviceArray
            ``out`` (a new array when not given).
        """
        self._live()
        a, b, out, dev = _operands("GemmPlan.execute", a, b, out)
        check_device(a, self._device, "a", "GemmPlan.execute")
        if (a._shape, a._strides, a._dtype) != self._a_desc or \
                (b._shape, b._strides, b._dtype) != self._b_desc:
            raise ValueError(f"GemmPlan.execute: a {a._shape} {a._strides} and b {b._shape} "
                             f"{b._strides} do not match the plan's {self._a_desc[:2]} and "
                             f"{self._b_desc[:2]}")
        if out is not None and (self.c_ext is None or out._shape != self.out_layout[0] or
                                out._strides != self.out_layout[1] or
                                out._dtype != self.out_dtype):
            raise ValueError("GemmPlan.execute: out does not match the plan's output layout")
        if out is None and self.c_ext is not None:
            raise ValueError("GemmPlan.execute: this plan was made for a given out; pass out=")
        return _exec(self, a, b, out, alpha, beta, stream, replay)

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


def _operands(op, a, b, out):
    """The operands through the one operand path, all on ``a``'s device."""
    a = operand(a, "a", op)
    dev = a._device
    b = operand(b, "b", op, device=dev)
    if out is not None:
        out = operand(out, "out", op, device=dev)
    return a, b, out, dev


#: The keys of :func:`gemm`'s plans in :data:`cudalibs.driver.plan.cache`.  ``align`` is
#: None except for ``algo="tuned"``, whose choice depends on the operands' alignment.
GEMM_KEY = KeyKind("gemm", ("a_shape", "a_strides", "a_dtype", "b_shape", "b_strides",
                            "b_dtype", "out_shape", "out_strides", "out_dtype", "compute",
                            "algo", "batched", "device", "align"))


def _run(a, b, out, alpha, beta, compute, algo, stream, batched, replay=False):
    """Shared body of :func:`gemm` and :func:`gemm_strided_batched`."""
    if type(a) is not DeviceArray or type(b) is not DeviceArray or (
            out is not None and type(out) is not DeviceArray):
        a, b, out, _ = _operands("gemm", a, b, out)
    else:
        a = operand(a, "a", "gemm")
        b = operand(b, "b", "gemm")
        if out is not None:
            out = operand(out, "out", "gemm")
    dev = a._device
    if b._device is not dev:
        check_device(b, dev, "b", "gemm")
    if out is None:
        key = (GEMM_KEY, a._shape, a._strides, a._dtype, b._shape, b._strides, b._dtype,
               None, None, None, compute, algo, batched, dev, None)
    else:
        if out._device is not dev:
            check_device(out, dev, "out", "gemm")
        key = (GEMM_KEY, a._shape, a._strides, a._dtype, b._shape, b._strides, b._dtype,
               out._shape, out._strides, out._dtype, compute, algo, batched, dev,
               None if algo != "tuned" else (alignment(a._ptr), alignment(b._ptr),
                                             alignment(out._ptr)))
    p = cache.get(key)
    if p is None:
        p = GemmPlan(a, b, out, compute=compute, algo=algo, batched=batched)
        if key[14] is not None:
            p.align = key[14]
        p = cache.put(key, p)
    return _exec(p, a, b, out, alpha, beta, stream, replay)


def _exec(p, a, b, out, alpha, beta, stream, replay):
    """Run plan ``p`` on operands already matched to it (the hot path)."""
    (ta, tb, m, n, k, lda, ldb, ldc, abtype, ctype, ctype_compute, sa, sb, sc, batch,
     strided, alo, ahi, blo, bhi, clo, chi, copy_a, copy_b) = p.fast
    dev = p._device
    # The defaults (the ints 1 and 0) use the plan's prepared scalars.
    if type(alpha) is int and alpha == 1:
        alpha_c = p.one
    else:
        alpha_c = p.scalar(alpha, "alpha")
    if type(beta) is int and beta == 0:
        beta_c = p.zero
    else:
        beta_c = p.scalar(beta, "beta")
    if type(stream) is Stream and stream._device is dev and not stream.closed:
        s = stream
    else:
        s = as_stream(stream, dev)
    if out is None:
        if beta_c is not p.zero and beta != 0:
            raise ValueError("gemm: beta != 0 accumulates into out, so out must be given")
        out = empty(p.out_shape, p.out_dtype, device=dev, stream=s)
        c_ptr = out._ptr
    else:
        c_ptr = out._ptr
        # spans_overlap inlined: empty extents have hi far below any address.
        lo, hi, pa, pb = c_ptr + clo, c_ptr + chi, a._ptr, b._ptr
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
    if replay and not (copy_a or copy_b) and not s.is_default and not capture_open():
        rkey = (a._ptr, b._ptr, c_ptr, s._handle, algo_v,
                None if alpha_c is p.one else bytes(alpha_c),
                None if beta_c is p.zero else bytes(beta_c))
        if _replay(p, rkey, dev, s, lambda h: _call(p, h, a, b, c_ptr, alpha_c, beta_c,
                                                     algo_v)):
            return out
    elif p.lt is not False and _backend[0] != "cublas" and \
            algo_v == _lib.CUBLAS_GEMM_DEFAULT and not p.wants_tuning and \
            not (a._ptr | b._ptr | c_ptr) & (_LT_ALIGN - 1):
        lt = p.lt if p.lt is not None else _lt_prepare(p)
        if lt:
            _drv.get().cuCtxSetCurrent(dev._ctx)
            ws = workspace(dev, s._handle)
            if alpha_c is p.one and beta_c is p.zero and not ws & _WS_MASK and \
                    not capture_open():
                rl = p.relaunches.get(None)
                if rl is None and p.relaunches.due(None):
                    rl = _relaunch_record(p, a, b, c_ptr, ws)
                if rl is not None:
                    st = rl.launch((c_ptr, b._ptr, a._ptr, ws), s._h)
                    if st:
                        _drv_raise(st, "cuGraphLaunch", repr(p))
                    return out
            alpha_p = p.one_p if alpha_c is p.one else c_void_p(ctypes.addressof(alpha_c))
            beta_p = p.zero_p if beta_c is p.zero else c_void_p(ctypes.addressof(beta_c))
            st = _lt_call(lt, dev, alpha_p, beta_p, a._ptr, b._ptr, c_ptr, ws, s)
            if st:
                raise_for(st, "cublasLtMatmul", repr(p))
            return out
    _drv.get().cuCtxSetCurrent(dev._ctx)
    # cublas_handle() inlined: this thread's handle, rebound only when the stream changed.
    try:
        h = _tls.cublas[dev]
    except (AttributeError, KeyError):
        h = thread_handle(dev)
    if h.stream != s._handle:
        _rebind(h, dev, s._handle)
    st = _call(p, h, a, b, c_ptr, alpha_c, beta_c, algo_v)
    if st:
        raise_for(st, "cublasGemmStridedBatchedEx" if strided else "cublasGemmEx", repr(p))
    return out


_WS_BYTES = c_size_t(WORKSPACE_BYTES)
_WS_MASK = _relaunch.WORKSPACE_ALIGN - 1


def _lt_call(lt, dev, alpha_p, beta_p, a_ptr, b_ptr, c_ptr, ws, s) -> int:
    """The prepared ``cublasLtMatmul`` of a plan's cuBLASLt route; the status."""
    fn, desc, la, lb, lc, algo_ref = lt
    cp = c_void_p(c_ptr)
    return fn(lt_handle(dev), desc, alpha_p, c_void_p(b_ptr), la, c_void_p(a_ptr), lb, beta_p,
              cp, lc, cp, lc, algo_ref, c_void_p(ws), _WS_BYTES, s._h)


def _relaunch_record(p, a, b, c_ptr, ws):
    """Record plan ``p``'s cuBLASLt call for relaunching (:mod:`cudalibs.driver.relaunch`):
    the relaunch, or None (``p.relaunches.state(None)`` says why)."""
    dev, lt = p._device, p.lt

    def enqueue(cs, ptrs):
        c, bp, ap, w = ptrs
        st = _lt_call(lt, dev, p.one_p, p.zero_p, ap, bp, c, w, cs)
        if st:
            raise_for(st, "cublasLtMatmul", repr(p))

    return p.relaunches.record(None, dev, enqueue, (c_ptr, b._ptr, a._ptr, ws),
                               (_LT_ALIGN, _LT_ALIGN, _LT_ALIGN, _relaunch.WORKSPACE_ALIGN),
                               name=f"cublasLtMatmul {p._problem()}")


def _lt_prepare(p):
    """Build plan ``p``'s cuBLASLt route: a :class:`~cudalibs.cublas.Matmul` of the same
    problem with its heuristic's first algorithm, as the arguments of one unchecked
    ``cublasLtMatmul``; False (kept) when cuBLASLt offers no algorithm for it."""
    from .lt import Matmul

    # Once per plan, under its lock: two threads preparing at once would each replace the
    # other's Matmul, freeing descriptors the other is about to pass to cuBLASLt.
    with p.lt_lock:
        if p.lt is not None:
            return p.lt
        return _lt_build(p, Matmul)


def _lt_build(p, Matmul):
    row = p.combo
    a_shape, a_strides, dt = p._a_desc
    b_shape, b_strides, _ = p._b_desc
    try:
        mm = Matmul((a_shape, dt, a_strides), (b_shape, dt, b_strides),
                    out=(p.out_layout[0], row.c, p.out_layout[1]), compute=p.compute,
                    device=p._device, min_alignment=_LT_ALIGN, max_candidates=1).plan()
        fn, desc, la, lb, lc, algo = mm.prepared_call()
    except (ValueError, TypeError, ArithmeticError, OSError):
        p.lt = False
        return False
    except Exception as exc:   # noqa: BLE001 - a library refusal: stay on cublasGemmEx
        if type(exc).__name__ != "CublasError":
            raise
        p.lt = False
        return False
    p.lt_plan = mm          # keeps the descriptors alive as long as the GEMM plan
    p._children.append(mm)
    p.lt = (fn, desc, la, lb, lc, ctypes.byref(algo))
    return p.lt


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
#: Most replayable calls remembered per plan (pointer sets seen, graphs made); the plans
#: themselves are bounded by the one plan cache.
_REPLAYS_PER_PLAN = 32


class _Replay:
    """A captured call: its executable graph, the workspace buffer it was captured with and
    the stream object it replays on (both checked before each launch)."""

    __slots__ = ("exec", "raw", "workspace", "stream", "launch", "set_ctx")


def _replay(p, rkey, dev, s, call) -> bool:
    """Launch the graph of a call seen before with these exact pointers, scalars and stream;
    capture it on its second occurrence.  Returns False when the caller must make the call.

    The graph holds the pointers, scalars and the stream's workspace as they were at
    capture, so it computes exactly what the call would: the key holds every pointer and
    scalar and the stream handle, the stream is checked to be the same live object (a weak
    reference: a handle reused by a later stream is another stream), and the workspace to be
    the buffer still assigned to that stream.  Entries are shared by the threads using the
    plan (each captures on a private stream of its own); a launch reads nothing mutable.
    """
    entry = p.replays.get(rkey)
    if entry is not None:
        if type(entry) is _Replay:
            if entry.stream() is s and not s.closed and \
                    entry.workspace is _workspace_buffer(dev, s):
                entry.set_ctx(dev._ctx)
                st = entry.launch(entry.raw, s._h)
                if st:
                    _drv_raise(st, "cuGraphLaunch")
                return True
            p.replays.pop(rkey, None)       # stale: its stream or workspace is gone
            return False
        if entry() is not s:                # seen once, on another stream object
            p.replays[rkey] = weakref.ref(s)
            return False
    else:
        if len(p.replays) < _REPLAYS_PER_PLAN:
            p.replays[rkey] = weakref.ref(s)    # seen once: a second call captures
        return False
    # Second occurrence: capture on a private stream of this thread (no other thread's work
    # can join the capture), with the handle pointed at the target stream's workspace, so
    # replays on that stream stay ordered with everything else using it.
    cap = _relaunch.capture_stream(dev)
    ws = _workspace_buffer(dev, s)
    _drv.get().cuCtxSetCurrent(dev._ctx)
    h = thread_handle(dev)
    h.bind(cap._handle)
    h.stream = None         # the next ordinary call binds its stream and workspace again
    st = _lib.get().cublasSetWorkspace_v2(h.raw, ws.ptr, WORKSPACE_BYTES)
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
    # Bound once per graph: the unchecked entry point takes the prepared c_void_p without a
    # ctypes conversion per launch (the CPU tests check its arguments against the prototype).
    L = _drv.get()
    entry.raw = c_void_p(entry.exec.handle)
    entry.launch, entry.set_ctx = L.unchecked("cuGraphLaunch"), L.cuCtxSetCurrent
    entry.workspace, entry.stream = ws, weakref.ref(s)
    p.replays[rkey] = entry
    return _replay(p, rkey, dev, s, call)


def _copy_operand(x, mode, s):
    """A copy of ``x`` laid out as ``gemm_args`` asked: C order, or column-major matrices
    (``"F"``) for the TN-only int8 path."""
    if mode == "F":
        swap = (0, 2, 1) if x.ndim == 3 else (1, 0)
        return x.transpose(*swap).copy(s).transpose(*swap)
    return x.copy(s)


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
        the same: the graph is the same kernel with the same arguments.  Only when the same
        non-default Stream object is passed again, outside capture blocks, and when no
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
    a_list = [operand(x, "a", "gemm_batched") for x in a_list]
    b_list = [operand(x, "b", "gemm_batched") for x in b_list]
    if not a_list or len(a_list) != len(b_list):
        raise ValueError(f"gemm_batched needs equally long, non-empty lists; got {len(a_list)} "
                         f"and {len(b_list)}")
    n = len(a_list)
    if out_list is not None:
        out_list = [operand(x, "out", "gemm_batched") for x in out_list]
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
    if algo is not None and algo != "tuned":
        _check_algo(algo)
    p = GemmPlan(a0, b0, None if out_list is None else out_list[0], compute=compute,
                 algo=algo, batched=False)
    if p.args.copy_a or p.args.copy_b:
        if a0.dtype.kind == "i":
            raise ValueError("an int8 gemm_batched needs row-major a matrices and "
                             "column-major b matrices (b = w.T of a row-major w)")
        raise ValueError("gemm_batched needs matrices with a unit stride in one dimension "
                         "(copy them first)")
    s = as_stream(stream, dev)
    alpha_c = scalar(alpha, p.combo.scale, "alpha")
    beta_c = scalar(beta, p.combo.scale, "beta")
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
        n, p.combo.compute, p.algo_default)
    if st:
        raise_for(st, "cublasGemmBatchedEx", repr(p))
    # The pointer array is freed on the stream after the call has read it.
    ptrs.close()
    p.close()
    return out_list


# -- algorithm tuning ------------------------------------------------------------------------
def tune_gemm(a, b, out=None, *, compute=None, iterations: int = 10, stream=None) -> dict:
    """Time every GEMM algorithm on this problem and remember the fastest.

    The problem's :class:`GemmPlan` (the one ``gemm(..., algo="tuned")`` finds) is autotuned
    with the one timer (:func:`cudalibs.driver.plan.time_candidates`: medians of loops on
    fresh random inputs, L2 flushed), ``iterations`` rounds; algorithms returning an error
    are skipped.  The choice is kept in the tuning store under the problem (shapes, dtypes,
    transposes, leading dimensions, pointer alignment), the device architecture and the
    cuBLAS version.  The caller's ``out`` is not written.  This synchronises the stream, so
    it cannot run inside a graph capture.

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
    a, b, out, dev = _operands("tune_gemm", a, b, out)
    batched = len(a._shape) != 2 or len(b._shape) != 2
    if out is None:
        key = (GEMM_KEY, a._shape, a._strides, a._dtype, b._shape, b._strides, b._dtype,
               None, None, None, compute, "tuned", batched, dev, None)
    else:
        key = (GEMM_KEY, a._shape, a._strides, a._dtype, b._shape, b._strides, b._dtype,
               out._shape, out._strides, out._dtype, compute, "tuned", batched, dev,
               (alignment(a._ptr), alignment(b._ptr), alignment(out._ptr)))
    p = cache.get(key)
    if p is None:
        p = GemmPlan(a, b, out, compute=compute, algo="tuned", batched=batched)
        if key[14] is not None:
            p.align = key[14]
        p = cache.put(key, p)
    p.autotune(stream=as_stream(stream, dev), rounds=int(iterations), force=True)
    return p.tuning


def algo_cache() -> dict:
    """The tuned GEMM plans in the one plan cache: ``{raw key: {"algo", "ms", "times",
    "unsupported"}}``; read a key's fields by name with ``GEMM_KEY.named(key)``."""
    return {e.raw_key: e.plan.tuning for e in cache.entries(GEMM_KEY.name) if e.plan.tuned}


def clear_algo_cache() -> None:
    """Drop every cached GEMM plan (tuned or not) from the one plan cache; choices kept in
    the tuning store stay there."""
    cache.clear(GEMM_KEY.name)
