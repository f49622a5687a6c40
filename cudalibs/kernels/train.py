"""Wrappers of ``train.ptx``: what a training step needs beyond cuBLAS and cuDNN.

- :func:`cross_entropy` / :func:`cross_entropy_backward`: softmax cross-entropy of logits
  against integer labels (int32 or int64), with an optional ignore index; the per-row losses,
  their mean (or sum) and the number of rows counted all stay on the device, and the gradient
  ``(softmax - onehot) * grad_scale / count`` is one fused kernel.
- :func:`accuracy_count`: the number of rows whose argmax is their label, added up on the
  device (an epoch's count without a host read per batch).
- :func:`sgd` (momentum, weight decay) and :func:`adamw` (float32 master weights, first and
  second moments, an optional 16-bit copy of the updated weights), updating in place.
- :func:`embedding` / :func:`embedding_backward`: row gather by ids, and its scatter-add in
  float32.
- :func:`global_avg_pool` / :func:`global_avg_pool_backward` over the spatial positions of
  channels-first data.

Whole-step CUDA graphs
----------------------
None of these reads a device value on the host, allocates outside the stream-ordered pool, or
synchronises, so each can be captured (:func:`cudalibs.graph.capture`).  A captured kernel
replays with the arguments of its capture; what must change from one replay to the next is
therefore passed *by pointer*:

- ``lr`` of :func:`sgd` and :func:`adamw` may be a float32 device array of one element,
  which a learning-rate schedule rewrites (``lr.copy_(...)``) between replays;
- ``step`` of :func:`adamw` may be an int32 device array of one element holding the step
  number ``t >= 1`` that the bias corrections ``1 - beta**t`` use; they are computed on the
  device from it.  Put one :func:`step_increment` of that counter into the captured step,
  before the :func:`adamw` calls of all parameters: every replay then advances ``t`` and
  applies the update of the next step, with no re-capture.  Start the counter at 0.

Outputs that are omitted are allocated stream-ordered on the call's stream: inside a capture
they become allocation nodes of the graph, freed in it when dropped before the capture ends.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..runtime import ptxlib
from ..driver.array import DeviceArray, arrays_overlap, empty
from ..driver.stream import as_stream
from ._common import (F32, GRID_X_MAX, HALF_FLOAT, array, launch_elementwise, real, same,
                      suffix)

__all__ = ["CrossEntropy", "cross_entropy", "cross_entropy_backward", "accuracy_count", "sgd",
           "adamw", "step_increment", "embedding", "embedding_backward", "global_avg_pool",
           "global_avg_pool_backward"]

I32 = np.dtype(np.int32)
I64 = np.dtype(np.int64)
#: Label and id types, and their kernel-name suffixes.
INDEX_SUFFIX = {I32: "i32", I64: "i64"}
INDEX_TYPES = tuple(INDEX_SUFFIX)
#: The 16-bit types of AdamW's weight copy.
COPY_TYPES = tuple(d for d in HALF_FLOAT if d != F32)

_U64 = (1 << 64) - 1
#: Threads of the single block that reduces the per-row losses.
_REDUCE_THREADS = 512


class CrossEntropy(NamedTuple):
    """What :func:`cross_entropy` returns, all on the device.

    Attributes
    ----------
    loss : DeviceArray
        float32, one element: the mean over the rows not ignored (``reduction="mean"``) or
        the sum.
    row_loss : DeviceArray
        float32 of the labels' shape: each row's loss, 0 where the label is ignored.
    count : DeviceArray
        float32, one element: how many rows were not ignored (what
        :func:`cross_entropy_backward` divides by).
    """

    loss: DeviceArray
    row_loss: DeviceArray
    count: DeviceArray


# -- argument helpers ---------------------------------------------------------------------------
def _target(x, op: str, name: str, shape, dtypes, dev, s, reads, *, same_ok: bool = False,
            scalar: bool = False) -> DeviceArray:
    """The output ``name``: allocated when None, else checked (device, dtype, shape -- any
    one-element shape when ``scalar`` --, no overlap with ``reads`` unless it is the very
    same array and ``same_ok``)."""
    if x is None:
        return empty(shape, dtypes[0], device=dev, stream=s)
    arr = array(x, op, name, dtypes, device=dev, stream=s, written=True)
    if (arr.size != 1) if scalar else (arr.shape != tuple(shape)):
        want = "one element" if scalar else f"shape {tuple(shape)}"
        raise ValueError(f"{op}: {name} must have {want}, got shape {arr.shape}")
    for other, a in reads:
        if a is not None and arrays_overlap(arr, a) and not (
                same_ok and a.address == arr.address and a.shape == arr.shape
                and a.dtype == arr.dtype):
            raise ValueError(f"{op}: {name} overlaps {other}")
    return arr


def _ignore(op: str, ignore_index) -> tuple[int, int]:
    """``(value as 64 bits, flag)`` kernel arguments for ``ignore_index`` (None: no flag)."""
    if ignore_index is None:
        return 0, 0
    if isinstance(ignore_index, (bool, np.bool_)) or not isinstance(ignore_index,
                                                                    (int, np.integer)):
        raise TypeError(f"{op}: ignore_index must be an int or None, not "
                        f"{type(ignore_index).__name__}")
    v = int(ignore_index)
    if not -(1 << 63) <= v < (1 << 63):
        raise ValueError(f"{op}: ignore_index {v} does not fit 64 bits")
    return v & _U64, 1


def _rows(op: str, logits, labels, stream):
    """Logits ``(..., C)`` and labels ``(...)`` checked together: ``(x, labels, rows, cols,
    device)``."""
    x = array(logits, op, "logits", HALF_FLOAT, stream=stream)
    dev = x.device
    if not x.shape:
        raise ValueError(f"{op}: logits must have at least one dimension (classes last)")
    lab = array(labels, op, "labels", INDEX_TYPES, device=dev, stream=stream)
    if lab.shape != x.shape[:-1]:
        raise ValueError(f"{op}: labels has shape {lab.shape}, but logits of shape "
                         f"{x.shape} need labels of shape {x.shape[:-1]} (one per row)")
    cols = x.shape[-1]
    rows = lab.size
    if rows and cols == 0:
        raise ValueError(f"{op}: logits has no classes (shape {x.shape})")
    return x, lab, rows, cols, dev


def _row_block(cols: int) -> tuple:
    # Enough threads for about four elements each, 32 to 512 (a multiple of the warp).
    return (32 * min(16, max(1, -(-cols // 128))), 1, 1)


def _row_launch(dev, name: str, rows: int, cols: int, args: tuple, s) -> None:
    if rows:
        ptxlib.launch(dev, name, (min(rows, GRID_X_MAX), 1, 1), _row_block(cols), args, s)


def _mean(op: str, reduction) -> bool:
    if reduction not in ("mean", "sum"):
        raise ValueError(f"{op}: reduction must be 'mean' or 'sum', not {reduction!r}")
    return reduction == "mean"


def _by_pointer(op: str, name: str, value, dtype, dev, stream, check) -> tuple:
    """``(host value, device pointer)`` kernel arguments for a hyperparameter given either as
    a number (pointer 0) or as a one-element device array of ``dtype`` (read by the kernel)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and \
            not isinstance(value, (bool, np.bool_)):
        return check(value), 0
    arr = array(value, op, name, (dtype,), device=dev, stream=stream)
    if arr.size != 1:
        raise ValueError(f"{op}: {name} as a device array must have one element, got shape "
                         f"{arr.shape}")
    return 0, arr.address


def _finite(op: str, name: str, low: float | None = None):
    def check(value) -> float:
        v = real(op, name, value)
        if not math.isfinite(v) or (low is not None and v < low):
            bound = "" if low is None else f" and >= {low}"
            raise ValueError(f"{op}: {name} must be finite{bound}, got {value!r}")
        return v
    return check


def _hyper(op: str, name: str, value, low: float, high: float, closed_high: bool) -> float:
    v = real(op, name, value)
    if not (low <= v < high or (closed_high and v == high)):
        raise ValueError(f"{op}: {name} must be in [{low}, {high}{']' if closed_high else ')'}"
                         f", got {value!r}")
    return v


def _param_grad(op: str, param, grad, stream):
    """The float32 parameter and a gradient of its shape (float32, float16 or bfloat16)."""
    p = array(param, op, "param", (F32,), stream=stream, written=True)
    dev = p.device
    g = array(grad, op, "grad", HALF_FLOAT, device=dev, stream=stream)
    if g.shape != p.shape:
        raise ValueError(f"{op}: grad has shape {g.shape} but param has {p.shape}")
    return p, g, dev


def _state(op: str, name: str, x, p, dev, stream) -> DeviceArray:
    """An optimizer state buffer: float32, param's shape, disjoint from param."""
    arr = array(x, op, name, (F32,), device=dev, stream=stream, written=True)
    same(op, arr, p, name, "param")
    if arrays_overlap(arr, p):
        raise ValueError(f"{op}: {name} overlaps param")
    return arr


def _disjoint(op: str, named) -> None:
    """Refuse any overlap among the in-place operands of an update (None entries skipped)."""
    items = [(n, a) for n, a in named if a is not None]
    for i, (n1, a1) in enumerate(items):
        for n2, a2 in items[i + 1:]:
            if arrays_overlap(a1, a2):
                raise ValueError(f"{op}: {n1} overlaps {n2}")


# -- cross-entropy ------------------------------------------------------------------------------
def cross_entropy(logits, labels, *, ignore_index=None, reduction="mean", out=None,
                  row_loss=None, count=None, stream=None) -> CrossEntropy:
    """Softmax cross-entropy of ``logits`` against integer ``labels``, reduced on the device.

    ``row_loss[r] = logsumexp(logits[r]) - logits[r, labels[r]]`` (numerically stable, float32
    accumulation), then ``loss = sum(row_loss) / count`` (``"mean"``) or ``sum(row_loss)``
    (``"sum"``), summed in float64 in a fixed order (the same bits on every run).

    Parameters
    ----------
    logits : DeviceArray or device array-like
        ``(..., C)``: float32, float16 or bfloat16, C-contiguous; one row per label.
    labels : DeviceArray or device array-like
        int32 or int64 of shape ``logits.shape[:-1]``.  A label outside ``[0, C)`` that is not
        ``ignore_index`` makes its row's loss (hence the mean) NaN: the kernel cannot raise.
    ignore_index : int, optional
        Rows with this label contribute 0 and are not counted (PyTorch's ``ignore_index``).
    reduction : {"mean", "sum"}
        A mean over no counted rows is NaN, as in PyTorch.
    out, row_loss, count : DeviceArray, optional
        float32 outputs (``out`` and ``count`` of one element, ``row_loss`` of the labels'
        shape); allocated when omitted.  None may overlap an input or each other.
    stream : Stream, optional
        Default: the thread's current stream.

    Returns
    -------
    CrossEntropy
        ``(loss, row_loss, count)``, all device arrays.

    Raises
    ------
    TypeError
        Logits not float32/float16/bfloat16, labels not int32/int64, host data, a
        non-integer ``ignore_index``.
    ValueError
        Mismatched shapes, no classes, an unknown ``reduction``, overlapping outputs.
    """
    op = "cross_entropy"
    x, lab, rows, cols, dev = _rows(op, logits, labels, stream)
    ign, has = _ignore(op, ignore_index)
    mean = _mean(op, reduction)
    s = as_stream(stream, dev)
    reads = [("logits", x), ("labels", lab)]
    rl = _target(row_loss, op, "row_loss", lab.shape, (F32,), dev, s, reads)
    reads.append(("row_loss", rl))
    loss = _target(out, op, "out", (), (F32,), dev, s, reads, scalar=True)
    reads.append(("out", loss))
    cnt = _target(count, op, "count", (), (F32,), dev, s, reads, scalar=True)
    ls, ts = INDEX_SUFFIX[lab.dtype], suffix(x.dtype)
    _row_launch(dev, f"cross_entropy_forward_{ts}_{ls}", rows, cols,
                (x.address, lab.address, rl.address, rows, cols, ign, has), s)
    # Launched for no rows too: it writes the empty mean (NaN) and the count 0.
    ptxlib.launch(dev, f"cross_entropy_reduce_{ls}", (1, 1, 1), (_REDUCE_THREADS, 1, 1),
                  (rl.address, lab.address, loss.address, cnt.address, rows, ign, has, int(mean)), s)
    return CrossEntropy(loss, rl, cnt)


def cross_entropy_backward(logits, labels, count=None, *, ignore_index=None, reduction="mean",
                           grad_scale=1.0, out=None, stream=None):
    """Gradient of :func:`cross_entropy` with respect to the logits, in one kernel.

    ``dlogits[r] = (softmax(logits[r]) - onehot(labels[r])) * grad_scale / count`` for the
    mean (``grad_scale`` alone for the sum); zero rows where the label is ignored; NaN rows
    where it is out of range.

    Parameters
    ----------
    logits, labels : DeviceArray or device array-like
        As given to :func:`cross_entropy`.
    count : DeviceArray, optional
        The forward's ``count`` (float32, one element), read on the device.  Needed for the
        mean with an ``ignore_index``; without one, the mean divides by the number of rows
        (known on the host).  Not used by the sum.
    ignore_index : int, optional
    reduction : {"mean", "sum"}
    grad_scale : float, default 1.0
        The gradient of whatever consumed the loss (1 for the loss itself).
    out : DeviceArray, optional
        ``logits``' shape and dtype; may be ``logits`` itself (overwritten in place).
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``.

    Raises
    ------
    TypeError, ValueError
        As for :func:`cross_entropy`; also a mean with an ``ignore_index`` but no ``count``,
        or a ``count`` given to the sum.
    """
    op = "cross_entropy_backward"
    x, lab, rows, cols, dev = _rows(op, logits, labels, stream)
    ign, has = _ignore(op, ignore_index)
    mean = _mean(op, reduction)
    scale = _finite(op, "grad_scale")(grad_scale)
    s = as_stream(stream, dev)
    cnt_ptr = 0
    if not mean:
        if count is not None:
            raise ValueError(f"{op}: count is only read by reduction='mean'")
    elif count is not None:
        cnt = array(count, op, "count", (F32,), device=dev, stream=s)
        if cnt.size != 1:
            raise ValueError(f"{op}: count must have one element, got shape {cnt.shape}")
        cnt_ptr = cnt.address
    elif has:
        raise ValueError(f"{op}: with ignore_index the mean divides by the number of rows "
                         "counted, which only the device knows: pass count (the forward's "
                         "CrossEntropy.count)")
    elif rows:
        scale = scale / rows
    dx = _target(out, op, "out", x.shape, (x.dtype,), dev, s,
                 [("logits", x), ("labels", lab)], same_ok=True)
    _row_launch(dev, f"cross_entropy_backward_{suffix(x.dtype)}_{INDEX_SUFFIX[lab.dtype]}",
                rows, cols, (x.address, lab.address, cnt_ptr, scale, dx.address, rows, cols, ign, has),
                s)
    return dx


def accuracy_count(logits, labels, out=None, *, ignore_index=None, accumulate=False,
                   stream=None):
    """Count, on the device, the rows whose (first) argmax is their label.

    Parameters
    ----------
    logits, labels : DeviceArray or device array-like
        As for :func:`cross_entropy`.  A NaN counts as the row's maximum (as numpy's and
        PyTorch's argmax); ties go to the lower index.
    out : DeviceArray, optional
        int64, one element.  Allocated when omitted.
    ignore_index : int, optional
        Rows with this label are not counted.
    accumulate : bool, default False
        Add to ``out`` instead of overwriting it: an epoch's count, one host read at its end.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``.
    """
    op = "accuracy_count"
    x, lab, rows, cols, dev = _rows(op, logits, labels, stream)
    ign, has = _ignore(op, ignore_index)
    s = as_stream(stream, dev)
    if out is None:
        if accumulate:
            raise ValueError(f"{op}: accumulate=True adds to out, so out must be given")
        res = empty((), I64, device=dev, stream=s)
    else:
        res = _target(out, op, "out", (), (I64,), dev, s, [("logits", x), ("labels", lab)],
                      scalar=True)
    if not accumulate:
        res.fill(0, s)
    _row_launch(dev, f"accuracy_count_{suffix(x.dtype)}_{INDEX_SUFFIX[lab.dtype]}", rows,
                cols, (x.address, lab.address, res.address, rows, cols, ign, has), s)
    return res


# -- optimizers ---------------------------------------------------------------------------------
def sgd(param, grad, momentum_buffer=None, *, lr, momentum=0.0, weight_decay=0.0,
        stream=None):
    """One SGD step in place, PyTorch's rule (dampening 0, nesterov off)::

        d = grad + weight_decay * param
        buf = momentum * buf + d          (when momentum != 0)
        param -= lr * buf                 (lr * d without momentum)

    Parameters
    ----------
    param : DeviceArray
        float32, C-contiguous; updated in place.
    grad : DeviceArray or device array-like
        Same shape; float32, float16 or bfloat16 (widened to float32).
    momentum_buffer : DeviceArray, optional
        float32, param's shape, updated in place.  Start it at zero: the first step then
        stores ``d``, as PyTorch's lazily created buffer does.  Required when ``momentum``
        is not 0, ignored when it is.
    lr : float or DeviceArray
        A number, or a float32 device array of one element read by the kernel (a schedule
        that changes it between replays of a captured step).
    momentum, weight_decay : float
        Finite and >= 0.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``param``.

    Raises
    ------
    TypeError, ValueError
        Wrong dtypes or shapes, overlapping operands, a missing buffer, hyperparameters out
        of range.
    """
    op = "sgd"
    p, g, dev = _param_grad(op, param, grad, stream)
    mom = _finite(op, "momentum", 0.0)(momentum)
    wd = _finite(op, "weight_decay", 0.0)(weight_decay)
    rate, rate_ptr = _by_pointer(op, "lr", lr, F32, dev, stream, _finite(op, "lr"))
    buf = None
    if mom != 0.0:
        if momentum_buffer is None:
            raise ValueError(f"{op}: momentum={momentum} needs momentum_buffer")
        buf = _state(op, "momentum_buffer", momentum_buffer, p, dev, stream)
    _disjoint(op, (("param", p), ("grad", g), ("momentum_buffer", buf)))
    s = as_stream(stream, dev)
    n = p.size
    launch_elementwise(dev, f"sgd_{suffix(g.dtype)}", n,
                       (p.address, g.address, 0 if buf is None else buf.address, n, rate, rate_ptr, mom,
                        wd), s)
    return p


def adamw(param, grad, exp_avg, exp_avg_sq, *, step, lr, betas=(0.9, 0.999), eps=1e-8,
          weight_decay=1e-2, param_copy=None, stream=None):
    """One AdamW step in place, PyTorch's rule (decoupled weight decay), for step ``t >= 1``::

        param *= 1 - lr * weight_decay
        m += (1 - beta1) * (grad - m);     v = beta2 * v + (1 - beta2) * grad**2
        param -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    The bias corrections are computed on the device from ``t`` (see the module docstring for
    replaying a captured step: pass ``step`` as a device counter advanced by
    :func:`step_increment`).

    Parameters
    ----------
    param : DeviceArray
        float32 master weights, C-contiguous; updated in place.
    grad : DeviceArray or device array-like
        Same shape; float32, float16 or bfloat16 (widened to float32).
    exp_avg, exp_avg_sq : DeviceArray
        float32 first and second moments, param's shape, zero before the first step.
    step : int or DeviceArray
        ``t >= 1``, or an int32 device array of one element holding it (read by the kernel).
    lr : float or DeviceArray
        A number, or a float32 device array of one element read by the kernel.
    betas : (float, float)
        Each in ``[0, 1)``.
    eps, weight_decay : float
        Finite and >= 0.
    param_copy : DeviceArray, optional
        float16 or bfloat16 of param's shape: receives the updated weights, rounded (the
        low-precision weights of the next forward).
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``param``.

    Raises
    ------
    TypeError, ValueError
        Wrong dtypes or shapes, overlapping operands, hyperparameters out of range, a host
        ``step`` below 1.
    """
    op = "adamw"
    p, g, dev = _param_grad(op, param, grad, stream)
    m = _state(op, "exp_avg", exp_avg, p, dev, stream)
    v = _state(op, "exp_avg_sq", exp_avg_sq, p, dev, stream)
    try:
        b1, b2 = betas
    except (TypeError, ValueError):
        raise TypeError(f"{op}: betas must be a pair of floats, not {betas!r}") from None
    b1 = _hyper(op, "beta1", b1, 0.0, 1.0, False)
    b2 = _hyper(op, "beta2", b2, 0.0, 1.0, False)
    e = _finite(op, "eps", 0.0)(eps)
    wd = _finite(op, "weight_decay", 0.0)(weight_decay)
    rate, rate_ptr = _by_pointer(op, "lr", lr, F32, dev, stream, _finite(op, "lr"))

    def first_step(value) -> int:
        if isinstance(value, (float, np.floating)) or int(value) < 1 or int(value) >= 2**31:
            raise ValueError(f"{op}: step must be an int in [1, 2**31), got {value!r}")
        return int(value)

    t, t_ptr = _by_pointer(op, "step", step, I32, dev, stream, first_step)
    copy = None
    if param_copy is not None:
        copy = array(param_copy, op, "param_copy", COPY_TYPES, device=dev, stream=stream,
                     written=True)
        if copy.shape != p.shape:
            raise ValueError(f"{op}: param_copy has shape {copy.shape} but param has "
                             f"{p.shape}")
    _disjoint(op, (("param", p), ("grad", g), ("exp_avg", m), ("exp_avg_sq", v),
                   ("param_copy", copy)))
    s = as_stream(stream, dev)
    n = p.size
    csuf = "bf16" if copy is None else suffix(copy.dtype)
    launch_elementwise(dev, f"adamw_{suffix(g.dtype)}_{csuf}", n,
                       (p.address, g.address, m.address, v.address, 0 if copy is None else copy.address, n,
                        rate, rate_ptr, b1, b2, e, wd, t, t_ptr), s)
    return p


def step_increment(step, by=1, stream=None):
    """``step += by`` on the device: advance the int32 step counter of :func:`adamw`.

    Parameters
    ----------
    step : DeviceArray
        int32, one element.
    by : int, default 1
        Fits int32.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``step``.
    """
    op = "step_increment"
    c = array(step, op, "step", (I32,), stream=stream, written=True)
    if c.size != 1:
        raise ValueError(f"{op}: step must have one element, got shape {c.shape}")
    if isinstance(by, (bool, np.bool_)) or not isinstance(by, (int, np.integer)) or \
            not -(1 << 31) <= int(by) < (1 << 31):
        raise ValueError(f"{op}: by must be an int32 value, got {by!r}")
    dev = c.device
    ptxlib.launch(dev, "step_increment_i32", (1, 1, 1), (32, 1, 1),
                  (c.address, int(by) & 0xFFFFFFFF), as_stream(stream, dev))
    return c


# -- embedding ----------------------------------------------------------------------------------
def _dim_block(dim: int) -> tuple:
    return (32 * min(8, max(1, -(-dim // 32))), 1, 1)


def embedding(weight, ids, out=None, stream=None):
    """Gather rows: ``out[..., :] = weight[ids[...], :]``.

    Parameters
    ----------
    weight : DeviceArray or device array-like
        ``(num_embeddings, dim)``: float32, float16 or bfloat16, C-contiguous.
    ids : DeviceArray or device array-like
        int32 or int64, any shape.  An id outside ``[0, num_embeddings)`` gives a row of NaN.
    out : DeviceArray, optional
        ``ids.shape + (dim,)`` of weight's dtype; allocated when omitted.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``.
    """
    op = "embedding"
    w = array(weight, op, "weight", HALF_FLOAT, ndim=2, stream=stream)
    dev = w.device
    idx = array(ids, op, "ids", INDEX_TYPES, device=dev, stream=stream)
    vocab, dim = w.shape
    s = as_stream(stream, dev)
    res = _target(out, op, "out", idx.shape + (dim,), (w.dtype,), dev, s,
                  [("weight", w), ("ids", idx)])
    n = idx.size
    if n and dim:
        ptxlib.launch(dev, f"embedding_{suffix(w.dtype)}_{INDEX_SUFFIX[idx.dtype]}",
                      (min(n, GRID_X_MAX), 1, 1), _dim_block(dim),
                      (w.address, idx.address, res.address, n, dim, vocab), s)
    return res


def embedding_backward(dy, ids, num_embeddings=None, *, out=None, accumulate=False,
                       stream=None):
    """Gradient of :func:`embedding` with respect to its weight: a scatter-add in float32.

    ``dweight[ids[r], :] += dy[r, :]`` with float32 atomics: rows sharing an id add up, in an
    order that may differ between runs (the last bits may too).  Out-of-range ids add nothing.

    Parameters
    ----------
    dy : DeviceArray or device array-like
        ``ids.shape + (dim,)``: float32, float16 or bfloat16.
    ids : DeviceArray or device array-like
        int32 or int64.
    num_embeddings : int, optional
        Rows of the weight; taken from ``out`` when omitted (one of them is needed).
    out : DeviceArray, optional
        float32 ``(num_embeddings, dim)``; allocated when omitted.
    accumulate : bool, default False
        Add into ``out`` (gradient accumulation, or a tied weight's second use) instead of
        zeroing it first.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``.
    """
    op = "embedding_backward"
    g = array(dy, op, "dy", HALF_FLOAT, stream=stream)
    dev = g.device
    idx = array(ids, op, "ids", INDEX_TYPES, device=dev, stream=stream)
    if g.shape[:-1] != idx.shape or not g.shape:
        raise ValueError(f"{op}: dy must have shape ids.shape + (dim,) = {idx.shape} + (dim,),"
                         f" got {g.shape}")
    dim = g.shape[-1]
    if num_embeddings is None:
        if out is None:
            raise ValueError(f"{op}: needs num_embeddings or out")
        num_embeddings = array(out, op, "out", (F32,), device=dev, stream=stream).shape[0]
    if isinstance(num_embeddings, (bool, np.bool_)) or \
            not isinstance(num_embeddings, (int, np.integer)) or num_embeddings < 0:
        raise ValueError(f"{op}: num_embeddings must be an int >= 0, got {num_embeddings!r}")
    vocab = int(num_embeddings)
    if out is None and accumulate:
        raise ValueError(f"{op}: accumulate=True adds into out, so out must be given")
    s = as_stream(stream, dev)
    res = _target(out, op, "out", (vocab, dim), (F32,), dev, s, [("dy", g), ("ids", idx)])
    if not accumulate:
        res.fill(0, s)
    n = idx.size
    if n and dim:
        ptxlib.launch(dev, f"embedding_backward_{suffix(g.dtype)}_{INDEX_SUFFIX[idx.dtype]}",
                      (min(n, GRID_X_MAX), 1, 1), _dim_block(dim),
                      (g.address, idx.address, res.address, n, dim, vocab), s)
    return res


# -- global average pooling ---------------------------------------------------------------------
#: Warps (one plane each) per block of the pooling kernel.
_POOL_WARPS = 8


def global_avg_pool(x, out=None, stream=None):
    """Mean over the spatial positions: ``(N, C, *spatial) -> (N, C)``.

    Parameters
    ----------
    x : DeviceArray or device array-like
        Channels-first, C-contiguous, at least 3-D; float32, float16 or bfloat16 (summed in
        float32).
    out : DeviceArray, optional
        ``(N, C)`` of x's dtype; allocated when omitted.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``.
    """
    op = "global_avg_pool"
    a = array(x, op, "x", HALF_FLOAT, stream=stream)
    if len(a.shape) < 3:
        raise ValueError(f"{op}: x must be (N, C, *spatial) with at least one spatial "
                         f"dimension, got shape {a.shape}")
    dev = a.device
    s = as_stream(stream, dev)
    rows = a.shape[0] * a.shape[1]
    inner = a.size // rows if rows else 0
    if rows and not inner:
        raise ValueError(f"{op}: x has no spatial positions to average (shape {a.shape})")
    res = _target(out, op, "out", a.shape[:2], (a.dtype,), dev, s, [("x", a)])
    if rows:
        blocks = min(-(-rows // _POOL_WARPS), GRID_X_MAX)
        ptxlib.launch(dev, f"global_avg_pool_{suffix(a.dtype)}", (blocks, 1, 1),
                      (32 * _POOL_WARPS, 1, 1), (a.address, res.address, rows, inner), s)
    return res


def global_avg_pool_backward(dy, x_shape=None, *, out=None, stream=None):
    """Gradient of :func:`global_avg_pool`: ``dx[n, c, ...] = dy[n, c] / (spatial size)``.

    Parameters
    ----------
    dy : DeviceArray or device array-like
        ``(N, C)``: float32, float16 or bfloat16.
    x_shape : tuple of int, optional
        The forward input's shape ``(N, C, *spatial)``; taken from ``out`` when omitted.
    out : DeviceArray, optional
        ``dx``, C-contiguous, of dy's dtype; allocated when omitted.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``.
    """
    op = "global_avg_pool_backward"
    g = array(dy, op, "dy", HALF_FLOAT, ndim=2, stream=stream)
    dev = g.device
    if x_shape is None:
        if out is None:
            raise ValueError(f"{op}: needs x_shape or out")
        x_shape = array(out, op, "out", (g.dtype,), device=dev, stream=stream).shape
    try:
        xs = tuple(int(v) for v in x_shape)
    except TypeError:
        raise TypeError(f"{op}: x_shape must be a sequence of ints, not {x_shape!r}") from None
    if len(xs) < 3 or xs[:2] != g.shape or min(xs) < 0:
        raise ValueError(f"{op}: x_shape must be (N, C, *spatial) with (N, C) = {g.shape}, "
                         f"got {xs}")
    s = as_stream(stream, dev)
    res = _target(out, op, "out", xs, (g.dtype,), dev, s, [("dy", g)])
    n = res.size
    inner = n // g.size if g.size else 0
    if n:
        launch_elementwise(dev, f"global_avg_pool_backward_{suffix(g.dtype)}", n,
                           (g.address, res.address, n, inner), s)
    return res
