"""Blocked-ELL sparse matrices: square blocks, the same number of block slots in every block
row.

A :class:`BlockedELL` matrix of ``rows x cols`` with ``b x b`` blocks holds two arrays:

- ``ell_col_ind``, int32 ``[rows // b, W]``: the block column of each of a block row's ``W``
  slots, or -1 for an empty slot;
- ``values``, ``[rows, W * b]`` row-major: the block of slot ``s`` of block row ``r`` is
  ``values[r*b:(r+1)*b, s*b:(s+1)*b]`` (an empty slot's values are not read).

Every block row has the same number of slots, so a matrix whose block rows hold different
numbers of blocks is padded to the widest one with empty slots; the canonical form (what the
conversions here make, and ``check=True`` checks) has each block row's block columns
strictly increasing and its empty slots after them (:func:`.structure.check_blocked_ell`).

cuSPARSE takes Blocked-ELL matrices in SpMM only (``CUSPARSE_SPMM_BLOCKED_ELL_ALG1``, on
tensor cores: float16 from compute capability 7.0, bfloat16, float32 and float64 from 8.0;
``op_a="N"``, ``op_b`` "N" or "T"; int32 indices; any block size, powers of two fastest;
``B`` and ``C`` row- or column-major, aligned to their elements), and converts dense
matrices into them (``cusparseDenseToSparse``, with the column indices given); SpMV, SDDMM,
SpGEMM, the triangular solves and ``cusparseSparseToDense`` do not take them, so the way
back to a dense matrix goes through the host.

Precision: float16 and bfloat16 are computed in float32; float32 is multiplied at TF32
precision (inputs rounded to 10 mantissa bits on the tensor cores, sums in float32): errors
near 1e-4 relative to ``|A| @ |B|`` where BSR and CSR give float32's 1e-7 -- measured on an
H100 with cuSPARSE 12.6.  float64 is exact to float64 rounding.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .. import dtypes as _dtypes
from .._ffi import refuse_in_capture
from ..driver import _lib as _drv
from ..driver.array import DeviceArray, to_device, zeros
from ..driver.device import as_device
from ..driver.stream import as_stream
from ..runtime.handles import refuse_if_capturing
from ..runtime.operand import operand
from . import _lib
from ._base import raise_for
from .handle import cusparse_handle
from .matrix import SparseMatrix, dense_descriptor, dense_layout, descriptor, owned_copy
from .structure import (blocked_ell_pattern, blocked_ell_to_bsr, blocked_ell_to_dense,
                        bsr_to_blocked_ell, canonical_compressed, check_blocked_ell,
                        dense_to_blocked_ell_values)

__all__ = ["BlockedELL", "ELL_VALUE_DTYPES", "ELL_INDEX_DTYPE"]

#: The value types of cuSPARSE's Blocked-ELL SpMM: float16, bfloat16 (with ml_dtypes),
#: float32, float64.
ELL_VALUE_DTYPES = tuple(np.dtype(t) for t in (np.float16, _dtypes.bfloat16, np.float32,
                                               np.float64) if t is not None)
#: The one index type cuSPARSE's Blocked-ELL SpMM takes.
ELL_INDEX_DTYPE = np.dtype(np.int32)
_HOST = "it reads the device matrix on the host"
_TYPES = ", ".join(str(d) for d in ELL_VALUE_DTYPES)


def _block_size(block_size, what: str) -> int:
    if isinstance(block_size, (bool, np.bool_)) or not isinstance(block_size,
                                                                  (int, np.integer)):
        raise TypeError(f"{what}: block_size must be an int, not {type(block_size).__name__}")
    if block_size < 1:
        raise ValueError(f"{what}: block_size must be at least 1, not {block_size}")
    return int(block_size)


def _fits(rows: int, cols: int, b: int, what: str) -> None:
    if rows % b or cols % b:
        raise ValueError(f"{what}: shape {(rows, cols)} is not a multiple of the block size "
                         f"{b} both ways (block_size)")


def _value_dtype(dt, what: str, name: str = "dtype") -> np.dtype:
    dt = np.dtype(dt)
    if dt not in ELL_VALUE_DTYPES:
        raise TypeError(f"{what}: {name} {dt} is not a Blocked-ELL value type; cuSPARSE's "
                        f"Blocked-ELL SpMM takes {_TYPES}")
    return dt


def _host_indices(ell_col_ind, brows: int, bcols: int, what: str) -> np.ndarray:
    """Column indices given on the host, checked (shape, integers, canonical), as int32."""
    ell = np.asarray(ell_col_ind)
    if ell.ndim != 2 or ell.shape[0] != brows or ell.shape[1] < 1:
        raise ValueError(f"{what}: ell_col_ind has shape {ell.shape}; {brows} block rows need "
                         f"({brows}, slots) with at least one slot")
    if ell.dtype.kind not in "iu":
        raise TypeError(f"{what}: ell_col_ind has dtype {ell.dtype}; block column indices "
                        "are integers")
    check_blocked_ell(ell, bcols, what)
    return ell.astype(ELL_INDEX_DTYPE)


class BlockedELL(SparseMatrix):
    """A Blocked-ELL sparse matrix of square blocks over device arrays (borrowed, not
    copied).

    Parameters
    ----------
    ell_col_ind : DeviceArray or CUDA array-like
        int32, ``(rows // block_size, slots)``, C-contiguous: each block row's block columns,
        -1 for an empty slot.
    values : DeviceArray or CUDA array-like
        ``(rows, slots * block_size)``, C-contiguous: the blocks side by side, slot after
        slot; float16, bfloat16, float32 or float64.
    shape : (int, int)
        Multiples of ``block_size`` both ways.
    block_size : int
        The blocks' size (powers of two, and large ones, run fastest in cuSPARSE).
    check : bool, default False
        Check the column indices on a host copy: in range, each block row's strictly
        increasing, -1 only after a block row's last stored block.  Otherwise trusted.

    Attributes
    ----------
    block : int
        The block size.
    ell_cols : int
        Columns of ``values`` (slots times the block size).
    nnz : int
        Stored values, empty slots included: ``rows * ell_cols``.

    Notes
    -----
    cuSPARSE multiplies float32 Blocked-ELL at TF32 precision (see the module notes); give
    the matrix as BSR or CSR where float32 accuracy matters.

    Build from host data with :meth:`from_scipy` (a BSR matrix, or any with ``block_size``)
    or :meth:`from_dense` (a host or device array).  Back to the host with
    :meth:`~SparseMatrix.to_scipy` (BSR; float16 and bfloat16 values as float32, which scipy
    takes) or :meth:`to_numpy`; :meth:`to_dense` goes through the host, since
    ``cusparseSparseToDense`` does not take Blocked-ELL.
    """

    format = "blocked_ell"
    _ARRAYS = ("ell_col_ind", "values")
    _NDIM = {"ell_col_ind": 2, "values": 2}
    _INDEX_DTYPES = (ELL_INDEX_DTYPE,)
    _INDEX_TEXT = "cuSPARSE's Blocked-ELL takes int32 block column indices only"
    _VALUE_DTYPES = ELL_VALUE_DTYPES

    def __init__(self, ell_col_ind, values, shape, block_size, *, check: bool = False):
        self.block = _block_size(block_size, "BlockedELL")
        self._setup({"ell_col_ind": ell_col_ind, "values": values}, shape, "BlockedELL",
                    owned=False, keep=(ell_col_ind, values))
        if check:
            self.check()

    def _check_lengths(self, a, rows, cols, what) -> int:
        b = self.block
        _fits(rows, cols, b, what)
        for name in self._ARRAYS:
            if a[name].address % a[name].dtype.itemsize:
                raise ValueError(f"{what}: {name} at 0x{a[name].address:x} is not aligned to "
                                 f"its {a[name].dtype.itemsize}-byte elements, as cuSPARSE "
                                 "requires")
        vr, ell_cols = a["values"].shape
        if vr != rows:
            raise ValueError(f"{what}: values has {vr} rows; the matrix has {rows}")
        if ell_cols % b or ell_cols < b:
            raise ValueError(f"{what}: values has {ell_cols} columns; it needs a positive "
                             f"multiple of the block size {b} (slots * block_size)")
        want = (rows // b, ell_cols // b)
        if a["ell_col_ind"].shape != want:
            raise ValueError(f"{what}: ell_col_ind has shape {a['ell_col_ind'].shape}; values "
                             f"of {vr} x {ell_cols} in {b} x {b} blocks need {want}")
        self.ell_cols = ell_cols
        return rows * ell_cols

    def _index_extent(self) -> int:
        return self.shape[1] // self.block

    @property
    def slots(self) -> int:
        """Block slots per block row (stored blocks and empty ones)."""
        return self.ell_cols // self.block

    def check(self, stream=None) -> None:
        """Check the column indices are canonical, on a host copy (waits for ``stream``).
        Raises ValueError naming the first wrong slot."""
        self._live()
        check_blocked_ell(self.arrays["ell_col_ind"].get(stream=stream),
                          self.shape[1] // self.block, "BlockedELL")

    def _scipy(self, sp, h):
        indptr, indices, data = blocked_ell_to_bsr(h["ell_col_ind"], h["values"], self.block)
        if data.dtype.itemsize < 4:
            data = data.astype(np.float32)      # scipy.sparse takes no 16-bit floats
        return sp.bsr_matrix((data, indices, indptr), shape=self.shape,
                             blocksize=(self.block, self.block))

    def to_numpy(self, stream=None) -> np.ndarray:
        """The dense matrix as a host numpy array of the values' dtype (waits for
        ``stream``)."""
        self._live()
        return blocked_ell_to_dense(self.arrays["ell_col_ind"].get(stream=stream),
                                    self.arrays["values"].get(stream=stream), self.block,
                                    self.shape)

    def to_dense(self, *, stream=None) -> DeviceArray:
        """The dense matrix, C-contiguous, on the device.

        ``cusparseSparseToDense`` does not take Blocked-ELL, so the matrix is expanded on the
        host (:meth:`to_numpy`) and copied back: a synchronisation and two copies.

        Raises
        ------
        CaptureError
            While this thread or ``stream`` captures a graph.
        """
        self._live()
        what = "BlockedELL.to_dense"
        s = as_stream(stream, self.device, what=f"{what}: stream")
        refuse_in_capture(what, _HOST)
        refuse_if_capturing(s.raw_handle, self.device, what, _HOST)
        return to_device(self.to_numpy(s), device=self.device, stream=s)

    def _extra(self) -> str:
        return f", {self.block}x{self.block} blocks, {self.slots} slot(s) per block row"

    # -- construction from host or dense data ---------------------------------------------
    @classmethod
    def from_scipy(cls, matrix, block_size=None, *, dtype=None, device=None, stream=None):
        """Copy a ``scipy.sparse`` matrix to the device as Blocked-ELL.

        A BSR matrix of square blocks keeps its blocks (``block_size`` may be left out);
        any other matrix (or a BSR of other blocks) is cut into ``block_size`` blocks by
        scipy (``tobsr``).  The blocks are taken canonical (sorted, duplicates summed, as
        :func:`~cudalibs.cusparse.from_scipy` does), and every block row is padded with
        empty slots (-1) to the widest one.

        Parameters
        ----------
        matrix : scipy.sparse matrix or array
            Real values.
        block_size : int, optional
            Required unless ``matrix`` is a BSR matrix of square blocks.
        dtype : dtype-like, optional
            The values' type: float16, bfloat16, float32 or float64 (default the matrix's;
            scipy holds no 16-bit floats, so those are rounded from its values).
        device : Device or int, optional
        stream : Stream, optional
            The copies' stream.

        Returns
        -------
        BlockedELL
            Owning its arrays.

        Raises
        ------
        CaptureError
            While this thread, or ``stream``, is capturing a graph.
        """
        what = "BlockedELL.from_scipy"
        fmt = getattr(matrix, "format", None)
        if not isinstance(fmt, str) or not hasattr(matrix, "tobsr"):
            raise TypeError(f"{what}: matrix must be a scipy.sparse matrix, not "
                            f"{type(matrix).__name__}")
        src = np.asarray(matrix.data).dtype
        if src.kind not in "fiu":
            raise TypeError(f"{what}: the matrix has dtype {src}; cuSPARSE's Blocked-ELL SpMM "
                            f"takes real values ({_TYPES})")
        dt = _value_dtype(src if dtype is None else dtype, what,
                          "the matrix's dtype" if dtype is None else "dtype")
        if block_size is None:
            blocks = getattr(matrix, "blocksize", None)
            if fmt != "bsr" or blocks[0] != blocks[1]:
                shape = "" if blocks is None else f", not {blocks[0]}x{blocks[1]} blocks"
                raise ValueError(f"{what}: block_size is required for a {fmt} matrix (a BSR "
                                 f"matrix gives its own if they are square{shape})")
            b = int(blocks[0])
        else:
            b = _block_size(block_size, what)
        rows, cols = (int(v) for v in matrix.shape)
        _fits(rows, cols, b, what)
        if fmt != "bsr" or tuple(matrix.blocksize) != (b, b):
            matrix = matrix.tobsr(blocksize=(b, b))
        indptr, indices, data = canonical_compressed(matrix.indptr, matrix.indices,
                                                     np.asarray(matrix.data), rows // b,
                                                     cols // b, what, "block row")
        ell, values = bsr_to_blocked_ell(indptr, indices, data, rows // b)
        return owned_copy(cls, {"ell_col_ind": ell, "values": values.astype(dt)},
                          (rows, cols), device, stream, what, block=b)

    @classmethod
    def from_dense(cls, x, block_size, *, ell_col_ind=None, check: bool = False, stream=None,
                   device=None):
        """The Blocked-ELL matrix of a dense 2-D array's non-zero blocks, owning new arrays.

        A host numpy ``x`` is converted on the host and copied.  A device ``x`` is converted
        on the device by ``cusparseDenseToSparse``, which takes the column indices as given:
        it fills each slot with its block of ``x`` and leaves out whatever lies outside the
        pattern.  Give them with ``ell_col_ind``; without it the pattern of ``x``'s non-zero
        blocks is found on a host copy of ``x`` (a synchronisation and a copy of the whole
        matrix).

        Parameters
        ----------
        x : numpy.ndarray, DeviceArray or CUDA array-like
            2-D, float16, bfloat16, float32 or float64; a device one row- or column-major.
            Its shape must be a multiple of ``block_size`` both ways.
        block_size : int
        ell_col_ind : array-like of int, optional
            The pattern, ``(rows // block_size, slots)``: on the host (checked canonical) or,
            for a device ``x``, a device int32 array (copied; checked only with ``check``).
            Default: every non-zero block of ``x``, each block row padded with -1 to the
            widest.
        check : bool, default False
            Check a device ``ell_col_ind`` on a host copy.
        stream : Stream, optional
        device : Device or int, optional
            The device of a host ``x``'s copy (default the current one).

        Returns
        -------
        BlockedELL

        Raises
        ------
        CaptureError
            While this thread or ``stream`` captures a graph: the conversion asks cuSPARSE for
            its buffer's size, and a host ``x`` or pattern is copied.
        """
        what = "BlockedELL.from_dense"
        b = _block_size(block_size, what)
        if isinstance(x, np.ndarray):
            if x.ndim != 2:
                raise ValueError(f"{what}: x must be 2-D, got shape {x.shape}")
            _value_dtype(x.dtype, what, "x's dtype")
            rows, cols = x.shape
            _fits(rows, cols, b, what)
            ell = blocked_ell_pattern(x, b) if ell_col_ind is None else \
                _host_indices(ell_col_ind, rows // b, cols // b, what)
            return owned_copy(cls, {"ell_col_ind": ell,
                                    "values": dense_to_blocked_ell_values(x, ell, b)},
                              (rows, cols), device, stream, what, block=b)
        x = operand(x, "x", what, ndim=2, dtypes=ELL_VALUE_DTYPES, stream=stream)
        dense_layout(x, "x", what)
        rows, cols = x.shape
        _fits(rows, cols, b, what)
        dev = x.device
        if device is not None and as_device(device) is not dev:
            raise ValueError(f"{what}: x is on device {dev.ordinal}, device= names "
                             f"{as_device(device).ordinal}")
        dev_ell = None
        if ell_col_ind is not None and not isinstance(ell_col_ind, (np.ndarray, list, tuple)):
            dev_ell = operand(ell_col_ind, "ell_col_ind", what, device=dev,
                              dtypes=(ELL_INDEX_DTYPE,), ndim=2, stream=stream)
            if dev_ell.shape[0] != rows // b or dev_ell.shape[1] < 1:
                raise ValueError(f"{what}: ell_col_ind has shape {dev_ell.shape}; "
                                 f"{rows // b} block rows need ({rows // b}, slots) with at "
                                 "least one slot")
            if not dev_ell.is_c_contiguous:
                raise ValueError(f"{what}: ell_col_ind must be C-contiguous")
        s = as_stream(stream, dev, what=f"{what}: stream")
        refuse_in_capture(what, "it sizes cuSPARSE's buffer and may copy host data")
        refuse_if_capturing(s.raw_handle, dev, what,
                            "it sizes cuSPARSE's buffer and may copy host data")
        if dev_ell is not None:
            if check:
                check_blocked_ell(dev_ell.get(stream=s), cols // b, what)
            ell = dev_ell.copy(stream=s)
        else:
            host = blocked_ell_pattern(x.get(stream=s), b) if ell_col_ind is None else \
                _host_indices(ell_col_ind, rows // b, cols // b, what)
            ell = to_device(host, device=dev, stream=s)
        try:
            # Empty slots are zeros, whatever the conversion does with them.
            values = zeros((rows, ell.shape[1] * b), x.dtype, device=dev, stream=s)
        except BaseException:
            ell.close()
            raise
        m = cls.__new__(cls)
        m.block = b
        try:
            m._setup({"ell_col_ind": ell, "values": values}, (rows, cols), what, owned=True)
        except BaseException:
            ell.close()
            values.close()
            raise
        try:
            _dense_to_sparse(x, m, s, what)
        except BaseException:
            m.close()
            raise
        return m


def _dense_to_sparse(x: DeviceArray, m: SparseMatrix, s, what: str) -> None:
    """``cusparseDenseToSparse`` of ``x`` into ``m``'s arrays (its pattern set), on ``s``."""
    dev = m.device
    L = _lib.get()
    alg = _lib.CUSPARSE_DENSETOSPARSE_ALG_DEFAULT
    with descriptor(m) as spd, dense_descriptor(x, "x", what) as dnd:
        _drv.get().cuCtxSetCurrent(dev.raw_context)
        h = cusparse_handle(dev, s.raw_handle)
        n = ctypes.c_size_t()
        st = L.cusparseDenseToSparse_bufferSize(h, dnd.raw, spd.raw, alg, ctypes.byref(n))
        if st:
            raise_for(st, "cusparseDenseToSparse_bufferSize", repr(m))
        buf = dev.memory_pool.allocate(max(n.value, 1), s)
        try:
            for fn in ("cusparseDenseToSparse_analysis", "cusparseDenseToSparse_convert"):
                st = getattr(L, fn)(h, dnd.raw, spd.raw, alg, buf.ptr)
                if st:
                    raise_for(st, fn, repr(m))
        finally:
            buf.close()
