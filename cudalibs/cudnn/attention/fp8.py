"""fp8 scaled dot-product attention through cuDNN's graph API: forward, backward, their plans.

::

    fwd = cudnn.attention.sdpa_fp8(q8, k8, v8, descale_q=dq, descale_k=dk, descale_v=dv,
                                   descale_s=ds, scale_s=ss, scale_o=so, causal=True,
                                   training=True)
    o8, stats, amax_s, amax_o = fwd
    grads = cudnn.attention.sdpa_fp8_backward(
        q8, k8, v8, o8, do8, stats, descale_q=dq, descale_k=dk, descale_v=dv,
        descale_o=1 / so, descale_do=ddo, descale_s=ds, descale_dp=ddp, scale_s=ss,
        scale_dq=sdq, scale_dk=sdk, scale_dv=sdv, scale_dp=sdp, causal=True)
    dq8, dk8, dv8, amax_dq, amax_dk, amax_dv, amax_dp = grads

Siblings of :func:`~cudalibs.cudnn.attention.sdpa` and
:func:`~cudalibs.cudnn.attention.sdpa_backward` rather than options of them, as in cuDNN's
own frontend (``sdpa_fp8``): the calls take six (forward) and twelve (backward) scale
tensors and give back amax values, so both their arguments and their results differ.  The
plans (:class:`SdpaFp8Plan`, :class:`SdpaFp8BackwardPlan`) follow the same protocol as every
attention plan -- construct, ``plan()`` / ``autotune()``, ``execute()``, ``close()``, one
plan cache (:data:`SDPA_FP8_KEY`, :data:`SDPA_FP8_BACKWARD_KEY`; the one-shots time every
engine of a new problem when :attr:`cudalibs.Options.sdpa_autotune` is set, as ``sdpa``'s do),
relaunched kernels.

Per-tensor scaling (the "delayed scaling" of fp8 training): a stored fp8 value ``x8`` means
``x8 * descale_x``, and a tensor written in fp8 is ``real * scale_x``, rounded.  Every scale is
a float32 device array of one element, read when the kernel runs (so a captured graph or a
training loop updates it in place); every ``amax_*`` is one float32 element the call writes:
the largest magnitude of that tensor in real units, before its scale -- what the next step's
scale is computed from.  The tensors are ``q, k, v`` (and ``o``), ``S`` (the probabilities
``P`` that the second matmul reads in fp8, ``0 <= P <= 1``), ``dO``, ``dP`` (the gradient of
the scores, ``dS`` in :mod:`cudalibs.cudnn.attention.lower`, read in fp8 by the ``dQ`` and
``dK`` matmuls) and the gradients.  The graph (see the lowering) is the reference semantics;
:func:`cudalibs.testing.ref.sdpa_fp8_forward` / ``sdpa_fp8_backward`` compute it in float64.

What cuDNN 9 takes, checked before any library call (the loaded library's fp8 engines, as its
frontend's support checks state them):

- compute capability 9.0 (Hopper) or later and cuDNN 9.1 or later (not 9.10.0, whose fp8
  attention has known faults);
- ``q, k, v`` of one fp8 type (``float8_e4m3fn`` or ``float8_e5m2``); ``o``, ``dO`` and the
  gradients fp8 (e4m3 or e5m2 each, the ``P`` and ``dP`` intermediates in ``q``'s and ``dO``'s
  types); float16/bfloat16 outputs only on compute capability 10.0+ with cuDNN 9.13+;
- head dims multiples of 16: up to 256 forward on Hopper, exactly 128 for ``q, k`` and ``v``
  backward on Hopper; on Blackwell up to 128 both ways (or ``d = 192`` with ``d_v = 128``);
- the backward's ``s_q`` a multiple of :data:`FP8_SEQ_MULTIPLE`: with cuDNN 9.19 on Hopper
  the rows of ``dQ`` past the last multiple of 16 are wrong otherwise (seen for ``s_q`` = 72,
  88, 100, 104, 120, 136; 80, 96, 112, 144 and multiples of 64 are right, with any ``s_kv``);
  padding masks (sequence lengths) shorten rows freely;
- causal (top-left) and padding masks, any attention ``scale``; no bias and no dropout;
- any ``[b, h, s, d]`` strides with a contiguous head dimension and other strides multiples of
  16 bytes, as for the half-precision plans; every pointer 16-byte aligned (the scales too).

A problem cuDNN still refuses (a newer rule of a newer library) raises
:class:`~cudalibs.errors.CudaLibsError` naming the problem -- types, heads, sequence and head
dims, masks -- and cuDNN's answer.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ... import dtypes as _dtypes
from ...driver.array import DeviceArray, spans_overlap
from ...driver.memory import alloc_async
from ...driver.stream import as_stream
from ...errors import CudaLibsError
from ...runtime import front as _front
from ...runtime import options as _options
from ...runtime.cache import KeyKind
from ...runtime.operand import operand as _operand
from ...runtime.operand import operands as _operands
from .._base import env, version
from . import lower as _ag
from .plan import (ALIGN, F32, SdpaPlanBase, backward_operands, check_arch, check_qkv,
                   elem_strides, forward_operands, grad_strides, like, out3, padding_of)

__all__ = ["sdpa_fp8", "sdpa_fp8_backward", "SdpaFp8Plan", "SdpaFp8BackwardPlan",
           "SdpaFp8Output", "SdpaFp8Gradients", "SDPA_FP8_KEY", "SDPA_FP8_BACKWARD_KEY",
           "FP8_DTYPES", "FP8_SEQ_MULTIPLE"]

#: The fp8 types of q, k, v (and of o, dO, the gradients).
FP8_DTYPES = tuple(d for d in (_dtypes.float8_e4m3fn, _dtypes.float8_e5m2) if d is not None)
_HALF = tuple(d for d in (np.dtype(np.float16), _dtypes.bfloat16) if d is not None)
#: What the backward's query sequence length (the tensors' ``s_q``) must be a multiple of.
FP8_SEQ_MULTIPLE = 16
_WHAT = "cuDNN's fp8 attention"


class SdpaFp8Output(NamedTuple):
    """What :func:`sdpa_fp8` returns: ``o`` (fp8), ``stats`` (float32 ``[b, h_q, s_q, 1]``, or
    None without ``training``), ``amax_s`` and ``amax_o`` (one float32 element each)."""

    o: DeviceArray
    stats: DeviceArray | None
    amax_s: DeviceArray
    amax_o: DeviceArray


class SdpaFp8Gradients(NamedTuple):
    """What :func:`sdpa_fp8_backward` returns: the gradients and the amax of each, and of the
    scores' gradient ``dP`` (one float32 element each)."""

    dq: DeviceArray
    dk: DeviceArray
    dv: DeviceArray
    amax_dq: DeviceArray
    amax_dk: DeviceArray
    amax_dv: DeviceArray
    amax_dp: DeviceArray


# -- checks (no library call but the version) ---------------------------------------------------------
def _check(op, q, k, v, dev, backward: bool) -> tuple:
    """``((b, h_q, h_kv, s_q, s_kv, d, d_v), compute capability)`` of an fp8 problem cuDNN
    takes on ``dev``."""
    dims = check_qkv(op, q, k, v, 256, dtypes=FP8_DTYPES, multiple=16, what=_WHAT,
                     backward=backward)
    cc = check_arch(op, dev, (9, 0), _WHAT)
    ver = version()
    if ver < (9, 1, 0) or ver[:3] == (9, 10, 0):
        raise CudaLibsError(f"{op}: {_WHAT} needs cuDNN 9.1.0 or later, and not 9.10.0 (known "
                            f"faults); loaded: {'.'.join(map(str, ver))}")
    _, _, _, s_q, s_kv, d, d_v = dims
    way = "backward" if backward else "forward"
    if cc >= (10, 0):
        if not (d <= 128 and d_v <= 128 or d == 192 and d_v == 128 and
                (backward or ver >= (9, 19, 0))):
            raise ValueError(f"{op}: head dims d = {d}, d_v = {d_v}; {_WHAT} {way} on compute "
                             "capability 10+ takes up to 128 (or d = 192 with d_v = 128)")
    elif backward and (d, d_v) != (128, 128):
        raise ValueError(f"{op}: head dims d = {d}, d_v = {d_v}; {_WHAT} backward on Hopper "
                         "takes d = d_v = 128 only")
    if backward and s_q % FP8_SEQ_MULTIPLE:
        raise ValueError(f"{op}: s_q = {s_q}; {_WHAT} backward needs a multiple of "
                         f"{FP8_SEQ_MULTIPLE} (its last rows of dQ are wrong otherwise; pad the "
                         "tensors and pass seq_lens_q / seq_lens_kv)")
    return dims, cc


def _out_type(op, name, dtype, default, cc) -> np.dtype:
    """The type a tensor the graph writes is given: fp8, or half where cuDNN writes it."""
    dt = default if dtype is None else _dtypes.lookup(dtype, f"{op}: {name} dtype").numpy
    if dt in FP8_DTYPES:
        return dt
    if dt not in _HALF:
        raise TypeError(f"{op}: {name} is written as fp8 ({', '.join(map(str, FP8_DTYPES))}) "
                        f"or, on compute capability 10+, float16/bfloat16; not {dt}")
    ver = version()
    if cc < (10, 0) or ver < (9, 13, 0):
        raise CudaLibsError(f"{op}: {_WHAT} writes {name} as {dt} on compute capability 10.0+ "
                            f"with cuDNN 9.13+ only (this device: {cc[0]}.{cc[1]}, cuDNN "
                            f"{'.'.join(map(str, ver))}); ask for an fp8 type")
    return dt


def _same_type(op, name, arr, dtype):
    if arr is not None and dtype is not None and \
            arr.dtype != _dtypes.lookup(dtype, f"{op}: {name} dtype").numpy:
        raise TypeError(f"{op}: {name} is {arr.dtype} but out_dtype is {dtype}")


# -- the plans --------------------------------------------------------------------------------------
class _Fp8Plan(SdpaPlanBase):
    """What both fp8 plans add to the attention plan base: the scale and amax scalars."""

    _lowerings_option = None

    def _scalars(self, op, vals, inputs: dict, outputs: dict, dev, s, arrays) -> dict:
        """Check the scale arrays of a call (one float32 element, 16-byte aligned) into
        ``vals``; the amax outputs likewise, allocated stream-ordered where None, none sharing
        memory with any other operand (``arrays``: the call's ``(slot, array)`` pairs).
        Returns ``{name: amax array}``."""
        addrs = {}
        for name, x in inputs.items():
            if x is None:
                raise TypeError(f"{op}: {name}= is required (a float32 device array of one "
                                "element)")
            vals[name] = addrs[name] = self._scalar(op, name, x, dev, False).address
        out = {}
        for name, x in outputs.items():
            if x is None:
                a = DeviceArray.from_buffer(alloc_async(4, s, dev), (1,), F32, (4,))
            else:
                a = self._scalar(op, name, x, dev, True)
                p = a.address
                for n, other in addrs.items():
                    if other == p:
                        raise ValueError(f"{op}: {name} is the same memory as {n}; give a "
                                         "separate array")
                for n, arr in arrays:
                    if spans_overlap(p, (0, 4), arr.address, self._ext[n]):
                        raise ValueError(f"{op}: {name} overlaps {n}; give a separate array")
            vals[name] = addrs[name] = a.address
            out[name] = a
        return out

    @staticmethod
    def _scalar(op, name, x, dev, written):
        a = _operand(x, name, op, device=dev, written=written)
        if a.dtype != F32 or a.size != 1:
            raise ValueError(f"{op}: {name} must be one float32 element on the device, got "
                             f"{a.dtype} {a.shape}")
        if a.address % ALIGN:
            raise ValueError(f"{op}: {name} must be {ALIGN}-byte aligned (address "
                             f"{a.address:#x}); a separate allocation is")
        return a


class SdpaFp8Plan(_Fp8Plan):
    """A planned fp8 attention forward (see :mod:`cudalibs.cudnn.attention.fp8`).

    Parameters
    ----------
    q, k, v : DeviceArray or CUDA array
        Example fp8 operands ``[b, h_q, s_q, d]``, ``[b, h_kv, s_kv, d]``,
        ``[b, h_kv, s_kv, d_v]``: their shapes, type, strides and device make the problem.
    scale, causal, seq_lens_q, seq_lens_kv, training
        As for :func:`sdpa_fp8` (``seq_lens_*``: whether given).
    out : DeviceArray, optional
        An example output (its strides and type); by default ``o`` takes ``q``'s layout.
    out_dtype : dtype-like, optional
        ``o``'s type (default ``q``'s).
    max_candidates : int, optional
        The most engine configurations finalized (default 16).

    Examples
    --------
    >>> plan = cudnn.attention.SdpaFp8Plan(q8, k8, v8, causal=True)   # doctest: +SKIP
    >>> o8, _, amax_s, amax_o = plan.execute(q8, k8, v8, **scales)    # doctest: +SKIP
    """

    kind = "cudnn_sdpa_fp8"
    _builders = {"fp8": _ag.fp8_forward_graph}

    def __init__(self, q, k, v, *, scale=None, causal=False, seq_lens_q=None,
                 seq_lens_kv=None, training=False, out=None, out_dtype=None,
                 max_candidates=None):
        op = "SdpaFp8Plan"
        q, k, v, out, dev = _operands(op, (q, "q"), (k, "k"), (v, "v"), (out, "out"),
                                      required=3)
        (b, h_q, h_kv, s_q, s_kv, d, d_v), cc = _check(op, q, k, v, dev, False)
        _same_type(op, "out", out, out_dtype)
        o_type = _out_type(op, "o", out.dtype if out is not None else out_dtype, q.dtype, cc)
        qs = elem_strides(q, "q", op)
        o_shape = (b, h_q, s_q, d_v)
        if out is not None:
            if tuple(out.shape) != o_shape:
                raise ValueError(f"{op}: out must be {o_shape}, got {out.shape}")
            os_ = elem_strides(out, "out", op)
        else:
            os_ = like(qs, o_shape)
        spec = _ag.Spec(q.dtype, b, h_q, h_kv, s_q, s_kv, d, d_v, qs, elem_strides(k, "k", op),
                        elem_strides(v, "v", op), os_,
                        float(1.0 / math.sqrt(d) if scale is None else scale), bool(causal),
                        None, padding_of(op, seq_lens_q, seq_lens_kv), 0.0, True,
                        bool(training), False, fp8=_ag.Fp8(o_type))
        self._setup(spec, dev, None, max_candidates)

    def _operand_specs(self):
        return forward_operands(self._spec)

    @property
    def out_shape(self) -> tuple:
        """``o``'s shape, ``[b, h_q, s_q, d_v]``."""
        s = self._spec
        return (s.b, s.h_q, s.s_q, s.d_v)

    def execute(self, q, k, v, *, descale_q, descale_k, descale_v, descale_s, scale_s,
                scale_o, out=None, stats=None, amax_s=None, amax_o=None, seq_lens_q=None,
                seq_lens_kv=None, stream=None) -> SdpaFp8Output:
        """Run the fp8 attention forward on ``stream``.

        Parameters
        ----------
        q, k, v : DeviceArray
            Of the plan's shapes, type and strides.
        descale_q, descale_k, descale_v, descale_s, scale_s, scale_o : DeviceArray
            One float32 element each (see :func:`sdpa_fp8`).
        out, stats, amax_s, amax_o : DeviceArray, optional
            Where to write; allocated stream-ordered if None (``stats`` only with
            ``training``).
        seq_lens_q, seq_lens_kv
            Exactly when the plan was made with them.
        stream : Stream, optional

        Returns
        -------
        SdpaFp8Output
        """
        op = "SdpaFp8Plan.execute"
        (q, k, v), dev, s = self._front(op, ((q, "q"), (k, "k"), (v, "v")), stream)
        sp = self._spec
        for arr, (name, shape, est) in zip((q, k, v), self._specs):
            self._match(op, arr, name, shape, est, sp.dtype)
        if stats is not None and not sp.stats:
            raise ValueError(f"{op}: the plan was made without training=True; it writes no "
                             "stats")
        vals = {"q": q.address, "k": k.address, "v": v.address}
        keep = self._extras(op, vals, None, seq_lens_q, seq_lens_kv, None, dev, s)
        ins = [("q", q), ("k", k), ("v", v)]
        o = self._output(op, out, "out", "o", sp.fp8.o, dev, s, ins)
        ins.append(("o", o))
        vals["o"] = o.address
        st = None
        if sp.stats:
            st = self._output(op, stats, "stats", "stats", F32, dev, s, ins, True)
            ins.append(("stats", st))
            vals["stats"] = st.address
        amax = self._scalars(op, vals, {"descale_q": descale_q, "descale_k": descale_k,
                                        "descale_v": descale_v, "descale_s": descale_s,
                                        "scale_s": scale_s, "scale_o": scale_o},
                             {"amax_s": amax_s, "amax_o": amax_o}, dev, s, ins)
        self._launch(dev, s, vals, False)
        del keep
        return SdpaFp8Output(o, st, amax["amax_s"], amax["amax_o"])


class SdpaFp8BackwardPlan(_Fp8Plan):
    """A planned fp8 attention backward: ``(dq, dk, dv)`` and their amax values from
    ``q, k, v, o, do`` and the forward's statistics.

    Parameters
    ----------
    q, k, v, o, do : DeviceArray or CUDA array
        Example operands (shapes, types, strides, device): ``q, k, v`` of one fp8 type, ``o``
        as the forward wrote it, ``do`` fp8 (e4m3 or e5m2).
    scale, causal, seq_lens_q, seq_lens_kv
        Those of the forward.
    out : tuple of (DeviceArray or None), optional
        Example ``(dq, dk, dv)``: their strides and type (default: the layouts of ``q``,
        ``k``, ``v``).
    out_dtype : dtype-like, optional
        The gradients' type (default ``do``'s).
    max_candidates : int, optional
        As for :class:`SdpaFp8Plan`.
    """

    kind = "cudnn_sdpa_fp8_backward"
    _builders = {"fp8": _ag.fp8_backward_graph}

    def __init__(self, q, k, v, o, do, *, scale=None, causal=False, seq_lens_q=None,
                 seq_lens_kv=None, out=None, out_dtype=None, max_candidates=None):
        op = "SdpaFp8BackwardPlan"
        dq, dk, dv = out3(op, out)
        q, k, v, o, do, dq, dk, dv, dev = _operands(
            op, (q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do"), (dq, "dq"), (dk, "dk"),
            (dv, "dv"), required=5)
        (b, h_q, h_kv, s_q, s_kv, d, d_v), cc = _check(op, q, k, v, dev, True)
        for arr, n in ((o, "o"), (do, "do")):
            if arr.ndim != 4 or tuple(arr.shape) != (b, h_q, s_q, d_v):
                raise ValueError(f"{op}: {n} must be {(b, h_q, s_q, d_v)} (the forward's "
                                 f"output), got {arr.shape}")
        o_type = _out_type(op, "o", o.dtype, None, cc)
        if do.dtype not in FP8_DTYPES:
            raise TypeError(f"{op}: do has dtype {do.dtype}; {_WHAT} takes "
                            f"{', '.join(map(str, FP8_DTYPES))}")
        given = [g for g in (dq, dk, dv) if g is not None]
        for g, n in zip((dq, dk, dv), ("dq", "dk", "dv")):
            _same_type(op, n, g, out_dtype)
        if len({g.dtype for g in given}) > 1:
            raise TypeError(f"{op}: dq, dk, dv must share one dtype, got "
                            f"{[str(g.dtype) for g in given]}")
        g_type = _out_type(op, "the gradients", given[0].dtype if given else out_dtype,
                           do.dtype, cc)
        qs, ks, vs = (elem_strides(a, n, op) for a, n in ((q, "q"), (k, "k"), (v, "v")))
        grads = grad_strides(op, (dq, dk, dv), (qs, ks, vs),
                             ((b, h_q, s_q, d), (b, h_kv, s_kv, d), (b, h_kv, s_kv, d_v)))
        spec = _ag.Spec(q.dtype, b, h_q, h_kv, s_q, s_kv, d, d_v, qs, ks, vs,
                        elem_strides(o, "o", op),
                        float(1.0 / math.sqrt(d) if scale is None else scale), bool(causal),
                        None, padding_of(op, seq_lens_q, seq_lens_kv), 0.0, True, True, False,
                        True, elem_strides(do, "do", op), *grads,
                        fp8=_ag.Fp8(o_type, do.dtype, g_type, g_type, g_type))
        self._setup(spec, dev, None, max_candidates)

    def _operand_specs(self):
        return backward_operands(self._spec)

    def execute(self, q, k, v, o, do, stats, *, descale_q, descale_k, descale_v, descale_o,
                descale_do, descale_s, descale_dp, scale_s, scale_dq, scale_dk, scale_dv,
                scale_dp, out=None, amax_dq=None, amax_dk=None, amax_dv=None, amax_dp=None,
                seq_lens_q=None, seq_lens_kv=None, stream=None) -> SdpaFp8Gradients:
        """Run the fp8 attention backward on ``stream``.

        Parameters
        ----------
        q, k, v, o, do : DeviceArray
            Of the plan's shapes, types and strides.
        stats : DeviceArray
            float32 ``[b, h_q, s_q, 1]`` from the forward with ``training=True``.
        descale_*, scale_* : DeviceArray
            One float32 element each (see :func:`sdpa_fp8_backward`).
        out : tuple of (DeviceArray or None), optional
            ``(dq, dk, dv)``; each None is allocated stream-ordered.
        amax_dq, amax_dk, amax_dv, amax_dp : DeviceArray, optional
            Where to write the amax values; allocated if None.
        seq_lens_q, seq_lens_kv
            Those the forward ran with.
        stream : Stream, optional

        Returns
        -------
        SdpaFp8Gradients
        """
        op = "SdpaFp8BackwardPlan.execute"
        dq, dk, dv = out3(op, out)
        (q, k, v, o, do, stats), dev, s = self._front(
            op, ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do"), (stats, "stats")), stream)
        for arr, (name, shape, est) in zip((q, k, v, o, do), self._specs):
            self._match(op, arr, name, shape, est, self._slot_dtype(name))
        self._stats_in(op, stats)
        vals = {"q": q.address, "k": k.address, "v": v.address, "o": o.address,
                "do": do.address, "stats": stats.address}
        keep = self._extras(op, vals, None, seq_lens_q, seq_lens_kv, None, dev, s)
        ins = [("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("stats", stats)]
        grads = []
        for g, name in zip((dq, dk, dv), ("dq", "dk", "dv")):
            g = self._output(op, g, name, name, self._slot_dtype(name), dev, s, ins)
            ins.append((name, g))
            vals[name] = g.address
            grads.append(g)
        amax = self._scalars(
            op, vals, {"descale_q": descale_q, "descale_k": descale_k, "descale_v": descale_v,
                       "descale_o": descale_o, "descale_do": descale_do,
                       "descale_s": descale_s, "descale_dp": descale_dp, "scale_s": scale_s,
                       "scale_dq": scale_dq, "scale_dk": scale_dk, "scale_dv": scale_dv,
                       "scale_dp": scale_dp},
            {"amax_dq": amax_dq, "amax_dk": amax_dk, "amax_dv": amax_dv, "amax_dp": amax_dp},
            dev, s, ins)
        self._launch(dev, s, vals, False)
        del keep
        return SdpaFp8Gradients(*grads, *(amax[n] for n in _ag.FP8_AMAX["backward"]))


# -- the one-shot functions ---------------------------------------------------------------------------
_COMMON = ("scale", "causal", "padding", "autotune", "env")
#: The cache keys of the one-shot functions (``entry.key["out_dtype"]``...).
SDPA_FP8_KEY = KeyKind("cudnn_sdpa_fp8", (
    "device", "dtype", "q_shape", "q_strides", "k_shape", "k_strides", "v_shape", "v_strides",
    "out_dtype", "out_strides", "training") + _COMMON)
SDPA_FP8_BACKWARD_KEY = KeyKind("cudnn_sdpa_fp8_backward", (
    "device", "dtype", "q_shape", "q_strides", "k_shape", "k_strides", "v_shape", "v_strides",
    "o_dtype", "o_strides", "do_dtype", "do_strides", "out_dtype", "out_strides") + _COMMON)


def _planned_after_scales(op, dev, scales: dict, make):
    """``make()`` (a new plan, whose construction loads cuDNN) once the call's scale arrays
    have been checked: a missing or malformed scale is answered before any library call."""
    def build():
        for name, x in scales.items():
            if x is None:
                raise TypeError(f"{op}: {name}= is required (a float32 device array of one "
                                "element)")
            _Fp8Plan._scalar(op, name, x, dev, False)
        return make()
    return build


def _type_key(op, dtype):
    return None if dtype is None else _dtypes.lookup(dtype, f"{op}: out_dtype").numpy


def sdpa_fp8(q, k, v, *, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o,
             scale=None, causal=False, seq_lens_q=None, seq_lens_kv=None, training=False,
             out=None, out_dtype=None, stats=None, amax_s=None, amax_o=None,
             stream=None) -> SdpaFp8Output:
    """fp8 scaled dot-product attention with per-tensor scaling (see the module docstring).

    ``S = q k^T * scale * descale_q * descale_k`` (masked), ``P = softmax(S)``,
    ``o = fp8(P8 @ v * descale_s * descale_v * scale_o)`` with ``P8 = fp8(P * scale_s)``.

    Parameters
    ----------
    q, k, v : DeviceArray or CUDA array
        ``[b, h_q, s_q, d]``, ``[b, h_kv, s_kv, d]``, ``[b, h_kv, s_kv, d_v]`` of one fp8 type.
    descale_q, descale_k, descale_v : DeviceArray
        One float32 element each: the real value of a stored element is ``x8 * descale_x``.
    descale_s, scale_s : DeviceArray
        The fp8 scale of the probabilities and its inverse (``P8 = fp8(P * scale_s)``; ``P``
        is at most 1, so ``scale_s`` up to the type's largest power of two keeps it finite).
    scale_o : DeviceArray
        ``o`` is written as ``o_real * scale_o``.
    scale : float, optional
        Multiplies the scores (default ``1 / sqrt(d)``).
    causal : bool
        Top-left causal mask.
    seq_lens_q, seq_lens_kv : sequence of int or int32 DeviceArray, optional
        Per-batch sequence lengths (both or neither); rows beyond them are unspecified.
    training : bool
        Also write the softmax statistics the backward needs.
    out : DeviceArray, optional
        ``[b, h_q, s_q, d_v]``; allocated stream-ordered in ``q``'s layout if None.
    out_dtype : dtype-like, optional
        ``o``'s type when ``out`` is None (default ``q``'s).
    stats : DeviceArray, optional
        With ``training``: packed float32 ``[b, h_q, s_q, 1]``.
    amax_s, amax_o : DeviceArray, optional
        One float32 element each, written with ``max |P|`` and ``max |o_real|``; allocated if
        None.
    stream : Stream, optional

    Returns
    -------
    SdpaFp8Output
        ``(o, stats, amax_s, amax_o)`` (``stats`` None without ``training``).
    """
    op = "sdpa_fp8"
    q, k, v, out, dev = _operands(op, (q, "q"), (k, "k"), (v, "v"), (out, "out"),
                                  stream=stream, required=3)
    tune = _options.options().sdpa_autotune
    key = (SDPA_FP8_KEY, dev.ordinal, q.dtype, q.shape, q.strides, k.shape, k.strides, v.shape,
           v.strides, _type_key(op, out_dtype) if out is None else out.dtype,
           None if out is None else out.strides, bool(training),
           None if scale is None else float(scale), bool(causal),
           seq_lens_q is not None or seq_lens_kv is not None, tune, env(dev))
    scales = {"descale_q": descale_q, "descale_k": descale_k, "descale_v": descale_v,
              "descale_s": descale_s, "scale_s": scale_s, "scale_o": scale_o}
    plan = _front.planned(key, _planned_after_scales(op, dev, scales, lambda: SdpaFp8Plan(
        q, k, v, scale=scale, causal=causal, seq_lens_q=seq_lens_q, seq_lens_kv=seq_lens_kv,
        training=training, out=out, out_dtype=out_dtype,
        max_candidates=None if tune else 1)), tune=tune, stream=as_stream(stream, dev))
    return plan.execute(q, k, v, descale_q=descale_q, descale_k=descale_k,
                        descale_v=descale_v, descale_s=descale_s, scale_s=scale_s,
                        scale_o=scale_o, out=out, stats=stats, amax_s=amax_s, amax_o=amax_o,
                        seq_lens_q=seq_lens_q, seq_lens_kv=seq_lens_kv, stream=stream)


def sdpa_fp8_backward(q, k, v, o, do, stats, *, descale_q, descale_k, descale_v, descale_o,
                      descale_do, descale_s, descale_dp, scale_s, scale_dq, scale_dk,
                      scale_dv, scale_dp, scale=None, causal=False, seq_lens_q=None,
                      seq_lens_kv=None, out=None, out_dtype=None, amax_dq=None, amax_dk=None,
                      amax_dv=None, amax_dp=None, stream=None) -> SdpaFp8Gradients:
    """The gradients of :func:`sdpa_fp8`, in fp8, with their amax values.

    ``dS = P * (dO @ v^T - rowsum(dO * o)) * scale`` in real units;
    ``dv = fp8(P8^T @ dO * descale_s * descale_do * scale_dv)``,
    ``dq = fp8(dS8 @ k * descale_dp * descale_k * scale_dq)``,
    ``dk = fp8(dS8^T @ q * descale_dp * descale_q * scale_dk)`` with ``dS8 = fp8(dS *
    scale_dp)`` (``do``'s type) and ``P8`` as in the forward.

    Parameters
    ----------
    q, k, v, o, stats : DeviceArray or CUDA array
        The forward's inputs, output and statistics (``sdpa_fp8(..., training=True)``).
    do : DeviceArray
        fp8 ``[b, h_q, s_q, d_v]``, the output's gradient (e4m3 or e5m2).
    descale_q, descale_k, descale_v, descale_o, descale_do : DeviceArray
        One float32 element each: the inputs' descales (``descale_o`` is ``1 / scale_o`` of
        the forward).
    descale_s, scale_s : DeviceArray
        Those of the forward (``P`` is rounded to fp8 again for ``dv``).
    descale_dp, scale_dp : DeviceArray
        The fp8 scale of the scores' gradient and its inverse.
    scale_dq, scale_dk, scale_dv : DeviceArray
        The gradients are written as ``real * scale``.
    scale, causal, seq_lens_q, seq_lens_kv
        Those of the forward.
    out : tuple of (DeviceArray or None), optional
        ``(dq, dk, dv)``; each None is allocated stream-ordered in its input's layout.
    out_dtype : dtype-like, optional
        The gradients' type when ``out`` gives none (default ``do``'s).
    amax_dq, amax_dk, amax_dv, amax_dp : DeviceArray, optional
        One float32 element each, written; allocated if None.
    stream : Stream, optional

    Returns
    -------
    SdpaFp8Gradients
        ``(dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp)``.
    """
    op = "sdpa_fp8_backward"
    dq, dk, dv = out3(op, out)
    q, k, v, o, do, dq, dk, dv, dev = _operands(
        op, (q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do"), (dq, "dq"), (dk, "dk"),
        (dv, "dv"), stream=stream, required=5)
    if type(stats) is not DeviceArray:
        stats = _operands(op, (stats, "stats"), stream=stream, required=1)[0]
    outs = (dq, dk, dv)
    given = [g.dtype for g in outs if g is not None]
    tune = _options.options().sdpa_autotune
    key = (SDPA_FP8_BACKWARD_KEY, dev.ordinal, q.dtype, q.shape, q.strides, k.shape,
           k.strides, v.shape, v.strides, o.dtype, o.strides, do.dtype, do.strides,
           _type_key(op, out_dtype) if not given else tuple(given),
           tuple(None if g is None else g.strides for g in outs),
           None if scale is None else float(scale), bool(causal),
           seq_lens_q is not None or seq_lens_kv is not None, tune, env(dev))
    scales = {"descale_q": descale_q, "descale_k": descale_k, "descale_v": descale_v,
              "descale_o": descale_o, "descale_do": descale_do, "descale_s": descale_s,
              "descale_dp": descale_dp, "scale_s": scale_s, "scale_dq": scale_dq,
              "scale_dk": scale_dk, "scale_dv": scale_dv, "scale_dp": scale_dp}
    plan = _front.planned(key, _planned_after_scales(op, dev, scales, lambda: SdpaFp8BackwardPlan(
        q, k, v, o, do, scale=scale, causal=causal, seq_lens_q=seq_lens_q,
        seq_lens_kv=seq_lens_kv, out=outs, out_dtype=out_dtype,
        max_candidates=None if tune else 1)), tune=tune, stream=as_stream(stream, dev))
    return plan.execute(q, k, v, o, do, stats, descale_q=descale_q, descale_k=descale_k,
                        descale_v=descale_v, descale_o=descale_o, descale_do=descale_do,
                        descale_s=descale_s, descale_dp=descale_dp, scale_s=scale_s,
                        scale_dq=scale_dq, scale_dk=scale_dk, scale_dv=scale_dv,
                        scale_dp=scale_dp, out=outs, amax_dq=amax_dq, amax_dk=amax_dk,
                        amax_dv=amax_dv, amax_dp=amax_dp, seq_lens_q=seq_lens_q,
                        seq_lens_kv=seq_lens_kv, stream=stream)
