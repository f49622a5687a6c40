"""Arrays of other libraries as :class:`~cudalibs.DeviceArray`, without a copy.

:func:`coerce` is the one conversion every operand goes through (:func:`asarray` and the one
operand path of :mod:`cudalibs.runtime.operand`): a DeviceArray as is, anything with
``__cuda_array_interface__`` (v3) or DLPack (1.x) on a CUDA device borrowed and kept alive,
host data refused with one message whatever protocol it speaks.  :func:`from_dlpack` imports
a DLPack tensor or capsule; :func:`empty_like` and its kin take any of these as the model.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .. import dtypes as _dtypes
from . import _dlpack, _lib
from . import array as _array
from ._core import raise_for
from .array import DeviceArray, c_strides, dlpack_is_cuda, empty
from .device import Device, as_device
from .stream import Stream, as_stream, order_before

__all__ = ["asarray", "coerce", "from_dlpack", "empty_like", "zeros_like", "full_like"]


def empty_like(a, dtype=None, *, device=None, stream=None) -> DeviceArray:
    """An uninitialised array with ``a``'s shape and dtype (C-contiguous)."""
    a_shape, a_dtype, a_dev = _shape_dtype_device(a)
    return empty(a_shape, a_dtype if dtype is None else dtype,
                 device=a_dev if device is None else device, stream=stream)


def zeros_like(a, dtype=None, *, device=None, stream=None) -> DeviceArray:
    return empty_like(a, dtype, device=device, stream=stream).fill(0, stream)


def full_like(a, value, dtype=None, *, device=None, stream=None) -> DeviceArray:
    return empty_like(a, dtype, device=device, stream=stream).fill(value, stream)


def _shape_dtype_device(a):
    if isinstance(a, np.ndarray):
        return a.shape, a.dtype, None
    arr = asarray(a)
    return arr.shape, arr.dtype, arr.device


def asarray(obj, *, device=None, stream=None) -> DeviceArray:
    """View any device array as a :class:`DeviceArray`, without a copy.

    Accepts a DeviceArray (returned as is), anything with ``__cuda_array_interface__``
    (CuPy, numba, PyTorch CUDA tensors) or ``__dlpack__`` on a CUDA device.  The result keeps
    ``obj`` alive.  Host arrays are refused: use :func:`to_device`.  Library functions check
    their operands through :func:`cudalibs.runtime.operand.operand`, which uses the same
    conversion and messages.

    Raises
    ------
    TypeError
        ``obj`` is not a CUDA array (a host array, or an object with neither protocol, or an
        incomplete ``__cuda_array_interface__``).
    ValueError
        ``device`` is given and differs from where the data is.
    """
    arr = obj if type(obj) is DeviceArray else coerce(obj, "asarray: the argument", stream)
    if device is not None and as_device(device) is not arr._device:
        raise ValueError(f"asarray: the argument is on device {arr._device.ordinal}, not "
                         f"{as_device(device).ordinal}")
    return arr


def coerce(obj, what: str, stream=None) -> DeviceArray:
    """The one conversion of an array-like to a DeviceArray, without a copy or other checks.

    ``what`` names the operand in messages (``"gemm: a"``).  Host data is refused with one
    message whichever protocol it speaks (a numpy array has ``__dlpack__`` too, so the host
    check comes first).
    """
    if isinstance(obj, DeviceArray):
        return obj
    if obj is None:
        raise TypeError(f"{what} is required (got None)")
    if isinstance(obj, (np.ndarray, np.generic)):
        raise TypeError(f"{what} is a host numpy array; copy it to the GPU first with "
                        "cudalibs.to_device()")
    cai_error = None
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        cai = None
    except Exception as exc:   # noqa: BLE001 - the producer's own failure, kept for the message
        # A producer that has the protocol but cannot describe this dtype in it (torch raises
        # KeyError for its float8 types, some raise TypeError for bfloat16): DLPack may still
        # carry it.
        cai, cai_error = None, exc
    if cai is not None and not (_untyped_half(cai) and hasattr(obj, "__dlpack__")):
        return _from_cai(obj, cai, what, stream)
    if hasattr(obj, "__dlpack__"):
        if not dlpack_is_cuda(obj):
            try:
                where = tuple(obj.__dlpack_device__())
            except Exception:   # noqa: BLE001 - only for the message
                where = "unknown"
            raise TypeError(f"{what} is a {type(obj).__name__} in host memory (DLPack device "
                            f"{where}); copy it to the GPU first with cudalibs.to_device()")
        try:
            return from_dlpack(obj, stream=stream)
        except TypeError as exc:
            raise TypeError(f"{what}: {_dtype_text(obj)} cannot come in: {exc}") from None
        except (BufferError, RuntimeError, ValueError, KeyError) as exc:
            # The producer refused to export (a dtype its DLPack does not name, ...).
            raise TypeError(f"{what}: a {type(obj).__name__} of {_dtype_text(obj)} cannot be "
                            f"exported through DLPack ({type(exc).__name__}: {exc})") from None
    if cai_error is not None:
        raise TypeError(f"{what}: a {type(obj).__name__} of {_dtype_text(obj)} cannot be "
                        "described through __cuda_array_interface__ "
                        f"({type(cai_error).__name__}: {cai_error}) and has no __dlpack__"
                        ) from None
    raise TypeError(f"{what} is a {type(obj).__name__}, not a device array: it has neither "
                    "__cuda_array_interface__ nor __dlpack__")


def _dtype_text(obj) -> str:
    """``"dtype torch.float8_e4m3fn"`` (whatever the producer calls it), for messages."""
    try:
        return f"dtype {obj.dtype}"
    except Exception:   # noqa: BLE001 - only for the message
        return "an unknown dtype"


def _untyped_half(cai) -> bool:
    """Whether a CAI dict describes 2-byte elements only as raw bytes (``"<V2"``): bfloat16
    as PyTorch exports it, which DLPack names exactly."""
    t = cai.get("typestr") if isinstance(cai, dict) else None
    return isinstance(t, str) and len(t) >= 3 and t[1] == "V" and t[2:] == "2"


def _pointer_device(ptr: int, stream=None) -> Device | None:
    L = _lib.get()
    v = ctypes.c_int()
    st = L.cuPointerGetAttribute(ctypes.byref(v), _lib.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
    if st == _INVALID_VALUE and stream is not None and _capturing(L, stream):
        return None
    if st:
        raise_for(st, "cuPointerGetAttribute", f"0x{ptr:x} is not a device pointer")
    return Device(v.value)


_INVALID_VALUE = 1      # CUDA_ERROR_INVALID_VALUE


def _capturing(L, stream) -> bool:
    """Whether the call's stream is capturing: the one case where a valid pointer (memory the
    capture allocated) has no device the driver will tell yet."""
    try:
        s = as_stream(stream)
    except Exception:   # noqa: BLE001 - not a stream we can ask: not the capture case
        return False
    status = ctypes.c_int()
    st = L.cuStreamIsCapturing(s.raw, ctypes.byref(status))
    return bool(st) or status.value != 0


def _from_cai(obj, cai, what, stream) -> DeviceArray:
    if not isinstance(cai, dict):
        raise TypeError(f"{what}: __cuda_array_interface__ is a {type(cai).__name__}, not a dict")
    missing = [k for k in ("shape", "typestr", "data") if k not in cai]
    if missing:
        raise TypeError(f"{what}: __cuda_array_interface__ lacks {', '.join(map(repr, missing))}"
                        " (version 3 requires shape, typestr and data)")
    version = cai.get("version", 0)
    if cai.get("mask") is not None:
        raise TypeError(f"{what}: masked __cuda_array_interface__ arrays are not supported")
    try:
        shape = tuple(int(s) for s in cai["shape"])
        ptr, _readonly = cai["data"]
        strides = cai.get("strides")
        strides = None if strides is None else tuple(int(s) for s in strides)
    except (TypeError, ValueError):
        raise TypeError(f"{what}: malformed __cuda_array_interface__ {cai!r}") from None
    dt = _dtypes.from_typestr(cai["typestr"])
    ptr = int(ptr or 0)
    strides = c_strides(shape, dt.itemsize) if strides is None else strides
    if len(strides) != len(shape):
        raise TypeError(f"{what}: __cuda_array_interface__ strides {strides} do not match "
                        f"shape {shape}")
    size = 1
    for n in shape:
        size *= n
    dev = _pointer_device(ptr, stream) if ptr else as_device(None)
    if dev is None:
        # Memory a graph capture allocated has no device the driver will tell before the graph
        # is instantiated: it is the current device's (where the capture runs).
        dev = as_device(None)
    producer = cai.get("stream") if version >= 3 else None
    if producer is not None and size:
        if producer == 0:
            raise ValueError(f"{what}: __cuda_array_interface__ stream 0 is invalid (use 1 for "
                             "the legacy default stream)")
        consumer = as_stream(stream, dev)
        order_before(Stream.from_handle(int(producer), dev), consumer._handle or 0, dev)
    return DeviceArray._view(ptr, shape, strides, dt, dev, None, obj)


def from_dlpack(obj, *, stream=None) -> DeviceArray:
    """Import a DLPack tensor (an object with ``__dlpack__``, or a capsule) without a copy.

    Raises
    ------
    ValueError
        The capsule was already consumed.
    TypeError
        The tensor is not in CUDA memory, or its dtype has no equivalent here.
    """
    if hasattr(obj, "__dlpack__"):
        kind, dev_id = obj.__dlpack_device__()
        if kind not in (_dlpack.kDLCUDA, _dlpack.kDLCUDAManaged):
            raise TypeError(f"{type(obj).__name__} is on DLPack device {(kind, dev_id)}, not a "
                            "CUDA device; copy host data with cudalibs.to_device()")
        dev = Device(dev_id) if kind == _dlpack.kDLCUDA else as_device(None)
        consumer = as_stream(stream, dev)
        handle = 1 if consumer._handle == 0 else consumer._handle
        try:
            capsule = obj.__dlpack__(stream=handle, max_version=_dlpack.DLPACK_VERSION)
        except TypeError:  # producers that predate DLPack 1.0's keywords
            capsule = obj.__dlpack__(stream=handle)
        owner = obj
    else:
        capsule, owner = obj, None
    imp = _dlpack.consume(capsule)
    if imp.device_type not in (_dlpack.kDLCUDA, _dlpack.kDLCUDAManaged):
        imp.release()
        raise TypeError(f"DLPack tensor is on device type {imp.device_type}, not CUDA")
    try:
        dt = _dtypes.from_dlpack_code(*imp.dtype)
    except TypeError:
        imp.release()
        raise
    dev = Device(imp.device_id) if imp.device_type == _dlpack.kDLCUDA else as_device(None)
    item = dt.itemsize
    strides = (c_strides(imp.shape, item) if imp.strides is None
               else tuple(s * item for s in imp.strides))
    holder = _Owner(imp, owner)
    return DeviceArray._view(imp.ptr, imp.shape, strides, dt, dev, None, holder)


class _Owner:
    """Keeps an imported DLPack tensor (and its producer object) alive."""

    __slots__ = ("tensor", "producer", "__weakref__")

    def __init__(self, tensor, producer):
        self.tensor = tensor
        self.producer = producer

    def __repr__(self) -> str:
        return f"<DLPack tensor from {type(self.producer).__name__}>"


# DeviceArray.copy_ converts a foreign source through the one conversion.
_array.IMPORT.append(coerce)
