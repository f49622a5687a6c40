"""Scaled dot-product attention as cuDNN operation graphs: the lowering behind
:class:`~cudalibs.cudnn.attention.SdpaPlan` and :class:`~cudalibs.cudnn.attention.SdpaBackwardPlan`.

Two lowerings of each direction:

*composite*
    The attention written out in generic operations, the pattern cuDNN's fused flash-attention
    engine recognises and generates one kernel for.  Forward::

        S = (Q @ K^T) * scale [+ bias]            matmul, pointwise mul [, add]
        S = select(row < len_q & col < len_kv, S, -inf)    padding: gen_index, cmp_lt, and
        S = select(row >= col, S, -inf)           causal (top left): gen_index, cmp_ge, select
        M = max(S); E = exp(S - M); L = sum(E)    reductions over the key axis
        stats = M + log(L); P = E / L             the statistic the backward reads
        P = P * bernoulli(1 - p) / (1 - p)        dropout: rng, mul, mul
        O = P @ V                                  matmul

    The variants (:mod:`.masks`) add their pieces in place: softcap after the scale, ALiBi
    after the bias, a bottom-right diagonal or a sliding window in the causal mask's place,
    and in the backward the bias gradient (a sum reduction of ``dS``, in the lowering
    ``"composite_dp"`` only) and the softcap's derivative before the scale.

    Backward (``D`` the row sums of ``dO * O``)::

        P  = exp(S - stats) [* mask / (1 - p)]    S recomputed as above
        dV = P^T @ dO                              [summed over each group's heads (GQA)]
        dS = P * (dO @ V^T [* mask / (1 - p)] - D) * scale
        dK = dS^T @ Q                              [summed over each group's heads]
        dQ = dS @ K                                into a float32 accumulator, then cast
                                                   (or directly: lowering "composite_dp")

*unified*
    The single ``SDPA_FWD`` / ``SDPA_BWD`` operations (cuDNN 9.13.1 and later), for the plain
    problem and padding only: in the loaded 9.19 they take neither a causal mask nor bias nor
    dropout, nor any variant of :mod:`.masks`.

The serving options (:mod:`.serving`) change how the operands are read, in both lowerings: a
paged cache's ``K^T`` and ``V`` are the virtual outputs of ``PAGED_CACHE_LOAD`` operations on
the page pools (the SDPA operation takes the page tables itself), and the tensors of a packed
side carry ragged offsets (so does the ``K`` the backward's ``dQ`` matmul reads).

*fp8* (:func:`fp8_forward_graph`, :func:`fp8_backward_graph`)
    The composite graphs on float8 operands with per-tensor scaling, the way cuDNN's frontend
    lowers its ``sdpa_fp8`` / ``sdpa_fp8_backward`` nodes.  Every fp8 matmul is followed by
    the descales of its two operands (float32 device scalars), and what is written in fp8 is
    scaled first: the conversion is the output tensor's data type.  Forward::

        S = (Q @ K^T) * scale * descale_q * descale_k   [padding] [causal]
        P = softmax(S) (stats as above);  amax_s = max |P|
        O~ = fp8(P * scale_s) @ V * descale_s * descale_v
        amax_o = max |O~|;  O = O~ * scale_o             written in o's data type

    Backward (no float32 accumulator: every gradient is one fp8 matmul)::

        D  = rowsum(dO * O) * descale_do * descale_o
        P  = exp(S - stats)                              S recomputed as above
        dV~ = fp8(P * scale_s)^T @ dO * descale_s * descale_do   [head sum]
        dP = (dO @ V^T) * descale_do * descale_v
        dS = P * (dP - D) * scale;  amax_dp = max |dS|;  dS8 = fp8(dS * scale_dp)
        dQ~ = dS8 @ K * descale_dp * descale_k;  dK~ = dS8^T @ Q * descale_dp * descale_q
        amax_dX = max |dX~|;  dX = dX~ * scale_dX        for X in Q, K, V

The tensors a graph binds (by unique id, see :data:`UIDS`) are the operands, two float32
scratch tensors of the composite backward (the row sums ``D`` and the ``dQ`` accumulator,
carved from the workspace), the fp8 graphs' float32 scale and amax scalars (one element on
the device each), and by-value scalars (scale, ``-inf``, dropout factors) whose host values
the :class:`Lowered` result keeps alive.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import numpy as np

from .. import _lib as T
from .. import backend as _g
from .._base import version
from . import masks as _mk
from . import serving as _sv

__all__ = ["Spec", "Fp8", "Lowered", "UIDS", "SLOTS", "FP8_SCALES", "FP8_AMAX",
           "forward_graph", "backward_graph", "backward_graph_dp",
           "unified_forward_graph", "unified_backward_graph", "unified_applies",
           "fp8_forward_graph", "fp8_backward_graph", "aux_bytes", "stats_strides", "NEG_INF"]

#: Unique id of every non-virtual tensor a lowering may bind, by slot name.
UIDS = {"q": 1, "k": 2, "v": 3, "o": 4, "stats": 5, "bias": 6, "seq_q": 7, "seq_kv": 8,
        "seed": 9, "offset": 10, "mask": 11, "do": 12, "dq": 13, "dk": 14, "dv": 15,
        "dq_accum": 16, "softmax_sum": 17,
        # by-value scalars
        "scale": 20, "neg_inf": 21, "drop_scale": 22, "drop_keep": 23, "one": 24,
        # fp8: float32 device scalars read (scales) and written (amax) by the call
        "descale_q": 30, "descale_k": 31, "descale_v": 32, "descale_o": 33, "descale_do": 34,
        "descale_s": 35, "descale_dp": 36, "scale_s": 37, "scale_o": 38, "scale_dq": 39,
        "scale_dk": 40, "scale_dv": 41, "scale_dp": 42, "amax_s": 43, "amax_o": 44,
        "amax_dq": 45, "amax_dk": 46, "amax_dv": 47, "amax_dp": 48,
        # the variants (masks.py): ALiBi slopes, the bias gradient, their by-value scalars
        "alibi_slopes": 60, "dbias": 61, "softcap": 62, "window_left": 63,
        "window_right": 64, "band_s_q": 65, "band_s_kv": 66}
#: The fp8 graphs' scale inputs and amax outputs, by direction (the order the calls take them).
FP8_SCALES = {"forward": ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s",
                          "scale_o"),
              "backward": ("descale_q", "descale_k", "descale_v", "descale_o", "descale_do",
                           "descale_s", "descale_dp", "scale_s", "scale_dq", "scale_dk",
                           "scale_dv", "scale_dp")}
FP8_AMAX = {"forward": ("amax_s", "amax_o"),
            "backward": ("amax_dq", "amax_dk", "amax_dv", "amax_dp")}
#: Slot names in unique-id order (the order a call's pointers are gathered in).
UIDS.update(_sv.UIDS)        # page tables and ragged offsets
SLOTS = tuple(sorted(UIDS, key=UIDS.get))
_FIRST_VIRTUAL = 100
#: The masking value of the composite graphs (cuDNN >= 9.10 prefers a true -inf).
NEG_INF = float("-inf")
_ALIGN = 16
_F32 = np.dtype(np.float32)


class Fp8(NamedTuple):
    """The element types of an fp8 problem's tensors besides ``q, k, v`` (which share
    :attr:`Spec.dtype`): the forward's output, and for the backward also ``dO`` and the
    gradients."""

    o: np.dtype
    do: np.dtype | None = None
    dq: np.dtype | None = None
    dk: np.dtype | None = None
    dv: np.dtype | None = None


class Spec(NamedTuple):
    """One attention problem, validated (see :mod:`cudalibs.cudnn.attention`).

    Strides are in elements, in the logical ``[b, h, s, d]`` order of each operand.
    """

    dtype: np.dtype
    b: int
    h_q: int
    h_kv: int
    s_q: int
    s_kv: int
    d: int
    d_v: int
    q_strides: tuple
    k_strides: tuple
    v_strides: tuple
    o_strides: tuple
    scale: float
    causal: bool
    bias: tuple | None          # (shape, strides) of the additive bias
    padding: bool               # per-batch sequence lengths given
    dropout: float
    seed_by_value: bool         # seed/offset passed by value (else int64 device tensors)
    stats: bool                 # the forward writes the statistics
    dump_mask: bool             # the forward writes its dropout keep-mask (float32)
    backward: bool = False
    do_strides: tuple = ()
    dq_strides: tuple = ()
    dk_strides: tuple = ()
    dv_strides: tuple = ()
    fp8: Fp8 | None = None      # float8 operands with per-tensor scaling (the fp8 graphs)
    # the variants (see masks.py)
    bottom_right: bool = False  # the causal diagonal ends at the last key (s_kv - s_q)
    window: tuple | None = None  # (left, right) sliding window, None for an open side
    alibi: bool = False         # ALiBi: slopes[h] * (j - i) added to the scores
    softcap: float = 0.0        # scores -> c * tanh(scores / c) (0: none)
    dbias: tuple | None = None  # element strides of the bias gradient the backward writes
    # serving (see serving.py): k and v as page pools read through page tables (k_strides and
    # v_strides are then the pools'), and packed sides read through ragged offsets (q_strides
    # ... are then the logical [b, h, s, d] ones: batch stride s * token stride)
    paged: _sv.PagedLayout | None = None
    ragged: _sv.RaggedLayout | None = None


class Lowered(NamedTuple):
    """A finalized operation graph and what binding it needs.

    Attributes
    ----------
    graph : BackendDescriptor
    kind : str
        ``"composite"``, ``"composite_dp"``, ``"unified"`` or ``"fp8"``.
    slots : tuple of str
        The slot names of the tensors it binds, in :data:`SLOTS` order.
    uids : tuple of int
        Their unique ids.
    scalars : dict
        ``{slot: ctypes value}`` of the by-value scalars (kept alive with the graph).
    """

    graph: object
    kind: str
    slots: tuple
    uids: tuple
    scalars: dict


def stats_strides(spec: Spec) -> tuple:
    """Element strides of the packed ``[b, h_q, s_q, 1]`` statistics."""
    return (spec.h_q * spec.s_q, spec.s_q, 1, 1)


def _packed(dims) -> tuple:
    out, acc = [], 1
    for n in reversed(dims):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def aux_bytes(spec: Spec) -> tuple[int, int]:
    """Bytes of the composite backward's float32 scratch: ``(row sums D, dQ accumulator)``,
    each rounded up to 256 bytes."""
    d_rows = spec.b * spec.h_q * spec.s_q * 4
    d_acc = spec.b * spec.h_q * spec.s_q * spec.d * 4
    return (d_rows + 255) // 256 * 256, (d_acc + 255) // 256 * 256


class _Builder:
    """Collects tensors and operations of one graph."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.ops: list = []
        self.next_uid = _FIRST_VIRTUAL
        self.bound: dict = {}            # slot -> tensor descriptor
        self.scalars: dict = {}          # slot -> ctypes value

    # -- tensors ------------------------------------------------------------------------------
    def io(self, slot, dtype, dims, strides):
        t = self.bound.get(slot)
        if t is None:
            t = self.bound[slot] = _g.tensor(UIDS[slot], dtype, dims, strides, alignment=_ALIGN,
                                             ragged_offset=_sv.ragged_offset(self, slot))
        return t

    def value(self, slot, v, dtype=np.float32):
        """A by-value scalar ``[1, 1, 1, 1]`` (read from the host at every execution)."""
        t = self.bound.get(slot)
        if t is None:
            ct = {np.dtype(np.float32): ctypes.c_float, np.dtype(np.int32): ctypes.c_int32,
                  np.dtype(np.int64): ctypes.c_int64}[np.dtype(dtype)]
            self.scalars[slot] = ct(v)
            t = self.bound[slot] = _g.tensor(UIDS[slot], dtype, (1, 1, 1, 1), (1, 1, 1, 1),
                                             alignment=_ALIGN, by_value=True)
        return t

    def scalar(self, slot):
        """A float32 device scalar ``[1, 1, 1, 1]`` (an fp8 scale, or an amax written)."""
        return self.io(slot, np.float32, (1, 1, 1, 1), (1, 1, 1, 1))

    def virt(self, dims, strides=None, dtype=_F32, ragged_offset=None):
        uid = self.next_uid
        self.next_uid += 1
        return _g.tensor(uid, dtype, dims, strides or _packed(dims), alignment=_ALIGN,
                         virtual=True, ragged_offset=ragged_offset)

    # -- operations ---------------------------------------------------------------------------
    def pw(self, mode, x, b=None, t=None, *, dims=None, out=None, compute=_F32,
           out_dtype=_F32, axis=None):
        if out is None:
            out = self.virt(dims, dtype=out_dtype)
        desc = _g.pointwise(mode, compute=compute, axis=axis)
        self.ops.append(_g.pointwise_operation(desc, x, out, b, t=t))
        return out

    def mm(self, a, b, *, dims=None, out=None, m=None, n=None, k=None, padding=None):
        if out is None:
            out = self.virt(dims)
        desc = _g.matmul(compute=np.float32, padding=padding)
        self.ops.append(_g.matmul_operation(a, b, out, desc, m_override=m, n_override=n,
                                            k_override=k))
        return out

    def reduce(self, op, x, *, dims=None, out=None, strides=None):
        if out is None:
            out = self.virt(dims, strides)
        det = False if version() >= (9, 11, 0) else None
        self.ops.append(_g.reduction_operation(_g.reduction(op, deterministic=det), x, out))
        return out

    def amax(self, x, slot):
        """``slot = max |x|`` over every element: the scale statistic of fp8 training."""
        return self.reduce("amax", x, out=self.scalar(slot))

    def reshape(self, x, dims, strides, dtype, ragged_offset=None):
        out = self.virt(dims, strides, dtype, ragged_offset)
        self.ops.append(_g.reshape_operation(x, out))
        return out

    def finish(self, kind, handle=None) -> Lowered:
        graph = _g.operation_graph(self.ops, handle)
        slots = tuple(s for s in SLOTS if s in self.bound)
        return Lowered(graph, kind, slots, tuple(UIDS[s] for s in slots), dict(self.scalars))

    # -- pieces shared by both directions ----------------------------------------------------------
    def seq_lens(self):
        s = self.spec
        if not s.padding:
            return None, None
        shape, st = (s.b, 1, 1, 1), (1, 1, 1, 1)
        return (self.io("seq_q", np.int32, shape, st), self.io("seq_kv", np.int32, shape, st))

    def dropout_mask(self, dump: bool):
        """The keep-mask, Bernoulli(1 - p): a virtual tensor, or the float32 output dumped."""
        s = self.spec
        dims = (s.b, s.h_q, s.s_q, s.s_kv)
        if s.seed_by_value:
            seed = self.value("seed", 0, np.int64)
            offset = self.value("offset", 0, np.int64)
        else:
            seed = self.io("seed", np.int64, (1, 1, 1, 1), (1, 1, 1, 1))
            offset = self.io("offset", np.int64, (1, 1, 1, 1), (1, 1, 1, 1))
        mask = (self.io("mask", np.float32, dims, _packed(dims)) if dump else self.virt(dims))
        desc = _g.rng("bernoulli", probability=1.0 - s.dropout)
        self.ops.append(_g.rng_operation(desc, mask, seed=seed, offset=offset))
        return mask

    def qkt(self):
        """The ``q`` and ``k^T`` tensors (``k`` read transposed through swapped strides, or
        gathered from its pages)."""
        s = self.spec
        kst = s.k_strides
        q = self.io("q", s.dtype, (s.b, s.h_q, s.s_q, s.d), s.q_strides)
        if s.paged is not None:
            return q, _sv.paged_keys(self)
        return q, self.io("k", s.dtype, (s.b, s.h_kv, s.d, s.s_kv),
                          (kst[0], kst[1], kst[3], kst[2]))

    def values(self):
        """The ``v`` tensor ``[b, h_kv, s_kv, d_v]`` (or gathered from its pages)."""
        s = self.spec
        if s.paged is not None:
            return _sv.paged_values(self)
        return self.io("v", s.dtype, (s.b, s.h_kv, s.s_kv, s.d_v), s.v_strides)

    def row_dot(self, do, o):
        """``rowsum(dO * O)``, ``[b, h_q, s_q, 1]`` in float32 (before any factor)."""
        s = self.spec
        prod = self.virt((s.b, s.h_q, s.s_q, s.d_v),
                         (s.h_q * s.s_q * s.d_v, s.s_q * s.d_v, s.h_q * s.d_v, 1))
        self.ops.append(_g.pointwise_operation(_g.pointwise("mul"), do, prod, o))
        return self.reduce("add", prod, dims=(s.b, s.h_q, s.s_q, 1), strides=stats_strides(s))

    def scores(self, q, kt, seq_q, seq_kv, *, padded_matmul: bool, descales=()):
        """``S = Q K^T * scale [* descales] [+ bias]`` with the padding mask, before the causal
        mask (``descales``: the fp8 operands' float32 scalars, applied after the scale)."""
        s = self.spec
        dims = (s.b, s.h_q, s.s_q, s.s_kv)
        x = self.mm(q, kt, dims=dims, m=seq_q, n=seq_kv,
                    padding=0.0 if (s.padding and padded_matmul) else None)
        x = self.pw("mul", x, self.value("scale", s.scale), dims=dims)
        for t in descales:
            x = self.pw("mul", x, t, dims=dims)
        x = _mk.softcap(self, x)
        if s.bias is not None:
            shape, strides = s.bias
            x = self.pw("add", x, self.io("bias", s.dtype, shape, strides), dims=dims)
        x = _mk.alibi(self, x)
        if s.padding:
            i32, boolean = np.dtype(np.int32), np.dtype(np.bool_)
            row = self.pw("gen_index", x, dims=dims, compute=i32, out_dtype=i32, axis=2)
            col = self.pw("gen_index", x, dims=dims, compute=i32, out_dtype=i32, axis=3)
            row_ok = self.pw("cmp_lt", row, seq_q, dims=dims, compute=boolean,
                             out_dtype=boolean)
            col_ok = self.pw("cmp_lt", col, seq_kv, dims=dims, compute=boolean,
                             out_dtype=boolean)
            keep = self.pw("logical_and", row_ok, col_ok, dims=dims, compute=boolean,
                           out_dtype=boolean)
            x = self.pw("binary_select", x, self.value("neg_inf", NEG_INF), keep, dims=dims)
        return x

    def causal(self, x):
        """Top-left causal mask: keep key ``j`` for query ``i`` where ``i >= j``."""
        s = self.spec
        dims = (s.b, s.h_q, s.s_q, s.s_kv)
        i32, boolean = np.dtype(np.int32), np.dtype(np.bool_)
        row = self.pw("gen_index", x, dims=dims, out_dtype=i32, axis=2)
        col = self.pw("gen_index", x, dims=dims, out_dtype=i32, axis=3)
        keep = self.pw("cmp_ge", row, col, dims=dims, compute=boolean, out_dtype=boolean)
        return self.pw("binary_select", x, self.value("neg_inf", NEG_INF), keep, dims=dims)

    def softmax(self, x, out_dtype=_F32):
        """``P = exp(S - max) / sum`` along the keys, with the statistics ``max + log(sum)``
        written to ``stats`` (or kept virtual when the forward writes none)."""
        s = self.spec
        dims = (s.b, s.h_q, s.s_q, s.s_kv)
        row = (s.b, s.h_q, s.s_q, 1)
        rst = stats_strides(s)
        m = self.reduce("max", x, dims=row, strides=rst)
        e = self.pw("exp", self.pw("sub", x, m, dims=dims), dims=dims)
        total = self.reduce("add", e, dims=row, strides=rst)
        log_total = self.pw("log", total, dims=row)
        stats = (self.io("stats", np.float32, row, rst) if s.stats else self.virt(row, rst))
        self.pw("add", m, log_total, out=stats)
        return self.pw("div", e, total, dims=dims, out_dtype=out_dtype)


def forward_graph(spec: Spec, handle=None) -> Lowered:
    """The composite forward graph of ``spec`` (see the module docstring)."""
    s = spec
    B = _Builder(s)
    q, kt = B.qkt()
    v = B.values()
    o = B.io("o", s.dtype, (s.b, s.h_q, s.s_q, s.d_v), s.o_strides)
    seq_q, seq_kv = B.seq_lens()
    x = B.scores(q, kt, seq_q, seq_kv, padded_matmul=True)
    x = _mk.band(B, x, seq_q, seq_kv)
    dims = (s.b, s.h_q, s.s_q, s.s_kv)
    last = s.dropout == 0.0
    p = B.softmax(x, s.dtype if last else _F32)
    if not last:
        p = B.pw("mul", p, B.dropout_mask(s.dump_mask), dims=dims)
        p = B.pw("mul", p, B.value("drop_scale", 1.0 / (1.0 - s.dropout)), dims=dims,
                 out_dtype=s.dtype)
    B.mm(p, v, out=o, m=seq_q, k=seq_kv)
    return B.finish("composite", handle)


def backward_graph(spec: Spec, handle=None, *, dq_accumulator: bool = True) -> Lowered:
    """The composite backward graph of ``spec`` (see the module docstring).

    ``dq_accumulator`` False writes ``dQ = dS @ K`` straight into ``dq``, without the float32
    accumulator: the form cuDNN serves with kernels that keep ``dP`` in a workspace of
    ``b * h_q * s_q * s_kv`` half-precision values instead of accumulating ``dQ`` atomically
    (lowering ``"composite_dp"``).  The bias gradient comes only from that form: with the
    accumulator this raises :class:`~cudalibs.cudnn.backend.NoGraph` before any library call
    (:func:`.masks.accumulator_misses`).
    """
    s = spec
    if dq_accumulator:
        why = _mk.accumulator_misses(s)
        if why is not None:
            raise _g.NoGraph(why)
    B = _Builder(s)
    dt = s.dtype
    q, kt = B.qkt()
    kst, vst = s.k_strides, s.v_strides
    vt = B.io("v", dt, (s.b, s.h_kv, s.d_v, s.s_kv), (vst[0], vst[1], vst[3], vst[2]))
    o = B.io("o", dt, (s.b, s.h_q, s.s_q, s.d_v), s.o_strides)
    do = B.io("do", dt, (s.b, s.h_q, s.s_q, s.d_v), s.do_strides)
    row = (s.b, s.h_q, s.s_q, 1)
    rst = stats_strides(s)
    stats = B.io("stats", np.float32, row, rst)
    dq = B.io("dq", dt, (s.b, s.h_q, s.s_q, s.d), s.dq_strides)
    dk = B.io("dk", dt, (s.b, s.h_kv, s.s_kv, s.d), s.dk_strides)
    dv = B.io("dv", dt, (s.b, s.h_kv, s.s_kv, s.d_v), s.dv_strides)
    seq_q, seq_kv = B.seq_lens()
    dims = (s.b, s.h_q, s.s_q, s.s_kv)
    dims_t = (s.b, s.h_q, s.s_kv, s.s_q)
    strides_t = (s.h_q * s.s_q * s.s_kv, s.s_q * s.s_kv, 1, s.s_kv)
    drop = s.dropout > 0.0
    mask = B.dropout_mask(False) if drop else None

    # D = rowsum(dO * O) (times 1 - p under dropout), kept in float32 scratch
    rows = B.row_dot(do, o)
    factor = (B.value("drop_keep", 1.0 - s.dropout) if drop else B.value("one", 1.0))
    softmax_sum = B.pw("mul", rows, factor,
                       out=B.io("softmax_sum", np.float32, row, _packed(row)))

    # P recomputed from the statistics
    x = B.scores(q, kt, seq_q, seq_kv, padded_matmul=False)
    x = B.pw("sub", x, stats, dims=dims)
    x = _mk.band(B, x, seq_q, seq_kv)
    exp_s = B.pw("exp", x, dims=dims)
    p = exp_s
    if drop:
        p = B.pw("mul", p, mask, dims=dims)
        p = B.pw("mul", p, B.value("drop_scale", 1.0 / (1.0 - s.dropout)), dims=dims)
    pt = B.reshape(p, dims_t, strides_t, dt)
    _head_sum(B, pt, do, dv, (s.b, s.h_q, s.s_kv, s.d_v), seq_kv, seq_q)

    # dS = P * (dP [* mask / (1 - p)] - D) * scale
    dp = B.mm(do, vt, dims=dims, m=seq_q, n=seq_kv)
    if drop:
        dp = B.pw("mul", dp, mask, dims=dims)
    ds = B.pw("sub", dp, softmax_sum, dims=dims)
    ds = B.pw("mul", ds, exp_s, dims=dims)
    if drop:
        ds = B.pw("mul", ds, B.value("drop_scale", 1.0 / (1.0 - s.dropout)), dims=dims)
    ds = _mk.score_backward(B, ds)
    ds = B.pw("mul", ds, B.value("scale", s.scale), dims=dims)
    dst = B.reshape(ds, dims_t, strides_t, dt)
    _head_sum(B, dst, q, dk, (s.b, s.h_q, s.s_kv, s.d), seq_kv, seq_q)

    # dQ = dS @ K, accumulated in float32 (or directly)
    k = B.reshape(kt, (s.b, s.h_kv, s.s_kv, s.d), tuple(kst), dt, _sv.ragged_offset(B, "k"))
    if not dq_accumulator:
        B.mm(ds, k, out=dq, m=seq_q, k=seq_kv)
        return B.finish("composite_dp", handle)
    acc_dims = (s.b, s.h_q, s.s_q, s.d)
    acc = B.io("dq_accum", np.float32, acc_dims, _packed(acc_dims))
    B.mm(ds, k, out=acc, m=seq_q, k=seq_kv)
    B.pw("identity", acc, out=dq)
    return B.finish("composite", handle)


def backward_graph_dp(spec: Spec, handle=None) -> Lowered:
    """:func:`backward_graph` without the ``dQ`` accumulator (lowering ``"composite_dp"``)."""
    return backward_graph(spec, handle, dq_accumulator=False)


def _head_sum(B: _Builder, a, b, out, full_dims, m, k):
    """``out = a @ b``, summed over each group of query heads when ``out`` has fewer heads."""
    s = B.spec
    if s.h_q == s.h_kv:
        B.mm(a, b, out=out, m=m, k=k)
        return
    full = B.virt(full_dims, dtype=s.dtype)
    B.mm(a, b, out=full, m=m, k=k)
    B.reduce("add", full, out=out)


def _version_text() -> str:
    return ".".join(map(str, version()))


def unified_applies(spec: Spec) -> str | None:
    """Why the single SDPA operation cannot express ``spec`` (None when it can)."""
    if version() < (9, 13, 1):
        return f"the SDPA operations need cuDNN 9.13.1 (loaded: {_version_text()})"
    serving = _sv.unified_reason(spec)
    if serving is not None:
        return serving
    why = [w for w, bad in (("causal mask", spec.causal), ("bias", spec.bias is not None),
                            ("dropout", spec.dropout > 0.0),
                            ("dumped dropout mask", spec.dump_mask)) if bad]
    why += _mk.unified_misses(spec)
    if why:
        return f"cuDNN {_version_text()}'s SDPA operations take no {' or '.join(why)}"
    return None


def _unified_common(B: _Builder, s: Spec):
    dt = s.dtype
    q = B.io("q", dt, (s.b, s.h_q, s.s_q, s.d), s.q_strides)
    k = B.io("k", dt, _sv.kv_dims(s, "k"), s.k_strides)      # a page pool when paged
    v = B.io("v", dt, _sv.kv_dims(s, "v"), s.v_strides)
    o = B.io("o", dt, (s.b, s.h_q, s.s_q, s.d_v), s.o_strides)
    return q, k, v, o, B.value("scale", s.scale)


def unified_forward_graph(spec: Spec, handle=None) -> Lowered:
    """The forward as one ``SDPA_FWD`` operation (see :func:`unified_applies`)."""
    s = spec
    B = _Builder(s)
    q, k, v, o, scale = _unified_common(B, s)
    D = T.CUDNN_TYPE_BACKEND_DESCRIPTOR
    attrs = [(T.CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, D, q),
             (T.CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, D, k),
             (T.CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, D, v),
             (T.CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, D, o),
             (T.CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, D, scale)]
    if s.stats:
        stats = B.io("stats", np.float32, (s.b, s.h_q, s.s_q, 1), stats_strides(s))
        attrs.append((T.CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, D, stats))
    attrs += _sv.unified_paged_attrs(B)
    return _unified_finish(B, T.CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, attrs,
                           T.CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC,
                           T.CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, handle)


def unified_backward_graph(spec: Spec, handle=None) -> Lowered:
    """The backward as one ``SDPA_BWD`` operation (see :func:`unified_applies`)."""
    s = spec
    B = _Builder(s)
    dt = s.dtype
    q, k, v, o, scale = _unified_common(B, s)
    D = T.CUDNN_TYPE_BACKEND_DESCRIPTOR
    stats = B.io("stats", np.float32, (s.b, s.h_q, s.s_q, 1), stats_strides(s))
    do = B.io("do", dt, (s.b, s.h_q, s.s_q, s.d_v), s.do_strides)
    dq = B.io("dq", dt, (s.b, s.h_q, s.s_q, s.d), s.dq_strides)
    dk = B.io("dk", dt, (s.b, s.h_kv, s.s_kv, s.d), s.dk_strides)
    dv = B.io("dv", dt, (s.b, s.h_kv, s.s_kv, s.d_v), s.dv_strides)
    attrs = [(T.CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, D, q),
             (T.CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, D, k),
             (T.CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, D, v),
             (T.CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, D, o),
             (T.CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, D, stats),
             (T.CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, D, scale),
             (T.CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, D, do),
             (T.CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, D, dq),
             (T.CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, D, dk),
             (T.CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, D, dv)]
    return _unified_finish(B, T.CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, attrs,
                           T.CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_QDESC,
                           T.CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_KVDESC, handle)


def _unified_finish(B: _Builder, kind, attrs, seq_q_attr, seq_kv_attr, handle) -> Lowered:
    """The SDPA operation of ``kind`` with ``attrs`` (and the sequence lengths), as a graph."""
    seq_q, seq_kv = B.seq_lens()
    if seq_q is not None:
        D = T.CUDNN_TYPE_BACKEND_DESCRIPTOR
        attrs = attrs + [(seq_q_attr, D, seq_q), (seq_kv_attr, D, seq_kv)]
    B.ops.append(_g.make(kind, *attrs))
    return B.finish("unified", handle)


# -- fp8 -----------------------------------------------------------------------------------------
def _mm_fp8(B: _Builder, a, b, out, scales, amax, full_dims, heads, m=None, k=None):
    """``out = (a @ b [summed over head groups]) * descale_a * descale_b * scale_c`` with
    ``scales = (descale_a, descale_b, scale_c)``, and ``amax = max |.|`` of the product before
    ``scale_c`` (real units): one fp8 matmul.  ``full_dims`` is the product's shape with
    ``h_q`` heads, ``heads`` those of ``out``.

    The product is float32; ``out``'s data type (fp8 or half) is the conversion.
    """
    descale_a, descale_b, scale_c = scales
    x = B.mm(a, b, dims=full_dims, m=m, k=k)
    dims = (full_dims[0], heads, *full_dims[2:])
    if heads != full_dims[1]:       # grouped-query attention: sum each group's query heads
        x = B.reduce("add", x, dims=dims)
    x = B.pw("mul", x, descale_a, dims=dims)
    x = B.pw("mul", x, descale_b, dims=dims)
    B.pw("mul", x, scale_c, out=out)
    B.amax(x, amax)


def fp8_forward_graph(spec: Spec, handle=None) -> Lowered:
    """The fp8 forward graph of ``spec`` (``spec.fp8`` set; see the module docstring)."""
    s = spec
    B = _Builder(s)
    q, kt = B.qkt()
    v = B.io("v", s.dtype, (s.b, s.h_kv, s.s_kv, s.d_v), s.v_strides)
    o = B.io("o", s.fp8.o, (s.b, s.h_q, s.s_q, s.d_v), s.o_strides)
    seq_q, seq_kv = B.seq_lens()
    x = B.scores(q, kt, seq_q, seq_kv, padded_matmul=True,
                 descales=(B.scalar("descale_q"), B.scalar("descale_k")))
    if s.causal:
        x = B.causal(x)
    p = B.softmax(x)
    B.amax(p, "amax_s")
    # P in fp8 (q's type) for the second matmul: scaled, converted by the tensor's type
    p8 = B.pw("mul", p, B.scalar("scale_s"), dims=(s.b, s.h_q, s.s_q, s.s_kv),
              out_dtype=s.dtype)
    _mm_fp8(B, p8, v, o, (B.scalar("descale_s"), B.scalar("descale_v"), B.scalar("scale_o")),
            "amax_o", (s.b, s.h_q, s.s_q, s.d_v), s.h_q, m=seq_q, k=seq_kv)
    return B.finish("fp8", handle)


def fp8_backward_graph(spec: Spec, handle=None) -> Lowered:
    """The fp8 backward graph of ``spec`` (``spec.fp8`` with every type; see the module
    docstring)."""
    s = spec
    f = s.fp8
    B = _Builder(s)
    q, kt = B.qkt()
    kst, vst = s.k_strides, s.v_strides
    vt = B.io("v", s.dtype, (s.b, s.h_kv, s.d_v, s.s_kv), (vst[0], vst[1], vst[3], vst[2]))
    o = B.io("o", f.o, (s.b, s.h_q, s.s_q, s.d_v), s.o_strides)
    do = B.io("do", f.do, (s.b, s.h_q, s.s_q, s.d_v), s.do_strides)
    row = (s.b, s.h_q, s.s_q, 1)
    stats = B.io("stats", np.float32, row, stats_strides(s))
    dq = B.io("dq", f.dq, (s.b, s.h_q, s.s_q, s.d), s.dq_strides)
    dk = B.io("dk", f.dk, (s.b, s.h_kv, s.s_kv, s.d), s.dk_strides)
    dv = B.io("dv", f.dv, (s.b, s.h_kv, s.s_kv, s.d_v), s.dv_strides)
    descale_q, descale_k, descale_do = (B.scalar(n) for n in ("descale_q", "descale_k",
                                                              "descale_do"))
    seq_q, seq_kv = B.seq_lens()
    dims = (s.b, s.h_q, s.s_q, s.s_kv)
    dims_t = (s.b, s.h_q, s.s_kv, s.s_q)
    strides_t = (s.h_q * s.s_q * s.s_kv, s.s_q * s.s_kv, 1, s.s_kv)

    # D = rowsum(dO * O) in real units (a virtual tensor: no scratch)
    rows = B.pw("mul", B.row_dot(do, o), descale_do, dims=row)
    softmax_sum = B.pw("mul", rows, B.scalar("descale_o"), dims=row)

    # P recomputed from the statistics; dV from P in fp8
    x = B.scores(q, kt, seq_q, seq_kv, padded_matmul=False, descales=(descale_q, descale_k))
    if s.causal:
        x = B.causal(x)
    exp_s = B.pw("exp", B.pw("sub", x, stats, dims=dims), dims=dims)
    p8 = B.pw("mul", exp_s, B.scalar("scale_s"), dims=dims, out_dtype=s.dtype)
    pt = B.reshape(p8, dims_t, strides_t, s.dtype)
    _mm_fp8(B, pt, do, dv, (B.scalar("descale_s"), descale_do, B.scalar("scale_dv")),
            "amax_dv", (s.b, s.h_q, s.s_kv, s.d_v), s.h_kv, m=seq_kv, k=seq_q)

    # dS = P * (dP - D) * scale, its amax, then dS in dO's fp8 type
    dp = B.mm(do, vt, dims=dims, m=seq_q, n=seq_kv)
    dp = B.pw("mul", dp, descale_do, dims=dims)
    dp = B.pw("mul", dp, B.scalar("descale_v"), dims=dims)
    ds = B.pw("sub", dp, softmax_sum, dims=dims)
    ds = B.pw("mul", ds, exp_s, dims=dims)
    ds = B.pw("mul", ds, B.value("scale", s.scale), dims=dims)
    B.amax(ds, "amax_dp")
    ds8 = B.pw("mul", ds, B.scalar("scale_dp"), dims=dims, out_dtype=f.do)

    # dQ = dS @ K and dK = dS^T @ Q, fp8 matmuls with their descales
    descale_dp = B.scalar("descale_dp")
    k = B.reshape(kt, (s.b, s.h_kv, s.s_kv, s.d), tuple(kst), s.dtype)
    _mm_fp8(B, ds8, k, dq, (descale_dp, descale_k, B.scalar("scale_dq")), "amax_dq",
            (s.b, s.h_q, s.s_q, s.d), s.h_q, m=seq_q, k=seq_kv)
    dst = B.reshape(ds8, dims_t, strides_t, f.do)
    _mm_fp8(B, dst, q, dk, (descale_dp, descale_q, B.scalar("scale_dk")), "amax_dk",
            (s.b, s.h_q, s.s_kv, s.d), s.h_kv, m=seq_kv, k=seq_q)
    return B.finish("fp8", handle)
