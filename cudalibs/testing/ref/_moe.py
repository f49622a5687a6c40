"""Mixture-of-experts routing references: top-k softmax and its gradient, the stable sort of
the slots by expert, the permutations and their gradients.

The operations of :mod:`cudalibs.kernels.moe`, in float64 (the choices and the routing are
exact: integers).  Slot ``t*k + j`` is token ``t``'s ``j``-th choice; a routing is the tuple
``(offsets, order, slots)`` (:class:`Routing` here, :class:`cudalibs.kernels.MoeRouting` on the
device) and the functions that take one unpack it by position, so either serves once copied to
the host.  Indices are clamped as the kernels clamp them: expert ids to ``[0, E - 1]``, order and
slots values to ``[0, N - 1]``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Routing", "topk_softmax", "topk_softmax_backward", "moe_routing", "moe_permute",
           "moe_permute_backward", "moe_unpermute", "moe_unpermute_backward"]


class Routing(NamedTuple):
    """A routing on the host: ``offsets`` (``E + 1``), ``order`` and ``slots`` (``N`` each),
    int64."""

    offsets: np.ndarray
    order: np.ndarray
    slots: np.ndarray


def _rows(x, what: str) -> np.ndarray:
    a = np.asarray(x).astype(np.float64)
    if a.ndim != 2:
        raise ValueError(f"{what} must be 2-D, got shape {a.shape}")
    return a


def _clamped(ids, n: int) -> np.ndarray:
    return np.clip(np.asarray(ids).astype(np.int64), 0, n - 1)


def topk_softmax(logits, k, renormalize=True, ids=None):
    """The ``k`` largest softmax probabilities of each row and their experts.

    Parameters
    ----------
    logits : array-like, shape (T, E)
        Any real type, widened exactly to float64.
    k : int
        Choices per row (ignored when ``ids`` is given).
    renormalize : bool
        Divide the chosen probabilities by their sum (the softmax of the chosen logits).
    ids : array-like, shape (T, k), optional
        Given: the weights of these experts (clamped to ``[0, E - 1]``, repeats allowed), the
        map :func:`topk_softmax_backward` differentiates.

    Returns
    -------
    weights : numpy.ndarray
        float64, ``(T, k)``.
    ids : numpy.ndarray
        int64, ``(T, k)``: by default the experts of the largest logits in descending order,
        of equal logits (``-0 == +0``) the lower index first.
    """
    x = _rows(logits, "logits")
    if ids is None:
        if not 1 <= k <= x.shape[1]:
            raise ValueError(f"k must be in [1, {x.shape[1]}], got {k}")
        # A stable sort of the negated logits: descending, equal ones by index.
        ids = np.argsort(-x, axis=1, kind="stable")[:, :k]
    else:
        ids = _clamped(ids, x.shape[1])
    if renormalize:
        chosen = np.take_along_axis(x, ids, axis=1)
        e = np.exp(chosen - chosen.max(axis=1, keepdims=True))
    else:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        e = np.take_along_axis(e / e.sum(axis=1, keepdims=True), ids, axis=1)
    weights = e / e.sum(axis=1, keepdims=True) if renormalize else e
    return weights, ids


def topk_softmax_backward(logits, ids, dweights, renormalize=True) -> np.ndarray:
    """The gradient with respect to the logits of ``sum(dweights * weights)``, ``weights``
    the map of :func:`topk_softmax` with ``ids`` held fixed.

    With ``G = sum_j w_j g_j`` (``g = dweights``) per row: ``dx_i = sum over j with ids_j = i
    of w_j (g_j - G)`` when ``renormalize``, else ``sum over j with ids_j = i of w_j g_j -
    p_i G`` (``p`` the softmax).

    Returns
    -------
    numpy.ndarray
        float64, ``(T, E)``.
    """
    x = _rows(logits, "logits")
    w, ids = topk_softmax(x, None, renormalize, ids=ids)
    g = np.asarray(dweights).astype(np.float64).reshape(w.shape)
    big_g = (w * g).sum(axis=1, keepdims=True)
    dx = np.zeros_like(x)
    rows = np.repeat(np.arange(x.shape[0]), ids.shape[1]).reshape(ids.shape)
    np.add.at(dx, (rows, ids), w * (g - big_g) if renormalize else w * g)
    if not renormalize:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        dx -= e / e.sum(axis=1, keepdims=True) * big_g
    return dx


def moe_routing(ids, experts) -> Routing:
    """The slots of ``ids`` (``(T, k)``, flattened: slot ``t*k + j``) sorted by expert, stably;
    ids clamped to ``[0, experts - 1]``."""
    e = _clamped(np.asarray(ids).reshape(-1), experts)
    order = np.argsort(e, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(np.bincount(e, minlength=experts))])
    slots = np.empty_like(order)
    slots[order] = np.arange(order.size)
    return Routing(offsets.astype(np.int64), order.astype(np.int64), slots)


def _slot_rows(routing, field: int, tokens: int):
    """The routing's ``order`` (field 1) or ``slots`` (field 2), clamped, and ``k``."""
    idx = np.asarray(tuple(routing)[field]).astype(np.int64).reshape(-1)
    n = idx.size
    if tokens == 0 or n % tokens:
        raise ValueError(f"a routing of {n} slots does not fit {tokens} tokens")
    return np.clip(idx, 0, max(n - 1, 0)), n // tokens


def moe_permute(x, routing) -> np.ndarray:
    """``out[r] = x[order[r] // k]``, ``k`` the routing's slots per row of ``x``: float64."""
    a = _rows(x, "x")
    order, k = _slot_rows(routing, 1, a.shape[0])
    return a[order // k]


def moe_permute_backward(dx_sorted, routing, k) -> np.ndarray:
    """``dx[t] = sum_j dx_sorted[slots[t*k + j]]``: float64, ``(T, D)``."""
    a = _rows(dx_sorted, "dx_sorted")
    return moe_unpermute(a, routing, np.ones((a.shape[0] // k, k)))


def moe_unpermute(y_sorted, routing, weights) -> np.ndarray:
    """``y[t] = sum_j weights[t, j] y_sorted[slots[t*k + j]]``: float64, ``(T, D)``."""
    y = _rows(y_sorted, "y_sorted")
    w = _rows(weights, "weights")
    slots, k = _slot_rows(routing, 2, w.shape[0])
    gathered = y[slots].reshape(w.shape[0], k, y.shape[1])
    return np.einsum("tk,tkd->td", w, gathered)


def moe_unpermute_backward(dy, y_sorted, routing, weights):
    """The gradients of :func:`moe_unpermute`.

    Returns
    -------
    dy_sorted : numpy.ndarray
        float64, ``(N, D)``: ``dy_sorted[slots[t*k + j]] = weights[t, j] dy[t]``.
    dweights : numpy.ndarray
        float64, ``(T, k)``: ``dot(dy[t], y_sorted[slots[t*k + j]])``.
    """
    g = _rows(dy, "dy")
    y = _rows(y_sorted, "y_sorted")
    w = _rows(weights, "weights")
    slots, k = _slot_rows(routing, 2, w.shape[0])
    dys = np.zeros_like(y)
    dys[slots] = (w[:, :, None] * g[:, None, :]).reshape(-1, g.shape[1])
    dweights = np.einsum("td,tkd->tk", g, y[slots].reshape(w.shape[0], k, y.shape[1]))
    return dys, dweights
