"""cuBLASLt matmul plans: validation, heuristics, autotuning, execution, the one-shot form.

A :class:`Matmul` is a :class:`~cudalibs.runtime.plan.Plan` in the style of nvmath-python:
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

fp8 plans take scales per tensor, per row or in blocks (``scale_mode``; layouts and the
modes each GPU runs: :class:`Matmul`'s Notes), fp8 outputs with ``d_scale`` and ``amax``; the
rules are :mod:`.lt_problem`'s, checked before any descriptor exists.

:func:`cudalibs.cublas.matmul` is its one-shot form (:mod:`cudalibs.cublas.matmul`): its plans
are found through the one front in the one plan cache, under keys of kind
``"cublaslt_matmul"``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import threading
from ctypes import c_size_t, c_void_p

import numpy as np

from .. import dtypes as _dtypes
from ..driver import _lib as _drv
from ..driver.array import DeviceArray, byte_extent, empty, spans_overlap
from ..driver.device import as_device
from ..driver.stream import as_stream
from ..errors import CublasError
from ..runtime import relaunch as _relaunch
from ..runtime.operand import check_device, operand
from ..runtime.plan import Plan, scratch
from . import _lib
from ._base import lt_version, lt_version_int, raise_for
from ._common import OP_N, alignment, scalar_is_zero
from .handle import WORKSPACE_BYTES, lt_handle, workspace
from .lt_desc import EPILOGUES, SCALE_MODES, MatmulDesc, MatmulPreference, MatrixLayout
from .lt_problem import (SCALE_ALIGN, OutputScales, Problem, call_pointer_names,
                         placeholders, pointer_aligns, scale_pointer, validate)

_WS_BYTES = c_size_t(WORKSPACE_BYTES)
_WS_MASK = _relaunch.WORKSPACE_ALIGN - 1
#: The alignment an epilogue vector (bias) is passed at: cuBLASLt refuses some below it (a
#: bfloat16 bias at a 2-byte offset), so a less aligned one goes through an aligned copy.
BIAS_ALIGN = 16

__all__ = ["Matmul", "EPILOGUES", "BIAS_ALIGN", "SCALE_MODES"]

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
    return arr.shape, arr.strides, arr.dtype, arr


def _close_all(items) -> None:
    """The plan's release: close its descriptors (each frees its own C handle)."""
    for x in items:
        x.close()


class Matmul(Plan):
    """A cuBLASLt matmul plan (a :class:`~cudalibs.runtime.plan.Plan`): ``out = epilogue(alpha * a @ b + beta * c [+ bias])``.

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
        fp8 inputs: bfloat16 (default), float16, float32, ``float8_e4m3fn``, or
        ``float8_e5m2`` from an e4m3 x e5m2 product).
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
        fp8 only (``CUBLASLT_MATMUL_DESC_FAST_ACCUM``): keep the whole sum over K in the
        tensor cores' accumulator.  Hopper's fp8 MMA accumulates with about 14 significant
        bits; by default cuBLASLt adds its partial sums into float32 registers every few
        steps along K ("split accumulation"), so the error stays about that of a float32
        sum.  With ``fast_accum`` the reduced-precision accumulation runs over all of K:
        a few percent faster, with an error that grows with K (relative errors near 1e-2
        at K of a few thousand) -- what frameworks use for the forward pass, not for
        gradients.  Not with the block scale modes.
    scale_mode : str or (str, str), optional
        fp8 only: how ``a_scale`` and ``b_scale`` scale the operands, one name for both or
        ``(a's mode, b's mode)``: ``"tensor"`` (default), ``"row"``, ``"block128"``,
        ``"block128x128"`` (:data:`SCALE_MODES`; layouts in the Notes).
    amax : bool, default False
        fp8 outputs only: every call also writes ``max |D|`` (after the epilogue, before
        ``d_scale``) to a float32 device scalar (``CUBLASLT_MATMUL_DESC_AMAX_D_POINTER``);
        :meth:`execute` then takes ``amax=``.
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
    :func:`cudalibs.runtime.plan.time_candidates`, keeping the choice in the tuning store.
    Several threads may execute one plan at once: where the epilogue reads a per-call
    pointer from the descriptor (bias, aux, fp8 scales), writing it and enqueueing the
    matmul happen under one lock, so each call runs with its own pointers.

    **fp8** (``float8_e4m3fn`` / ``float8_e5m2`` inputs, not both e5m2) needs compute
    capability 8.9 or newer and the layout cuBLASLt's fp8 kernels take: ``a`` row-major (unit
    stride in its last dimension) and ``b`` column-major, i.e. ``w.T`` of a row-major
    ``(N, K)`` weight, with ``K`` a multiple of 16.  A call computes::

        D_temp = epilogue(alpha * (a * a_scale) @ (b * b_scale) [+ bias])
        amax = max |D_temp|;   out = d_scale * D_temp    (d_scale, amax: fp8 outputs)

    The scales are float32 device arrays passed to :meth:`execute`, laid out by
    ``scale_mode`` as below, in this row-major API's terms (cuBLASLt gives them in its
    column-major view, where our ``a`` is its B and our ``b`` its A; ``Kb = K / 128``,
    ``Kb4 = Kb`` rounded up to a multiple of 4):

    ================  ==============================  =====================================
    mode              ``a_scale`` (a is (M, K))       ``b_scale`` (b = w.T is (K, N))
    ================  ==============================  =====================================
    ``tensor``        one float32, or None (1)        one float32, or None (1)
    ``row``           (M,) or (M, 1): per row         (N,) or (1, N): per column (row of w)
    ``block128``      (M, Kb), column-major: per row  (Kb, N) C-contiguous: per column and
                      and 128 elements of K           128 elements of K
    ``block128x128``  (M/128, Kb), rows Kb4 apart:    (Kb, N/128), columns Kb4 apart: the
                      per 128x128 block               ``.T`` of w's (N/128, Kb4) C-contig.
    ================  ==============================  =====================================

    Which modes the GPU runs: ``"tensor"`` on compute capability 8.9 (Ada) and 9.0 (Hopper)
    and later; ``"row"`` (``OUTER_VEC_32F``) and the block modes (``VEC128_32F``,
    ``BLK128x128_32F``) on 9.0 only, with cuBLASLt 12.9 or newer -- cuBLASLt implements them
    for Hopper (its Blackwell kernels take the VEC32/VEC16 block formats instead); anywhere
    else construction raises ``ValueError``.  Pairs (what cuBLASLt 13.1 runs on an H100):
    ``tensor``/``tensor``, ``row``/``row``, ``block128`` with ``block128`` or
    ``block128x128`` either way round -- not ``block128x128`` on both, nor ``row`` or
    ``tensor`` with another mode.  The row and block modes write bfloat16, float16 or
    float32 (no fp8), take the epilogues ``"bias"``, ``"gelu"``, ``"gelu_bias"`` or none, 2-D
    operands with M and N multiples of 8; the block modes also K a multiple of 128 (and M or
    N of the 128x128-blocked operand), and no ``fast_accum``.  ``a_scale`` and ``b_scale``
    must be 16-byte aligned in every mode (cuBLASLt refuses them less aligned); ``d_scale``
    and ``amax`` need a float32's 4 bytes.

    An fp8 output (``float8_e4m3fn``, or ``float8_e5m2`` from e4m3 x e5m2) comes with the
    per-tensor mode, takes ``d_scale`` and, with ``amax=True``, writes ``amax``; it has no
    addend (``c``, ``beta``) and no aux matrix: its epilogues are ``"bias"``, ``"gelu"`` and
    ``"gelu_bias"`` (cuBLASLt 13.1 has no GELU_AUX kernel beside an fp8 or float32 output on
    sm_90; the ``*_aux`` epilogues of fp8 inputs write bfloat16 or float16).  cuBLASLt's fp8
    table fixes the bias type: float16 beside a float16 output, bfloat16 beside every other
    (float32 and fp8 included).  ``amax`` of a bfloat16, float16 or float32 output is refused
    (cuBLASLt's heuristic answers CUBLAS_STATUS_INVALID_VALUE).  Any other combination the
    loaded library has no kernel for is a ``ValueError`` from :meth:`plan`.
    """

    kind = "cublaslt_matmul"
    library = "cuBLASLt"

    def __init__(self, a, b, c=None, *, out=None, out_dtype=None, compute=None, epilogue=None,
                 alpha=1, beta=0, aux_ld=None, fast_accum=False, scale_mode=None,
                 amax=False, device=None, min_alignment=None, max_candidates: int = 8,
                 workspace_bytes: int = WORKSPACE_BYTES):
        specs = [_spec(a, "a"), _spec(b, "b"), None if c is None else _spec(c, "c"),
                 None if out is None else _spec(out, "out")]
        examples = [s[3] for s in specs if s is not None and s[3] is not None]
        dev = examples[0].device if device is None and examples else as_device(device)
        for x, name in zip((s[3] if s else None for s in specs), ("a", "b", "c", "out")):
            if x is not None:
                check_device(x, dev, name, _OP)
        self._init_plan(dev)
        if min_alignment is None:
            min_alignment = min([alignment(x.address) for x in examples] or [256])
        p = validate(specs, dev, out_dtype, compute, epilogue, alpha, beta, aux_ld,
                     fast_accum, min_alignment, max_candidates, workspace_bytes,
                     scale_mode=scale_mode, amax=amax)
        self._build(p)

    # -- construction: descriptors -----------------------------------------------------------
    def _build(self, p: Problem) -> None:
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
            # An fp8 output's C has another type (cuBLASLt's fp8 table): its own layout, and
            # no pointer (there is no addend).
            lcc = lc
            if p.d_fp8:
                lcc = MatrixLayout(p.c_np, N, M, max(p.ldo, 1))
                made.append(lcc)
            desc = MatmulDesc(p.compute_type, _dtypes.lookup(p.scale_np).cuda)
            made.append(desc)
            desc.set("transa", p.opb[0])
            desc.set("transb", p.opa[0])
            desc.set("epilogue", epi.value)
            if epi.bias:
                desc.set("bias_data_type", _dtypes.lookup(p.bias_np).cuda)
            if epi.aux:
                desc.set("epilogue_aux_ld", p.ld_aux)
                if p.batch > 1:
                    desc.set("epilogue_aux_batch_stride", p.ld_aux * M)
            if p.fp8 and p.fast_accum:
                desc.set("fast_accum", 1)
            if p.modes is not None and p.modes != ("tensor", "tensor"):
                # cuBLASLt's A is our b: its A scale mode is b's.
                desc.set("a_scale_mode", SCALE_MODES[p.modes[1]])
                desc.set("b_scale_mode", SCALE_MODES[p.modes[0]])
            pref = MatmulPreference(p.workspace)
            made.append(pref)
            for which in "abcd":
                pref.set(f"min_alignment_{which}_bytes", p.align)
            # Pointer attributes take part in the heuristic's alignment checks (and an amax
            # pointer in its choice of kernels that reduce one): placeholders aligned like
            # real buffers until the first execute writes real ones.
            for name in placeholders(p):
                desc.set(name, 256)
        except BaseException:
            _close_all(made)
            raise
        # The recorded kernels of this plan's call shapes (runtime.relaunch), closed with it.
        self.relaunches = _relaunch.RelaunchSlots()
        made.append(self.relaunches)
        self._own(_close_all, made)
        self._layouts, self._desc, self._pref = (la, lb, lc), desc, pref
        # C's layout (D's but for an fp8 output), and whether C is passed as NULL.
        self._lc_c, self._c_null = lcc, p.d_fp8
        self._p = p
        self._specs = p.specs
        self._out_shape, self._out_dtype, self._epi = p.out_shape, od, epi
        self._bias_len, self._bias_dtype = N, (p.bias_np if epi.bias else None)
        self._modes, self._scale_specs = p.modes, p.scale_specs
        self._d_fp8, self._amax = p.d_fp8, p.amax
        # d_scale and amax, where the plan has them.
        self._out_scales = OutputScales(p) if p.fp8 else None
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
        self._ptr_names = call_pointer_names(p)
        self._ptr_align = pointer_aligns(p)
        self._fn = _lib.get_lt().unchecked("cublasLtMatmul")
        self._algos: list = []
        self._algo = None

    # -- the plan protocol ------------------------------------------------------------------
    def _heuristics(self) -> list[dict]:
        dev = self._device
        k = self._p.max_candidates
        _drv.get().cuCtxSetCurrent(dev.raw_context)
        h = lt_handle(dev)
        results = (_lib.cublasLtMatmulHeuristicResult_t * k)()
        count = ctypes.c_int()
        la, lb, lc = self._layouts
        st = _lib.get_lt().cublasLtMatmulAlgoGetHeuristic(
            h, self._desc.raw, la.raw, lb.raw, self._lc_c.raw, lc.raw, self._pref.raw, k,
            results, ctypes.byref(count))
        if st:
            try:
                raise_for(st, "cublasLtMatmulAlgoGetHeuristic", f"no cuBLASLt algorithm for "
                          f"{self._problem()}")
            except CublasError as exc:
                if not self._fp8:
                    raise
                # An fp8 combination this library and GPU lack: say which, by name.
                raise ValueError(self._no_kernel(exc.name)) from exc
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
            if self._fp8:
                raise ValueError(self._no_kernel("no algorithm"))
            raise ValueError(f"cuBLASLt found no algorithm for {self._problem()} (check "
                             "dtypes, alignment and the epilogue's requirements)")
        self._algos = algos
        return out

    def _no_kernel(self, why: str) -> str:
        cc = self._device.compute_capability
        return (f"cuBLASLt {'.'.join(map(str, lt_version()))} has no kernel on sm_{cc[0]}"
                f"{cc[1]} for the fp8 matmul {self._problem()} ({why}): this combination of "
                "scale modes, output type, epilogue and aux type is not implemented there")

    def _select(self, i: int) -> None:
        self._algo = self._algos[i]
        # The call-shape keys of calls without per-call pointers, by whether c is out.
        self._keys = ((i, False), (i, True))

    def _problem(self) -> str:
        try:
            M, N, K = self._mnk
            a, b = self._specs
            modes, fast, amax = self._modes, self._p.fast_accum, self._amax
        except AttributeError:
            return "(incomplete)"
        batch = f"{self._batch}x " if self._batch > 1 else ""
        fp8 = ""
        if self._fp8:
            modes = modes or ("tensor", "tensor")
            fp8 = f", scale={modes[0]}" + (f"/{modes[1]}" if modes[1] != modes[0] else "")
            fp8 += ", fast_accum" * fast + ", amax" * amax
        return (f"{batch}({M}x{K} {a[2].name}) @ ({K}x{N} {b[2].name}) -> "
                f"{self._out_dtype.name}, epilogue={self._epi.name}{fp8}")

    def _tuning_key(self):
        p = self._p
        key = {"a": [list(p.specs[0][0]), list(p.specs[0][1]), p.specs[0][2].name],
               "b": [list(p.specs[1][0]), list(p.specs[1][1]), p.specs[1][2].name],
               "out": [list(p.out_shape), list(self._out_strides), p.od.name],
               "epilogue": p.epi.name, "compute": p.compute, "align": p.align,
               "aux_ld": p.ld_aux, "fast_accum": p.fast_accum,
               "beta": not scalar_is_zero(p.beta), "workspace": p.workspace}
        if p.fp8:
            # What else chooses an fp8 plan's kernels (others keep their stored keys).
            key.update(scale_mode=list(self.scale_modes), amax=p.amax)
        return key

    def _library_version(self) -> str:
        return str(lt_version_int())

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
            # Scales of the plan's layouts (the padded form of block scales, which cuBLASLt
            # reads whole), and the fp8 output's scalars.
            for spec in self._scale_specs:
                shape, strides = ((1,), None) if spec.shapes is None else \
                    (spec.shapes[-1], spec.strides[-1])
                extras[spec.what] = scratch(shape, np.float32, dev, stream, strides=strides)
            for name, on in (("d_scale", self._d_fp8), ("amax", self._amax)):
                if on:
                    extras[name] = scratch((1,), np.float32, dev, stream)
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
        :meth:`cudalibs.runtime.plan.Plan.autotune`); ``iterations`` is an older name of
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

    @property
    def scale_modes(self) -> tuple | None:
        """``(a's scale mode, b's)`` of an fp8 plan (``("tensor", "tensor")`` unless asked
        otherwise), None for other types."""
        if not self._fp8:
            return None
        return self._modes or ("tensor", "tensor")

    @property
    def scale_specs(self) -> tuple | None:
        """What :meth:`execute` takes as ``a_scale`` and ``b_scale`` (two
        :class:`~cudalibs.cublas.lt_problem.ScaleSpec`: shapes, strides, the layout in
        words), None for a plan without fp8 inputs."""
        return self._scale_specs

    def free(self) -> None:
        """Same as :meth:`close`."""
        self.close()

    # -- execution --------------------------------------------------------------------------
    def execute(self, a, b, c=None, *, out=None, bias=None, aux=None, a_scale=None,
                b_scale=None, d_scale=None, amax=None, stream=None):
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
            fp8 only: float32 device arrays dequantising ``a`` and ``b``, of the plan's scale
            modes (:attr:`scale_specs`; the class Notes give every layout).  Per tensor: one
            float32 each, default 1; the other modes require both.
        d_scale : DeviceArray, optional
            fp8 outputs only: the float32 device scalar ``out`` is multiplied by before it is
            rounded to fp8 (default 1).
        amax : DeviceArray
            Required by a plan made with ``amax=True``: a float32 device scalar the call
            sets to ``max |D|`` (after the epilogue, before ``d_scale``).
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
        a = operand(a, "a", _OP, stream=stream)
        b = operand(b, "b", _OP, stream=stream)
        s = as_stream(stream, dev)
        if out is None:
            if not self._default_out:
                raise ValueError("this plan was made for a strided out; pass out=")
            out = empty(self._out_shape, self._out_dtype, device=dev, stream=s)
        else:
            out = operand(out, "out", _OP, stream=stream)
            self._check_out(out, "out")
        if c is not None:
            c = operand(c, "c", _OP, stream=stream)
            self._check_out(c, "c")
        return self._launch(self._algo, a, b, c, out, s, bias=bias, aux=aux, a_scale=a_scale,
                            b_scale=b_scale, d_scale=d_scale, amax=amax)

    __call__ = execute

    def _launch(self, algo, a, b, c, out, s, bias=None, aux=None, a_scale=None,
                b_scale=None, d_scale=None, amax=None):
        """Check the call's operands against the plan and enqueue one matmul with ``algo``."""
        dev = self._device
        spec_a, spec_b = self._specs
        align = self._align - 1
        if (a.shape, a.strides, a.dtype) != spec_a or a.device is not dev or \
                a.address & align:
            self._check_operand(a, spec_a, "a")
        if (b.shape, b.strides, b.dtype) != spec_b or b.device is not dev or \
                b.address & align:
            self._check_operand(b, spec_b, "b")
        a_ptr, b_ptr = a.address, b.address
        d_ptr = self._ptr(out, "out")
        if c is not None and self._c_null:
            raise ValueError(f"this plan writes {self._out_dtype}: an fp8 output takes no c")
        c_ptr = d_ptr if c is None else self._ptr(c, "c")
        ea, eb, ed = self._exts
        if spans_overlap(d_ptr, ed, a_ptr, ea) or spans_overlap(d_ptr, ed, b_ptr, eb):
            raise ValueError("Matmul: out overlaps an input: cuBLASLt reads the inputs while "
                             "writing out, so they must not share the same memory")
        ptrs, aux_out, after = self._call_pointers(bias, aux, a_scale, b_scale, s)
        if self._fp8:
            ptrs += self._out_scales.pointers(d_scale, amax, self._device, s)
        elif d_scale is not None or amax is not None:
            raise ValueError("d_scale and amax apply to fp8 matmuls only")
        st = self._run(algo, a_ptr, b_ptr, c_ptr, d_ptr, s, ptrs)
        if st:
            raise_for(st, "cublasLtMatmul", repr(self))
        if after is not None:
            after()
        return out if aux_out is None else (out, aux_out)

    def _run(self, algo, a_ptr, b_ptr, c_ptr, d_ptr, s, ptrs=(), alpha_p=None,
             beta_p=None) -> int:
        """Enqueue the matmul on checked pointers (``ptrs``: the descriptor's per-call
        pointers as ``(attribute, address)`` pairs; ``alpha_p``/``beta_p``: host scalars
        other than the plan's); the status.  The hot path of :meth:`execute` and of
        :func:`cudalibs.cublas.gemm`'s cuBLASLt route."""
        dev = self._device
        _drv.get().cuCtxSetCurrent(dev.raw_context)
        ws = workspace(dev, s.raw_handle)
        in_place = c_ptr == d_ptr
        if algo is self._algo and alpha_p is None and not ws & _WS_MASK:
            # The call shape: the algorithm, whether c is out, which pointers are given.
            if ptrs:
                key = (self._choice, in_place, tuple(n for n, v in ptrs if v))
                addrs = (d_ptr, b_ptr, a_ptr, ws) if in_place else \
                    (d_ptr, c_ptr, b_ptr, a_ptr, ws)
                addrs += tuple(v for _, v in ptrs if v)
            else:
                key = self._keys[in_place]
                addrs = (d_ptr, b_ptr, a_ptr, ws) if in_place else \
                    (d_ptr, c_ptr, b_ptr, a_ptr, ws)
            if self.relaunches.launch(key, addrs, s, self, dev):
                return 0
        la, lb, lc = self._layouts
        args = (lt_handle(dev, s.raw_handle), self._desc._raw,
                self._alpha_p if alpha_p is None else alpha_p,
                c_void_p(b_ptr), la._raw, c_void_p(a_ptr), lb._raw,
                self._beta_p if beta_p is None else beta_p,
                c_void_p(None if self._c_null else c_ptr), self._lc_c._raw,
                c_void_p(d_ptr), lc._raw, ctypes.byref(algo), c_void_p(ws), _WS_BYTES, s.raw)
        if ptrs:
            # The descriptor is shared by every thread executing this plan: its pointers and
            # the enqueue that reads them form one step.
            with self._ptr_lock:
                last = self._set_ptrs
                for name, value in ptrs:
                    if last.get(name) != value:
                        self._desc.set(name, value)
                        last[name] = value
                return self._fn(*args)
        return self._fn(*args)

    def recording(self, key):
        """How to record call shape ``key`` for relaunching (the owner side of
        :meth:`cudalibs.runtime.relaunch.RelaunchSlots.launch`)."""
        choice, in_place = key[0], key[1]
        live = key[2] if len(key) > 2 else ()
        if choice != self._choice:
            return None
        algo = self._algo
        nulls = [n for n in self._ptr_names if n not in live]
        la, lb, lc = self._layouts
        dev = self._device

        def enqueue(cs, addrs):
            if in_place:
                d, bp, ap, w, *vals = addrs
                cp = None if self._c_null else d
            else:
                d, cp, bp, ap, w, *vals = addrs
            try:
                for name, v in zip(live, vals):
                    self._desc.set(name, v)
                for name in nulls:
                    self._desc.set(name, 0)
                st = self._fn(lt_handle(dev), self._desc._raw, self._alpha_p, c_void_p(bp),
                              la._raw, c_void_p(ap), lb._raw, self._beta_p, c_void_p(cp),
                              self._lc_c._raw, c_void_p(d), lc._raw, ctypes.byref(algo),
                              c_void_p(w), _WS_BYTES, cs.raw)
            finally:
                # The descriptor now holds probe addresses: the next call writes its own.
                self._set_ptrs.clear()
            if st:
                raise_for(st, "cublasLtMatmul", repr(self))

        n = 4 if in_place else 5
        aligns = tuple(_relaunch.WORKSPACE_ALIGN if i == n - 1 else self._align
                       for i in range(n)) + tuple(self._ptr_align.get(name, SCALE_ALIGN) for name in live)
        return _relaunch.Recording(enqueue, aligns, f"cublasLtMatmul {self._problem()}",
                                   prepare=lambda cs: lt_handle(dev),
                                   lock=self._ptr_lock if self._ptr_attrs else None)

    def relaunch_slots(self) -> list:
        return [self.relaunches]

    def _call_pointers(self, bias, aux, a_scale, b_scale, s):
        """``([(descriptor attribute, pointer), ...], aux array to return or None, a
        callable to run after the call or None)``."""
        epi = self._epi
        ptrs = []
        after = None
        if epi.bias:
            if bias is None:
                raise ValueError(f"epilogue {epi.name!r} needs bias (shape ({self._bias_len},), "
                                 f"{self._bias_dtype})")
            bias = operand(bias, "bias", _OP, stream=s)
            check_device(bias, self._device, "bias", _OP)
            if bias.shape != (self._bias_len,) or bias.dtype != self._bias_dtype or (
                    self._bias_len > 1 and bias.strides[0] != bias.dtype.itemsize):
                raise ValueError(f"bias must be a contiguous ({self._bias_len},) "
                                 f"{self._bias_dtype} array (one entry per output column), "
                                 f"not {bias.shape} {bias.dtype}")
            if bias.address & (BIAS_ALIGN - 1):
                # cuBLASLt refuses some epilogue vectors below its alignment (a bfloat16 bias
                # at 2 bytes): the call reads, or the *_bgrad epilogues write, an aligned copy.
                staged = empty(bias.shape, bias.dtype, device=self._device, stream=s)
                if epi.bias == "out":
                    after = functools.partial(bias.copy_, staged, s)
                else:
                    staged.copy_(bias, s)
                bias = staged
            ptrs.append(("bias_pointer", bias.address))
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
                # a forward epilogue writes aux; a backward one reads it
                aux = operand(aux, "aux", _OP, stream=s, written=epi.aux != "in")
            if aux.shape != self._aux_shape or aux.dtype != self._aux_dtype or \
                    not aux.is_c_contiguous:
                raise ValueError(f"aux must be a C-contiguous {self._aux_shape} "
                                 f"{self._aux_dtype} array, not {aux.shape} {aux.dtype}")
            ptrs.append(("epilogue_aux_pointer", self._ptr(aux, "aux")))
            if epi.aux == "out":
                aux_out = aux
        elif aux is not None:
            raise ValueError(f"epilogue {epi.name!r} has no aux matrix")
        if self._fp8:
            # cuBLASLt's A is our b: its A scale is b's.
            spec_a, spec_b = self._scale_specs
            ptrs.append(("a_scale_pointer", scale_pointer(b_scale, spec_b, self._device, s)))
            ptrs.append(("b_scale_pointer", scale_pointer(a_scale, spec_a, self._device, s)))
        elif a_scale is not None or b_scale is not None:
            raise ValueError("a_scale/b_scale apply to fp8 matmuls only")
        return ptrs, aux_out, after

    def _check_operand(self, x: DeviceArray, spec, what: str) -> None:
        shape, strides, dtype = spec
        if x.shape != shape or x.strides != strides or x.dtype != dtype:
            raise ValueError(f"{what} is {x.shape} {x.dtype} with strides {x.strides}; "
                             f"the plan was made for {shape} {dtype} strides {strides}")
        self._ptr(x, what)

    def _ptr(self, x: DeviceArray, what: str) -> int:
        check_device(x, self._device, what, _OP)
        ptr = x.address
        if ptr & (self._align - 1):
            raise ValueError(f"{what} at 0x{ptr:x} is not aligned to {self._align} bytes, which "
                             "the plan assumed (make the plan from this array, or pass "
                             "min_alignment=)")
        return ptr

    def _check_out(self, x: DeviceArray, what: str) -> None:
        if x.shape != self._out_shape or x.dtype != self._out_dtype:
            raise ValueError(f"{what} is {x.shape} {x.dtype}; the plan writes "
                             f"{self._out_shape} {self._out_dtype}")
        want = self._out_strides
        M, N, _ = self._mnk
        bad = (N > 1 and x.strides[-1] != want[-1]) or (M > 1 and x.strides[-2] != want[-2]) \
            or (self._batch > 1 and x.strides[0] != want[0])
        if bad:
            raise ValueError(f"{what} has strides {x.strides}; the plan was made for a row "
                             f"stride of {want[-2] // self._out_dtype.itemsize} elements")


def _algo_id(algo) -> int:
    value = ctypes.c_int()
    written = ctypes.c_size_t()
    st = _lib.get_lt().cublasLtMatmulAlgoConfigGetAttribute(
        ctypes.byref(algo), _lib.CUBLASLT_ALGO_CONFIG_ID, ctypes.byref(value),
        ctypes.sizeof(value), ctypes.byref(written))
    return value.value if st == 0 else -1
