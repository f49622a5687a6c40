"""Training references: softmax cross-entropy and its gradient, the argmax count, SGD with
momentum, AdamW, embedding gather / scatter-add, global average pooling.

The operations of :mod:`cudalibs.kernels.train`, in float64, written from their definitions
(PyTorch's rules for the optimizers).  Labels and ids are integer arrays; an out-of-range one
gives NaN where the kernels write NaN.
"""

from __future__ import annotations

import numpy as np

__all__ = ["cross_entropy", "cross_entropy_backward", "accuracy_count", "sgd", "adamw",
           "embedding", "embedding_backward", "global_avg_pool", "global_avg_pool_backward"]


def _f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _rows(logits, labels):
    """``(x as (rows, C) float64, labels as (rows,) int64, counted mask, in-range mask)``."""
    x = _f64(logits)
    lab = np.asarray(labels).astype(np.int64)
    if lab.shape != x.shape[:-1]:
        raise ValueError(f"labels {lab.shape} must be logits.shape[:-1] = {x.shape[:-1]}")
    cols = x.shape[-1]
    x = x.reshape(-1, cols)
    lab = lab.reshape(-1)
    return x, lab, (lab >= 0) & (lab < cols)


def _softmax_rows(x: np.ndarray):
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(axis=1, keepdims=True)
    return e / s, m[:, 0] + np.log(s[:, 0])


def cross_entropy(logits, labels, ignore_index=None, reduction: str = "mean"):
    """Softmax cross-entropy.

    Parameters
    ----------
    logits : array-like
        ``(..., C)``.
    labels : array-like of int
        ``logits.shape[:-1]``.
    ignore_index : int, optional
        Rows with this label contribute 0 and are not counted.
    reduction : {"mean", "sum"}

    Returns
    -------
    loss : float
        NaN for a mean over no counted rows, or when a counted label is out of range.
    row_loss : numpy.ndarray
        ``labels.shape``: ``logsumexp(row) - row[label]``, 0 for ignored rows.
    count : int
        Rows not ignored.
    """
    shape = np.shape(labels)
    x, lab, valid = _rows(logits, labels)
    keep = np.ones(lab.shape, bool) if ignore_index is None else lab != ignore_index
    rows = np.zeros(lab.shape)
    if x.shape[0] and x.shape[1]:
        _, lse = _softmax_rows(x)
        picked = x[np.arange(lab.size), np.where(valid, lab, 0)]
        rows = np.where(valid, lse - picked, np.nan)
    rows = np.where(keep, rows, 0.0)
    count = int(keep.sum())
    total = rows.sum()
    if reduction == "mean":
        loss = total / count if count else np.nan
    elif reduction == "sum":
        loss = total
    else:
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    return float(loss), rows.reshape(shape), count


def cross_entropy_backward(logits, labels, ignore_index=None, reduction: str = "mean",
                           grad_scale: float = 1.0) -> np.ndarray:
    """``(softmax - onehot) * grad_scale / count`` (mean) or ``* grad_scale`` (sum); zero rows
    for ignored labels, NaN rows for out-of-range ones."""
    shape = np.shape(logits)
    x, lab, valid = _rows(logits, labels)
    keep = np.ones(lab.shape, bool) if ignore_index is None else lab != ignore_index
    if x.size == 0:
        return np.zeros(shape)
    p, _ = _softmax_rows(x)
    p[np.arange(lab.size)[valid], lab[valid]] -= 1.0
    p[~valid] = np.nan
    p[~keep] = 0.0
    count = int(keep.sum())
    if reduction == "mean":
        # No counted row: every row is an ignored (zero) one, whatever the factor.
        factor = grad_scale / count if count else 0.0
    else:
        factor = grad_scale
    return (p * factor).reshape(shape)


def accuracy_count(logits, labels, ignore_index=None) -> int:
    """Rows not ignored whose first argmax (NaN counting as the maximum) is their label."""
    x, lab, _ = _rows(logits, labels)
    if x.shape[0] == 0:
        return 0
    keep = np.ones(lab.shape, bool) if ignore_index is None else lab != ignore_index
    nan = np.isnan(x)
    # np.argmax already returns the first NaN when there is one, else the first maximum.
    best = np.where(nan.any(axis=1), nan.argmax(axis=1), np.argmax(x, axis=1))
    return int(((best == lab) & keep).sum())


def sgd(param, grad, momentum_buffer, *, lr, momentum=0.0, weight_decay=0.0):
    """One SGD step (dampening 0, nesterov off).

    Returns
    -------
    param, momentum_buffer : numpy.ndarray
        The updated copies (the buffer unchanged when ``momentum`` is 0).
    """
    p, d = _f64(param), _f64(grad)
    d = d + weight_decay * p
    buf = None if momentum_buffer is None else _f64(momentum_buffer)
    if momentum != 0:
        buf = momentum * buf + d
        d = buf
    return p - lr * d, buf


def adamw(param, grad, exp_avg, exp_avg_sq, *, step, lr, betas=(0.9, 0.999), eps=1e-8,
          weight_decay=1e-2):
    """One AdamW step at step number ``step`` (>= 1).

    Returns
    -------
    param, exp_avg, exp_avg_sq : numpy.ndarray
    """
    b1, b2 = betas
    p, g, m, v = _f64(param), _f64(grad), _f64(exp_avg), _f64(exp_avg_sq)
    p = p * (1.0 - lr * weight_decay)
    m = b1 * m + (1.0 - b1) * g
    v = b2 * v + (1.0 - b2) * g * g
    bc1 = 1.0 - b1 ** step
    bc2 = 1.0 - b2 ** step
    p = p - (lr / bc1) * m / (np.sqrt(v) / np.sqrt(bc2) + eps)
    return p, m, v


def embedding(weight, ids) -> np.ndarray:
    """``weight[ids]``, NaN rows for ids outside ``[0, len(weight))``."""
    w = _f64(weight)
    idx = np.asarray(ids).astype(np.int64)
    ok = (idx >= 0) & (idx < w.shape[0])
    out = w[np.where(ok, idx, 0)] if w.shape[0] else np.zeros(idx.shape + w.shape[1:])
    out[~ok] = np.nan
    return out


def embedding_backward(dy, ids, num_embeddings: int) -> np.ndarray:
    """``dweight`` with ``dweight[ids[r]] += dy[r]``; out-of-range ids add nothing."""
    g = _f64(dy)
    idx = np.asarray(ids).astype(np.int64).reshape(-1)
    g = g.reshape(idx.size, -1) if idx.size else g.reshape(0, g.shape[-1])
    out = np.zeros((num_embeddings, g.shape[1]))
    ok = (idx >= 0) & (idx < num_embeddings)
    np.add.at(out, idx[ok], g[ok])
    return out


def global_avg_pool(x) -> np.ndarray:
    """``(N, C, *spatial) -> (N, C)``: the mean over the spatial axes."""
    a = _f64(x)
    return a.reshape(a.shape[:2] + (int(np.prod(a.shape[2:])),)).mean(axis=2)


def global_avg_pool_backward(dy, x_shape) -> np.ndarray:
    """``dy[n, c] / spatial size`` spread over ``x_shape = (N, C, *spatial)``."""
    g = _f64(dy)
    inner = int(np.prod(x_shape[2:]))
    return np.broadcast_to((g / inner).reshape(g.shape + (1,) * (len(x_shape) - 2)),
                           tuple(x_shape)).copy()
