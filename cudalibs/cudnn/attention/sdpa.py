"""Scaled dot-product attention through cuDNN's graph API: forward, backward, and their plans.

::

    o = cudnn.sdpa(q, k, v, causal=True)                       # softmax(q k^T / sqrt(d)) v
    o, stats = cudnn.sdpa(q, k, v, causal=True, training=True)
    dq, dk, dv = cudnn.sdpa_backward(q, k, v, o, do, stats, causal=True)

    plan = cudnn.SdpaPlan(q, k, v, causal=True)                # or hold the plan yourself
    plan.autotune()                                             # time every engine once
    o = plan.execute(q, k, v, out=o)

Operands are logical ``[b, h, s, d]``: ``q`` ``[b, h_q, s_q, d]``, ``k`` ``[b, h_kv, s_kv, d]``,
``v`` ``[b, h_kv, s_kv, d_v]``, float16 or bfloat16, with float32 accumulation.  Any strides
whose head dimension is contiguous and whose other strides are multiples of 16 bytes are
read in place -- ``[b, h, s, d]`` contiguous, the ``[b, s, h, d]`` layout seen through a
transposed view, slices of a packed ``qkv`` tensor -- and new outputs take their input's
layout (``o`` and ``dq`` like ``q``, ``dk`` like ``k``, ``dv`` like ``v``).

Options (the same for the forward and the backward, which must agree):

- ``scale``: multiplies ``q k^T`` (default ``1 / sqrt(d)``);
- ``causal``: the causal mask, ``True``/``"top_left"`` (query ``i`` sees keys ``j <= i``) or
  ``"bottom_right"`` (``j <= i + s_kv - s_q``, per batch entry with sequence lengths: the last
  query sees every key, as in decode and chunked prefill);
- ``window=(left, right)``: a sliding window, keys ``i - left <= j <= i + right`` (shifted
  like the causal diagonal; None leaves a side open; with ``causal`` the right side is 0);
- ``alibi`` / ``alibi_slopes``: ALiBi, ``slope[h] * (j - i)`` added to the scores (the
  paper's slopes, or a float32 device array of ``h_q``), under a top-left causal mask;
- ``softcap``: ``scores -> softcap * tanh(scores / softcap)`` after the scale;
- ``bias``: added to the scaled scores, ``[1 or b, 1 or h_q, s_q, s_kv]`` of the operands' dtype;
- ``seq_lens_q`` / ``seq_lens_kv``: per-batch sequence lengths (padding masks), given together:
  host sequences are checked (``1 <= len <= s``) and copied; int32 device arrays of ``b``
  elements are used as they are (their values are the caller's to keep in range); output rows
  beyond a sequence's length are left unspecified;
- ``dropout`` (with ``seed``): the probabilities are dropped with probability ``dropout`` and
  the rest scaled by ``1 / (1 - dropout)``; ``seed`` is an int, a ``(seed, offset)`` pair of
  ints (passed by value), or a pair of one-element int64 device arrays (read when the kernel
  runs, so a captured graph can advance them).  The backward given the same seed and offset
  regenerates the same mask;
- ``training``: the forward also returns the softmax statistics, float32 ``[b, h_q, s_q, 1]``
  (``max + log(sum(exp))`` per row), which the backward needs.

The backward can also give the bias's gradient (``want_dbias=True`` or ``dbias=``), for a bias
of ``[1, h_q, s_q, s_kv]`` or ``[b, h_q, s_q, s_kv]``.  What each variant means and which
combinations cuDNN's engines take: :mod:`cudalibs.cudnn.attention.masks`; a combination they
do not take raises :class:`~cudalibs.errors.CudaLibsError` before any library call.

Serving (:mod:`cudalibs.cudnn.attention.serving`): ``page_table_k`` / ``page_table_v`` read
``k`` and ``v`` from a paged cache (the forward only), and ``ragged`` takes packed batches,
``[total_tokens, h, d]`` tensors whose sequences start at device offsets
(:func:`~cudalibs.cudnn.attention.ragged_batch` builds them); both need the sequence lengths.
Decode (``s_q = 1``) is an ordinary problem, contiguous or paged.

Grouped-query and multi-query attention: ``h_kv`` divides ``h_q``; query head ``i`` reads
key/value head ``i // (h_q // h_kv)`` (what ``repeat_interleave`` of ``k`` and ``v`` gives), and
the backward sums ``dk``/``dv`` over each group.

Limits (cuDNN 9's fused attention engines): head dims multiples of 8, up to 256 forward and 128
backward, compute capability 8.0 or later.  Everything is checked before any library call.

Lowering (:mod:`cudalibs.cudnn.attention_graph`): a composite graph of matmuls, pointwise
operations and reductions that cuDNN's runtime-compiled flash-attention engines fuse (for the
backward also a variant without the float32 ``dQ`` accumulator, ``"composite_dp"``), and,
where it applies, cuDNN's single SDPA operation (in cuDNN 9.19 the forward only: its graph
refuses ``SDPA_BWD``, which the plan records in ``unavailable``).  The plan's candidates come
from all of them, the heuristics' first choice runs unless
:meth:`~cudalibs.runtime.plan.Plan.autotune` is called, which keeps the fastest.  The one-shot functions find
their plans in the one plan cache (:data:`SDPA_KEY`, :data:`SDPA_BACKWARD_KEY`).
"""

from __future__ import annotations

import math

from ...driver.array import DeviceArray
from ...driver.stream import as_stream
from ...runtime import front as _front
from ...runtime import options as _options
from ...runtime.cache import KeyKind
from ...runtime.operand import operands as _operands
from .._base import env
from . import lower as _ag
from . import masks as _mk
from . import serving as _sv
from .plan import (F32, MAX_HEAD_DIM, MAX_HEAD_DIM_BACKWARD, backward_operands, bias_spec,
                   check_arch, check_dropout, check_qkv, elem_strides,
                   forward_operands, grad_strides, like, out3, padding_of, seed_by_value)
from .variants import VariantPlan, dbias_strides

__all__ = ["sdpa", "sdpa_backward", "SdpaPlan", "SdpaBackwardPlan", "SDPA_KEY",
           "SDPA_BACKWARD_KEY", "MAX_HEAD_DIM", "MAX_HEAD_DIM_BACKWARD"]

_COMMON = ("scale", "causal", "bias_shape", "bias_strides", "padding", "dropout", "seed_by_value")
#: The variants' fields (masks.key): the causal diagonal's alignment, the window, ALiBi, softcap.
_VARIANTS = ("diagonal", "window", "alibi", "softcap")
#: The cache keys of the one-shot functions (``entry.key["q_strides"]``...).
SDPA_KEY = KeyKind("cudnn_sdpa", ("device", "dtype", "q_shape", "q_strides", "k_shape",
                                  "k_strides", "v_shape", "v_strides", "out_strides")
                   + _COMMON + ("training", "lowerings", "autotune", "env") + _VARIANTS
                   + _sv.KEY_FIELDS)
SDPA_BACKWARD_KEY = KeyKind("cudnn_sdpa_backward", (
    "device", "dtype", "q_shape", "q_strides", "k_shape", "k_strides", "v_shape", "v_strides",
    "o_strides", "do_strides", "out_strides") + _COMMON + ("lowerings", "autotune", "env")
    + _VARIANTS + ("dbias",) + _sv.KEY_FIELDS)


# -- the forward --------------------------------------------------------------------------------------
class SdpaPlan(VariantPlan):
    """A planned attention forward ``o = softmax(q k^T * scale [+ bias], masked) [dropout] v``.

    Parameters
    ----------
    q, k, v : DeviceArray or CUDA array
        Example operands: their shapes, dtype, strides and device make the problem.
    scale, causal, bias, seq_lens_q, seq_lens_kv, dropout, seed, training
        As for :func:`sdpa`; ``bias``, ``seq_lens_*`` and ``seed`` are examples too (whether
        given, the bias's shape and strides, whether the seed is by value).
    window, alibi, softcap
        As for :func:`sdpa` (the slopes of ``alibi=True`` are given, or not, at each
        :meth:`execute`).
    page_table_k, page_table_v, ragged
        As for :func:`sdpa`, examples too: the tables' shapes and strides (``k`` and ``v``
        are then page pools), the offsets' types and the longest sequences of a packed side
        (``q``, ``k``, ``v`` then packed ``[total_tokens, h, d]``).
    out : DeviceArray, optional
        An example output (its strides); by default ``o`` takes ``q``'s layout.
    dump_mask : bool
        With dropout, also write the keep-mask as float32 ``[b, h_q, s_q, s_kv]`` into
        ``mask_out`` at every execution (for checking; it costs bandwidth).  Only the
        entries of keys a query sees are written: cuDNN skips the tiles that the causal
        mask or a window removes whole, and leaves their entries as they were.
    graphs : sequence of str, optional
        The lowerings to draw candidates from (default
        :attr:`cudalibs.Options.sdpa_lowerings`).
    max_candidates : int, optional
        The most engine configurations finalized, the lowerings in ``graphs`` order and
        each in its heuristics' order (default 16; each costs a runtime compilation).

    Examples
    --------
    >>> plan = cudnn.SdpaPlan(q, k, v, causal=True, training=True)   # doctest: +SKIP
    >>> plan.autotune(); o, stats = plan.execute(q, k, v)              # doctest: +SKIP
    """

    kind = "cudnn_sdpa"
    _builders = {"composite": _ag.forward_graph, "unified": _ag.unified_forward_graph}

    def __init__(self, q, k, v, *, scale=None, causal=False, bias=None, seq_lens_q=None,
                 seq_lens_kv=None, dropout=0.0, seed=None, training=False, out=None,
                 dump_mask=False, graphs=None, max_candidates=None, window=None, alibi=False,
                 softcap=None, page_table_k=None, page_table_v=None, ragged=None):
        op = "SdpaPlan"
        q, k, v, bias, out, dev = _operands(op, (q, "q"), (k, "k"), (v, "v"), (bias, "bias"),
                                            (out, "out"), required=3)
        # packed tensors and page pools seen as cuDNN's logical [b, h, s, d] operands
        lay = _sv.prepare(op, dev, q, k, v, strides=elem_strides, page_table_k=page_table_k,
                          page_table_v=page_table_v, ragged=ragged,
                          padding=padding_of(op, seq_lens_q, seq_lens_kv))
        q, k, v, out = (lay.view(a, n) for a, n in ((q, "q"), (k, "k"), (v, "v"), (out, "out")))
        b, h_q, h_kv, s_q, s_kv, d, d_v = check_qkv(op, q, k, v, MAX_HEAD_DIM)
        check_arch(op, dev)
        p = check_dropout(op, dropout, seed)
        qs = elem_strides(q, "q", op)
        o_shape = (b, h_q, s_q, d_v)
        if out is not None:
            if tuple(out.shape) != o_shape or out.dtype != q.dtype:
                raise ValueError(f"{op}: out must be {q.dtype} {o_shape}, got {out.dtype} "
                                 f"{out.shape}")
            os_ = elem_strides(out, "out", op)
        else:
            os_ = lay.out_strides(qs, o_shape, d) or like(qs, o_shape)
        if dump_mask and not p:
            raise ValueError(f"{op}: dump_mask needs dropout > 0")
        spec = _ag.Spec(q.dtype, b, h_q, h_kv, s_q, s_kv, d, d_v, qs,
                        elem_strides(k, "k", op), elem_strides(v, "v", op), os_,
                        float(1.0 / math.sqrt(d) if scale is None else scale), bool(causal),
                        bias_spec(op, bias, q.dtype, b, h_q, s_q, s_kv),
                        padding_of(op, seq_lens_q, seq_lens_kv), p, seed_by_value(op, seed),
                        bool(training), bool(dump_mask))
        spec = _mk.variant_spec(op, spec, causal=causal, window=window, alibi=alibi,
                                softcap=softcap)
        spec = spec._replace(paged=lay.paged, ragged=lay.ragged)
        self._setup(spec, dev, graphs, max_candidates)

    def _operand_specs(self):
        s = self._spec
        specs = forward_operands(s)
        if s.dump_mask:
            shape = (s.b, s.h_q, s.s_q, s.s_kv)
            specs.append(("mask", shape, like((3, 2, 1, 1), shape)))
        return specs + _mk.operands(s)

    @property
    def out_shape(self) -> tuple:
        """``o``'s shape, ``[b, h_q, s_q, d_v]`` (``[total_q, h_q, d_v]`` with packed
        queries)."""
        return self._slot["o"][0]

    def execute(self, q, k, v, *, out=None, stats=None, bias=None, seq_lens_q=None,
                seq_lens_kv=None, seed=None, mask_out=None, alibi_slopes=None, stream=None,
                page_table_k=None, page_table_v=None, ragged=None):
        """Run the attention forward on ``stream``.

        Parameters
        ----------
        q, k, v : DeviceArray
            Of the plan's shapes, dtype and strides.
        out, stats : DeviceArray, optional
            Allocated stream-ordered if None (``stats`` only when the plan has ``training``).
        bias, seq_lens_q, seq_lens_kv, seed
            Exactly when the plan was made with them (see :func:`sdpa`).
        mask_out : DeviceArray, optional
            float32 ``[b, h_q, s_q, s_kv]``, required by a plan with ``dump_mask``.
        alibi_slopes : DeviceArray, optional
            With ``alibi``: float32, ``h_q`` contiguous values (default: the paper's slopes).
        stream : Stream, optional
        page_table_k, page_table_v, ragged
            Exactly when the plan was made with them, of the plan's layouts (their values
            are read when the kernel runs: a captured graph replays with new tables, offsets
            and lengths written into the same arrays).

        Returns
        -------
        DeviceArray or (DeviceArray, DeviceArray)
            ``o``, or ``(o, stats)`` for a plan with ``training``.
        """
        op = "SdpaPlan.execute"
        (q, k, v), dev, s = self._front(op, ((q, "q"), (k, "k"), (v, "v")), stream)
        sp = self._spec
        dt = sp.dtype
        for arr, (name, shape, est) in zip((q, k, v), self._specs):
            self._match(op, arr, name, shape, est, dt)
        if stats is not None and not sp.stats:
            raise ValueError(f"{op}: the plan was made without training=True; it writes no "
                             "stats")
        vals = {"q": q.address, "k": k.address, "v": v.address}
        keep = self._extras(op, vals, bias, seq_lens_q, seq_lens_kv, seed, dev, s)
        keep += _sv.bind(self, op, vals, page_table_k, page_table_v, ragged, dev)
        self._alibi_in(op, vals, alibi_slopes, dev)
        ins = (("q", q), ("k", k), ("v", v))
        o = self._output(op, out, "out", "o", dt, dev, s, ins)
        vals["o"] = o.address
        st = None
        if sp.stats:
            st = self._output(op, stats, "stats", "stats", F32, dev, s, ins + (("o", o),), True)
            vals["stats"] = st.address
        if sp.dump_mask:
            if mask_out is None:
                raise ValueError(f"{op}: the plan has dump_mask; pass mask_out=")
            m = self._output(op, mask_out, "mask_out", "mask", F32, dev, s, ins + (("o", o),),
                             True)
            vals["mask"] = m.address
        self._launch(dev, s, vals, bool(sp.dropout and sp.seed_by_value))
        del keep
        return (o, st) if sp.stats else o


# -- the backward ------------------------------------------------------------------------------------
class SdpaBackwardPlan(VariantPlan):
    """A planned attention backward: ``(dq, dk, dv)`` from ``q, k, v, o, do`` and the forward's
    statistics (and the bias gradient ``dbias`` with ``want_dbias``).

    Parameters
    ----------
    q, k, v, o, do : DeviceArray or CUDA array
        Example operands (shapes, dtype, strides, device).
    scale, causal, bias, seq_lens_q, seq_lens_kv, dropout, seed, window, alibi, softcap
        Those of the forward (see :func:`sdpa`).
    out : tuple of (DeviceArray or None), optional
        Example ``(dq, dk, dv)``: their strides (default: the layouts of ``q``, ``k``, ``v``).
    want_dbias : bool
        Also write the gradient of ``bias`` (see :func:`sdpa_backward`).
    dbias : DeviceArray, optional
        An example bias gradient (its strides; implies ``want_dbias``); by default it takes
        the bias's layout.
    graphs : sequence of str, optional
        The lowerings to draw candidates from (default
        :attr:`cudalibs.Options.sdpa_backward_lowerings`).
    max_candidates : int, optional
        As for :class:`SdpaPlan`.
    ragged : Ragged, optional
        That of the forward (packed operands and gradients, see :func:`sdpa`).
    page_table_k, page_table_v
        Refused (:class:`ValueError`): a paged cache is for the forward (inference) only.
    """

    kind = "cudnn_sdpa_backward"
    _lowerings_option = "sdpa_backward_lowerings"
    _builders = {"composite": _ag.backward_graph, "composite_dp": _ag.backward_graph_dp,
                 "unified": _ag.unified_backward_graph}

    def __init__(self, q, k, v, o, do, *, scale=None, causal=False, bias=None,
                 seq_lens_q=None, seq_lens_kv=None, dropout=0.0, seed=None, out=None,
                 graphs=None, max_candidates=None, window=None, alibi=False, softcap=None,
                 want_dbias=False, dbias=None, ragged=None, page_table_k=None,
                 page_table_v=None):
        op = "SdpaBackwardPlan"
        dq, dk, dv = out3(op, out)
        q, k, v, o, do, bias, dq, dk, dv, dev = _operands(
            op, (q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do"), (bias, "bias"),
            (dq, "dq"), (dk, "dk"), (dv, "dv"), required=5)
        lay = _sv.prepare(op, dev, q, k, v, strides=elem_strides, page_table_k=page_table_k,
                          page_table_v=page_table_v, ragged=ragged,
                          padding=padding_of(op, seq_lens_q, seq_lens_kv), backward=True)
        q, k, v, o, do, dq, dk, dv = (lay.view(a, n) for a, n in (
            (q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do"), (dq, "dq"), (dk, "dk"),
            (dv, "dv")))
        b, h_q, h_kv, s_q, s_kv, d, d_v = check_qkv(op, q, k, v, MAX_HEAD_DIM_BACKWARD)
        check_arch(op, dev)
        p = check_dropout(op, dropout, seed)
        for arr, n in ((o, "o"), (do, "do")):
            if arr.ndim != 4 or tuple(arr.shape) != (b, h_q, s_q, d_v) or arr.dtype != q.dtype:
                raise ValueError(f"{op}: {n} must be {q.dtype} {(b, h_q, s_q, d_v)} (the "
                                 f"forward's output), got {arr.dtype} {arr.shape}")
        qs, ks, vs = (elem_strides(a, n, op) for a, n in ((q, "q"), (k, "k"), (v, "v")))
        grads = grad_strides(op, (dq, dk, dv), (qs, ks, vs),
                             ((b, h_q, s_q, d), (b, h_kv, s_kv, d), (b, h_kv, s_kv, d_v)),
                             q.dtype)
        grads = lay.same_as_inputs(grads, (dq, dk, dv), (qs, ks, vs))
        spec = _ag.Spec(q.dtype, b, h_q, h_kv, s_q, s_kv, d, d_v, qs, ks, vs,
                        elem_strides(o, "o", op),
                        float(1.0 / math.sqrt(d) if scale is None else scale), bool(causal),
                        bias_spec(op, bias, q.dtype, b, h_q, s_q, s_kv),
                        padding_of(op, seq_lens_q, seq_lens_kv), p, seed_by_value(op, seed),
                        True, False, True, elem_strides(do, "do", op), *grads)
        spec = _mk.variant_spec(op, spec, causal=causal, window=window, alibi=alibi,
                                softcap=softcap,
                                dbias=dbias_strides(op, spec, want_dbias, dbias, dev))
        spec = spec._replace(ragged=lay.ragged)
        self._setup(spec, dev, graphs, max_candidates)

    def _operand_specs(self):
        return backward_operands(self._spec) + _mk.operands(self._spec)

    def execute(self, q, k, v, o, do, stats, *, bias=None, seq_lens_q=None, seq_lens_kv=None,
                seed=None, out=None, alibi_slopes=None, dbias=None, stream=None, ragged=None):
        """Run the attention backward on ``stream``.

        Parameters
        ----------
        q, k, v, o, do : DeviceArray
            Of the plan's shapes, dtype and strides.
        stats : DeviceArray
            float32 ``[b, h_q, s_q, 1]`` from the forward with ``training=True``.
        bias, seq_lens_q, seq_lens_kv, seed, alibi_slopes
            Those the forward ran with.
        out : tuple of (DeviceArray or None), optional
            ``(dq, dk, dv)``; each None is allocated stream-ordered.
        dbias : DeviceArray, optional
            Where a plan with ``want_dbias`` writes the bias gradient (allocated
            stream-ordered if None).
        stream : Stream, optional
        ragged : Ragged, optional
            Exactly when the plan was made with it.

        Returns
        -------
        tuple of DeviceArray
            ``(dq, dk, dv)``, or ``(dq, dk, dv, dbias)`` for a plan with ``want_dbias``.
        """
        op = "SdpaBackwardPlan.execute"
        dq, dk, dv = out3(op, out)
        (q, k, v, o, do, stats), dev, s = self._front(
            op, ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do"), (stats, "stats")), stream)
        sp = self._spec
        for arr, (name, shape, est) in zip((q, k, v, o, do), self._specs):
            self._match(op, arr, name, shape, est, sp.dtype)
        self._stats_in(op, stats)
        vals = {"q": q.address, "k": k.address, "v": v.address, "o": o.address, "do": do.address,
                "stats": stats.address}
        keep = self._extras(op, vals, bias, seq_lens_q, seq_lens_kv, seed, dev, s)
        keep += _sv.bind(self, op, vals, None, None, ragged, dev)
        self._alibi_in(op, vals, alibi_slopes, dev)
        ins = [("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("stats", stats)]
        grads = []
        for g, name in zip((dq, dk, dv), ("dq", "dk", "dv")):
            g = self._output(op, g, name, name, sp.dtype, dev, s, ins)
            ins.append((name, g))
            vals[name] = g.address
            grads.append(g)
        g = self._dbias_out(op, vals, dbias, bias, ins, dev, s)
        if g is not None:
            grads.append(g)
        self._launch(dev, s, vals, bool(sp.dropout and sp.seed_by_value))
        del keep
        return tuple(grads)


# -- the one-shot functions ----------------------------------------------------------------------------
def _common_key(bias, scale, causal, seq_lens_q, seq_lens_kv, dropout, seed):
    return (None if scale is None else float(scale), bool(causal),
            None if bias is None else bias.shape, None if bias is None else bias.strides,
            seq_lens_q is not None or seq_lens_kv is not None, float(dropout),
            seed_by_value("sdpa", seed))


def sdpa(q, k, v, *, scale=None, causal=False, bias=None, seq_lens_q=None, seq_lens_kv=None,
         dropout=0.0, seed=None, training=False, out=None, stats=None, stream=None,
         window=None, alibi=False, alibi_slopes=None, softcap=None, page_table_k=None,
         page_table_v=None, ragged=None):
    """Scaled dot-product attention, ``softmax(q k^T * scale [+ bias], masked) [dropout] v``.

    Parameters
    ----------
    q, k, v : DeviceArray or CUDA array
        ``[b, h_q, s_q, d]``, ``[b, h_kv, s_kv, d]``, ``[b, h_kv, s_kv, d_v]``, float16 or
        bfloat16, any layout with a contiguous head dimension (see the module docstring).
    scale : float, optional
        Multiplies ``q k^T`` (default ``1 / sqrt(d)``).
    causal : bool or str
        The causal mask: ``True`` or ``"top_left"`` (query ``i`` sees keys ``j <= i``) or
        ``"bottom_right"`` (queries aligned to the end of the keys: ``j <= i + s_kv - s_q``,
        per batch entry with sequence lengths; for decode and chunked prefill).
    bias : DeviceArray, optional
        ``[1 or b, 1 or h_q, s_q, s_kv]``, added to the scaled scores.
    seq_lens_q, seq_lens_kv : sequence of int or int32 DeviceArray, optional
        Per-batch sequence lengths (both or neither).
    dropout : float
        Probability of dropping each attention weight (needs ``seed``).
    seed : int or (int, int) or (DeviceArray, DeviceArray), optional
        The dropout seed and offset.
    training : bool
        Also return the statistics the backward needs.
    out : DeviceArray, optional
        ``[b, h_q, s_q, d_v]``; allocated stream-ordered in ``q``'s layout if None.
    stats : DeviceArray, optional
        With ``training``: where to write the statistics, packed float32 ``[b, h_q, s_q, 1]``
        (a framework's own allocation); allocated stream-ordered if None.
    stream : Stream, optional
    window : (int or None, int or None), optional
        Sliding window ``(left, right)``: key ``j`` is visible to query ``i`` iff
        ``i - left <= j <= i + right`` (shifted by ``s_kv - s_q`` with a bottom-right
        ``causal``); None leaves a side open, and with ``causal`` the right side is the
        causal bound.  ``(4095, None)`` with ``causal=True`` is a 4096-key window.
    alibi : bool
        Add ALiBi, ``slope[h] * (j - i)``, to head ``h``'s scores: the slopes of Press et al.
        (:func:`~cudalibs.cudnn.attention.alibi_slopes`) unless ``alibi_slopes`` is given;
        needs a top-left causal mask.
    alibi_slopes : DeviceArray, optional
        float32, ``h_q`` contiguous values: ALiBi with these slopes.
    softcap : float, optional
        Cap the scores softly, ``scores -> softcap * tanh(scores / softcap)``, after the
        scale and before the bias and masks.
    page_table_k, page_table_v : DeviceArray, optional
        A paged key/value cache (the forward only): ``k`` and ``v`` are page pools
        ``[num_pages, h_kv, page_size, d]``, read through these int32 tables of ``[b,
        pages_per_seq]`` (or ``[b, 1, pages_per_seq, 1]``) page numbers; ``page_table_v``
        None reads ``v`` through ``page_table_k``.  Needs ``seq_lens_q`` and ``seq_lens_kv``;
        ``s_kv`` is ``pages_per_seq * page_size`` (see
        :mod:`cudalibs.cudnn.attention.serving`).
    ragged : Ragged, optional
        A packed batch (:func:`~cudalibs.cudnn.attention.ragged_batch`): the tensors of each
        packed side are ``[total_tokens, h, d]``, ``o`` too, and each sequence starts at its
        offset.  Needs ``seq_lens_q`` and ``seq_lens_kv``; the statistics stay
        ``[b, h_q, max_seq_len_q, 1]``.

    Returns
    -------
    DeviceArray or (DeviceArray, DeviceArray)
        ``o``, or ``(o, stats)`` with ``training`` (float32 ``[b, h_q, s_q, 1]``).
    """
    q, k, v, bias, out, dev = _operands("sdpa", (q, "q"), (k, "k"), (v, "v"), (bias, "bias"),
                                        (out, "out"), stream=stream, required=3)
    page_table_k, page_table_v, ragged = _sv.coerce("sdpa", page_table_k, page_table_v,
                                                    ragged, stream)
    o = _options.options()
    tune = o.sdpa_autotune
    variants = _mk.key("sdpa", causal, window, alibi, alibi_slopes, softcap)
    key = (SDPA_KEY, dev.ordinal, q.dtype, q.shape, q.strides, k.shape, k.strides,
           v.shape, v.strides, None if out is None else out.strides,
           *_common_key(bias, scale, causal, seq_lens_q, seq_lens_kv, dropout, seed),
           bool(training), o.sdpa_lowerings, tune, env(dev), *variants,
           *_sv.key_fields(page_table_k, page_table_v, ragged))
    plan = _front.planned(key, lambda: SdpaPlan(
        q, k, v, scale=scale, causal=causal, bias=bias, seq_lens_q=seq_lens_q,
        seq_lens_kv=seq_lens_kv, dropout=dropout, seed=seed, training=training, out=out,
        graphs=o.sdpa_lowerings, max_candidates=None if tune else 1, window=window,
        alibi=variants.alibi, softcap=softcap, page_table_k=page_table_k,
        page_table_v=page_table_v, ragged=ragged), tune=tune, stream=as_stream(stream, dev))
    return plan.execute(q, k, v, out=out, stats=stats, bias=bias, seq_lens_q=seq_lens_q,
                        seq_lens_kv=seq_lens_kv, seed=seed, alibi_slopes=alibi_slopes,
                        stream=stream, page_table_k=page_table_k, page_table_v=page_table_v,
                        ragged=ragged)


def sdpa_backward(q, k, v, o, do, stats, *, scale=None, causal=False, bias=None,
                  seq_lens_q=None, seq_lens_kv=None, dropout=0.0, seed=None, out=None,
                  stream=None, window=None, alibi=False, alibi_slopes=None, softcap=None,
                  want_dbias=False, dbias=None, ragged=None, page_table_k=None,
                  page_table_v=None):
    """The gradients of :func:`sdpa`: ``(dq, dk, dv)`` given the output gradient ``do`` (and
    the bias's, ``dbias``, when asked for).

    Parameters
    ----------
    q, k, v : DeviceArray or CUDA array
        The forward's inputs.
    o, stats : DeviceArray
        The forward's output and statistics (``sdpa(..., training=True)``).
    do : DeviceArray
        The gradient of ``o``, ``[b, h_q, s_q, d_v]``.
    scale, causal, bias, seq_lens_q, seq_lens_kv, dropout, seed
        Those of the forward (the same seed and offset replay its dropout mask).
    out : tuple of (DeviceArray or None), optional
        ``(dq, dk, dv)``; each None is allocated stream-ordered in its input's layout.
    stream : Stream, optional
    window, alibi, alibi_slopes, softcap
        Those of the forward.
    want_dbias : bool
        Also return the gradient of ``bias`` (of its shape and dtype): the gradient of the
        softmax's input summed over what the bias broadcasts.  cuDNN writes it for a bias of
        ``[1, h_q, s_q, s_kv]`` or ``[b, h_q, s_q, s_kv]``, from the lowering
        ``"composite_dp"`` only (which keeps ``dP`` in a workspace of
        ``b * h_q * s_q * s_kv`` half-precision values).
    dbias : DeviceArray, optional
        Where to write the bias gradient (implies ``want_dbias``); allocated stream-ordered
        in the bias's layout if None.
    ragged : Ragged, optional
        That of the forward: packed operands, and gradients packed like their inputs.
    page_table_k, page_table_v
        Refused (:class:`ValueError`): cuDNN has no backward through a paged cache.

    Returns
    -------
    tuple of DeviceArray
        ``(dq, dk, dv)``, or ``(dq, dk, dv, dbias)`` with ``want_dbias``.
    """
    dq, dk, dv = out3("sdpa_backward", out)
    q, k, v, o, do, bias, dq, dk, dv, dbias, dev = _operands(
        "sdpa_backward", (q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do"), (bias, "bias"),
        (dq, "dq"), (dk, "dk"), (dv, "dv"), (dbias, "dbias"), stream=stream, required=5)
    if type(stats) is not DeviceArray:
        # The plan checks DeviceArray statistics against the problem; anything else (None, a
        # foreign array) goes through the operand path here, before any C call.
        stats = _operands("sdpa_backward", (stats, "stats"), stream=stream, required=1)[0]
    page_table_k, page_table_v, ragged = _sv.coerce("sdpa_backward", page_table_k,
                                                    page_table_v, ragged, stream)
    outs = (dq, dk, dv)
    opts = _options.options()
    tune = opts.sdpa_autotune
    variants = _mk.key("sdpa_backward", causal, window, alibi, alibi_slopes, softcap)
    key = (SDPA_BACKWARD_KEY, dev.ordinal, q.dtype, q.shape, q.strides, k.shape,
           k.strides, v.shape, v.strides, o.strides, do.strides,
           tuple(None if g is None else g.strides for g in outs),
           *_common_key(bias, scale, causal, seq_lens_q, seq_lens_kv, dropout, seed),
           opts.sdpa_backward_lowerings, tune, env(dev), *variants,
           bool(want_dbias) if dbias is None else dbias.strides,
           *_sv.key_fields(page_table_k, page_table_v, ragged))
    plan = _front.planned(key, lambda: SdpaBackwardPlan(
        q, k, v, o, do, scale=scale, causal=causal, bias=bias, seq_lens_q=seq_lens_q,
        seq_lens_kv=seq_lens_kv, dropout=dropout, seed=seed, out=outs,
        graphs=opts.sdpa_backward_lowerings, max_candidates=None if tune else 1,
        window=window, alibi=variants.alibi, softcap=softcap, want_dbias=bool(want_dbias),
        dbias=dbias, ragged=ragged, page_table_k=page_table_k, page_table_v=page_table_v),
        tune=tune, stream=as_stream(stream, dev))
    return plan.execute(q, k, v, o, do, stats, bias=bias, seq_lens_q=seq_lens_q,
                        seq_lens_kv=seq_lens_kv, seed=seed, out=outs, alibi_slopes=alibi_slopes,
                        dbias=dbias, stream=stream, ragged=ragged)
