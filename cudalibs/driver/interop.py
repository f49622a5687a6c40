"""Arrays of other libraries as :class:`~cudalibs.DeviceArray`, without a copy.

:func:`coerce` is the one conversion every operand goes through (:func:`asarray` and the one
operand path of :mod:`cudalibs.runtime.operand`): a DeviceArray as is, anything with
``__cuda_array_interface__`` (versions 0 to 3) or DLPack (1.x) on a CUDA device borrowed and
kept alive, host data refused with one message whatever protocol it speaks.
:func:`from_dlpack` imports a DLPack tensor or capsule; :func:`empty_like` and its kin take
any of these as the model.

What a producer says is checked once, here, before any C call, since later code trusts a
DeviceArray's fields (a negative or wrapped size reaches C as a huge unsigned count):

- shape: integers (bool refused), none negative, at most :data:`MAX_NDIM` of them; the
  element count and the byte size below 2**63;
- strides: integers; ``__cuda_array_interface__`` gives bytes and they must be multiples of
  the item size (every consumer here addresses whole elements, and a misaligned element
  access is a sticky device fault that ends the context), DLPack gives elements; negative
  strides are accepted (numpy semantics: the extent runs below the pointer) and zero or
  overlapping ones too, for reading: writes refuse them
  (:func:`~cudalibs.driver.array.check_writable`);
- the extent the shape and strides reach from the pointer stays inside the 64-bit address
  space, and spans less than 2**63 bytes;
- a null data pointer only for an empty array;
- the typestr's item size is its type's;
- a read-only producer buffer (``data: (ptr, True)``, DLPack's read-only flag) gives a
  :attr:`~cudalibs.DeviceArray.readonly` array.

A DeviceArray passed as is pays for none of this.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np

from .. import dtypes as _dtypes
from . import _dlpack, _lib
from . import array as _array
from ._core import raise_for
from .args import fill_value
from .array import DeviceArray, byte_extent, c_strides, dlpack_is_cuda, empty
from .device import Device, as_device
from .stream import Stream, as_stream, order_before

__all__ = ["asarray", "coerce", "from_dlpack", "empty_like", "zeros_like", "full_like",
           "MAX_NDIM"]

#: The most dimensions an imported array may have (numpy's own limit; no library call here
#: takes more than a handful).
MAX_NDIM = 64
#: Element counts, byte sizes and strides reach C as signed 64-bit integers.
_INT64_END = 1 << 63
#: Device addresses are unsigned 64-bit integers.
_ADDRESS_END = 1 << 64


def empty_like(a, dtype=None, *, device=None, stream=None) -> DeviceArray:
    """An uninitialised array with ``a``'s shape and dtype (C-contiguous)."""
    return _like("empty_like", a, None, dtype, device, stream)


def zeros_like(a, dtype=None, *, device=None, stream=None) -> DeviceArray:
    """An array of zeros with ``a``'s shape and dtype (C-contiguous)."""
    return _like("zeros_like", a, 0, dtype, device, stream)


def full_like(a, value, dtype=None, *, device=None, stream=None) -> DeviceArray:
    """An array with ``a``'s shape and dtype (C-contiguous), every element ``value``."""
    return _like("full_like", a, value, dtype, device, stream, fill=True)


def _like(op, a, value, dtype, device, stream, fill=False) -> DeviceArray:
    """The ``*_like`` constructors: ``a`` (a host or device array) and ``value`` checked in
    ``op``'s name before any C call, then the new array, filled unless ``value`` is None and
    ``fill`` is not set."""
    if isinstance(a, np.ndarray):
        shape, a_dtype, a_dev = a.shape, a.dtype, None
    else:
        arr = a if type(a) is DeviceArray else coerce(a, f"{op}: a", stream)
        shape, a_dtype, a_dev = arr.shape, arr.dtype, arr.device
    dt = _dtypes.lookup(a_dtype if dtype is None else dtype, f"{op}: dtype")
    if value is not None or fill:
        value = fill_value(value, dt.numpy, f"{op}: value")
    out = empty(shape, dt, device=a_dev if device is None else device, stream=stream)
    return out if value is None else out.fill(value, stream)


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
        incomplete ``__cuda_array_interface__``), or a field of its description has the wrong
        type (a shape entry that is not an integer, ...).
    ValueError
        ``device`` is given and differs from where the data is, or the producer describes an
        array no memory can hold (a negative dimension, a size or extent beyond 64 bits, a
        null pointer for a non-empty array, strides that split elements): see the module's
        notes.
    """
    arr = obj if type(obj) is DeviceArray else coerce(obj, "asarray: obj", stream)
    if device is not None and as_device(device) is not arr._device:
        raise ValueError(f"asarray: obj is on device {arr._device.ordinal}, not "
                         f"{as_device(device).ordinal}")
    return arr


def coerce(obj, what: str, stream=None) -> DeviceArray:
    """The one conversion of an array-like to a DeviceArray, without a copy.

    ``what`` names the operand in messages (``"gemm: a"``).  Host data is refused with one
    message whichever protocol it speaks (a numpy array has ``__dlpack__`` too, so the host
    check comes first).  A foreign array's description is checked (the module's notes) before
    any C call; nothing else is.

    Raises
    ------
    TypeError, ValueError
        As :func:`asarray`.
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
            capsule = _dlpack_capsule(obj, stream)
        except TypeError as exc:
            raise TypeError(f"{what}: {_dtype_text(obj)} cannot come in: {exc}") from None
        except (BufferError, RuntimeError, ValueError, KeyError) as exc:
            # The producer refused to export (a dtype its DLPack does not name, ...).
            raise TypeError(f"{what}: a {type(obj).__name__} of {_dtype_text(obj)} cannot be "
                            f"exported through DLPack ({type(exc).__name__}: {exc})") from None
        return _consume(capsule, obj, what)
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
    ptr, shape, strides, dt, readonly, producer = _cai_fields(cai, what)
    dev = _pointer_device(ptr, stream) if ptr else as_device(None)
    if dev is None:
        # Memory a graph capture allocated has no device the driver will tell before the graph
        # is instantiated: it is the current device's (where the capture runs).
        dev = as_device(None)
    if producer is not None and 0 not in shape:
        consumer = as_stream(stream, dev)
        order_before(Stream.from_handle(producer, dev), consumer._handle or 0, dev)
    return DeviceArray._view(ptr, shape, strides, dt, dev, None, obj, readonly)


_CAI = "__cuda_array_interface__"
_CAI_FIELDS = (f"{_CAI}['shape']", f"{_CAI}['strides']", f"{_CAI}['data'][0]")
_DLPACK_FIELDS = ("DLPack DLTensor.shape", "DLPack DLTensor.strides", "DLPack DLTensor.data")
#: A typestr: byte order, kind, item size in bytes (``"<f4"``).
_TYPESTR = re.compile(r"[<>|=]?[a-zA-Z](\d+)")


def _cai_fields(cai, what):
    """``(ptr, shape, byte strides, DType, readonly, producer stream or None)`` of a
    ``__cuda_array_interface__`` dict, every field checked (no C call)."""
    if not isinstance(cai, dict):
        raise TypeError(f"{what}: {_CAI} is a {type(cai).__name__}, not a dict")
    missing = [k for k in ("shape", "typestr", "data") if k not in cai]
    if missing:
        raise TypeError(f"{what}: {_CAI} lacks {', '.join(map(repr, missing))}"
                        " (version 3 requires shape, typestr and data)")
    version = cai.get("version", 0)
    if not _is_int(version) or version < 0:
        raise TypeError(f"{what}: {_CAI}['version'] is {version!r}, not a version number")
    if cai.get("mask") is not None:
        raise TypeError(f"{what}: masked {_CAI} arrays are not supported")
    typestr = cai["typestr"]
    if not isinstance(typestr, str):
        raise TypeError(f"{what}: {_CAI}['typestr'] is {typestr!r}, not a string")
    try:
        dt = _dtypes.from_typestr(typestr)
    except TypeError as exc:
        raise TypeError(f"{what}: {_CAI}['typestr'] {typestr!r}: {exc}") from None
    size = _TYPESTR.fullmatch(typestr)
    if size is None or int(size.group(1)) != dt.itemsize:
        raise ValueError(f"{what}: {_CAI}['typestr'] {typestr!r} does not end in its item size "
                         f"({dt.name} is {dt.itemsize} bytes)")
    data = cai["data"]
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise TypeError(f"{what}: {_CAI}['data'] is {data!r}, not a (pointer, read-only) pair")
    ptr, readonly = data
    ptr = 0 if ptr is None else ptr
    if not _is_int(ptr):
        raise TypeError(f"{what}: {_CAI}['data'][0] is {ptr!r}, not an integer address")
    if not isinstance(readonly, (bool, np.bool_)) and not _is_int(readonly):
        raise TypeError(f"{what}: {_CAI}['data'][1] is {readonly!r}, not a bool")
    shape = _int_tuple(cai["shape"], _CAI_FIELDS[0], what)
    strides = cai.get("strides")
    if strides is not None:
        strides = _int_tuple(strides, _CAI_FIELDS[1], what)
        for i, st in enumerate(strides):
            if st % dt.itemsize:
                raise ValueError(f"{what}: {_CAI_FIELDS[1]}[{i}] is {st} bytes, not a multiple "
                                 f"of the item size {dt.itemsize} ({dt.name})")
    ptr = int(ptr)
    strides = _check_layout(what, _CAI_FIELDS, ptr, ptr, shape, strides, dt.itemsize)
    producer = cai.get("stream") if version >= 3 else None
    if producer is not None:
        if not _is_int(producer):
            raise TypeError(f"{what}: {_CAI}['stream'] is {producer!r}, not a stream handle")
        if producer == 0:
            raise ValueError(f"{what}: {_CAI} stream 0 is invalid (use 1 for the legacy "
                             "default stream)")
        producer = int(producer)
    return ptr, shape, strides, dt, bool(readonly), producer


def _is_int(v) -> bool:
    """An int or numpy integer, not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _int_tuple(values, field: str, what: str) -> tuple[int, ...]:
    """``values`` (a tuple or list of integers, bool refused) as a tuple of ints."""
    if not isinstance(values, (tuple, list)):
        raise TypeError(f"{what}: {field} is {values!r}, not a tuple of integers")
    if len(values) > MAX_NDIM:
        raise ValueError(f"{what}: {field} has {len(values)} entries; an array has at most "
                         f"{MAX_NDIM} dimensions here")
    for i, v in enumerate(values):
        if not _is_int(v):
            raise TypeError(f"{what}: {field}[{i}] is {v!r} ({type(v).__name__}), not an "
                            "integer")
    return tuple(int(v) for v in values)


def _check_layout(what: str, fields, data: int, ptr: int, shape, strides, itemsize: int):
    """Refuse a foreign array's layout that C would misread; return its byte strides.

    Parameters
    ----------
    what : str
        Names the operand in messages.
    fields : tuple of str
        The producer's names of its shape, strides and data pointer, for messages.
    data : int
        The producer's own data pointer (null allowed only for an empty array).
    ptr : int
        The address of the first element (``data`` plus any offset).
    shape, strides : tuple of int
        Python ints, at most :data:`MAX_NDIM` of them (the callers' parsing checks that);
        ``strides`` in bytes, or None for C-contiguous.
    itemsize : int

    Raises
    ------
    ValueError
        As listed in the module's notes.
    """
    f_shape, f_strides, f_data = fields
    count = 1
    for i, n in enumerate(shape):
        if n < 0:
            raise ValueError(f"{what}: {f_shape}[{i}] is {n}: a dimension cannot be negative")
        if n >= _INT64_END:
            raise ValueError(f"{what}: {f_shape}[{i}] is {n}, beyond 2**63 - 1")
        count *= n
    if count * itemsize >= _INT64_END:
        raise ValueError(f"{what}: {f_shape} {shape} of {itemsize}-byte items holds "
                         f"{count * itemsize} bytes, beyond 2**63 - 1")
    if strides is None:
        strides = c_strides(shape, itemsize)
    elif len(strides) != len(shape):
        raise TypeError(f"{what}: {f_strides} {strides} do not match {f_shape} {shape}")
    for i, st in enumerate(strides):
        if not -_INT64_END < st < _INT64_END:
            raise ValueError(f"{what}: {f_strides}[{i}] spans {st} bytes, beyond 2**63 - 1")
    if not 0 <= ptr < _ADDRESS_END:
        raise ValueError(f"{what}: {f_data} gives address {ptr}, outside 0 to 2**64 - 1")
    if count:
        if not data:
            raise ValueError(f"{what}: {f_data} is a null pointer, but the array has {count} "
                             f"element{'s' if count != 1 else ''} (shape {shape})")
        lo, hi = byte_extent(shape, strides, itemsize)
        if hi - lo >= _INT64_END:
            raise ValueError(f"{what}: shape {shape} with strides {strides} (bytes) spans "
                             f"{hi - lo} bytes, beyond 2**63 - 1")
        if ptr + lo < 0 or ptr + hi > _ADDRESS_END:
            raise ValueError(f"{what}: shape {shape} with strides {strides} (bytes) from "
                             f"address 0x{ptr:x} reaches addresses [{ptr + lo}, {ptr + hi}), "
                             "outside the 64-bit address space")
    return strides


def from_dlpack(obj, *, stream=None) -> DeviceArray:
    """Import a DLPack tensor (an object with ``__dlpack__``, or a capsule) without a copy.

    The tensor's description is checked before any C call (see the module's notes); a
    read-only tensor (DLPack >= 1.0's flag) gives a :attr:`~cudalibs.DeviceArray.readonly`
    array.

    Raises
    ------
    ValueError
        The capsule was already consumed, or describes a tensor no memory can hold (negative
        or too many dimensions, a size or extent beyond 64 bits, a null pointer for a
        non-empty tensor).
    TypeError
        The tensor is not in CUDA memory, or its dtype has no equivalent here.
    """
    if hasattr(obj, "__dlpack__"):
        return _consume(_dlpack_capsule(obj, stream), obj, "from_dlpack: obj")
    return _consume(obj, None, "from_dlpack: obj")


def _dlpack_capsule(obj, stream):
    """The producer's capsule, exported for the consumer stream ``stream``."""
    kind, dev_id = obj.__dlpack_device__()
    if kind not in (_dlpack.kDLCUDA, _dlpack.kDLCUDAManaged):
        raise TypeError(f"{type(obj).__name__} is on DLPack device {(kind, dev_id)}, not a "
                        "CUDA device; copy host data with cudalibs.to_device()")
    dev = Device(dev_id) if kind == _dlpack.kDLCUDA else as_device(None)
    consumer = as_stream(stream, dev)
    handle = 1 if consumer._handle == 0 else consumer._handle
    try:
        return obj.__dlpack__(stream=handle, max_version=_dlpack.DLPACK_VERSION)
    except TypeError:  # producers that predate DLPack 1.0's keywords
        return obj.__dlpack__(stream=handle)


def _consume(capsule, producer, what) -> DeviceArray:
    """A DeviceArray over a consumed capsule's tensor, checked first (on a failure the
    producer's deleter runs at once)."""
    try:
        imp = _dlpack.consume(capsule, MAX_NDIM)
    except (TypeError, ValueError) as exc:
        # Not a capsule (None, any other object), or one already consumed.
        raise type(exc)(f"{what}: {exc}") from None
    try:
        if imp.device_type not in (_dlpack.kDLCUDA, _dlpack.kDLCUDAManaged):
            raise TypeError(f"{what}: DLPack tensor is on device type {imp.device_type}, not "
                            "CUDA")
        try:
            dt = _dtypes.from_dlpack_code(*imp.dtype)
        except TypeError as exc:
            lead = what if producer is None else f"{what}: {_dtype_text(producer)} cannot come in"
            raise TypeError(f"{lead}: {exc}") from None
        item = dt.itemsize
        strides = _check_layout(what, _DLPACK_FIELDS, imp.data, imp.ptr, imp.shape,
                               None if imp.strides is None else
                               tuple(s * item for s in imp.strides), item)
        dev = Device(imp.device_id) if imp.device_type == _dlpack.kDLCUDA else as_device(None)
    except BaseException:
        imp.release()
        raise
    return DeviceArray._view(imp.ptr, imp.shape, strides, dt, dev, None,
                             _Owner(imp, producer), imp.read_only)


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
