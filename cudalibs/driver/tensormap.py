"""TMA descriptors: ``cuTensorMapEncodeTiled`` with its documented rules checked first.

A tensor map (``CUtensorMap``, 128 opaque bytes) describes a tiled view of a tensor in global
memory for the Hopper tensor memory accelerator: the base address, the size of each
dimension, the byte stride of each dimension but the first, the box a copy moves and the
shared-memory swizzle.  A kernel takes it by value (``const __grid_constant__ CUtensorMap``),
so the bytes travel in the launch's parameters: a captured launch keeps them, and nothing on
the device refers to host memory.

The driver answers a map it cannot encode with a bare ``CUDA_ERROR_INVALID_VALUE``;
:func:`check_tiled` applies the rules of the driver API's documentation of
``cuTensorMapEncodeTiled`` first (no interleave, element strides of 1) and says which one a
request breaks, without a GPU.  :func:`encode_tiled` checks, then encodes.
"""

from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from .. import dtypes as _dtypes
from . import _lib
from ._core import raise_for

__all__ = ["TMA_DTYPES", "SWIZZLES", "L2_PROMOTIONS", "MAX_RANK", "check_tiled",
           "encode_tiled"]

#: The element types a map may have here, with their ``CUtensorMapDataType``.
TMA_DTYPES = {np.dtype(np.float16): _lib.CU_TENSOR_MAP_DATA_TYPE_FLOAT16}
if _dtypes.bfloat16 is not None:
    TMA_DTYPES[np.dtype(_dtypes.bfloat16)] = _lib.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
#: Shared-memory swizzle span in bytes (0: none) -> ``CUtensorMapSwizzle``.
SWIZZLES = {0: _lib.CU_TENSOR_MAP_SWIZZLE_NONE, 32: _lib.CU_TENSOR_MAP_SWIZZLE_32B,
            64: _lib.CU_TENSOR_MAP_SWIZZLE_64B, 128: _lib.CU_TENSOR_MAP_SWIZZLE_128B}
#: L2 fetch granularity in bytes (0: none) -> ``CUtensorMapL2promotion``.
L2_PROMOTIONS = {0: _lib.CU_TENSOR_MAP_L2_PROMOTION_NONE,
                 64: _lib.CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
                 128: _lib.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                 256: _lib.CU_TENSOR_MAP_L2_PROMOTION_L2_256B}
#: The most dimensions a tiled map may have.
MAX_RANK = 5
_DIM_MAX = 2**32
_STRIDE_LIMIT = 2**40
_BOX_MAX = 256
_ALIGN = 16
_MAP_ALIGN = 64
_MAP_BYTES = ctypes.sizeof(_lib.CUtensorMap)


def _ints(what: str, values, n: int | None = None) -> tuple[int, ...]:
    try:
        out = tuple(values)
    except TypeError:
        raise TypeError(f"tensor map: {what} must be a sequence of ints, not "
                        f"{type(values).__name__}") from None
    for v in out:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"tensor map: {what} must hold ints, not {type(v).__name__} "
                            f"({what} {out!r})")
    if n is not None and len(out) != n:
        raise ValueError(f"tensor map: {what} has {len(out)} entries; a map of rank "
                         f"{n + (1 if what == 'strides' else 0)} needs {n}")
    return tuple(int(v) for v in out)


def _each(what: str, values: tuple, ok, rule: str) -> None:
    for i, v in enumerate(values):
        if not ok(v):
            raise ValueError(f"tensor map: {what}[{i}] = {v} {rule} ({what} {values})")


def check_tiled(dtype, address: int, dims: Sequence[int], strides: Sequence[int],
                box: Sequence[int], *, swizzle: int = 128, l2_promotion: int = 256) -> tuple:
    """Check the arguments of a tiled tensor map against the driver's rules.

    Parameters
    ----------
    dtype : dtype
        float16 or bfloat16 (:data:`TMA_DTYPES`).
    address : int
        The tensor's base address in global memory: 16-byte aligned, not 0.
    dims : sequence of int
        The size of each dimension, innermost (contiguous) first: 1 to :data:`MAX_RANK` of
        them, each in ``[1, 2**32]``.
    strides : sequence of int
        The byte stride of each dimension but the first (``len(dims) - 1`` of them): each a
        multiple of 16 below ``2**40``.
    box : sequence of int
        The elements one copy moves along each dimension: each in ``[1, 256]``; the inner
        extent ``box[0] * itemsize`` a multiple of 16 bytes and, with a swizzle, at most the
        swizzle span.
    swizzle : {0, 32, 64, 128}
        The shared-memory swizzle span in bytes (0: none).
    l2_promotion : {0, 64, 128, 256}
        The L2 fetch granularity in bytes (0: none).

    Returns
    -------
    tuple
        ``(data type enum, address, dims, strides, box, swizzle enum, L2 enum)``, as
        :func:`encode_tiled` passes them.

    Raises
    ------
    TypeError
        A dtype the maps here do not take; values that are not ints.
    ValueError
        A rule of ``cuTensorMapEncodeTiled`` broken (which one, and the values).
    """
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"tensor map: {dtype!r} is not a dtype") from None
    if dt not in TMA_DTYPES:
        raise TypeError(f"tensor map: element type {dt} is not supported here (supported: "
                        f"{', '.join(d.name for d in TMA_DTYPES)})")
    if isinstance(address, (bool, np.bool_)) or not isinstance(address, (int, np.integer)):
        raise TypeError(f"tensor map: address must be an int, not {type(address).__name__}")
    address = int(address)
    dims = _ints("dims", dims)
    rank = len(dims)
    if not 1 <= rank <= MAX_RANK:
        raise ValueError(f"tensor map: rank {rank} (dims {dims}); a tiled map has 1 to "
                         f"{MAX_RANK} dimensions")
    strides = _ints("strides", strides, rank - 1)
    box = _ints("box", box, rank)
    if swizzle not in SWIZZLES:
        raise ValueError(f"tensor map: swizzle {swizzle!r} must be one of {sorted(SWIZZLES)} "
                         "(bytes; 0 for none)")
    if l2_promotion not in L2_PROMOTIONS:
        raise ValueError(f"tensor map: l2_promotion {l2_promotion!r} must be one of "
                         f"{sorted(L2_PROMOTIONS)} (bytes; 0 for none)")
    if address <= 0 or address % _ALIGN:
        raise ValueError(f"tensor map: the address {address:#x} must be a non-null multiple "
                         f"of {_ALIGN} bytes")
    _each("dims", dims, lambda d: 1 <= d <= _DIM_MAX,
          "must be in [1, 2**32] (an empty tensor has no map)")
    _each("strides", strides, lambda v: 0 < v < _STRIDE_LIMIT and v % _ALIGN == 0,
          f"bytes must be a positive multiple of {_ALIGN} below 2**40")
    _each("box", box, lambda b: 1 <= b <= _BOX_MAX, f"must be in [1, {_BOX_MAX}]")
    inner = box[0] * dt.itemsize
    if inner % _ALIGN:
        raise ValueError(f"tensor map: the box's inner extent, {box[0]} x {dt.itemsize} = "
                         f"{inner} bytes, must be a multiple of {_ALIGN}")
    if swizzle and inner > swizzle:
        raise ValueError(f"tensor map: the box's inner extent, {inner} bytes, exceeds the "
                         f"{swizzle}-byte swizzle span")
    return (TMA_DTYPES[dt], address, dims, strides, box, SWIZZLES[swizzle],
            L2_PROMOTIONS[l2_promotion])


def encode_tiled(dtype, address: int, dims: Sequence[int], strides: Sequence[int],
                 box: Sequence[int], *, swizzle: int = 128, l2_promotion: int = 256,
                 device=None) -> bytes:
    """Encode a tiled tensor map (``cuTensorMapEncodeTiled``): the 128 bytes a kernel takes
    as a ``const __grid_constant__ CUtensorMap`` parameter.

    The arguments are those of :func:`check_tiled`, checked first; out-of-bounds elements of a
    box read as zeros, element strides are 1, no interleave.  ``device`` (a
    :class:`~cudalibs.Device`), when given, has its context made current first.

    Returns
    -------
    bytes
        The map, 128 bytes.

    Raises
    ------
    TypeError, ValueError
        As :func:`check_tiled`.
    CudaError
        The driver refused the map (the message lists the arguments).
    """
    dt, address, dims, strides, box, sw, l2 = check_tiled(
        dtype, address, dims, strides, box, swizzle=swizzle, l2_promotion=l2_promotion)
    L = _lib.get()
    if device is not None:
        L.cuCtxSetCurrent(device.raw_context)
    rank = len(dims)
    # The driver writes the map at a 64-byte aligned address: place it in a larger buffer.
    raw = (ctypes.c_ubyte * (_MAP_BYTES + _MAP_ALIGN))()
    tm = _lib.CUtensorMap.from_buffer(raw, (-ctypes.addressof(raw)) % _MAP_ALIGN)
    st = L.cuTensorMapEncodeTiled(
        ctypes.byref(tm), dt, rank, ctypes.c_void_p(address), (ctypes.c_uint64 * rank)(*dims),
        (ctypes.c_uint64 * max(rank - 1, 1))(*strides), (ctypes.c_uint32 * rank)(*box),
        (ctypes.c_uint32 * rank)(*([1] * rank)), _lib.CU_TENSOR_MAP_INTERLEAVE_NONE, sw, l2,
        _lib.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if st:
        raise_for(st, "cuTensorMapEncodeTiled",
                  f"dims {dims}, strides {strides} bytes, box {box}, address {address:#x}, "
                  f"{np.dtype(dtype).name}")
    return bytes(tm)
