"""cudalibs: ctypes bindings to the CUDA libraries deep-learning frameworks stand on.

The CUDA driver (devices, memory, streams, kernels), cuBLAS/cuBLASLt, cuDNN and NCCL, wrapped
in thin RAII objects that share one device-memory abstraction, :class:`DeviceArray`.
Importing cudalibs loads no library; each is found and loaded on first use (see
:mod:`cudalibs._loader`), so the package imports on machines without a GPU.

>>> import numpy as np, cudalibs as cl
>>> a = cl.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))   # doctest: +SKIP
>>> a.T.get()                                                        # doctest: +SKIP
"""

from . import dtypes
from .driver import (Device, DeviceArray, DeviceBuffer, DeviceProperties, Event, HostBuffer,
                     Kernel, Launcher, MemoryPool, Module, Stream, alloc, alloc_async,
                     as_device, as_stream, asarray, compile, graph,
                     current_device, current_stream, default_stream, device_count,
                     driver_version, empty, empty_like, from_dlpack, full, full_like,
                     is_available, pinned_empty, to_device, unavailable_reason, zeros,
                     zeros_like)
from .errors import (ClosedError, CublasError, CudaError, CudaLibsError, CudaOutOfMemoryError,
                     CudnnError, FunctionNotFoundError, LibraryNotFoundError, NcclError,
                     NvrtcError, StatusError)

__version__ = "0.1.0"

__all__ = [
    "Device", "DeviceProperties", "current_device", "device_count", "as_device",
    "DeviceBuffer", "HostBuffer", "MemoryPool", "alloc", "alloc_async", "pinned_empty",
    "DeviceArray", "to_device", "empty", "zeros", "full", "empty_like", "zeros_like",
    "full_like", "asarray", "from_dlpack",
    "Stream", "Event", "current_stream", "default_stream", "as_stream",
    "driver_version", "is_available", "unavailable_reason", "dtypes",
    "Module", "Kernel", "Launcher", "compile", "graph",
    "CudaLibsError", "LibraryNotFoundError", "FunctionNotFoundError", "ClosedError",
    "StatusError", "CudaError", "CudaOutOfMemoryError", "NvrtcError", "CublasError",
    "CudnnError", "NcclError",
]
