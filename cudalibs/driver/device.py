"""GPUs and their primary contexts.

``Device(n)`` is one object per ordinal per process.  It retains the device's *primary*
context, the one the CUDA runtime, PyTorch and CuPy use, so memory and streams made here are
usable there and the other way round.  Every method of every cudalibs object makes its own
device's context current before calling the driver: there is no device stack to get wrong.
``with Device(1):`` makes device 1 current for the block (for calls that take ``device=None``)
and restores the previous context afterwards.
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading

from .._ffi import refuse_in_capture
from ..errors import CudaError, LibraryNotFoundError
from . import _lib
from ._core import init, raise_for

__all__ = ["Device", "DeviceProperties", "current_device", "device_count", "as_device"]


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """A snapshot of the properties most programs ask for (see :meth:`Device.attribute`)."""

    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    total_memory: int
    multiprocessor_count: int
    max_threads_per_block: int
    max_threads_per_multiprocessor: int
    warp_size: int
    l2_cache_size: int
    shared_memory_per_block: int
    shared_memory_per_block_optin: int
    shared_memory_per_multiprocessor: int
    registers_per_block: int
    clock_rate_khz: int
    memory_clock_rate_khz: int
    memory_bus_width: int
    pci_bus_id: str
    uuid: str
    ecc_enabled: bool
    integrated: bool
    concurrent_kernels: bool
    async_engine_count: int
    memory_pools_supported: bool
    cooperative_launch: bool
    cluster_launch: bool


class Device:
    """One GPU, by ordinal; ``Device(0) is Device(0)``.

    Parameters
    ----------
    ordinal : int, optional
        Index among the visible devices (``CUDA_VISIBLE_DEVICES`` applies). Default 0.

    Raises
    ------
    ValueError
        ``ordinal`` is not a valid device index.
    TypeError
        ``ordinal`` is not an integer.

    Attributes
    ----------
    raw_context : CUcontext
        The retained primary context (ctypes), for ``cuCtxSetCurrent`` on the libraries' hot
        paths; one slot read, read-only.  :attr:`context` is its address as an int.
    """

    __slots__ = ("_ordinal", "_handle", "_ctx", "_name", "_cc", "_attr_cache", "_pool",
                 "_entered", "__weakref__")

    def __setattr__(self, name, value):
        if name == "raw_context":
            raise AttributeError("Device.raw_context is read-only")
        object.__setattr__(self, name, value)
    _instances: dict[int, "Device"] = {}
    _lock = threading.Lock()

    def __new__(cls, ordinal: int = 0):
        dev = cls._instances.get(ordinal) if type(ordinal) is int else None
        if dev is not None:
            return dev
        ordinal = _check_ordinal(ordinal)
        with cls._lock:
            dev = cls._instances.get(ordinal)
            if dev is None:
                dev = object.__new__(cls)
                dev._init(ordinal)
                cls._instances[ordinal] = dev
        return dev

    def _init(self, ordinal: int) -> None:
        L = init()
        h = _lib.CUdevice()
        st = L.cuDeviceGet(ctypes.byref(h), ordinal)
        if st:
            raise_for(st, "cuDeviceGet")
        ctx = _lib.CUcontext()
        st = L.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), h.value)
        if st:
            raise_for(st, "cuDevicePrimaryCtxRetain")
        # The primary context stays retained for the life of the process: buffers, streams and
        # library handles of this device may outlive any one Python reference to it, and the
        # driver releases everything at process exit.
        self._ordinal = ordinal
        self._handle = h.value
        self._ctx = ctx
        self._name = None
        self._cc = None
        self._attr_cache = {}
        self._pool = None
        self._entered = threading.local()

    # -- identity -------------------------------------------------------------------------
    @property
    def ordinal(self) -> int:
        """Index of this device among the visible ones."""
        return self._ordinal

    @property
    def handle(self) -> int:
        """The ``CUdevice`` value."""
        return self._handle

    @property
    def context(self) -> int:
        """Address of the retained primary ``CUcontext``."""
        return ctypes.cast(self._ctx, ctypes.c_void_p).value or 0

    def __index__(self) -> int:
        return self._ordinal

    def __repr__(self) -> str:
        try:
            cc = self.compute_capability
            return (f"<Device {self._ordinal}: {self.name}, sm_{cc[0]}{cc[1]}, "
                    f"{self.total_memory / 2**30:.1f} GiB>")
        except Exception:  # a repr must not raise
            return f"<Device {self._ordinal}>"

    def __reduce__(self):
        return (Device, (self._ordinal,))

    # -- context ----------------------------------------------------------------------------
    def set_current(self) -> "Device":
        """Make this device's primary context current on the calling thread."""
        st = _lib.get().cuCtxSetCurrent(self._ctx)
        if st:
            raise_for(st, "cuCtxSetCurrent")
        return self

    def __enter__(self) -> "Device":
        prev = _lib.CUcontext()
        L = _lib.get()
        st = L.cuCtxGetCurrent(ctypes.byref(prev))
        if st:
            raise_for(st, "cuCtxGetCurrent")
        stack = getattr(self._entered, "stack", None)
        if stack is None:
            stack = self._entered.stack = []
        stack.append(prev)
        self.set_current()
        return self

    def __exit__(self, *exc) -> None:
        prev = self._entered.stack.pop()
        _lib.get().cuCtxSetCurrent(prev)

    def synchronize(self) -> None:
        """Wait for all work on this device's primary context to finish."""
        refuse_in_capture("Device.synchronize()", "a graph cannot wait on the host")
        L = _lib.get()
        L.cuCtxSetCurrent(self._ctx)
        st = L.cuCtxSynchronize()
        if st:
            raise_for(st, "cuCtxSynchronize")

    # -- properties -------------------------------------------------------------------------
    def attribute(self, name: str | int) -> int:
        """One ``CUdevice_attribute`` value.

        Parameters
        ----------
        name : str or int
            The attribute's name without the ``CU_DEVICE_ATTRIBUTE_`` prefix, in any case
            (``"multiprocessor_count"``), or its enum value.
        """
        if isinstance(name, str):
            key = name.upper().removeprefix("CU_DEVICE_ATTRIBUTE_")
            try:
                code = _lib.DEVICE_ATTRIBUTES[key]
            except KeyError:
                raise ValueError(f"unknown device attribute {name!r}") from None
        else:
            code = int(name)
        hit = self._attr_cache.get(code)
        if hit is not None:
            return hit
        v = ctypes.c_int()
        st = _lib.get().cuDeviceGetAttribute(ctypes.byref(v), code, self._handle)
        if st:
            raise_for(st, "cuDeviceGetAttribute", f"attribute {name!r}")
        # Attributes are fixed for the life of the process, so one query each suffices.
        self._attr_cache[code] = v.value
        return v.value

    def attributes(self) -> dict[str, int]:
        """Every attribute the driver reports for this device, by name."""
        out = {}
        for key, code in _lib.DEVICE_ATTRIBUTES.items():
            try:
                out[key.lower()] = self.attribute(code)
            except CudaError:  # attributes newer than the installed driver
                continue
        return out

    @property
    def name(self) -> str:
        """The marketing name (``"NVIDIA H100 80GB HBM3"``)."""
        if self._name is None:
            buf = ctypes.create_string_buffer(256)
            st = _lib.get().cuDeviceGetName(buf, 256, self._handle)
            if st:
                raise_for(st, "cuDeviceGetName")
            self._name = buf.value.decode(errors="replace")
        return self._name

    @property
    def compute_capability(self) -> tuple[int, int]:
        """``(major, minor)``, e.g. ``(9, 0)`` for Hopper."""
        if self._cc is None:
            self._cc = (self.attribute("COMPUTE_CAPABILITY_MAJOR"),
                        self.attribute("COMPUTE_CAPABILITY_MINOR"))
        return self._cc

    @property
    def arch(self) -> str:
        """The architecture name NVRTC and nvcc take (``"sm_90"``)."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def multiprocessor_count(self) -> int:
        return self.attribute("MULTIPROCESSOR_COUNT")

    @property
    def total_memory(self) -> int:
        """Bytes of device memory."""
        v = ctypes.c_size_t()
        st = _lib.get().cuDeviceTotalMem_v2(ctypes.byref(v), self._handle)
        if st:
            raise_for(st, "cuDeviceTotalMem_v2")
        return v.value

    def mem_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of device memory right now."""
        L = _lib.get()
        L.cuCtxSetCurrent(self._ctx)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        st = L.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        if st:
            raise_for(st, "cuMemGetInfo_v2")
        return free.value, total.value

    @property
    def free_memory(self) -> int:
        """Bytes of device memory free right now."""
        return self.mem_info()[0]

    @property
    def pci_bus_id(self) -> str:
        buf = ctypes.create_string_buffer(64)
        st = _lib.get().cuDeviceGetPCIBusId(buf, 64, self._handle)
        if st:
            raise_for(st, "cuDeviceGetPCIBusId")
        return buf.value.decode()

    @property
    def uuid(self) -> str:
        """The GPU's UUID in ``nvidia-smi`` form (``GPU-xxxxxxxx-...``)."""
        u = _lib.CUuuid()
        st = _lib.get().cuDeviceGetUuid_v2(ctypes.byref(u), self._handle)
        if st:
            raise_for(st, "cuDeviceGetUuid_v2")
        # Not ``u.bytes``: ctypes reads a char array field as a C string, which stops at the
        # first zero byte (a UUID may hold one) and would shorten the UUID.
        h = ctypes.string_at(ctypes.addressof(u), ctypes.sizeof(u)).hex()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def can_access_peer(self, other: "Device | int") -> bool:
        """Whether this device can read and write ``other``'s memory directly."""
        other = as_device(other)
        v = ctypes.c_int()
        st = _lib.get().cuDeviceCanAccessPeer(ctypes.byref(v), self._handle, other._handle)
        if st:
            raise_for(st, "cuDeviceCanAccessPeer")
        return bool(v.value)

    @property
    def properties(self) -> DeviceProperties:
        """A :class:`DeviceProperties` snapshot."""
        a = self.attribute
        return DeviceProperties(
            ordinal=self._ordinal, name=self.name, compute_capability=self.compute_capability,
            total_memory=self.total_memory,
            multiprocessor_count=a("MULTIPROCESSOR_COUNT"),
            max_threads_per_block=a("MAX_THREADS_PER_BLOCK"),
            max_threads_per_multiprocessor=a("MAX_THREADS_PER_MULTIPROCESSOR"),
            warp_size=a("WARP_SIZE"), l2_cache_size=a("L2_CACHE_SIZE"),
            shared_memory_per_block=a("MAX_SHARED_MEMORY_PER_BLOCK"),
            shared_memory_per_block_optin=a("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            shared_memory_per_multiprocessor=a("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
            registers_per_block=a("MAX_REGISTERS_PER_BLOCK"),
            clock_rate_khz=a("CLOCK_RATE"), memory_clock_rate_khz=a("MEMORY_CLOCK_RATE"),
            memory_bus_width=a("GLOBAL_MEMORY_BUS_WIDTH"), pci_bus_id=self.pci_bus_id,
            uuid=self.uuid, ecc_enabled=bool(a("ECC_ENABLED")), integrated=bool(a("INTEGRATED")),
            concurrent_kernels=bool(a("CONCURRENT_KERNELS")),
            async_engine_count=a("ASYNC_ENGINE_COUNT"),
            memory_pools_supported=bool(a("MEMORY_POOLS_SUPPORTED")),
            cooperative_launch=bool(a("COOPERATIVE_LAUNCH")),
            cluster_launch=bool(a("CLUSTER_LAUNCH")),
        )

    @property
    def memory_pool(self):
        """This device's :class:`~cudalibs.driver.memory.MemoryPool` for stream-ordered
        allocation (created on first use)."""
        if self._pool is None:
            with Device._lock:
                if self._pool is None:
                    self._pool = POOL_FACTORY[0](self)
        return self._pool

    # -- class-level ------------------------------------------------------------------------
    @staticmethod
    def count() -> int:
        """Number of visible devices; 0 when there is no driver or no GPU."""
        return device_count()


def _check_ordinal(ordinal) -> int:
    if isinstance(ordinal, bool) or not isinstance(ordinal, int):
        try:
            ordinal = ordinal.__index__()
        except AttributeError:
            raise TypeError(f"device ordinal must be an int, not {type(ordinal).__name__}") from None
    n = device_count()
    if not 0 <= ordinal < n:
        raise ValueError(f"device {ordinal} does not exist ({n} device{'s' if n != 1 else ''} visible)")
    return ordinal


# The retained primary context as a ctypes CUcontext, for cuCtxSetCurrent on the libraries'
# hot paths: the slot itself under a public name (one slot read; read-only).
Device.raw_context = Device.__dict__["_ctx"]


def device_count() -> int:
    """Number of visible devices; 0 when there is no driver or no GPU."""
    try:
        L = init()
    except (LibraryNotFoundError, CudaError):
        return 0
    n = ctypes.c_int()
    if L.cuDeviceGetCount(ctypes.byref(n)):
        return 0
    return n.value


_ctx_to_device: dict[int, Device] = {}

#: ``[make(device) -> MemoryPool]``: how :attr:`Device.memory_pool` makes the device's pool,
#: registered by :mod:`cudalibs.driver.memory` (which sits above this module).
POOL_FACTORY: list = []


def current_device() -> Device:
    """The device whose context is current on this thread, or device 0 if none is.

    A context made current by PyTorch (``torch.cuda.set_device``), CuPy or ``with Device(n):``
    counts, so ``device=None`` follows whatever the program last selected.
    """
    L = init()
    ctx = _lib.CUcontext()
    st = L.cuCtxGetCurrent(ctypes.byref(ctx))
    if st:
        raise_for(st, "cuCtxGetCurrent")
    addr = ctypes.cast(ctx, ctypes.c_void_p).value
    if not addr:
        return Device(0)
    dev = _ctx_to_device.get(addr)
    if dev is None:
        h = _lib.CUdevice()
        st = L.cuCtxGetDevice(ctypes.byref(h))
        if st:
            raise_for(st, "cuCtxGetDevice")
        dev = Device(h.value)
        if dev.context == addr:
            _ctx_to_device[addr] = dev
    return dev


def as_device(device) -> Device:
    """Normalise ``None`` (current), an ordinal, a ``Device`` or a ``torch.device``."""
    if device is None:
        return current_device()
    if type(device) is Device:
        return device
    if isinstance(device, int):
        return Device(device)
    kind = getattr(device, "type", None)
    if kind is not None:  # torch.device and look-alikes
        if kind != "cuda":
            raise ValueError(f"{device!r} is not a CUDA device")
        index = getattr(device, "index", None)
        return current_device() if index is None else Device(index)
    if not hasattr(type(device), "__index__"):
        raise TypeError(f"as_device: device must be a Device, an int ordinal or a torch.device, "
                        f"not {type(device).__name__}")
    return Device(device)
