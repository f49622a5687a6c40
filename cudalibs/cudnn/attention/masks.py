"""Attention variants: the causal diagonal's alignment, sliding windows, ALiBi, softcapping and
the bias gradient -- their checks, and their pieces of the composite graphs
(:mod:`cudalibs.cudnn.attention.lower` calls them).

What each means, for query row ``i`` and key column ``j``, with ``off`` the diagonal's offset
(0 top-left; ``s_kv - s_q`` bottom-right, per batch entry ``seq_lens_kv[n] - seq_lens_q[n]``
when sequence lengths are given):

- ``causal``: key ``j`` is visible to query ``i`` iff ``j <= i + off`` (``causal=True`` or
  ``"top_left"``: ``off = 0``; ``"bottom_right"``: the last query sees every key -- decode and
  chunked prefill);
- ``window=(left, right)``: iff ``i + off - left <= j <= i + off + right``; a side that is
  None is unbounded, and with ``causal`` the right side is the causal bound (``right`` None
  or 0).  A window without ``causal`` is aligned top-left;
- ALiBi: ``slope[h] * (j - i)`` added to head ``h``'s scores, the slopes of Press et al.
  (:func:`alibi_slopes`) or the caller's float32 ``[h_q]`` device array;
- softcapping: ``scores -> c * tanh(scores / c)``, right after the scale, before any bias,
  ALiBi or mask; the backward multiplies by the derivative ``1 - tanh(scores / c)**2``;
- the bias gradient: the gradient of the softmax's input (the scores after every additive
  term), summed to the bias's shape.

The scores of the composite graphs are, in order: ``Q K^T * scale``, softcap, ``+ bias``,
``+ ALiBi``, the padding mask, the band (its right side, then its left side).  The pieces are
the ones cuDNN's frontend builds for its SDPA nodes, operation for operation (data and
compute types included), since the fused engines recognise those shapes: the band is a
comparison of generated row and column indices (shifted by the bounds and, bottom-right, by
``s_kv - s_q`` as by-value int32 scalars or the sequence-length tensors) and a select of
``-inf``; ALiBi multiplies the index difference by a ``[1, h_q, 1, 1]`` float32 tensor;
softcap is ``div``, ``tanh``, ``mul`` (and ``tanh_bwd`` back); the bias gradient is a sum
reduction of ``dS`` before the softcap's derivative and the scale.

What cuDNN 9's fused engines take (its frontend's support checks, before any library call
here; :func:`check` raises :class:`~cudalibs.errors.CudaLibsError` naming the limit):

- a bottom-right diagonal: no bias, no ALiBi, no dropout; ``s_q <= s_kv`` unless sequence
  lengths are given;
- a window's left side: ``s_q <= s_kv`` unless sequence lengths are given;
- ALiBi: only with a right bound of 0 (a top-left causal mask, or ``window=(left, 0)``);
- the bias gradient: for a bias of ``[1, h_q, s_q, s_kv]`` or ``[b, h_q, s_q, s_kv]``, and
  only from the backward without the float32 ``dQ`` accumulator (lowering ``"composite_dp"``,
  which keeps ``dP`` in a workspace of ``b * h_q * s_q * s_kv`` half-precision values): the
  form cuDNN's frontend always builds for it.  cuDNN 9.19's engines also take the graph with
  the accumulator, and then leave the bias gradient unwritten (measured on an H100), so that
  lowering offers no candidate for it (:func:`accumulator_misses`); and not beside a
  softcap, where the one engine that takes the graph writes a bias gradient 0.9 (relative)
  away from the reference on cuDNN 9.19 (measured on an H100; dq, dk, dv are right);
- cuDNN's single SDPA operation (the ``"unified"`` lowering) expresses none of them
  (:func:`unified_misses`).

Whether an engine fuses a softcapped graph is for the heuristics to say: a problem none takes
raises the plan's "no engine" error, which names the problem and its variants.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ...errors import CudaLibsError
from .. import backend as _g

__all__ = ["alibi_slopes", "causal_of", "window_of", "softcap_of", "alibi_of", "check",
           "variant_spec", "key", "VariantKey", "describe", "unified_misses", "accumulator_misses",
           "operands", "softcap", "alibi", "band", "score_backward", "DIAGONALS"]

#: The alignments of the causal diagonal ``causal=`` names (``True`` is ``"top_left"``).
DIAGONALS = ("top_left", "bottom_right")

_I32 = np.dtype(np.int32)
_F32 = np.dtype(np.float32)
_BOOL = np.dtype(np.bool_)


# -- the arguments -------------------------------------------------------------------------------
def alibi_slopes(heads: int) -> np.ndarray:
    """The ALiBi slopes of Press et al. for ``heads`` heads, float32 ``[heads]``.

    With ``n`` the largest power of two not above ``heads``, head ``h < n`` gets
    ``2 ** (-8 (h + 1) / n)`` and the others the odd terms of the sequence for ``2 n`` heads,
    ``2 ** (-4 (2 (h - n) + 1) / n)`` (what cuDNN's frontend and the paper's code use).

    Parameters
    ----------
    heads : int
        The number of query heads (at least 1).

    Returns
    -------
    numpy.ndarray
        float32, one slope per head.
    """
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads < 1:
        raise ValueError(f"alibi_slopes: heads must be a positive int, got {heads!r}")
    heads = int(heads)
    n = 1 << (heads.bit_length() - 1)
    h = np.arange(heads, dtype=np.float64)
    exponent = np.where(h < n, -8.0 * (h + 1.0) / n, -4.0 * (2.0 * (h - n) + 1.0) / n)
    return np.exp2(exponent).astype(np.float32)


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def causal_of(op: str, causal) -> tuple[bool, bool]:
    """``(causal, bottom_right)`` of a ``causal=`` argument: False, True, ``"top_left"`` or
    ``"bottom_right"``."""
    if causal is None or causal is False or causal is np.False_:
        return False, False
    if causal is True or causal is np.True_ or causal == "top_left":
        return True, False
    if causal == "bottom_right":
        return True, True
    raise ValueError(f"{op}: causal must be False, True, 'top_left' or 'bottom_right' (the "
                     f"diagonal's alignment), not {causal!r}")


def window_of(op: str, window, causal: bool):
    """A ``window=`` argument as ``(left, right)`` with None for an unbounded side (None for no
    window); with ``causal`` the right side is the causal bound, so ``right`` is None."""
    if window is None:
        return None
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise TypeError(f"{op}: window must be a (left, right) pair of ints >= 0 or None, "
                        f"not {window!r}")
    left, right = window
    for name, x in (("left", left), ("right", right)):
        if x is not None and (not _is_int(x) or x < 0):
            raise ValueError(f"{op}: the window's {name} side must be an int >= 0 or None "
                             f"(unbounded), got {x!r}")
    if causal and right not in (None, 0):
        raise ValueError(f"{op}: causal attention sees no key right of the diagonal; give "
                         f"window=({left}, None) (or 0), not a right side of {right}")
    left = None if left is None else int(left)
    right = None if (right is None or causal) else int(right)
    return None if left is None and right is None else (left, right)


def softcap_of(op: str, softcap) -> float:
    """The softcap ``c`` as a float (0.0 for None: no softcapping)."""
    if softcap is None:
        return 0.0
    if isinstance(softcap, (bool, np.bool_)) or not isinstance(softcap, (int, float,
                                                                          np.integer,
                                                                          np.floating)):
        raise TypeError(f"{op}: softcap must be a positive number (or None), not {softcap!r}")
    c = float(softcap)
    if not (c > 0.0 and math.isfinite(c)):
        raise ValueError(f"{op}: softcap must be positive and finite (None turns it off), "
                         f"got {softcap!r}")
    return c


def alibi_of(op: str, alibi) -> bool:
    if isinstance(alibi, (bool, np.bool_)):
        return bool(alibi)
    raise TypeError(f"{op}: alibi must be True or False (give your own slopes as "
                    f"alibi_slopes=, a float32 device array of h_q values), not "
                    f"{type(alibi).__name__}")


def _right(spec):
    """The band's right bound (None: unbounded)."""
    return 0 if spec.causal else (None if spec.window is None else spec.window[1])


def _left(spec):
    return None if spec.window is None else spec.window[0]


def check(op: str, spec) -> None:
    """Refuse, with the limit named, a combination of variants cuDNN's fused engines do not
    take (see the module docstring); the problem's shapes are ``spec``'s."""
    def no(why):
        raise CudaLibsError(f"{op}: cuDNN's fused attention {why}")

    if spec.bottom_right:
        bad = [n for n, on in (("a bias", spec.bias is not None), ("ALiBi", spec.alibi),
                               ("dropout", spec.dropout > 0.0)) if on]
        if bad:
            no(f"takes a bottom-right causal diagonal without {' or '.join(bad)}; use "
               "causal=True (top-left) or drop them")
        if not spec.padding and spec.s_q > spec.s_kv:
            no(f"aligns queries to the end of the keys only with s_q <= s_kv (got s_q "
               f"{spec.s_q}, s_kv {spec.s_kv}) unless sequence lengths are given")
    if _left(spec) is not None and not spec.padding and spec.s_q > spec.s_kv:
        no(f"takes a sliding window only with s_q <= s_kv (got s_q {spec.s_q}, s_kv "
           f"{spec.s_kv}) unless sequence lengths are given")
    if spec.alibi and _right(spec) != 0:
        no("adds ALiBi only under a causal mask (right bound 0): give causal=True or "
           "window=(left, 0)")
    if spec.dbias is not None:
        shape = spec.bias[0]
        if spec.softcap:
            # Measured on an H100 with cuDNN 9.19: the one engine that takes this graph writes
            # a bias gradient 0.9 (relative) away from the float64 reference, while dq, dk and
            # dv agree to 5e-4; without the softcap the same graph's dbias agrees to 5e-4.
            no("backward writes a wrong bias gradient beside a softcap (measured on cuDNN "
               "9.19): ask for dbias without softcap, or softcap without dbias")
        if shape[1] != spec.h_q:
            no(f"backward writes the bias gradient only for a bias of [1, {spec.h_q}, "
               f"{spec.s_q}, {spec.s_kv}] or [{spec.b}, {spec.h_q}, {spec.s_q}, {spec.s_kv}] "
               f"(one per query head), not {list(shape)}")


def variant_spec(op: str, spec, *, causal, window, alibi, softcap, dbias=None):
    """``spec`` with the variants of a plan's arguments set, each checked, and the
    combination checked (:func:`check`); ``dbias`` is the bias gradient's element strides
    (None: the backward writes none)."""
    is_causal, bottom_right = causal_of(op, causal)
    out = spec._replace(causal=is_causal, bottom_right=bottom_right,
                        window=window_of(op, window, is_causal), alibi=alibi_of(op, alibi),
                        softcap=softcap_of(op, softcap), dbias=dbias)
    check(op, out)
    return out


class VariantKey(NamedTuple):
    """The variants of a one-shot call, normalised: its cache-key fields."""

    diagonal: str               # "top_left" or "bottom_right"
    window: tuple | None        # (left, right), as window_of gives it
    alibi: bool                 # ALiBi, with the paper's slopes or the call's
    softcap: float              # 0.0: none


_PLAIN_KEY = VariantKey("top_left", None, False, 0.0)


def key(op: str, causal, window, alibi, alibi_slopes, softcap) -> VariantKey:
    """The one-shots' cache-key fields of the variants (each argument checked)."""
    if window is None and alibi is False and alibi_slopes is None and softcap is None and \
            (causal is False or causal is True):
        return _PLAIN_KEY
    is_causal, bottom_right = causal_of(op, causal)
    return VariantKey(DIAGONALS[bottom_right], window_of(op, window, is_causal),
                      alibi_of(op, alibi) or alibi_slopes is not None,
                      softcap_of(op, softcap))


def describe(spec) -> list:
    """The variants of ``spec`` as short texts, for the problem's description."""
    out = []
    if spec.bottom_right:
        out.append("bottom right")
    if spec.window is not None:
        left, right = ("-" if x is None else x for x in spec.window)
        out.append(f"window ({left}, {right})")
    if spec.alibi:
        out.append("alibi")
    if spec.softcap:
        out.append(f"softcap {spec.softcap:g}")
    if spec.dbias is not None:
        out.append("dbias")
    return out


def unified_misses(spec) -> list:
    """The variants of ``spec`` cuDNN's single SDPA operation cannot express (its
    descriptors have no attribute for any of them)."""
    return [n for n, on in (("bottom-right diagonal", spec.bottom_right),
                            ("sliding window", spec.window is not None),
                            ("ALiBi", spec.alibi), ("softcap", bool(spec.softcap)),
                            ("bias gradient", spec.dbias is not None)) if on]


def accumulator_misses(spec) -> str | None:
    """Why the composite backward with the float32 ``dQ`` accumulator cannot serve ``spec``
    (None when it can): the bias gradient comes only from the form without it."""
    if spec.dbias is None:
        return None
    return ("cuDNN's fused backward writes the bias gradient only without the float32 dQ "
            "accumulator (lowering 'composite_dp', dP kept in the workspace); with it the "
            "engines leave dbias unwritten")


def operands(spec) -> list:
    """``[(slot, shape, element strides)]`` of the variants' operands: the ALiBi slopes and
    the bias gradient."""
    out = []
    if spec.alibi:
        out.append(("alibi_slopes", (1, spec.h_q, 1, 1), (spec.h_q, 1, 1, 1)))
    if spec.dbias is not None:
        out.append(("dbias", spec.bias[0], spec.dbias))
    return out


# -- the graph pieces (B is lower's graph builder) ------------------------------------------------
def _dims(spec) -> tuple:
    return (spec.b, spec.h_q, spec.s_q, spec.s_kv)


def _neg_inf(B):
    """The composite graphs' masking value (``lower.NEG_INF``), one by-value scalar."""
    return B.value("neg_inf", float("-inf"))


def softcap(B, x):
    """``x -> c * tanh(x / c)`` when the problem softcaps (``x`` unchanged otherwise); the
    tensor ``x / c`` is kept as ``B.softcap_in`` for the derivative."""
    s = B.spec
    if not s.softcap:
        return x
    dims = _dims(s)
    c = B.value("softcap", s.softcap)
    u = B.pw("div", x, c, dims=dims)
    B.softcap_in = u
    return B.pw("mul", B.pw("tanh", u, dims=dims), c, dims=dims)


def alibi(B, x):
    """``x + slopes[h] * (j - i)`` when the problem has ALiBi (``x`` unchanged otherwise)."""
    s = B.spec
    if not s.alibi:
        return x
    dims = _dims(s)
    row = B.pw("gen_index", x, dims=dims, compute=_I32, out_dtype=_I32, axis=2)
    col = B.pw("gen_index", x, dims=dims, compute=_I32, out_dtype=_I32, axis=3)
    dist = B.pw("sub", col, row, dims=dims, compute=_I32, out_dtype=_I32)
    slopes = B.io("alibi_slopes", _F32, (1, s.h_q, 1, 1), (s.h_q, 1, 1, 1))
    return B.pw("add", x, B.pw("mul", dist, slopes, dims=dims), dims=dims)


def band(B, x, seq_q, seq_kv):
    """The causal mask and the window's sides (``x`` unchanged when there are none): the
    right side keeps ``row [+ s_kv - s_q] [+ right] >= col``, the left side
    ``col + left + 1 [- s_kv + s_q] > row`` (``seq_q``/``seq_kv`` the sequence-length tensors,
    or None)."""
    s = B.spec
    right, left = _right(s), _left(s)
    if right is None and left is None:
        return x
    if right == 0 and left is None and not s.bottom_right:
        return B.causal(x)          # the plain causal mask, as every lowering builds it
    dims = _dims(s)
    if right is not None:
        row = B.pw("gen_index", x, dims=dims, out_dtype=_I32, axis=2)
        col = B.pw("gen_index", x, dims=dims, out_dtype=_I32, axis=3)
        if s.bottom_right:
            kv = seq_kv if seq_kv is not None else B.value("band_s_kv", s.s_kv, _I32)
            q = seq_q if seq_q is not None else B.value("band_s_q", s.s_q, _I32)
            row = B.pw("add", row, kv, dims=dims, compute=_I32, out_dtype=_I32)
            row = B.pw("sub", row, q, dims=dims, compute=_I32, out_dtype=_I32)
        if right:
            row = B.pw("add", row, B.value("window_right", right, _I32), dims=dims,
                       compute=_I32, out_dtype=_I32)
        keep = B.pw("cmp_ge", row, col, dims=dims, compute=_BOOL, out_dtype=_BOOL)
        x = B.pw("binary_select", x, _neg_inf(B), keep, dims=dims)
    if left is not None:
        # the frontend's left bound is a window length: keys j > i - length stay
        length = left + 1
        row = B.pw("gen_index", x, dims=dims, out_dtype=_I32, axis=2)
        col = B.pw("gen_index", x, dims=dims, out_dtype=_I32, axis=3)
        if not s.bottom_right:
            col = B.pw("add", col, B.value("window_left", float(length)), dims=dims)
        elif seq_q is None:
            col = B.pw("add", col, B.value("window_left", float(length - s.s_kv + s.s_q)),
                       dims=dims)
        else:
            col = B.pw("add", col, B.value("window_left", length, _I32), dims=dims,
                       compute=_I32, out_dtype=_I32)
            col = B.pw("sub", col, seq_kv, dims=dims, compute=_I32, out_dtype=_I32)
            col = B.pw("add", col, seq_q, dims=dims, compute=_I32, out_dtype=_I32)
        keep = B.pw("cmp_gt", col, row, dims=dims, compute=_BOOL, out_dtype=_BOOL)
        x = B.pw("binary_select", x, _neg_inf(B), keep, dims=dims)
    return x


def score_backward(B, ds):
    """From ``dS`` (the gradient of the softmax's input, before the scale): the bias gradient
    written to ``dbias`` and the softcap's derivative applied, when the problem has them."""
    s = B.spec
    dims = _dims(s)
    if s.dbias is not None:
        shape, _ = s.bias
        B.reduce("add", ds, out=B.io("dbias", s.dtype, shape, s.dbias))
    if s.softcap:
        c = B.value("softcap", s.softcap)
        dy = B.pw("mul", ds, c, dims=dims)
        dx = B.virt(dims)
        B.ops.append(_g.pointwise_backward_operation(_g.pointwise("tanh_bwd"), B.softcap_in,
                                                     dy, dx))
        ds = B.pw("div", dx, c, dims=dims)
    return ds
