"""Wrappers of ``norm.ptx``: layer norm and RMS norm over the last dimension, forward and
backward, with the residual add of a pre-norm transformer block fused in front.

- :func:`layer_norm`, :func:`rms_norm`: ``y = norm(x)``, or with ``residual`` given
  ``s = x + residual`` (returned as ``residual_out``, the next block's residual) and
  ``y = norm(s)``, in one pass; the per-row statistics for the backward come back with them
  (:class:`NormResult`).
- :func:`layer_norm_backward`, :func:`rms_norm_backward`: ``(dx, dweight[, dbias])``; with
  ``dresidual`` (the gradient arriving along the residual stream) added into ``dx``, which is
  then the gradient of both ``x`` and ``residual`` of the fused forward.

The arithmetic
--------------
For each row of ``s`` (``x`` itself without a residual), all in float32::

    s = float32(x) + float32(residual), rounded once to x's dtype   (torch's x + residual)
    layer:  mean = sum(s) / D,   rstd = 1 / sqrt(sum((s - mean)**2) / D + eps)
            y = (s - mean) * rstd * weight + bias
    rms:    rstd = 1 / sqrt(sum(s**2) / D + eps),   y = s * rstd * weight

``y`` is rounded once to x's dtype.  The rounded ``s`` is what is normalised, so the fused
op is exactly ``norm(x + residual)`` as torch computes it in that dtype, and its backward takes
``residual_out`` as its ``x``.  The variance is the centred sum of the row (two passes over
registers, not ``E[s**2] - mean**2``).  The backward, with ``xhat = (s - mean) * rstd``
(RMS: ``s * rstd``) and ``g = dy * weight``::

    layer:  dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) + dresidual
    rms:    dx = rstd * (g - xhat * mean(g * xhat)) + dresidual
    dweight = sum over rows of dy * xhat,   dbias = sum over rows of dy

:func:`cudalibs.testing.ref.add_layer_norm` / :func:`~cudalibs.testing.ref.add_rms_norm` and
the backward references (``dresidual=``) are the float64 references of the same rules.

Types
-----
``x`` (and ``residual``, ``dy``, ``dresidual``, every output of x's shape) is float32, float16
or bfloat16; the weight and the bias are each float32 or x's dtype, in any mix (mixed-precision
training keeps float32 parameters beside 16-bit activations): they are read as stored, at the
same speed.  ``dweight`` has the weight's dtype, ``dbias`` the bias's (``bias_dtype``,
default the weight's), each a float32 sum rounded once.  The statistics are float32 of shape
``x.shape[:-1] + (1,)``, as :func:`cudalibs.cudnn.layer_norm` and
``torch.native_layer_norm`` return them; the backward takes any float32 arrays of one value
per row.

How it runs
-----------
When the rows are 16-byte aligned (``D`` a multiple of 8 for 16-bit types, of 4 for float32,
every array at a 16-byte boundary) and ``D`` is at most 32768 (16-bit) / 16384 (float32) in
the forward, 16384 / 8192 in the backward, each row is served by a group of threads (a power
of two up to 32, or a multiple of 32: :func:`cudalibs.runtime.norms.geometry`) that loads it
in 16-byte vectors and keeps it in registers as stored: the forward reads ``x`` (and
``residual``) once and writes ``y`` (and ``residual_out``) once, the least a memory-bound op
can move.  Other rows take
a kernel for any ``D`` and alignment that walks each row three times (the later passes hit
the caches): correct for every shape, slower.  Weights, biases and statistics go through the
read-only cache; the rows are streamed (evict-first loads and stores).

``dweight`` and ``dbias`` are deterministic: each block of the backward keeps the float32
sums of its rows' columns (in registers, or for the any-``D`` kernel in its own row of a
scratch array), writes one partial row, and a second launch adds the partial rows of each
column in a fixed order -- no floating-point atomics.  The number of blocks is what the
device holds at once (an occupancy query, made once per kernel and device), so results are
bitwise the same from run to run, from thread to thread, on one device.  The scratch
(``blocks x D`` float32, twice for layer norm) comes from the stream-ordered pool on the
call's stream and is freed after the call: a CUDA graph captures it all.  Launch
geometry depends only on the dtype, ``D`` and alignment, and is cached.

Aliasing
--------
An output may be one of the inputs of its own shape itself (``out`` may be ``x`` or
``residual``; ``residual_out`` may be ``x`` or ``residual``, the usual in-place residual
update; ``dx`` may be ``dy``, ``x`` or ``dresidual``): every element is read by the thread
that writes it, before it writes it.  Any other overlap -- two outputs, a partial overlap, an
output over a parameter or a statistic -- is refused.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .. import dtypes as _dtypes
from ..driver.array import DeviceArray, arrays_overlap, empty
from ..driver.stream import as_stream
from ..runtime import ptxlib
from ..runtime.norms import geometry as _geometry
from ..runtime.norms import launch_norm_forward, vector_aligned
from ._common import F32, HALF_FLOAT, U32_MAX, array, flag, real, same, suffix

__all__ = ["NormResult", "layer_norm", "rms_norm", "layer_norm_backward", "rms_norm_backward"]

#: Block of the parameter-gradient sums.
_SUM_THREADS = 256
#: Blocks per SM of the any-D backward at most: each adds a D-long partial row to the scratch.
_ANY_BWD_PER_SM = 2
_F32_MAX = 3.4028234663852886e38


class NormResult(NamedTuple):
    """What :func:`layer_norm` and :func:`rms_norm` return.

    Attributes
    ----------
    y : DeviceArray
        The normalised output, x's shape and dtype.
    residual_out : DeviceArray or None
        ``x + residual`` rounded to x's dtype (the next block's residual, and the backward's
        ``x``); None without ``residual``.
    mean : DeviceArray or None
        float32, ``x.shape[:-1] + (1,)``; None for RMS norm or with ``save_stats=False``.
    rstd : DeviceArray or None
        float32, the inverse standard deviation (RMS norm: inverse root mean square) of each
        row, same shape; None with ``save_stats=False``.
    """

    y: DeviceArray
    residual_out: DeviceArray | None
    mean: DeviceArray | None
    rstd: DeviceArray | None


#: ``(device ordinal, kernel, threads, shared memory, cap per SM) -> blocks`` of a backward
#: grid.
_RESIDENT: dict = {}


def _resident_blocks(dev, name: str, threads: int, shared: int, per_sm_cap: int = 32) -> int:
    """The blocks ``dev`` holds at once of the kernel ``name`` (an occupancy query, made once
    per kernel, block and device), at most ``per_sm_cap`` per SM."""
    key = (dev.ordinal, name, threads, shared, per_sm_cap)
    n = _RESIDENT.get(key)
    if n is None:
        per_sm = ptxlib.kernel(dev, name).max_active_blocks_per_sm((threads, 1, 1), shared)
        n = _RESIDENT[key] = min(max(1, per_sm), per_sm_cap) * int(dev.multiprocessor_count)
    return n


# -- argument checks ----------------------------------------------------------------------------
def _rows(op: str, x: DeviceArray) -> tuple[int, int]:
    """``(rows, D)`` of ``x``, normalised over its last dimension."""
    if not x.shape:
        raise ValueError(f"{op}: x must have at least one dimension (the normalised one)")
    d = x.shape[-1]
    if d == 0:
        raise ValueError(f"{op}: x has shape {x.shape}: its last dimension, the normalised one, "
                         "must not be empty")
    if d > U32_MAX:
        raise ValueError(f"{op}: x's last dimension {d} exceeds the kernel's 32-bit limit "
                         f"{U32_MAX}")
    return x.size // d, d


def _param_dtypes(x: DeviceArray) -> tuple:
    return (F32,) if x.dtype == F32 else (F32, x.dtype)


def _param(op: str, name: str, p, x: DeviceArray, d: int, stream) -> DeviceArray:
    """A weight or bias: ``(D,)``, float32 or x's dtype, on x's device."""
    arr = array(p, op, name, _param_dtypes(x), device=x.device, stream=stream)
    if arr.shape != (d,):
        raise ValueError(f"{op}: {name} must have shape ({d},), the last dimension of x, got "
                         f"{arr.shape}")
    return arr


def _stats(op: str, name: str, a, rows: int, dev, stream) -> DeviceArray:
    """A statistic of the forward: float32, one value per row of x (any shape)."""
    arr = array(a, op, name, (F32,), device=dev, stream=stream)
    if arr.size != rows:
        raise ValueError(f"{op}: {name} must hold one float32 per row of x ({rows}), got shape "
                         f"{arr.shape}")
    return arr


def _like(op: str, name: str, a, x: DeviceArray, stream, *, written=False, optional=True):
    """An array of x's shape and dtype (None stays None when ``optional``)."""
    if a is None and optional:
        return None
    arr = array(a, op, name, HALF_FLOAT, device=x.device, stream=stream, written=written)
    same(op, arr, x, name, "x")
    return arr


def _eps(op: str, eps) -> float:
    e = real(op, "eps", eps)
    if not (math.isfinite(e) and 0 <= e <= _F32_MAX):
        raise ValueError(f"{op}: eps must be a finite number >= 0 (a float32), got {eps!r}")
    return e


def _output_dtype(op: str, what: str, dtype, x: DeviceArray):
    """A parameter gradient's dtype given by name: float32 or x's dtype."""
    dt = _dtypes.lookup(dtype, f"{op}: {what}").numpy
    if dt not in _param_dtypes(x):
        raise TypeError(f"{op}: {what} must be float32 or x's dtype ({x.dtype}), not {dt}")
    return dt


def _grad(op: str, name: str, a, dtype, d: int, dev, stream) -> DeviceArray | None:
    """A given parameter gradient, checked: ``(D,)`` of ``dtype``."""
    if a is None:
        return None
    arr = array(a, op, name, None, device=dev, stream=stream, written=True)
    if arr.shape != (d,):
        raise ValueError(f"{op}: {name} must have shape ({d},), got {arr.shape}")
    if arr.dtype != dtype:
        raise TypeError(f"{op}: {name} has dtype {arr.dtype}, expected {dtype}")
    return arr


def _same_elements(a: DeviceArray, b: DeviceArray) -> bool:
    return a.address == b.address and a.shape == b.shape and a.dtype == b.dtype


def _apart(op: str, written, inputs, others) -> None:
    """Refuse overlaps.  ``written``: ``(name, array, aliasable)``; each written array must not
    overlap the other written arrays or ``others`` at all, nor the ``inputs`` unless it is
    aliasable and that very input (same address, shape and dtype)."""
    written = [(n, a, ok) for n, a, ok in written if a is not None]
    for i, (wn, wa, ok) in enumerate(written):
        for rn, ra in inputs:
            if ra is not None and arrays_overlap(wa, ra) and not (ok and _same_elements(wa, ra)):
                raise ValueError(f"{op}: {wn} overlaps {rn}" + (
                    " (an output may be an input of its shape itself, not part of one)"
                    if ok else ""))
        for rn, ra in list(others) + [(n, a) for n, a, _ in written[i + 1:]]:
            if ra is not None and arrays_overlap(wa, ra):
                raise ValueError(f"{op}: {wn} overlaps {rn}")


def _aligned(d: int, x: DeviceArray, *arrays) -> bool:
    """Whether the vector kernels can take the rows: D whole 16-byte vectors, every array
    at a 16-byte boundary."""
    return vector_aligned(d, x.dtype.itemsize, x.address,
                          *(a.address for a in arrays if a is not None))


def _addr(a) -> int:
    return 0 if a is None else a.address


def _new(shape, dtype, dev, s) -> DeviceArray:
    return empty(shape, dtype, device=dev, stream=s)


# -- forward ------------------------------------------------------------------------------------
def _forward(op, rms, x, weight, bias, eps, residual, out, residual_out, save_stats, stream):
    xa = array(x, op, "x", HALF_FLOAT, stream=stream)
    dev = xa.device
    rows, d = _rows(op, xa)
    w = _param(op, "weight", weight, xa, d, stream)
    b = None if bias is None else _param(op, "bias", bias, xa, d, stream)
    e = _eps(op, eps)
    save = flag(op, "save_stats", save_stats)
    r = _like(op, "residual", residual, xa, stream)
    if r is None and residual_out is not None:
        raise ValueError(f"{op}: residual_out receives x + residual, so it needs residual")
    y = _like(op, "out", out, xa, stream, written=True)
    ro = _like(op, "residual_out", residual_out, xa, stream, written=True)
    _apart(op, (("out", y, True), ("residual_out", ro, True)), (("x", xa), ("residual", r)),
           (("weight", w), ("bias", b)))
    s = as_stream(stream, dev)
    if y is None:
        y = _new(xa.shape, xa.dtype, dev, s)
    if r is not None and ro is None:
        ro = _new(xa.shape, xa.dtype, dev, s)
    stats = xa.shape[:-1] + (1,)
    mean = _new(stats, F32, dev, s) if save and not rms else None
    rstd = _new(stats, F32, dev, s) if save else None
    launch_norm_forward(dev, rms, xa.dtype, xa.address, _addr(r), y.address, _addr(ro),
                        w.address, w.dtype, _addr(b), None if b is None else b.dtype,
                        _addr(mean), _addr(rstd), rows, d, e, s)
    return NormResult(y, ro, mean, rstd)


def layer_norm(x, weight, bias=None, *, eps=1e-5, residual=None, out=None, residual_out=None,
               save_stats=True, stream=None) -> NormResult:
    """Layer norm over the last dimension of ``x``, optionally of ``x + residual``.

    ``y = (s - mean) * rstd * weight + bias`` with ``s = x`` or, when ``residual`` is given,
    ``s = x + residual`` rounded to x's dtype (written to ``residual_out``); ``mean`` and
    ``rstd = 1 / sqrt(var + eps)`` (biased variance) are float32 per row.  One pass over the
    data for aligned rows (see the module docstring).

    Parameters
    ----------
    x : DeviceArray or device array-like
        ``(..., D)``, float32, float16 or bfloat16, C-contiguous; every leading index is a row.
    weight : DeviceArray
        ``(D,)``, float32 or x's dtype.
    bias : DeviceArray, optional
        ``(D,)``, float32 or x's dtype (not necessarily the weight's); no bias when None.
    eps : float, default 1e-5
        Added to the variance; finite, ``>= 0``.
    residual : DeviceArray, optional
        x's shape and dtype: normalise ``x + residual`` and return the sum.
    out : DeviceArray, optional
        ``y``: x's shape and dtype; may be ``x`` or ``residual`` itself.  Allocated when
        omitted.
    residual_out : DeviceArray, optional
        Receives ``x + residual`` (only with ``residual``); may be ``x`` or ``residual``
        itself (an in-place residual stream).  Allocated when omitted.
    save_stats : bool, default True
        Return ``mean`` and ``rstd`` for :func:`layer_norm_backward`; without them the kernel
        writes neither.
    stream : Stream, optional
        Default: the thread's current stream.

    Returns
    -------
    NormResult
        ``(y, residual_out, mean, rstd)``; ``residual_out`` None without ``residual``, the
        statistics None without ``save_stats``.

    Raises
    ------
    TypeError
        ``x`` not float32/float16/bfloat16; a parameter neither float32 nor x's dtype;
        ``residual``/``out``/``residual_out`` not of x's dtype; host data; ``eps`` not a
        number, ``save_stats`` not a bool.
    ValueError
        A parameter not ``(D,)``; arrays not of x's shape, not C-contiguous, on another
        device; an empty last dimension; ``residual_out`` without ``residual``; overlapping
        outputs (see Aliasing); a negative or non-finite ``eps``.
    ClosedError
        An array's memory was freed.
    """
    return _forward("layer_norm", False, x, weight, bias, eps, residual, out, residual_out,
                    save_stats, stream)


def rms_norm(x, weight, *, eps=1e-5, residual=None, out=None, residual_out=None,
             save_stats=True, stream=None) -> NormResult:
    """RMS norm over the last dimension of ``x``, optionally of ``x + residual``.

    ``y = s * rstd * weight`` with ``rstd = 1 / sqrt(mean(s**2) + eps)`` (float32 per row) and
    ``s`` as in :func:`layer_norm`.  ``torch.nn.functional.rms_norm``'s default ``eps`` is the
    dtype's machine epsilon: pass it explicitly to compare.

    Parameters
    ----------
    x, weight, eps, residual, out, residual_out, stream
        As for :func:`layer_norm`.
    save_stats : bool, default True
        Return ``rstd`` for :func:`rms_norm_backward`.

    Returns
    -------
    NormResult
        ``(y, residual_out, None, rstd)``.

    Raises
    ------
    TypeError, ValueError, ClosedError
        As for :func:`layer_norm`.
    """
    return _forward("rms_norm", True, x, weight, None, eps, residual, out, residual_out,
                    save_stats, stream)


# -- backward -----------------------------------------------------------------------------------
def _outputs(op: str, out, n: int) -> tuple:
    """``out`` as ``n`` entries (arrays or None)."""
    if out is None:
        return (None,) * n
    if not isinstance(out, (tuple, list)) or len(out) != n:
        names = "(dx, dweight, dbias)" if n == 3 else "(dx, dweight)"
        raise TypeError(f"{op}: out must be a tuple {names} (entries may be None), not "
                        f"{type(out).__name__}" + (f" of {len(out)}" if isinstance(
                            out, (tuple, list)) else ""))
    return tuple(out)


def _backward(op, rms, dy, x, weight, mean, rstd, dresidual, out, bias_dtype, stream):
    xa = array(x, op, "x", HALF_FLOAT, stream=stream)
    dev = xa.device
    dya = _like(op, "dy", dy, xa, stream, optional=False)
    rows, d = _rows(op, xa)
    w = _param(op, "weight", weight, xa, d, stream)
    m = None if rms else _stats(op, "mean", mean, rows, dev, stream)
    r = _stats(op, "rstd", rstd, rows, dev, stream)
    dr = _like(op, "dresidual", dresidual, xa, stream)
    outs = _outputs(op, out, 2 if rms else 3)
    dx = _like(op, "dx", outs[0], xa, stream, written=True)
    dw = _grad(op, "dweight", outs[1], w.dtype, d, dev, stream)
    db, bdt = None, None
    if not rms:
        if bias_dtype is not None:
            bdt = _output_dtype(op, "bias_dtype", bias_dtype, xa)
        elif outs[2] is not None:
            bdt = array(outs[2], op, "dbias", _param_dtypes(xa), device=dev, stream=stream,
                        written=True).dtype
        else:
            bdt = w.dtype
        db = _grad(op, "dbias", outs[2], bdt, d, dev, stream)
    _apart(op, (("dx", dx, True), ("dweight", dw, False), ("dbias", db, False)),
           (("dy", dya), ("x", xa), ("dresidual", dr)), (("weight", w), ("mean", m), ("rstd", r)))
    s = as_stream(stream, dev)
    if dx is None:
        dx = _new(xa.shape, xa.dtype, dev, s)
    if dw is None:
        dw = _new((d,), w.dtype, dev, s)
    if not rms and db is None:
        db = _new((d,), bdt, dev, s)
    grads = (dx, dw) if rms else (dx, dw, db)
    if not rows:
        # sums over no rows
        for g in grads[1:]:
            g.fill(0, s)
        return grads
    g = _geometry("bwd", rms, xa.dtype.itemsize, d, _aligned(d, xa, dya, w, dr, dx))
    name = f"{op.removesuffix('_backward')}_bwd_{suffix(xa.dtype)}_{g.kind}"
    resident = (_resident_blocks(dev, name, g.threads, g.shared, _ANY_BWD_PER_SM)
                if g.kind == "any" else _resident_blocks(dev, name, g.threads, g.shared))
    blocks = min(-(-rows // (g.threads // g.tpr)), resident)
    nsums = len(grads) - 1
    part = _new((nsums * blocks, d), F32, dev, s)
    ptxlib.launch(dev, name, (blocks, 1, 1), (g.threads, 1, 1),
                  (dya.address, xa.address, w.address, _addr(m), r.address, _addr(dr),
                   dx.address, part.address, rows, d, g.tpr, int(w.dtype == F32)), s,
                  g.shared)
    for i, grad in enumerate(grads[1:]):
        ptxlib.launch(dev, f"norm_param_grad_{suffix(grad.dtype)}", (-(-d // 32), 1, 1),
                      (_SUM_THREADS, 1, 1),
                      (part.address + i * blocks * d * 4, grad.address, blocks, d), s)
    return grads


def layer_norm_backward(dy, x, weight, mean, rstd, *, dresidual=None, out=None,
                        bias_dtype=None, stream=None) -> tuple:
    """Gradients of :func:`layer_norm`: ``(dx, dweight, dbias)``.

    Parameters
    ----------
    dy : DeviceArray or device array-like
        The gradient of ``y``: x's shape and dtype.
    x : DeviceArray
        What was normalised: the forward's ``x``, or its ``residual_out`` when it added a
        residual.
    weight : DeviceArray
        As given to the forward.
    mean, rstd : DeviceArray
        The forward's statistics: float32, one value per row (any shape).
    dresidual : DeviceArray, optional
        The gradient arriving along the residual stream (of the forward's ``residual_out``):
        x's shape and dtype, added into ``dx``, which is then the gradient of both ``x`` and
        ``residual`` of the fused forward.
    out : tuple, optional
        ``(dx, dweight, dbias)``, each an array or None (allocated).  ``dx`` (x's shape and
        dtype) may be ``dy``, ``x`` or ``dresidual`` itself.
    bias_dtype : dtype-like, optional
        dbias's dtype when it is allocated: float32 or x's dtype; default the weight's (or the
        given dbias's).
    stream : Stream, optional

    Returns
    -------
    tuple of DeviceArray
        ``dx`` (x's shape and dtype), ``dweight`` (the weight's dtype), ``dbias`` (``(D,)``).
        ``dweight`` and ``dbias`` are float32 sums over the rows, reduced deterministically,
        rounded once.

    Raises
    ------
    TypeError
        Wrong dtypes (``dy``, ``dresidual``, ``dx`` not x's; the weight, ``dweight``,
        ``dbias`` or ``bias_dtype`` neither float32 nor x's; statistics not float32), host
        data, ``out`` not a tuple of three.
    ValueError
        Shapes that do not match x's, statistics without one value per row, overlapping
        outputs (see Aliasing), arrays on another device or not C-contiguous.
    ClosedError
        An array's memory was freed.
    """
    return _backward("layer_norm_backward", False, dy, x, weight, mean, rstd, dresidual, out,
                     bias_dtype, stream)


def rms_norm_backward(dy, x, weight, rstd, *, dresidual=None, out=None,
                      stream=None) -> tuple:
    """Gradients of :func:`rms_norm`: ``(dx, dweight)``.

    Parameters
    ----------
    dy, x, weight, dresidual, stream
        As for :func:`layer_norm_backward`.
    rstd : DeviceArray
        The forward's ``rstd``: float32, one value per row.
    out : tuple, optional
        ``(dx, dweight)``, each an array or None.

    Returns
    -------
    tuple of DeviceArray
        ``(dx, dweight)``.

    Raises
    ------
    TypeError, ValueError, ClosedError
        As for :func:`layer_norm_backward`.
    """
    return _backward("rms_norm_backward", True, dy, x, weight, None, rstd, dresidual, out,
                     None, stream)
