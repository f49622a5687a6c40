"""Wrappers of ``fp8.ptx``: what fp8 training needs around its GEMMs.

- :func:`amax`: ``max(|x|)`` into a float32 device scalar, in one pass (a block reduction,
  then one ``atomicMax`` per block), or folded into an amax already there.
- :func:`quantize_fp8`: ``fp8(saturate(x * scale))``, rounded to nearest even, with ``scale``
  read from device memory; optionally the amax of ``x`` in the same pass.
- :func:`dequantize_fp8`: ``q * scale_inv`` in float32, to float32, float16 or bfloat16.
- :func:`delayed_scale_update`: Transformer Engine's delayed scaling -- roll the amax history,
  record the newest amax, derive the next scale and its inverse -- in one launch.

fp8 formats: ``float8_e4m3fn`` (largest finite value 448, no infinities) and ``float8_e5m2``
(largest finite 57344), the ml_dtypes types of :mod:`cudalibs.dtypes`.  The conversion is bit
for bit ml_dtypes' ``clip(v, -max, max).astype(fp8)``: round to nearest even, values beyond the
range (infinities included) saturate to ``±max``, NaN stays NaN (with its sign).

Amax
----
The maximum of ``|x|`` propagates NaN, as ``torch.amax(x.abs())`` does: one NaN makes the
amax NaN (an infinity makes it inf), so an overflow upstream shows in the scale's history
instead of being skipped.  The kernels combine blocks with ``atomicMax`` on the float bits of
``|x|``, whose integer order is the order of non-negative floats, every NaN above +inf.  That
is why an amax to fold into (``accumulate=True``) must hold a non-negative value (any value
these functions wrote, or a zero); a negative one would read as larger than any NaN.  Without
``accumulate`` the scalar is zeroed first (a memset on the stream), so the amax of an empty
array is 0.

Delayed scaling, the exact rule
-------------------------------
For each tensor ``j`` (column ``j`` of a ``[history_len, n]`` history; a ``[history_len]``
history is one tensor), with ``scaled_max = float32(fp8_max * 2**-margin)``::

    history[1:, j] = history[:-1, j]; history[0, j] = amax[j]    (the oldest entry drops out)
    amax_ref = max(history[:, j])      algo="max"  (NaN-propagating: a NaN or inf in the
             = amax[j]                 algo="most_recent"        window keeps the scale)
    scale[j] = scaled_max / amax_ref   in float32, when 0 < amax_ref < inf; FLT_MAX if the
                                       quotient overflows (an amax_ref that small)
             = scale[j] unchanged      otherwise (amax_ref 0, negative, inf or NaN)
    scale_inv[j] = 1 / scale[j]        the reciprocal of the stored float32 scale

This is Transformer Engine's ``DelayedScaling``: the same window (the last ``history_len``
amaxes, this step's included), the same reference amax and scale.  Two differences of form:
the history is kept newest first (TE rotates a ring whose slot 0 the next GEMM fills), and the
amax comes from the caller (:func:`quantize_fp8` or :func:`amax`), so a step records its amax,
updates, and quantizes the next step with the new ``scale``.
:func:`cudalibs.testing.ref.delayed_scale_update` is the float64 reference of the same rule.

Whole-step CUDA graphs
----------------------
Nothing here reads a device value on the host.  ``scale``, ``scale_inv``, the amax and the
history are read and written by the kernels through pointers, so a step captured once
(:func:`cudalibs.graph.capture`) quantizes, records the amax and updates the scale at every
replay, each replay using the scale the previous one wrote; a scale the host writes between
replays (``scale.copy_(...)``) is picked up the same way.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .. import dtypes as _dtypes
from ..runtime import ptxlib
from ..driver.array import DeviceArray, arrays_overlap, empty
from ..driver.stream import as_stream
from ._common import F32, GRID_X_MAX, HALF_FLOAT, array, launch_elementwise, real, suffix

__all__ = ["amax", "quantize_fp8", "dequantize_fp8", "delayed_scale_update"]

#: The fp8 types and their kernel-name suffixes.
FP8_SUFFIX = {d: s for d, s in ((_dtypes.float8_e4m3fn, "e4m3"), (_dtypes.float8_e5m2, "e5m2"))
              if d is not None}
FP8_TYPES = tuple(FP8_SUFFIX)
ALGOS = ("max", "most_recent")

#: Block of the delayed-scaling kernel: 32 tensors by 16 rows of history (DSU_COLS x DSU_ROWS
#: in fp8.cu, which it hard-codes).
_DSU_BLOCK = (32, 16, 1)
_F32_MAX = float(np.finfo(np.float32).max)
_F32_TINY = float(np.finfo(np.float32).tiny)


# -- argument helpers ---------------------------------------------------------------------------
def _floats(op: str, name: str, x, dev, stream, *, n=None, written=False) -> DeviceArray:
    """A float32 device array read (or written) by a kernel: of one element, any shape, when
    ``n`` is None; else of ``n`` elements (one per tensor of a history) in at most one
    dimension."""
    if isinstance(x, (int, float, np.number)):
        raise TypeError(f"{op}: {name} must be a float32 device array, not "
                        f"{type(x).__name__}: the kernel reads it from device memory when it "
                        "runs, so a captured graph sees every new value")
    arr = array(x, op, name, (F32,), device=dev, stream=stream, written=written)
    if n is None and arr.size != 1:
        raise ValueError(f"{op}: {name} must have one element, got shape {arr.shape}")
    if n is not None and (arr.size != n or len(arr.shape) > 1):
        want = "one element" if n == 1 else f"shape ({n},)"
        raise ValueError(f"{op}: {name} must have {want}, one per tensor of amax_history, "
                         f"got shape {arr.shape}")
    return arr


def _apart(op: str, *named) -> None:
    """Refuse any overlap between the ``(name, array)`` pairs given (None arrays skipped)."""
    present = [(n, a) for n, a in named if a is not None]
    for (n1, a1), (n2, a2) in itertools.combinations(present, 2):
        if arrays_overlap(a1, a2):
            raise ValueError(f"{op}: {n1} overlaps {n2}")


def _choose_dtype(op: str, what: str, dtype, out: DeviceArray | None, allowed, default):
    """The element type of an output: ``dtype`` (when given), else ``out``'s, else ``default``;
    one of ``allowed``, and ``out``'s when both are given."""
    if dtype is None:
        dt = out.dtype if out is not None else np.dtype(default)
    else:
        dt = _dtypes.lookup(dtype, f"{op}: {what}").numpy
    if dt not in allowed:
        raise TypeError(f"{op}: {what} must be one of {', '.join(sorted(map(str, allowed)))}, "
                        f"not {dt}")
    if out is not None and out.dtype != dt:
        raise TypeError(f"{op}: out has dtype {out.dtype}, but {what} is {dt}")
    return dt


def _elements_out(op: str, out, shape, dev, stream) -> DeviceArray | None:
    """``out`` checked as the written array of ``shape`` (its dtype is checked by the caller)."""
    if out is None:
        return None
    arr = array(out, op, "out", device=dev, stream=stream)
    if arr.shape != tuple(shape):
        raise ValueError(f"{op}: out has shape {arr.shape}, expected {tuple(shape)}")
    return arr


def _flag(op: str, name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be a bool, not {type(value).__name__}")
    return bool(value)


def _amax_target(op: str, name: str, x, dev, s, accumulate: bool, flag: str
                 ) -> DeviceArray | None:
    """The amax scalar ``name`` of a call, checked (None when not given: the caller allocates
    one or records none); ``flag`` is the call's name of ``accumulate``."""
    if x is None:
        if accumulate:
            raise ValueError(f"{op}: {flag}=True folds into {name}, so {name} must be given")
        return None
    return _floats(op, name, x, dev, s, written=True)


# -- amax ---------------------------------------------------------------------------------------
def amax(x, out=None, *, accumulate=False, stream=None) -> DeviceArray:
    """``max(|x|)`` over every element, into a float32 device scalar.

    One pass over ``x``; blocks combine with ``atomicMax``, so nothing is read on the host and
    the call can be captured.  NaN propagates (see the module docstring).

    Parameters
    ----------
    x : DeviceArray or device array-like
        float32, float16 or bfloat16, any shape, C-contiguous.
    out : DeviceArray, optional
        float32, one element (any shape), not overlapping ``x``.  Allocated (shape ``()``)
        when omitted.
    accumulate : bool, default False
        Fold into ``out``: ``out = max(out, max(|x|))`` (an amax over several tensors or
        micro-batches).  ``out`` must then be given and hold a non-negative value.  Without
        it ``out`` is zeroed first, so an empty ``x`` gives 0.
    stream : Stream, optional
        Default: the thread's current stream.

    Returns
    -------
    DeviceArray
        ``out``.

    Raises
    ------
    TypeError
        ``x`` not float32/float16/bfloat16, ``out`` not float32 or not a device array, host
        data.
    ValueError
        ``out`` not of one element or overlapping ``x``; ``accumulate`` without ``out``.
    ClosedError
        An array's memory was freed.
    """
    op = "amax"
    a = array(x, op, "x", HALF_FLOAT, stream=stream)
    dev = a.device
    acc = _flag(op, "accumulate", accumulate)
    res = _amax_target(op, "out", out, dev, stream, acc, "accumulate")
    _apart(op, ("x", a), ("out", res))
    s = as_stream(stream, dev)
    if res is None:
        res = empty((), F32, device=dev, stream=s)
    if not acc:
        res.fill(0, s)
    n = a.size
    launch_elementwise(dev, f"amax_{suffix(a.dtype)}", n, (a.address, res.address, n), s)
    return res


# -- quantize / dequantize ----------------------------------------------------------------------
def quantize_fp8(x, scale, out=None, *, dtype=None, amax=None, accumulate_amax=False,
                 stream=None) -> DeviceArray:
    """``out = fp8(saturate(x * scale))``, rounded to nearest even, in one pass.

    The product is computed in float32 (``x`` widened exactly), then converted: values beyond
    the format's largest finite value (448 for e4m3fn, 57344 for e5m2), infinities included,
    become ``±max``; NaN becomes the format's NaN with the sign of ``x`` (a NaN product of a
    number, such as ``0 * inf``, the positive NaN).  Bit for bit ml_dtypes'
    ``clip(float32(x) * float32(scale), -max, max).astype(dtype)``.

    Parameters
    ----------
    x : DeviceArray or device array-like
        float32, float16 or bfloat16, any shape, C-contiguous.
    scale : DeviceArray
        float32, one element, read by the kernel when it runs (so a captured graph uses the
        scale :func:`delayed_scale_update` last wrote).  A Python number is refused.
    out : DeviceArray, optional
        fp8 of ``x``'s shape, C-contiguous; allocated when omitted.
    dtype : dtype-like, optional
        ``float8_e4m3fn`` or ``float8_e5m2`` (:mod:`cudalibs.dtypes`); default ``out``'s
        dtype, or ``float8_e4m3fn``.
    amax : DeviceArray, optional
        float32, one element: receives ``max(|x|)`` (of ``x``, not of the product; NaN
        propagating), computed in the same pass.
    accumulate_amax : bool, default False
        Fold into ``amax`` (``max(amax, max(|x|))``) instead of overwriting it; ``amax``
        must then hold a non-negative value.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``.

    Raises
    ------
    TypeError
        ``x`` of another dtype; ``scale`` or ``amax`` not a float32 device array; ``dtype``
        not an fp8 type or not ``out``'s.
    ValueError
        ``scale``/``amax`` not of one element, ``out`` of another shape, any two of the
        arrays overlapping, ``accumulate_amax`` without ``amax``.
    ClosedError
        An array's memory was freed.
    """
    op = "quantize_fp8"
    a = array(x, op, "x", HALF_FLOAT, stream=stream)
    dev = a.device
    sc = _floats(op, "scale", scale, dev, stream)
    res = _elements_out(op, out, a.shape, dev, stream)
    dt = _choose_dtype(op, "dtype", dtype, res, FP8_TYPES, _dtypes.float8_e4m3fn)
    acc = _flag(op, "accumulate_amax", accumulate_amax)
    am = _amax_target(op, "amax", amax, dev, stream, acc, "accumulate_amax")
    _apart(op, ("x", a), ("scale", sc), ("out", res), ("amax", am))
    s = as_stream(stream, dev)
    if res is None:
        res = empty(a.shape, dt, device=dev, stream=s)
    if am is not None and not acc:
        am.fill(0, s)
    n = a.size
    launch_elementwise(dev, f"quantize_{FP8_SUFFIX[dt]}_{suffix(a.dtype)}", n,
                       (a.address, sc.address, res.address, 0 if am is None else am.address, n),
                       s)
    return res


def dequantize_fp8(q, scale_inv, out_dtype=None, out=None, *, stream=None) -> DeviceArray:
    """``out = q * scale_inv``: fp8 widened exactly, multiplied in float32, rounded once to
    ``out_dtype``.  NaN stays NaN; an e5m2 infinity stays infinite.

    Parameters
    ----------
    q : DeviceArray or device array-like
        ``float8_e4m3fn`` or ``float8_e5m2``, any shape, C-contiguous.
    scale_inv : DeviceArray
        float32, one element, read by the kernel when it runs (the ``scale_inv`` of
        :func:`delayed_scale_update`).  A Python number is refused.
    out_dtype : dtype-like, optional
        float32, float16 or bfloat16; default ``out``'s dtype, or float32.
    out : DeviceArray, optional
        ``q``'s shape, C-contiguous, not overlapping ``q`` or ``scale_inv``; allocated when
        omitted.
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``out``.

    Raises
    ------
    TypeError
        ``q`` not fp8; ``scale_inv`` not a float32 device array; ``out_dtype`` not float32,
        float16 or bfloat16, or not ``out``'s.
    ValueError
        ``scale_inv`` not of one element, ``out`` of another shape, overlapping arrays.
    ClosedError
        An array's memory was freed.
    """
    op = "dequantize_fp8"
    a = array(q, op, "q", FP8_TYPES, stream=stream)
    dev = a.device
    si = _floats(op, "scale_inv", scale_inv, dev, stream)
    res = _elements_out(op, out, a.shape, dev, stream)
    dt = _choose_dtype(op, "out_dtype", out_dtype, res, HALF_FLOAT, F32)
    _apart(op, ("q", a), ("scale_inv", si), ("out", res))
    s = as_stream(stream, dev)
    if res is None:
        res = empty(a.shape, dt, device=dev, stream=s)
    n = a.size
    launch_elementwise(dev, f"dequantize_{FP8_SUFFIX[a.dtype]}_{suffix(dt)}", n,
                       (a.address, si.address, res.address, n), s)
    return res


# -- delayed scaling ----------------------------------------------------------------------------
def _scaled_max(op: str, fp8_max, margin) -> float:
    """``fp8_max * 2**-margin`` rounded to float32, checked to be a positive normal float32."""
    top = real(op, "fp8_max", fp8_max)
    m = real(op, "margin", margin)
    if not (math.isfinite(top) and top > 0):
        raise ValueError(f"{op}: fp8_max must be a positive finite number, got {fp8_max!r}")
    if not math.isfinite(m):
        raise ValueError(f"{op}: margin must be finite, got {margin!r}")
    try:
        wide = top * 2.0 ** -m
    except OverflowError:           # 2.0 ** -m beyond float64: refused below as inf
        wide = math.inf
    with np.errstate(over="ignore"):
        scaled = float(np.float32(wide))
    if not (_F32_TINY <= scaled <= _F32_MAX):
        raise ValueError(f"{op}: fp8_max * 2**-margin = {top} * 2**{-m} is outside float32's "
                         "normal range")
    return scaled


def delayed_scale_update(amax_history, amax, scale, scale_inv, *, margin=0, fp8_max=448.0,
                         algo="max", stream=None):
    """One step of delayed scaling (Transformer Engine's rule), on the device, in one launch.

    Rolls the history by one step, records ``amax`` as its newest entry, and derives the next
    ``scale`` and ``scale_inv`` from it -- for every tensor of the history at once; the exact
    rule is in the module docstring.  Nothing is read on the host: the call can be captured,
    and each replay advances the history.

    Parameters
    ----------
    amax_history : DeviceArray
        float32, ``[history_len]`` (one tensor) or ``[history_len, n]`` (n tensors, one per
        column), C-contiguous, ``history_len >= 1``; row 0 is the newest.  Updated in place.
    amax : DeviceArray
        float32, one value per tensor (``n`` elements, 1-D; one element for a 1-D history):
        this step's amax, from :func:`amax` or :func:`quantize_fp8`.
    scale, scale_inv : DeviceArray
        float32, one value per tensor, as ``amax``; updated in place (``scale`` is kept
        where the amax of reference is 0, negative or not finite).
    margin : float, default 0
        The scale is reduced by ``2**margin``.
    fp8_max : float, default 448.0
        The largest value of the fp8 format the scale maps the amax to: 448 for
        ``float8_e4m3fn``, 57344 for ``float8_e5m2``.  ``fp8_max * 2**-margin`` must be a
        normal float32.
    algo : {"max", "most_recent"}
        The amax of reference: the maximum over the history window (NaN-propagating), or
        this step's amax.
    stream : Stream, optional

    Returns
    -------
    tuple of DeviceArray
        ``(scale, scale_inv)``.

    Raises
    ------
    TypeError
        An array not float32 or not on the device; ``margin``/``fp8_max`` not real numbers.
    ValueError
        A history that is not 1-D or 2-D or has no rows; ``amax``, ``scale`` or
        ``scale_inv`` without one value per tensor; overlapping arrays; an unknown ``algo``;
        ``fp8_max * 2**-margin`` outside float32's normal range.
    ClosedError
        An array's memory was freed.
    """
    op = "delayed_scale_update"
    hist = array(amax_history, op, "amax_history", (F32,), ndim=(1, 2), stream=stream,
                 written=True)
    dev = hist.device
    length = hist.shape[0]
    if length < 1:
        raise ValueError(f"{op}: amax_history must hold at least one step, got shape "
                         f"{hist.shape}")
    n = hist.shape[1] if len(hist.shape) == 2 else 1
    am = _floats(op, "amax", amax, dev, stream, n=n)
    sc = _floats(op, "scale", scale, dev, stream, n=n, written=True)
    si = _floats(op, "scale_inv", scale_inv, dev, stream, n=n, written=True)
    if algo not in ALGOS:
        raise ValueError(f"{op}: algo must be 'max' or 'most_recent', not {algo!r}")
    scaled = _scaled_max(op, fp8_max, margin)
    _apart(op, ("amax_history", hist), ("amax", am), ("scale", sc), ("scale_inv", si))
    s = as_stream(stream, dev)
    if n:
        blocks = min(-(-n // _DSU_BLOCK[0]), GRID_X_MAX)
        ptxlib.launch(dev, "delayed_scale_update_f32", (blocks, 1, 1), _DSU_BLOCK,
                      (hist.address, am.address, sc.address, si.address, length, n, scaled,
                       int(algo == "most_recent")), s)
    return sc, si
