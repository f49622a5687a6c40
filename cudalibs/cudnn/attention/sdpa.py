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
- ``causal``: top-left causal mask, query ``i`` sees keys ``j <= i``;
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
from .plan import (F32, MAX_HEAD_DIM, MAX_HEAD_DIM_BACKWARD, SdpaPlanBase, backward_operands,
                   bias_spec, check_arch, check_dropout, check_qkv, elem_strides,
                   forward_operands, grad_strides, like, out3, padding_of, seed_by_value)

__all__ = ["sdpa", "sdpa_backward", "SdpaPlan", "SdpaBackwardPlan", "SDPA_KEY",
           "SDPA_BACKWARD_KEY", "MAX_HEAD_DIM", "MAX_HEAD_DIM_BACKWARD"]

_COMMON = ("scale", "causal", "bias_shape", "bias_strides", "padding", "dropout", "seed_by_value")
#: The cache keys of the one-shot functions (``entry.key["q_strides"]``...).
SDPA_KEY = KeyKind("cudnn_sdpa", ("device", "dtype", "q_shape", "q_strides", "k_shape",
                                  "k_strides", "v_shape", "v_strides", "out_strides")
                   + _COMMON + ("training", "lowerings", "autotune", "env"))
SDPA_BACKWARD_KEY = KeyKind("cudnn_sdpa_backward", (
    "device", "dtype", "q_shape", "q_strides", "k_shape", "k_strides", "v_shape", "v_strides",
    "o_strides", "do_strides", "out_strides") + _COMMON + ("lowerings", "autotune", "env"))


# -- the forward --------------------------------------------------------------------------------------
class SdpaPlan(SdpaPlanBase):
    """A planned attention forward ``o = softmax(q k^T * scale [+ bias], masked) [dropout] v``.

    Parameters
    ----------
    q, k, v : DeviceArray or CUDA array
        Example operands: their shapes, dtype, strides and device make the problem.
    scale, causal, bias, seq_lens_q, seq_lens_kv, dropout, seed, training
        As for :func:`sdpa`; ``bias``, ``seq_lens_*`` and ``seed`` are examples too (whether
        given, the bias's shape and strides, whether the seed is by value).
    out : DeviceArray, optional
        An example output (its strides); by default ``o`` takes ``q``'s layout.
    dump_mask : bool
        With dropout, also write the keep-mask as float32 ``[b, h_q, s_q, s_kv]`` into
        ``mask_out`` at every execution (for checking; it costs bandwidth).
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
                 dump_mask=False, graphs=None, max_candidates=None):
        op = "SdpaPlan"
        q, k, v, bias, out, dev = _operands(op, (q, "q"), (k, "k"), (v, "v"), (bias, "bias"),
                                            (out, "out"), required=3)
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
            os_ = like(qs, o_shape)
        if dump_mask and not p:
            raise ValueError(f"{op}: dump_mask needs dropout > 0")
        spec = _ag.Spec(q.dtype, b, h_q, h_kv, s_q, s_kv, d, d_v, qs,
                        elem_strides(k, "k", op), elem_strides(v, "v", op), os_,
                        float(1.0 / math.sqrt(d) if scale is None else scale), bool(causal),
                        bias_spec(op, bias, q.dtype, b, h_q, s_q, s_kv),
                        padding_of(op, seq_lens_q, seq_lens_kv), p, seed_by_value(op, seed),
                        bool(training), bool(dump_mask))
        self._setup(spec, dev, graphs, max_candidates)

    def _operand_specs(self):
        s = self._spec
        specs = forward_operands(s)
        if s.dump_mask:
            shape = (s.b, s.h_q, s.s_q, s.s_kv)
            specs.append(("mask", shape, like((3, 2, 1, 1), shape)))
        return specs

    @property
    def out_shape(self) -> tuple:
        """``o``'s shape, ``[b, h_q, s_q, d_v]``."""
        s = self._spec
        return (s.b, s.h_q, s.s_q, s.d_v)

    def execute(self, q, k, v, *, out=None, stats=None, bias=None, seq_lens_q=None,
                seq_lens_kv=None, seed=None, mask_out=None, stream=None):
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
        stream : Stream, optional

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
class SdpaBackwardPlan(SdpaPlanBase):
    """A planned attention backward: ``(dq, dk, dv)`` from ``q, k, v, o, do`` and the forward's
    statistics.

    Parameters
    ----------
    q, k, v, o, do : DeviceArray or CUDA array
        Example operands (shapes, dtype, strides, device).
    scale, causal, bias, seq_lens_q, seq_lens_kv, dropout, seed
        Those of the forward (see :func:`sdpa`).
    out : tuple of (DeviceArray or None), optional
        Example ``(dq, dk, dv)``: their strides (default: the layouts of ``q``, ``k``, ``v``).
    graphs : sequence of str, optional
        The lowerings to draw candidates from (default
        :attr:`cudalibs.Options.sdpa_backward_lowerings`).
    max_candidates : int, optional
        As for :class:`SdpaPlan`.
    """

    kind = "cudnn_sdpa_backward"
    _lowerings_option = "sdpa_backward_lowerings"
    _builders = {"composite": _ag.backward_graph, "composite_dp": _ag.backward_graph_dp,
                 "unified": _ag.unified_backward_graph}

    def __init__(self, q, k, v, o, do, *, scale=None, causal=False, bias=None,
                 seq_lens_q=None, seq_lens_kv=None, dropout=0.0, seed=None, out=None,
                 graphs=None, max_candidates=None):
        op = "SdpaBackwardPlan"
        dq, dk, dv = out3(op, out)
        q, k, v, o, do, bias, dq, dk, dv, dev = _operands(
            op, (q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do"), (bias, "bias"),
            (dq, "dq"), (dk, "dk"), (dv, "dv"), required=5)
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
        spec = _ag.Spec(q.dtype, b, h_q, h_kv, s_q, s_kv, d, d_v, qs, ks, vs,
                        elem_strides(o, "o", op),
                        float(1.0 / math.sqrt(d) if scale is None else scale), bool(causal),
                        bias_spec(op, bias, q.dtype, b, h_q, s_q, s_kv),
                        padding_of(op, seq_lens_q, seq_lens_kv), p, seed_by_value(op, seed),
                        True, False, True, elem_strides(do, "do", op), *grads)
        self._setup(spec, dev, graphs, max_candidates)

    def _operand_specs(self):
        return backward_operands(self._spec)

    def execute(self, q, k, v, o, do, stats, *, bias=None, seq_lens_q=None, seq_lens_kv=None,
                seed=None, out=None, stream=None):
        """Run the attention backward on ``stream``.

        Parameters
        ----------
        q, k, v, o, do : DeviceArray
            Of the plan's shapes, dtype and strides.
        stats : DeviceArray
            float32 ``[b, h_q, s_q, 1]`` from the forward with ``training=True``.
        bias, seq_lens_q, seq_lens_kv, seed
            Those the forward ran with.
        out : tuple of (DeviceArray or None), optional
            ``(dq, dk, dv)``; each None is allocated stream-ordered.
        stream : Stream, optional

        Returns
        -------
        (DeviceArray, DeviceArray, DeviceArray)
            ``dq``, ``dk``, ``dv``.
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
        ins = [("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("stats", stats)]
        grads = []
        for g, name in zip((dq, dk, dv), ("dq", "dk", "dv")):
            g = self._output(op, g, name, name, sp.dtype, dev, s, ins)
            ins.append((name, g))
            vals[name] = g.address
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
         dropout=0.0, seed=None, training=False, out=None, stats=None, stream=None):
    """Scaled dot-product attention, ``softmax(q k^T * scale [+ bias], masked) [dropout] v``.

    Parameters
    ----------
    q, k, v : DeviceArray or CUDA array
        ``[b, h_q, s_q, d]``, ``[b, h_kv, s_kv, d]``, ``[b, h_kv, s_kv, d_v]``, float16 or
        bfloat16, any layout with a contiguous head dimension (see the module docstring).
    scale : float, optional
        Multiplies ``q k^T`` (default ``1 / sqrt(d)``).
    causal : bool
        Top-left causal mask.
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

    Returns
    -------
    DeviceArray or (DeviceArray, DeviceArray)
        ``o``, or ``(o, stats)`` with ``training`` (float32 ``[b, h_q, s_q, 1]``).
    """
    q, k, v, bias, out, dev = _operands("sdpa", (q, "q"), (k, "k"), (v, "v"), (bias, "bias"),
                                        (out, "out"), stream=stream, required=3)
    o = _options.options()
    tune = o.sdpa_autotune
    key = (SDPA_KEY, dev.ordinal, q.dtype, q.shape, q.strides, k.shape, k.strides,
           v.shape, v.strides, None if out is None else out.strides,
           *_common_key(bias, scale, causal, seq_lens_q, seq_lens_kv, dropout, seed),
           bool(training), o.sdpa_lowerings, tune, env(dev))
    plan = _front.planned(key, lambda: SdpaPlan(
        q, k, v, scale=scale, causal=causal, bias=bias, seq_lens_q=seq_lens_q,
        seq_lens_kv=seq_lens_kv, dropout=dropout, seed=seed, training=training, out=out,
        graphs=o.sdpa_lowerings, max_candidates=None if tune else 1), tune=tune,
        stream=as_stream(stream, dev))
    return plan.execute(q, k, v, out=out, stats=stats, bias=bias, seq_lens_q=seq_lens_q,
                        seq_lens_kv=seq_lens_kv, seed=seed, stream=stream)


def sdpa_backward(q, k, v, o, do, stats, *, scale=None, causal=False, bias=None,
                  seq_lens_q=None, seq_lens_kv=None, dropout=0.0, seed=None, out=None,
                  stream=None):
    """The gradients of :func:`sdpa`: ``(dq, dk, dv)`` given the output gradient ``do``.

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

    Returns
    -------
    (DeviceArray, DeviceArray, DeviceArray)
    """
    dq, dk, dv = out3("sdpa_backward", out)
    q, k, v, o, do, bias, dq, dk, dv, dev = _operands(
        "sdpa_backward", (q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do"), (bias, "bias"),
        (dq, "dq"), (dk, "dk"), (dv, "dv"), stream=stream, required=5)
    if type(stats) is not DeviceArray:
        # The plan checks DeviceArray statistics against the problem; anything else (None, a
        # foreign array) goes through the operand path here, before any C call.
        stats = _operands("sdpa_backward", (stats, "stats"), stream=stream, required=1)[0]
    outs = (dq, dk, dv)
    opts = _options.options()
    tune = opts.sdpa_autotune
    key = (SDPA_BACKWARD_KEY, dev.ordinal, q.dtype, q.shape, q.strides, k.shape,
           k.strides, v.shape, v.strides, o.strides, do.strides,
           tuple(None if g is None else g.strides for g in outs),
           *_common_key(bias, scale, causal, seq_lens_q, seq_lens_kv, dropout, seed),
           opts.sdpa_backward_lowerings, tune, env(dev))
    plan = _front.planned(key, lambda: SdpaBackwardPlan(
        q, k, v, o, do, scale=scale, causal=causal, bias=bias, seq_lens_q=seq_lens_q,
        seq_lens_kv=seq_lens_kv, dropout=dropout, seed=seed, out=outs,
        graphs=opts.sdpa_backward_lowerings, max_candidates=None if tune else 1), tune=tune,
        stream=as_stream(stream, dev))
    return plan.execute(q, k, v, o, do, stats, bias=bias, seq_lens_q=seq_lens_q,
                        seq_lens_kv=seq_lens_kv, seed=seed, out=outs, stream=stream)
