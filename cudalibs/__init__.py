"""cudalibs: ctypes bindings to the CUDA libraries deep-learning frameworks stand on.

The CUDA driver (devices, memory, streams, kernels), cuBLAS/cuBLASLt, cuDNN, NCCL, cuFFT and
cuSPARSE, wrapped in thin RAII objects that share one device-memory abstraction, :class:`DeviceArray`.
Importing cudalibs loads no library; each is found and loaded on first use (see
:mod:`cudalibs._loader`), so the package imports on machines without a GPU.  The library
bindings -- :mod:`cudalibs.cublas`, :mod:`cudalibs.cudnn`, :mod:`cudalibs.nccl`,
:mod:`cudalibs.cufft`, :mod:`cudalibs.cusparse`, :mod:`cudalibs.kernels` -- and :mod:`cudalibs.testing` are attributes
too, imported on first touch (``cl.cublas.gemm``), and :mod:`cudalibs.graph` is
:mod:`cudalibs.driver.graph`.

>>> import numpy as np, cudalibs as cl
>>> a = cl.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))   # doctest: +SKIP
>>> a.T.get()                                                        # doctest: +SKIP
"""

import importlib as _importlib
import sys as _sys

from . import dtypes
from .driver import (Device, DeviceArray, DeviceBuffer, DeviceProperties, Event, HostBuffer,
                     Kernel, Launcher, MemoryPool, Module, Stream, alloc, alloc_async,
                     as_device, as_stream, asarray, compile, graph,
                     current_device, current_stream, default_stream, device_count,
                     driver_version, driver_version_int, empty, empty_like, from_dlpack, full, full_like,
                     is_available, pinned_empty, to_device, unavailable_reason, zeros,
                     zeros_like)
from .runtime import (Options, Plan, PlanCache, StepGraph, capture_step, operand, operands,
                      option_context, release_all, set_options, tuning_store)
from .runtime.options import options
from .runtime.cache import cache as plan_cache
from .errors import (CaptureError, ClosedError, CublasError, CudaError, CudaLibsError, CudaOutOfMemoryError,
                     CudnnError, FunctionNotFoundError, LibraryNotFoundError, NcclError,
                     NvrtcError, StatusError)

__version__ = "0.1.0"

# ``import cudalibs.graph`` finds the very module ``cl.graph`` is: one module object, so a
# monkeypatch or a check by identity sees the same thing under either name.
_sys.modules[__name__ + ".graph"] = graph

# Subpackages imported on first attribute access (PEP 562): importing one loads no shared
# library either, but each pulls in Python modules a user of the driver layer does not need.
_LAZY = ("cublas", "cudnn", "nccl", "cufft", "cusparse", "kernels", "testing")


def __getattr__(name: str):
    if name in _LAZY:
        # import_module also binds the submodule as an attribute here, so this runs once.
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Device", "DeviceProperties", "current_device", "device_count", "as_device",
    "DeviceBuffer", "HostBuffer", "MemoryPool", "alloc", "alloc_async", "pinned_empty",
    "DeviceArray", "to_device", "empty", "zeros", "full", "empty_like", "zeros_like",
    "full_like", "asarray", "from_dlpack",
    "Stream", "Event", "current_stream", "default_stream", "as_stream",
    "driver_version", "driver_version_int", "is_available", "unavailable_reason", "dtypes",
    "Module", "Kernel", "Launcher", "compile", "graph",
    "operand", "operands", "Plan", "PlanCache", "plan_cache", "release_all", "tuning_store",
    "StepGraph", "capture_step", "Options", "options", "set_options", "option_context",
    "CudaLibsError", "LibraryNotFoundError", "FunctionNotFoundError", "ClosedError",
    "CaptureError",
    "StatusError", "CudaError", "CudaOutOfMemoryError", "NvrtcError", "CublasError",
    "CudnnError", "NcclError",
]
