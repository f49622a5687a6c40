"""The CUDA driver API: devices, memory, arrays, streams, events, modules, kernels, graphs.

Raw prototypes live in :mod:`cudalibs.driver._lib`; everything here is the Pythonic layer that
the cuBLAS, cuDNN and NCCL bindings share.
"""

from ._core import driver_version, init, is_available, unavailable_reason
from .array import (DeviceArray, asarray, empty, empty_like, from_dlpack, full, full_like,
                    to_device, zeros, zeros_like)
from .device import Device, DeviceProperties, as_device, current_device, device_count
from .memory import DeviceBuffer, HostBuffer, MemoryPool, alloc, alloc_async, pinned_empty
from .stream import Event, Stream, as_stream, current_stream, default_stream
from . import graph
from .launch import Kernel, Launcher
from .module import Module
# Registers the per-stream release of library workspaces and handle bindings.
from . import _handles  # noqa: E402,F401
from .nvrtc import compile
from .operand import operand, operands
from .step import StepGraph, capture_step

__all__ = [
    "Device", "DeviceProperties", "current_device", "device_count", "as_device",
    "DeviceBuffer", "HostBuffer", "MemoryPool", "alloc", "alloc_async", "pinned_empty",
    "DeviceArray", "to_device", "empty", "zeros", "full", "empty_like", "zeros_like",
    "full_like", "asarray", "from_dlpack",
    "Stream", "Event", "current_stream", "default_stream", "as_stream",
    "driver_version", "is_available", "unavailable_reason", "init",
    "Module", "Kernel", "Launcher", "compile", "graph", "operand", "operands",
    "StepGraph", "capture_step",
]
