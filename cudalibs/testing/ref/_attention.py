"""Scaled dot-product attention references: forward with every mask kind, the softmax
statistics, and the backward, in float64.

Operands are logical ``[b, h, s, d]`` whatever their memory layout: ``q`` is
``[b, h_q, s_q, d]``, ``k`` ``[b, h_kv, s_kv, d]``, ``v`` ``[b, h_kv, s_kv, d_v]``, with
``h_kv`` dividing ``h_q`` (grouped-query attention: query head ``i`` reads key/value head
``i // (h_q // h_kv)``, as ``torch.repeat_interleave`` expands them).  The masks combine:

- ``causal``: ``True`` / ``"top_left"``: query ``i`` sees keys ``j <= i``;
  ``"bottom_right"``: keys ``j <= i + off`` with ``off = s_kv - s_q``, per batch entry
  ``seq_lens_kv[n] - seq_lens_q[n]`` when sequence lengths are given;
- ``window=(left, right)``: keys ``i + off - left <= j <= i + off + right`` (``off`` as for
  ``causal``, 0 without a bottom-right ``causal``); a side that is None is open, and with
  ``causal`` the right side is the causal bound;
- ``seq_lens_q`` / ``seq_lens_kv``: per batch entry, only the first ``seq_lens_q[n]`` queries
  and ``seq_lens_kv[n]`` keys exist (padding);
- ``bias``: added to the scaled scores, broadcast to ``[b, h_q, s_q, s_kv]``;
- ``alibi`` / ``alibi_slopes``: ``slope[h] * (j - i)`` added to head ``h``'s scores, with the
  slopes of Press et al. or the given ones;
- ``softcap``: the scaled scores become ``softcap * tanh(scores / softcap)`` before the bias,
  ALiBi and the masks;
- ``dropout_mask``: the keep-mask (1 keeps, 0 drops) applied to the probabilities, the kept
  ones scaled by ``1 / (1 - dropout)``; only its entries of visible keys are read (a library
  that dumps its mask may leave the others unwritten).

A query row with no visible key (beyond its sequence length, or all its keys padded) has
output 0, statistic ``-inf`` and gradients 0: libraries leave such rows unspecified, so
compare the rows that exist (:func:`valid_rows`).

The fp8 references (:func:`sdpa_fp8_forward`, :func:`sdpa_fp8_backward`) follow cuDNN's fp8
attention graph step by step: dequantised inputs, the fp8 roundings of ``P`` and ``dS`` with
their scales (:func:`quantize_fp8`), the amax of each scaled tensor, the outputs rounded with
theirs.

Paged caches and packed batches are the dense problem in other forms: :func:`to_pages` /
:func:`from_pages` and :func:`pack_sequences` / :func:`unpack_sequences` convert, and the
dense references above serve them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["sdpa_forward", "sdpa_backward", "sdpa_mask", "valid_rows", "sdpa_fp8_forward",
           "sdpa_fp8_backward", "quantize_fp8", "Fp8Attention", "Fp8Gradients", "to_pages",
           "from_pages", "pack_sequences", "unpack_sequences"]


def _f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _shapes(q, k, v):
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"q, k, v must be 4-D [b, h, s, d], got {q.shape}, {k.shape}, {v.shape}")
    b, h_q, s_q, d = q.shape
    bk, h_kv, s_kv, dk = k.shape
    if bk != b or dk != d or v.shape[:3] != k.shape[:3] or v.shape[0] != b:
        raise ValueError(f"mismatched shapes q {q.shape}, k {k.shape}, v {v.shape}")
    if h_q % h_kv:
        raise ValueError(f"h_kv = {h_kv} does not divide h_q = {h_q}")
    return b, h_q, h_kv, s_q, s_kv


def _expand(x, h_q):
    """Key/value heads repeated for the query heads they serve."""
    return np.repeat(x, h_q // x.shape[1], axis=1)


#: ``causal`` argument -> ``(causal, bottom_right)``.
_DIAGONALS = {None: (False, False), False: (False, False), True: (True, False),
              "top_left": (True, False), "bottom_right": (True, True)}


def _diagonal(causal):
    """``(causal, bottom_right)`` of a ``causal`` argument."""
    try:
        return _DIAGONALS[causal]
    except (KeyError, TypeError):
        raise ValueError(f"causal must be False, True, 'top_left' or 'bottom_right', not "
                         f"{causal!r}") from None


def _bounds(causal, window):
    """``(bottom_right, left, right)``: the band's bounds (None where open)."""
    is_causal, bottom_right = _diagonal(causal)
    left = right = None
    if window is not None:
        left, right = window
        for x in (left, right):
            if x is not None and (int(x) != x or x < 0):
                raise ValueError(f"window sides must be ints >= 0 or None, got {window!r}")
    if is_causal:
        if right not in (None, 0):
            raise ValueError(f"a causal window's right side must be None or 0, got {right}")
        right = 0
    return bottom_right, left, right


def sdpa_mask(shape, *, causal=False, seq_lens_q=None, seq_lens_kv=None,
              window=None) -> np.ndarray:
    """The boolean ``[b, 1, s_q, s_kv]`` visibility of key ``j`` to query ``i``.

    Parameters
    ----------
    shape : tuple
        ``(b, s_q, s_kv)``.
    causal : bool or str
        ``True`` / ``"top_left"``: ``j <= i``; ``"bottom_right"``: ``j <= i + s_kv - s_q``
        (per batch entry with sequence lengths).
    seq_lens_q, seq_lens_kv : sequence of int, optional
        Per batch entry, the queries and keys that exist.
    window : (int or None, int or None), optional
        ``(left, right)``: only keys ``i + off - left <= j <= i + off + right`` (``off`` the
        bottom-right offset, else 0).
    """
    b, s_q, s_kv = shape
    bottom_right, left, right = _bounds(causal, window)
    i = np.arange(s_q)[None, :, None]
    j = np.arange(s_kv)[None, None, :]
    lq = np.full(b, s_q) if seq_lens_q is None else np.asarray(seq_lens_q).reshape(b)
    lk = np.full(b, s_kv) if seq_lens_kv is None else np.asarray(seq_lens_kv).reshape(b)
    off = (lk - lq)[:, None, None] if bottom_right else np.zeros((b, 1, 1), np.int64)
    rel = j - i - off                       # [b, s_q, s_kv]: key offset from the diagonal
    vis = np.ones((b, s_q, s_kv), bool)
    if right is not None:
        vis &= rel <= right
    if left is not None:
        vis &= rel >= -left
    if seq_lens_q is not None or seq_lens_kv is not None:
        vis &= (i < lq[:, None, None]) & (j < lk[:, None, None])
    return vis[:, None]


def valid_rows(shape, *, causal=False, seq_lens_q=None, seq_lens_kv=None,
               window=None) -> np.ndarray:
    """Boolean ``[b, 1, s_q, 1]``: the query rows that see at least one key."""
    return sdpa_mask(shape, causal=causal, seq_lens_q=seq_lens_q, seq_lens_kv=seq_lens_kv,
                     window=window).any(axis=3, keepdims=True)


def _alibi_slopes(heads: int) -> np.ndarray:
    """The ALiBi slopes of Press et al.: the geometric sequence ``2 ** (-8 / n)`` to the
    powers ``1..n`` for the largest power of two ``n <= heads``, then the odd powers of
    ``2 ** (-4 / n)`` (the sequence for ``2 n`` heads, less the terms already taken)."""
    n = 2 ** int(np.floor(np.log2(heads)))
    slopes = (2.0 ** (-8.0 / n)) ** np.arange(1, n + 1)
    extra = (2.0 ** (-4.0 / n)) ** np.arange(1, 2 * (heads - n), 2)
    return np.concatenate([slopes, extra])


def _alibi(alibi, alibi_slopes, h_q):
    """The slopes in use, float64 ``[h_q]`` (None: no ALiBi)."""
    if alibi_slopes is not None:
        slopes = _f64(alibi_slopes).reshape(-1)
        if slopes.size != h_q:
            raise ValueError(f"alibi_slopes must hold {h_q} values, got {slopes.size}")
        return slopes
    return _alibi_slopes(h_q) if alibi else None


def _probabilities(q, k, scale, bias, vis, *, softcap=None, slopes=None):
    """``(P, stats, visible rows)``: softmax of the masked scaled scores (softcapped, with the
    bias and the ALiBi ``slopes`` added), and ``max + log sum`` per row."""
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if bias is not None:
        s = s + _f64(bias)
    if slopes is not None:
        dist = np.arange(s.shape[3])[None, :] - np.arange(s.shape[2])[:, None]
        s = s + slopes[None, :, None, None] * dist[None, None]
    s = np.where(vis, s, -np.inf)
    rows = vis.any(axis=3, keepdims=True)
    m = np.where(rows, s.max(axis=3, keepdims=True), 0.0)
    e = np.where(vis, np.exp(s - m), 0.0)
    total = e.sum(axis=3, keepdims=True)
    p = np.where(rows, e / np.where(rows, total, 1.0), 0.0)
    with np.errstate(divide="ignore"):
        stats = np.where(rows, m + np.log(np.where(rows, total, 1.0)), -np.inf)
    return p, stats, rows


def _prepare(q, k, v, scale, causal, seq_lens_q, seq_lens_kv, dropout_mask, dropout,
             window=None):
    q, k, v = _f64(q), _f64(k), _f64(v)
    b, h_q, h_kv, s_q, s_kv = _shapes(q, k, v)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[3])
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    keep = None
    if dropout and dropout_mask is None:
        raise ValueError("dropout > 0 needs the dropout_mask that was applied")
    vis = sdpa_mask((b, s_q, s_kv), causal=causal, seq_lens_q=seq_lens_q,
                    seq_lens_kv=seq_lens_kv, window=window)
    if dropout_mask is not None:
        # entries of hidden keys are never read: a dumped mask may hold anything there
        mask = np.broadcast_to(_f64(dropout_mask), (b, h_q, s_q, s_kv))
        keep = np.where(vis, mask, 0.0) / (1.0 - dropout)
    return q, _expand(k, h_q), _expand(v, h_q), float(scale), keep, vis, h_kv


def sdpa_forward(q, k, v, *, scale=None, causal=False, bias=None, seq_lens_q=None,
                 seq_lens_kv=None, dropout_mask=None, dropout=0.0, window=None, alibi=False,
                 alibi_slopes=None, softcap=None):
    """``softmax(q k^T * scale + bias, masked) [* dropout] @ v`` and its statistics.

    Parameters
    ----------
    q, k, v : array-like
        ``[b, h_q, s_q, d]``, ``[b, h_kv, s_kv, d]``, ``[b, h_kv, s_kv, d_v]``.
    scale : float, optional
        Default ``1 / sqrt(d)``.
    causal, seq_lens_q, seq_lens_kv, window
        The masks (see the module docstring).
    bias : array-like, optional
        Broadcast to ``[b, h_q, s_q, s_kv]`` and added to the scaled scores.
    dropout_mask : array-like, optional
        The keep-mask ``[b, h_q, s_q, s_kv]`` (0 or 1) the library applied; its entries of
        keys a query does not see are not read.
    dropout : float
        The drop probability (the kept probabilities are scaled by ``1 / (1 - dropout)``).
    alibi : bool
        Add ALiBi with the slopes of Press et al.
    alibi_slopes : array-like, optional
        ``h_q`` slopes of one's own (ALiBi with them).
    softcap : float, optional
        Softcap the scaled scores: ``softcap * tanh(scores / softcap)``.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``o`` ``[b, h_q, s_q, d_v]`` and ``stats = max + log(sum(exp))`` per row,
        ``[b, h_q, s_q, 1]``, both float64.
    """
    q, k, v, scale, keep, vis, _ = _prepare(q, k, v, scale, causal, seq_lens_q, seq_lens_kv,
                                            dropout_mask, dropout, window)
    p, stats, _ = _probabilities(q, k, scale, bias, vis, softcap=softcap,
                                 slopes=_alibi(alibi, alibi_slopes, q.shape[1]))
    if keep is not None:
        p = p * keep
    return np.einsum("bhij,bhjd->bhid", p, v), stats


def sdpa_backward(q, k, v, do, *, scale=None, causal=False, bias=None, seq_lens_q=None,
                  seq_lens_kv=None, dropout_mask=None, dropout=0.0, window=None, alibi=False,
                  alibi_slopes=None, softcap=None, want_dbias=False):
    """The gradients ``(dq, dk, dv)`` of :func:`sdpa_forward`'s output against ``do``.

    The probabilities are recomputed from the inputs; with grouped-query attention the key
    and value gradients sum over the query heads that share a key/value head.  The same
    options as :func:`sdpa_forward`; with ``want_dbias`` also the gradient of ``bias``: the
    gradient of the softmax's input summed over the dimensions the bias broadcasts.

    Returns
    -------
    tuple of numpy.ndarray
        float64 ``dq`` ``[b, h_q, s_q, d]``, ``dk`` ``[b, h_kv, s_kv, d]``,
        ``dv`` ``[b, h_kv, s_kv, d_v]`` (and ``dbias`` of the bias's shape with
        ``want_dbias``).
    """
    if want_dbias and bias is None:
        raise ValueError("want_dbias needs the bias")
    q, ke, ve, scale, keep, vis, h_kv = _prepare(q, k, v, scale, causal, seq_lens_q,
                                                 seq_lens_kv, dropout_mask, dropout, window)
    do = _f64(do)
    p, _, _ = _probabilities(q, ke, scale, bias, vis, softcap=softcap,
                             slopes=_alibi(alibi, alibi_slopes, q.shape[1]))
    pd = p * keep if keep is not None else p
    dv = np.einsum("bhij,bhid->bhjd", pd, do)
    dpd = np.einsum("bhid,bhjd->bhij", do, ve)
    dp = dpd * keep if keep is not None else dpd
    ds = p * (dp - (dp * p).sum(axis=3, keepdims=True))     # d loss / d softmax input
    grads = ()
    if want_dbias:
        grads = (_unbroadcast(ds, np.shape(bias)),)
    if softcap:
        t = np.tanh(np.einsum("bhid,bhjd->bhij", q, ke) * scale / softcap)
        ds = ds * (1.0 - t * t)
    ds = ds * scale
    dq = np.einsum("bhij,bhjd->bhid", ds, ke)
    dk = np.einsum("bhij,bhid->bhjd", ds, q)
    return (dq, _group_sum(dk, h_kv), _group_sum(dv, h_kv)) + grads


def _unbroadcast(x, shape):
    """``x`` summed down to ``shape`` (the inverse of broadcasting ``shape`` to ``x``'s)."""
    shape = tuple(shape)
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead else x
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def _group_sum(x, h_kv):
    """A key/value gradient per query head, summed over the query heads of each group."""
    b, h_q = x.shape[:2]
    return x.reshape(b, h_kv, h_q // h_kv, *x.shape[2:]).sum(axis=2)


# -- fp8 --------------------------------------------------------------------------------------------
# The fp8 attention of cuDNN's graph (cudalibs.cudnn.attention.sdpa_fp8), step by step: operands
# are fp8 values with float32 per-tensor scales; every fp8 matmul runs on the stored values and
# multiplies the float product by the descales of its operands; what the graph writes or passes
# on in fp8 is multiplied by its scale and rounded to the nearest fp8 value (ties to even),
# saturating at the type's largest finite value.  The amax outputs are the largest magnitudes
# of the real-unit (descaled, not yet scaled) values.

class Fp8Attention(NamedTuple):
    """:func:`sdpa_fp8_forward`'s result.

    Attributes
    ----------
    o : numpy.ndarray
        The output in ``out_dtype`` (fp8 values: ``o_real * scale_o``, rounded).
    o_real : numpy.ndarray
        float64 ``P8 @ V`` in real units, before the output's scale and rounding.
    stats : numpy.ndarray
        float64 ``max + log(sum(exp))`` per row, ``[b, h_q, s_q, 1]``.
    amax_s, amax_o : float
        ``max |P|`` (the probabilities before their scale) and ``max |o_real|``.
    """

    o: np.ndarray
    o_real: np.ndarray
    stats: np.ndarray
    amax_s: float
    amax_o: float


class Fp8Gradients(NamedTuple):
    """:func:`sdpa_fp8_backward`'s result: the gradients in their fp8 (or half) type, the
    same in real units before their scale and rounding (float64), and the amax of each, of
    ``dS`` (``amax_dp``) too."""

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    dq_real: np.ndarray
    dk_real: np.ndarray
    dv_real: np.ndarray
    amax_dq: float
    amax_dk: float
    amax_dv: float
    amax_dp: float


def _fp8_dtype(dtype):
    import ml_dtypes

    dt = np.dtype(dtype)
    if dt not in (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2),
                  np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)):
        raise TypeError(f"the fp8 attention writes float8_e4m3fn, float8_e5m2 or a half type, "
                        f"not {dt}")
    return dt, float(ml_dtypes.finfo(dt).max)


def quantize_fp8(x, scale, dtype) -> np.ndarray:
    """``x * scale`` rounded to ``dtype`` (nearest, ties to even), saturated at its largest
    finite value (what a ``satfinite`` conversion does); NaN stays NaN.

    Parameters
    ----------
    x : array-like
    scale : float
    dtype : dtype-like
        ``float8_e4m3fn`` or ``float8_e5m2`` (or float16/bfloat16/float32).

    Returns
    -------
    numpy.ndarray
        Of ``dtype``.
    """
    dt, top = _fp8_dtype(dtype)
    y = _f64(x) * float(scale)
    return np.clip(y, -top, top).astype(dt)


def _fp8_values(x, descale) -> np.ndarray:
    """The real values of stored fp8 ``x`` (float64)."""
    return _f64(x) * float(np.asarray(descale, np.float64).reshape(-1)[0])


def _scalar(x) -> float:
    return float(np.asarray(x, np.float64).reshape(-1)[0])


def _io_type(x, given):
    if given is not None:
        return given
    dt = np.asarray(x).dtype
    return dt if dt.name.startswith("float8") else np.dtype(_fp8_dtype("float8_e4m3fn")[0])


def sdpa_fp8_forward(q, k, v, *, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o,
                     scale=None, causal=False, seq_lens_q=None, seq_lens_kv=None,
                     out_dtype=None, quantize_p=True) -> Fp8Attention:
    """The fp8 attention forward, as cuDNN's graph defines it.

    ``S = (q k^T) * scale * descale_q * descale_k`` (masked), ``P = softmax(S)``,
    ``amax_s = max |P|``, ``P8 = fp8(P * scale_s)`` (``q``'s type),
    ``o_real = (P8 @ v) * descale_s * descale_v``, ``amax_o = max |o_real|``,
    ``o = fp8(o_real * scale_o)``.

    Parameters
    ----------
    q, k, v : array-like
        The stored fp8 values (ml_dtypes float8 arrays, or numbers), ``[b, h, s, d]`` as for
        :func:`sdpa_forward`.
    descale_q, descale_k, descale_v, descale_s, scale_s, scale_o : float or array-like
        The per-tensor scales (one value each).
    scale, causal, seq_lens_q, seq_lens_kv
        As for :func:`sdpa_forward`.
    out_dtype : dtype-like, optional
        ``o``'s type (default: ``q``'s fp8 type).
    quantize_p : bool
        Round ``P * scale_s`` to fp8 as the graph does (False keeps it exact: the attention
        of the dequantised inputs, for a bound that counts that rounding as error).

    Returns
    -------
    Fp8Attention
    """
    p_type = _io_type(q, None)
    out_dtype = _io_type(q, out_dtype)
    qr, kr, vr = (_fp8_values(x, d) for x, d in ((q, descale_q), (k, descale_k),
                                                  (v, descale_v)))
    qr, ke, ve, scale, _, vis, _ = _prepare(qr, kr, vr, scale, causal, seq_lens_q, seq_lens_kv,
                                            None, 0.0)
    p, stats, _ = _probabilities(qr, ke, scale, None, vis)
    amax_s = float(np.abs(p).max())
    p8 = _f64(quantize_fp8(p, scale_s, p_type)) if quantize_p else p * _scalar(scale_s)
    o_real = np.einsum("bhij,bhjd->bhid", p8, ve) * _scalar(descale_s)
    return Fp8Attention(quantize_fp8(o_real, scale_o, out_dtype), o_real, stats, amax_s,
                        float(np.abs(o_real).max()))


def sdpa_fp8_backward(q, k, v, o, do, *, descale_q, descale_k, descale_v, descale_o,
                      descale_do, descale_s, descale_dp, scale_s, scale_dq, scale_dk, scale_dv,
                      scale_dp, scale=None, causal=False, seq_lens_q=None, seq_lens_kv=None,
                      stats=None, grad_dtype=None, quantize=True) -> Fp8Gradients:
    """The fp8 attention backward, as cuDNN's graph defines it.

    ``P`` recomputed: ``exp(S - stats)`` from the forward's statistics, as the graph does,
    or (``stats`` None) the exact softmax of :func:`sdpa_fp8_forward`;
    ``dv_real = fp8(P * scale_s)^T @ do * descale_s * descale_do`` (summed over each group's
    query heads); ``D = rowsum(do * o) * descale_do * descale_o`` (``o`` the forward's fp8
    output); ``dS = P * ((do @ v^T) * descale_do * descale_v - D) * scale``,
    ``amax_dp = max |dS|``, ``dS8 = fp8(dS * scale_dp)`` (``do``'s type);
    ``dq_real = dS8 @ k * descale_dp * descale_k``, ``dk_real = dS8^T @ q * descale_dp *
    descale_q``; each gradient ``fp8(dX_real * scale_dX)``.

    Parameters
    ----------
    q, k, v, o, do : array-like
        Stored fp8 values; ``o`` as the forward wrote it.
    descale_*, scale_* : float or array-like
        The per-tensor scales.
    scale, causal, seq_lens_q, seq_lens_kv
        As for :func:`sdpa_forward`.
    stats : array-like, optional
        ``[b, h_q, s_q, 1]``, the statistics the forward wrote (a library's own, to mirror
        its recomputation of ``P``; rows that see no key are ignored).
    grad_dtype : dtype-like, optional
        The gradients' type (default: ``do``'s).
    quantize : bool
        Round ``P`` and ``dS`` to fp8 as the graph does (False keeps them exact).

    Returns
    -------
    Fp8Gradients
    """
    p_type, ds_type = _io_type(q, None), _io_type(do, None)
    grad_dtype = _io_type(do, grad_dtype)
    dq_s = _scalar(descale_dp)
    qr, kr, vr = (_fp8_values(x, d) for x, d in ((q, descale_q), (k, descale_k),
                                                  (v, descale_v)))
    qr, ke, ve, scale, _, vis, h_kv = _prepare(qr, kr, vr, scale, causal, seq_lens_q,
                                               seq_lens_kv, None, 0.0)
    dor = _fp8_values(do, descale_do)
    p, _, rows = _probabilities(qr, ke, scale, None, vis)
    if stats is not None:
        st = np.where(rows, _f64(stats), 0.0)
        sc = np.einsum("bhid,bhjd->bhij", qr, ke) * scale
        p = np.where(vis, np.exp(np.where(vis, sc, 0.0) - st), 0.0)
    p8 = _f64(quantize_fp8(p, scale_s, p_type)) if quantize else p * _scalar(scale_s)
    dv = np.einsum("bhij,bhid->bhjd", p8, dor) * _scalar(descale_s)
    d_rows = (dor * _fp8_values(o, descale_o)).sum(axis=3, keepdims=True)
    ds = p * (np.einsum("bhid,bhjd->bhij", dor, ve) - d_rows) * scale
    amax_dp = float(np.abs(ds).max())
    ds8 = (_f64(quantize_fp8(ds, scale_dp, ds_type)) if quantize else ds * _scalar(scale_dp)) \
        * dq_s
    dq = np.einsum("bhij,bhjd->bhid", ds8, ke)
    dk = _group_sum(np.einsum("bhij,bhid->bhjd", ds8, qr), h_kv)
    dv = _group_sum(dv, h_kv)
    amax = [float(np.abs(x).max()) for x in (dq, dk, dv)]
    grads = [quantize_fp8(x, sc, grad_dtype) for x, sc in ((dq, scale_dq), (dk, scale_dk),
                                                           (dv, scale_dv))]
    return Fp8Gradients(*grads, dq, dk, dv, *amax, amax_dp)


# -- serving: paged caches and packed batches ----------------------------------------------------
# A paged cache and a packed batch hold the same logical [b, h, s, d] tensors as the dense
# problem; these helpers move between the forms, so that the dense references above are the
# references of both (cudalibs.cudnn.attention.serving).

def to_pages(x, page_size, *, num_pages=None, rng=None, fill=0.0):
    """A page pool and page table holding ``x`` (``[b, h, s, d]``), each sequence's pages at
    distinct pages of the pool in a random order.

    Parameters
    ----------
    x : array-like
        ``[b, h, s, d]``.
    page_size : int
        Tokens per page.
    num_pages : int, optional
        The pool's pages (default: exactly ``b * ceil(s / page_size)``); the pages no
        sequence uses, and the rows past ``s`` in a sequence's last page, hold ``fill``.
    rng : numpy.random.Generator, optional
        Draws the page order (default: a fixed seed).
    fill : float

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        The pool ``[num_pages, h, page_size, d]`` (``x``'s dtype) and the int32 page table
        ``[b, ceil(s / page_size)]``.
    """
    x = np.asarray(x)
    if x.ndim != 4:
        raise ValueError(f"x must be [b, h, s, d], got shape {x.shape}")
    b, h, s, d = x.shape
    per = -(-s // int(page_size))
    need = b * per
    num_pages = need if num_pages is None else int(num_pages)
    if num_pages < need:
        raise ValueError(f"{b} sequences of {per} pages need {need} pages, not {num_pages}")
    rng = np.random.default_rng(0) if rng is None else rng
    table = rng.permutation(num_pages)[:need].reshape(b, per).astype(np.int32)
    pool = np.full((num_pages, h, page_size, d), fill, dtype=x.dtype)
    padded = np.full((b, h, per * page_size, d), fill, dtype=x.dtype)
    padded[:, :, :s] = x
    pages = padded.reshape(b, h, per, page_size, d).transpose(0, 2, 1, 3, 4)
    pool[table.reshape(-1)] = pages.reshape(need, h, page_size, d)
    return pool, table


def from_pages(pool, page_table, s=None) -> np.ndarray:
    """The ``[b, h, s, d]`` tensor a paged cache holds: row ``j`` of sequence ``n`` is row
    ``j % page_size`` of page ``page_table[n, j // page_size]``.

    Parameters
    ----------
    pool : array-like
        ``[num_pages, h, page_size, d]``.
    page_table : array-like
        ``[b, pages]`` or ``[b, 1, pages, 1]`` page numbers.
    s : int, optional
        The rows to give (default: every row the table spans).
    """
    pool = np.asarray(pool)
    table = np.asarray(page_table)
    if table.ndim == 4:
        table = table[:, 0, :, 0]
    if pool.ndim != 4 or table.ndim != 2:
        raise ValueError(f"pool must be [num_pages, h, page_size, d] and page_table [b, pages], "
                         f"got {pool.shape} and {table.shape}")
    if table.size and (table.min() < 0 or table.max() >= pool.shape[0]):
        raise ValueError(f"page numbers must lie in [0, {pool.shape[0]})")
    b, per = table.shape
    _, h, size, d = pool.shape
    x = pool[table].transpose(0, 2, 1, 3, 4).reshape(b, h, per * size, d)
    return x if s is None else x[:, :, :s]


def pack_sequences(x, seq_lens, *, tokens=None, fill=0.0) -> np.ndarray:
    """The packed ``[tokens, h, d]`` form of ``x`` (``[b, h, s, d]``): the first
    ``seq_lens[n]`` rows of each sequence, one sequence after another.

    ``tokens`` (default: the lengths' sum) leaves spare rows at the end, holding ``fill``.
    """
    x = np.asarray(x)
    lens = [int(n) for n in np.asarray(seq_lens).reshape(-1)]
    if x.ndim != 4 or len(lens) != x.shape[0] or min(lens) < 0 or max(lens) > x.shape[2]:
        raise ValueError(f"x must be [b, h, s, d] and seq_lens b lengths in [0, s], got "
                         f"{x.shape} and {lens}")
    total = sum(lens)
    tokens = total if tokens is None else int(tokens)
    if tokens < total:
        raise ValueError(f"the sequences hold {total} tokens, more than {tokens}")
    out = np.full((tokens, x.shape[1], x.shape[3]), fill, dtype=x.dtype)
    at = 0
    for n, length in enumerate(lens):
        out[at:at + length] = x[n, :, :length].transpose(1, 0, 2)
        at += length
    return out


def unpack_sequences(x, seq_lens, s, *, fill=0.0) -> np.ndarray:
    """The padded ``[b, h, s, d]`` form of packed ``x`` (``[tokens, h, d]``): sequence ``n``
    is the ``seq_lens[n]`` rows after those of the sequences before it; the rows past its
    length hold ``fill``."""
    x = np.asarray(x)
    lens = [int(n) for n in np.asarray(seq_lens).reshape(-1)]
    if x.ndim != 3 or sum(lens) > x.shape[0] or max(lens, default=0) > s:
        raise ValueError(f"x must be [tokens, h, d] holding sequences of at most {s} of "
                         f"seq_lens {lens}, got shape {x.shape}")
    out = np.full((len(lens), x.shape[1], int(s), x.shape[2]), fill, dtype=x.dtype)
    at = 0
    for n, length in enumerate(lens):
        out[n, :, :length] = x[at:at + length].transpose(1, 0, 2)
        at += length
    return out
