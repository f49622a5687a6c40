"""The CUDA driver API: devices, memory, arrays, streams, events, modules, kernels, graphs.

Raw prototypes live in :mod:`cudalibs.driver._lib`; everything here is the Pythonic layer of
the CUDA objects themselves.  What the libraries share on top of them (the operand path,
plans and the plan cache, relaunches, handles, options) is :mod:`cudalibs.runtime`.
"""

from ._core import driver_version, driver_version_int, init, is_available, unavailable_reason
from .array import DeviceArray, empty, full, to_device, zeros
from .interop import asarray, empty_like, from_dlpack, full_like, zeros_like
from .device import Device, DeviceProperties, as_device, current_device, device_count
from .host import HostBuffer, pinned_empty
from .memory import DeviceBuffer, MemoryPool, alloc, alloc_async
from .stream import Event, Stream, as_stream, current_stream, default_stream
from . import graph
from .launch import Kernel, Launcher
from .module import Module
from .nvrtc import compile

__all__ = [
    "Device", "DeviceProperties", "current_device", "device_count", "as_device",
    "DeviceBuffer", "HostBuffer", "MemoryPool", "alloc", "alloc_async", "pinned_empty",
    "DeviceArray", "to_device", "empty", "zeros", "full", "empty_like", "zeros_like",
    "full_like", "asarray", "from_dlpack",
    "Stream", "Event", "current_stream", "default_stream", "as_stream",
    "driver_version", "driver_version_int", "is_available", "unavailable_reason", "init",
    "Module", "Kernel", "Launcher", "compile", "graph",
]
