"""DeviceArray: shape, dtype and strides over device memory, numpy-like.

A :class:`DeviceArray` views bytes of one device: a :class:`~cudalibs.driver.memory.DeviceBuffer`
it owns (from :func:`empty`, :func:`to_device`, ...) or memory it borrows from another library
(:func:`asarray` over a PyTorch/CuPy/numba array, :func:`from_dlpack`), which it keeps alive.
Strides are in bytes, as in numpy; slicing, ``.T``, ``.transpose`` and ``.reshape`` of
contiguous data are views that share the memory.

Every library function of cudalibs accepts a DeviceArray or anything exposing
``__cuda_array_interface__`` or ``__dlpack__``; :func:`asarray` is the one conversion they use.
"""

from __future__ import annotations

import operator

import numpy as np

from .. import dtypes as _dtypes
from .._ffi import refuse_in_capture
from ..errors import ClosedError
from . import _copy, _dlpack, _lib, memory as _memory
from ._core import raise_for
from ._layout import check_writable, may_self_overlap
from .args import fill_value, int_tuple, shape_tuple
from .device import as_device
from .memory import DeviceBuffer, check_nbytes
from .stream import as_stream, current_stream, order_before

__all__ = ["DeviceArray", "empty", "zeros", "full", "to_device", "byte_extent",
           "spans_overlap", "arrays_overlap", "may_self_overlap", "check_writable",
           "dlpack_is_cuda", "c_strides"]

_HOST_MAX_COPY = 1 << 62


def c_strides(shape, itemsize) -> tuple[int, ...]:
    strides = []
    acc = itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def _nbytes(shape, itemsize) -> int:
    n = itemsize
    for s in shape:
        n *= s
    return check_nbytes(n)


class _ArrayFields:
    """The fields of a :class:`DeviceArray`, written once while one is made (a DeviceArray
    refuses writes to its public fields)."""

    __slots__ = ("_ptr", "_shape", "_strides", "_dtype", "_dt", "_device", "_buf", "_owner",
                 "_contig", "_readonly", "__weakref__")


#: The public names of :class:`DeviceArray`'s fields (read at slot speed, never written).
_PUBLIC_FIELDS = {"address": "_ptr", "shape": "_shape", "strides": "_strides",
                  "dtype": "_dtype", "device": "_device", "readonly": "_readonly"}


class DeviceArray(_ArrayFields):
    """An n-dimensional array in device memory.

    Not constructed directly: use :func:`empty`, :func:`zeros`, :func:`full`,
    :func:`to_device`, :func:`asarray` or :func:`from_dlpack`.

    Attributes
    ----------
    shape : tuple of int
    dtype : numpy.dtype
    strides : tuple of int
        Bytes between consecutive elements of each dimension.
    device : Device
    ptr : int
        Address of the first element, checked: raises :class:`~cudalibs.errors.ClosedError`
        once the memory is freed.
    address : int
        The same address, unchecked, for code that took the array through
        :func:`cudalibs.operand`, which checked it (the libraries' hot paths).
    readonly : bool
        The memory must not be written: it was borrowed from a producer that exported it
        read-only (``__cuda_array_interface__`` ``data: (ptr, True)``, or DLPack's read-only
        flag).  Views of it are read-only too; :meth:`copy` gives a writable array.  Every
        write of cudalibs (:meth:`fill`, :meth:`copy_` and item assignment into it, a library
        call's ``out``) refuses it.

    ``shape``, ``dtype``, ``strides``, ``device``, ``address`` and ``readonly`` cost one slot
    read each and are read-only: a view with another shape is made by :meth:`reshape`,
    indexing or ``.T``.
    """

    __slots__ = ()

    def __init__(self):
        raise TypeError("use cudalibs.empty(), zeros(), to_device(), asarray() or from_dlpack()")

    def __setattr__(self, name, value):
        if name in _PUBLIC_FIELDS:
            raise AttributeError(f"DeviceArray.{name} is read-only; make a view with "
                                 "reshape(), indexing or .T instead")
        object.__setattr__(self, name, value)

    @classmethod
    def _view(cls, ptr, shape, strides, dt, device, buf, owner,
              readonly=False) -> "DeviceArray":
        # Filled as the bare fields class (plain slot stores, no __setattr__ guard), then
        # made a DeviceArray: the guard costs nothing here and nothing on reads.
        self = object.__new__(_ArrayFields)
        self._ptr = ptr
        self._shape = shape
        self._strides = strides
        self._dt = dt
        self._dtype = dt.numpy
        self._device = device
        self._buf = buf
        self._owner = owner
        self._contig = None
        self._readonly = readonly
        self.__class__ = cls
        return self

    @classmethod
    def from_buffer(cls, buffer: DeviceBuffer, shape, dtype, strides=None, offset: int = 0):
        """View ``buffer`` as an array; the array keeps the buffer alive.

        Raises
        ------
        ValueError
            The view would reach outside the buffer.
        """
        if type(buffer) is not DeviceBuffer:
            raise TypeError(f"from_buffer: buffer must be a DeviceBuffer, not "
                            f"{type(buffer).__name__}")
        dt = _dtypes.lookup(dtype, "from_buffer: dtype")
        shape = shape_tuple(shape, "from_buffer: shape")
        strides = c_strides(shape, dt.itemsize) if strides is None else int_tuple(
            strides, "from_buffer: strides", scalar=False)
        if len(strides) != len(shape):
            raise ValueError(f"strides {strides} do not match shape {shape}")
        lo, hi = byte_extent(shape, strides, dt.itemsize)
        if offset + lo < 0 or offset + hi > buffer.size:
            raise ValueError(f"a view of shape {shape}, strides {strides} at offset {offset} "
                             f"reaches bytes [{offset + lo}, {offset + hi}) of a "
                             f"{buffer.size}-byte buffer")
        return cls._view(buffer.ptr + offset, shape, strides, dt, buffer.device, buffer, None)

    # -- basic properties -------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self._shape:
            n *= s
        return n

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def ptr(self) -> int:
        """Device address of the first element (checks the memory is still alive)."""
        buf = self._buf
        if buf is not None and buf._ptr is None:
            raise ClosedError("the buffer under this array is closed")
        return self._ptr

    data_ptr = ptr

    @property
    def base(self):
        """The :class:`DeviceBuffer` or foreign object that owns the memory."""
        return self._buf if self._buf is not None else self._owner

    @property
    def closed(self) -> bool:
        buf = self._buf
        return buf is not None and buf._ptr is None

    @property
    def is_c_contiguous(self) -> bool:
        c = self._contig
        if c is None:  # views are immutable: compute once
            c = self._contig = self.size == 0 or _is_c_contig(self._shape, self._strides,
                                                                self._dtype.itemsize)
        return c

    @property
    def is_f_contiguous(self) -> bool:
        if self.size == 0:
            return True
        return _is_c_contig(self._shape[::-1], self._strides[::-1], self._dtype.itemsize)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d array")
        return self._shape[0]

    def _check(self) -> int:
        buf = self._buf
        if buf is not None and buf._ptr is None:
            raise ClosedError("the buffer under this array is closed")
        return self._ptr

    def close(self) -> None:
        """Free the memory now if this array's buffer owns it (views of it become unusable)."""
        if self._buf is not None:
            self._buf.close()
        self._owner = None

    def __enter__(self) -> "DeviceArray":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- views ------------------------------------------------------------------------------
    def __getitem__(self, key) -> "DeviceArray":
        self._check()
        if not isinstance(key, tuple):
            key = (key,)
        n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
        if sum(1 for k in key if k is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis")
        if n_real > self.ndim:
            raise IndexError(f"too many indices for a {self.ndim}-d array")
        expanded = []
        for k in key:
            if k is Ellipsis:
                expanded.extend([slice(None)] * (self.ndim - n_real))
            else:
                expanded.append(k)
        if Ellipsis not in key:
            expanded.extend([slice(None)] * (self.ndim - n_real))
        ptr = self._ptr
        shape, strides = [], []
        axis = 0
        for k in expanded:
            if k is None:
                shape.append(1)
                strides.append(0)
                continue
            n, st = self._shape[axis], self._strides[axis]
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                length = len(range(start, stop, step))
                if length:
                    ptr += start * st
                shape.append(length)
                strides.append(st * step)
            else:
                try:
                    i = operator.index(k)
                except TypeError:
                    raise TypeError(
                        f"only integers, slices, ... and None index a DeviceArray, not "
                        f"{type(k).__name__} (advanced indexing needs a gather kernel; index "
                        "the host copy from .get() instead)") from None
                if not -n <= i < n:
                    raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
                ptr += (i % n) * st
            axis += 1
        return DeviceArray._view(ptr, tuple(shape), tuple(strides), self._dt, self._device,
                                 self._buf, self._owner, self._readonly)

    def __setitem__(self, key, value) -> None:
        if self._readonly:
            check_writable(self, "item assignment: the array")
        view = self[key]
        if np.isscalar(value) or (isinstance(value, np.ndarray) and value.ndim == 0):
            view.fill(value)
        else:
            view.copy_(value)

    def transpose(self, *axes) -> "DeviceArray":
        """A view with the axes permuted (reversed when none are given)."""
        self._check()
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            # None reverses the axes, as numpy's transpose(None) does.
            axes = () if axes[0] is None else int_tuple(axes[0], "transpose: axes")
        if not axes:
            axes = tuple(range(self.ndim))[::-1]
        axes = tuple(operator.index(a) % self.ndim if self.ndim else a for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"axes {axes} are not a permutation of {self.ndim} dimensions")
        return DeviceArray._view(self._ptr, tuple(self._shape[a] for a in axes),
                                 tuple(self._strides[a] for a in axes), self._dt, self._device,
                                 self._buf, self._owner, self._readonly)

    @property
    def T(self) -> "DeviceArray":
        """The transpose: a view, never a copy."""
        return self.transpose()

    def reshape(self, *shape) -> "DeviceArray":
        """A view with a new shape; the data must be C-contiguous (``-1`` infers one
        dimension).

        Raises
        ------
        ValueError
            The sizes differ, or the data is not C-contiguous (use ``.copy()`` first).
        """
        self._check()
        shape = int_tuple(shape[0] if len(shape) == 1 else shape, "reshape: shape")
        if shape.count(-1) > 1:
            raise ValueError("only one dimension can be -1")
        known = 1
        for s in shape:
            if s != -1:
                if s < 0:
                    raise ValueError(f"negative dimension {s} in shape {shape}")
                known *= s
        if -1 in shape:
            if known == 0 or self.size % known:
                raise ValueError(f"cannot reshape an array of size {self.size} into {shape}")
            shape = tuple(self.size // known if s == -1 else s for s in shape)
        total = 1
        for s in shape:
            total *= s
        if total != self.size:
            raise ValueError(f"cannot reshape an array of size {self.size} into shape {shape}")
        if not self.is_c_contiguous:
            raise ValueError("reshape needs C-contiguous data; call .copy() first")
        return DeviceArray._view(self._ptr, shape, c_strides(shape, self.itemsize), self._dt,
                                 self._device, self._buf, self._owner, self._readonly)

    def ravel(self) -> "DeviceArray":
        """A 1-d view of C-contiguous data."""
        return self.reshape(-1)

    def view(self, dtype) -> "DeviceArray":
        """The same bytes seen as another dtype, as ``numpy.ndarray.view`` does.

        With a different item size the last axis is rescaled, which needs it to be contiguous
        (and, when growing, its byte length to divide evenly).
        """
        self._check()
        dt = _dtypes.lookup(dtype, "view: dtype")
        old = self.itemsize
        if dt.itemsize == old:
            return DeviceArray._view(self._ptr, self._shape, self._strides, dt, self._device,
                                     self._buf, self._owner, self._readonly)
        if not self._shape or (self._shape[-1] != 1 and self._strides[-1] != old):
            raise ValueError(f"view as {dt.name} changes the item size, which needs a "
                             "contiguous last axis")
        nbytes = self._shape[-1] * old
        if nbytes % dt.itemsize:
            raise ValueError(f"last axis of {nbytes} bytes does not divide into {dt.name} items")
        shape = self._shape[:-1] + (nbytes // dt.itemsize,)
        strides = self._strides[:-1] + (dt.itemsize,)
        return DeviceArray._view(self._ptr, shape, strides, dt, self._device, self._buf,
                                 self._owner, self._readonly)

    # -- transfers --------------------------------------------------------------------------
    def get(self, out: np.ndarray | None = None, stream=None, *, blocking: bool = True):
        """Copy to the host.

        Parameters
        ----------
        out : numpy.ndarray, optional
            Destination of the same shape and dtype (pinned memory makes the copy truly
            asynchronous when ``blocking=False``).
        stream : Stream, optional
            Stream the copy is queued on; the current stream by default.
        blocking : bool, default True
            Wait for the copy to finish before returning.

        Returns
        -------
        numpy.ndarray
        """
        refuse_in_capture("DeviceArray.get() (a copy to the host)",
                          "the values do not exist until the graph is replayed")
        src_ptr = self._check()
        s = as_stream(stream, self._device)
        if out is None:
            out = np.empty(self._shape, dtype=self._dtype)
        else:
            _copy.check_host(out, self._shape, self._dtype, "out", writable=True)
        if self.size == 0:
            return out
        L = _lib.get()
        L.cuCtxSetCurrent(self._device._ctx)
        src_shape, src_strides, flips, bcast = _positive_view(self._shape, self._strides)
        src_ptr += sum((n - 1) * st for n, st, f in zip(self._shape, self._strides, flips) if f)
        direct = not (any(flips) or any(bcast)) and out.flags.c_contiguous
        tmp = out if direct else np.empty(src_shape, dtype=self._dtype)
        _copy.copy(_copy.HOST, tmp.ctypes.data, tmp.strides, _copy.DEVICE, src_ptr,
                   src_strides, src_shape, self.itemsize, s._h)
        if blocking or not direct:
            st = L.cuStreamSynchronize(s._h)
            if st:
                raise_for(st, "cuStreamSynchronize")
        if not direct:
            host = tmp[tuple(slice(None, None, -1) if f else slice(None) for f in flips)]
            out[...] = np.broadcast_to(host, self._shape)
        return out

    def copy_(self, src, stream=None, *, blocking: bool = True) -> "DeviceArray":
        """Copy ``src`` (a host array, DeviceArray, or any CAI/DLPack array) into this array.

        Shapes and dtypes must match exactly (no casting; host sources broadcast).

        Parameters
        ----------
        src : array-like
        stream : Stream, optional
            The current stream by default.
        blocking : bool, default True
            Only matters for a pinned host source, which the copy reads asynchronously: with
            ``False`` the call returns at once and the source is kept alive until the copy has
            run (do not modify it before then). Pageable sources are staged by the driver
            before the call returns, and device sources never block.

        Raises
        ------
        ValueError, TypeError
            Shape or dtype mismatch, or this array is read-only or has overlapping elements.
        """
        dst_ptr = self._check()
        check_writable(self, "copy_: the destination")
        if src is None:
            raise TypeError("copy_: src is required (got None)")
        s = as_stream(stream, self._device)
        if type(src) is DeviceArray:
            other = src
        elif isinstance(src, np.ndarray) or not _is_device_array_like(src):
            host = np.asarray(src)
            if host.dtype != self._dtype:
                raise TypeError(f"copy_: src is {host.dtype}, this array {self._dtype}: dtypes "
                                "must match (convert on the host with astype first)")
            if host.shape != self._shape:
                try:
                    host = np.broadcast_to(host, self._shape)
                except ValueError:
                    raise ValueError(f"copy_: src has shape {host.shape}, this array "
                                     f"{self._shape}") from None
            _copy.h2d(self, dst_ptr, host, s, blocking)
            return self
        else:
            other = IMPORT[0](src, "copy_: src", s)
        if other._dtype != self._dtype:
            raise TypeError(f"copy_: src is {other._dtype}, this array {self._dtype}: dtypes "
                            "must match")
        if other._shape != self._shape:
            raise ValueError(f"copy_: src has shape {other._shape}, this array {self._shape}")
        src_ptr = other._check()
        if other._device is self._device and self.is_c_contiguous and other.is_c_contiguous:
            # The common case, without planning: one contiguous device-to-device copy.
            n = self.nbytes
            if n:
                L = _lib.get()
                L.cuCtxSetCurrent(self._device._ctx)
                st = L.cuMemcpyDtoDAsync_v2(dst_ptr, src_ptr, n, s._h)
                if st:
                    raise_for(st, "cuMemcpyDtoDAsync_v2")
            return self
        _copy.d2d(self, dst_ptr, other, s)
        return self

    def copy(self, stream=None) -> "DeviceArray":
        """A new C-contiguous array with the same contents."""
        out = empty(self._shape, self._dt, device=self._device, stream=stream)
        return out.copy_(self, stream)

    def fill(self, value, stream=None) -> "DeviceArray":
        """Set every element to ``value`` (converted to this dtype without overflow).

        Raises
        ------
        ValueError
            ``value`` does not fit the dtype, or this array is read-only or has overlapping
            elements.
        """
        dst_ptr = self._check()
        check_writable(self, "fill: the array")
        pattern = fill_value(value, self._dtype, "fill: value")
        s = as_stream(stream, self._device)
        if self.size == 0:
            return self
        if not self.is_c_contiguous:
            self.copy_(full(self._shape, pattern, device=self._device, stream=s), s)
            return self
        L = _lib.get()
        L.cuCtxSetCurrent(self._device._ctx)
        raw = pattern.tobytes()
        nbytes = self.nbytes
        size = len(raw)
        if size == 1:
            st, fn = L.cuMemsetD8Async(dst_ptr, raw[0], nbytes, s._h), "cuMemsetD8Async"
        elif size == 2:
            st, fn = L.cuMemsetD16Async(dst_ptr, int.from_bytes(raw, "little"), nbytes // 2,
                                        s._h), "cuMemsetD16Async"
        elif size % 4 == 0 and raw == raw[:4] * (size // 4):
            st, fn = L.cuMemsetD32Async(dst_ptr, int.from_bytes(raw[:4], "little"), nbytes // 4,
                                        s._h), "cuMemsetD32Async"
        else:
            # 8- and 16-byte patterns: seed one block from the host, then double it on the
            # device, so the host sends at most 64 KiB whatever the array's size.
            count = min(self.size, max(1, 65536 // size))
            seed = np.full(count, pattern, dtype=self._dtype)
            st = L.cuMemcpyHtoDAsync_v2(dst_ptr, seed.ctypes.data, seed.nbytes, s._h)
            if st:
                raise_for(st, "cuMemcpyHtoDAsync_v2")
            done = seed.nbytes
            while done < nbytes:
                n = min(done, nbytes - done)
                st = L.cuMemcpyDtoDAsync_v2(dst_ptr + done, dst_ptr, n, s._h)
                if st:
                    raise_for(st, "cuMemcpyDtoDAsync_v2")
                done += n
            return self
        if st:
            raise_for(st, fn)
        return self

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a DeviceArray cannot be viewed as a numpy array without a copy")
        a = self.get()
        return a if dtype is None else a.astype(dtype, copy=False)

    # -- interchange ------------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict:
        ptr = self._check()
        s = current_stream()
        h = s._handle
        return {
            "shape": self._shape,
            "typestr": self._dtype.str,
            "descr": [("", self._dtype.str)],
            "data": (ptr if self.size else 0, self._readonly),
            "strides": None if self.is_c_contiguous else self._strides,
            "version": 3,
            # CAI spells the legacy default stream 1; 0 is not allowed.
            "stream": 1 if h == 0 else h,
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_dlpack.kDLCUDA, self._device.ordinal)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (versioned when the consumer asks for >= 1.0).

        ``stream`` is the consumer's stream: work queued on the current stream so far is made
        to precede it (``-1`` skips that).
        """
        ptr = self._check()
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"cannot export to device {dl_device}; data is on "
                              f"{self.__dlpack_device__()} (copy is not supported)")
        if copy:
            raise BufferError("DeviceArray does not copy on DLPack export")
        # DLPack: None means the consumer uses the legacy default stream; -1 means no sync.
        if stream != -1:
            order_before(current_stream(), 1 if stream is None else stream, self._device)
        item = self.itemsize
        for st in self._strides:
            if st % item:
                raise BufferError("strides are not a multiple of the item size; DLPack cannot "
                                  "describe this view")
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        if self._readonly and not versioned:
            # Only the versioned capsule has a read-only flag: a legacy consumer would write.
            raise BufferError("a read-only array exports only to DLPack >= 1.0 consumers (the "
                              "legacy capsule cannot say read-only); pass a copy (.copy())")
        return _dlpack.export(ptr if self.size else 0, self._shape,
                              tuple(st // item for st in self._strides), self._dt.dlpack,
                              _dlpack.kDLCUDA, self._device.ordinal, self, versioned,
                              self._readonly)

    # -- display ----------------------------------------------------------------------------
    def __repr__(self) -> str:
        head = f"shape={self._shape}, dtype={self._dtype}, device={self._device.ordinal}"
        if self.closed:
            return f"<DeviceArray closed, {head}>"
        if self.size <= 1000:
            try:
                body = np.array2string(self.get(), separator=", ", prefix="DeviceArray(")
                return f"DeviceArray({body}, dtype={self._dtype}, device={self._device.ordinal})"
            except Exception:
                pass
        return f"<DeviceArray {head}, ptr=0x{self._ptr:x}>"


# -- helpers ---------------------------------------------------------------------------------
def byte_extent(shape, strides, itemsize) -> tuple[int, int]:
    """Bytes ``[lo, hi)`` relative to the first element that an array of ``shape`` and byte
    ``strides`` touches (``(0, 0)`` when it is empty)."""
    lo = hi = 0
    for n, st in zip(shape, strides):
        if n == 0:
            return 0, 0
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return lo, hi + itemsize


_extent = byte_extent


def spans_overlap(p1: int, ext1: tuple[int, int], p2: int, ext2: tuple[int, int]) -> bool:
    """Whether the byte ranges ``p1 + ext1`` and ``p2 + ext2`` (as :func:`byte_extent` gives
    them) share a byte; empty ranges share none."""
    lo1, hi1 = p1 + ext1[0], p1 + ext1[1]
    lo2, hi2 = p2 + ext2[0], p2 + ext2[1]
    return lo1 < hi2 and lo2 < hi1 and lo1 < hi1 and lo2 < hi2


def arrays_overlap(a: "DeviceArray", b: "DeviceArray") -> bool:
    """Whether two arrays' memory ranges intersect (a conservative aliasing test)."""
    return spans_overlap(a._ptr, byte_extent(a._shape, a._strides, a._dtype.itemsize),
                         b._ptr, byte_extent(b._shape, b._strides, b._dtype.itemsize))


def _is_c_contig(shape, strides, itemsize) -> bool:
    acc = itemsize
    for n, st in zip(reversed(shape), reversed(strides)):
        if n != 1 and st != acc:
            return False
        acc *= n
    return True


def _positive_view(shape, strides):
    """Flip reversed axes and collapse broadcast (stride 0) axes to length 1.

    Returns the new shape and strides plus, per axis, whether it was flipped or collapsed.
    """
    flips = tuple(st < 0 and n > 1 for n, st in zip(shape, strides))
    bcast = tuple(st == 0 and n > 1 for n, st in zip(shape, strides))
    new_shape = tuple(1 if b else n for n, b in zip(shape, bcast))
    new_strides = tuple(-st if f else st for st, f in zip(strides, flips))
    return new_shape, new_strides, flips, bcast


def _is_device_array_like(obj) -> bool:
    return (isinstance(obj, DeviceArray) or hasattr(obj, "__cuda_array_interface__")
            or (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")
                and dlpack_is_cuda(obj)))


def dlpack_is_cuda(obj) -> bool:
    try:
        kind, _ = obj.__dlpack_device__()
    except Exception:
        return False
    return kind in (_dlpack.kDLCUDA, _dlpack.kDLCUDAManaged)


# The public fields: the slots themselves under public names (one slot read each).
for _public, _private in _PUBLIC_FIELDS.items():
    setattr(DeviceArray, _public, _ArrayFields.__dict__[_private])
del _public, _private

#: The one conversion of array-likes (:func:`cudalibs.driver.interop.coerce`), for
#: :meth:`DeviceArray.copy_` from a foreign array; set by that module, which builds on this one.
IMPORT: list = []

# DeviceBuffer.as_array views a buffer through this layer.
_memory.BUFFER_VIEW.append(DeviceArray.from_buffer)


# -- constructors ----------------------------------------------------------------------------
def empty(shape, dtype=np.float32, *, device=None, stream=None) -> DeviceArray:
    """An uninitialised C-contiguous array, allocated stream-ordered from the device's pool.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : dtype-like, default float32
        Any dtype of :data:`cudalibs.dtypes.TABLE` (bfloat16 and float8 included).
    device : Device or int, optional
        The current device by default (or the stream's device).
    stream : Stream, optional
        Allocation stream; the memory is freed on it too.

    Raises
    ------
    ValueError
        Negative dimensions, or a size no device could hold.
    CudaOutOfMemoryError
        The device is out of memory.
    """
    try:
        # Repeated (shape, dtype) pairs skip the parsing: the common case in a training loop.
        shape, dt, nbytes, strides = _EMPTY_LAYOUTS[shape, dtype]
    except (KeyError, TypeError):
        dt = _dtypes.lookup(dtype, "empty: dtype")
        shape_in, shape = shape, shape_tuple(shape, "empty: shape")
        nbytes = _nbytes(shape, dt.itemsize)
        strides = c_strides(shape, dt.itemsize)
        if type(shape_in) is tuple and len(_EMPTY_LAYOUTS) < 4096:
            try:
                _EMPTY_LAYOUTS[shape_in, dtype] = (shape, dt, nbytes, strides)
            except TypeError:   # an unhashable dtype-like
                pass
    if device is None and stream is not None:
        s = as_stream(stream)
        dev = s._device or as_device(None)
    else:
        dev = as_device(device)
        s = None
    pool = dev._pool or dev.memory_pool
    if nbytes == 0:
        buf = pool.allocate(0, stream)
    else:
        # MemoryPool.allocate without re-checking what is known here.
        if s is None or s._device is not dev:
            s = as_stream(stream, dev)
        buf = pool._allocate(nbytes, s)
    return DeviceArray._view(buf._ptr, shape, strides, dt, dev, buf, None)


#: (shape tuple, dtype-like) -> (shape, DType, nbytes, strides) for :func:`empty`.
_EMPTY_LAYOUTS: dict = {}


def zeros(shape, dtype=np.float32, *, device=None, stream=None) -> DeviceArray:
    """A C-contiguous array of zeros (see :func:`empty`)."""
    return empty(_shape_for("zeros", shape), dtype, device=device, stream=stream).fill(0, stream)


def full(shape, value, dtype=None, *, device=None, stream=None) -> DeviceArray:
    """A C-contiguous array filled with ``value`` (dtype inferred from it if not given)."""
    # Checked before any C call: numpy infers the dtype from the value unless given.
    pattern = fill_value(value, None if dtype is None else
                         _dtypes.lookup(dtype, "full: dtype").numpy, "full: value")
    dt = _dtypes.lookup(pattern.dtype, "full: value of dtype")
    return empty(_shape_for("full", shape), dt, device=device, stream=stream).fill(pattern,
                                                                                    stream)


def _shape_for(op: str, shape):
    """``shape`` checked in ``op``'s name, a tuple as is (empty checks its entries): the
    common case costs one type test."""
    return shape if type(shape) is tuple else shape_tuple(shape, f"{op}: shape")


def to_device(obj, dtype=None, *, device=None, stream=None) -> DeviceArray:
    """Copy a host array (anything ``numpy.asarray`` takes) to a new C-contiguous device array.

    Non-contiguous and non-native-byte-order inputs are converted on the host first.
    """
    if obj is None:
        raise TypeError("to_device: obj is required (got None)")
    host = np.asarray(obj, dtype=dtype)
    if host.dtype.kind in "OUS":
        raise TypeError(f"to_device: obj is not numeric data (numpy makes it {host.dtype} "
                        f"from a {type(obj).__name__})")
    if host.dtype.byteorder not in "=|" and not host.dtype.isnative:
        host = host.astype(host.dtype.newbyteorder("="))
    out = empty(host.shape, host.dtype, device=device, stream=stream)
    if out.size:
        _copy.h2d(out, out._ptr, host, as_stream(stream, out._device), True)
    return out
