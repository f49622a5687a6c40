"""Wrapper of ``grouped.ptx``: the grouped GEMM of a mixture-of-experts layer, with the group
sizes read from device memory.

``out[o[g]:o[g+1]] = x[o[g]:o[g+1]] @ w[g]`` for every group (expert) ``g`` -- the "2-D x 3-D"
form of ``torch._grouped_mm`` -- in one launch that reads the row offsets ``o`` from device
memory when it runs.  A MoE layer counts its tokens per expert on the GPU; with this kernel a
whole step can be captured as one CUDA graph and replayed with any distribution of tokens
whose total fits the capacity (the rows of ``x``), with no copy to the host and no
synchronisation.  cuBLAS's grouped call (:func:`cudalibs.cublas.gemm_grouped`) takes its sizes
as host arrays, so a captured call replays the sizes it was captured with.

The plan
--------
:class:`GroupedMM` is a plan of the project's protocol (construct -> :meth:`~GroupedMM.plan` /
:meth:`~GroupedMM.autotune` -> :meth:`~GroupedMM.execute` -> ``close``) over one problem: the
dtypes, the capacity, ``K``, ``N``, the number of groups and the layouts -- never the group
sizes, which only the device knows.  Its candidates are the kernel's two row-tile heights,
128 and 64 (by 128 columns): the smaller wastes less on groups of few rows and gives the GPU
more blocks.  The heuristic puts 64 first when the mean group (capacity / groups) is under 128
rows or the 128-row grid would not fill the GPU twice; ``autotune()`` times both with the one
timer on scratch inputs whose groups are of equal size.  :func:`grouped_mm` finds its plan in
the one plan cache (:data:`GROUPED_MM_KEY`).

Why a plan here and not a backend of :class:`cudalibs.cublas.GroupedGemm`: the kernel belongs
to the shipped kernel library (one wrapper module per PTX file), its operands are one stacked
weight tensor and an offsets array where cuBLAS takes lists of matrices with host sizes, and
libraries do not import each other; both plans share the protocol, the front and the cache.

The kernel (``ptx/grouped.cu``) runs mma.sync m16n8k16 tensor-core products (fp32
accumulation) on tiles that cp.async streams through a three- or four-stage shared-memory
ring; the grid covers every row tile the capacity allows ((rows + G (BM - 1)) / BM of them)
times the column tiles, each block finds its group by a prefix sum of tiles per group over the
offsets, and blocks past the last group's tiles exit at once.  It needs compute capability 8.0
or newer (the kernel loader refuses older GPUs), bfloat16 or float16 inputs, K and N multiples
of 8, and x, w and out 16-byte aligned with row strides of a multiple of 8 elements (it moves
16 bytes at a time).  On an H100 it computes bf16 expert layers at 235-285 TFLOP/s
(``benchmarks/grouped.py``): about cuBLAS's grouped call, 0.4-0.65x ``torch._grouped_mm``,
whose CUTLASS kernels use Hopper's wgmma, which an sm_80 file cannot.

Offsets that live on the device are not checked (that would need a synchronisation).  The
kernel clamps each one to [0, rows] and makes the ends non-decreasing (a running maximum), so
whatever they hold it never reads or writes outside x, w and out: a group whose end lies below
an earlier end is empty, groups never overlap, and rows no group covers are not written (a new
``out`` holds whatever the allocator left there, as torch's does).  Offsets given on the host
(a list or numpy array) are checked -- length, order, within the capacity -- and copied to the
device on the call's stream, which a graph capture refuses.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import numpy as np

from .. import dtypes as _dtypes
from ..driver.array import empty, to_device
from ..driver.stream import as_stream
from ..runtime import front as _front
from ..runtime import ptxlib
from ..runtime.cache import KeyKind
from ..runtime.plan import Plan, scratch
from ._common import F16, F32, array, check_no_overlap

__all__ = ["GroupedMM", "grouped_mm", "GROUPED_MM_KEY"]

_BF16 = _dtypes.bfloat16
#: The input types, their kernel-name suffixes.
_SUFFIX = {F16: "f16"}
if _BF16 is not None:
    _SUFFIX[np.dtype(_BF16)] = "bf16"
_INPUTS = tuple(_SUFFIX)
_OFFSETS = (np.dtype(np.int32), np.dtype(np.int64))
#: Row-tile heights, as the kernels name them.
_TILES = {"m128": 128, "m64": 64}
_BN = 128
_THREADS = 256
#: The kernel's 32-bit limits on rows, K and N, and its 1-D grid.
_U31 = 2**31 - 1
_ALIGN = 16

#: The keys of :func:`grouped_mm`'s plans in the one plan cache.
GROUPED_MM_KEY = KeyKind("grouped_mm", ("x_shape", "x_strides", "dtype", "w_shape",
                                        "w_strides", "offsets", "out_dtype", "out_strides",
                                        "device"))


class _Call(NamedTuple):
    """One call's operands, checked: the arrays, the offsets (a device array, or host values
    to copy), the layout a plan is made for, and the kernel's strides in elements."""

    x: object
    w: object
    offsets: object          # DeviceArray, or None when host_offsets is given
    host_offsets: object     # numpy int64 array, or None
    out: object
    out_dtype: np.dtype
    layout: tuple
    geometry: tuple          # (kn, ldx, ldw, sw, ldo)


def _row_stride(op, name, arr, axis, cols):
    """The stride, in elements, between the rows (along ``axis``) of ``cols`` contiguous
    elements of ``arr``; checked for the kernel's 16-byte moves."""
    item = arr.dtype.itemsize
    st = arr.strides[axis]
    if arr.shape[axis] <= 1 or cols == 0:
        return cols
    if st % item or st // item < cols or (st // item) % 8:
        raise ValueError(f"{op}: {name} has a row stride of {st} bytes; the kernel needs one of "
                         f"at least a row ({cols} elements) and a multiple of 8 elements "
                         "(16 bytes)")
    return st // item


def _aligned(op, name, arr):
    if arr.address % _ALIGN and 0 not in arr.shape:
        raise ValueError(f"{op}: {name} starts at an address that is not 16-byte aligned "
                         f"({arr.address:#x}); the kernel loads 16 bytes at a time")


def _host_offsets(op, offsets, groups, rows):
    """Offsets given on the host, checked (length, integers, order, within the capacity), as
    int64."""
    try:
        vals = np.asarray(offsets)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: offsets must be a device array or a sequence of ints, not "
                        f"{type(offsets).__name__}") from None
    if vals.dtype.kind not in "iu" or vals.ndim != 1:
        raise TypeError(f"{op}: offsets must be a 1-D sequence of ints, got {vals.dtype} of "
                        f"shape {vals.shape}")
    if len(vals) not in (groups, groups + 1):
        raise ValueError(f"{op}: offsets has {len(vals)} entries; w has {groups} groups, so "
                         f"{groups + 1} (cumulative offsets) or {groups} (end offsets)")
    full = vals.astype(np.int64)
    if len(vals) == groups:
        full = np.concatenate([np.zeros(1, np.int64), full])
    if full[0] < 0:
        raise ValueError(f"{op}: offsets start at {full[0]}, below row 0")
    down = np.flatnonzero(np.diff(full) < 0)
    if down.size:
        i = int(down[0])
        raise ValueError(f"{op}: offsets decrease ({full[i]} then {full[i + 1]}); group sizes "
                         "cannot be negative")
    if full[-1] > rows:
        raise ValueError(f"{op}: the groups end at row {full[-1]}, beyond the capacity of x "
                         f"({rows} rows)")
    return np.ascontiguousarray(vals.astype(np.int64))


def _check(op, x, w, offsets, out, out_dtype, stream) -> _Call:
    """Every check of a call, before any C call."""
    x = array(x, op, "x", _INPUTS, ndim=2, stream=stream, contiguous=False)
    dev = x.device
    w = array(w, op, "w", _INPUTS, ndim=3, device=dev, stream=stream, contiguous=False)
    if w.dtype != x.dtype:
        raise TypeError(f"{op}: x is {x.dtype} but w is {w.dtype}; both must be one type")
    rows, k = x.shape
    groups, k2, n = w.shape
    if groups < 1:
        raise ValueError(f"{op}: w has no groups (shape {w.shape})")
    if k2 != k:
        raise ValueError(f"{op}: inner dimensions differ: x is {x.shape} (K={k}) but w is "
                         f"{w.shape} (K={k2})")
    for what, v in (("rows", rows), ("K", k), ("N", n), ("groups", groups)):
        if v > _U31:
            raise ValueError(f"{op}: {what} = {v} exceeds the kernel's limit {_U31}")
    if k % 8 or n % 8:
        raise ValueError(f"{op}: K ({k}) and N ({n}) must be multiples of 8: the kernel moves "
                         "16 bytes at a time (pad them, or use cudalibs.cublas.gemm_grouped)")
    item = x.dtype.itemsize
    if x.strides[1] != item and k > 1:
        raise ValueError(f"{op}: x must have unit stride in its last dimension (strides "
                         f"{x.strides})")
    ldx = _row_stride(op, "x", x, 0, k)
    if w.strides[2] == item or n <= 1 or k == 0:
        kn, ldw = True, _row_stride(op, "w", w, 1, n)
    elif w.strides[1] == item:
        kn, ldw = False, _row_stride(op, "w", w, 2, k)
    else:
        raise ValueError(f"{op}: w must have unit stride in one of its last two dimensions: "
                         f"(G, K, N) with N contiguous, or the transposed view of a (G, N, K) "
                         f"array; its strides are {w.strides}")
    sw = w.strides[0] if groups > 1 and 0 not in w.shape else 0
    if sw < 0 or sw % (8 * item):
        raise ValueError(f"{op}: w's group stride ({sw} bytes) must be a non-negative multiple "
                         "of 8 elements (16 bytes)")
    _aligned(op, "x", x)
    _aligned(op, "w", w)
    if out_dtype is None:
        odt = x.dtype if out is None else None
    else:
        try:
            odt = np.dtype(out_dtype)
        except TypeError:
            raise TypeError(f"{op}: out_dtype {out_dtype!r} is not a dtype") from None
    if out is not None:
        out = array(out, op, "out", None, ndim=2, device=dev, stream=stream, contiguous=False)
        if odt is not None and out.dtype != odt:
            raise TypeError(f"{op}: out has dtype {out.dtype} but out_dtype is {odt}")
        odt = out.dtype
    if odt not in (x.dtype, F32):
        raise TypeError(f"{op}: the output must be {x.dtype} or float32, not {odt}")
    host = None
    if isinstance(offsets, (list, tuple, range, np.ndarray)):
        host = _host_offsets(op, offsets, groups, rows)
        offs_desc = (len(host), np.dtype(np.int64))
        offsets = None
    else:
        offsets = array(offsets, op, "offsets", _OFFSETS, ndim=1, device=dev, stream=stream)
        if len(offsets) not in (groups, groups + 1):
            raise ValueError(f"{op}: offsets has {len(offsets)} entries; w has {groups} groups, "
                             f"so {groups + 1} (cumulative offsets) or {groups} (end offsets)")
        if offsets.address % offsets.dtype.itemsize:
            raise ValueError(f"{op}: offsets is not aligned to its {offsets.dtype} elements")
        offs_desc = (len(offsets), offsets.dtype)
    # A new output is C-contiguous: a plan made without out serves a C-contiguous one too.
    out_strides, ldo = (n * odt.itemsize, odt.itemsize), n
    if out is not None:
        if out.shape != (rows, n):
            raise ValueError(f"{op}: out has shape {out.shape}; the product is {(rows, n)}")
        if out.strides[1] != odt.itemsize and n > 1:
            raise ValueError(f"{op}: out must have unit stride in its last dimension (strides "
                             f"{out.strides})")
        ldo = _row_stride(op, "out", out, 0, n)
        _aligned(op, "out", out)
        check_no_overlap(op, out, [("x", x), ("w", w)] + (
            [("offsets", offsets)] if offsets is not None else []), same_ok=False)
        out_strides = out.strides
    layout = (x.shape, x.strides, x.dtype, w.shape, w.strides, offs_desc, odt, out_strides)
    return _Call(x, w, offsets, host, out, odt, layout, (kn, ldx, ldw, sw // item, ldo))


class GroupedMM(Plan):
    """A prepared grouped GEMM whose group sizes are read from device memory:
    ``out[o[g]:o[g+1]] = x[o[g]:o[g+1]] @ w[g]`` for each group ``g``.

    The plan is made for a problem -- dtypes, the capacity (rows of ``x``), ``K``, ``N``, the
    number of groups, the layouts -- and serves every set of offsets: one captured launch
    replays with any group sizes whose total is at most the capacity.  Threads may share it.

    Parameters
    ----------
    x : DeviceArray or CUDA array-like, shape (rows, K)
        Examples of the operands: shapes, strides and dtypes matter.  bfloat16 or float16,
        unit stride along K.
    w : DeviceArray or CUDA array-like, shape (G, K, N)
        Same dtype; N contiguous, or the transposed view of a (G, N, K) array (K contiguous,
        as a Linear layer keeps its weight).
    offsets : DeviceArray (int32 or int64) or sequence of int
        ``G + 1`` cumulative row offsets (group ``g`` is rows ``offsets[g]`` to
        ``offsets[g+1]``), or ``G`` end offsets with group 0 starting at row 0 (torch's
        ``offs``).  Only its length and dtype matter to the plan.
    out : DeviceArray, shape (rows, N), optional
        Example of the output; default a new C-contiguous one of ``out_dtype``.
    out_dtype : dtype, optional
        The input type (default) or float32.

    Raises
    ------
    TypeError
        Wrong dtypes (inputs not bfloat16/float16 or not one type, offsets not int32/int64,
        an output other than the input type or float32), host arrays.
    ValueError
        Shapes that do not fit (K of x and w, offsets' length against the groups, out's
        shape), layouts the kernel cannot read (strides, 16-byte alignment, K or N not a
        multiple of 8), operands on different devices, out overlapping an input.
    CudaLibsError
        The GPU is older than compute capability 8.0.
    """

    kind = "grouped_mm"
    library = "cudalibs"

    def __init__(self, x, w, offsets, out=None, *, out_dtype=None):
        call = _check("GroupedMM", x, w, offsets, out, out_dtype, None)
        dev = call.x.device
        ptxlib.check_arch(dev, "grouped", "GroupedMM")
        self._init_plan(dev)
        self.layout = call.layout
        x, w = call.x, call.w
        self.rows, self.k = x.shape
        self.groups, _, self.n = w.shape
        self.dtype, self.out_dtype = x.dtype, call.out_dtype
        self.kn, self.ldx, self.ldw, self.sw, self.ldo = call.geometry
        n_offs, offs_dtype = call.layout[5]
        self.offsets_desc = (n_offs, offs_dtype)
        self.flags = (1 if offs_dtype == np.int64 else 0) | (2 if n_offs == self.groups + 1
                                                               else 0)
        suffix = _SUFFIX[self.dtype]
        out_suffix = suffix if self.out_dtype == self.dtype else "f32"
        layout = "kn" if self.kn else "nk"
        self._names = {t: f"grouped_mm_{suffix}_{layout}_{t}_{out_suffix}" for t in _TILES}
        self._ntiles = -(-self.n // _BN)
        self._tile = None
        for t, bm in _TILES.items():
            blocks = self._blocks(bm)
            if blocks > _U31:
                raise ValueError(f"GroupedMM: {blocks} blocks of {bm} rows exceed the grid's "
                                 f"limit {_U31}")
        self._own(_nothing)

    def _blocks(self, bm: int) -> int:
        # Every row tile the capacity allows: sum of ceil(rows_g / bm) <= (rows + G (bm-1)) / bm.
        return (self.rows + self.groups * (bm - 1)) // bm * self._ntiles

    # -- the plan protocol --------------------------------------------------------------------
    def _heuristics(self) -> list[dict]:
        sms = self._device.multiprocessor_count
        small = self.rows < 128 * self.groups or self._blocks(128) < 2 * sms
        order = ("m64", "m128") if small else ("m128", "m64")
        return [{"name": f"{_TILES[t]}x{_BN} tiles", "id": t, "workspace": 0} for t in order]

    def _select(self, i: int) -> None:
        self._tile = self._candidates[i]["id"]

    def _problem(self) -> str:
        return (f"{self.groups} groups, capacity {self.rows} rows, K={self.k} N={self.n} "
                f"{self.dtype.name}->{self.out_dtype.name} w {'kn' if self.kn else 'nk'}")

    def _tuning_key(self):
        return {"dtype": self.dtype.name, "out": self.out_dtype.name, "rows": self.rows,
                "k": self.k, "n": self.n, "groups": self.groups, "kn": self.kn,
                "ld": [self.ldx, self.ldw, self.sw, self.ldo]}

    @contextlib.contextmanager
    def _runner(self, stream):
        dev = self._device
        xs, xst, _, ws, wst = self.layout[:5]
        x = scratch(xs, self.dtype, dev, stream, xst)
        w = scratch(ws, self.dtype, dev, stream, wst)
        out = scratch((self.rows, self.n), self.out_dtype, dev, stream, self.layout[7])
        n_offs, odt = self.offsets_desc
        even = np.linspace(0, self.rows, self.groups + 1).astype(np.int64)
        offs = to_device((even if n_offs == self.groups + 1 else even[1:]).astype(odt),
                         device=dev, stream=stream)
        cands = self._candidates

        def run(i):
            self._launch(cands[i]["id"], x.address, w.address, offs.address, out.address,
                         stream)

        try:
            yield run
        finally:
            for a in (x, w, out, offs):
                a.close()

    # -- execution ----------------------------------------------------------------------------
    def _launch(self, tile, x_ptr, w_ptr, offs_ptr, out_ptr, stream) -> None:
        if not self.rows or not self.n:
            return
        ptxlib.launch(self._device, self._names[tile], (self._blocks(_TILES[tile]), 1, 1),
                      (_THREADS, 1, 1),
                      (x_ptr, w_ptr, out_ptr, offs_ptr, self.flags, self.groups, self.rows,
                       self.n, self.k, self.ldx, self.ldw, self.sw, self.ldo), stream)

    def execute(self, x, w, offsets, out=None, *, stream=None):
        """``out[o[g]:o[g+1]] = x[o[g]:o[g+1]] @ w[g]`` for each group, with the offsets read
        when the kernel runs.

        Parameters
        ----------
        x, w, offsets, out
            Of the shapes, strides and dtypes the plan was made for (offsets: its length and
            dtype, on the device or, as when the plan was made, on the host).
        stream : Stream, optional
            The current stream by default.

        Returns
        -------
        DeviceArray
            ``out`` (a new array when not given); rows no group covers are not written.
        """
        self._live()
        call = _check("GroupedMM.execute", x, w, offsets, out, self.out_dtype, stream)
        if call.layout != self.layout:
            raise ValueError(f"GroupedMM.execute: the operands' layout {call.layout} is not the "
                             f"plan's {self.layout}")
        return _run(self, call, stream)


def _nothing() -> None:
    """The release of a grouped GEMM plan: it holds no C resource."""


def _run(p: GroupedMM, call: _Call, stream):
    """Queue plan ``p`` on a checked call (the hot path)."""
    dev = p.device
    s = as_stream(stream, dev)
    if p._tile is None:
        p.plan()
    offs = call.offsets
    if offs is None:
        offs = to_device(call.host_offsets, device=dev, stream=s)
    out = call.out
    if out is None:
        out = empty((p.rows, p.n), p.out_dtype, device=dev, stream=s)
    p._launch(p._tile, call.x.address, call.w.address, offs.address, out.address, s)
    return out


def grouped_mm(x, w, offsets, out=None, *, out_dtype=None, stream=None):
    """Grouped GEMM of a mixture-of-experts layer, the group sizes read from device memory:
    ``out[o[g]:o[g+1]] = x[o[g]:o[g+1]] @ w[g]`` for each group (expert) ``g``.

    The semantics of ``torch._grouped_mm(x, w, offs)`` for 2-D ``x`` and 3-D ``w``, in one
    kernel launch (bfloat16/float16 tensor cores, float32 accumulation) that reads the offsets
    when it runs, so a captured CUDA graph replays it with any group sizes whose total fits
    the rows of ``x``.  The plan of the problem (:class:`GroupedMM`) is found in the one plan
    cache.

    Parameters
    ----------
    x : DeviceArray or CUDA array-like, shape (rows, K)
        bfloat16 or float16, the rows of each group contiguous and in group order; the rows
        are the capacity.  Unit stride along K, rows 16-byte aligned.
    w : DeviceArray or CUDA array-like, shape (G, K, N)
        Same dtype.  N contiguous, or the transposed view of a (G, N, K) array (K
        contiguous); 16-byte aligned rows.  K and N multiples of 8.
    offsets : DeviceArray (int32 or int64) or sequence of int
        ``G + 1`` cumulative row offsets, or ``G`` end offsets (group 0 starts at row 0, as
        torch's ``offs``).  On the device they are clamped to ``[0, rows]`` and made
        non-decreasing by the kernel, never checked (see the module notes); on the host they
        are checked and copied to the device on ``stream`` (which a graph capture refuses).
    out : DeviceArray, shape (rows, N), optional
        Written where a group covers a row, left as it is elsewhere.  Default: a new array.
    out_dtype : dtype, optional
        The input type (the default) or float32.
    stream : Stream, optional
        The current stream by default.

    Returns
    -------
    DeviceArray
        ``out``.

    Raises
    ------
    TypeError, ValueError, CudaLibsError
        As for :class:`GroupedMM`; host offsets of the wrong length, decreasing, or ending
        beyond the rows of ``x``.
    """
    call = _check("grouped_mm", x, w, offsets, out, out_dtype, stream)
    key = (GROUPED_MM_KEY, *call.layout, call.x.device)
    p = _front.lookup(key) or _front.insert(
        key, GroupedMM(call.x, call.w, call.offsets if call.offsets is not None
                       else call.host_offsets, call.out, out_dtype=call.out_dtype))
    return _run(p, call, stream)

