"""Wrappers of ``moe.ptx``: the routing of a mixture-of-experts layer, on the device.

A MoE layer sends each of its ``T`` tokens to ``k`` of ``E`` experts.  These functions are the
pieces around the experts' GEMMs (:func:`cudalibs.kernels.grouped_mm`), forward and backward::

    weights, ids = topk_softmax(router_logits, k)      # (T, k) float32 and int32
    routing = moe_routing(ids, E)                       # offsets, order, slots
    xs = moe_permute(x, routing)                        # (T*k, D): rows grouped by expert
    hs = grouped_mm(xs, w1, routing.offsets)            # ... the experts ...
    y = moe_unpermute(ys, routing, weights)             # (T, D): weighted sum of k rows

    dys, dweights = moe_unpermute_backward(dy, ys, routing, weights)
    dx = moe_permute_backward(dxs, routing, k)          # dxs: the experts' input gradient
    dlogits = topk_softmax_backward(router_logits, ids, dweights)

Slots and sorted rows
---------------------
Slot ``t*k + j`` is token ``t``'s ``j``-th choice.  :func:`moe_routing` sorts the ``N = T*k``
slots by expert, stably: within one expert the slots keep their order, so the result is
unique.  Its :class:`MoeRouting` holds three int32 device arrays: ``offsets`` (``E + 1``; the
rows of expert ``e`` are ``offsets[e]`` to ``offsets[e+1]``, the offsets ``grouped_mm`` takes),
``order`` (sorted row ``r`` holds slot ``order[r]``) and ``slots`` (its inverse:
``slots[t*k + j]`` is the sorted row of slot ``(t, j)``).  The sort is a counting sort in three
small launches -- per-warp histograms with each slot's rank among its warp's slots of one
expert, a scan of those histograms in one block, a scatter -- whose work grows with the slots,
not with their distribution (tests/gpu/kernels/test_moe.py times a layer of 8192 tokens routed
to 2 of 64 experts).

Indices out of range
--------------------
Values in device memory are never checked on the host: that would synchronise.  Instead every
kernel clamps each index it reads before it addresses anything: expert ids to ``[0, E - 1]``
(an id below 0 routes its slot to expert 0, one of ``E`` or more to expert ``E - 1``: counted,
sorted and permuted like any other, so ``offsets[-1]`` is always ``N`` and ``slots`` stays the
inverse of ``order``), ``order`` and ``slots`` values to ``[0, N - 1]``.  Whatever device memory
holds, no kernel reads or writes outside its arrays.  :func:`topk_softmax_backward` clamps its
ids the same way.  The references in :mod:`cudalibs.testing.ref` follow the same rule.

Numbers
-------
The softmax is computed in float32 from the logits widened exactly.  The choices are the
``k`` largest logits (softmax is increasing, so the ``k`` largest probabilities) in descending
order; of equal logits (``-0`` equal to ``+0``) the lower expert index comes first.  A row with a
NaN gets NaN weights (its ids stay distinct and in range).  Sums run in float32 in a fixed
order -- the ``k`` choices of a token in ``j`` order, dot products in a fixed tree -- and no
kernel uses atomics: results are bitwise reproducible, whatever the stream or thread.

Whole-step CUDA graphs
----------------------
Nothing here reads device memory on the host or synchronises, and every size follows from
shapes alone: a step captured once (:func:`cudalibs.graph.capture`) routes whatever logits a
replay finds.  Outputs not given are allocated stream-ordered on the call's stream, and the
routing's scratch is freed on it after its last launch, so a capture records an allocation
and a free.

Limits: ``k`` from 1 to :data:`MAX_TOPK` (32), routing to at most :data:`MAX_EXPERTS` (1024)
experts, ``T*k`` below ``2**31`` (int32 rows).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..driver.array import DeviceArray, arrays_overlap, empty
from ..driver.stream import as_stream
from ..runtime import ptxlib
from ._common import F32, GRID_X_MAX, HALF_FLOAT, array, dim, suffix

__all__ = ["MoeRouting", "topk_softmax", "topk_softmax_backward", "moe_routing",
           "moe_permute", "moe_permute_backward", "moe_unpermute", "moe_unpermute_backward"]

#: The most choices per token: one per lane of the warp that handles a token.
MAX_TOPK = 32
#: The most experts :func:`moe_routing` sorts to: one thread each in the scan's block.
MAX_EXPERTS = 1024

_I32, _I64 = np.dtype(np.int32), np.dtype(np.int64)
_IDS = {_I32: "i32", _I64: "i64"}
_I32_MAX = 2**31 - 1
#: The top-k kernels: one warp per row, 8 rows a block.
_TOPK_BLOCK = (256, 1, 1)
_TOPK_ROWS = 8
#: The routing's count kernel: warps per block (each a histogram of every expert in shared
#: memory), and the slots a warp takes at least.
_COUNT_WARPS = 4
_MIN_CHUNK = 128
#: The most (unit, expert) counts the routing's scratch holds: it bounds the scan's loop.
_MAX_COUNTS = 2**20
_SCAN_BLOCK = (1024, 1, 1)


class MoeRouting(NamedTuple):
    """The routing of ``N = T*k`` slots to experts, sorted by expert: three int32 device
    arrays, as :func:`moe_routing` returns them.

    Attributes
    ----------
    offsets : DeviceArray
        ``(E + 1,)``: the sorted rows of expert ``e`` are ``offsets[e]`` to ``offsets[e + 1]``;
        ``offsets[0] == 0`` and ``offsets[E] == N``.
    order : DeviceArray
        ``(N,)``: sorted row ``r`` holds slot ``order[r] = t*k + j`` (token ``t``, choice
        ``j``); within an expert the slots are in increasing order.
    slots : DeviceArray
        ``(N,)``: the inverse, ``slots[t*k + j]`` is the sorted row of slot ``(t, j)``.
    """

    offsets: DeviceArray
    order: DeviceArray
    slots: DeviceArray

    @property
    def experts(self) -> int:
        """The number of experts, ``len(offsets) - 1``."""
        return self.offsets.shape[0] - 1

    def __repr__(self) -> str:
        try:
            n, e = self.order.shape[0], self.offsets.shape[0] - 1
        except (AttributeError, IndexError, TypeError):
            return f"MoeRouting({self.offsets!r}, {self.order!r}, {self.slots!r})"
        dev = getattr(getattr(self.order, "device", None), "ordinal", "?")
        return f"MoeRouting({n} slots to {e} experts on device {dev})"


# -- argument helpers ---------------------------------------------------------------------------
def _count(op: str, name: str, value, lo: int, hi: int) -> int:
    """An int argument within ``[lo, hi]``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{op}: {name} must be an int, not {type(value).__name__}")
    v = int(value)
    if not lo <= v <= hi:
        raise ValueError(f"{op}: {name} = {v} is outside [{lo}, {hi}], what the kernels take")
    return v


def _flag(op: str, name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be a bool, not {type(value).__name__}")
    return bool(value)


def _given(op: str, name: str, x, shape, dtypes, dev, stream) -> DeviceArray | None:
    """An output the caller gave, checked (shape, one of ``dtypes``, C-contiguous, on
    ``dev``); None when not given.  Nothing is allocated here: every check comes first."""
    if x is None:
        return None
    arr = array(x, op, name, dtypes, device=dev, stream=stream, written=True)
    if arr.shape != tuple(shape):
        raise ValueError(f"{op}: {name} has shape {arr.shape}, expected {tuple(shape)}")
    return arr


def _disjoint(op: str, written, read) -> None:
    """Refuse an output (``(name, array or None)`` in ``written``) that overlaps another
    output or an input."""
    for i, (name, a) in enumerate(written):
        if a is None:
            continue
        for other, b in (*written[i + 1:], *read):
            if b is not None and arrays_overlap(a, b):
                raise ValueError(f"{op}: {name} overlaps {other}")


def _logits(op: str, logits, stream):
    """The logits (rows contiguous, any row stride of at least a row) and their row stride in
    elements."""
    x = array(logits, op, "logits", HALF_FLOAT, ndim=2, stream=stream, contiguous=False)
    tokens, experts = x.shape
    item = x.dtype.itemsize
    if experts < 1:
        raise ValueError(f"{op}: logits has no experts (shape {x.shape})")
    if experts > _I32_MAX:
        raise ValueError(f"{op}: logits has {experts} experts, beyond the kernels' {_I32_MAX}")
    dim(op, "the number of tokens", tokens)
    if experts > 1 and x.strides[1] != item:
        raise ValueError(f"{op}: logits must have contiguous rows (strides {x.strides})")
    ld = experts
    if tokens > 1:
        ld = x.strides[0] // item
        if x.strides[0] % item or ld < experts:
            raise ValueError(f"{op}: logits' rows must be at least a row apart (strides "
                             f"{x.strides})")
    return x, ld


def _routing(op: str, name: str, routing, dev, stream, *, written=False) -> MoeRouting:
    """A routing (or the arrays to write one into) checked: three int32 1-D C-contiguous
    arrays on ``dev``, ``order`` and ``slots`` of one length."""
    if not (isinstance(routing, tuple) and len(routing) == 3):
        raise TypeError(f"{op}: {name} must be a MoeRouting (offsets, order, slots) as "
                        f"moe_routing returns it, not {type(routing).__name__}")
    r = MoeRouting(*(array(a, op, f"{name}.{field}", (_I32,), ndim=1, device=dev,
                           stream=stream, written=written)
                     for field, a in zip(MoeRouting._fields, routing)))
    if r.offsets.shape[0] < 2:
        raise ValueError(f"{op}: {name}.offsets has {r.offsets.shape[0]} entries; a routing "
                         "to E >= 1 experts has E + 1")
    n = r.order.shape[0]
    if r.slots.shape[0] != n:
        raise ValueError(f"{op}: {name}.order has {n} entries but {name}.slots has "
                         f"{r.slots.shape[0]}; both hold one per slot")
    if n > _I32_MAX:
        raise ValueError(f"{op}: {name} has {n} slots, beyond int32's {_I32_MAX}")
    return r


def _named(r: MoeRouting, name: str = "routing"):
    return tuple((f"{name}.{f}", a) for f, a in zip(MoeRouting._fields, r))


def _fanout(op: str, n: int, tokens: int, what: str) -> int:
    """``k``: the routing's ``n`` slots over the ``tokens`` rows of ``what`` (0 when both are
    0)."""
    if tokens == 0 and n == 0:
        return 0
    if tokens == 0 or n % tokens or not 1 <= n // tokens <= MAX_TOPK:
        raise ValueError(f"{op}: the routing has {n} slots, which is not k tokens' worth for "
                         f"the {tokens} tokens of {what}, with k from 1 to {MAX_TOPK}")
    return n // tokens


def _threads(cols: int) -> tuple:
    """A block along rows of ``cols`` elements: a warp per 256 of them, one to eight warps."""
    return (32 * min(8, max(1, -(-cols // 256))), 1, 1)


def _gather(dev, y, slots, weights, out, tokens, k, cols, s) -> None:
    """``out[t] = sum_j w[t, j] y[slots[t k + j]]`` (``weights`` an address, 0 for ones)."""
    if tokens and cols:
        ptxlib.launch(dev, f"moe_unpermute_{suffix(y.dtype)}_{suffix(out.dtype)}",
                      (min(tokens, GRID_X_MAX), 1, 1), _threads(cols),
                      (y.address, slots.address, weights, out.address, tokens, k, cols), s)


# -- top-k softmax ------------------------------------------------------------------------------
def topk_softmax(logits, k, *, renormalize=True, weights=None, ids=None, stream=None):
    """The router of a MoE layer: the ``k`` most probable experts of each token and their
    probabilities, in one launch.

    The softmax over the ``E`` experts is computed in float32.  ``ids[t]`` are the ``k``
    largest probabilities' experts in descending order, of equal ones the lower index first;
    ``weights[t]`` their probabilities, divided by their sum over the ``k`` when
    ``renormalize`` (then the softmax of the chosen logits).

    Parameters
    ----------
    logits : DeviceArray or device array-like, shape (T, E)
        float32, float16 or bfloat16; rows contiguous, any row stride of at least a row.
    k : int
        Choices per token, ``1 <= k <= min(E, 32)``.
    renormalize : bool, default True
    weights : DeviceArray, shape (T, k), optional
        float32, C-contiguous; allocated when omitted.
    ids : DeviceArray, shape (T, k), optional
        int32, C-contiguous; allocated when omitted.
    stream : Stream, optional
        Default: the thread's current stream.

    Returns
    -------
    tuple of DeviceArray
        ``(weights, ids)``.

    Raises
    ------
    TypeError
        ``logits`` not float32/float16/bfloat16, ``weights`` not float32, ``ids`` not int32,
        ``k`` not an int, ``renormalize`` not a bool, host data.
    ValueError
        ``k`` outside ``[1, min(E, 32)]``, shapes, a layout the kernel cannot read, outputs
        that overlap each other or ``logits``.
    ClosedError
        An array's memory was freed.
    """
    op = "topk_softmax"
    x, ld = _logits(op, logits, stream)
    dev = x.device
    tokens, experts = x.shape
    k = _count(op, "k", k, 1, MAX_TOPK)
    if k > experts:
        raise ValueError(f"{op}: k = {k} is more than the {experts} experts of logits")
    ren = _flag(op, "renormalize", renormalize)
    w = _given(op, "weights", weights, (tokens, k), (F32,), dev, stream)
    i = _given(op, "ids", ids, (tokens, k), (_I32,), dev, stream)
    _disjoint(op, (("weights", w), ("ids", i)), (("logits", x),))
    s = as_stream(stream, dev)
    w = w if w is not None else empty((tokens, k), F32, device=dev, stream=s)
    i = i if i is not None else empty((tokens, k), _I32, device=dev, stream=s)
    if tokens:
        ptxlib.launch(dev, f"topk_softmax_{suffix(x.dtype)}",
                      (min(-(-tokens // _TOPK_ROWS), GRID_X_MAX), 1, 1), _TOPK_BLOCK,
                      (x.address, w.address, i.address, tokens, experts, ld, k, int(ren)), s)
    return w, i


def topk_softmax_backward(logits, ids, dweights, *, renormalize=True, out=None, stream=None):
    """The gradient of :func:`topk_softmax`'s weights with respect to the logits, the ids
    held fixed: ``dlogits = dweights @ d(weights)/d(logits)``, exactly, in one launch.

    With ``w`` the weights of ``ids`` (recomputed from ``logits``) and ``G = sum_j w_j
    dweights_j`` per token: ``dlogits[t, i] = sum over j with ids[t, j] = i of w_j
    (dweights_j - G)`` with ``renormalize`` (zero for experts not chosen), else ``sum over j
    with ids[t, j] = i of w_j dweights_j - p_i G`` (``p`` the softmax).  Ids are clamped to
    ``[0, E - 1]``; a repeated id adds the terms of its choices.

    Parameters
    ----------
    logits : DeviceArray or device array-like, shape (T, E)
        As for :func:`topk_softmax`.
    ids : DeviceArray, shape (T, k)
        int32 or int64, C-contiguous, ``1 <= k <= 32``.
    dweights : DeviceArray, shape (T, k)
        float32, C-contiguous: the gradient of the weights.
    renormalize : bool, default True
        As in the forward call.
    out : DeviceArray, shape (T, E), optional
        float32, C-contiguous, not overlapping the inputs; allocated when omitted.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``: float32, ``(T, E)``.

    Raises
    ------
    TypeError
        Wrong dtypes, ``renormalize`` not a bool, host data.
    ValueError
        Shapes that do not match, ``k`` outside ``[1, 32]``, ``out`` overlapping an input.
    ClosedError
        An array's memory was freed.
    """
    op = "topk_softmax_backward"
    x, ld = _logits(op, logits, stream)
    dev = x.device
    tokens, experts = x.shape
    i = array(ids, op, "ids", tuple(_IDS), ndim=2, device=dev, stream=stream)
    k = i.shape[1]
    if i.shape[0] != tokens or not 1 <= k <= MAX_TOPK:
        raise ValueError(f"{op}: ids has shape {i.shape}; logits has {tokens} rows, so "
                         f"({tokens}, k) with k from 1 to {MAX_TOPK}")
    dw = array(dweights, op, "dweights", (F32,), ndim=2, device=dev, stream=stream)
    if dw.shape != i.shape:
        raise ValueError(f"{op}: dweights has shape {dw.shape} but ids has {i.shape}")
    ren = _flag(op, "renormalize", renormalize)
    o = _given(op, "out", out, (tokens, experts), (F32,), dev, stream)
    _disjoint(op, (("out", o),), (("logits", x), ("ids", i), ("dweights", dw)))
    s = as_stream(stream, dev)
    o = o if o is not None else empty((tokens, experts), F32, device=dev, stream=s)
    if tokens:
        ptxlib.launch(dev, f"topk_softmax_backward_{suffix(x.dtype)}_{_IDS[i.dtype]}",
                      (min(-(-tokens // _TOPK_ROWS), GRID_X_MAX), 1, 1), _TOPK_BLOCK,
                      (x.address, i.address, dw.address, o.address, tokens, experts, ld, k,
                       int(ren)), s)
    return o


# -- routing ------------------------------------------------------------------------------------
def _route_chunk(n: int, experts: int) -> tuple[int, int]:
    """``(chunk, units)``: the slots each warp of the count kernel takes (a multiple of 32, at
    least 128 and at least the experts, whose histogram it zeroes and writes) and how many
    warps; few enough that the ``units * experts`` counts stay within 2**20."""
    width = -(-experts // 32) * 32
    per = -(-n // max(1, _MAX_COUNTS // experts))
    chunk = max(_MIN_CHUNK, width, -(-per // 32) * 32)
    return chunk, -(-n // chunk)


def moe_routing(ids, experts, *, out=None, stream=None) -> MoeRouting:
    """Sort the ``N = T*k`` slots of ``ids`` by expert (stably), on the device.

    Three launches -- a histogram per warp with each slot's rank, a one-block scan, a
    scatter -- and no atomics: the routing is unique (within an expert the slots keep their
    order) and the result bitwise reproducible.  Ids outside ``[0, experts)`` are clamped to
    it (see the module notes).

    Parameters
    ----------
    ids : DeviceArray or device array-like, shape (T, k)
        int32 or int64 expert ids, C-contiguous; ``T*k < 2**31``.
    experts : int
        ``E``, from 1 to 1024.
    out : MoeRouting, optional
        Arrays to write the routing into (int32, C-contiguous, of ``E + 1``, ``N`` and ``N``
        elements), for a captured step that keeps them; allocated when omitted.
    stream : Stream, optional

    Returns
    -------
    MoeRouting
        ``(offsets, order, slots)``: ``offsets[0] = 0``, ``offsets[E] = N``; ``order[r]`` the
        slot ``t*k + j`` in sorted row ``r``; ``slots`` its inverse.

    Raises
    ------
    TypeError
        ``ids`` not int32/int64, ``experts`` not an int, ``out`` not a MoeRouting of int32
        arrays, host data.
    ValueError
        ``experts`` outside ``[1, 1024]``, too many slots, ``out``'s arrays of the wrong
        lengths or overlapping each other or ``ids``.
    ClosedError
        An array's memory was freed.
    """
    op = "moe_routing"
    a = array(ids, op, "ids", tuple(_IDS), ndim=2, stream=stream)
    dev = a.device
    e = _count(op, "experts", experts, 1, MAX_EXPERTS)
    n = a.size
    if n > _I32_MAX:
        raise ValueError(f"{op}: ids has {n} slots, beyond int32's {_I32_MAX}")
    r = None
    if out is not None:
        r = _routing(op, "out", out, dev, stream, written=True)
        if r.offsets.shape[0] != e + 1 or r.order.shape[0] != n:
            raise ValueError(f"{op}: out holds {r.offsets.shape[0]} offsets and "
                             f"{r.order.shape[0]} slots; the routing of ids {a.shape} to {e} "
                             f"experts has {e + 1} and {n}")
        named = _named(r, "out")
        _disjoint(op, named, (("ids", a),))
    s = as_stream(stream, dev)
    if r is None:
        r = MoeRouting(empty((e + 1,), _I32, device=dev, stream=s),
                       empty((n,), _I32, device=dev, stream=s),
                       empty((n,), _I32, device=dev, stream=s))
    if n == 0:
        r.offsets.fill(0, s)
        return r
    chunk, units = _route_chunk(n, e)
    sfx = _IDS[a.dtype]
    counts = empty((units * e,), _I32, device=dev, stream=s)
    try:
        ptxlib.launch(dev, f"moe_route_count_{sfx}", (-(-units // _COUNT_WARPS), 1, 1),
                      (32 * _COUNT_WARPS, 1, 1),
                      (a.address, counts.address, r.slots.address, n, e, chunk, units), s,
                      shared_mem=_COUNT_WARPS * e * 4)
        ptxlib.launch(dev, "moe_route_scan", (1, 1, 1), _SCAN_BLOCK,
                      (counts.address, r.offsets.address, e, units), s)
        grid, block = ptxlib.elementwise_grid(dev, n)
        ptxlib.launch(dev, f"moe_route_scatter_{sfx}", grid, block,
                      (a.address, counts.address, r.order.address, r.slots.address, n, e,
                       chunk), s)
    finally:
        counts.close()          # freed on the stream, after the scatter has read it
    return r


# -- permutations -------------------------------------------------------------------------------
def moe_permute(x, routing, *, out=None, stream=None):
    """The token rows in expert order: ``out[r] = x[routing.order[r] // k]``.

    ``k`` is the routing's slots over the tokens of ``x``.  A copy, any row length.

    Parameters
    ----------
    x : DeviceArray or device array-like, shape (T, D)
        float32, float16 or bfloat16, C-contiguous.
    routing : MoeRouting
        Of ``N = T*k`` slots, from :func:`moe_routing`.
    out : DeviceArray, shape (N, D), optional
        ``x``'s dtype, C-contiguous, not overlapping ``x`` or the routing.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``.

    Raises
    ------
    TypeError
        Wrong dtypes, ``routing`` not a MoeRouting, host data.
    ValueError
        A routing whose slots are not ``k`` per token of ``x`` (``1 <= k <= 32``), shapes,
        overlaps.
    ClosedError
        An array's memory was freed.
    """
    op = "moe_permute"
    a = array(x, op, "x", HALF_FLOAT, ndim=2, stream=stream)
    dev = a.device
    r = _routing(op, "routing", routing, dev, stream)
    tokens, cols = a.shape
    dim(op, "D", cols)
    n = r.order.shape[0]
    k = _fanout(op, n, tokens, "x")
    o = _given(op, "out", out, (n, cols), (a.dtype,), dev, stream)
    _disjoint(op, (("out", o),), (("x", a), *_named(r)))
    s = as_stream(stream, dev)
    o = o if o is not None else empty((n, cols), a.dtype, device=dev, stream=s)
    if n and cols:
        ptxlib.launch(dev, "moe_permute", (min(n, GRID_X_MAX), 1, 1), _threads(cols),
                      (a.address, r.order.address, o.address, n, k, cols * a.dtype.itemsize),
                      s)
    return o


def moe_permute_backward(dx_sorted, routing, k, *, out=None, stream=None):
    """The gradient of :func:`moe_permute`: ``dx[t] = sum_j dx_sorted[routing.slots[t*k + j]]``,
    summed in float32 in ``j`` order (no atomics).

    Parameters
    ----------
    dx_sorted : DeviceArray or device array-like, shape (N, D)
        float32, float16 or bfloat16, C-contiguous; ``N = T*k``.
    routing : MoeRouting
        Of ``N`` slots.
    k : int
        Choices per token, 1 to 32.
    out : DeviceArray, shape (T, D), optional
        ``dx_sorted``'s dtype or float32, C-contiguous; default a new array of
        ``dx_sorted``'s dtype.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``: ``dx``.

    Raises
    ------
    TypeError
        Wrong dtypes, ``k`` not an int, ``routing`` not a MoeRouting, host data.
    ValueError
        ``k`` outside ``[1, 32]`` or not dividing ``N``, a routing of another ``N``, shapes,
        overlaps.
    ClosedError
        An array's memory was freed.
    """
    op = "moe_permute_backward"
    a = array(dx_sorted, op, "dx_sorted", HALF_FLOAT, ndim=2, stream=stream)
    dev = a.device
    k = _count(op, "k", k, 1, MAX_TOPK)
    n, cols = a.shape
    dim(op, "D", cols)
    if n % k:
        raise ValueError(f"{op}: dx_sorted has {n} rows, not a multiple of k = {k}")
    r = _routing(op, "routing", routing, dev, stream)
    if r.order.shape[0] != n:
        raise ValueError(f"{op}: the routing has {r.order.shape[0]} slots but dx_sorted has "
                         f"{n} rows")
    tokens = n // k
    o = _given(op, "out", out, (tokens, cols), (a.dtype, F32), dev, stream)
    _disjoint(op, (("out", o),), (("dx_sorted", a), *_named(r)))
    s = as_stream(stream, dev)
    o = o if o is not None else empty((tokens, cols), a.dtype, device=dev, stream=s)
    _gather(dev, a, r.slots, 0, o, tokens, k, cols, s)
    return o


def _slot_weights(op: str, weights, dev, stream):
    """The routing weights ``(T, k)``, float32, C-contiguous, ``1 <= k <= 32``."""
    w = array(weights, op, "weights", (F32,), ndim=2, device=dev, stream=stream)
    if not 1 <= w.shape[1] <= MAX_TOPK:
        raise ValueError(f"{op}: weights has shape {w.shape}: k = {w.shape[1]} choices per "
                         f"token, where the kernels take 1 to {MAX_TOPK}")
    return w


def moe_unpermute(y_sorted, routing, weights, *, out=None, stream=None):
    """Back to token order, weighted: ``y[t] = sum_j weights[t, j] *
    y_sorted[routing.slots[t*k + j]]``, float32 fused multiply-adds in ``j`` order.

    Parameters
    ----------
    y_sorted : DeviceArray or device array-like, shape (N, D)
        float32, float16 or bfloat16, C-contiguous: the experts' output rows in sorted order.
    routing : MoeRouting
        Of ``N = T*k`` slots.
    weights : DeviceArray, shape (T, k)
        float32, C-contiguous (from :func:`topk_softmax`).
    out : DeviceArray, shape (T, D), optional
        ``y_sorted``'s dtype or float32, C-contiguous; default a new array of ``y_sorted``'s
        dtype.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``: ``y``.

    Raises
    ------
    TypeError
        Wrong dtypes, ``routing`` not a MoeRouting, host data.
    ValueError
        ``y_sorted``'s rows not ``T*k``, a routing of another ``N``, ``k`` outside
        ``[1, 32]``, shapes, overlaps.
    ClosedError
        An array's memory was freed.
    """
    op = "moe_unpermute"
    y = array(y_sorted, op, "y_sorted", HALF_FLOAT, ndim=2, stream=stream)
    dev = y.device
    w = _slot_weights(op, weights, dev, stream)
    tokens, k = w.shape
    n, cols = y.shape
    dim(op, "D", cols)
    r = _routing(op, "routing", routing, dev, stream)
    if n != tokens * k or r.order.shape[0] != n:
        raise ValueError(f"{op}: y_sorted has {n} rows and the routing {r.order.shape[0]} "
                         f"slots, but weights {w.shape} makes {tokens * k}")
    o = _given(op, "out", out, (tokens, cols), (y.dtype, F32), dev, stream)
    _disjoint(op, (("out", o),), (("y_sorted", y), ("weights", w), *_named(r)))
    s = as_stream(stream, dev)
    o = o if o is not None else empty((tokens, cols), y.dtype, device=dev, stream=s)
    _gather(dev, y, r.slots, w.address, o, tokens, k, cols, s)
    return o


def moe_unpermute_backward(dy, y_sorted, routing, weights, *, dy_sorted=None, dweights=None,
                           stream=None):
    """The gradients of :func:`moe_unpermute`: ``dy_sorted[slots[t*k + j]] = weights[t, j] *
    dy[t]`` and ``dweights[t, j] = dot(dy[t], y_sorted[slots[t*k + j]])``, in one launch.

    Each dot product is summed in float32 in a fixed order (per thread, then a tree over each
    warp, then the warps in order): no atomics.

    Parameters
    ----------
    dy : DeviceArray or device array-like, shape (T, D)
        ``y_sorted``'s dtype or float32, C-contiguous.
    y_sorted : DeviceArray or device array-like, shape (N, D)
        float32, float16 or bfloat16, C-contiguous; ``N = T*k``.
    routing : MoeRouting
        Of ``N`` slots.
    weights : DeviceArray, shape (T, k)
        float32, C-contiguous.
    dy_sorted : DeviceArray, shape (N, D), optional
        ``y_sorted``'s dtype, C-contiguous; allocated when omitted.
    dweights : DeviceArray, shape (T, k), optional
        float32, C-contiguous; allocated when omitted.
    stream : Stream, optional

    Returns
    -------
    tuple of DeviceArray
        ``(dy_sorted, dweights)``.

    Raises
    ------
    TypeError
        Wrong dtypes, ``routing`` not a MoeRouting, host data.
    ValueError
        Shapes that do not match, a routing of another ``N``, ``k`` outside ``[1, 32]``,
        outputs overlapping each other or an input.
    ClosedError
        An array's memory was freed.
    """
    op = "moe_unpermute_backward"
    g = array(dy, op, "dy", HALF_FLOAT, ndim=2, stream=stream)
    dev = g.device
    y = array(y_sorted, op, "y_sorted", HALF_FLOAT, ndim=2, device=dev, stream=stream)
    if g.dtype not in (y.dtype, F32):
        raise TypeError(f"{op}: dy is {g.dtype}; with y_sorted of {y.dtype} it must be "
                        f"{y.dtype} or float32")
    w = _slot_weights(op, weights, dev, stream)
    tokens, k = w.shape
    n = tokens * k
    cols = g.shape[1]
    dim(op, "D", cols)
    if g.shape[0] != tokens or y.shape != (n, cols):
        raise ValueError(f"{op}: dy {g.shape}, y_sorted {y.shape} and weights {w.shape} do "
                         f"not fit: with T = {tokens}, k = {k} they are (T, D), (T*k, D), "
                         "(T, k)")
    r = _routing(op, "routing", routing, dev, stream)
    if r.order.shape[0] != n:
        raise ValueError(f"{op}: the routing has {r.order.shape[0]} slots but y_sorted has "
                         f"{n} rows")
    dys = _given(op, "dy_sorted", dy_sorted, (n, cols), (y.dtype,), dev, stream)
    dw = _given(op, "dweights", dweights, (tokens, k), (F32,), dev, stream)
    _disjoint(op, (("dy_sorted", dys), ("dweights", dw)),
              (("dy", g), ("y_sorted", y), ("weights", w), *_named(r)))
    s = as_stream(stream, dev)
    dys = dys if dys is not None else empty((n, cols), y.dtype, device=dev, stream=s)
    dw = dw if dw is not None else empty((tokens, k), F32, device=dev, stream=s)
    if tokens:
        ptxlib.launch(dev, f"moe_unpermute_backward_{suffix(y.dtype)}_{suffix(g.dtype)}",
                      (min(tokens, GRID_X_MAX), 1, 1), _threads(cols),
                      (g.address, y.address, r.slots.address, w.address, dys.address,
                       dw.address, tokens, k, cols), s)
    return dys, dw
