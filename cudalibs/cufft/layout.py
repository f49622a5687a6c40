"""How an FFT problem reads to cuFFT: precisions, array sides, and the advanced data layout.

Pure Python, no library call: everything here is tested without a GPU.

cuFFT describes a batch of rank-``r`` transforms (``r`` <= 3) with lengths ``n[0..r-1]``
(``n[r-1]`` the innermost) over one array by its *advanced data layout*: the element at batch
``b`` and index ``(i0, ..., i{r-1})`` lies at::

    b * dist + (((i0 * embed[1] + i1) * embed[2] + i2) ...) * stride

So the transformed axes, outermost first, must have element strides ``stride * embed[r-1] *
... * embed[k+1]``: each a whole multiple, at least the next axis's length over, of the next
one.  Every other axis is batch, and all of them must merge into *one* batch dimension of
distance ``dist``: each batch axis's stride is the next one's times its length.  The input and
the output each get such a layout, with the same ``n``, the same batch count and the same axis
order.  :func:`describe` reads one from an array's shape and byte strides (no copy) and says
why when there is none; :func:`plan_layouts` finds the axis order that suits both arrays.

Complex half precision has no numpy type: a complex float16 or bfloat16 array is a real one
whose last axis, of length 2 and unit stride, holds (real, imaginary) -- what
``torch.view_as_real`` gives.  :class:`Side` strips that axis, so the rest sees logical
shapes and element strides alike in every precision.
"""

from __future__ import annotations

import math
import operator
from typing import NamedTuple

import numpy as np

from .. import dtypes as _dtypes
from ..driver.array import c_strides

__all__ = ["Precision", "PRECISIONS", "KINDS", "Side", "Layout", "LayoutError", "precision_of",
           "side", "check_axes", "describe", "orders", "plan_layouts", "is_basic",
           "permuted_strides", "dense", "is_power_of_two", "MAX_RANK"]

#: The most axes one cuFFT plan transforms.
MAX_RANK = 3
#: The transform kinds, by the side that is complex.
KINDS = ("c2c", "r2c", "c2r")


class Precision(NamedTuple):
    """One precision cuFFT computes in.

    Attributes
    ----------
    name : str
        ``"float32"``, ``"float64"``, ``"float16"`` or ``"bfloat16"``.
    real : numpy.dtype
        The real element type.
    complex : numpy.dtype
        The complex element type's array dtype: ``complex64`` / ``complex128``, or for the
        half precisions the real type itself (complex values as (..., 2) pairs).
    pairs : bool
        Complex values are stored as pairs of ``real`` (no numpy complex type).
    cuda_real, cuda_complex : int
        Their ``cudaDataType``.
    power_of_two : bool
        cuFFT takes only power-of-2 lengths in this precision.
    min_cc : tuple of int
        The compute capability it needs.
    """

    name: str
    real: np.dtype
    complex: np.dtype
    pairs: bool
    cuda_real: int
    cuda_complex: int
    power_of_two: bool
    min_cc: tuple

    @property
    def complex_bytes(self) -> int:
        """Bytes of one complex element."""
        return 2 * self.real.itemsize


def _precisions() -> dict:
    c = _dtypes.CUDA_R
    rows = [Precision("float32", np.dtype(np.float32), np.dtype(np.complex64), False,
                      c["R_32F"], c["C_32F"], False, (0, 0)),
            Precision("float64", np.dtype(np.float64), np.dtype(np.complex128), False,
                      c["R_64F"], c["C_64F"], False, (0, 0)),
            Precision("float16", np.dtype(np.float16), np.dtype(np.float16), True,
                      c["R_16F"], c["C_16F"], True, (5, 3))]
    if _dtypes.bfloat16 is not None:
        rows.append(Precision("bfloat16", _dtypes.bfloat16, _dtypes.bfloat16, True,
                              c["R_16BF"], c["C_16BF"], True, (8, 0)))
    return {p.real: p for p in rows}


#: Every precision, by its real dtype.
PRECISIONS: dict = _precisions()
_BY_COMPLEX = {p.complex: p for p in PRECISIONS.values() if not p.pairs}


def precision_of(dtype, what: str) -> tuple[Precision, bool | None]:
    """``(precision, complex)`` of an array dtype: complex64 is float32's complex side; a
    float32 array is real; a float16 or bfloat16 one may be either (``complex`` None: the
    transform kind decides).

    Raises
    ------
    TypeError
        No cuFFT precision has this dtype.
    """
    dt = np.dtype(dtype)
    p = _BY_COMPLEX.get(dt)
    if p is not None:
        return p, True
    p = PRECISIONS.get(dt)
    if p is not None:
        return p, None if p.pairs else False
    names = sorted({str(q.real) for q in PRECISIONS.values()}
                   | {str(q.complex) for q in PRECISIONS.values()})
    raise TypeError(f"{what} has dtype {dt}; cuFFT transforms {', '.join(names)}")


class Side(NamedTuple):
    """One array of a transform, as cuFFT sees it.

    Attributes
    ----------
    shape : tuple of int
        The logical shape (a half-precision complex array's pair axis left out).
    strides : tuple of int
        Byte strides of those axes.
    complex : bool
        Whether its elements are complex.
    elem : int
        Bytes of one element (a complex float16 pair: 4).
    """

    shape: tuple
    strides: tuple
    complex: bool
    elem: int


def side(shape, strides, prec: Precision, is_complex: bool, what: str) -> Side:
    """The :class:`Side` of an array of ``shape`` and byte ``strides`` holding ``prec``'s real
    (``is_complex`` False) or complex elements.

    Raises
    ------
    ValueError
        A half-precision complex array does not end in a unit-stride axis of 2.
    """
    shape, strides = tuple(shape), tuple(strides)
    if is_complex and prec.pairs:
        item = prec.real.itemsize
        if not shape or shape[-1] != 2 or strides[-1] != item:
            raise ValueError(
                f"{what} holds complex {prec.name} values, which must be stored as (..., 2) "
                f"pairs (real, imaginary) with a unit-stride last axis of 2 (as "
                f"torch.view_as_real gives); got shape {shape}, strides {strides}")
        return Side(shape[:-1], strides[:-1], True, 2 * item)
    return Side(shape, strides, is_complex,
                prec.complex_bytes if is_complex else prec.real.itemsize)


def check_axes(axes, ndim: int, what: str) -> tuple[int, ...]:
    """``axes`` (an int or a sequence of ints, negative counting from the end) as a tuple of
    axes in ``range(ndim)``, in the order given.

    Raises
    ------
    TypeError
        ``axes`` is not an int or a sequence of ints.
    ValueError
        Empty, out of range, or naming an axis twice.
    """
    if isinstance(axes, (str, bytes)) or isinstance(axes, bool):
        raise TypeError(f"{what} must be an int or a sequence of ints, not "
                        f"{type(axes).__name__}")
    seq = (axes,) if hasattr(type(axes), "__index__") else axes
    try:
        items = list(seq)
    except TypeError:
        raise TypeError(f"{what} must be an int or a sequence of ints, not "
                        f"{type(axes).__name__}") from None
    out = []
    for a in items:
        if isinstance(a, bool) or not hasattr(type(a), "__index__"):
            raise TypeError(f"{what} must hold ints, not {type(a).__name__} {a!r}")
        a = operator.index(a)
        if not -ndim <= a < ndim:
            raise ValueError(f"{what}: axis {a} is out of range for an array of {ndim} "
                             "dimension(s)")
        out.append(a % ndim)
    if not out:
        raise ValueError(f"{what} names no axis")
    if len(set(out)) != len(out):
        raise ValueError(f"{what} names an axis twice: {tuple(items)}")
    return tuple(out)


class Layout(NamedTuple):
    """cuFFT's advanced data layout of one array (``inembed, istride, idist`` or their
    ``o`` counterparts), in elements.

    Attributes
    ----------
    embed : tuple of int
        The storage lengths of the transformed axes, outermost first (cuFFT reads all but the
        first).
    stride : int
        The distance between two elements of the innermost transformed axis.
    dist : int
        The distance between two batches.
    """

    embed: tuple
    stride: int
    dist: int

    def __str__(self) -> str:
        return (f"embed {self.embed}, stride {self.stride}, dist {self.dist}")


class LayoutError(ValueError):
    """An array layout cuFFT's advanced data layout cannot express; the message says why."""


def _elements(side_: Side, axis: int) -> int:
    st = side_.strides[axis]
    if st % side_.elem:
        raise LayoutError(f"axis {axis}'s stride of {st} bytes is not a whole number of "
                          f"{side_.elem}-byte elements")
    if st <= 0:
        raise LayoutError(f"axis {axis} has stride {st}: cuFFT reads and writes with positive "
                          "strides only")
    return st // side_.elem


def describe(side_: Side, t_order, b_order) -> Layout:
    """The layout of ``side_`` for a transform over the axes ``t_order`` (outermost first)
    batched over ``b_order`` (outermost first).

    Axes of length 1 may have any stride.  The batch axes of length > 1 must merge into one
    batch dimension in the order given.

    Raises
    ------
    LayoutError
        The strides cannot be expressed; the message names the axes at fault.
    """
    shape = side_.shape
    r = len(t_order)
    sizes = [shape[a] for a in t_order]
    es = [1] * r
    embed = [1] * r
    if sizes[-1] > 1:
        es[-1] = _elements(side_, t_order[-1])
    for k in range(r - 2, -1, -1):
        inner = es[k + 1]
        if sizes[k] > 1:
            v = _elements(side_, t_order[k])
            q, rem = divmod(v, inner)
            if rem or q < sizes[k + 1]:
                raise LayoutError(
                    f"transformed axis {t_order[k]} has a stride of {v} elements, not a "
                    f"multiple of at least {sizes[k + 1]} times the {inner} of axis "
                    f"{t_order[k + 1]}, inside it: cuFFT lays each transformed axis out as "
                    "whole rows of the next")
            es[k] = v
        else:
            es[k] = inner * sizes[k + 1]
        embed[k + 1] = es[k] // inner
    embed[0] = sizes[0]
    batch_axes = [a for a in b_order if shape[a] > 1]
    if not batch_axes or 0 in (shape[a] for a in b_order):
        return Layout(tuple(embed), es[-1], es[0] * sizes[0])
    bs = [_elements(side_, a) for a in batch_axes]
    for j in range(len(bs) - 1):
        a, b = batch_axes[j], batch_axes[j + 1]
        if bs[j] != bs[j + 1] * shape[b]:
            raise LayoutError(
                f"batch axes {a} (stride {bs[j]} elements) and {b} (stride {bs[j + 1]}, "
                f"length {shape[b]}) do not merge into one batch dimension, as cuFFT's "
                "single batch distance needs")
    return Layout(tuple(embed), es[-1], bs[-1])


def orders(side_: Side, axes, halved: bool) -> tuple[tuple, tuple]:
    """``(transform order, batch order)`` that suit ``side_``: largest stride first, with a
    real transform's halved axis (``axes[-1]``) kept innermost."""
    key = lambda a: -abs(side_.strides[a])    # noqa: E731 - a sort key
    t = sorted(axes[:-1], key=key) + [axes[-1]] if halved else sorted(axes, key=key)
    b = sorted((a for a in range(len(side_.shape)) if a not in axes), key=key)
    return tuple(t), tuple(b)


def plan_layouts(src: Side, dst: Side, axes, halved: bool):
    """One axis order and the two layouts of a transform from ``src`` to ``dst``.

    The order is read from ``src``'s strides, else from ``dst``'s; both arrays must be
    expressible in it (cuFFT enumerates their batches and indices alike).

    Returns
    -------
    tuple
        ``(t_order, b_order, src layout, dst layout)``.

    Raises
    ------
    LayoutError
        Neither order expresses both arrays; the message is the first order's reason.
    """
    first = None
    for own in (src, dst):
        t, b = orders(own, axes, halved)
        try:
            return t, b, describe(src, t, b), describe(dst, t, b)
        except LayoutError as exc:
            first = first or exc
    raise first


def is_basic(transform: str, dims, batch: int, lin: Layout, lout: Layout) -> bool:
    """Whether ``lin`` and ``lout`` are, both, cuFFT's *basic* data layout of an out-of-place
    ``transform`` of lengths ``dims`` (outermost first) batched ``batch`` times: unit stride,
    each transform's elements back to back, the batches back to back.

    On each side that is the storage lengths ``dims`` -- the last one ``dims[-1] // 2 + 1``
    on the complex side of ``"r2c"`` / ``"c2r"`` -- with ``embed[1:]`` equal to them, stride 1
    and ``dist`` their product (any ``dist`` for a single transform, which never reads it;
    ``embed[0]`` cuFFT never reads).  A plan of such layouts passes NULL ``inembed`` /
    ``onembed``, which cuFFT documents as the basic layout (its other layout arguments then
    ignored), rather than these numbers: given explicitly, even numbers that describe the
    basic layout make it an advanced-layout plan, for which cuFFT may choose other kernels.
    Batched 1-D real-to-complex plans of 2^18 to 2^22 points made so ran about 20% slower on
    an H100 than CuPy's plans of the same problems, which pass NULL (as PyTorch does for
    contiguous tensors).

    Out of place only: cuFFT's basic in-place real layout pads the real rows, which this test
    does not describe; cudalibs runs ``"r2c"`` / ``"c2r"`` out of place only, and a ``"c2c"``
    layout is the same in place and out.
    """
    sides = []
    for lay, halved in ((lin, transform == "c2r"), (lout, transform == "r2c")):
        store = tuple(dims[:-1]) + ((dims[-1] // 2 + 1) if halved else dims[-1],)
        sides.append(lay.stride == 1 and tuple(lay.embed[1:]) == store[1:] and
                     (batch <= 1 or lay.dist == math.prod(store)))
    return all(sides)


def permuted_strides(shape, itemsize: int, order) -> tuple[int, ...]:
    """Byte strides, in ``shape``'s axis order, of an array stored C-contiguously with its
    axes in ``order`` (outermost first)."""
    inner = c_strides([shape[a] for a in order], itemsize)
    out = [0] * len(shape)
    for a, st in zip(order, inner):
        out[a] = st
    return tuple(out)


def dense(shape, strides, itemsize: int) -> bool:
    """Whether the array's elements fill one block of ``size * itemsize`` bytes exactly (it is
    C-contiguous in some order of its axes)."""
    live = sorted(((st, n) for n, st in zip(shape, strides) if n != 1), reverse=True)
    if any(n == 0 for n in shape):
        return True
    acc = itemsize
    for st, n in reversed(live):
        if st != acc:
            return False
        acc *= n
    return True


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0
