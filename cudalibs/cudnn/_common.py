"""Helpers every cuDNN wrapper shares: argument checks, output arrays, scaling factors.

Nothing here is public; the wrappers re-raise nothing and add no state of their own.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..driver.array import DeviceArray, arrays_overlap, empty
from ..driver.memory import alloc_async
from ..driver.stream import as_stream
from ..runtime.operand import operand
from ..runtime.operand import operands as _operands
from .descriptors import cudnn_dtype, layout_name, layouts_of, packed_strides

# -- scaling factors ---------------------------------------------------------------------------
# cuDNN reads alpha/beta through host pointers (a float for float/half/bfloat16 data, a double
# for double data), during the call that takes them.  The first MAX_SCALARS distinct values are
# made once and kept for the life of the process, so a call passes plain integer addresses (the
# cheapest argument ctypes converts) and an address handed out is never freed under a call that
# still holds it, in this thread or another.  Values beyond that bound go through a small ring
# of slots per thread: a slot is rewritten only by its own thread, RING calls to scalar() later,
# which leaves every scalar of one library call (at most two) intact until the call returns.
MAX_SCALARS = 1024
RING = 8
_SCALARS: dict = {}
_rings = threading.local()


class _Ring:
    __slots__ = ("floats", "doubles", "next")

    def __init__(self):
        self.floats = [ctypes.c_float() for _ in range(RING)]
        self.doubles = [ctypes.c_double() for _ in range(RING)]
        self.next = 0


def scalar(value, double: bool) -> int:
    """Address of a host ``float`` (or ``double``) holding ``value``, valid for the cuDNN call
    it is passed to (a kept value's for the process).

    Raises
    ------
    TypeError, ValueError
        ``value`` is not a real number.
    """
    key = (double, value)
    hit = _SCALARS.get(key)
    if hit is not None:
        return hit[1]
    v = float(value)
    if len(_SCALARS) < MAX_SCALARS:
        obj = (ctypes.c_double if double else ctypes.c_float)(v)
        # setdefault: when two threads add one value at once, both get the object kept.
        return _SCALARS.setdefault(key, (obj, ctypes.addressof(obj)))[1]
    ring = getattr(_rings, "ring", None)
    if ring is None:
        ring = _rings.ring = _Ring()
    i = ring.next
    ring.next = (i + 1) % RING
    obj = ring.doubles[i] if double else ring.floats[i]
    obj.value = v
    return ctypes.addressof(obj)


# -- arguments -----------------------------------------------------------------------------------
def resolve(op: str, *named, stream=None, required: int = 0):
    """``(array, ..., device, stream)``: each ``(obj, name)`` pair through the one operand path
    (:func:`~cudalibs.runtime.operand.operands`, all on the first one's device; None raises
    for the first ``required`` pairs and stays None for the others), and the ``stream=``
    argument resolved for that device."""
    *arrs, dev = _operands(op, *named, stream=stream, required=required)
    return (*arrs, dev, as_stream(stream, dev))


def check_overlap(op: str, out, **inputs) -> None:
    """Refuse an ``out`` that shares memory with an input: cuDNN reads its inputs while it
    writes, so an aliased output gives wrong results (or none at all)."""
    for name, a in inputs.items():
        if a is not None and arrays_overlap(out, a):
            raise ValueError(f"{op}: out overlaps {name} (it shares memory with an input); "
                             "give a separate output array")


def check_in_place(op: str, out, name: str, x) -> None:
    """Refuse an ``out`` that overlaps ``x`` without being ``x`` itself: an element-wise op
    may run in place, element for element, but an output shifted against its input reads
    elements it already overwrote."""
    if x is None or out is None or not arrays_overlap(out, x):
        return
    if out.address == x.address and out.shape == x.shape and out.strides == x.strides:
        return
    raise ValueError(f"{op}: out overlaps {name} without being {name} itself; run in place on "
                     f"the very same array, or give a separate output")


def hashable(v):
    """An int/str/None as is, a sequence as a tuple (a cache-key field); anything else as is,
    for the argument checks of the miss path to name."""
    if v is None or isinstance(v, (int, str, np.integer)):
        return v
    try:
        return tuple(v)
    except TypeError:
        return v


def check_float(arr, name: str) -> None:
    """Refuse an array of a dtype cuDNN does not compute in; ``name`` is ``"<op>: <name>"``."""
    cudnn_dtype(arr.dtype, name)


def layout_of(arr, name: str, allowed=(4, 5)) -> tuple[bool, ...]:
    """The packed layouts ``arr`` (logical N, C, ...) fits; raises when it fits none."""
    if arr.ndim not in allowed:
        raise ValueError(f"{name} must have {' or '.join(map(str, allowed))} dimensions "
                         f"(logical N, C, spatial...), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); cuDNN needs every dimension >= 1")
    fits = layouts_of(arr.shape, arr.strides, arr.itemsize)
    if not fits:
        raise ValueError(
            f"{name} of shape {arr.shape} has strides {arr.strides}, neither packed "
            f"{layout_name(arr.ndim, False)} nor packed {layout_name(arr.ndim, True)} "
            "(channels-last); make a packed copy first (.copy())")
    return fits


def out_hint(out) -> bool | None:
    """The layout an ``out`` DeviceArray pins down (None: no out, or it fits both).

    Inputs with one channel or 1x1 spatial extent are both packed NCHW and packed NHWC; the
    output then takes the layout of an ``out`` the caller passed."""
    if type(out) is not DeviceArray or out.ndim < 3:
        return None
    fits = layouts_of(out.shape, out.strides, out.itemsize)
    return fits[0] if len(fits) == 1 else None


def out_key(out):
    """What of ``out`` goes into a plan's cache key: its strides, which decide the output
    layout when the inputs fit both (:func:`out_hint`, worked out on a cache miss only)."""
    return out.strides if type(out) is DeviceArray else None


def pick_layout(*fits_and_names, prefer: bool | None = None) -> bool:
    """One channels_last value every operand fits (pairs of (fits, name)); when all are
    ambiguous, ``prefer`` (the layout of a given output, see :func:`out_hint`) or NCHW,
    else the first unambiguous operand's layout."""
    common = {False, True}
    for fits, _ in fits_and_names:
        common &= set(fits)
    if not common:
        desc = ", ".join(f"{name} is {'/'.join(layout_name(4, c) for c in fits)}"
                         for fits, name in fits_and_names)
        raise ValueError(f"operands have different memory layouts ({desc}); cuDNN needs them "
                         "alike here: convert one (channels-last <-> channels-first)")
    if len(common) == 2:
        for fits, _ in fits_and_names:
            if len(fits) == 1:
                return fits[0]
        if prefer is not None:
            return prefer
        return fits_and_names[0][0][0]
    return common.pop()


def output(out, shape, dtype, channels_last: bool, dev, s, name: str = "out",
           strides=None, op: str | None = None) -> DeviceArray:
    """``out`` checked against ``shape``/``dtype``/layout/device, or a new array of them,
    allocated stream-ordered on ``s`` in the given layout.

    ``strides`` (bytes, the packed strides of that layout), when given, lets an ``out`` that
    matches exactly skip the general checks: the common case of a repeated call.
    """
    if (strides is not None and type(out) is DeviceArray and out.device is dev
            and out.shape == shape and out.strides == strides and out.dtype == dtype):
        return operand(out, name, op, written=True)    # the rest matched
    shape = tuple(shape)
    if out is None:
        if channels_last and len(shape) >= 3:
            st = packed_strides(shape, True)
            itemsize = np.dtype(dtype).itemsize
            nbytes = itemsize * int(np.prod(shape))
            buf = alloc_async(nbytes, s, dev)
            return DeviceArray.from_buffer(buf, shape, dtype, tuple(v * itemsize for v in st))
        return empty(shape, dtype, device=dev, stream=s)
    out = operand(out, name, op, device=dev, written=True)
    if out.shape != shape:
        raise ValueError(f"{name} has shape {out.shape}, expected {shape}")
    if out.dtype != np.dtype(dtype):
        raise TypeError(f"{name} has dtype {out.dtype}, expected {np.dtype(dtype)}")
    if len(shape) >= 3:
        if channels_last not in layouts_of(out.shape, out.strides, out.itemsize):
            raise ValueError(f"{name} must be packed {layout_name(len(shape), channels_last)} "
                             f"like the inputs (layout mismatch); its strides are "
                             f"{out.strides}")
    elif not out.is_c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return out


def scratch(nbytes: int, s, dev):
    """A stream-ordered scratch buffer (closed by the caller when done)."""
    return alloc_async(max(int(nbytes), 1), s, dev)


def is_double(dtype) -> bool:
    return np.dtype(dtype) == np.float64


def padded(arr, name: str, min_dims: int = 4, max_dims: int = 5):
    """``(shape, byte strides)`` of ``arr`` with trailing size-1 dimensions appended up to
    ``min_dims`` (cuDNN tensors have at least four), checked for dimension count and
    emptiness."""
    if not 2 <= arr.ndim <= max_dims:
        raise ValueError(f"{name} must have 2 to {max_dims} dimensions (logical N, C, ...), "
                         f"got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); cuDNN needs every dimension >= 1")
    extra = max(0, min_dims - arr.ndim)
    return arr.shape + (1,) * extra, arr.strides + (arr.itemsize,) * extra


def layout_padded(shape, strides, itemsize, name: str) -> tuple[bool, ...]:
    """Like :func:`layout_of`, for the padded shape of :func:`padded`."""
    fits = layouts_of(shape, strides, itemsize)
    if not fits:
        raise ValueError(
            f"{name} has strides {strides[:len(shape)]}: it is neither packed channels-first "
            "nor packed channels-last; make a packed copy first (.copy())")
    return fits
