"""Copies between strided layouts, planned as the fewest ``cuMemcpy2D`` calls.

A copy between two views of the same shape is reduced to: one run of ``width`` contiguous bytes
(the innermost dimensions both sides store contiguously, merged), repeated ``height`` times
with a pitch on each side (one ``cuMemcpy2D``), repeated over any remaining outer index.  A
contiguous-to-contiguous copy is one plain ``cuMemcpy*Async``.

Only non-negative strides are planned here; callers flip reversed axes first.
"""

from __future__ import annotations

import ctypes
import itertools

from . import _lib
from ._core import raise_for

HOST = _lib.CU_MEMORYTYPE_HOST
DEVICE = _lib.CU_MEMORYTYPE_DEVICE


def plan(shape, dst_strides, src_strides, itemsize):
    """Reduce a same-shape copy to ``(width, height, dst_pitch, src_pitch, outer)``.

    ``outer`` is a list of ``(n, dst_stride, src_stride)`` for the dimensions left to loop
    over, outermost first.  Strides are in bytes and must be non-negative.  Returns ``None`` for
    an empty copy.
    """
    dims = [(n, d, s) for n, d, s in zip(shape, dst_strides, src_strides)]
    if any(n == 0 for n, _, _ in dims):
        return None
    dims = [t for t in dims if t[0] != 1]
    width = itemsize
    # Merge innermost dimensions that both sides hold contiguously into one run of bytes.
    while dims and dims[-1][1] == width and dims[-1][2] == width:
        width *= dims.pop()[0]
    if not dims:
        return width, 1, width, width, []
    n, dp, sp = dims.pop()
    height = n
    # Fold outer dimensions that continue the same pitch into the height.
    while dims and dims[-1][1] == dp * height and dims[-1][2] == sp * height:
        height *= dims.pop()[0]
    # Merge outer dimensions that are contiguous with each other on both sides.
    merged = []
    for n, d, s in dims:
        if merged:
            pn, pd, ps = merged[-1]
            if pd == d * n and ps == s * n:
                merged[-1] = (pn * n, d, s)
                continue
        merged.append((n, d, s))
    return width, height, dp, sp, merged


def copy(dst_kind, dst_ptr, dst_strides, src_kind, src_ptr, src_strides, shape, itemsize,
         stream_h):
    """Queue a strided copy on ``stream_h``; both sides non-negative strides, same shape.

    ``*_kind`` is ``HOST`` or ``DEVICE``; pointers are ints (host addresses for HOST).
    """
    p = plan(shape, dst_strides, src_strides, itemsize)
    if p is None:
        return
    width, height, dpitch, spitch, outer = p
    L = _lib.get()
    if height == 1 and not outer:
        _copy_1d(L, dst_kind, dst_ptr, src_kind, src_ptr, width, stream_h)
        return
    desc = _lib.CUDA_MEMCPY2D()
    desc.srcMemoryType = src_kind
    desc.dstMemoryType = dst_kind
    desc.srcPitch = spitch
    desc.dstPitch = dpitch
    desc.WidthInBytes = width
    desc.Height = height
    ref = ctypes.byref(desc)
    fn = L.cuMemcpy2DAsync_v2
    ranges = [range(n) for n, _, _ in outer]
    for idx in itertools.product(*ranges):
        doff = soff = 0
        for i, (_, d, s) in zip(idx, outer):
            doff += i * d
            soff += i * s
        if src_kind == HOST:
            desc.srcHost = src_ptr + soff
        else:
            desc.srcDevice = src_ptr + soff
        if dst_kind == HOST:
            desc.dstHost = dst_ptr + doff
        else:
            desc.dstDevice = dst_ptr + doff
        st = fn(ref, stream_h)
        if st:
            raise_for(st, "cuMemcpy2DAsync_v2",
                      f"width {width} B, height {height}, pitches dst {dpitch} src {spitch}")


def _copy_1d(L, dst_kind, dst_ptr, src_kind, src_ptr, nbytes, stream_h):
    if dst_kind == DEVICE and src_kind == HOST:
        st = L.cuMemcpyHtoDAsync_v2(dst_ptr, src_ptr, nbytes, stream_h)
        name = "cuMemcpyHtoDAsync_v2"
    elif dst_kind == HOST and src_kind == DEVICE:
        st = L.cuMemcpyDtoHAsync_v2(dst_ptr, src_ptr, nbytes, stream_h)
        name = "cuMemcpyDtoHAsync_v2"
    elif dst_kind == DEVICE and src_kind == DEVICE:
        st = L.cuMemcpyDtoDAsync_v2(dst_ptr, src_ptr, nbytes, stream_h)
        name = "cuMemcpyDtoDAsync_v2"
    else:
        ctypes.memmove(dst_ptr, src_ptr, nbytes)
        return
    if st:
        raise_for(st, name, f"{nbytes} bytes")
