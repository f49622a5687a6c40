"""cuBLASLt matmul plans: validation, heuristics, autotuning, execution, the one-shot form.

A :class:`Matmul` is a :class:`~cudalibs.driver.plan.Plan` in the style of nvmath-python:
**construct** (validate shapes/dtypes/strides given as example arrays or descriptions; build
the matrix layouts, the matmul descriptor and the preference of :mod:`.lt_desc`), **plan**
(the heuristic's top candidates), **autotune** (optional: the one timer, results kept in the
tuning store), **execute** (as often as wanted, from any thread: one ``cublasLtMatmul`` with
the call's pointers), **close**.

Row-major at the surface, as everywhere in cudalibs: the row-major ``D = A @ B`` (M×N) is the
column-major ``Dᵀ = Bᵀ Aᵀ`` (N×M), so cuBLASLt's matrix "A" is our ``b``, its "B" our ``a``,
and its D has N rows.  cuBLASLt's bias vector has one entry per *row of its D*, which is one
entry per **column of our output** (length N, broadcast over the M rows), the convention of a
linear layer (``x @ w.T + bias``).  The epilogue's auxiliary matrix (GELU input, ReLU mask) is
column-major N×M with leading dimension ``aux_ld``, i.e. a row-major ``(M, aux_ld)`` array
whose first N columns are used.

:func:`matmul` finds its plans in the one plan cache (:data:`cudalibs.driver.plan.cache`),
under keys of kind ``"cublaslt_matmul"``.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import threading
from ctypes import c_size_t, c_void_p

import numpy as np

from .. import dtypes as _dtypes
from .._ffi import capture_open
from ..driver import _lib as _drv
from ..driver import relaunch as _relaunch
from ..driver._core import raise_for as _drv_raise
from ..driver.array import DeviceArray, byte_extent, empty, spans_overlap
from ..driver.device import as_device
from ..driver.operand import check_device, operand
from ..driver.plan import KeyKind, Plan, cache, scratch
from ..driver.stream import as_stream
from . import _lib
from ._base import lt_version, raise_for
from ._common import OP_N, OP_T, alignment, combo, elem_strides, op_ld, scalar, \
    scalar_is_zero, split_batch
from .handle import WORKSPACE_BYTES, lt_handle, workspace
from .lt_desc import EPILOGUES, MatmulDesc, MatmulPreference, MatrixLayout, epilogue, round_up

_WS_BYTES = c_size_t(WORKSPACE_BYTES)
_WS_MASK = _relaunch.WORKSPACE_ALIGN - 1

__all__ = ["Matmul", "matmul", "plan_cache", "clear_plan_cache", "MATMUL_KEY", "EPILOGUES"]

_FP8 = tuple(t for t in (_dtypes.float8_e4m3fn, _dtypes.float8_e5m2) if t is not None)
_OP = "Matmul"


# -- operand specs ---------------------------------------------------------------------------
def _spec(x, what):
    """``(shape, byte strides, dtype, array or None)`` of a ``(shape, dtype[, strides])``
    description, or of an array-like through the one operand path."""
    if isinstance(x, tuple) and len(x) in (2, 3) and not hasattr(x, "shape"):
        shape = tuple(int(n) for n in x[0])
        dt = _dtypes.lookup(x[1]).numpy
        if len(x) == 3:
            strides = tuple(int(s) for s in x[2])
        else:
            strides, acc = [], dt.itemsize
            for n in reversed(shape):
                strides.append(acc)
                acc *= max(n, 1)
            strides = tuple(reversed(strides))
        return shape, strides, dt, None
    arr = operand(x, what, _OP)
    return arr._shape, arr._strides, arr._dtype, arr


def _close_all(items) -> None:
    """The plan's release: close its descriptors (each frees its own C handle)."""
    for x in items:
        x.close()


def _split3(shape, strides, what):
    return split_batch(shape, strides, what)


class _Problem:
    """The validated problem of a :class:`Matmul`: everything derived from the arguments
    before any descriptor exists."""

    __slots__ = ("specs", "out_shape", "od", "compute_type", "scale_np", "epi", "fp8", "batch",
                 "mnk", "opa", "opb", "ldo", "bso", "bsa", "bsb", "align", "aux_shape",
                 "aux_dtype", "ld_aux", "alpha", "beta", "fast_accum", "max_candidates",
                 "workspace", "compute")


class Matmul(Plan):
    """A cuBLASLt matmul plan (a :class:`~cudalibs.driver.plan.Plan`): ``out = epilogue(alpha * a @ b + beta * c [+ bias])``.

    Parameters
    ----------
    a, b : DeviceArray, CUDA array-like, or ``(shape, dtype[, strides])``
        Examples or descriptions of the operands: ``a`` is ``(M, K)`` or ``(batch, M, K)``,
        ``b`` is ``(K, N)`` or ``(batch, K, N)`` (a 2-D operand is broadcast over the batch).
        Each matrix needs a unit stride in one dimension.  Strides are in bytes.
    c : same kinds, optional
        The addend for ``beta != 0``; must have the layout of ``out``.
    out : same kinds, optional
        Describes the output; default a new C-contiguous array.
    out_dtype : dtype-like, optional
        Output type where there is a choice (float16/bfloat16 inputs with float32 output;
        fp8 inputs: bfloat16 (default), float16 or float32).
    compute : str, optional
        As for :func:`cudalibs.cublas.gemm` (``"tf32"``, ``"f16"``, ...).
    epilogue : str, optional
        One of :data:`EPILOGUES`: ``"bias"``, ``"relu"``, ``"gelu"``, ``"relu_bias"``,
        ``"gelu_bias"``, the ``*_aux`` forms that also write the epilogue's input (GELU) or
        mask (ReLU) for the backward pass, and the backward ``"dgelu"``, ``"drelu"``,
        ``"dgelu_bgrad"``, ``"drelu_bgrad"``.  The bias has one entry per output column (N),
        of the output dtype.
    alpha, beta : scalar, default 1 and 0
    aux_ld : int, optional
        Leading dimension of the auxiliary matrix, in elements (bits for the ReLU mask):
        default N rounded up to 8 (GELU) or 128 (ReLU mask), as cuBLASLt requires.
    fast_accum : bool, default False
        fp8 only: ``CUBLASLT_MATMUL_DESC_FAST_ACCUM``.
    device : Device or int, optional
        Default: the examples' device, else the current one.
    min_alignment : int, optional
        Pointer alignment (bytes) the plan may assume; default the examples' pointer
        alignment, or 256 (cuBLASLt's own default) when built from descriptions.
        :meth:`execute` checks every pointer against it.
    max_candidates : int, default 8
        How many heuristic results to keep (top-k).
    workspace_bytes : int, default 32 MiB

    Notes
    -----
    Construction validates the problem and builds the descriptors; the heuristic is asked
    by :meth:`plan` (called by the first :meth:`execute` if not before), and
    :meth:`autotune` times its candidates with the one timer of
    :func:`cudalibs.driver.plan.time_candidates`, keeping the choice in the tuning store.
    Several threads may execute one plan at once: where the epilogue reads a per-call
    pointer from the descriptor (bias, aux, fp8 scales), writing it and enqueueing the
    matmul happen under one lock, so each call runs with its own pointers.

    fp8 (``float8_e4m3fn`` / ``float8_e5m2`` inputs, not both e5m2) needs compute capability
    8.9 or newer and the layout cuBLASLt's fp8 kernels take: ``a`` row-major (unit stride in
    its last dimension) and ``b`` column-major, i.e. ``w.T`` of a row-major ``(N, K)`` weight,
    with ``K`` a multiple of 16.  Per-tensor scales are float32 device scalars passed to
    :meth:`execute` (``a_scale``, ``b_scale``).
    """

    kind = "cublaslt_matmul"
    library = "cuBLASLt"

    def __init__(self, a, b, c=None, *, out=None, out_dtype=None, compute=None, epilogue=None,
                 alpha=1, beta=0, aux_ld=None, fast_accum=False, device=None,
                 min_alignment=None, max_candidates: int = 8,
                 workspace_bytes: int = WORKSPACE_BYTES):
        specs = [_spec(a, "a"), _spec(b, "b"), None if c is None else _spec(c, "c"),
                 None if out is None else _spec(out, "out")]
        examples = [s[3] for s in specs if s is not None and s[3] is not None]
        dev = examples[0]._device if device is None and examples else as_device(device)
        for x, name in zip((s[3] if s else None for s in specs), ("a", "b", "c", "out")):
            if x is not None:
                check_device(x, dev, name, _OP)
        self._init_plan(dev)
        if min_alignment is None:
            min_alignment = min([alignment(x._ptr) for x in examples] or [256])
        p = self._validate(specs, dev, out_dtype, compute, epilogue, alpha, beta, aux_ld,
                           fast_accum, min_alignment, max_candidates, workspace_bytes)
        self._build(p)

    # -- construction: validation ------------------------------------------------------------
    @staticmethod
    def _types(p, ab, bb, so, dev, out_dtype, compute) -> None:
        """Output, compute and scale types (fp8 or one floating input type)."""
        epi = p.epi
        if p.fp8:
            if ab not in _FP8 or bb not in _FP8:
                raise ValueError(f"fp8 matmul needs both inputs in fp8, got {ab} and {bb}")
            if ab == bb == _dtypes.float8_e5m2:
                raise ValueError("cuBLASLt has no e5m2 x e5m2 matmul; use e4m3 for one input")
            cc = dev.compute_capability
            if cc < (8, 9):
                raise ValueError(f"fp8 matmul needs compute capability >= 8.9 (Ada/Hopper); "
                                 f"device {dev.ordinal} is {cc[0]}.{cc[1]}")
            od = np.dtype(_dtypes.bfloat16) if out_dtype is None else _dtypes.lookup(
                out_dtype).numpy
            if so is not None:
                od = so[2]
            if od not in (_dtypes.bfloat16, np.dtype(np.float16), np.dtype(np.float32)):
                raise ValueError(f"fp8 matmul writes bfloat16, float16 or float32, not {od}")
            if compute not in (None, "f32"):
                raise ValueError("fp8 matmul computes in fp32 (compute=None)")
            if epi.bias is not None and od == np.float32:
                raise ValueError("an fp8 matmul with a bias needs a bfloat16 or float16 output")
            p.od, p.compute_type, p.scale_np = (od, _dtypes.COMPUTE["COMPUTE_32F"],
                                                np.dtype(np.float32))
            return
        if ab != bb:
            raise ValueError(f"a is {ab} but b is {bb}; cuBLASLt needs one input type "
                             "(or two fp8 types)")
        if ab.kind not in "f" and ab != _dtypes.bfloat16:
            raise ValueError(f"cudalibs' cuBLASLt plans take float64, float32, float16, "
                             f"bfloat16 or fp8 inputs, not {ab}; use cublas.gemm")
        want = so[2] if so is not None else (None if out_dtype is None
                                             else _dtypes.lookup(out_dtype).numpy)
        row = combo(ab, want, compute)
        p.od, p.compute_type, p.scale_np = row.c, row.compute, row.scale

    @staticmethod
    def _out_ld(p, spec, what):
        """(leading dimension, batch stride) in elements of ``out``/``c``, checked."""
        M, N, _ = p.mnk
        bo, bso, oshape, ostr = _split3(spec[0], spec[1], what)
        if spec[0] != p.out_shape:
            raise ValueError(f"{what} has shape {spec[0]}; the product is {p.out_shape}")
        if spec[2] != p.od:
            raise ValueError(f"{what} is {spec[2]}; this matmul writes {p.od}")
        io = p.od.itemsize
        eo = elem_strides(ostr, io)
        if eo is None or not (N == 1 or eo[1] == 1):
            raise ValueError(f"{what} must have unit stride in its last dimension")
        ld = eo[0] if M > 1 else N
        if ld < N:
            raise ValueError(f"{what}'s row stride is shorter than a row")
        if p.batch > 1 and (bso <= 0 or bso % io):
            raise ValueError(f"{what} needs a positive batch stride")
        return ld, (bso // io if p.batch > 1 else 0)

    def _validate(self, specs, dev, out_dtype, compute, epilogue_name, alpha, beta, aux_ld,
                  fast_accum, min_alignment, max_candidates, workspace_bytes) -> _Problem:
        sa, sb, sc, so = specs
        p = _Problem()
        p.specs = ((sa[0], sa[1], sa[2]), (sb[0], sb[1], sb[2]))
        ab, bb = sa[2], sb[2]
        p.fp8 = ab in _FP8 or bb in _FP8
        p.epi = epilogue(epilogue_name)
        p.compute = compute
        self._types(p, ab, bb, so, dev, out_dtype, compute)
        # Shapes and batching.
        ba, p.bsa, ashape, astr = _split3(sa[0], sa[1], "a")
        bbt, p.bsb, bshape, bstr = _split3(sb[0], sb[1], "b")
        if ba != bbt and 1 not in (ba, bbt):
            raise ValueError(f"batch sizes {ba} and {bbt} do not broadcast")
        p.batch = max(ba, bbt)
        (M, K), (K2, N) = ashape, bshape
        if K != K2:
            raise ValueError(f"inner dimensions differ: a is {sa[0]}, b is {sb[0]}")
        if min(M, N, K) < 1:
            raise ValueError(f"cuBLASLt needs non-empty matrices, got M={M}, N={N}, K={K}")
        p.mnk = (M, N, K)
        p.out_shape = (M, N) if len(sa[0]) == 2 and len(sb[0]) == 2 else (p.batch, M, N)
        ea = elem_strides(astr, ab.itemsize)
        eb = elem_strides(bstr, bb.itemsize)
        # cuBLASLt's A is our b (N×K after op), its B is our a (K×M after op).
        p.opa = None if ea is None else op_ld(M, K, ea[0], ea[1], prefer_t=False)
        p.opb = None if eb is None else op_ld(K, N, eb[0], eb[1], prefer_t=p.fp8)
        if p.opa is None or p.opb is None:
            raise ValueError("each matrix needs a unit stride in one dimension and a leading "
                             "dimension at least as long as that dimension; call .copy() "
                             f"first (a strides {sa[1]}, b strides {sb[1]})")
        if p.fp8:
            if p.opb[0] != OP_T or p.opa[0] != OP_N:
                raise ValueError("fp8 matmul needs a row-major a (unit stride in its last "
                                 "dimension) and a column-major b (b = w.T of a row-major "
                                 "(N, K) w): cuBLASLt's fp8 kernels take only the 'TN' layout")
            if K % 16 or p.opa[1] % 16 or p.opb[1] % 16:
                raise ValueError(f"fp8 matmul needs K and the leading dimensions to be "
                                 f"multiples of 16 (K={K}, lda={p.opb[1]}, ldb={p.opa[1]})")
        # C and D share one layout: the output's (cudalibs does not convert between them).
        if so is not None:
            p.ldo, p.bso = self._out_ld(p, so, "out")
            if sc is not None and self._out_ld(p, sc, "c") != (p.ldo, p.bso):
                raise ValueError("c must have the strides of out")
        else:
            p.ldo, p.bso = N, (M * N if p.batch > 1 else 0)
            if sc is not None and self._out_ld(p, sc, "c") != (p.ldo, p.bso):
                raise ValueError("c must be C-contiguous when out is not described (or "
                                 "describe out with c's strides)")
        for name, s, item in (("a", p.bsa, ab.itemsize), ("b", p.bsb, bb.itemsize)):
            if s % item or s < 0:
                raise ValueError(f"{name}'s batch stride must be a non-negative multiple of "
                                 "its item size")
        p.alpha = scalar(alpha, p.scale_np, "alpha")
        p.beta = scalar(beta, p.scale_np, "beta")
        if beta != 0 and sc is None and so is None:
            raise ValueError("beta != 0 needs c (or out) to describe the addend")
        p.align = int(min_alignment)
        if p.align < 1 or p.align & (p.align - 1):
            raise ValueError(f"min_alignment must be a power of two, not {p.align}")
        self._validate_aux(p, aux_ld)
        p.fast_accum = bool(fast_accum)
        p.max_candidates = int(max_candidates)
        if p.max_candidates < 1:
            raise ValueError(f"max_candidates must be >= 1, got {max_candidates}")
        p.workspace = min(int(workspace_bytes), WORKSPACE_BYTES)
        return p

    @staticmethod
    def _validate_aux(p, aux_ld) -> None:
        M, N, _ = p.mnk
        epi = p.epi
        p.aux_shape = p.aux_dtype = p.ld_aux = None
        if not epi.aux:
            if aux_ld is not None:
                raise ValueError(f"aux_ld given, but epilogue {epi.name!r} has no aux matrix")
            return
        if epi.aux_kind == "gelu":
            ld_aux = round_up(N, 8) if aux_ld is None else int(aux_ld)
            if ld_aux < N or ld_aux % 8:
                raise ValueError(f"aux_ld={ld_aux} must be >= N={N} and a multiple of 8")
            p.aux_dtype, cols = p.od, ld_aux
        else:
            ld_aux = round_up(N, 128) if aux_ld is None else int(aux_ld)
            if ld_aux < N or ld_aux % 128:
                raise ValueError(f"aux_ld={ld_aux} (bits) must be >= N={N} and a "
                                 "multiple of 128")
            p.aux_dtype, cols = np.dtype(np.uint8), ld_aux // 8
        p.ld_aux = ld_aux
        p.aux_shape = (M, cols) if len(p.out_shape) == 2 else (p.batch, M, cols)

    # -- construction: descriptors -----------------------------------------------------------
    def _build(self, p: _Problem) -> None:
        """Build the layouts, the descriptor and the preference (no GPU work), then own them."""
        M, N, K = p.mnk
        (sa, sb) = p.specs
        ab, bb, od = sa[2], sb[2], p.od
        epi = p.epi
        made = []
        try:
            rows_a, cols_a = (N, K) if p.opb[0] == OP_N else (K, N)
            rows_b, cols_b = (K, M) if p.opa[0] == OP_N else (M, K)
            la = MatrixLayout(bb, rows_a, cols_a, p.opb[1], batch=p.batch,
                              batch_stride=p.bsb // bb.itemsize)
            made.append(la)
            lb = MatrixLayout(ab, rows_b, cols_b, p.opa[1], batch=p.batch,
                              batch_stride=p.bsa // ab.itemsize)
            made.append(lb)
            lc = MatrixLayout(od, N, M, max(p.ldo, 1), batch=p.batch, batch_stride=p.bso)
            made.append(lc)
            desc = MatmulDesc(p.compute_type, _dtypes.lookup(p.scale_np).cuda)
            made.append(desc)
            desc.set("transa", p.opb[0])
            desc.set("transb", p.opa[0])
            desc.set("epilogue", epi.value)
            if epi.bias:
                desc.set("bias_data_type", _dtypes.lookup(od).cuda)
            if epi.aux:
                desc.set("epilogue_aux_ld", p.ld_aux)
                if p.batch > 1:
                    desc.set("epilogue_aux_batch_stride", p.ld_aux * M)
            if p.fp8 and p.fast_accum:
                desc.set("fast_accum", 1)
            pref = MatmulPreference(p.workspace)
            made.append(pref)
            for which in "abcd":
                pref.set(f"min_alignment_{which}_bytes", p.align)
            # Pointer attributes take part in the heuristic's alignment checks: placeholders
            # aligned like real buffers until the first execute writes real ones.
            if epi.bias:
                desc.set("bias_pointer", 256)
            if epi.aux:
                desc.set("epilogue_aux_pointer", 256)
        except BaseException:
            _close_all(made)
            raise
        # The recorded kernels of this plan's call shapes (driver.relaunch), closed with it.
        self.relaunches = _relaunch.RelaunchSlots()
        made.append(self.relaunches)
        self._own(_close_all, made)
        self._layouts, self._desc, self._pref = (la, lb, lc), desc, pref
        self._p = p
        self._specs = p.specs
        self._out_shape, self._out_dtype, self._epi = p.out_shape, od, epi
        self._bias_len, self._bias_dtype = N, (od if epi.bias else None)
        self._aux_shape, self._aux_dtype, self._aux_ld = p.aux_shape, p.aux_dtype, p.ld_aux
        self._align, self._fp8, self._batch, self._mnk = p.align, p.fp8, p.batch, p.mnk
        self._alpha, self._beta = p.alpha, p.beta
        self._alpha_p = c_void_p(ctypes.addressof(p.alpha))
        self._beta_p = c_void_p(ctypes.addressof(p.beta))
        oi = od.itemsize
        out_strides = tuple(v * oi for v in ((p.bso, p.ldo, 1) if len(p.out_shape) == 3
                                             else (p.ldo, 1)))
        self._out_strides = out_strides
        # Byte extents of a, b and out (their strides are fixed by the plan), so that
        # execute() checks aliasing with additions only.
        self._exts = (byte_extent(sa[0], sa[1], ab.itemsize),
                      byte_extent(sb[0], sb[1], bb.itemsize),
                      byte_extent(p.out_shape, out_strides, oi))
        self._default_out = not ((M > 1 and p.ldo != N) or (p.batch > 1 and p.bso != M * N))
        # The per-call pointers this descriptor carries; written under the lock, with the
        # last value written, so a repeated pointer is not written again.
        self._ptr_attrs = epi.bias == "in" or epi.bias == "out" or bool(epi.aux) or p.fp8
        self._ptr_lock = threading.Lock()
        self._set_ptrs: dict = {}
        self._algos: list = []
        self._algo = None

    # -- the plan protocol ------------------------------------------------------------------
    def _heuristics(self) -> list[dict]:
        dev = self._device
        k = self._p.max_candidates
        _drv.get().cuCtxSetCurrent(dev._ctx)
        h = lt_handle(dev)
        results = (_lib.cublasLtMatmulHeuristicResult_t * k)()
        count = ctypes.c_int()
        la, lb, lc = self._layouts
        st = _lib.get_lt().cublasLtMatmulAlgoGetHeuristic(
            h, self._desc.raw, la.raw, lb.raw, lc.raw, lc.raw, self._pref.raw, k, results,
            ctypes.byref(count))
        if st:
            raise_for(st, "cublasLtMatmulAlgoGetHeuristic", f"no cuBLASLt algorithm for "
                      f"{self._problem()}")
        out, algos = [], []
        for i in range(count.value):
            r = results[i]
            if r.state != 0:
                continue
            algo = _lib.cublasLtMatmulAlgo_t()
            ctypes.memmove(ctypes.byref(algo), ctypes.byref(r.algo), ctypes.sizeof(algo))
            aid = _algo_id(algo)
            digest = hashlib.sha1(ctypes.string_at(ctypes.addressof(algo),
                                                   ctypes.sizeof(algo))).hexdigest()[:12]
            out.append({"name": f"algo {aid} #{i}", "id": f"{aid}:{digest}", "index": i,
                        "algo_id": aid, "workspace": int(r.workspaceSize),
                        "waves": float(r.wavesCount), "ms": None})
            algos.append(algo)
        if not out:
            raise ValueError(f"cuBLASLt found no algorithm for {self._problem()} (check "
                             "dtypes, alignment and the epilogue's requirements)")
        self._algos = algos
        return out

    def _select(self, i: int) -> None:
        self._algo = self._algos[i]

    def _problem(self) -> str:
        try:
            M, N, K = self._mnk
            a, b = self._specs
        except AttributeError:
            return "(incomplete)"
        batch = f"{self._batch}x " if self._batch > 1 else ""
        return (f"{batch}({M}x{K} {a[2].name}) @ ({K}x{N} {b[2].name}) -> "
                f"{self._out_dtype.name}, epilogue={self._epi.name}")

    def _tuning_key(self):
        p = self._p
        return {"a": [list(p.specs[0][0]), list(p.specs[0][1]), p.specs[0][2].name],
                "b": [list(p.specs[1][0]), list(p.specs[1][1]), p.specs[1][2].name],
                "out": [list(p.out_shape), list(self._out_strides), p.od.name],
                "epilogue": p.epi.name, "compute": p.compute, "align": p.align,
                "aux_ld": p.ld_aux, "fast_accum": p.fast_accum,
                "beta": not scalar_is_zero(p.beta), "workspace": p.workspace}

    def _library_version(self) -> str:
        return str(lt_version())

    @contextlib.contextmanager
    def _runner(self, stream):
        dev = self._device
        (sa, sb) = self._specs
        arrays = [scratch(sa[0], sa[2], dev, stream, strides=sa[1]),
                  scratch(sb[0], sb[2], dev, stream, strides=sb[1]),
                  scratch(self._out_shape, self._out_dtype, dev, stream,
                          strides=self._out_strides)]
        extras = {}
        if self._epi.bias:
            extras["bias"] = scratch((self._bias_len,), self._bias_dtype, dev, stream)
        if self._epi.aux:
            extras["aux"] = scratch(self._aux_shape, self._aux_dtype, dev, stream)
        if self._fp8:
            extras["a_scale"] = extras["b_scale"] = scratch((1,), np.float32, dev, stream)
        a, b, out = arrays
        c = out if not scalar_is_zero(self._beta) else None
        algos = self._algos

        def run(i):
            self._launch(algos[i], a, b, c, out, stream, **extras)

        try:
            yield run
        finally:
            for x in (*arrays, *extras.values()):
                x.close()

    def select(self, i: int) -> "Matmul":
        """Use candidate ``i`` of :attr:`candidates` from now on; returns the plan."""
        Plan.select(self, i)
        return self

    def autotune(self, iterations: int | None = None, *, stream=None, rounds: int = 5,
                 store: bool = True, force: bool = False) -> list[dict]:
        """Time the candidates and run the fastest from now on (see
        :meth:`cudalibs.driver.plan.Plan.autotune`); ``iterations`` is an older name of
        ``rounds``."""
        return Plan.autotune(self, stream=stream, rounds=iterations or rounds, store=store,
                             force=force)

    @property
    def algorithm(self) -> dict:
        """The candidate :meth:`execute` uses (see :attr:`candidates`)."""
        self.plan()
        return dict(self._candidates[self._choice])

    @property
    def out_shape(self) -> tuple:
        """Shape of the output."""
        return self._out_shape

    @property
    def out_dtype(self) -> np.dtype:
        """dtype of the output."""
        return self._out_dtype

    @property
    def aux_shape(self) -> tuple | None:
        """Shape of the auxiliary array (``(M, aux_ld)`` elements for GELU; ``(M, aux_ld //
        8)`` bytes of uint8 for the ReLU mask), or None."""
        return self._aux_shape

    @property
    def epilogue(self) -> str:
        """The epilogue's name."""
        return self._epi.name

    def free(self) -> None:
        """Same as :meth:`close`."""
        self.close()

    def prepared_call(self):
        """``(cublasLtMatmul, desc, layout A, layout B, layout C/D, algo)``: the raw
        arguments of this plan's call for a caller that makes it itself (the GEMM route of
        :func:`cudalibs.cublas.gemm`).  Only for plans whose descriptor carries no per-call
        pointer; the plan must stay open while they are used."""
        self._live()
        if self._ptr_attrs:
            raise ValueError("prepared_call: this plan's descriptor takes per-call pointers")
        self.plan()
        la, lb, lc = self._layouts
        return (_lib.get_lt().unchecked("cublasLtMatmul"), self._desc.raw, la.raw, lb.raw,
                lc.raw, self._algo)

    # -- execution --------------------------------------------------------------------------
    def execute(self, a, b, c=None, *, out=None, bias=None, aux=None, a_scale=None,
                b_scale=None, stream=None):
        """Run the plan: one ``cublasLtMatmul`` with this call's pointers.

        Parameters
        ----------
        a, b : DeviceArray or CUDA array-like
            Exactly the shapes, strides and dtypes the plan was made for.
        c : DeviceArray, optional
            The addend when ``beta != 0`` (default: ``out``, accumulated in place).
        out : DeviceArray, optional
            Default: a new C-contiguous array on ``stream``.
        bias : DeviceArray, shape (N,), optional
            Required by the bias epilogues (added per output column); written by the
            ``*_bgrad`` ones.
        aux : DeviceArray, optional
            The auxiliary array of the ``*_aux`` (written; allocated when omitted) and
            backward (read) epilogues, of :attr:`aux_shape`.
        a_scale, b_scale : DeviceArray, optional
            fp8 only: float32 device scalars dequantising ``a`` and ``b`` (default 1).
        stream : Stream, optional

        Returns
        -------
        DeviceArray or tuple of DeviceArray
            ``out``, or ``(out, aux)`` for the forward ``*_aux`` epilogues.

        Raises
        ------
        ClosedError
            The plan was closed, or an array's memory was freed.
        ValueError
            An operand does not match the plan, is on another device, is misaligned, or a
            required epilogue input is missing.
        """
        self._live()
        if self._algo is None:
            self.plan()
        dev = self._device
        a = operand(a, "a", _OP)
        b = operand(b, "b", _OP)
        s = as_stream(stream, dev)
        if out is None:
            if not self._default_out:
                raise ValueError("this plan was made for a strided out; pass out=")
            out = empty(self._out_shape, self._out_dtype, device=dev, stream=s)
        else:
            out = operand(out, "out", _OP)
            self._check_out(out, "out")
        if c is not None:
            c = operand(c, "c", _OP)
            self._check_out(c, "c")
        return self._launch(self._algo, a, b, c, out, s, bias=bias, aux=aux, a_scale=a_scale,
                            b_scale=b_scale)

    __call__ = execute

    def _launch(self, algo, a, b, c, out, s, bias=None, aux=None, a_scale=None,
                b_scale=None):
        """Check the call's operands against the plan and enqueue one matmul with ``algo``."""
        dev = self._device
        spec_a, spec_b = self._specs
        align = self._align - 1
        if (a._shape, a._strides, a._dtype) != spec_a or a._device is not dev or \
                a._ptr & align:
            self._check_operand(a, spec_a, "a")
        if (b._shape, b._strides, b._dtype) != spec_b or b._device is not dev or \
                b._ptr & align:
            self._check_operand(b, spec_b, "b")
        a_ptr, b_ptr = a._ptr, b._ptr
        d_ptr = self._ptr(out, "out")
        c_ptr = d_ptr if c is None else self._ptr(c, "c")
        ea, eb, ed = self._exts
        if spans_overlap(d_ptr, ed, a_ptr, ea) or spans_overlap(d_ptr, ed, b_ptr, eb):
            raise ValueError("Matmul: out overlaps an input: cuBLASLt reads the inputs while "
                             "writing out, so they must not share the same memory")
        ptrs, aux_out = self._call_pointers(bias, aux, a_scale, b_scale, s)
        _drv.get().cuCtxSetCurrent(dev._ctx)
        ws = workspace(dev, s._handle)
        if algo is self._algo and not ws & _WS_MASK and not capture_open():
            # The call shape: the algorithm, whether c is out, which pointers are given.
            key = (self._choice, c is None, tuple(n for n, v in ptrs if v)) if ptrs else \
                (self._choice, c is None)
            rl = self.relaunches.get(key)
            if rl is None and self.relaunches.due(key):
                rl = self._record(key, algo, ptrs, a_ptr, b_ptr, c_ptr, d_ptr, ws, c is None)
            if rl is not None:
                addrs = (d_ptr, b_ptr, a_ptr, ws) if c is None else \
                    (d_ptr, c_ptr, b_ptr, a_ptr, ws)
                if ptrs:
                    addrs += tuple(v for _, v in ptrs if v)
                st = rl.launch(addrs, s._h)
                if st:
                    _drv_raise(st, "cuGraphLaunch", repr(self))
                return out if aux_out is None else (out, aux_out)
        la, lb, lc = self._layouts
        fn = _lib.get_lt().unchecked("cublasLtMatmul")
        args = (lt_handle(dev), self._desc._raw, self._alpha_p, c_void_p(b_ptr), la._raw,
                c_void_p(a_ptr), lb._raw, self._beta_p, c_void_p(c_ptr), lc._raw,
                c_void_p(d_ptr), lc._raw, ctypes.byref(algo), c_void_p(ws), _WS_BYTES, s._h)
        if ptrs:
            # The descriptor is shared by every thread executing this plan: its pointers and
            # the enqueue that reads them form one step.
            with self._ptr_lock:
                last = self._set_ptrs
                for name, value in ptrs:
                    if last.get(name) != value:
                        self._desc.set(name, value)
                        last[name] = value
                st = fn(*args)
        else:
            st = fn(*args)
        if st:
            raise_for(st, "cublasLtMatmul", repr(self))
        if aux_out is not None:
            return out, aux_out
        return out

    def _record(self, key, algo, ptrs, a_ptr, b_ptr, c_ptr, d_ptr, ws, in_place):
        """Record call shape ``key`` for relaunching; the relaunch, or None."""
        dev = self._device
        live = [n for n, v in ptrs if v]
        nulls = [n for n, v in ptrs if not v]
        la, lb, lc = self._layouts
        fn = _lib.get_lt().unchecked("cublasLtMatmul")

        def enqueue(cs, addrs):
            if in_place:
                d, bp, ap, w, *vals = addrs
                cp = d
            else:
                d, cp, bp, ap, w, *vals = addrs
            for name, v in zip(live, vals):
                self._desc.set(name, v)
            for name in nulls:
                self._desc.set(name, 0)
            st = fn(lt_handle(dev), self._desc._raw, self._alpha_p, c_void_p(bp), la._raw,
                    c_void_p(ap), lb._raw, self._beta_p, c_void_p(cp), lc._raw, c_void_p(d),
                    lc._raw, ctypes.byref(algo), c_void_p(w), _WS_BYTES, cs._h)
            if st:
                raise_for(st, "cublasLtMatmul", repr(self))

        bases = (d_ptr, b_ptr, a_ptr, ws) if in_place else (d_ptr, c_ptr, b_ptr, a_ptr, ws)
        bases += tuple(v for _, v in ptrs if v)
        iws = 3 if in_place else 4
        aligns = tuple(_relaunch.WORKSPACE_ALIGN if i == iws else self._align
                       for i in range(len(bases)))
        # The descriptor is shared: recording writes probe addresses into it, under the lock
        # every pointer-writing call takes, and the next library call writes its own again.
        with self._ptr_lock:
            try:
                return self.relaunches.record(key, dev, enqueue, bases, aligns,
                                              name=f"cublasLtMatmul {self._problem()}")
            finally:
                self._set_ptrs.clear()

    def _call_pointers(self, bias, aux, a_scale, b_scale, s):
        """``([(descriptor attribute, pointer), ...], aux array to return or None)``."""
        epi = self._epi
        ptrs = []
        if epi.bias:
            if bias is None:
                raise ValueError(f"epilogue {epi.name!r} needs bias (shape ({self._bias_len},), "
                                 f"{self._bias_dtype})")
            bias = operand(bias, "bias", _OP)
            if bias._shape != (self._bias_len,) or bias._dtype != self._bias_dtype or (
                    self._bias_len > 1 and bias._strides[0] != bias._dtype.itemsize):
                raise ValueError(f"bias must be a contiguous ({self._bias_len},) "
                                 f"{self._bias_dtype} array (one entry per output column), "
                                 f"not {bias._shape} {bias._dtype}")
            ptrs.append(("bias_pointer", self._ptr(bias, "bias")))
        elif bias is not None:
            raise ValueError(f"epilogue {epi.name!r} takes no bias; use 'bias', 'relu_bias' or "
                             "'gelu_bias'")
        aux_out = None
        if epi.aux:
            if aux is None:
                if epi.aux == "in":
                    raise ValueError(f"epilogue {epi.name!r} needs aux (the forward pass's "
                                     f"{'GELU input' if epi.aux_kind == 'gelu' else 'ReLU mask'})")
                aux = empty(self._aux_shape, self._aux_dtype, device=self._device, stream=s)
            else:
                aux = operand(aux, "aux", _OP)
            if aux._shape != self._aux_shape or aux._dtype != self._aux_dtype or \
                    not aux.is_c_contiguous:
                raise ValueError(f"aux must be a C-contiguous {self._aux_shape} "
                                 f"{self._aux_dtype} array, not {aux._shape} {aux._dtype}")
            ptrs.append(("epilogue_aux_pointer", self._ptr(aux, "aux")))
            if epi.aux == "out":
                aux_out = aux
        elif aux is not None:
            raise ValueError(f"epilogue {epi.name!r} has no aux matrix")
        if self._fp8:
            # cuBLASLt's A is our b: its A scale is b's.
            ptrs.append(("a_scale_pointer", self._scale_ptr(b_scale, "b_scale")))
            ptrs.append(("b_scale_pointer", self._scale_ptr(a_scale, "a_scale")))
        elif a_scale is not None or b_scale is not None:
            raise ValueError("a_scale/b_scale apply to fp8 matmuls only")
        return ptrs, aux_out

    def _check_operand(self, x: DeviceArray, spec, what: str) -> None:
        shape, strides, dtype = spec
        if x._shape != shape or x._strides != strides or x._dtype != dtype:
            raise ValueError(f"{what} is {x._shape} {x._dtype} with strides {x._strides}; "
                             f"the plan was made for {shape} {dtype} strides {strides}")
        self._ptr(x, what)

    def _ptr(self, x: DeviceArray, what: str) -> int:
        check_device(x, self._device, what, _OP)
        ptr = x._ptr
        if ptr & (self._align - 1):
            raise ValueError(f"{what} at 0x{ptr:x} is not aligned to {self._align} bytes, which "
                             "the plan assumed (make the plan from this array, or pass "
                             "min_alignment=)")
        return ptr

    def _check_out(self, x: DeviceArray, what: str) -> None:
        if x._shape != self._out_shape or x._dtype != self._out_dtype:
            raise ValueError(f"{what} is {x._shape} {x._dtype}; the plan writes "
                             f"{self._out_shape} {self._out_dtype}")
        want = self._out_strides
        M, N, _ = self._mnk
        bad = (N > 1 and x._strides[-1] != want[-1]) or (M > 1 and x._strides[-2] != want[-2]) \
            or (self._batch > 1 and x._strides[0] != want[0])
        if bad:
            raise ValueError(f"{what} has strides {x._strides}; the plan was made for a row "
                             f"stride of {want[-2] // self._out_dtype.itemsize} elements")

    def _scale_ptr(self, x, what) -> int:
        if x is None:
            return 0
        x = operand(x, what, _OP)
        if x._dtype != np.float32 or x.size != 1:
            raise ValueError(f"{what} must be a single float32 on the device")
        return self._ptr(x, what)


def _algo_id(algo) -> int:
    value = ctypes.c_int()
    written = ctypes.c_size_t()
    st = _lib.get_lt().cublasLtMatmulAlgoConfigGetAttribute(
        ctypes.byref(algo), _lib.CUBLASLT_ALGO_CONFIG_ID, ctypes.byref(value),
        ctypes.sizeof(value), ctypes.byref(written))
    return value.value if st == 0 else -1


# -- one-shot convenience through the one plan cache -----------------------------------------
#: The keys of :func:`matmul`'s plans in :data:`cudalibs.driver.plan.cache`.
MATMUL_KEY = KeyKind("cublaslt_matmul", (
    "a_shape", "a_strides", "a_dtype", "b_shape", "b_strides", "b_dtype", "out_layout",
    "epilogue", "compute", "out_dtype", "device", "a_align", "b_align", "out_align",
    "bias_align", "aux"))


def matmul(a, b, *, bias=None, epilogue=None, out=None, compute=None, out_dtype=None,
           a_scale=None, b_scale=None, aux=None, stream=None):
    """``epilogue(a @ b + bias)`` through a cached cuBLASLt :class:`Matmul` plan.

    The plan for this problem (shapes, strides, dtypes, epilogue, compute, pointer
    alignment, device) is made on the first call and kept in the one plan cache
    (:data:`cudalibs.driver.plan.cache`), so repeated calls pay only for
    :meth:`Matmul.execute`.  Calls from several threads may share a plan.

    Parameters
    ----------
    a, b : DeviceArray or CUDA array-like
        ``(M, K)`` / ``(K, N)``, or stacks ``(batch, M, K)`` / ``(batch, K, N)``.
    bias : DeviceArray, shape (N,), optional
        One entry per output column, in the output dtype.  Given without ``epilogue``, it
        means ``epilogue="bias"``.
    epilogue : str, optional
        See :data:`EPILOGUES` (``"relu"``, ``"gelu"``, ``"bias_relu"``, ``"bias_gelu"``,
        ...).
    out : DeviceArray, optional
    compute, out_dtype
        As for :class:`Matmul`.
    a_scale, b_scale : DeviceArray, optional
        fp8 per-tensor scales.
    aux : DeviceArray, optional
        For the epilogues with an auxiliary matrix.
    stream : Stream, optional

    Returns
    -------
    DeviceArray, or ``(out, aux)`` for the forward ``*_aux`` epilogues.
    """
    a = operand(a, "a", "matmul")
    b = operand(b, "b", "matmul")
    if epilogue is None and bias is not None:
        epilogue = "bias"
    if out is not None:
        out = operand(out, "out", "matmul")
    if bias is not None:
        bias = operand(bias, "bias", "matmul")
    if aux is not None:
        aux = operand(aux, "aux", "matmul")
    key = (MATMUL_KEY, a._shape, a._strides, a._dtype, b._shape, b._strides, b._dtype,
           None if out is None else (out._shape, out._strides, out._dtype), epilogue, compute,
           None if out_dtype is None else np.dtype(out_dtype), a._device,
           alignment(a._ptr), alignment(b._ptr),
           None if out is None else alignment(out._ptr),
           None if bias is None else alignment(bias._ptr),
           None if aux is None else (aux._shape, alignment(aux._ptr)))
    plan = cache.get(key)
    if plan is None or plan.closed:
        aux_ld = None
        if aux is not None:
            aux_ld = aux._shape[-1] * (8 if aux._dtype == np.uint8 else 1)
        align = min(k for k in key[12:16] if k is not None)
        if aux is not None:
            align = min(align, key[16][1])
        plan = Matmul(a, b, out=out, out_dtype=out_dtype, compute=compute, epilogue=epilogue,
                      aux_ld=aux_ld, min_alignment=align).plan()
        plan = cache.put(key, plan)
    return plan.execute(a, b, out=out, bias=bias, aux=aux, a_scale=a_scale, b_scale=b_scale,
                        stream=stream)


def plan_cache() -> dict:
    """The plans :func:`matmul` holds in the one plan cache, by raw key (a copy; read keys
    by name through ``cudalibs.driver.plan.cache.entries("cublaslt_matmul")``)."""
    return {e.raw_key: e.plan for e in cache.entries(MATMUL_KEY.name)}


def clear_plan_cache() -> None:
    """Drop every cached :func:`matmul` plan (each is freed once no caller holds it)."""
    cache.clear(MATMUL_KEY.name)
