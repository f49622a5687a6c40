"""The shipped kernel library as the driver layer sees it: modules loaded once per device,
kernels by name, prepared launchers per launch shape.

:mod:`cudalibs.kernels` wraps these kernels for users; other libraries that need one of them
(the cuDNN fused convolution's bias + activation epilogue) call the launch helpers here, with
arguments they checked once at plan time, instead of importing a sibling library.
"""

from __future__ import annotations

import collections
import threading
import weakref

import numpy as np

from .. import dtypes as _dtypes
from .. import ptx as _ptx
from ..driver.module import Module
from ..driver.stream import Stream
from ..errors import CudaLibsError
from .cache import RELEASE_HOOKS

__all__ = ["kernel", "launch", "check_arch", "elementwise_grid", "launch_channel_bias_act",
           "clear_cache",
           "SUFFIX"]

#: Kernel-name suffix of each element type.
SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16"}
if _dtypes.bfloat16 is not None:
    SUFFIX[np.dtype(_dtypes.bfloat16)] = "bf16"

# kernel name -> PTX file stem
_STEM = {name: stem for stem, names in _ptx.ENTRIES.items() for name in names}


# -- loading and launching ----------------------------------------------------------------------
class _Cache:
    """Modules per (device, file) and kernels per (device, name), shared by all threads;
    prepared launchers per launch shape, one cache per thread (a launcher owns the parameter
    block it writes the arguments into, so two threads must never share one)."""

    __slots__ = ("lock", "modules", "kernels", "local", "sm_counts", "generation")
    MAX_LAUNCHERS = 256

    def __init__(self):
        self.lock = threading.Lock()
        self.modules = {}
        self.kernels = {}
        self.local = threading.local()
        self.sm_counts = {}
        self.generation = 0

    def launchers(self) -> collections.OrderedDict:
        """This thread's launcher cache (emptied when :func:`clear_cache` ran since)."""
        local = self.local
        cache = getattr(local, "launchers", None)
        if cache is None or local.generation != self.generation:
            cache = local.launchers = collections.OrderedDict()
            local.generation = self.generation
        return cache


_cache = _Cache()


def clear_cache() -> None:
    """Forget every loaded module, kernel and prepared launcher of the kernel library.

    The modules are unloaded when nothing else holds them; the next call loads them again.
    """
    with _cache.lock:
        _cache.generation += 1
        _cache.local.launchers = None
        _cache.kernels.clear()
        _cache.modules.clear()


def kernel(device, name: str):
    """The kernel ``name`` of the shipped library on ``device`` (its file loaded once)."""
    key = (device.ordinal, name)
    k = _cache.kernels.get(key)
    if k is not None:
        return k
    stem = _STEM[name]
    with _cache.lock:
        mod = _cache.modules.get((device.ordinal, stem))
        if mod is None:
            check_arch(device, stem, f"kernel {name}")
            mod = Module.from_ptx(_ptx.read_ptx(stem), device=device)
            _cache.modules[(device.ordinal, stem)] = mod
        k = _cache.kernels.get(key)
        if k is None:
            k = _cache.kernels[key] = mod[name]
    return k


def check_arch(device, stem: str, what: str) -> None:
    """Raise :class:`~cudalibs.CudaLibsError` when ``stem.ptx`` is built for a newer
    architecture than ``device`` has (``cudalibs.ptx.TARGETS``), or for an
    architecture-specific target (``sm_90a``) of another compute capability than the
    device's: the driver's JIT would refuse its ``.target`` with a bare status.  ``what``
    starts the message."""
    need = _ptx.compute_capability(stem)
    have = tuple(device.compute_capability)
    if _ptx.arch_specific(stem) and have != need:
        raise CudaLibsError(f"{what}: {stem}.ptx is built for {_ptx.target(stem)}, whose code "
                            f"runs on compute capability {need[0]}.{need[1]} only (an "
                            f"architecture-specific target); device {device.ordinal} has "
                            f"{have[0]}.{have[1]}")
    if have < need:
        raise CudaLibsError(f"{what}: {stem}.ptx is built for {_ptx.target(stem)} and needs "
                            f"compute capability {need[0]}.{need[1]} or newer; device "
                            f"{device.ordinal} has {have[0]}.{have[1]}")


def launch(device, name: str, grid: tuple, block: tuple, args: tuple, stream,
            shared_mem: int = 0) -> None:
    """Launch ``name`` on ``device`` through a cached prepared launcher.

    ``shared_mem`` above the default limit of dynamic shared memory (48 KiB) raises the
    kernel's limit first (once per kernel): the Hopper grouped GEMM's stages need up to
    about 217 KiB.
    """
    key = (device.ordinal, name, grid, block, shared_mem, stream.raw_handle)
    launchers = _cache.launchers()
    entry = launchers.get(key)
    # An owned stream's launcher is valid only for that very object, still open: the driver may
    # give a closed stream's handle value to a new one.  The entry refers to the object weakly
    # and the launcher is bound to a borrowed wrapper of its handle, so the cache never keeps
    # a stream the user dropped alive.  Default and foreign streams are not ours to destroy:
    # any wrapper of the handle names the same stream.
    if entry is None or not (entry[1]._alive[0] and stream._alive[0]) \
            or (entry[0] is not None and entry[0]() is not stream):
        k = kernel(device, name)
        if shared_mem > _DEFAULT_DYNAMIC_SMEM:
            _opt_in(k, shared_mem)
        prepare = getattr(k, "prepare", None)
        if prepare is None:
            k.launch(grid, block, *args, shared_mem=shared_mem, stream=stream)
            return
        if stream.owned:
            ref = weakref.ref(stream)
            bound = Stream.from_handle(stream.raw_handle, device)
        else:
            ref, bound = None, stream
        entry = (ref, bound, prepare(grid, block, shared_mem=shared_mem, stream=bound))
        launchers[key] = entry
        while len(launchers) > _cache.MAX_LAUNCHERS:
            launchers.popitem(last=False)
    entry[2](*args)


#: Dynamic shared memory every kernel may use without raising its limit.
_DEFAULT_DYNAMIC_SMEM = 48 * 1024


def _opt_in(k, shared_mem: int) -> None:
    """Raise kernel ``k``'s limit of dynamic shared memory to ``shared_mem`` bytes, if lower
    (under the cache's lock: launchers of several threads may be made at once)."""
    with _cache.lock:
        if k.max_dynamic_shared_size_bytes < shared_mem:
            k.max_dynamic_shared_size_bytes = shared_mem


def elementwise_grid(device, n: int) -> tuple[tuple, tuple]:
    """A grid for the grid-stride kernels: enough blocks to fill the GPU, no more."""
    sms = _cache.sm_counts.get(device.ordinal)
    if sms is None:
        sms = _cache.sm_counts[device.ordinal] = int(device.multiprocessor_count)
    threads = 256
    blocks = max(1, min(-(-n // threads), sms * 16))
    return (blocks, 1, 1), (threads, 1, 1)


def launch_channel_bias_act(dev, dtype, y_ptr, z_ptr, alpha2, bias_ptr, n, channels, inner,
                            relu, stream) -> None:
    """Queue the ``channel_bias_act`` kernel with arguments already checked (by
    :func:`channel_bias_act`, or once at plan time by a caller such as the fused cuDNN
    convolution)."""
    if n:
        grid, block = elementwise_grid(dev, n)
        launch(dev, f"channel_bias_act_{SUFFIX[np.dtype(dtype)]}", grid, block,
                (y_ptr, z_ptr, float(alpha2), bias_ptr, n, channels, inner, 1 if relu else 0),
                stream)


# Unloading the kernel library's modules is part of releasing what cudalibs holds.
RELEASE_HOOKS.append(clear_cache)
