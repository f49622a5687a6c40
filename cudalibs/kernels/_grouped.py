"""What the wrappers of ``grouped.ptx`` share (:mod:`cudalibs.kernels.grouped`): the checks of
the operands and offsets, the plan base of the two grouped kernels (the product and its weight
gradient: their candidates, the Hopper tiles of ``grouped90.ptx`` first where they run, and the
launch of either kind) and the hot path that queues either.

The kernels move 16 bytes at a time, so every operand's rows are checked for unit stride, a
row stride of a multiple of 8 elements and 16-byte alignment; sizes are checked against the
kernels' 32-bit arguments; offsets given on the host are checked and copied, device ones are
only described (length, dtype) for the plan -- the kernels clamp them.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import numpy as np

from .. import dtypes as _dtypes
from ..driver.array import empty, to_device
from ..driver.stream import as_stream
from ..runtime import ptxlib
from ..runtime.plan import Plan, scratch
from ._common import F16, array

_BF16 = _dtypes.bfloat16
#: The input types, their kernel-name suffixes.
SUFFIX = {F16: "f16"}
if _BF16 is not None:
    SUFFIX[np.dtype(_BF16)] = "bf16"
INPUTS = tuple(SUFFIX)
OFFSETS = (np.dtype(np.int32), np.dtype(np.int64))
#: Row-tile heights, as the kernels name them.
TILES = {"m128": 128, "m64": 64}
BN = 128
THREADS = 256
#: The kernel's 32-bit limits on rows, K and N, and its 1-D grid.
U31 = 2**31 - 1
ALIGN = 16


class Call(NamedTuple):
    """One call's operands, checked: x and the second operand ``b`` (w of the product, dy of
    the weight gradient), the offsets (a device array, or host values to copy), the output,
    the layout a plan is made for, and the kernel's strides in elements."""

    x: object
    b: object
    offsets: object          # DeviceArray, or None when host_offsets is given
    host_offsets: object     # numpy int64 array, or None
    out: object
    out_dtype: np.dtype
    groups: int
    layout: tuple
    geometry: tuple          # product (kn, ldx, ldw, sw, ldo); gradient (kn, ldx, ldd, so, ldo)


def row_stride(op, name, arr, axis, cols):
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


def aligned(op, name, arr):
    if arr.address % ALIGN and 0 not in arr.shape:
        raise ValueError(f"{op}: {name} starts at an address that is not 16-byte aligned "
                         f"({arr.address:#x}); the kernel loads 16 bytes at a time")


def host_offsets_arg(op, offsets, groups, rows, whose):
    """Offsets given on the host, checked (length, integers, order, within the capacity), as
    int64.  ``whose`` says where the number of groups comes from ("w has")."""
    try:
        vals = np.asarray(offsets)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: offsets must be a device array or a sequence of ints, not "
                        f"{type(offsets).__name__}") from None
    if vals.dtype.kind not in "iu" or vals.ndim != 1:
        raise TypeError(f"{op}: offsets must be a 1-D sequence of ints, got {vals.dtype} of "
                        f"shape {vals.shape}")
    offsets_length(op, len(vals), groups, whose)
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


def offsets_length(op, n, groups, whose):
    if n not in (groups, groups + 1):
        raise ValueError(f"{op}: offsets has {n} entries; {whose} {groups} groups, so "
                         f"{groups + 1} (cumulative offsets) or {groups} (end offsets)")


def is_host(offsets) -> bool:
    return isinstance(offsets, (list, tuple, range, np.ndarray))


def offsets_arg(op, offsets, groups, rows, dev, stream, whose):
    """The offsets of a call, checked: ``(device array or None, host int64 values or None,
    (length, dtype) for the plan)``."""
    if is_host(offsets):
        host = host_offsets_arg(op, offsets, groups, rows, whose)
        return None, host, (len(host), np.dtype(np.int64))
    offsets = array(offsets, op, "offsets", OFFSETS, ndim=1, device=dev, stream=stream)
    offsets_length(op, len(offsets), groups, whose)
    if offsets.address % offsets.dtype.itemsize:
        raise ValueError(f"{op}: offsets is not aligned to its {offsets.dtype} elements")
    return offsets, None, (len(offsets), offsets.dtype)


def out_dtype_arg(op, out_dtype, default):
    """``out_dtype`` as a dtype (``default`` when None)."""
    if out_dtype is None:
        return default
    try:
        return np.dtype(out_dtype)
    except TypeError:
        raise TypeError(f"{op}: out_dtype {out_dtype!r} is not a dtype") from None


def unit_rows(op, name, arr):
    """The row stride, in elements, of a 2-D operand with unit stride along its rows."""
    if arr.strides[1] != arr.dtype.itemsize and arr.shape[1] > 1:
        raise ValueError(f"{op}: {name} must have unit stride in its last dimension (strides "
                         f"{arr.strides})")
    return row_stride(op, name, arr, 0, arr.shape[1])


def stacked(op, name, arr, k, n):
    """The layout of a (G, K, N) operand the kernels read or write 16 bytes at a time:
    ``(kn, row stride, group stride)`` in elements, ``kn`` when N is contiguous, else the
    transposed view of a (G, N, K) array (K contiguous)."""
    item = arr.dtype.itemsize
    if arr.strides[2] == item or n <= 1 or k == 0:
        kn, ld = True, row_stride(op, name, arr, 1, n)
    elif arr.strides[1] == item:
        kn, ld = False, row_stride(op, name, arr, 2, k)
    else:
        raise ValueError(f"{op}: {name} must have unit stride in one of its last two "
                         f"dimensions: (G, K, N) with N contiguous, or the transposed view of a "
                         f"(G, N, K) array; its strides are {arr.strides}")
    groups = arr.shape[0]
    sg = arr.strides[0] if groups > 1 and 0 not in arr.shape else 0
    if sg < 0 or sg % (8 * item):
        raise ValueError(f"{op}: {name}'s group stride ({sg} bytes) must be a non-negative "
                         "multiple of 8 elements (16 bytes)")
    aligned(op, name, arr)
    return kn, ld, sg // item


def limits(op, **sizes):
    """Refuse sizes past the kernels' 32-bit arguments; K and N must be multiples of 8."""
    for what, v in sizes.items():
        if v > U31:
            raise ValueError(f"{op}: {what} = {v} exceeds the kernel's limit {U31}")
    k, n = sizes.get("K", 0), sizes.get("N", 0)
    if k % 8 or n % 8:
        raise ValueError(f"{op}: K ({k}) and N ({n}) must be multiples of 8: the kernel moves "
                         "16 bytes at a time (pad them, or use cudalibs.cublas.gemm_grouped)")


class TiledPlan(Plan):
    """What the grouped kernels' plans share: their candidates are, on compute capability 9.0
    where the problem allows, the Hopper kernels' tiles (``_hopper``, from
    :mod:`~cudalibs.kernels.grouped90`), then the sm_80 kernel's tile heights, the smaller
    first when the larger's grid would not fill the GPU twice (or the subclass says the
    groups are small); they hold no C resource."""

    _tile = None
    _stacked_name = "w"         # the (G, K, N) operand whose layout repr names
    _hopper = None              # the Hopper candidates (grouped90.Hopper / HopperWgrad)

    def _blocks(self, bm: int) -> int:
        raise NotImplementedError

    def _small_groups(self) -> bool:
        return False

    def _check_grid(self, op: str) -> None:
        for bm in TILES.values():
            blocks = self._blocks(bm)
            if blocks > U31:
                raise ValueError(f"{op}: {blocks} blocks of {bm} rows exceed the grid's limit "
                                 f"{U31}")

    def _sm80_heuristics(self) -> list[dict]:
        sms = self._device.multiprocessor_count
        small = self._small_groups() or self._blocks(128) < 2 * sms
        order = ("m64", "m128") if small else ("m128", "m64")
        return [{"name": f"{TILES[t]}x{BN} tiles", "id": t, "workspace": 0} for t in order]

    def _heuristics(self) -> list[dict]:
        # The Hopper tiles first where they run (about twice as fast as the sm_80 kernels on
        # an H100); the sm_80 tiles after them, for autotune to weigh.
        hopper = self._hopper.candidates() if self._hopper is not None else []
        return hopper + self._sm80_heuristics()

    def _select(self, i: int) -> None:
        self._tile = self._candidates[i]["id"]

    def _flags(self, n_offs, offs_dtype) -> int:
        # bit 0: int64 offsets; bit 1: G + 1 cumulative offsets (else G ends)
        return (1 if offs_dtype == np.int64 else 0) | (2 if n_offs == self.groups + 1 else 0)

    def _problem(self) -> str:
        return (f"{self.groups} groups, capacity {self.rows} rows, K={self.k} N={self.n} "
                f"{self.dtype.name}->{self.out_dtype.name} {self._stacked_name} "
                f"{'kn' if self.kn else 'nk'}")

    def _run(self, tile, args, a_ptr, b_ptr, stream) -> None:
        """Queue ``tile``'s kernel with the 13 arguments ``args``: a Hopper tile with the
        tensor maps of its operands at ``a_ptr`` and ``b_ptr`` (the first two arguments), an
        sm_80 tile on its grid of every tile the problem can have."""
        if self._hopper is not None and tile in self._hopper.names:
            if self._hopper.launch(tile, args, a_ptr, b_ptr, stream):
                return
            # A tensor map the driver refused (logged): the sm_80 kernel the heuristics rank
            # first runs the call instead.
            tile = self._sm80_heuristics()[0]["id"]
        ptxlib.launch(self._device, self._names[tile], (self._blocks(TILES[tile]), 1, 1),
                      (THREADS, 1, 1), args, stream)

    def _library_version(self) -> str:
        # The Hopper tiles offered are part of what a stored choice was made among: a choice
        # kept on disk before they were offered (or another set of them) is measured again.
        return "sm_90a " + ",".join(self._hopper.order) if self._hopper is not None else ""

    def _tuning_key(self):
        return {"dtype": self.dtype.name, "out": self.out_dtype.name, "rows": self.rows,
                "k": self.k, "n": self.n, "groups": self.groups, "kn": self.kn,
                "ld": list(self._lds)}

    @contextlib.contextmanager
    def _runner(self, stream):
        # Scratch operands of the plan's layouts (x, then w or dy: layout[:5]; out's strides
        # last).  Each run is two calls: groups of equal size, and skewed ones (shares 1/rank,
        # as a router without balancing makes them).  The tiles rank differently on the two --
        # on an H100 at 64 experts, 4096 -> 14336, 16384 rows, the staged 128x256 tile is 5%
        # slower than the plain one on equal groups and 23% faster on skewed ones -- and the
        # sum picks the tile that is never far off.
        dev = self._device
        xs, xst, _, bs, bst = self.layout[:5]
        x = scratch(xs, self.dtype, dev, stream, xst)
        b = scratch(bs, self.dtype, dev, stream, bst)
        out = scratch(self._out_shape, self.out_dtype, dev, stream, self.layout[-1])
        n_offs, odt = self.offsets_desc
        offs = [to_device((e if n_offs == self.groups + 1 else e[1:]).astype(odt), device=dev,
                          stream=stream) for e in timing_ends(self.rows, self.groups)]
        cands = self._candidates

        def run(i):
            for o in offs:
                self._launch(cands[i]["id"], x.address, b.address, o.address, out.address,
                             stream)

        try:
            yield run
        finally:
            for a in (x, b, out, *offs):
                a.close()


def timing_ends(rows: int, groups: int) -> tuple:
    """The two group layouts a grouped plan is timed on, as ``groups + 1`` int64 boundaries
    from 0 to ``rows``: equal groups, and groups sized in proportion to ``1 / rank``."""
    even = np.linspace(0, rows, groups + 1).astype(np.int64)
    share = 1.0 / np.arange(1, groups + 1)
    counts = np.floor(rows * share / share.sum()).astype(np.int64)
    counts[0] += rows - counts.sum()
    return even, np.concatenate([[0], np.cumsum(counts)])


def release_nothing() -> None:
    """The release of a grouped GEMM plan: it holds no C resource."""


def accumulate_flag(op, accumulate, out) -> bool:
    if not isinstance(accumulate, (bool, np.bool_)):
        raise TypeError(f"{op}: accumulate must be a bool, not {type(accumulate).__name__}")
    if accumulate and out is None:
        raise ValueError(f"{op}: accumulate=True adds the gradient to out, so out must be given")
    return bool(accumulate)


def queue(p: TiledPlan, call: Call, stream, *flags):
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
        out = empty(p._out_shape, p.out_dtype, device=dev, stream=s)
    p._launch(p._tile, call.x.address, call.b.address, offs.address, out.address, s,
              *flags)
    return out
