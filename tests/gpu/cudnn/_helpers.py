"""Shared pieces of the cuDNN GPU tests: arrays in either layout, poisoned outputs."""

import numpy as np

import cudalibs as cl
from cudalibs import testing as T

from .._sizes import gpu_settings

GPU = gpu_settings(20)

FLOATS = ("float32", "float16", "bfloat16")


def np_dtype(name):
    return cl.dtypes.lookup(name).numpy


def _to_last(ndim):
    return (0,) + tuple(range(2, ndim)) + (1,)


def _to_first(ndim):
    return (0, ndim - 1) + tuple(range(1, ndim - 1))


def device_array(host, channels_last=False):
    """``host`` (logical N, C, ...) on the device, packed channels-first or channels-last."""
    if not channels_last or host.ndim < 3:
        return cl.to_device(np.ascontiguousarray(host))
    d = cl.to_device(np.ascontiguousarray(host.transpose(_to_last(host.ndim))))
    return d.transpose(_to_first(host.ndim))


def poisoned(shape, dtype, channels_last=False):
    """An output array full of NaN (a missed write shows), in the given layout."""
    dtype = np.dtype(dtype)
    if not channels_last or len(shape) < 3:
        return cl.empty(shape, dtype).fill(T.poison_value(dtype))
    phys = tuple(shape[i] for i in _to_last(len(shape)))
    return cl.empty(phys, dtype).fill(T.poison_value(dtype)).transpose(_to_first(len(shape)))


def rand(shape, dtype, rng, channels_last=False, low=-1.0, high=1.0):
    """(host array, device array) of fresh random nonzero values."""
    host = T.random_array(shape, np_dtype(dtype), rng=rng, low=low, high=high)
    return host, device_array(host, channels_last)


def is_channels_last(arr):
    """Whether ``arr`` is laid out channels-last (size-1 dimensions may make it both)."""
    from cudalibs.cudnn.descriptors import layouts_of

    return True in layouts_of(arr.shape, arr.strides, arr.itemsize)
