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
sizes, which only the device knows.  Its candidates are the sm_80 kernel's two row-tile
heights, 128 and 64 (by 128 columns): the smaller wastes less on groups of few rows and gives
the GPU more blocks.  The heuristic puts 64 first when the mean group (capacity / groups) is
under 128 rows or the 128-row grid would not fill the GPU twice.  On a GPU of compute
capability 9.0 the Hopper kernels come first (below): tiles of 128 x 256 (with the staged
epilogue, then without), 128 x 128 (staged) and 64 x 256 (staged), in the order of their
measured speed, then the two sm_80 tiles.  ``autotune()`` times every candidate with the one
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

On compute capability 9.0 the plan's first candidates are the Hopper kernels of
``ptx/grouped90.cu`` (:mod:`cudalibs.kernels.grouped90`; target sm_90a, so they run on 9.0
only), with the same arguments and rules: persistent blocks, one per SM, in which a producer
warp streams the tiles of x and w with TMA through a ring of shared-memory stages and two
consumer warpgroups multiply them with wgmma.  The TMA tensor maps of x and w are encoded on
the host for each call's addresses (cached per plan, bounded) and passed by value, so a
captured launch replays them with whatever offsets the device holds.  On an H100 they ran bf16
expert layers of 8 and 64 experts at 0.93-1.10x the speed of ``torch._grouped_mm``.  Where
they cannot run a problem -- another GPU, ``K`` or ``N`` of 0, groups of ``w`` that overlap,
strides a tensor map cannot encode -- the plan offers only the sm_80 kernel, and a map the
driver refuses at a call (never expected) runs the sm_80 kernel instead of failing.

The weight gradient
-------------------
:func:`grouped_mm_wgrad` (plan :class:`GroupedMMWgrad`, cache key
:data:`GROUPED_MM_WGRAD_KEY`) is the backward with respect to ``w``:
``dw[g] = x[o[g]:o[g+1]]^T @ dy[o[g]:o[g+1]]``, a GEMM whose reduction runs over the rows of
each group, read from the device offsets by the same rules.  Its grid is every (K tile, N
tile) of every group -- ``G * ceil(K / BM) * ceil(N / 128)`` blocks, BM = 128 or 64 (the
candidates, as for the forward) -- each block finding its group's rows itself and looping
over them 32 at a time; x^T is the A operand, read from row-major x with ``ldmatrix.trans``.
An empty group's ``dw[g]`` is zeros, or left as it is with ``accumulate=True`` (which adds
to ``out``, the gradient accumulation of micro-batches).  The output is float32 by default
(the "main gradient" mixed-precision training keeps) or the input type; an ``out`` that is
the transposed view of a (G, N, K) array costs nothing extra: the kernel then computes
``dw[g]^T = dy_g^T @ x_g``, its operands swapped.  There is no split of a group's rows over
several blocks, so one large group among few (a grid of about one wave) leaves part of the
GPU idle for its last wave.  The input gradient needs no kernel of its own: it is
:func:`grouped_mm` with the transposed view of ``w``, and :func:`grouped_mm_backward`
composes both.

On compute capability 9.0 the weight gradient's first candidates are Hopper kernels too
(``ptx/grouped90.cu``, :class:`~cudalibs.kernels.grouped90.HopperWgrad`), with the same
arguments and rules: persistent blocks that stream 64 rows of x and dy at a time with TMA and
multiply them with wgmma, zeroing the rows of a group's last step that lie past its end (so
neither the next groups' rows nor NaN in rows no group covers reach its dw), the groups ranked
by size and their tiles dealt out so that every block ends with about the same work.  With a
16-bit output the plan offers its six tiles (128 x 256, 128 x 128, 64 x 256, each with the
staged epilogue first, then without); with a float32 one the three plain tiles (a staged tile
writes float32 from registers too, with a stage fewer).  On an H100 they ran bf16 expert
layers 1.6-2.6x faster than the sm_80 kernel.  Problems they cannot run -- another GPU, no
rows, K or N of 0, more than 256 groups (their table in shared memory), strides a tensor map
cannot encode -- get the sm_80 tiles only, and a map refused at a call runs the sm_80 kernel.

Offsets that live on the device are not checked (that would need a synchronisation).  The
kernel clamps each one to [0, rows] and makes the ends non-decreasing (a running maximum), so
whatever they hold it never reads or writes outside x, w and out: a group whose end lies below
an earlier end is empty, groups never overlap, and rows no group covers are not written (a new
``out`` holds whatever the allocator left there, as torch's does).  Offsets given on the host
(a list or numpy array) are checked -- length, order, within the capacity -- and copied to the
device on the call's stream, which a graph capture refuses.
"""

from __future__ import annotations

import numpy as np

from ..driver.array import c_strides, to_device, zeros
from ..driver.stream import as_stream
from ..runtime import front as _front
from ..runtime import ptxlib
from ..runtime.cache import KeyKind
from . import grouped90
from ._common import F32, array, check_no_overlap
from ._grouped import (BN, INPUTS, OFFSETS, SUFFIX, TILES, Call, TiledPlan,
                       accumulate_flag, aligned, is_host, limits, offsets_arg, out_dtype_arg,
                       queue, release_nothing, stacked, unit_rows)

__all__ = ["GroupedMM", "grouped_mm", "GROUPED_MM_KEY", "GroupedMMWgrad", "grouped_mm_wgrad",
           "GROUPED_MM_WGRAD_KEY", "grouped_mm_backward"]

#: The keys of :func:`grouped_mm`'s plans in the one plan cache.
GROUPED_MM_KEY = KeyKind("grouped_mm", ("x_shape", "x_strides", "dtype", "w_shape",
                                        "w_strides", "offsets", "out_dtype", "out_strides",
                                        "device"))
#: The keys of :func:`grouped_mm_wgrad`'s plans in the one plan cache.
GROUPED_MM_WGRAD_KEY = KeyKind("grouped_mm_wgrad", ("x_shape", "x_strides", "dtype", "dy_shape",
                                                    "dy_strides", "offsets", "groups",
                                                    "out_dtype", "out_strides", "device"))


def _check(op, x, w, offsets, out, out_dtype, stream) -> Call:
    """Every check of a call, before any C call."""
    x = array(x, op, "x", INPUTS, ndim=2, stream=stream, contiguous=False)
    dev = x.device
    w = array(w, op, "w", INPUTS, ndim=3, device=dev, stream=stream, contiguous=False)
    if w.dtype != x.dtype:
        raise TypeError(f"{op}: x is {x.dtype} but w is {w.dtype}; both must be one type")
    rows, k = x.shape
    groups, k2, n = w.shape
    if groups < 1:
        raise ValueError(f"{op}: w has no groups (shape {w.shape})")
    if k2 != k:
        raise ValueError(f"{op}: inner dimensions differ: x is {x.shape} (K={k}) but w is "
                         f"{w.shape} (K={k2})")
    limits(op, rows=rows, K=k, N=n, groups=groups)
    ldx = unit_rows(op, "x", x)
    kn, ldw, sw = stacked(op, "w", w, k, n)
    aligned(op, "x", x)
    odt = out_dtype_arg(op, out_dtype, x.dtype if out is None else None)
    if out is not None:
        out = array(out, op, "out", None, ndim=2, device=dev, stream=stream, contiguous=False)
        if odt is not None and out.dtype != odt:
            raise TypeError(f"{op}: out has dtype {out.dtype} but out_dtype is {odt}")
        odt = out.dtype
    if odt not in (x.dtype, F32):
        raise TypeError(f"{op}: the output must be {x.dtype} or float32, not {odt}")
    offsets, host, offs_desc = offsets_arg(op, offsets, groups, rows, dev, stream, "w has")
    # A new output is C-contiguous: a plan made without out serves a C-contiguous one too.
    out_strides, ldo = (n * odt.itemsize, odt.itemsize), n
    if out is not None:
        if out.shape != (rows, n):
            raise ValueError(f"{op}: out has shape {out.shape}; the product is {(rows, n)}")
        ldo = unit_rows(op, "out", out)
        aligned(op, "out", out)
        check_no_overlap(op, out, [("x", x), ("w", w)] + (
            [("offsets", offsets)] if offsets is not None else []), same_ok=False)
        out_strides = out.strides
    layout = (x.shape, x.strides, x.dtype, w.shape, w.strides, offs_desc, odt, out_strides)
    return Call(x, w, offsets, host, out, odt, groups, layout, (kn, ldx, ldw, sw, ldo))


def _check_wgrad(op, x, dy, offsets, out, out_dtype, groups, stream) -> Call:
    """Every check of a weight-gradient call, before any C call."""
    x = array(x, op, "x", INPUTS, ndim=2, stream=stream, contiguous=False)
    dev = x.device
    dy = array(dy, op, "dy", INPUTS, ndim=2, device=dev, stream=stream, contiguous=False)
    if dy.dtype != x.dtype:
        raise TypeError(f"{op}: x is {x.dtype} but dy is {dy.dtype}; both must be one type")
    rows, k = x.shape
    n = dy.shape[1]
    if dy.shape[0] != rows:
        raise ValueError(f"{op}: x has {rows} rows but dy has {dy.shape[0]}: a group is the "
                         "same rows of both")
    limits(op, rows=rows, K=k, N=n)
    ldx = unit_rows(op, "x", x)
    ldd = unit_rows(op, "dy", dy)
    aligned(op, "x", x)
    aligned(op, "dy", dy)
    if groups is not None:
        if isinstance(groups, (bool, np.bool_)) or not isinstance(groups, (int, np.integer)):
            raise TypeError(f"{op}: groups must be an int, not {type(groups).__name__}")
        groups = int(groups)
        if groups < 1:
            raise ValueError(f"{op}: groups must be at least 1, not {groups}")
    odt = out_dtype_arg(op, out_dtype, F32 if out is None else None)
    whose = "there are"
    if out is not None:
        out = array(out, op, "out", None, ndim=3, device=dev, stream=stream, contiguous=False)
        if odt is not None and out.dtype != odt:
            raise TypeError(f"{op}: out has dtype {out.dtype} but out_dtype is {odt}")
        odt = out.dtype
        if groups is not None and out.shape[0] != groups:
            raise ValueError(f"{op}: out has {out.shape[0]} groups (shape {out.shape}) but "
                             f"groups is {groups}")
        groups, whose = out.shape[0], "out has"
    elif groups is None:
        # torch's convention: G end offsets.
        if not is_host(offsets):
            offsets = array(offsets, op, "offsets", OFFSETS, ndim=1, device=dev,
                            stream=stream)
        groups = len(offsets)
    if groups < 1:
        raise ValueError(f"{op}: no groups (out of shape {out.shape})" if out is not None
                         else f"{op}: no groups: offsets is empty")
    limits(op, groups=groups)
    if odt not in (x.dtype, F32):
        raise TypeError(f"{op}: the output must be float32 or {x.dtype}, not {odt}")
    offsets, host, offs_desc = offsets_arg(op, offsets, groups, rows, dev, stream, whose)
    if out is None:
        # A new output is C-contiguous: a plan made without out serves a C-contiguous one.
        out_strides = c_strides((groups, k, n), odt.itemsize)
        kn, ldo, so = True, n, (k * n if groups > 1 else 0)
    else:
        if out.shape != (groups, k, n):
            raise ValueError(f"{op}: out has shape {out.shape}; the gradient is "
                             f"{(groups, k, n)}")
        kn, ldo, so = stacked(op, "out", out, k, n)
        check_no_overlap(op, out, [("x", x), ("dy", dy)] + (
            [("offsets", offsets)] if offsets is not None else []), same_ok=False)
        out_strides = out.strides
    layout = (x.shape, x.strides, x.dtype, dy.shape, dy.strides, offs_desc, groups, odt,
              out_strides)
    return Call(x, dy, offsets, host, out, odt, groups, layout, (kn, ldx, ldd, so, ldo))


class GroupedMM(TiledPlan):
    """A prepared grouped GEMM whose group sizes are read from device memory:
    ``out[o[g]:o[g+1]] = x[o[g]:o[g+1]] @ w[g]`` for each group ``g``.

    The plan is made for a problem -- dtypes, the capacity (rows of ``x``), ``K``, ``N``, the
    number of groups, the layouts -- and serves every set of offsets: one captured launch
    replays with any group sizes whose total is at most the capacity.  Threads may share it.

    Its candidates (:attr:`candidates`) are, on a GPU of compute capability 9.0, the Hopper
    kernels' tiles (wgmma and TMA, ``ptx/grouped90.cu``; 0.93-1.10x ``torch._grouped_mm`` on
    an H100), then on every GPU the sm_80 kernel's 128- and 64-row tiles; the heuristics pick
    the first, :meth:`autotune` the fastest.

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
        x, w = call.x, call.b
        self.rows, self.k = x.shape
        self.groups, _, self.n = w.shape
        self.dtype, self.out_dtype = x.dtype, call.out_dtype
        self.kn, self.ldx, self.ldw, self.sw, self.ldo = call.geometry
        self._lds = call.geometry[1:]
        self.offsets_desc = call.layout[5]
        self.flags = self._flags(*self.offsets_desc)
        suffix = SUFFIX[self.dtype]
        out_suffix = suffix if self.out_dtype == self.dtype else "f32"
        layout = "kn" if self.kn else "nk"
        self._names = {t: f"grouped_mm_{suffix}_{layout}_{t}_{out_suffix}" for t in TILES}
        self._ntiles = -(-self.n // BN)
        self._out_shape = (self.rows, self.n)
        self._check_grid("GroupedMM")
        # The Hopper kernels (grouped90.py) where they can run the problem; else None and why.
        self._hopper, self._hopper_why = grouped90.for_plan(
            dev, self.dtype, self.out_dtype, self.rows, self.k, self.n, self.groups, self.kn,
            self.ldx, self.ldw, self.sw)
        self._own(release_nothing)

    def _blocks(self, bm: int) -> int:
        # Every row tile the capacity allows: sum of ceil(rows_g / bm) <= (rows + G (bm-1)) / bm.
        return (self.rows + self.groups * (bm - 1)) // bm * self._ntiles

    # -- the plan protocol --------------------------------------------------------------------
    def _small_groups(self) -> bool:
        return self.rows < 128 * self.groups

    # -- execution ----------------------------------------------------------------------------
    def _launch(self, tile, x_ptr, w_ptr, offs_ptr, out_ptr, stream) -> None:
        if not self.rows or not self.n:
            return
        args = (x_ptr, w_ptr, out_ptr, offs_ptr, self.flags, self.groups, self.rows, self.n,
                self.k, self.ldx, self.ldw, self.sw, self.ldo)
        self._run(tile, args, x_ptr, w_ptr, stream)

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
        return queue(self, call, stream)


class GroupedMMWgrad(TiledPlan):
    """A prepared weight gradient of a grouped GEMM whose group sizes are read from device
    memory: ``out[g] = x[o[g]:o[g+1]]^T @ dy[o[g]:o[g+1]]`` for each group ``g``.

    The backward of :class:`GroupedMM` with respect to ``w``: a "K-grouped" GEMM whose
    reduction runs over the rows of each group.  The plan is made for a problem -- dtypes,
    the capacity (rows of ``x`` and ``dy``), ``K``, ``N``, the number of groups, the layouts
    -- and serves every set of offsets, as :class:`GroupedMM` does.  Threads may share it.

    Its candidates (:attr:`candidates`) are, on a GPU of compute capability 9.0 with at most
    256 groups, the Hopper kernels' tiles (wgmma and TMA, ``ptx/grouped90.cu``; 1.6-2.6x the
    sm_80 kernel on an H100): six for a 16-bit output, the three without a staged epilogue
    for float32; then on every GPU the sm_80 kernel's 128- and 64-row tiles.  The heuristics
    pick the first, :meth:`autotune` the fastest.

    Parameters
    ----------
    x : DeviceArray or CUDA array-like, shape (rows, K)
        Examples of the operands: shapes, strides and dtypes matter.  bfloat16 or float16,
        unit stride along K.
    dy : DeviceArray or CUDA array-like, shape (rows, N)
        The gradient of the forward's output; same dtype, unit stride along N.
    offsets : DeviceArray (int32 or int64) or sequence of int
        ``G + 1`` cumulative row offsets or ``G`` end offsets, as for :class:`GroupedMM`.
        Only its length and dtype matter to the plan.
    out : DeviceArray, shape (G, K, N), optional
        Example of the output: N contiguous, or the transposed view of a (G, N, K) array (K
        contiguous, as a Linear layer keeps its weight).  Default a new C-contiguous one of
        ``out_dtype``.
    groups : int, optional
        The number of groups ``G``.  Default: ``out``'s first dimension when ``out`` is
        given, else ``len(offsets)`` -- torch's ``G`` end offsets; pass ``groups`` (or
        ``out``) to give ``G + 1`` cumulative offsets without an ``out``.
    out_dtype : dtype, optional
        float32 (the default) or the input type.

    Raises
    ------
    TypeError
        Wrong dtypes (inputs not bfloat16/float16 or not one type, offsets not int32/int64,
        an output other than float32 or the input type), host arrays, ``groups`` not an int.
    ValueError
        Shapes that do not fit (rows of x and dy, offsets' length against the groups, out's
        shape), layouts the kernel cannot read (strides, 16-byte alignment, K or N not a
        multiple of 8), operands on different devices, out overlapping an input.
    CudaLibsError
        The GPU is older than compute capability 8.0.

    Notes
    -----
    Why float32 by default: a weight gradient sums over every token of its group and is
    usually accumulated over micro-batches (``accumulate=True``) into the float32 "main
    gradient" that mixed-precision training keeps beside the bfloat16 weights; rounding each
    partial sum to bfloat16 would lose the low bits of every contribution.  Ask for the input
    type (``out_dtype=x.dtype``) to get what ``torch._grouped_mm``'s backward returns.
    """

    kind = "grouped_mm_wgrad"
    library = "cudalibs"
    _stacked_name = "out"

    def __init__(self, x, dy, offsets, out=None, *, groups=None, out_dtype=None):
        call = _check_wgrad("GroupedMMWgrad", x, dy, offsets, out, out_dtype, groups, None)
        dev = call.x.device
        ptxlib.check_arch(dev, "grouped", "GroupedMMWgrad")
        self._init_plan(dev)
        self.layout = call.layout
        self.rows, self.k = call.x.shape
        self.n = call.b.shape[1]
        self.groups = call.groups
        self.dtype, self.out_dtype = call.x.dtype, call.out_dtype
        self.kn, self.ldx, self.ldd, self.so, self.ldo = call.geometry
        self._lds = call.geometry[1:]
        self.offsets_desc = call.layout[5]
        self.flags = self._flags(*self.offsets_desc)
        suffix = SUFFIX[self.dtype]
        out_suffix = suffix if self.out_dtype == self.dtype else "f32"
        self._names = {t: f"grouped_wgrad_{suffix}_{t}_{out_suffix}" for t in TILES}
        # The kernel writes each group's (M, N') product with N' contiguous: (K, N) for an
        # out with N contiguous; for the transposed view of a (G, N, K) array it computes
        # dw[g]^T = dy_g^T @ x_g, the same kernel with the operands swapped.
        self._mn = (self.k, self.n) if self.kn else (self.n, self.k)
        self._ab_lds = (self.ldx, self.ldd) if self.kn else (self.ldd, self.ldx)
        self._ntiles = -(-self._mn[1] // BN)
        self._out_shape = (self.groups, self.k, self.n)
        self._check_grid("GroupedMMWgrad")
        # The Hopper kernels (grouped90.py) where they can run the problem; else None and why.
        self._hopper, self._hopper_why = grouped90.wgrad_for_plan(
            dev, self.dtype, self.out_dtype, self.rows, *self._mn, self.groups, *self._ab_lds)
        self._own(release_nothing)

    def _blocks(self, bm: int) -> int:
        # Every tile of every group's product, whatever its rows: an empty group's are zeros.
        return self.groups * -(-self._mn[0] // bm) * self._ntiles

    # -- execution ----------------------------------------------------------------------------
    def _launch(self, tile, x_ptr, dy_ptr, offs_ptr, out_ptr, stream, accumulate=False) -> None:
        if not self.k or not self.n or (accumulate and not self.rows):
            return
        a, b = (x_ptr, dy_ptr) if self.kn else (dy_ptr, x_ptr)
        args = (a, b, out_ptr, offs_ptr, self.flags | (4 if accumulate else 0), self.groups,
                self.rows, *self._mn, *self._ab_lds, self.so, self.ldo)
        self._run(tile, args, a, b, stream)

    def execute(self, x, dy, offsets, out=None, *, accumulate=False, stream=None):
        """``out[g] = x[o[g]:o[g+1]]^T @ dy[o[g]:o[g+1]]`` (or ``+=`` with ``accumulate``)
        for each group, with the offsets read when the kernel runs.

        Parameters
        ----------
        x, dy, offsets, out
            Of the shapes, strides and dtypes the plan was made for (offsets: its length and
            dtype, on the device or, as when the plan was made, on the host).
        accumulate : bool, default False
            Add the gradient to what ``out`` holds (gradient accumulation), rounding once;
            an empty group leaves its ``out[g]`` as it is.  Needs ``out``.
        stream : Stream, optional
            The current stream by default.

        Returns
        -------
        DeviceArray
            ``out`` (a new array when not given); without ``accumulate`` an empty group's
            ``out[g]`` is zeros.
        """
        self._live()
        op = "GroupedMMWgrad.execute"
        call = _check_wgrad(op, x, dy, offsets, out, self.out_dtype, self.groups, stream)
        if call.layout != self.layout:
            raise ValueError(f"{op}: the operands' layout {call.layout} is not the plan's "
                             f"{self.layout}")
        return queue(self, call, stream, accumulate_flag(op, accumulate, call.out))


def _mm_plan(call: Call) -> GroupedMM:
    """The cached plan of a checked :func:`grouped_mm` call."""
    key = (GROUPED_MM_KEY, *call.layout, call.x.device)
    return _front.lookup(key) or _front.insert(
        key, GroupedMM(call.x, call.b, call.offsets if call.offsets is not None
                       else call.host_offsets, call.out, out_dtype=call.out_dtype))


def _wgrad_plan(call: Call) -> GroupedMMWgrad:
    """The cached plan of a checked :func:`grouped_mm_wgrad` call."""
    key = (GROUPED_MM_WGRAD_KEY, *call.layout, call.x.device)
    return _front.lookup(key) or _front.insert(
        key, GroupedMMWgrad(call.x, call.b, call.offsets if call.offsets is not None
                            else call.host_offsets, call.out, groups=call.groups,
                            out_dtype=call.out_dtype))


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

    See Also
    --------
    grouped_mm_wgrad : the gradient with respect to ``w``.
    grouped_mm_backward : both gradients.
    """
    call = _check("grouped_mm", x, w, offsets, out, out_dtype, stream)
    return queue(_mm_plan(call), call, stream)


def grouped_mm_wgrad(x, dy, offsets, out=None, *, groups=None, out_dtype=None,
                     accumulate=False, stream=None):
    """Weight gradient of :func:`grouped_mm`, the group sizes read from device memory:
    ``out[g] = x[o[g]:o[g+1]]^T @ dy[o[g]:o[g+1]]`` for each group (expert) ``g``.

    What ``torch._grouped_mm``'s backward computes for ``w`` (the "K-grouped" GEMM), in one
    kernel launch (bfloat16/float16 tensor cores, float32 accumulation) that reads the
    offsets when it runs, so a captured CUDA graph replays it with any group sizes whose total
    fits the rows of ``x``.  The plan of the problem (:class:`GroupedMMWgrad`) is found in
    the one plan cache.

    Parameters
    ----------
    x : DeviceArray or CUDA array-like, shape (rows, K)
        The forward's input: bfloat16 or float16, the rows of each group contiguous and in
        group order.  Unit stride along K, rows 16-byte aligned; K a multiple of 8.
    dy : DeviceArray or CUDA array-like, shape (rows, N)
        The gradient of the forward's output, same dtype and rows; unit stride along N, rows
        16-byte aligned; N a multiple of 8.
    offsets : DeviceArray (int32 or int64) or sequence of int
        ``G + 1`` cumulative row offsets, or ``G`` end offsets (torch's ``offs``), with the
        rules of :func:`grouped_mm`: on the device clamped to ``[0, rows]`` and made
        non-decreasing by the kernel, on the host checked and copied on ``stream``.
    out : DeviceArray, shape (G, K, N), optional
        N contiguous, or the transposed view of a (G, N, K) array (K contiguous); 16-byte
        aligned rows.  Every element is written (an empty group's are zeros) unless
        ``accumulate``.  Default: a new C-contiguous array.
    groups : int, optional
        ``G``.  Default: ``out.shape[0]`` when ``out`` is given, else ``len(offsets)``, read as
        torch's ``G`` end offsets: give ``groups`` (or ``out``) with ``G + 1`` cumulative
        offsets.
    out_dtype : dtype, optional
        float32 (the default: the main gradient of mixed-precision training, see
        :class:`GroupedMMWgrad`) or the input type.
    accumulate : bool, default False
        ``out[g] += ...`` (gradient accumulation), rounded once; an empty group leaves
        ``out[g]`` as it is.  Needs ``out``.
    stream : Stream, optional
        The current stream by default.

    Returns
    -------
    DeviceArray
        ``out``, shape (G, K, N).

    Raises
    ------
    TypeError, ValueError, CudaLibsError
        As for :class:`GroupedMMWgrad`; ``accumulate`` without ``out`` or not a bool; host
        offsets of the wrong length, decreasing, or ending beyond the rows of ``x``.
    """
    op = "grouped_mm_wgrad"
    call = _check_wgrad(op, x, dy, offsets, out, out_dtype, groups, stream)
    add = accumulate_flag(op, accumulate, call.out)
    return queue(_wgrad_plan(call), call, stream, add)


def grouped_mm_backward(x, w, dy, offsets, *, dw_dtype=None, stream=None):
    """Both gradients of ``y = grouped_mm(x, w, offsets)``: ``(dx, dw)``.

    ``dx[o[g]:o[g+1]] = dy[o[g]:o[g+1]] @ w[g]^T`` (:func:`grouped_mm` with the transposed
    view of ``w``) and ``dw = grouped_mm_wgrad(x, dy, offsets)``, two launches on ``stream``
    after a memset of ``dx``: rows of ``x`` that no group covers get a zero gradient.

    Parameters
    ----------
    x : DeviceArray or CUDA array-like, shape (rows, K)
    w : DeviceArray or CUDA array-like, shape (G, K, N)
        Either layout :func:`grouped_mm` takes.
    dy : DeviceArray or CUDA array-like, shape (rows, N)
    offsets : DeviceArray (int32 or int64) or sequence of int
        ``G + 1`` or ``G`` offsets, as for :func:`grouped_mm` (host ones copied once).
    dw_dtype : dtype, optional
        float32 (the default, see :func:`grouped_mm_wgrad`) or the input type.
    stream : Stream, optional
        The current stream by default.

    Returns
    -------
    tuple of DeviceArray
        ``dx`` (rows, K) of the input type and ``dw`` (G, K, N), C-contiguous.

    Raises
    ------
    TypeError, ValueError, CudaLibsError
        As for :func:`grouped_mm` and :func:`grouped_mm_wgrad`, before either launch.
    """
    op = "grouped_mm_backward"
    x = array(x, op, "x", INPUTS, ndim=2, stream=stream, contiguous=False)
    w = array(w, op, "w", INPUTS, ndim=3, device=x.device, stream=stream, contiguous=False)
    if w.shape[0] < 1:
        raise ValueError(f"{op}: w has no groups (shape {w.shape})")
    wcall = _check_wgrad(op, x, dy, offsets, None, dw_dtype, w.shape[0], stream)
    dy = wcall.b
    k, n = x.shape[1], dy.shape[1]
    if w.shape[1:] != (k, n):
        raise ValueError(f"{op}: w has shape {w.shape}; x {x.shape} and dy {dy.shape} "
                         f"need {(w.shape[0], k, n)}")
    # dx = dy @ w[g]^T: the transposed view of w is (G, N, K) in the other layout.
    dcall = _check(op, dy, w.transpose(0, 2, 1), offsets if wcall.host_offsets is None
                   else wcall.host_offsets, None, None, stream)
    s = as_stream(stream, x.device)
    if wcall.host_offsets is not None:
        offs = to_device(wcall.host_offsets, device=x.device, stream=s)
        wcall = wcall._replace(offsets=offs, host_offsets=None)
        dcall = dcall._replace(offsets=offs, host_offsets=None)
    dx = zeros((x.shape[0], k), x.dtype, device=x.device, stream=s)
    dcall = dcall._replace(out=dx)
    queue(_mm_plan(dcall), dcall, s)
    dw = queue(_wgrad_plan(wcall), wcall, s, False)
    return dx, dw
