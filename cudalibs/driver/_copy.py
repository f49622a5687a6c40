"""Copies between strided layouts, planned as the fewest ``cuMemcpy2D`` calls, and the
host-to-device and device-to-device copies of :class:`~cudalibs.DeviceArray` built on them.

A copy between two views of the same shape is reduced to: one run of ``width`` contiguous bytes
(the innermost dimensions both sides store contiguously, merged), repeated ``height`` times
with a pitch on each side (one ``cuMemcpy2D``), repeated over any remaining outer index.  A
contiguous-to-contiguous copy is one plain ``cuMemcpy*Async``.

Only non-negative strides are planned here; callers flip reversed axes first.
"""

from __future__ import annotations

import ctypes
import itertools

import numpy as np

from .._ffi import refuse_in_capture
from . import _lib
from ._core import raise_for
from .memory import is_pinned
from .stream import hold_until_done

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


# -- the copies of DeviceArray ---------------------------------------------------------------
def has_overlap(shape, strides) -> bool:
    return any(st == 0 and n > 1 for n, st in zip(shape, strides))


def check_host(arr, shape, dtype, what, writable=False):
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{what} must be a numpy array, not {type(arr).__name__}")
    if arr.shape != shape:
        raise ValueError(f"{what} has shape {arr.shape}; expected {shape}")
    if arr.dtype != dtype:
        raise TypeError(f"{what} has dtype {arr.dtype}; expected {dtype}")
    if writable and not arr.flags.writeable:
        raise ValueError(f"{what} is read-only")


def h2d(dst, dst_ptr: int, host: np.ndarray, s, blocking: bool) -> None:
    if dst.size == 0:
        return
    refuse_in_capture("copying a host array to the device",
                      "a graph would read the host memory again at every replay; copy into a "
                      "device buffer before replaying (StepGraph does this for its inputs)")
    L = _lib.get()
    L.cuCtxSetCurrent(dst._device._ctx)
    if (host.flags.c_contiguous and host.dtype.isnative and dst.is_c_contiguous):
        st = L.cuMemcpyHtoDAsync_v2(dst_ptr, host.ctypes.data, dst.nbytes, s._h)
        if st:
            raise_for(st, "cuMemcpyHtoDAsync_v2")
    else:
        if has_overlap(dst._shape, dst._strides):
            raise ValueError("destination has overlapping elements (a zero stride); cannot write")
        flips = tuple(st < 0 for st in dst._strides)
        d_strides = tuple(-st if f else st for st, f in zip(dst._strides, flips))
        dst_ptr += sum((n - 1) * st for n, st, f in zip(dst._shape, dst._strides, flips) if f)
        if any(flips):
            host = host[tuple(slice(None, None, -1) if f else slice(None) for f in flips)]
        host = np.ascontiguousarray(host)
        if not host.dtype.isnative:
            raise TypeError("host array has non-native byte order")
        copy(DEVICE, dst_ptr, d_strides, HOST, host.ctypes.data,
                   host.strides, dst._shape, dst.itemsize, s._h)
    # Pageable sources are staged by the driver before the call returns; a pinned source is
    # read asynchronously, so it must live, unchanged, until the copy has run.
    if is_pinned(host.ctypes.data):
        if blocking:
            st = L.cuStreamSynchronize(s._h)
            if st:
                raise_for(st, "cuStreamSynchronize")
        else:
            hold_until_done(host, s, dst._device)


def d2d(dst, dst_ptr: int, src, s) -> None:
    if dst.size == 0:
        return
    src_ptr = src._check()
    if has_overlap(dst._shape, dst._strides):
        raise ValueError("destination has overlapping elements (a zero stride); cannot write")
    same_device = src._device is dst._device
    simple = (same_device and all(st >= 0 for st in dst._strides)
              and all(st > 0 or n == 1 for n, st in zip(src._shape, src._strides)))
    L = _lib.get()
    L.cuCtxSetCurrent(dst._device._ctx)
    if simple:
        copy(DEVICE, dst_ptr, dst._strides, DEVICE, src_ptr, src._strides,
                   dst._shape, dst.itemsize, s._h)
        return
    if not same_device and dst.is_c_contiguous and src.is_c_contiguous:
        if s._device is None or s._device is dst._device:
            # Order after the source's current stream, then copy peer to peer.
            st = L.cuMemcpyPeerAsync(dst_ptr, dst._device._ctx, src_ptr, src._device._ctx,
                                     dst.nbytes, s._h)
            if st:
                raise_for(st, "cuMemcpyPeerAsync")
            return
    # Reversed or broadcast source axes, or strided data across devices: stage on the host.
    dst.copy_(src.get(stream=s if s._device in (None, src._device) else None), s)
