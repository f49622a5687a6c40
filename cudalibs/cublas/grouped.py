"""Grouped GEMM through cuBLAS: products of different shapes, one call or one GEMM each.

``out[i] = alpha * a[i] @ b[i] + beta * out[i]`` for groups ``i`` whose ``m``, ``n`` and ``k``
may all differ -- the expert layers of a mixture-of-experts model, with the tokens routed to
each expert known on the host -- as one ``cublasGemmGroupedBatchedEx`` call, or as one
prepared cuBLAS GEMM per group queued back to back: the plan's two candidates.

Which entry point
-----------------
``cublasGemmGroupedBatchedEx`` (cuBLAS 12.5 and later) is cuBLAS's grouped GEMM.  cuBLASLt
13.1 has none: its batch modes (``cublasLtBatchMode_t`` in cublasLt.h) are strided and
pointer-array batches of one shape, so a plan over groups of several shapes cannot be a
:class:`~cudalibs.cublas.Matmul`.  The grouped entry point takes float16 and bfloat16 inputs
computed in float32 (the mixture-of-experts case), float32 (optionally ``compute="tf32"``)
and float64 (:data:`GROUPED_SUPPORTED` lists the combinations); it takes no fp8 inputs (use
``cublas.matmul`` per group for those) and no algorithm.

Two candidates
--------------
The grouped call's kernels are not cuBLAS's best for large products: on an H100 (bf16) it
ran expert layers of 4096 -> 14336 at 210-270 TFLOP/s where a loop of single GEMMs ran them at
440-660, while on small layers (2048 -> 1408, 64 experts) the one call was 3x a loop whose
host cost per GEMM exceeded its GPU time.  So a :class:`GroupedGemm` has two candidates
(``plan.candidates``, their ``"id"`` below):

- ``"grouped"``: the one ``cublasGemmGroupedBatchedEx`` call (below);
- ``"per_group"``: one GEMM per product (per group with something to write), queued back to
  back on the call's stream through :class:`~cudalibs.cublas.GemmPlan`'s hot path -- the
  plan of :func:`~cudalibs.cublas.gemm` (its cuBLASLt route with an algorithm chosen once,
  or ``cublasGemmEx``, as :func:`~cudalibs.cublas.set_gemm_backend` says; relaunched like
  any repeated ``gemm``), so each product costs a few microseconds of host time and no
  pointer arrays.  One GemmPlan per distinct layout (shape, strides, dtypes) of a product,
  made on the candidate's first run from that run's operands and kept (closed) with the
  grouped plan.

The heuristic puts ``"per_group"`` first when the mean product over the groups with
something to write has ``m * n * k >=`` :data:`PER_GROUP_MNK` (``2**32``, e.g. 256 tokens of
a 4096 x 4096 layer): such a GEMM runs for about 20 microseconds on an H100 even at 400
TFLOP/s, several times the host cost of queueing it, so the stream stays fed and each product
gets cuBLAS's kernel for its shape; below it the one grouped call, whose host cost does not
grow with the groups, comes first.  ``autotune()`` times both with the one timer and keeps
the faster in the tuning store.  They compute in the same compute and scale types, so they
agree to rounding, not bit for bit.  Either one runs deterministically for a given plan
choice.

Host sizes, device pointers
---------------------------
Transposes, sizes, leading dimensions, scalars and group sizes are host arrays that cuBLAS
reads during the call: a :class:`GroupedGemm` prepares them once for its problem.  The
matrices' addresses go in device arrays of pointers, which each call builds on its own stream
with the kernel library's ``grouped_ptrs`` kernel (the addresses travel as its by-value
argument: no host-to-device copy) in stream-ordered memory freed on the stream after the
call.  So every call has arrays of its own (threads share a plan), nothing synchronises, and a
graph capture records the kernel, the allocation and the free along with cuBLAS's kernels.
The sizes being host values, a captured call replays the sizes it was captured with: for
sizes that change on the device (tokens routed on the GPU) use
:func:`cudalibs.kernels.grouped_mm`, which reads them from device memory.  That kernel, like
this path, needs compute capability 8.0 or newer (``grouped_ptrs`` is in the same sm_80 file).

Row-major at the surface
------------------------
Each group maps like :func:`~cudalibs.cublas.gemm` (:func:`~cudalibs.cublas.gemm_args`):
cuBLAS's A is ``b[i]`` and its B is ``a[i]``, with ``m`` and ``n`` swapped; a transposed view
is a transpose flag.  A matrix with no unit stride in either dimension is refused (the call
makes no copies).  Consecutive groups of one shape and layout become one cuBLAS group.  Groups
with nothing to write (``m`` or ``n`` zero) are left out of the call.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from ctypes import c_void_p
from typing import NamedTuple

import numpy as np

from .. import dtypes as _dtypes
from ..driver import _lib as _drv
from ..driver.args import sequence
from ..driver.array import empty
from ..driver.stream import as_stream
from ..runtime import front as _front
from ..runtime import ptxlib
from ..runtime.cache import KeyKind
from ..runtime.operand import operand
from ..runtime.plan import Plan, scratch
from . import _lib
from ._base import raise_for, version
from ._common import INT_MAX, combo, gemm_args, scalar
from .gemm import GemmPlan, prepare_route, run_matched
from .handle import cublas_handle

__all__ = ["GroupedGemm", "gemm_grouped", "GROUPED_KEY", "GROUPED_SUPPORTED", "PER_GROUP_MNK"]

#: The (input, output, compute) combinations cublasGemmGroupedBatchedEx takes.
_KEYS = {(np.dtype(np.float16), np.dtype(np.float16), c) for c in (None, "f32")} | \
    {(np.dtype(np.float32), np.dtype(np.float32), c) for c in (None, "f32", "tf32")} | \
    {(np.dtype(np.float64), np.dtype(np.float64), c) for c in (None, "f64")}
if _dtypes.bfloat16 is not None:
    _KEYS |= {(np.dtype(_dtypes.bfloat16), np.dtype(_dtypes.bfloat16), c) for c in (None, "f32")}

#: The supported combinations, as text: ``"a/b dtype -> out dtype (compute=...)"``.
GROUPED_SUPPORTED = tuple(sorted({f"{ab.name} -> {c.name} (compute={comp or 'default'})"
                                  for ab, c, comp in _KEYS}))

#: The kernel of the pointer arrays takes this many addresses per launch (its by-value table).
_TABLE = 256

#: The heuristic's threshold: a mean ``m * n * k`` per product (over the groups with something
#: to write) at least this puts the per-group GEMMs first, below it the grouped call.
PER_GROUP_MNK = 1 << 32

#: The candidates' ids, in :attr:`GroupedGemm.candidates` and the tuning store.
_GROUPED, _PER_GROUP = "grouped", "per_group"

#: The keys of :func:`gemm_grouped`'s plans in the one plan cache: ``groups`` holds each
#: group's ``(a shape, a strides, b shape, b strides, out shape and strides or None)``.
GROUPED_KEY = KeyKind("cublas_gemm_grouped", ("groups", "dtype", "out_dtype", "compute",
                                              "device"))


class _Groups(NamedTuple):
    """The operands of one call through the one operand path: lists of DeviceArrays."""

    a: list
    b: list
    out: list | None
    layout: tuple


def _operands(op, a_list, b_list, out_list, stream) -> _Groups:
    """Every matrix through the one operand path, on the first one's device."""
    a_list = sequence(a_list, f"{op}: a_list", "arrays")
    b_list = sequence(b_list, f"{op}: b_list", "arrays")
    if not a_list:
        raise ValueError(f"{op}: a_list is empty; a grouped GEMM needs at least one group")
    if len(b_list) != len(a_list):
        raise ValueError(f"{op}: a_list has {len(a_list)} matrices but b_list has "
                         f"{len(b_list)}: one pair per group")
    a0 = operand(a_list[0], "a[0]", op, stream=stream)
    dev = a0.device
    a = [a0] + [operand(x, f"a[{i}]", op, device=dev, stream=stream)
                for i, x in enumerate(a_list[1:], 1)]
    b = [operand(x, f"b[{i}]", op, device=dev, stream=stream) for i, x in enumerate(b_list)]
    out = None
    if out_list is not None:
        out_list = sequence(out_list, f"{op}: out_list", "arrays")
        if len(out_list) != len(a_list):
            raise ValueError(f"{op}: out_list has {len(out_list)} matrices; there are "
                             f"{len(a_list)} groups")
        out = [operand(x, f"out[{i}]", op, device=dev, stream=stream)
               for i, x in enumerate(out_list)]
    layout = tuple((x.shape, x.strides, y.shape, y.strides,
                    _new_out(x, y) if out is None else (out[i].shape, out[i].strides))
                   for i, (x, y) in enumerate(zip(a, b)))
    return _Groups(a, b, out, layout)


def _new_out(a, b):
    """The layout of a new output of ``a @ b`` (C-contiguous, the input type), so that a plan
    made without outputs serves C-contiguous ones too; None for operands that are not
    matrices (the plan refuses them)."""
    if len(a.shape) != 2 or len(b.shape) != 2:
        return None
    item = a.dtype.itemsize
    return (a.shape[0], b.shape[1]), (b.shape[1] * item, item)


def _one_dtype(op, arrays, name) -> np.dtype:
    dt = arrays[0].dtype
    for i, x in enumerate(arrays):
        if x.dtype != dt:
            raise TypeError(f"{op}: {name}[{i}] is {x.dtype} but {name}[0] is {dt}: every "
                            "group has one type")
    return dt


def _check_overlaps(op, outs, inputs) -> None:
    """Refuse an output that shares memory with an input or with another output (sorted
    spans, one pass: an output must start past every span before it, an input past every
    output before it).  The matrices were checked against a plan: 2-D, non-negative
    strides."""
    spans = []
    for code, arrays in enumerate((outs, inputs[0], inputs[1])):
        for i, x in enumerate(arrays):
            (r, c), (sr, sc) = x.shape, x.strides
            if r and c:
                lo = x.address
                spans.append((lo, lo + (r - 1) * sr + (c - 1) * sc + x.dtype.itemsize, code, i))
    spans.sort()
    reach_all = reach_out = (-1, None)
    for lo, hi, code, i in spans:
        other = reach_out if code else reach_all
        if lo < other[0]:
            names = ("out", "a", "b")
            j, k = other[1]
            raise ValueError(f"{op}: {names[code]}[{i}] overlaps {names[j]}[{k}]; cuBLAS reads "
                             "the inputs while it writes the outputs, so an output must share "
                             "memory with nothing else")
        if hi > reach_all[0]:
            reach_all = (hi, (code, i))
        if not code and hi > reach_out[0]:
            reach_out = (hi, (code, i))


class GroupedGemm(Plan):
    """A prepared grouped GEMM: ``out[i] = alpha * a[i] @ b[i] + beta * out[i]`` for groups of
    different shapes, as one ``cublasGemmGroupedBatchedEx`` or as one GEMM per group.

    The plan holds what cuBLAS's grouped call reads on the host (transposes, sizes, leading
    dimensions, group sizes, the default scalars); every execution of that candidate builds
    the device arrays of the matrices' addresses on its stream (see the module notes).  The
    other candidate queues one prepared GEMM per group (a :class:`~cudalibs.cublas.GemmPlan`
    per distinct layout, made on its first run and kept).  Neither stores anything per call
    on the plan, so threads may share it, and neither synchronises, so graph captures record
    everything (run the plan once before a capture: the per-group GEMMs' plans are made on
    the first run).

    Candidates (:attr:`candidates`, by ``"id"``): ``"grouped"`` (the one grouped call) and
    ``"per_group"`` (one GEMM per group).  :meth:`plan` takes the heuristic's order: per-group
    first when the mean product has ``m * n * k >=`` :data:`PER_GROUP_MNK` (large expert
    layers, where single GEMMs run at two to three times the grouped call's rate and their
    host cost is hidden), the grouped call first otherwise (many small products, where one
    call's host cost beats one per group).  :meth:`autotune` times both;
    ``select(i)`` picks one by its index in :attr:`candidates`.

    Parameters
    ----------
    a_list, b_list : sequence of DeviceArray or CUDA array-like
        Examples of the operands, one ``(m_i, k_i)`` and one ``(k_i, n_i)`` matrix per group:
        their shapes, strides and dtypes are the problem.  One input dtype for all.
    out_list : sequence of DeviceArray, optional
        Examples of the outputs, ``(m_i, n_i)`` each, one dtype; default new C-contiguous
        ones of the input type.
    compute : str, optional
        ``None`` (float32 accumulation; float64 for float64), ``"tf32"`` for float32 inputs,
        or the default spelled out (``"f32"``, ``"f64"``).

    Raises
    ------
    TypeError
        Mixed dtypes; fp8 or another type the grouped call does not take.
    ValueError
        A pair whose inner dimensions differ, an output of the wrong shape, a matrix without a
        unit stride in one dimension, a size beyond cuBLAS's 32-bit ints, unequal list
        lengths, an empty list, operands on different devices.
    CudaLibsError
        The GPU is older than compute capability 8.0 (the pointer arrays' kernel is in
        grouped.ptx, built for sm_80).
    """

    kind = "cublas_gemm_grouped"
    library = "cuBLAS"

    def __init__(self, a_list, b_list, out_list=None, *, compute=None):
        op = "GroupedGemm"
        g = _operands(op, a_list, b_list, out_list, None)
        dev = g.a[0].device
        # Its pointer arrays are written by grouped_ptrs, a kernel of grouped.ptx.
        ptxlib.check_arch(dev, "grouped", op)
        self._init_plan(dev)
        self._validate(op, g, compute)
        # The per-group candidate's GemmPlans: made on its first run, closed with this plan.
        self.per_group = False              # which candidate execute runs (set by _select)
        self.gemms = None                   # a GemmPlan per active group, once made
        self._gemm_lock = threading.Lock()
        self._children: list = []
        self._own(_close_children, self._children)

    # -- construction -------------------------------------------------------------------------
    def _validate(self, op, g: _Groups, compute) -> None:
        ab = _one_dtype(op, g.a + g.b, "a")
        odt = ab if g.out is None else _one_dtype(op, g.out, "out")
        if compute is not None and not isinstance(compute, str):
            raise TypeError(f"{op}: compute must be a string such as 'tf32' or None, not "
                            f"{compute!r}")
        if (ab, odt, compute) not in _KEYS:
            fp8 = " (fp8 is not among them: use cublas.matmul per group)" \
                if ab.name.startswith("float8") else ""
            raise TypeError(f"{op}: cublasGemmGroupedBatchedEx does not take inputs of {ab} "
                            f"with an output of {odt} and compute={compute!r}; it takes "
                            f"{'; '.join(GROUPED_SUPPORTED)}{fp8}")
        self.combo = combo(ab, odt, compute)
        self.compute = compute
        item, oitem = ab.itemsize, odt.itemsize
        problems, active, shapes = [], [], []
        for i, (a, b) in enumerate(zip(g.a, g.b)):
            for name, x in (("a", a), ("b", b)):
                if len(x.shape) != 2:
                    raise ValueError(f"{op}: {name}[{i}] must be a matrix (2-D), got shape "
                                     f"{x.shape}")
            (m, k), (k2, n) = a.shape, b.shape
            if k != k2:
                raise ValueError(f"{op}: group {i}: inner dimensions differ: a[{i}] is "
                                 f"{a.shape}, b[{i}] is {b.shape}")
            o = None if g.out is None else g.out[i]
            if o is not None and o.shape != (m, n):
                raise ValueError(f"{op}: out[{i}] has shape {o.shape}; the product is "
                                 f"{(m, n)}")
            shapes.append((m, n, k))
            if not m or not n:
                continue            # nothing to write: left out of the call
            try:
                args = gemm_args(a.shape, a.strides, b.shape, b.strides,
                                 None if o is None else o.strides, item, oitem)
            except ValueError as exc:
                raise ValueError(f"{op}: group {i}: {exc}") from None
            for name, bad in (("a", args.copy_a), ("b", args.copy_b)):
                if bad:
                    x = a if name == "a" else b
                    raise ValueError(f"{op}: {name}[{i}] has no unit stride in either dimension "
                                     f"(strides {x.strides}); the grouped call makes no "
                                     "copies: pass a contiguous matrix or a transposed view")
            for name in ("m", "n", "k", "lda", "ldb", "ldc"):
                if getattr(args, name) > INT_MAX:
                    raise ValueError(f"{op}: group {i}: {name}={getattr(args, name)} exceeds "
                                     "cuBLAS's 32-bit int")
            active.append(i)
            problems.append(tuple(args[:8]))
        self.groups = len(g.a)
        self.shapes = shapes
        self.layout = g.layout
        self.active = tuple(active)
        # Consecutive problems of one shape and layout: one cuBLAS group.
        merged: list[list] = []
        for p in problems:
            if merged and merged[-1][0] == p:
                merged[-1][1] += 1
            else:
                merged.append([p, 1])
        gc = self.group_count = len(merged)
        cols = list(zip(*[p for p, _ in merged])) if merged else [()] * 8
        ints = ctypes.c_int * max(gc, 1)
        (self.transa, self.transb, self.m, self.n, self.k, self.lda, self.ldb,
         self.ldc) = (ints(*c) for c in cols)
        self.group_size = ints(*[count for _, count in merged])
        self.abtype = _dtypes.lookup(ab).cuda
        self.ctype = _dtypes.lookup(odt).cuda
        self.out_dtype = odt
        self.one = self.scalars(1, "alpha")
        self.zero = self.scalars(0, "beta")
        self.fn = _lib.get().cublasGemmGroupedBatchedEx
        # New outputs: one allocation, each group's matrix 256-byte aligned within it.
        starts, pos = [], 0
        for m, n, _ in shapes:
            starts.append(pos)
            pos += -(-(m * n * oitem) // 256) * 256 // oitem
        self.out_starts, self.out_elems = tuple(starts), max(pos, 1)
        # The heuristic's measure: the mean m * n * k of the products the call makes.
        sizes = [shapes[i][0] * shapes[i][1] * shapes[i][2] for i in active]
        self.mean_mnk = sum(sizes) / len(sizes) if sizes else 0.0

    def scalars(self, value, what):
        """``value`` as a host array of the scale type, one entry per cuBLAS group."""
        c = scalar(value, self.combo.scale, what)
        return (type(c) * max(self.group_count, 1))(*([c.value] * max(self.group_count, 1)))

    # -- the plan protocol --------------------------------------------------------------------
    def _heuristics(self) -> list[dict]:
        grouped = {"name": "cublasGemmGroupedBatchedEx", "id": _GROUPED, "workspace": 0}
        per = {"name": "per-group GEMMs", "id": _PER_GROUP, "workspace": 0}
        return [per, grouped] if self.mean_mnk >= PER_GROUP_MNK else [grouped, per]

    def _select(self, i: int) -> None:
        self.per_group = self._candidates[i]["id"] == _PER_GROUP

    def relaunch_slots(self) -> list:
        return [x for gp in list(self._children) for x in gp.relaunch_slots()]

    def _problem(self) -> str:
        ms, ns, ks = zip(*self.shapes)
        return (f"{self.groups} groups ({len(self.active)} products in {self.group_count} "
                f"cuBLAS groups) {self.combo.ab.name}->{self.combo.c.name} m {min(ms)}..{max(ms)}"
                f" n {min(ns)}..{max(ns)} k {min(ks)}..{max(ks)}")

    def _tuning_key(self):
        return {"ab": self.combo.ab.name, "c": self.combo.c.name,
                "compute": int(self.combo.compute),
                "groups": [[list(a_s), list(a_st), list(b_s), list(b_st),
                            None if o is None else [list(o[0]), list(o[1])]]
                           for a_s, a_st, b_s, b_st, o in self.layout]}

    def _library_version(self) -> str:
        return ".".join(map(str, version()))

    @contextlib.contextmanager
    def _runner(self, stream):
        dev, dt = self._device, self.combo.ab
        made = []

        def make(shape, strides, dtype):
            x = scratch(shape, dtype, dev, stream, strides)
            made.append(x)
            return x

        a = [make(a_s, a_st, dt) for a_s, a_st, _, _, _ in self.layout]
        b = [make(b_s, b_st, dt) for _, _, b_s, b_st, _ in self.layout]
        out = [make(o[0], o[1], self.out_dtype) for *_, o in self.layout]

        cands = self._candidates

        def run(i):
            _execute(self, a, b, out, 1, 0, stream, cands[i]["id"] == _PER_GROUP)

        try:
            yield run
        finally:
            for x in made:
                x.close()

    # -- execution ----------------------------------------------------------------------------
    def execute(self, a_list, b_list, out_list=None, *, alpha=1, beta=0, stream=None):
        """Run the plan on matrices of the shapes, strides and dtypes it was made for.

        Parameters
        ----------
        a_list, b_list, out_list
            As when the plan was made (the same layouts; any addresses).
        alpha, beta : scalar, default 1 and 0
            Finite; ``beta != 0`` needs ``out_list``.
        stream : Stream, optional
            The current stream by default.

        Returns
        -------
        list of DeviceArray
            The outputs (new ones, views of one allocation, when ``out_list`` is not given).
        """
        self._live()
        g = _operands("GroupedGemm.execute", a_list, b_list, out_list, stream)
        if g.layout != self.layout or g.a[0].dtype != self.combo.ab or (
                g.out is not None and g.out[0].dtype != self.out_dtype):
            raise ValueError("GroupedGemm.execute: the matrices' shapes, strides or dtypes are "
                             "not the plan's")
        _one_dtype("GroupedGemm.execute", g.a + g.b, "a")
        if g.out is not None:
            _one_dtype("GroupedGemm.execute", g.out, "out")
        return _execute(self, g.a, g.b, g.out, alpha, beta, stream)


def _close_children(children) -> None:
    """The release of a grouped plan: the per-group candidate's GemmPlans (the grouped call's
    arrays are per call)."""
    for c in children:
        c.close()
    children.clear()


def _gemm_plans(p: GroupedGemm, a, b, out):
    """Plan ``p``'s GemmPlan for each active group (one per distinct layout), made once from
    a call's operands (any call's serve: they have the plan's layouts) under the plan's lock,
    with their cuBLASLt routes prepared, so later runs build nothing."""
    with p._gemm_lock:
        if p.gemms is not None:
            return p.gemms
        by_layout: dict = {}
        plans = []
        for i in p.active:
            gp = by_layout.get(p.layout[i])
            if gp is None:
                gp = by_layout[p.layout[i]] = GemmPlan(a[i], b[i], out[i], compute=p.compute)
                p._children.append(gp)
                prepare_route(gp)
            plans.append(gp)
        p.gemms = tuple(plans)
        return p.gemms


def _pointer_arrays(dev, addresses, s):
    """A device array of ``addresses`` (uint64), written on stream ``s`` by ``grouped_ptrs``
    from the by-value table of its argument, one launch per :data:`_TABLE` addresses."""
    ptrs = empty((len(addresses),), np.uint64, device=dev, stream=s)
    host = np.asarray(addresses, dtype=np.uint64)
    for lo in range(0, len(addresses), _TABLE):
        chunk = host[lo:lo + _TABLE]
        table = np.zeros(_TABLE, np.uint64)
        table[:len(chunk)] = chunk
        ptxlib.launch(dev, "grouped_ptrs", (1, 1, 1), (_TABLE, 1, 1),
                      (ptrs.address + 8 * lo, len(chunk), table.tobytes()), s)
    return ptrs


def _execute(p: GroupedGemm, a, b, out, alpha, beta, stream, per_group=None):
    """Queue plan ``p`` on checked operands (the hot path): its chosen candidate, or the one
    ``per_group`` names (timing)."""
    dev = p.device
    s = as_stream(stream, dev)
    if per_group is None:
        if p._choice < 0:
            p.plan()
        per_group = p.per_group
    alpha_c = p.one if type(alpha) is int and alpha == 1 else p.scalars(alpha, "alpha")
    beta_c = p.zero if type(beta) is int and beta == 0 else p.scalars(beta, "beta")
    if out is None:
        if beta_c is not p.zero and any(bytes(beta_c)):
            raise ValueError("gemm_grouped: beta != 0 accumulates into out_list, so it must be "
                             "given")
        flat = empty((p.out_elems,), p.out_dtype, device=dev, stream=s)
        out = [flat[st:st + m * n].reshape((m, n)) for st, (m, n, _) in
               zip(p.out_starts, p.shapes)]
    else:
        _check_overlaps("gemm_grouped", out, (a, b))
    if not p.active:
        return out
    if per_group:
        gemms = p.gemms or _gemm_plans(p, a, b, out)
        for i, gp in zip(p.active, gemms):
            run_matched(gp, a[i], b[i], out[i], alpha, beta, s)
        return out
    act = p.active
    # cuBLAS's A is b (row-major mapping), its B is a.
    addrs = [b[i].address for i in act] + [a[i].address for i in act] + \
        [out[i].address for i in act]
    ptrs = _pointer_arrays(dev, addrs, s)
    n = len(act)
    base = ptrs.address
    try:
        _drv.get().cuCtxSetCurrent(dev.raw_context)
        h = cublas_handle(dev, s.raw_handle)
        st = p.fn(h, p.transa, p.transb, p.m, p.n, p.k, alpha_c, c_void_p(base), p.abtype,
                  p.lda, c_void_p(base + 8 * n), p.abtype, p.ldb, beta_c,
                  c_void_p(base + 16 * n), p.ctype, p.ldc, p.group_count, p.group_size,
                  p.combo.compute)
    finally:
        ptrs.close()        # freed on the stream, after the call has read it
    if st:
        raise_for(st, "cublasGemmGroupedBatchedEx", repr(p))
    return out


def gemm_grouped(a_list, b_list, out_list=None, *, alpha=1, beta=0, compute=None,
                 stream=None):
    """Grouped GEMM: ``out[i] = alpha * a[i] @ b[i] + beta * out[i]`` for groups of different
    shapes, as one ``cublasGemmGroupedBatchedEx`` call or one GEMM per group.

    numpy (row-major) semantics per group; transposed views are passed as transpose flags.
    The problem's :class:`GroupedGemm` is found in the one plan cache (:data:`GROUPED_KEY`)
    and runs the candidate its heuristic puts first (per-group GEMMs when the mean product
    has ``m * n * k >=`` :data:`PER_GROUP_MNK`, else the grouped call) unless the cached plan
    was autotuned or given another with ``select``.
    The sizes are host values: a graph capture replays the sizes it captured (for sizes read
    from device memory, see :func:`cudalibs.kernels.grouped_mm`).

    Parameters
    ----------
    a_list : sequence of DeviceArray or CUDA array-like
        ``(m_i, k_i)`` matrices, one per group (``m_i`` may be 0).
    b_list : sequence of DeviceArray or CUDA array-like
        ``(k_i, n_i)`` matrices, same dtype: float16, bfloat16, float32 or float64.
    out_list : sequence of DeviceArray, optional
        ``(m_i, n_i)`` matrices with unit stride in their last dimension, written in place,
        sharing memory with no input and no other output.  Default: new matrices of the input
        type (views of one allocation on ``stream``).
    alpha, beta : scalar, default 1 and 0
        One pair for every group; finite; ``beta != 0`` needs ``out_list``.
    compute : str, optional
        As for :class:`GroupedGemm`.
    stream : Stream, optional
        The current stream by default.

    Returns
    -------
    list of DeviceArray
        The outputs.

    Raises
    ------
    TypeError, ValueError, CudaLibsError
        As for :class:`GroupedGemm`; outputs overlapping inputs or each other; non-finite
        scalars.
    """
    g = _operands("gemm_grouped", a_list, b_list, out_list, stream)
    ab = g.a[0].dtype
    odt = ab if g.out is None else g.out[0].dtype
    key = (GROUPED_KEY, g.layout, ab, odt, compute, g.a[0].device)
    p = _front.lookup(key)
    if p is None:
        p = _front.insert(key, GroupedGemm(g.a, g.b, g.out, compute=compute))
    else:
        _one_dtype("gemm_grouped", g.a + g.b, "a")
        if g.out is not None:
            _one_dtype("gemm_grouped", g.out, "out")
    return _execute(p, g.a, g.b, g.out, alpha, beta, stream)
