"""Kernel launching: :class:`Kernel` (one function of a loaded module) and :class:`Launcher`.

Loading code is :mod:`cudalibs.driver.module`'s business; this module launches what it
loaded (as cuda.core keeps ``launch`` apart from its programs).  A :class:`Kernel` knows its
parameters from the PTX ``.entry`` signature (see :mod:`cudalibs.driver._params`), so every
launch is type-checked before the driver sees it.

The launch path is built for hot loops:

- a kernel's signature is parsed once; each thread gets its own pre-built parameter block, a
  host buffer with the ``void *kernelParams[]`` pointing into it, so a call packs every
  argument with one ``struct.pack_into`` and passes one integer address;
- ``cuLaunchKernel`` is called through a ctypes prototype whose parameters are all plain
  integers, so ctypes converts nothing but ints;
- launch geometry (grid, block, shared memory) is validated once per distinct value and then
  cached;
- :meth:`Kernel.prepare` fixes the geometry (and stream) up front: a :class:`Launcher` call only
  writes the arguments and calls the driver.

DeviceArray arguments are checked for device and liveness with two attribute reads; other
arrays (``__cuda_array_interface__``, DLPack, DeviceBuffer) go through
:func:`~cudalibs.driver.interop.asarray` first.
"""

from __future__ import annotations

import ctypes
import operator
from threading import get_ident as _get_ident
from typing import NamedTuple

from ..errors import ClosedError
from . import _lib, _params
from ._core import raise_for
from .array import DeviceArray
from .interop import asarray
from .device import Device
from .memory import DeviceBuffer
from .stream import thread_streams, as_stream, default_stream

__all__ = ["Kernel", "Launcher", "KernelAttributes"]

#: The largest value of the driver's ``unsigned int`` launch parameters.
_UINT_MAX = 0xFFFFFFFF


# -- the raw launch entry point ---------------------------------------------------------------
# cuLaunchKernel called through a function pointer without argtypes: the handles go in as the
# ctypes objects we already hold (CUfunction, CUstream, the c_void_p of the parameter array),
# the dimensions as small ints, and ctypes converts nothing else; that halves the cost of the
# call against a fully typed prototype.  (Each dimension is below 2**31, so passing it as a C
# int is exact for the ``unsigned int`` parameter.)
_launch_fn = None

# What cuLaunchKernel answers when the current context is not the function's (another
# device's, or none in a fresh thread): CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_CONTEXT.
_WRONG_CONTEXT = frozenset((400, 201))


def _set_current(ctx) -> None:
    _lib.get().cuCtxSetCurrent(ctx)


def _raw_launch():
    """``cuLaunchKernel`` as an untyped ctypes function pointer (bound once)."""
    global _launch_fn
    if _launch_fn is None:
        addr = ctypes.cast(_lib.get().cuLaunchKernel, ctypes.c_void_p).value
        _launch_fn = ctypes.CFUNCTYPE(ctypes.c_int)(addr)
    return _launch_fn


class KernelAttributes(NamedTuple):
    """A snapshot of :meth:`Kernel.attributes`."""

    num_regs: int
    shared_size_bytes: int
    const_size_bytes: int
    local_size_bytes: int
    max_threads_per_block: int
    ptx_version: int
    binary_version: int
    max_dynamic_shared_size_bytes: int


def _as_dim3(v, what: str) -> tuple[int, int, int]:
    if type(v) is int:
        dims = (v, 1, 1)
    else:
        try:
            items = tuple(v)
        except TypeError:
            try:
                items = (operator.index(v),)
            except TypeError:
                raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, "
                                f"not {type(v).__name__}") from None
        if not 1 <= len(items) <= 3:
            raise ValueError(f"{what} must have 1 to 3 dimensions, not {len(items)}")
        out = []
        for x in items:
            if isinstance(x, bool) or not hasattr(x, "__index__"):
                raise TypeError(f"{what} dimensions must be ints, not {type(x).__name__}")
            # operator.index gives a plain int holding the value (an int subclass's own
            # __index__, __format__ or comparisons are never consulted): the launcher's code
            # is generated from these numbers.
            out.append(operator.index(x))
        dims = tuple(out) + (1,) * (3 - len(out))
    for x in dims:
        if x < 1:
            raise ValueError(f"{what} {dims} has a dimension below 1")
    return dims


def _pointer_check(dev: Device, kernel: str):
    """The checks that turn a pointer-slot argument into a device address."""
    def device_array(a, p):
        if a._device is not dev:
            raise ValueError(f"kernel {kernel} argument {p.index} ({p.name}) is on device "
                             f"{a._device.ordinal}, but the kernel's module is on device "
                             f"{dev.ordinal}")
        b = a._buf
        if b is not None and b._ptr is None:
            raise ClosedError(f"kernel {kernel} argument {p.index} ({p.name}): the array's "
                              "memory is closed")
        return a._ptr

    def other(a, p):
        if isinstance(a, DeviceBuffer):
            if a._device is not dev:
                raise ValueError(f"kernel {kernel} argument {p.index} ({p.name}) is on device "
                                 f"{a._device.ordinal}, but the kernel's module is on device "
                                 f"{dev.ordinal}")
            if a._ptr is None:
                raise ClosedError(f"kernel {kernel} argument {p.index} ({p.name}): the buffer "
                                  "is closed")
            return a._ptr
        if isinstance(a, DeviceArray):
            return device_array(a, p)
        if a is None:
            return 0  # a null pointer, as C code would pass
        try:
            arr = asarray(a)
        except TypeError:
            raise TypeError(f"kernel {kernel} argument {p.index} ({p.describe()}) takes a "
                            f"device array or a pointer (int), not {type(a).__name__}") from None
        return device_array(arr, p)

    return device_array, other


class Kernel:
    """One kernel (``CUfunction``) of a :class:`~cudalibs.driver.module.Module`; keeps the module alive.

    Obtained with ``module["name"]`` or :meth:`~cudalibs.driver.module.Module.get_kernel`.

    Attributes
    ----------
    name : str
        The entry name (mangled for C++ kernels).
    module : Module
    params : tuple of Param or None
        The parameter signature (None for a CUBIN kernel loaded without one).
    """

    __slots__ = ("_module", "_alive", "_name", "_f", "_fh", "_params", "_device", "_blocks",
                 "_dims", "_max_dyn", "_checks", "__weakref__")

    def __init__(self):
        raise TypeError("get kernels from a Module: module['name']")

    @classmethod
    def _make(cls, module, name: str, f, params) -> "Kernel":
        self = object.__new__(cls)
        self._module = module
        self._alive = module._alive
        self._name = name
        self._f = f
        self._fh = ctypes.cast(f, ctypes.c_void_p).value or 0
        self._params = params
        self._device = module._device
        self._blocks = {}
        self._dims = {}
        self._max_dyn = None
        self._checks = _pointer_check(self._device, name)
        return self

    # -- identity ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def module(self):
        """The :class:`~cudalibs.driver.module.Module` the kernel comes from (not annotated:
        that module imports this one)."""
        return self._module

    @property
    def device(self) -> Device:
        return self._device

    @property
    def params(self):
        return self._params

    @property
    def handle(self) -> int:
        """The raw ``CUfunction``."""
        self._check()
        return self._fh

    def _check(self):
        if not self._alive[0]:
            raise ClosedError(f"kernel {self._name}: its module is closed")
        return self._f

    def __repr__(self) -> str:
        sig = ("?" if self._params is None
               else ", ".join(f".{p.type}" + (f"[{p.count}]" if p.count else "")
                              for p in self._params))
        state = " (module closed)" if not self._alive[0] else ""
        return f"<Kernel {self._name}({sig}) on device {self._device.ordinal}{state}>"

    # -- attributes -------------------------------------------------------------------------
    def _attr(self, code: int) -> int:
        f = self._check()
        v = ctypes.c_int()
        st = _lib.get().cuFuncGetAttribute(ctypes.byref(v), code, f)
        if st:
            raise_for(st, "cuFuncGetAttribute")
        return v.value

    @property
    def num_regs(self) -> int:
        """Registers per thread."""
        return self._attr(_lib.CU_FUNC_ATTRIBUTE_NUM_REGS)

    @property
    def shared_size_bytes(self) -> int:
        """Static shared memory per block."""
        return self._attr(_lib.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)

    @property
    def const_size_bytes(self) -> int:
        return self._attr(_lib.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)

    @property
    def local_size_bytes(self) -> int:
        """Local memory per thread (register spills, stack arrays)."""
        return self._attr(_lib.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)

    @property
    def max_threads_per_block(self) -> int:
        """The largest block this kernel can be launched with (registers permitting)."""
        return self._attr(_lib.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)

    @property
    def ptx_version(self) -> int:
        """PTX virtual architecture the kernel was compiled for, ``10 * major + minor``."""
        return self._attr(_lib.CU_FUNC_ATTRIBUTE_PTX_VERSION)

    @property
    def binary_version(self) -> int:
        """Architecture of the binary, ``10 * major + minor`` (90 for sm_90)."""
        return self._attr(_lib.CU_FUNC_ATTRIBUTE_BINARY_VERSION)

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        """The most dynamic shared memory a launch may ask for (48 KiB unless raised)."""
        v = self._attr(_lib.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        self._max_dyn = v
        return v

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        f = self._check()
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("max_dynamic_shared_size_bytes must be an int")
        value = operator.index(value)   # a plain int: a subclass's comparisons are not asked
        limit = self._device.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN") - self.shared_size_bytes
        if not 0 <= value <= limit:
            raise ValueError(f"kernel {self._name}: dynamic shared memory {value} is outside "
                             f"[0, {limit}] (the device's opt-in limit less the kernel's "
                             "static shared memory)")
        st = _lib.get().cuFuncSetAttribute(f, _lib.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                           value)
        if st:
            raise_for(st, "cuFuncSetAttribute")
        self._max_dyn = value
        self._dims.clear()

    def attributes(self) -> KernelAttributes:
        """All the attributes above at once."""
        return KernelAttributes(self.num_regs, self.shared_size_bytes, self.const_size_bytes,
                                self.local_size_bytes, self.max_threads_per_block,
                                self.ptx_version, self.binary_version,
                                self.max_dynamic_shared_size_bytes)

    # -- occupancy --------------------------------------------------------------------------
    def max_active_blocks_per_sm(self, block, shared_mem: int = 0) -> int:
        """How many blocks of ``block`` threads fit on one multiprocessor at once."""
        f = self._check()
        threads = 1
        for d in _as_dim3(block, "block"):
            threads *= d
        n = ctypes.c_int()
        L = _lib.get()
        L.cuCtxSetCurrent(self._device._ctx)
        st = L.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), f, threads,
                                                           int(shared_mem))
        if st:
            raise_for(st, "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return n.value

    def max_potential_block_size(self, shared_mem: int = 0,
                                 block_size_limit: int = 0) -> tuple[int, int]:
        """``(min_grid_size, block_size)`` that maximise occupancy (``shared_mem`` bytes of
        dynamic shared memory per block, whatever the block size)."""
        f = self._check()
        grid, block = ctypes.c_int(), ctypes.c_int()
        L = _lib.get()
        L.cuCtxSetCurrent(self._device._ctx)
        # A NULL callback: the dynamic shared memory is the same for every block size.
        st = L.cuOccupancyMaxPotentialBlockSize(ctypes.byref(grid), ctypes.byref(block), f,
                                                _lib.CUoccupancyB2DSize(), int(shared_mem),
                                                int(block_size_limit))
        if st:
            raise_for(st, "cuOccupancyMaxPotentialBlockSize")
        return grid.value, block.value

    def suggested_block_size(self, shared_mem: int = 0) -> int:
        """The block size (threads) that maximises occupancy."""
        return self.max_potential_block_size(shared_mem)[1]

    # -- launch -----------------------------------------------------------------------------
    def _geometry(self, grid, block, shared_mem) -> tuple:
        """Validated ``(gx, gy, gz, bx, by, bz, shared)``, cached per distinct value."""
        try:
            hit = self._dims.get((grid, block, shared_mem))
        except TypeError:  # unhashable (a list): validate every time
            hit = None
        if hit is not None:
            return hit
        self._check()
        g = _as_dim3(grid, "grid")
        b = _as_dim3(block, "block")
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, int):
            raise TypeError(f"shared_mem must be an int, not {type(shared_mem).__name__}")
        # The plain int an int subclass holds: its own comparisons could pass the range checks
        # below and its __format__ would write the launcher's generated code.
        shared_mem = operator.index(shared_mem)
        dev = self._device
        a = dev.attribute
        lim_b = (a("MAX_BLOCK_DIM_X"), a("MAX_BLOCK_DIM_Y"), a("MAX_BLOCK_DIM_Z"))
        lim_g = (a("MAX_GRID_DIM_X"), a("MAX_GRID_DIM_Y"), a("MAX_GRID_DIM_Z"))
        for axis, (x, lim) in enumerate(zip(b, lim_b)):
            if x > lim:
                raise ValueError(f"kernel {self._name}: block {b} exceeds the device's limit "
                                 f"{lim} in dimension {'xyz'[axis]}")
        for axis, (x, lim) in enumerate(zip(g, lim_g)):
            if x > lim:
                raise ValueError(f"kernel {self._name}: grid {g} exceeds the device's limit "
                                 f"{lim} in dimension {'xyz'[axis]}")
        threads = b[0] * b[1] * b[2]
        max_threads = min(a("MAX_THREADS_PER_BLOCK"), self.max_threads_per_block)
        if threads > max_threads:
            raise ValueError(f"kernel {self._name}: a block of {threads} threads {b} exceeds "
                             f"the limit of {max_threads} for this kernel on this device")
        if shared_mem < 0:
            raise ValueError("shared_mem must be non-negative")
        max_dyn = self._max_dyn if self._max_dyn is not None else self.max_dynamic_shared_size_bytes
        if shared_mem > max_dyn:
            optin = a("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
            raise ValueError(f"kernel {self._name}: {shared_mem} bytes of dynamic shared memory "
                             f"exceed its limit of {max_dyn}; raise it with "
                             f"kernel.max_dynamic_shared_size_bytes = n (the device allows up "
                             f"to {optin - self.shared_size_bytes})")
        dims = g + b + (shared_mem,)
        try:
            if len(self._dims) < 64:
                self._dims[(grid, block, shared_mem)] = dims
        except TypeError:
            pass
        return dims

    def _block(self) -> tuple:
        """This thread's ``(ParamBlock, kernelParams pointer)`` (one per thread, so concurrent
        launches from several threads never mix their arguments)."""
        key = _get_ident()
        blk = self._blocks.get(key)
        if blk is None:
            if self._params is None:
                raise TypeError(f"kernel {self._name} comes from an image without PTX, so its "
                                "parameters are unknown: get it with "
                                "module.get_kernel(name, signature='u64, u32, ...')")
            blk = self._new_block()
            self._blocks[key] = blk
        return blk

    def _new_block(self) -> tuple:
        device_array, other = self._checks
        blk = _params.ParamBlock(self._params, self._name, other, {DeviceArray: device_array},
                                 (DeviceArray, self._device))
        # What cuLaunchKernel takes as kernelParams: the array's address, or NULL.
        blk_ptr = ctypes.c_void_p(blk.address) if blk.address else None
        return blk, blk_ptr

    def _stream_handle(self, stream) -> int:
        if stream is None:
            stack = thread_streams.__dict__.get("streams")
            s = stack[-1] if stack else default_stream()
        else:
            s = as_stream(stream)
        if not s._alive[0]:
            raise ClosedError("stream is closed")
        sd = s._device
        if sd is not None and sd is not self._device:
            raise ValueError(f"kernel {self._name} is on device {self._device.ordinal} but the "
                             f"stream is on device {sd.ordinal}")
        return s._h

    def launch(self, grid, block, *args, shared_mem: int = 0, stream=None, cluster=None,
               cooperative: bool = False) -> None:
        """Launch the kernel (asynchronously, on ``stream``).

        Parameters
        ----------
        grid, block : int or tuple of 1 to 3 ints
        *args
            One per kernel parameter: a DeviceArray (or any CAI/DLPack array, a DeviceBuffer,
            or an int address) for a pointer; an int/float/bool or numpy scalar for a scalar,
            checked against its type's range; bytes, a numpy structured scalar or a ctypes
            Structure for a struct passed by value.
        shared_mem : int, default 0
            Dynamic shared memory per block, in bytes.
        stream : Stream, optional
            The thread's current stream by default.
        cluster : int or tuple, optional
            Thread-block cluster dimensions (compute capability 9.0 or newer); the grid must
            be a multiple of them.
        cooperative : bool, default False
            A cooperative launch (grid-wide synchronisation): every block must be resident at
            once.

        Raises
        ------
        TypeError
            Wrong number or kind of arguments (naming the kernel and the parameter).
        ValueError
            An argument out of range or on another device; grid, block or shared memory beyond
            the limits.
        ClosedError
            The module, an array or the stream is closed.
        """
        if not self._alive[0]:
            raise ClosedError(f"kernel {self._name}: its module is closed")
        try:
            dims = self._dims.get((grid, block, shared_mem))
        except TypeError:  # a list: not hashable, validated below
            dims = None
        if dims is None:
            dims = self._geometry(grid, block, shared_mem)
        if cluster is not None or cooperative:
            return self._launch_ex(dims, args, stream, cluster, cooperative)
        if stream is None:
            # The thread-local's own dict: a missing attribute costs no exception this way.
            stack = thread_streams.__dict__.get("streams")
            if stack:
                s = stack[-1]
                h = s._h if s._alive[0] and (s._device is None or s._device is self._device) \
                    else self._stream_handle(s)
            else:
                h = default_stream()._h
        else:
            h = self._stream_handle(stream)
        blk, ptr = self._blocks.get(_get_ident()) or self._block()
        blk.write(args)
        if _capture_sinks:
            _note_capture(self._module)
        st = (_launch_fn or _raw_launch())(self._f, *dims, h, ptr, None)
        if st:
            if st in _WRONG_CONTEXT:
                # Another device's context (or none) is current in this thread: the function
                # belongs to its module's context.  Retrying here keeps the common case free
                # of a cuCtxSetCurrent call.
                _lib.get().cuCtxSetCurrent(self._device._ctx)
                st = _launch_fn(self._f, *dims, h, ptr, None)
            if st:
                raise_for(st, "cuLaunchKernel", f"kernel {self._name}, grid {dims[:3]}, "
                          f"block {dims[3:6]}, shared memory {dims[6]}")

    __call__ = launch

    def _ex_attrs(self, dims, cluster, cooperative):
        attrs = []
        dev = self._device
        if cluster is not None:
            c = _as_dim3(cluster, "cluster")
            if dev.compute_capability < (9, 0):
                raise ValueError(f"thread-block clusters need compute capability 9.0 or newer; "
                                 f"device {dev.ordinal} is {dev.arch}")
            for axis in range(3):
                if dims[axis] % c[axis]:
                    raise ValueError(f"grid {dims[:3]} is not a multiple of cluster {c} in "
                                     f"dimension {'xyz'[axis]}")
            if c[0] * c[1] * c[2] > 16:
                raise ValueError(f"cluster {c} has more than 16 blocks (the most any device "
                                 "supports; 8 is the portable limit)")
            at = _lib.CUlaunchAttribute()
            at.id = _lib.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            at.value.clusterDim.x, at.value.clusterDim.y, at.value.clusterDim.z = c
            attrs.append(at)
        if cooperative:
            if not dev.attribute("COOPERATIVE_LAUNCH"):
                raise ValueError(f"device {dev.ordinal} does not support cooperative launches")
            blocks = dims[0] * dims[1] * dims[2]
            per_sm = self.max_active_blocks_per_sm(dims[3:6], dims[6])
            most = per_sm * dev.multiprocessor_count
            if blocks > most:
                raise ValueError(f"cooperative launch of {blocks} blocks: at most {most} can be "
                                 f"resident at once ({per_sm} per SM x "
                                 f"{dev.multiprocessor_count} SMs)")
            at = _lib.CUlaunchAttribute()
            at.id = _lib.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            at.value.cooperative = 1
            attrs.append(at)
        arr = (_lib.CUlaunchAttribute * max(len(attrs), 1))(*attrs)
        return arr, len(attrs)

    def _ex_config(self, dims, attrs, n):
        cfg = _lib.CUlaunchConfig()
        (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ,
         cfg.sharedMemBytes) = dims
        cfg.attrs = ctypes.cast(attrs, ctypes.POINTER(_lib.CUlaunchAttribute))
        cfg.numAttrs = n
        return cfg

    def _launch_ex(self, dims, args, stream, cluster, cooperative):
        attrs, n = self._ex_attrs(dims, cluster, cooperative)
        cfg = self._ex_config(dims, attrs, n)
        cfg.hStream = self._stream_handle(stream)
        blk, _ptr = self._block()
        blk.write(args)
        if _capture_sinks:
            _note_capture(self._module)
        params = ctypes.cast(ctypes.c_void_p(blk.address), ctypes.POINTER(ctypes.c_void_p))
        L = _lib.get()
        L.cuCtxSetCurrent(self._device._ctx)
        st = L.cuLaunchKernelEx(ctypes.byref(cfg), self._f, params, None)
        if st:
            raise_for(st, "cuLaunchKernelEx", f"kernel {self._name}, grid {dims[:3]}, block "
                      f"{dims[3:6]}, cluster {cluster}, cooperative {cooperative}")

    def prepare(self, grid, block, *, shared_mem: int = 0, stream=None, cluster=None,
                cooperative: bool = False) -> "Launcher":
        """A :class:`Launcher` with the geometry (and stream) validated once.

        ``stream=None`` means the calling thread's current stream at each call.
        """
        return Launcher(self, grid, block, shared_mem, stream, cluster, cooperative)


class Launcher:
    """A kernel with fixed launch geometry: ``launcher(*args)`` launches it.

    Made by :meth:`Kernel.prepare`.  A call checks the arguments (count, kinds, ranges, the
    device and liveness of arrays), writes them into a parameter block built once, and calls
    the driver; the code doing this is generated for the kernel's signature when the Launcher
    is made.  A Launcher owns its parameter block: use it from one thread at a time (make one
    per thread to launch from several).
    """

    __slots__ = ("_kernel", "_dims", "_stream", "_call", "_ex", "_blk", "__weakref__")

    def __init__(self, kernel: Kernel, grid, block, shared_mem=0, stream=None, cluster=None,
                 cooperative=False):
        if not kernel._alive[0]:
            raise ClosedError(f"kernel {kernel._name}: its module is closed")
        self._kernel = kernel
        self._dims = kernel._geometry(grid, block, shared_mem)
        if kernel._params is None:
            kernel._block()  # raises the explanation
        blk, ptr = kernel._new_block()
        self._blk = blk
        self._stream = None
        if stream is not None:
            s = as_stream(stream)
            kernel._stream_handle(s)  # device check once
            self._stream = s
        self._ex = None
        if cluster is not None or cooperative:
            attrs, n = kernel._ex_attrs(self._dims, cluster, cooperative)
            cfg = kernel._ex_config(self._dims, attrs, n)
            params = ctypes.cast(ctypes.c_void_p(blk.address), ctypes.POINTER(ctypes.c_void_p))
            self._ex = (cfg, attrs, params, _lib.get().cuLaunchKernelEx)
        self._call = self._generate(blk, ptr)

    def _generate(self, blk, ptr):
        kernel = self._kernel
        lines, ns = blk.writer_code("args")
        # The geometry is written into the generated code as text: only plain ints in range
        # of the driver's unsigned int parameters may get there (_geometry makes them so).
        if not all(type(v) is int and 0 <= v <= _UINT_MAX for v in self._dims):
            raise TypeError(f"launch geometry {self._dims!r} is not made of plain ints in "
                            f"[0, {_UINT_MAX}]")
        gx, gy, gz, bx, by, bz, sm = self._dims
        ns.update(alive=kernel._alive, closed=self._closed, fn=_raw_launch(), f=kernel._f,
                  params=ptr, fixed=self._stream, tls=thread_streams, default_stream=default_stream,
                  dev=kernel._device, check_stream=kernel._stream_handle, sinks=_capture_sinks,
                  note=_note_capture, module=kernel._module, fail=self._fail,
                  call_ex=self._call_ex, wrong_ctx=_WRONG_CONTEXT,
                  set_ctx=_set_current)
        body = ["if not alive[0]: closed()"] + lines
        if self._stream is not None:
            body += ["s = fixed", "if not s._alive[0]: check_stream(s)"]
        else:
            body += ["stack = tls.__dict__.get('streams')",
                     "if stack:",
                     "    s = stack[-1]",
                     "    if not s._alive[0] or (s._device is not None and s._device is not dev):"
                     " check_stream(s)",
                     "else:",
                     "    s = default_stream()"]
        body += ["if sinks: note(module)"]
        if self._ex is not None:
            body += ["return call_ex(s)"]
        else:
            call = f"fn(f, {gx}, {gy}, {gz}, {bx}, {by}, {bz}, {sm}, s._h, params, None)"
            body += [f"st = {call}",
                     "if st:",
                     "    if st in wrong_ctx:",
                     "        set_ctx(dev._ctx)",
                     f"        st = {call}",
                     "    if st: fail(st)"]
        src = "def call(args):\n" + "".join(f"    {line}\n" for line in body)
        exec(src, ns)  # noqa: S102 - generated from the signature and geometry, no user text
        return ns["call"]

    def __call__(self, *args) -> None:
        """Launch with ``args`` (see :meth:`Kernel.launch`)."""
        return self._call(args)

    def _closed(self):
        raise ClosedError(f"kernel {self._kernel._name}: its module is closed")

    def _fail(self, st):
        raise_for(st, "cuLaunchKernel", f"kernel {self._kernel._name}, grid {self.grid}, "
                  f"block {self.block}, shared memory {self.shared_mem}")

    def _call_ex(self, s):
        cfg, _attrs, params, fn = self._ex
        cfg.hStream = s._h
        _lib.get().cuCtxSetCurrent(self._kernel._device._ctx)
        st = fn(ctypes.byref(cfg), self._kernel._f, params, None)
        if st:
            raise_for(st, "cuLaunchKernelEx", f"kernel {self._kernel._name}")

    @property
    def kernel(self) -> Kernel:
        return self._kernel

    @property
    def grid(self) -> tuple[int, int, int]:
        return self._dims[:3]

    @property
    def block(self) -> tuple[int, int, int]:
        return self._dims[3:6]

    @property
    def shared_mem(self) -> int:
        return self._dims[6]

    def __repr__(self) -> str:
        s = "the current stream" if self._stream is None else repr(self._stream)
        return (f"<Launcher {self._kernel._name} grid={self.grid} block={self.block} "
                f"shared_mem={self.shared_mem} on {s}>")


# -- graph capture bookkeeping ----------------------------------------------------------------
# While a graph capture is open, every launch notes its module here so that the graph keeps
# the module (and so the code its nodes run) alive.  Empty otherwise: one global truth test
# per launch.
_capture_sinks: list = []


def _note_capture(module) -> None:
    for sink in _capture_sinks:
        sink.add(module)


def add_capture_sink(sink: set) -> None:
    """Collect into ``sink`` the module of every launch made until
    :func:`remove_capture_sink` (a capture block's modules, which its graph keeps alive)."""
    _capture_sinks.append(sink)


def remove_capture_sink(sink: set) -> None:
    """Stop collecting into ``sink``; nothing happens if it is not collecting.

    Matched by identity: two capture blocks' sets may be equal (both empty), and removing
    the other one would stop its graph from keeping its modules alive.
    """
    for i, other in enumerate(_capture_sinks):
        if other is sink:
            del _capture_sinks[i]
            return
