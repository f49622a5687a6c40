"""What a one-shot FFT does, decided once per problem: numpy.fft's arguments read into cuFFT
passes over arrays whose layouts cuFFT can express.  Pure Python: tested without a GPU.

A :class:`Recipe` says, for one call shape (the input's shape, strides and dtype, ``n``/``s``,
``axis``/``axes``, ``norm``, ``out``'s layout):

- the transform lengths along the axes, and how the input is cut (``n`` smaller than the
  input: a view, no copy) or zero-padded (``n`` larger);
- whether the input is read where it is or first copied into a *stage*: when it is padded,
  when real input feeds a complex transform (``fft`` of a real array: the real parts of a
  zeroed complex stage), when cuFFT would overwrite it (every complex-to-real transform uses
  its input as scratch), and when its layout is one cuFFT cannot express (batch axes that do
  not merge into one batch dimension, negative strides, ...) -- the only copy that is not
  numpy's own semantics;
- the result's storage: C-contiguous in numpy's axis order where cuFFT can write that (the
  common case), else C-contiguous with the batch axes outermost, returned as a transposed
  view;
- the cuFFT passes: one for up to three axes; for four to six, the last three (which hold a
  real transform's halved axis) and then the others in place, on storage ordered (first
  axes, batch axes, last axes) so that both passes batch over one merged dimension;
- the ``norm`` scale, applied on the device to the result.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..driver.args import int_arg, int_tuple
from .layout import (MAX_RANK, LayoutError, Side, check_axes, dense, permuted_strides,
                     plan_layouts, precision_of)

__all__ = ["OPS", "NORMS", "MAX_AXES", "Pass", "Recipe", "recipe"]

#: One-shot -> (transform, forward, how it names its axes: 1 ``n``/``axis``, 2 ``s``/``axes``
#: defaulting to the last two, None ``s``/``axes`` defaulting to all).
OPS = {
    "fft": ("c2c", True, 1), "ifft": ("c2c", False, 1),
    "rfft": ("r2c", True, 1), "irfft": ("c2r", False, 1),
    "fft2": ("c2c", True, 2), "ifft2": ("c2c", False, 2),
    "rfft2": ("r2c", True, 2), "irfft2": ("c2r", False, 2),
    "fftn": ("c2c", True, None), "ifftn": ("c2c", False, None),
    "rfftn": ("r2c", True, None), "irfftn": ("c2r", False, None),
}
#: The ``norm`` values, as numpy names them (None is ``"backward"``).
NORMS = ("backward", "ortho", "forward")
#: The most axes one call transforms (two cuFFT passes of three).
MAX_AXES = 2 * MAX_RANK
_FLOATS = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


class Pass(NamedTuple):
    """One cuFFT plan's work: ``transform`` over ``axes`` from buffer ``src`` to ``dst``
    (``"x"``, ``"stage"`` or ``"res"``; the same one for an in-place pass)."""

    transform: str
    axes: tuple
    src: str
    dst: str
    forward: bool


class Recipe(NamedTuple):
    """A one-shot FFT problem, decided (see the module notes).

    Arrays are ``(shape, byte strides, dtype)`` in numpy's axis order.
    """

    op: str
    transform: str          # the call's transform: "c2c", "r2c" or "c2r"
    forward: bool
    precision: object       # layout.Precision
    axes: tuple             # in the user's order; a real transform's halved axis last
    lengths: tuple          # the transform lengths along axes (the real side's)
    x: tuple                # the input after truncation (its strides are the input's)
    trunc: tuple | None     # the slices that truncate the input, None when none do
    widen: bool             # real input into the real parts of a complex stage
    stage: tuple | None     # the staged input, None when cuFFT reads the input in place
    stage_zero: bool        # the stage is zeroed first (padding, or imaginary parts)
    res: tuple              # the result, when cudalibs allocates it
    res_nbytes: int
    out: tuple | None       # a given out
    out_direct: bool        # ... written in place by cuFFT (else through res, then copied)
    passes: tuple
    scale: float            # applied to the result; 1.0 applies nothing
    scale_count: int        # real scalars the scale touches (twice the size when complex)

    @property
    def empty(self) -> bool:
        """Whether the result has no elements (nothing to compute)."""
        return 0 in self.res[0]

    @property
    def stage_nbytes(self) -> int:
        return 0 if self.stage is None else math.prod(self.stage[0]) * self.stage[2].itemsize


def _sizes(op, form, shape, n, axes, transform):
    """``(axes, lengths)`` from the call's ``n``/``axis`` or ``s``/``axes``."""
    ndim = len(shape)
    if form == 1:
        axis = -1 if axes is None else int_arg(axes, f"{op}: axis")
        axes = check_axes(axis, ndim, f"{op}: axis")
        s = None if n is None else (int_arg(n, f"{op}: n"),)
        name = "n"
    else:
        name = "s"
        s = None if n is None else int_tuple(n, f"{op}: s", scalar=False)
        if axes is None:
            if form == 2:
                axes = (-2, -1)
            elif s is not None:
                axes = tuple(range(ndim - len(s), ndim))
            else:
                axes = tuple(range(ndim))
        axes = check_axes(axes, ndim, f"{op}: axes")
        if s is not None and len(s) != len(axes):
            raise ValueError(f"{op}: s {s} and axes {axes} differ in length")
    if len(axes) > MAX_AXES:
        raise ValueError(f"{op}: axes names {len(axes)} axes; one call transforms at most "
                         f"{MAX_AXES} (transform the others with a second call)")
    lengths = []
    for i, a in enumerate(axes):
        m = shape[a]
        explicit = s is not None and not (s[i] == -1 and form != 1)
        if s is None:
            given = 2 * (m - 1) if transform == "c2r" and i == len(axes) - 1 else m
        else:
            # numpy 2 reads -1 in s as the input's own length (n=-1 is an error)
            given = s[i] if explicit else m
        if given < 1 and explicit:
            what = "n" if name == "n" else f"s[{i}]"
            raise ValueError(f"{op}: {what} must be a positive number of points, got {given}")
        if given < 1:
            raise ValueError(f"{op}: the transform length along axis {a} is {given}: FFT "
                             "lengths must be positive (give n or s to pad)")
        lengths.append(given)
    return axes, tuple(lengths)


def _dtypes(op, transform, dtype):
    """``(precision, input is complex)``, checked against what ``op`` takes."""
    dt = np.dtype(dtype)
    if dt not in _FLOATS:
        hint = ("; half precision transforms through cufft.FFTPlan (power-of-2 lengths, "
                "complex values as (..., 2) pairs)" if dt.kind == "f" or dt.name == "bfloat16"
                else "; convert it to a floating type first")
        raise TypeError(f"{op}: a has dtype {dt}; supported: "
                        f"{', '.join(sorted(str(t) for t in _FLOATS))}{hint}")
    prec, is_complex = precision_of(dt, f"{op}: a")
    if transform == "r2c" and is_complex:
        raise TypeError(f"{op}: a has dtype {dt}: {op} transforms real input (use "
                        f"{op[1:]} for complex input)")
    return prec, bool(is_complex)


def _scale(op, norm, forward: bool, lengths) -> float:
    if norm is not None and (not isinstance(norm, str) or norm not in NORMS):
        raise ValueError(f"{op}: norm must be None, 'backward', 'ortho' or 'forward', not "
                         f"{norm!r}")
    n = math.prod(lengths)
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    scaled = (norm == "forward") == forward
    return 1.0 / n if scaled else 1.0


def _orders(x_side: Side, axes, groups, halved: bool) -> list[tuple]:
    """The storage orders tried for the stage and the result, preferred first."""
    key = lambda a: -abs(x_side.strides[a])     # noqa: E731 - a sort key

    def group(g, last_fixed):
        return sorted(g[:-1], key=key) + [g[-1]] if last_fixed else sorted(g, key=key)

    batch = sorted((a for a in range(len(x_side.shape)) if a not in axes), key=key)
    if len(groups) == 1:
        canonical = tuple(batch + group(groups[0], halved))
        identity = tuple(range(len(x_side.shape)))
        return [identity] if canonical == identity else [identity, canonical]
    return [tuple(group(groups[0], False) + batch + group(groups[1], halved))]


def _passes(transform, forward, groups, src) -> tuple:
    if len(groups) == 1:
        return (Pass(transform, groups[0], src, "res", forward),)
    first, last = groups
    if transform == "c2r":
        return (Pass("c2c", first, "stage", "stage", False),
                Pass("c2r", last, "stage", "res", False))
    return (Pass(transform, last, src, "res", forward), Pass("c2c", first, "res", "res", forward))


def _fits(passes, sides) -> bool:
    for p in passes:
        try:
            plan_layouts(sides[p.src], sides[p.dst], p.axes, p.transform != "c2c")
        except LayoutError:
            return False
    return True


def recipe(op: str, shape, strides, dtype, n=None, axes=None, norm=None, out=None) -> Recipe:
    """The :class:`Recipe` of one-shot ``op`` on an input of ``shape``, byte ``strides`` and
    ``dtype``.

    Parameters
    ----------
    op : str
        One of :data:`OPS`.
    n, axes :
        The call's ``n`` and ``axis`` (one-dimensional ops) or ``s`` and ``axes``.
    norm : {None, "backward", "ortho", "forward"}
    out : tuple, optional
        ``(shape, strides, dtype)`` of a given ``out``.

    Raises
    ------
    TypeError, ValueError
        Naming ``op`` and the parameter at fault.
    """
    transform, forward, form = OPS[op]
    shape, strides, dt = tuple(shape), tuple(strides), np.dtype(dtype)
    prec, x_complex = _dtypes(op, transform, dt)
    if not shape:
        raise ValueError(f"{op}: a must have at least one dimension, got a 0-d array")
    axes, lengths = _sizes(op, form, shape, n, axes, transform)
    scale = _scale(op, norm, forward, lengths)
    in_complex, out_complex = transform != "r2c", transform != "c2r"
    in_item = prec.complex.itemsize if in_complex else prec.real.itemsize
    out_dtype = prec.complex if out_complex else prec.real
    halved = transform != "c2c"
    # The sizes cuFFT reads (the complex side of c2r is halved) and writes.
    in_sizes, out_shape = list(shape), list(shape)
    for a, length in zip(axes, lengths):
        in_sizes[a] = out_shape[a] = length
    if transform == "c2r":
        in_sizes[axes[-1]] = lengths[-1] // 2 + 1
    elif transform == "r2c":
        out_shape[axes[-1]] = lengths[-1] // 2 + 1
    in_sizes, out_shape = tuple(in_sizes), tuple(out_shape)
    x_shape = tuple(min(m, k) for m, k in zip(shape, in_sizes))
    trunc = None
    if x_shape != shape:
        trunc = tuple(slice(0, k) if k < m else slice(None) for m, k in zip(shape, x_shape))
    padded = x_shape != in_sizes
    widen = in_complex and not x_complex
    groups = (axes,) if len(axes) <= MAX_RANK else (axes[:-MAX_RANK], axes[-MAX_RANK:])
    x_side = Side(x_shape, strides, x_complex, dt.itemsize)

    def stage_side(order):
        return Side(in_sizes, permuted_strides(in_sizes, in_item, order), in_complex, in_item)

    def res_side(order):
        return Side(out_shape, permuted_strides(out_shape, out_dtype.itemsize, order),
                    out_complex, out_dtype.itemsize)

    cands = _orders(x_side, axes, groups, halved)
    chosen = None
    if not (padded or widen or transform == "c2r"):
        for order in cands:
            if _fits(_passes(transform, forward, groups, "x"), {"x": x_side,
                                                                 "res": res_side(order)}):
                chosen = (order, False)
                break
    if chosen is None:
        for order in cands:
            if _fits(_passes(transform, forward, groups, "stage"),
                     {"stage": stage_side(order), "res": res_side(order)}):
                chosen = (order, True)
                break
    if chosen is None:      # C-contiguous storage in the last order always fits
        raise AssertionError(f"{op}: no storage order fits {shape} over axes {axes}")
    order, staged = chosen
    passes = _passes(transform, forward, groups, "stage" if staged else "x")
    sides = {"x": x_side, "stage": stage_side(order), "res": res_side(order)}
    res = (out_shape, sides["res"].strides, out_dtype)
    out_direct = False
    if out is not None:
        o_shape, o_strides, o_dtype = out = tuple(out[0]), tuple(out[1]), np.dtype(out[2])
        if o_dtype != out_dtype:
            raise TypeError(f"{op}: out has dtype {o_dtype}; {op} of {dt} writes {out_dtype}")
        if o_shape != out_shape:
            raise ValueError(f"{op}: out has shape {o_shape}; {op} of a {shape} array writes "
                             f"{out_shape}")
        o_side = Side(o_shape, o_strides, out_complex, out_dtype.itemsize)
        out_direct = (scale == 1.0 or dense(o_shape, o_strides, out_dtype.itemsize)) and \
            _fits(passes, {**sides, "res": o_side})
    stage = None
    if staged:
        st = sides["stage"]
        stage = (in_sizes, st.strides, prec.complex if in_complex else prec.real)
    size = math.prod(out_shape)
    return Recipe(op, transform, forward, prec, axes, lengths, (x_shape, strides, dt), trunc,
                  widen, stage, padded or widen, res, size * out_dtype.itemsize, out,
                  out_direct, passes, scale, size * (2 if out_complex else 1))
