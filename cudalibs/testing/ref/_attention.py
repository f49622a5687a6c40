"""Scaled dot-product attention references: forward with every mask kind, the softmax
statistics, and the backward, in float64.

Operands are logical ``[b, h, s, d]`` whatever their memory layout: ``q`` is
``[b, h_q, s_q, d]``, ``k`` ``[b, h_kv, s_kv, d]``, ``v`` ``[b, h_kv, s_kv, d_v]``, with
``h_kv`` dividing ``h_q`` (grouped-query attention: query head ``i`` reads key/value head
``i // (h_q // h_kv)``, as ``torch.repeat_interleave`` expands them).  The masks combine:

- ``causal``: top-left aligned, query ``i`` sees keys ``j <= i``;
- ``seq_lens_q`` / ``seq_lens_kv``: per batch entry, only the first ``seq_lens_q[n]`` queries
  and ``seq_lens_kv[n]`` keys exist (padding);
- ``bias``: added to the scaled scores, broadcast to ``[b, h_q, s_q, s_kv]``;
- ``dropout_mask``: the keep-mask (1 keeps, 0 drops) applied to the probabilities, the kept
  ones scaled by ``1 / (1 - dropout)``.

A query row with no visible key (beyond its sequence length, or all its keys padded) has
output 0, statistic ``-inf`` and gradients 0: libraries leave such rows unspecified, so
compare the rows that exist (:func:`valid_rows`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["sdpa_forward", "sdpa_backward", "sdpa_mask", "valid_rows"]


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


def sdpa_mask(shape, *, causal=False, seq_lens_q=None, seq_lens_kv=None) -> np.ndarray:
    """The boolean ``[b, 1, s_q, s_kv]`` visibility of key ``j`` to query ``i``.

    Parameters
    ----------
    shape : tuple
        ``(b, s_q, s_kv)``.
    causal : bool
        Top-left aligned: ``j <= i``.
    seq_lens_q, seq_lens_kv : sequence of int, optional
        Per batch entry, the queries and keys that exist.
    """
    b, s_q, s_kv = shape
    i = np.arange(s_q)[:, None]
    j = np.arange(s_kv)[None, :]
    vis = np.ones((b, 1, s_q, s_kv), bool)
    if causal:
        vis &= (j <= i)[None, None]
    if seq_lens_q is not None or seq_lens_kv is not None:
        lq = np.full(b, s_q) if seq_lens_q is None else np.asarray(seq_lens_q).reshape(b)
        lk = np.full(b, s_kv) if seq_lens_kv is None else np.asarray(seq_lens_kv).reshape(b)
        vis &= (i[None] < lq[:, None, None])[:, None] & (j[None] < lk[:, None, None])[:, None]
    return vis


def valid_rows(shape, *, causal=False, seq_lens_q=None, seq_lens_kv=None) -> np.ndarray:
    """Boolean ``[b, 1, s_q, 1]``: the query rows that see at least one key."""
    return sdpa_mask(shape, causal=causal, seq_lens_q=seq_lens_q,
                     seq_lens_kv=seq_lens_kv).any(axis=3, keepdims=True)


def _probabilities(q, k, scale, bias, vis):
    """``(P, stats, visible rows)``: softmax of the masked scaled scores, and ``max + log
    sum`` per row."""
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if bias is not None:
        s = s + _f64(bias)
    s = np.where(vis, s, -np.inf)
    rows = vis.any(axis=3, keepdims=True)
    m = np.where(rows, s.max(axis=3, keepdims=True), 0.0)
    e = np.where(vis, np.exp(s - m), 0.0)
    total = e.sum(axis=3, keepdims=True)
    p = np.where(rows, e / np.where(rows, total, 1.0), 0.0)
    with np.errstate(divide="ignore"):
        stats = np.where(rows, m + np.log(np.where(rows, total, 1.0)), -np.inf)
    return p, stats, rows


def _prepare(q, k, v, scale, causal, seq_lens_q, seq_lens_kv, dropout_mask, dropout):
    q, k, v = _f64(q), _f64(k), _f64(v)
    b, h_q, h_kv, s_q, s_kv = _shapes(q, k, v)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[3])
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    keep = None
    if dropout_mask is not None:
        keep = np.broadcast_to(_f64(dropout_mask), (b, h_q, s_q, s_kv)) / (1.0 - dropout)
    elif dropout:
        raise ValueError("dropout > 0 needs the dropout_mask that was applied")
    vis = sdpa_mask((b, s_q, s_kv), causal=causal, seq_lens_q=seq_lens_q,
                    seq_lens_kv=seq_lens_kv)
    return q, _expand(k, h_q), _expand(v, h_q), float(scale), keep, vis, h_kv


def sdpa_forward(q, k, v, *, scale=None, causal=False, bias=None, seq_lens_q=None,
                 seq_lens_kv=None, dropout_mask=None, dropout=0.0):
    """``softmax(q k^T * scale + bias, masked) [* dropout] @ v`` and its statistics.

    Parameters
    ----------
    q, k, v : array-like
        ``[b, h_q, s_q, d]``, ``[b, h_kv, s_kv, d]``, ``[b, h_kv, s_kv, d_v]``.
    scale : float, optional
        Default ``1 / sqrt(d)``.
    causal, seq_lens_q, seq_lens_kv
        The masks (see the module docstring).
    bias : array-like, optional
        Broadcast to ``[b, h_q, s_q, s_kv]`` and added to the scaled scores.
    dropout_mask : array-like, optional
        The keep-mask ``[b, h_q, s_q, s_kv]`` (0 or 1) the library applied.
    dropout : float
        The drop probability (the kept probabilities are scaled by ``1 / (1 - dropout)``).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``o`` ``[b, h_q, s_q, d_v]`` and ``stats = max + log(sum(exp))`` per row,
        ``[b, h_q, s_q, 1]``, both float64.
    """
    q, k, v, scale, keep, vis, _ = _prepare(q, k, v, scale, causal, seq_lens_q, seq_lens_kv,
                                            dropout_mask, dropout)
    p, stats, _ = _probabilities(q, k, scale, bias, vis)
    if keep is not None:
        p = p * keep
    return np.einsum("bhij,bhjd->bhid", p, v), stats


def sdpa_backward(q, k, v, do, *, scale=None, causal=False, bias=None, seq_lens_q=None,
                  seq_lens_kv=None, dropout_mask=None, dropout=0.0):
    """The gradients ``(dq, dk, dv)`` of :func:`sdpa_forward`'s output against ``do``.

    The probabilities are recomputed from the inputs; with grouped-query attention the key
    and value gradients sum over the query heads that share a key/value head.  The same
    options as :func:`sdpa_forward`.

    Returns
    -------
    tuple of numpy.ndarray
        float64 ``dq`` ``[b, h_q, s_q, d]``, ``dk`` ``[b, h_kv, s_kv, d]``,
        ``dv`` ``[b, h_kv, s_kv, d_v]``.
    """
    q, ke, ve, scale, keep, vis, h_kv = _prepare(q, k, v, scale, causal, seq_lens_q,
                                                 seq_lens_kv, dropout_mask, dropout)
    do = _f64(do)
    p, _, _ = _probabilities(q, ke, scale, bias, vis)
    pd = p * keep if keep is not None else p
    dv = np.einsum("bhij,bhid->bhjd", pd, do)
    dpd = np.einsum("bhid,bhjd->bhij", do, ve)
    dp = dpd * keep if keep is not None else dpd
    ds = p * (dp - (dp * p).sum(axis=3, keepdims=True)) * scale
    dq = np.einsum("bhij,bhjd->bhid", ds, ke)
    dk = np.einsum("bhij,bhid->bhjd", ds, q)
    b, h_q = q.shape[:2]
    g = h_q // h_kv
    dk = dk.reshape(b, h_kv, g, *dk.shape[2:]).sum(axis=2)
    dv = dv.reshape(b, h_kv, g, *dv.shape[2:]).sum(axis=2)
    return dq, dk, dv
