"""Sparse matrices on the device: CSR, CSC, COO and BSR over device arrays (Blocked-ELL,
on the same base, is :mod:`.ell`'s).

A :class:`SparseMatrix` holds the arrays of one format (offsets or row indices, indices,
values), checked once when it is made: index dtypes (int32 or int64, the same for both),
lengths against the shape and the number of stored entries, value dtype, one device.  It
either borrows the arrays (made from device arrays or torch tensors: they stay the caller's,
and the matrix keeps a reference to them) or owns them (made from scipy or numpy data, or by
a conversion on the device); :meth:`~SparseMatrix.close` frees what it owns.

Canonical structure (sorted indices, no duplicates) is what cuSPARSE assumes and never
checks.  Data that comes from the host is copied anyway, so :func:`from_scipy` copies it
canonical: a scipy matrix whose indices are unsorted or duplicated (scipy's ``tobsr`` leaves
block columns in the order it meets them) is the same matrix sorted with its duplicates
summed, and scipy's object is left as it is; offsets or indices that are wrong (out of
range, decreasing) are errors (:mod:`.structure`).  Device data is borrowed as it is, so
nothing can be mended: it is trusted, unless ``check=True``, which copies the index arrays
to the host and refuses a non-canonical structure (a synchronisation and a copy: for tests
and untrusted input, not for a hot path).

cuSPARSE descriptors are made per plan (:func:`descriptor`): a plan's analysis lives in its
descriptor, so two plans on one matrix never share state.  Plans found by the one-shot
functions are cached under the matrix's :attr:`~SparseMatrix.token` (never reused) and
dropped from the cache, closed, when the matrix is closed or collected.
"""

from __future__ import annotations

import ctypes
import itertools

import numpy as np

from .. import dtypes as _dtypes
from .._ffi import OwnedHandle, Resource, refuse_in_capture
from ..driver import _lib as _drv
from ..driver.array import DeviceArray, empty, to_device
from ..driver.device import as_device
from ..driver.stream import as_stream
from ..runtime import front as _front
from ..runtime.handles import refuse_if_capturing
from ..runtime.operand import check_device, operand
from . import _lib
from ._base import raise_for
from .handle import cusparse_handle
from .structure import (INDEX_DTYPES, VALUE_DTYPES, canonical_compressed, canonical_coo,
                        check_compressed, check_coo, check_shape, index_dtype_for)

__all__ = ["SparseMatrix", "CSR", "CSC", "COO", "BSR", "from_scipy", "from_torch",
           "from_dense", "descriptor", "dense_descriptor", "dense_layout", "Descriptor",
           "matrix_operand", "owned_copy"]

_INDEX_ENUM = {np.dtype(np.int32): _lib.CUSPARSE_INDEX_32I,
               np.dtype(np.int64): _lib.CUSPARSE_INDEX_64I}
_tokens = itertools.count(1)
_SIZED = "it asks cuSPARSE for its buffer's size on every call"
_HOST = "it copies host memory, which a replay of the graph would read after it is gone"


def _release(keys: list, owned: list) -> None:
    """A matrix's release: the cached plans made for it, then the arrays it owns."""
    _front.drop(list(keys))
    keys.clear()
    for a in owned:
        a.close()
    owned.clear()


class SparseMatrix(Resource):
    """Base of the sparse matrix formats: shape, dtypes, device arrays and lifetime.

    Attributes
    ----------
    shape : tuple of int
        ``(rows, cols)``.
    dtype : numpy.dtype
        The values' type: float32, float64, complex64 or complex128.
    index_dtype : numpy.dtype
        int32 or int64.
    nnz : int
        Stored entries (for BSR: stored blocks times the block's size).
    device : Device
    token : int
        This matrix's identity in plan-cache keys; never reused.
    owned : bool
        Whether the matrix owns (and :meth:`close` frees) its arrays.
    """

    __slots__ = ("__dict__",)
    format = ""
    _ARRAYS: tuple = ()

    def _setup(self, arrays: dict, shape, what: str, *, owned: bool, keep=None) -> None:
        """Check ``arrays`` (name -> array-like, in :attr:`_ARRAYS` order) and take them."""
        rows, cols = check_shape(shape, what)
        got = {}
        dev = None
        for name in self._ARRAYS:
            x = arrays[name]
            a = operand(x, name, what, device=dev, ndim=self._NDIM.get(name, 1))
            if dev is None:
                dev = a.device
            if not a.is_c_contiguous:
                raise ValueError(f"{what}: {name} must be contiguous (strides {a.strides})")
            got[name] = a
        idx = [got[n].dtype for n in self._ARRAYS[:-1]]
        for name, d in zip(self._ARRAYS, idx):
            if d not in self._INDEX_DTYPES:
                raise TypeError(f"{what}: {name} has dtype {d}; {self._INDEX_TEXT}")
            if d != idx[0]:
                raise TypeError(f"{what}: {name} has dtype {d}, {self._ARRAYS[0]} {idx[0]}; "
                                "cuSPARSE needs one index type")
        name = self._ARRAYS[-1]
        values = got[name]
        if values.dtype not in self._VALUE_DTYPES:
            raise TypeError(f"{what}: {name} has dtype {values.dtype}; supported: "
                            f"{', '.join(str(d) for d in self._VALUE_DTYPES)}")
        self.shape = (rows, cols)
        self.dtype = values.dtype
        self.index_dtype = idx[0]
        self.device = dev
        self.arrays = got
        self.nnz = self._check_lengths(got, rows, cols, what)
        if idx[0] == INDEX_DTYPES[0] and self._index_extent() > np.iinfo(np.int32).max:
            raise ValueError(f"{what}: shape {self.shape} with {self.nnz} entries needs int64 "
                             "indices")
        self.token = next(_tokens)
        self.owned = owned
        self._keep = keep
        self._keys: list = []
        self._own(_release, self._keys, list(got.values()) if owned else [])

    _NDIM: dict = {}
    _INDEX_DTYPES = INDEX_DTYPES
    _INDEX_TEXT = "cuSPARSE takes int32 or int64 indices"
    _VALUE_DTYPES = VALUE_DTYPES

    def _check_lengths(self, a: dict, rows: int, cols: int, what: str) -> int:
        raise NotImplementedError

    def _index_extent(self) -> int:
        """The largest value an index or offset of this matrix may hold."""
        return max(self.shape[0], self.shape[1], self.nnz)

    # -- what plans read ------------------------------------------------------------------
    def _remember(self, key) -> None:
        """Note a plan-cache key made for this matrix, dropped with it."""
        self._live()
        self._keys.append(key)

    def pointers(self) -> tuple[int, ...]:
        """The arrays' addresses, in the order of the format's create call."""
        self._live()
        return tuple(self.arrays[n].ptr for n in self._ARRAYS)

    # -- conversions ----------------------------------------------------------------------
    def to_scipy(self, stream=None):
        """A ``scipy.sparse`` matrix of the same format with host copies of the arrays
        (waits for ``stream``)."""
        import scipy.sparse as sp   # an optional dependency, needed here only

        self._live()
        h = {n: self.arrays[n].get(stream=stream) for n in self._ARRAYS}
        return self._scipy(sp, h)

    def to_numpy(self, stream=None) -> np.ndarray:
        """The dense matrix as a host numpy array (waits for ``stream``)."""
        return self.to_scipy(stream).toarray()

    def to_dense(self, *, stream=None) -> DeviceArray:
        """The dense matrix, C-contiguous, on the device (``cusparseSparseToDense``).

        Raises
        ------
        CaptureError
            While this thread or ``stream`` captures a graph: the conversion is no plan made
            before the capture; it asks cuSPARSE for its buffer's size on every call.
        """
        self._live()
        dev = self.device
        what = f"{type(self).__name__}.to_dense"
        s = as_stream(stream, dev, what=f"{what}: stream")
        refuse_in_capture(what, _SIZED)
        refuse_if_capturing(s.raw_handle, dev, what, _SIZED)
        out = empty(self.shape, self.dtype, device=dev, stream=s)
        with descriptor(self) as spd, dense_descriptor(out) as dnd:
            _drv.get().cuCtxSetCurrent(dev.raw_context)
            h = cusparse_handle(dev, s.raw_handle)
            L = _lib.get()
            n = ctypes.c_size_t()
            alg = _lib.CUSPARSE_SPARSETODENSE_ALG_DEFAULT
            st = L.cusparseSparseToDense_bufferSize(h, spd.raw, dnd.raw, alg, ctypes.byref(n))
            if st:
                raise_for(st, "cusparseSparseToDense_bufferSize", repr(self))
            buf = dev.memory_pool.allocate(n.value, s) if n.value else None
            try:
                st = L.cusparseSparseToDense(h, spd.raw, dnd.raw, alg,
                                             buf.ptr if buf is not None else None)
            finally:
                if buf is not None:
                    buf.close()
            if st:
                raise_for(st, "cusparseSparseToDense", repr(self))
        return out

    def __repr__(self) -> str:
        name = type(self).__name__
        if self.closed:
            return f"<{name} (closed)>"
        how = "owned" if self.owned else "borrowed"
        return (f"<{name} {self.shape[0]}x{self.shape[1]} {self.dtype}, {self.nnz} stored, "
                f"{self.index_dtype} indices, {how} arrays on device {self.device.ordinal}"
                f"{self._extra()}>")

    def _extra(self) -> str:
        return ""


class _Compressed(SparseMatrix):
    """CSR and CSC: offsets along the major axis, indices along the minor one."""

    _ARRAYS = ("indptr", "indices", "data")
    _MAJOR = 0

    def __init__(self, indptr, indices, data, shape, *, check: bool = False):
        what = type(self).__name__
        self._setup({"indptr": indptr, "indices": indices, "data": data}, shape, what,
                    owned=False, keep=(indptr, indices, data))
        if check:
            self.check()

    def _check_lengths(self, a, rows, cols, what) -> int:
        major = (rows, cols)[self._MAJOR]
        if a["indptr"].shape[0] != major + 1:
            raise ValueError(f"{what}: indptr has {a['indptr'].shape[0]} entries; "
                             f"{major} {self._AXIS}s need {major + 1}")
        nnz = a["indices"].shape[0]
        if a["data"].shape[0] != nnz:
            raise ValueError(f"{what}: indices has {nnz} entries, data "
                             f"{a['data'].shape[0]}")
        return nnz

    def check(self, stream=None) -> None:
        """Check the structure is canonical, on host copies of the index arrays (waits for
        ``stream``).  Raises ValueError naming the first wrong entry."""
        self._live()
        rows, cols = self.shape
        major, minor = (rows, cols) if self._MAJOR == 0 else (cols, rows)
        check_compressed(self.arrays["indptr"].get(stream=stream),
                         self.arrays["indices"].get(stream=stream), major, minor,
                         type(self).__name__, self._AXIS)


class CSR(_Compressed):
    """A compressed sparse row matrix over device arrays (borrowed, not copied).

    Parameters
    ----------
    indptr : DeviceArray or CUDA array-like
        ``rows + 1`` row offsets, int32 or int64, zero-based.
    indices : DeviceArray or CUDA array-like
        The column index of each stored entry (same dtype as ``indptr``), sorted within each
        row, without duplicates.
    data : DeviceArray or CUDA array-like
        The stored values: float32, float64, complex64 or complex128.
    shape : (int, int)
    check : bool, default False
        Check the structure is canonical on host copies of the index arrays (see the module
        notes); otherwise it is trusted.

    Notes
    -----
    Build from host data with :func:`from_scipy` (checked on the host, then copied), from
    torch with :func:`from_torch`, from a dense device array with :func:`from_dense`.
    """

    format = "csr"
    _AXIS = "row"
    _MAJOR = 0

    def _scipy(self, sp, h):
        return sp.csr_matrix((h["data"], h["indices"], h["indptr"]), shape=self.shape)


class CSC(_Compressed):
    """A compressed sparse column matrix over device arrays: ``indptr`` holds ``cols + 1``
    column offsets, ``indices`` the row index of each entry (sorted within each column);
    otherwise as :class:`CSR`."""

    format = "csc"
    _AXIS = "column"
    _MAJOR = 1

    def _scipy(self, sp, h):
        return sp.csc_matrix((h["data"], h["indices"], h["indptr"]), shape=self.shape)


class COO(SparseMatrix):
    """A coordinate-format matrix over device arrays: ``row``, ``col`` (int32 or int64, the
    same dtype) and ``data`` of one length; entries sorted by row, then column, without
    duplicates (cuSPARSE's requirement).  ``check=True`` checks that on host copies."""

    format = "coo"
    _ARRAYS = ("row", "col", "data")

    def __init__(self, row, col, data, shape, *, check: bool = False):
        self._setup({"row": row, "col": col, "data": data}, shape, "COO", owned=False,
                    keep=(row, col, data))
        if check:
            self.check()

    def _check_lengths(self, a, rows, cols, what) -> int:
        n = a["row"].shape[0]
        if a["col"].shape[0] != n or a["data"].shape[0] != n:
            raise ValueError(f"{what}: row, col and data have {n}, {a['col'].shape[0]} and "
                             f"{a['data'].shape[0]} entries; they must match")
        return n

    def check(self, stream=None) -> None:
        """Check the entries are sorted and unique, on host copies (waits for ``stream``)."""
        self._live()
        check_coo(self.arrays["row"].get(stream=stream), self.arrays["col"].get(stream=stream),
                  *self.shape, "COO")

    def _scipy(self, sp, h):
        return sp.coo_matrix((h["data"], (h["row"], h["col"])), shape=self.shape)


class BSR(SparseMatrix):
    """A block sparse row matrix of square blocks over device arrays.

    ``indptr`` holds ``rows // b + 1`` block-row offsets, ``indices`` the block-column index
    of each stored block, ``data`` the blocks, shape ``(blocks, b, b)``, each row-major;
    ``shape`` must be a multiple of ``b`` both ways.  SpMV on BSR needs cuSPARSE 12.6 (CUDA
    13); SpMM takes it from CUDA 12.
    """

    format = "bsr"
    _ARRAYS = ("indptr", "indices", "data")
    _NDIM = {"data": 3}

    def __init__(self, indptr, indices, data, shape, *, check: bool = False):
        self._setup({"indptr": indptr, "indices": indices, "data": data}, shape, "BSR",
                    owned=False, keep=(indptr, indices, data))
        if check:
            self.check()

    def _check_lengths(self, a, rows, cols, what) -> int:
        blocks, b, b2 = a["data"].shape
        if b != b2 or b < 1:
            raise ValueError(f"{what}: data has shape {a['data'].shape}; blocks must be "
                             "square and non-empty")
        if rows % b or cols % b:
            raise ValueError(f"{what}: shape {(rows, cols)} is not a multiple of the block "
                             f"size {b}")
        if a["indptr"].shape[0] != rows // b + 1:
            raise ValueError(f"{what}: indptr has {a['indptr'].shape[0]} entries; "
                             f"{rows // b} block rows need {rows // b + 1}")
        if a["indices"].shape[0] != blocks:
            raise ValueError(f"{what}: indices has {a['indices'].shape[0]} entries, data "
                             f"{blocks} blocks")
        self.block = b
        return blocks * b * b

    @property
    def blocks(self) -> int:
        """The number of stored blocks."""
        return self.arrays["indices"].shape[0]

    def check(self, stream=None) -> None:
        """Check the block structure is canonical, on host copies (waits for ``stream``)."""
        self._live()
        b = self.block
        check_compressed(self.arrays["indptr"].get(stream=stream),
                         self.arrays["indices"].get(stream=stream), self.shape[0] // b,
                         self.shape[1] // b, "BSR", "block row")

    def _scipy(self, sp, h):
        return sp.bsr_matrix((h["data"], h["indices"], h["indptr"]), shape=self.shape)

    def _extra(self) -> str:
        return f", {self.block}x{self.block} blocks"


_CLASSES = {"csr": CSR, "csc": CSC, "coo": COO, "bsr": BSR}


def owned_copy(cls, host: dict, shape, device, stream, what: str, **attrs):
    """A matrix of ``cls`` owning device copies of host arrays (checked already);
    ``attrs`` are set on it before its arrays are checked (BlockedELL's ``block``).

    Refused under graph capture before anything is allocated: a captured copy would read
    host memory the replay cannot count on, and in this thread's capture an allocation on
    another stream is not permitted at all."""
    refuse_in_capture(what, _HOST)
    dev = as_device(device)
    s = as_stream(stream, dev, what=f"{what}: stream")
    refuse_if_capturing(s.raw_handle, dev, what, _HOST)
    arrs: dict = {}
    try:
        for n, v in host.items():
            arrs[n] = to_device(np.ascontiguousarray(v), device=dev, stream=s)
        m = cls.__new__(cls)
        for k, v in attrs.items():
            setattr(m, k, v)
        m._setup(arrs, shape, cls.__name__, owned=True)
    except BaseException:
        for a in arrs.values():
            a.close()
        raise
    return m


def from_scipy(matrix, *, device=None, stream=None, index_dtype=None) -> SparseMatrix:
    """Copy a ``scipy.sparse`` matrix (or array) to the device, in its own format.

    The copy is canonical, as cuSPARSE needs: where the scipy matrix has unsorted or
    duplicated indices (``tobsr`` leaves block columns unsorted; a matrix built from
    coordinates may repeat them), the copy holds the same matrix sorted, its duplicates
    summed; the scipy matrix itself is not changed.  Offsets or indices that are wrong (out
    of range, decreasing offsets) are a ValueError before anything is copied.  Formats other
    than CSR, CSC, COO and BSR are converted to CSR by scipy.

    Parameters
    ----------
    matrix : scipy.sparse matrix or array
    device : Device or int, optional
        Default the current device.
    stream : Stream, optional
        The copies' stream (the current one by default).
    index_dtype : {int32, int64}, optional
        Default: int32 where every index fits, else int64.

    Returns
    -------
    CSR, CSC, COO or BSR
        Owning its arrays.

    Raises
    ------
    CaptureError
        While this thread, or ``stream``, is capturing a graph: host data cannot be copied
        into one.
    """
    fmt = getattr(matrix, "format", None)
    if not isinstance(fmt, str) or not hasattr(matrix, "tocsr"):
        raise TypeError(f"from_scipy: matrix must be a scipy.sparse matrix, not "
                        f"{type(matrix).__name__}")
    if fmt not in _CLASSES:
        matrix, fmt = matrix.tocsr(), "csr"
    rows, cols = (int(v) for v in matrix.shape)
    data = np.asarray(matrix.data)
    if data.dtype not in VALUE_DTYPES:
        raise TypeError(f"from_scipy: the matrix has dtype {data.dtype}; supported: float32, "
                        "float64, complex64, complex128 (convert with .astype())")
    what = f"from_scipy ({fmt})"
    if fmt == "coo":
        row, col, data = canonical_coo(matrix.row, matrix.col, data, rows, cols, what)
        nnz = data.shape[0]
    elif fmt == "bsr":
        b, b2 = matrix.blocksize
        if b != b2:
            raise ValueError(f"{what}: blocks of {b}x{b2}; cuSPARSE's BSR takes square blocks")
        indptr, indices, data = canonical_compressed(matrix.indptr, matrix.indices, data,
                                                     rows // b, cols // b, what, "block row")
        nnz = data.shape[0] * b * b
    else:
        major, minor, axis = (rows, cols, "row") if fmt == "csr" else (cols, rows, "column")
        indptr, indices, data = canonical_compressed(matrix.indptr, matrix.indices, data,
                                                     major, minor, what, axis)
        nnz = data.shape[0]
    idt = index_dtype_for(rows, cols, nnz) if index_dtype is None else \
        np.dtype(index_dtype)
    if idt not in INDEX_DTYPES:
        raise TypeError(f"from_scipy: index_dtype must be int32 or int64, not {idt}")
    if fmt == "coo":
        host = {"row": row.astype(idt), "col": col.astype(idt), "data": data}
    else:
        host = {"indptr": indptr.astype(idt), "indices": indices.astype(idt), "data": data}
    return owned_copy(_CLASSES[fmt], host, (rows, cols), device, stream, "from_scipy")


def from_torch(tensor, *, check: bool = False) -> SparseMatrix:
    """Borrow a torch sparse CSR, CSC or COO CUDA tensor's arrays (no copy).

    A COO tensor is coalesced first (sorted, duplicates summed: a new tensor, which the
    matrix keeps alive); CSR and CSC tensors are taken as they are (``check=True`` checks
    them on host copies).  torch is not imported by cudalibs; the tensor brings it.

    Returns
    -------
    CSR, CSC or COO
        Borrowing the tensor's memory; the matrix keeps the tensor alive.
    """
    layout = str(getattr(tensor, "layout", ""))
    if not hasattr(tensor, "is_sparse") or not layout.startswith("torch.sparse"):
        raise TypeError(f"from_torch: tensor must be a torch sparse tensor, not "
                        f"{type(tensor).__name__} (layout {layout or 'none'})")
    if tensor.dim() != 2:
        raise ValueError(f"from_torch: tensor is {tensor.dim()}-d; a sparse matrix is 2-d")
    shape = tuple(int(v) for v in tensor.shape)
    if layout == "torch.sparse_csr":
        m = CSR(tensor.crow_indices(), tensor.col_indices(), tensor.values(), shape,
                check=check)
    elif layout == "torch.sparse_csc":
        m = CSC(tensor.ccol_indices(), tensor.row_indices(), tensor.values(), shape,
                check=check)
    elif layout == "torch.sparse_coo":
        t = tensor.coalesce()
        idx = t.indices()
        m = COO(idx[0].contiguous(), idx[1].contiguous(), t.values(), shape, check=check)
        tensor = t
    else:
        raise TypeError(f"from_torch: tensor has layout {layout}; supported: sparse_csr, "
                        "sparse_csc, sparse_coo")
    m._keep = (m._keep, tensor)
    return m


def from_dense(x, *, stream=None, index_dtype=np.int32) -> CSR:
    """The CSR matrix of a dense 2-D device array's non-zero entries
    (``cusparseDenseToSparse``), owning new arrays.

    Synchronises: the number of non-zeros is read on the host to size the arrays, so it is
    refused while ``stream`` captures a graph.
    """
    op = "from_dense"
    x = operand(x, "x", op, ndim=2, stream=stream, dtypes=VALUE_DTYPES)
    idt = np.dtype(index_dtype)
    if idt not in INDEX_DTYPES:
        raise TypeError(f"{op}: index_dtype must be int32 or int64, not {idt}")
    dev = x.device
    s = as_stream(stream, dev, what=f"{op}: stream")
    refuse_in_capture(op, "the number of non-zeros is read on the host")
    refuse_if_capturing(s.raw_handle, dev, op, "the number of non-zeros is read on the host")
    rows, cols = x.shape
    indptr = empty((rows + 1,), idt, device=dev, stream=s)
    L = _lib.get()
    _drv.get().cuCtxSetCurrent(dev.raw_context)
    h = cusparse_handle(dev, s.raw_handle)
    alg = _lib.CUSPARSE_DENSETOSPARSE_ALG_DEFAULT
    raw = _lib.cusparseSpMatDescr_t()
    e = _INDEX_ENUM[idt]
    vt = _dtypes.lookup(x.dtype).cuda
    st = L.cusparseCreateCsr(ctypes.byref(raw), rows, cols, 0, indptr.ptr, None, None, e, e,
                             _lib.CUSPARSE_INDEX_BASE_ZERO, vt)
    if st:
        indptr.close()
        raise_for(st, "cusparseCreateCsr", op)
    spd = Descriptor(raw, L.cusparseDestroySpMat)
    made: list = [indptr]
    try:
        with spd, dense_descriptor(x) as dnd:
            n = ctypes.c_size_t()
            st = L.cusparseDenseToSparse_bufferSize(h, dnd.raw, spd.raw, alg, ctypes.byref(n))
            if st:
                raise_for(st, "cusparseDenseToSparse_bufferSize", op)
            buf = dev.memory_pool.allocate(max(n.value, 1), s)
            made.append(buf)
            st = L.cusparseDenseToSparse_analysis(h, dnd.raw, spd.raw, alg, buf.ptr)
            if st:
                raise_for(st, "cusparseDenseToSparse_analysis", op)
            r, c, nnz = ctypes.c_longlong(), ctypes.c_longlong(), ctypes.c_longlong()
            st = L.cusparseSpMatGetSize(spd.raw, ctypes.byref(r), ctypes.byref(c),
                                        ctypes.byref(nnz))
            if st:
                raise_for(st, "cusparseSpMatGetSize", op)
            indices = empty((nnz.value,), idt, device=dev, stream=s)
            made.append(indices)
            data = empty((nnz.value,), x.dtype, device=dev, stream=s)
            made.append(data)
            st = L.cusparseCsrSetPointers(spd.raw, indptr.ptr, indices.ptr or None,
                                          data.ptr or None)
            if st:
                raise_for(st, "cusparseCsrSetPointers", op)
            st = L.cusparseDenseToSparse_convert(h, dnd.raw, spd.raw, alg, buf.ptr)
            if st:
                raise_for(st, "cusparseDenseToSparse_convert", op)
            buf.close()
            made.remove(buf)
    except BaseException:
        for a in made:
            a.close()
        raise
    m = CSR.__new__(CSR)
    m._setup({"indptr": indptr, "indices": indices, "data": data}, (rows, cols), op,
             owned=True)
    return m


# -- descriptors ---------------------------------------------------------------------------
class Descriptor(OwnedHandle):
    """An owned cuSPARSE descriptor (host memory only), freed by ``free(raw)`` at close."""

    __slots__ = ()

    def __init__(self, raw, free):
        self._own(raw, free)


def descriptor(m: SparseMatrix) -> Descriptor:
    """A new cuSPARSE descriptor of ``m`` (its arrays' current addresses)."""
    p = m.pointers()
    e = _INDEX_ENUM[m.index_dtype]
    base = _lib.CUSPARSE_INDEX_BASE_ZERO
    vt = _dtypes.lookup(m.dtype).cuda
    rows, cols = m.shape
    raw = _lib.cusparseSpMatDescr_t()
    L = _lib.get()
    ptrs = [v or None for v in p]
    if m.format == "csr":
        fn = "cusparseCreateCsr"
        st = L.cusparseCreateCsr(ctypes.byref(raw), rows, cols, m.nnz, *ptrs, e, e, base, vt)
    elif m.format == "csc":
        fn = "cusparseCreateCsc"
        st = L.cusparseCreateCsc(ctypes.byref(raw), rows, cols, m.nnz, *ptrs, e, e, base, vt)
    elif m.format == "coo":
        fn = "cusparseCreateCoo"
        st = L.cusparseCreateCoo(ctypes.byref(raw), rows, cols, m.nnz, *ptrs, e, base, vt)
    elif m.format == "bsr":
        fn = "cusparseCreateBsr"
        b = m.block
        st = L.cusparseCreateBsr(ctypes.byref(raw), rows // b, cols // b, m.blocks, b, b,
                                 *ptrs, e, e, base, vt, _lib.CUSPARSE_ORDER_ROW)
    else:
        fn = "cusparseCreateBlockedEll"
        st = L.cusparseCreateBlockedEll(ctypes.byref(raw), rows, cols, m.block, m.ell_cols,
                                        *ptrs, e, base, vt)
    if st:
        raise_for(st, fn, repr(m))
    return Descriptor(raw, L.cusparseDestroySpMat)


def dense_layout(a: DeviceArray, name: str, op: str) -> tuple[int, int]:
    """``(order, ld)`` of a dense 2-D operand: row-major with unit column stride, or
    column-major with unit row stride; refused otherwise."""
    item = a.dtype.itemsize
    rows, cols = a.shape
    s0, s1 = a.strides
    if (s1 == item or cols <= 1) and s0 % item == 0 and s0 // item >= max(cols, 1):
        return _lib.CUSPARSE_ORDER_ROW, max(s0 // item, cols, 1)
    if (s0 == item or rows <= 1) and s1 % item == 0 and s1 // item >= max(rows, 1):
        return _lib.CUSPARSE_ORDER_COL, max(s1 // item, rows, 1)
    raise ValueError(f"{op}: {name} (shape {a.shape}, strides {a.strides}) is neither "
                     "row- nor column-major with a unit inner stride; pass a contiguous copy")


def dense_descriptor(a: DeviceArray, name: str = "x", op: str = "cusparse") -> Descriptor:
    """A new ``cusparseDnVecDescr_t`` (1-D, contiguous) or ``cusparseDnMatDescr_t`` (2-D,
    row- or column-major) of ``a``."""
    L = _lib.get()
    vt = _dtypes.lookup(a.dtype).cuda
    ptr = a.address or None
    if len(a.shape) == 1:
        raw = _lib.cusparseDnVecDescr_t()
        st = L.cusparseCreateDnVec(ctypes.byref(raw), a.shape[0], ptr, vt)
        if st:
            raise_for(st, "cusparseCreateDnVec", op)
        return Descriptor(raw, L.cusparseDestroyDnVec)
    order, ld = dense_layout(a, name, op)
    raw = _lib.cusparseDnMatDescr_t()
    st = L.cusparseCreateDnMat(ctypes.byref(raw), a.shape[0], a.shape[1], ld, ptr, vt, order)
    if st:
        raise_for(st, "cusparseCreateDnMat", op)
    return Descriptor(raw, L.cusparseDestroyDnMat)


def matrix_operand(m, name: str, op: str, device=None) -> SparseMatrix:
    """``m`` checked to be an open :class:`SparseMatrix` (on ``device``)."""
    if not isinstance(m, SparseMatrix):
        raise TypeError(f"{op}: {name} must be a cusparse sparse matrix (CSR, CSC, COO, BSR, "
                        f"BlockedELL; from_scipy/from_torch make one), not {type(m).__name__}")
    m._live()
    if device is not None and m.device is not device:
        check_device(next(iter(m.arrays.values())), device, name, op)
    return m

