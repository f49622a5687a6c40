"""DLPack exchange: export a DeviceArray as a capsule, and consume a producer's capsule.

Both the legacy ``"dltensor"`` and the versioned (DLPack >= 1.0) ``"dltensor_versioned"``
capsules are handled.  The tensor deleter is made immortal so a consumer that frees its tensor
late in interpreter shutdown never calls freed code.

Exported capsules have no destructor: a Python one runs inside the consumer's error handling
when a consumer refuses a capsule (CuPy refuses float8, say) and turns its exception into a
``SystemError``.  Instead the export table keeps each capsule until it is consumed (the
consumer renames it ``used_*`` and calls the deleter when done) or abandoned (nothing but the
table refers to it any more), which the next export finds and releases.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import weakref
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int32, c_int64,
                    c_uint8, c_uint16, c_uint32, c_uint64, c_void_p, py_object)

from .._ffi import defer

kDLCPU = 1
kDLCUDA = 2
kDLCUDAHost = 3
kDLCUDAManaged = 13
DLPACK_VERSION = (1, 1)
FLAG_READ_ONLY = 1


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class DLManagedTensor(Structure):
    pass


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    pass


DELETER = CFUNCTYPE(None, c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", c_void_p)]
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p),
                                     ("deleter", c_void_p), ("flags", c_uint64),
                                     ("dl_tensor", DLTensor)]

_api = ctypes.pythonapi
_PyCapsule_New = _api.PyCapsule_New
_PyCapsule_New.restype = py_object
_PyCapsule_New.argtypes = [c_void_p, c_char_p, c_void_p]
_PyCapsule_GetPointer = _api.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = c_void_p
_PyCapsule_GetPointer.argtypes = [c_void_p, c_char_p]
_PyCapsule_GetName = _api.PyCapsule_GetName
_PyCapsule_GetName.restype = c_char_p
_PyCapsule_GetName.argtypes = [c_void_p]
_PyCapsule_IsValid = _api.PyCapsule_IsValid
_PyCapsule_IsValid.restype = c_int
_PyCapsule_IsValid.argtypes = [c_void_p, c_char_p]
_PyCapsule_SetName = _api.PyCapsule_SetName
_PyCapsule_SetName.restype = c_int
_PyCapsule_SetName.argtypes = [py_object, c_char_p]
_PyCapsule_GetPointer_obj = ctypes.PYFUNCTYPE(c_void_p, py_object, c_char_p)(
    ("PyCapsule_GetPointer", _api))
_PyCapsule_GetName_obj = ctypes.PYFUNCTYPE(c_char_p, py_object)(("PyCapsule_GetName", _api))

# Capsule names must outlive the capsules; module-level bytes constants do.
NAME = b"dltensor"
NAME_V = b"dltensor_versioned"
USED = b"used_dltensor"
USED_V = b"used_dltensor_versioned"

# Exported tensors: struct address -> [struct, shape, strides, owner, capsule or None].  The
# capsule is held until it is consumed (then the consumer's deleter call ends the entry) or
# abandoned unconsumed (then :func:`_sweep` ends it).
_exports: dict[int, list] = {}
_exports_lock = threading.Lock()
_shutting_down = [False]


def _release(addr: int) -> None:
    with _exports_lock:
        _exports.pop(addr, None)


@DELETER
def _deleter(addr):
    # Called by the consumer (any thread) when it no longer needs the tensor.
    if addr and not _shutting_down[0]:
        _release(addr)


# Immortal: never collected, even during interpreter teardown.
_api.Py_IncRef(py_object(_deleter))
_DELETER_ADDR = ctypes.cast(_deleter, c_void_p).value
# References to a capsule when only the table holds it: the entry, the loop variable and the
# argument of sys.getrefcount.
_ABANDONED_REFS = 3


def _sweep() -> int:
    """Release the entries whose capsule nobody will consume (dropped unconsumed), and stop
    holding capsules that were consumed; returns how many entries were released."""
    dropped = []
    with _exports_lock:
        for addr, entry in list(_exports.items()):
            capsule = entry[4]
            if capsule is None:
                continue
            if _PyCapsule_GetName_obj(capsule) in (USED, USED_V):
                entry[4] = None         # the consumer owns it; its deleter ends the entry
            elif sys.getrefcount(capsule) <= _ABANDONED_REFS:
                dropped.append(_exports.pop(addr))
            del capsule
    return len(dropped)


def exports_alive() -> int:
    """How many exported tensors are held for a consumer (after releasing abandoned ones)."""
    _sweep()
    return len(_exports)


def export(ptr: int, shape, strides_elems, dl_dtype, device_type: int, device_id: int,
           owner, versioned: bool, read_only: bool = False):
    """Build a capsule describing memory kept alive by ``owner`` until the consumer's deleter
    runs."""
    ndim = len(shape)
    shape_arr = (c_int64 * max(ndim, 1))(*shape)
    strides_arr = (c_int64 * max(ndim, 1))(*strides_elems)
    managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    t = managed.dl_tensor
    t.data = ptr or None
    t.device.device_type = device_type
    t.device.device_id = device_id
    t.ndim = ndim
    t.dtype.code, t.dtype.bits = dl_dtype
    t.dtype.lanes = 1
    t.shape = ctypes.cast(shape_arr, POINTER(c_int64))
    t.strides = ctypes.cast(strides_arr, POINTER(c_int64))
    t.byte_offset = 0
    managed.deleter = _DELETER_ADDR
    if versioned:
        managed.version.major, managed.version.minor = DLPACK_VERSION
        managed.flags = FLAG_READ_ONLY if read_only else 0
    addr = ctypes.addressof(managed)
    managed.manager_ctx = addr
    _sweep()
    capsule = _PyCapsule_New(addr, NAME_V if versioned else NAME, None)
    with _exports_lock:
        _exports[addr] = [managed, shape_arr, strides_arr, owner, capsule]
    return capsule


def _call_deleter(deleter, addr):
    # The producer's deleter may free or record on a stream (PyTorch's caching allocator
    # does): the garbage collector can run it in the middle of a graph capture, where such a
    # call invalidates the capture, so it waits for the capture's end like every release.
    if defer(_call_deleter, (deleter, addr)):
        return
    deleter(addr)


class Imported:
    """A consumed producer tensor; calls the producer's deleter once it is no longer used
    (``release()``, or garbage collection of this object).

    ``ptr`` is ``data + byte_offset`` and ``data`` the producer's own pointer, as read: the
    consumer checks both (:mod:`cudalibs.driver.interop` does, before any use).
    """

    __slots__ = ("ptr", "data", "shape", "strides", "dtype", "device_type", "device_id",
                 "read_only", "_finalizer", "__weakref__")

    def release(self) -> None:
        if self._finalizer is not None:
            self._finalizer()


def consume(capsule, max_ndim: int) -> Imported:
    """Take ownership of a DLPack capsule (renaming it ``used_*``) and describe its tensor.

    Raises
    ------
    ValueError
        The capsule was already consumed, or is not a DLPack capsule, or its ``ndim`` is
        negative or above ``max_ndim`` (then the capsule is left unconsumed, and its shape
        array unread).
    """
    try:
        name = _PyCapsule_GetName_obj(capsule)
    except Exception:
        raise TypeError(f"{type(capsule).__name__} is not a DLPack capsule") from None
    if name in (USED, USED_V):
        raise ValueError("this DLPack capsule was already consumed; each capsule from "
                         "__dlpack__() can be imported once")
    if name not in (NAME, NAME_V):
        raise ValueError(f"capsule named {name!r} is not a DLPack tensor")
    versioned = name == NAME_V
    addr = _PyCapsule_GetPointer_obj(capsule, name)
    if versioned:
        m = DLManagedTensorVersioned.from_address(addr)
        if m.version.major > 1:
            raise ValueError(f"DLPack version {m.version.major}.{m.version.minor} is newer "
                             "than this consumer understands (1.x)")
        read_only = bool(m.flags & FLAG_READ_ONLY)
    else:
        m = DLManagedTensor.from_address(addr)
        read_only = False
    t = m.dl_tensor
    ndim = t.ndim
    if not 0 <= ndim <= max_ndim:
        raise ValueError(f"DLPack DLTensor.ndim is {ndim}: a tensor has 0 to {max_ndim} "
                         "dimensions here")
    if ndim and not t.shape:
        raise ValueError(f"DLPack DLTensor.shape is NULL for a {ndim}-d tensor")
    out = Imported()
    out.shape = tuple(t.shape[i] for i in range(ndim))
    out.strides = (tuple(t.strides[i] for i in range(ndim)) if t.strides else None)
    out.dtype = (t.dtype.code, t.dtype.bits, t.dtype.lanes)
    out.data = t.data or 0
    out.ptr = out.data + t.byte_offset
    out.device_type = t.device.device_type
    out.device_id = t.device.device_id
    out.read_only = read_only
    out._finalizer = None
    if _PyCapsule_SetName(capsule, USED_V if versioned else USED):
        raise ValueError("could not mark the DLPack capsule as consumed")
    if m.deleter:
        out._finalizer = weakref.finalize(out, _call_deleter, DELETER(m.deleter), addr)
        out._finalizer.atexit = False
    return out


def _at_exit():
    _shutting_down[0] = True


import atexit  # noqa: E402

atexit.register(_at_exit)
