"""Wrapper of ``grouped90.ptx``: the Hopper kernels of the device-offsets grouped GEMM and of
its weight gradient.

The product is :class:`~cudalibs.kernels.GroupedMM`'s, with its arguments and rules
(``out[o[g]:o[g+1]] = x[o[g]:o[g+1]] @ w[g]``, the offsets read from device memory when the
kernel runs, clamped and made non-decreasing), computed with the instructions of compute
capability 9.0 that an sm_80 file cannot use: persistent, warp-specialised blocks of 384
threads, one per SM, in which one warp loads the K steps of each output tile with TMA (tensor
maps over the whole of ``x`` and of ``w``) into a ring of shared-memory stages, and two
warpgroups multiply them with wgmma (both operands read from shared memory, float32
accumulators in registers); the "s" tiles write 16-bit outputs through shared memory with bulk
copies that overlap the next tile's products.  On an H100 they ran bfloat16 expert layers
(8 and 64 experts) at 0.93-1.10x the speed of ``torch._grouped_mm``, about twice the sm_80
kernels'.

The weight gradient is :class:`~cudalibs.kernels.GroupedMMWgrad`'s, ``dw[g] = x_g^T @ dy_g``
(a reduction over each group's rows, which only the device knows), built the same way: the
producer streams 64 rows of both operands at a time (boxes of 64 x 64 of ``x`` and ``dy``,
read "MN-major", the wgmma transpose bits set), the consumers zero the rows of a group's last
step that belong to the next groups before multiplying (so nothing of another group, nor NaN
in rows no group covers, can leak in), and each block first ranks the groups by size in
shared memory (at most :data:`WGRAD_GROUPS_MAX`) and takes the output tiles in a "snake" over
the rounds, so that one large group among small ones does not leave the last wave part-empty.
On an H100 it ran bfloat16 expert layers at 1.6-2.6x the speed of the sm_80 kernel (572
against 276 TFLOP/s for 8 experts, K = 4096, N = 1408, 16384 tokens).

This module has no public function: on a GPU of compute capability 9.0 (the file's target is
sm_90a, whose code runs on 9.0 only: not on older GPUs, nor on newer ones)
:class:`~cudalibs.kernels.GroupedMM` and :class:`~cudalibs.kernels.GroupedMMWgrad` offer
these tiles as their first candidates, and :class:`Hopper` / :class:`HopperWgrad` hold what a
plan needs to launch them -- the kernels' names, shared memory and grids, and the tensor maps
of its operands.

Tensor maps hold addresses, so they are made for each call's operands: encoded on the host
(``cuTensorMapEncodeTiled``, no GPU work) and kept per plan in a small bounded cache by
address -- a map is a function of the address and of the plan's layout alone, so a hit is
right even for memory freed and allocated again.  They are passed by value in the launch's
parameters, so a captured launch keeps them and replays with whatever offsets the device
holds.  Problems the kernels cannot run (an empty dimension; strides TMA cannot encode;
groups of ``w`` that overlap; for the weight gradient more groups than its table holds) get
no Hopper candidate; a map the driver refuses at a call (it should never, the rules being
checked when the plan is made) runs the plan's sm_80 kernel instead of failing.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from ..driver.tensormap import TMA_DTYPES, check_tiled, encode_tiled
from ..errors import CudaLibsError
from ..runtime import log as _log
from ..runtime import ptxlib

__all__: list[str] = []

_logger = _log.get("kernels")

#: tile -> (BM, BN, stages, staged 16-bit epilogue): the .cu's GROUPED90_TILES.
TILES = {
    "m128n256": (128, 256, 4, False), "m128n256s": (128, 256, 3, True),
    "m128n128": (128, 128, 6, False), "m128n128s": (128, 128, 5, True),
    "m64n256": (64, 256, 5, False), "m64n256s": (64, 256, 4, True),
}
#: The tiles a plan offers, best first: the order of their measured speed on an H100 (bf16
#: expert layers, 8 and 64 experts; the 128 x 256 staged tile led on most shapes).
ORDER = ("m128n256s", "m128n256", "m128n128s", "m64n256s")
#: tile -> (BM, BN, stages, staged 16-bit epilogue) of the weight gradient: the .cu's
#: GROUPED90_WGRAD_TILES, the product's shapes and stages (they fit beside its group table).
WGRAD_TILES = dict(TILES)
#: The weight-gradient tiles a plan with a 16-bit output offers, best first: the 128 x 256
#: staged tile was the fastest on every layer measured on an H100 (8 and 64 experts, K and N
#: of 1408 to 14336); the others follow in the product's order, each plain tile after its
#: staged one (an ``accumulate=True`` call runs a staged tile's kernel with the plain
#: epilogue and a stage fewer, so there the plain tile may be the faster).
WGRAD_ORDER = ("m128n256s", "m128n256", "m128n128s", "m128n128", "m64n256s", "m64n256")
#: ... and with a float32 output, whose "s" tiles are their plain tiles with a stage fewer
#: (the staged epilogue writes 16-bit outputs only): the plain tiles alone.
WGRAD_ORDER_F32 = ("m128n256", "m128n128", "m64n256")
#: The most groups the weight-gradient kernels rank in shared memory (the .cu's G9W_GMAX); a
#: problem with more runs the sm_80 kernel.
WGRAD_GROUPS_MAX = 256
#: Threads per block: a producer warpgroup and two consumer warpgroups.
THREADS = 384
#: The compute capability the kernels run on, and the only one.
ARCH = (9, 0)
#: The K depth of a stage: the inner extent of every box (64 16-bit elements = 128 bytes, the
#: swizzle span).  The weight gradient's boxes are 64 x 64: 64 columns by 64 rows of a group.
BK = 64
#: Tensor maps kept per plan (its operands' maps together; the oldest is dropped first).
MAPS_MAX = 64
#: The weight-gradient kernels' output tiles are counted in 32 bits (the .cu's ``total``).
_TILES_LIMIT = 2**31


def _staging(bm: int, bn: int, bulk: bool, out_itemsize: int) -> int:
    """Bytes of the two staging tiles of a staged epilogue (16-bit outputs only): 64 rows of
    a consumer warpgroup's columns, padded 16 bytes a row."""
    wn = bn // (2 // (bm // 64))
    return 2 * 64 * (wn * out_itemsize + 16) if bulk and out_itemsize == 2 else 0


def smem_bytes(tile: str, out_itemsize: int) -> int:
    """Dynamic shared memory a launch of ``tile`` gives (the .cu's ``G9Smem::TOTAL``): 1024
    bytes of alignment slack, the stages, their barriers and tile records rounded up to 128,
    and for the staged epilogue with 16-bit outputs two staging tiles of 64 padded rows."""
    bm, bn, stages, bulk = TILES[tile]
    ring = stages * (bm + bn) * 128
    meta = (32 * stages + 127) // 128 * 128
    return 1024 + ring + meta + _staging(bm, bn, bulk, out_itemsize)


def wgrad_smem_bytes(tile: str, out_itemsize: int) -> int:
    """Dynamic shared memory a launch of the weight gradient's ``tile`` gives (the .cu's
    ``G9WSmem::TOTAL``): 1024 bytes of alignment slack, the stages, their barriers rounded up
    to 128, the staging tiles of a staged epilogue with 16-bit outputs, and the groups' table
    (24 bytes a group: the ranked entries and the rows) for :data:`WGRAD_GROUPS_MAX`."""
    bm, bn, stages, bulk = WGRAD_TILES[tile]
    ring = stages * (bm + bn) * 128
    meta = (16 * stages + 127) // 128 * 128
    return 1024 + ring + meta + _staging(bm, bn, bulk, out_itemsize) + 24 * WGRAD_GROUPS_MAX


def _suffix(dtype: np.dtype) -> str:
    return "bf16" if dtype.name == "bfloat16" else "f16"


class _Kernels:
    """What the Hopper candidates of the product and of its weight gradient share: kernel
    names, shared memory and grids by tile, the candidates, the bounded tensor-map cache and
    the launch that falls back when the driver refuses a map.  Holds no C resource; threads
    may share it (the map cache takes a lock only to insert)."""

    __slots__ = ("_device", "dtype", "order", "names", "smem", "_tiles", "_grids", "_maps",
                 "_lock")
    #: tile -> (BM, BN, stages, staged): the kernels' shapes
    _shapes: dict = TILES
    _what = ""

    def __init__(self, device, dtype, order):
        self._device = device
        self.dtype = np.dtype(dtype)
        #: the tiles offered, best first
        self.order = order
        #: tile -> kernel name
        self.names = {}
        #: tile -> dynamic shared memory of a launch
        self.smem = {}
        # tile -> output tiles of a launch (its grid, capped by the SM count at the first one)
        self._tiles = {}
        self._grids = None
        self._maps = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        tile, name = next(iter(self.names.items()))
        return (f"<{self._what} {name.replace(tile, '*')}: tiles {', '.join(self.order)}; "
                f"{len(self._maps)} tensor maps cached>")

    # -- the maps -------------------------------------------------------------------------------
    def maps(self, tile: str, a_ptr: int, b_ptr: int) -> tuple[bytes, bytes]:
        raise NotImplementedError

    def _map(self, key, address: int, layout: tuple, box: tuple) -> bytes:
        """The map of ``address`` (``layout``: dims and byte strides; ``box``) from the cache
        under ``key``, else encoded and kept (a hit takes no lock)."""
        m = self._maps.get(key)
        if m is None:
            m = encode_tiled(self.dtype, address, *layout, box, device=self._device)
            with self._lock:
                self._maps[key] = m
                while len(self._maps) > MAPS_MAX:
                    del self._maps[next(iter(self._maps))]
        return m

    # -- the plan's side ------------------------------------------------------------------------
    def grid(self, tile: str) -> tuple[int, int, int]:
        """``tile``'s grid: one block per SM, or one per output tile where there are fewer
        (the SM count is read at the first launch, not when the plan is made)."""
        grids = self._grids
        if grids is None:
            sms = int(self._device.multiprocessor_count)
            grids = self._grids = {t: (max(1, min(sms, v)), 1, 1)
                                   for t, v in self._tiles.items()}
        return grids[tile]

    def candidates(self) -> list[dict]:
        """The plan's Hopper candidates, in :attr:`order`."""
        out = []
        for t in self.order:
            bm, bn, _, staged = self._shapes[t]
            epi = ", staged epilogue" if staged else ""
            out.append({"name": f"{bm}x{bn} wgmma tiles{epi} (sm_90a)", "id": t,
                        "workspace": 0})
        return out

    def launch(self, tile, args, a_ptr, b_ptr, stream) -> bool:
        """Queue ``tile``'s kernel with the 13 arguments of the sm_80 kernel and the maps of
        its two operands (at ``a_ptr`` and ``b_ptr``); False (nothing queued) when the driver
        refused a map."""
        try:
            ta, tb = self.maps(tile, a_ptr, b_ptr)
        except (CudaLibsError, ValueError) as exc:
            _log.once(_logger, logging.WARNING, ("grouped90 map", self.names[tile], str(exc)),
                      "grouped GEMM: the tensor maps of %s were refused (%s); running the "
                      "sm_80 kernel instead", self.names[tile], exc)
            return False
        ptxlib.launch(self._device, self.names[tile], self.grid(tile), (THREADS, 1, 1),
                      (*args, ta, tb), stream, self.smem[tile])
        return True


class Hopper(_Kernels):
    """The Hopper candidates of one :class:`~cudalibs.kernels.GroupedMM` plan: kernel names,
    launch geometry and the tensor maps of its operands.

    Made by :func:`for_plan` (None where the kernels cannot run the plan's problem); holds no
    C resource.  Threads may share it: the map cache takes a lock only to insert.
    """

    __slots__ = ("kn", "_x", "_w", "_boxes")
    _what = "Hopper grouped GEMM"

    def __init__(self, device, dtype, out_dtype, rows, k, n, groups, kn, ldx, ldw, sw):
        super().__init__(device, dtype, ORDER)
        self.kn = bool(kn)
        item = self.dtype.itemsize
        suffix = _suffix(self.dtype)
        out_suffix = suffix if np.dtype(out_dtype) == self.dtype else "f32"
        layout = "kn" if self.kn else "nk"
        self.names = {t: f"grouped90_{suffix}_{layout}_{t}_{out_suffix}" for t in ORDER}
        self.smem = {t: smem_bytes(t, np.dtype(out_dtype).itemsize) for t in ORDER}
        # Output tiles no offsets can exceed: sum of ceil(rows_g / BM) <= (rows + G (BM - 1))
        # / BM row tiles, by the column tiles.
        for t in ORDER:
            bm, bn = TILES[t][:2]
            self._tiles[t] = (rows + groups * (bm - 1)) // bm * -(-n // bn)
        # x: dims {K, rows}; w: {N, K, G} ("kn") or {K, N, G} ("nk"), innermost first, byte
        # strides of the outer dimensions.  A zero group stride (one w for every group) is a
        # map of one group (the kernel then reads group 0's coordinates for all).
        self._x = ((k, rows), (ldx * item,))
        extent = ldw * (k if self.kn else n)
        gstride = (sw if sw else extent) * item
        self._w = ((n, k, groups if sw else 1) if self.kn else (k, n, groups if sw else 1),
                   (ldw * item, gstride))
        self._boxes = {t: ((BK, TILES[t][0]), (BK, BK, 1) if self.kn else (BK, TILES[t][1], 1))
                       for t in ORDER}

    def boxes(self, tile: str) -> tuple[tuple, tuple]:
        """The boxes of ``tile``'s maps: x ``(64, BM)``; w ``(64, 64, 1)`` ("kn": BN / 64
        copies per stage) or ``(64, BN, 1)`` ("nk")."""
        return self._boxes[tile]

    def map_args(self, tile: str, x_ptr: int, w_ptr: int) -> tuple[tuple, tuple]:
        """``(x map, w map)`` arguments of :func:`cudalibs.driver.tensormap.encode_tiled` for
        ``tile``: ``(address, dims, strides, box)`` each."""
        bx, bw = self.boxes(tile)
        return (x_ptr, *self._x, bx), (w_ptr, *self._w, bw)

    def check(self) -> None:
        """Check every tile's maps against the driver's rules (at a stand-in address: the
        operands' own are checked for 16-byte alignment by every call).

        Raises
        ------
        ValueError
            A rule broken, as :func:`~cudalibs.driver.tensormap.check_tiled` says.
        """
        for t in ORDER:
            for args in self.map_args(t, 1 << 20, 1 << 20):
                check_tiled(self.dtype, *args)

    def maps(self, tile: str, x_ptr: int, w_ptr: int) -> tuple[bytes, bytes]:
        """The tensor maps of ``x`` and ``w`` at these addresses for ``tile`` (encoded once,
        then from the cache: keyed by box and address, x's boxes of two dimensions, w's of
        three; a hit takes no lock)."""
        bx, bw = self.boxes(tile)
        return (self._map((bx, x_ptr), x_ptr, self._x, bx),
                self._map((bw, w_ptr), w_ptr, self._w, bw))


class HopperWgrad(_Kernels):
    """The Hopper candidates of one :class:`~cudalibs.kernels.GroupedMMWgrad` plan: kernel
    names, launch geometry and the tensor maps of its two operands.

    The kernels compute ``out[g] = a_g^T @ b_g`` with the plan's operands as
    ``GroupedMMWgrad`` passes them to the sm_80 kernel: ``a = x``, ``b = dy`` for an output
    with N contiguous, swapped for the transposed view of a (G, N, K) array; ``m`` and ``n``
    are the columns of ``a`` and ``b``.  Every tile reads boxes of 64 x 64, so one map of
    each operand serves all.  Made by :func:`wgrad_for_plan`; holds no C resource; threads
    may share it.
    """

    __slots__ = ("_a", "_b")
    _shapes = WGRAD_TILES
    _what = "Hopper grouped GEMM weight gradient"

    def __init__(self, device, dtype, out_dtype, rows, m, n, groups, lda, ldb):
        odt = np.dtype(out_dtype)
        super().__init__(device, dtype, WGRAD_ORDER if odt.itemsize == 2 else WGRAD_ORDER_F32)
        item = self.dtype.itemsize
        suffix = _suffix(self.dtype)
        out_suffix = suffix if odt == self.dtype else "f32"
        # Every tile has its name, shared memory and output tiles, those the plan does not
        # offer (a float32 plan's staged ones) included: shipped kernels, launchable by tile.
        self.names = {t: f"grouped90_wgrad_{suffix}_{t}_{out_suffix}" for t in WGRAD_TILES}
        self.smem = {t: wgrad_smem_bytes(t, odt.itemsize) for t in WGRAD_TILES}
        self._tiles = {t: wgrad_tiles(t, m, n, groups) for t in WGRAD_TILES}
        # a: dims {M, rows}; b: {N, rows}, innermost first, the byte stride of their rows.
        self._a = ((m, rows), (lda * item,))
        self._b = ((n, rows), (ldb * item,))

    def map_args(self, a_ptr: int, b_ptr: int) -> tuple[tuple, tuple]:
        """``(a map, b map)`` arguments of :func:`cudalibs.driver.tensormap.encode_tiled`:
        ``(address, dims, strides, box)`` each, the box 64 x 64 for every tile."""
        box = (BK, BK)
        return (a_ptr, *self._a, box), (b_ptr, *self._b, box)

    def check(self) -> None:
        """Check both maps against the driver's rules (at a stand-in address: the operands'
        own are checked for 16-byte alignment by every call).

        Raises
        ------
        ValueError
            A rule broken, as :func:`~cudalibs.driver.tensormap.check_tiled` says.
        """
        for args in self.map_args(1 << 20, 1 << 20):
            check_tiled(self.dtype, *args)

    def maps(self, tile: str, a_ptr: int, b_ptr: int) -> tuple[bytes, bytes]:
        """The tensor maps of ``a`` and ``b`` at these addresses, the same for every tile
        (encoded once, then from the cache: keyed by operand and address; a hit takes no
        lock)."""
        box = (BK, BK)
        return (self._map(("a", a_ptr), a_ptr, self._a, box),
                self._map(("b", b_ptr), b_ptr, self._b, box))


def wgrad_tiles(tile: str, m: int, n: int, groups: int) -> int:
    """The output tiles of a weight-gradient launch of ``tile``: every tile of every group's
    ``m x n`` product, whatever its rows (an empty group's are zeros)."""
    bm, bn = WGRAD_TILES[tile][:2]
    return groups * -(-m // bm) * -(-n // bn)


def _unsupported(device, dtype) -> str | None:
    """Why no Hopper kernel runs on ``device`` with ``dtype`` inputs, or None."""
    cc = tuple(device.compute_capability)
    if cc != ARCH:
        return f"the GPU has compute capability {cc[0]}.{cc[1]}; the kernels run on 9.0 only"
    if np.dtype(dtype) not in TMA_DTYPES:
        return f"{np.dtype(dtype)} inputs"
    return None


def _offer(why, make):
    """``(candidates, None)``, or ``(None, why not)``: ``why`` a refusal already found, else a
    tensor-map rule that ``make()``'s maps break."""
    if why is not None:
        return None, why
    h = make()
    try:
        h.check()
    except ValueError as exc:
        return None, str(exc)
    return h, None


def refusal(device, dtype, rows, k, n, kn, ldw, sw) -> str | None:
    """Why the Hopper kernels cannot run a problem, or None when they can: a GPU of another
    compute capability than 9.0, an element type TMA does not take here, an empty dimension
    (a tensor map has none; the sm_80 kernel writes the zeros of K = 0), or groups of ``w``
    that overlap (a group stride below one group's extent)."""
    why = _unsupported(device, dtype)
    if why is not None:
        return why
    if not (rows and k and n):
        return f"an empty dimension (rows {rows}, K {k}, N {n})"
    extent = ldw * (k if kn else n)
    if sw and sw < extent:
        return (f"the groups of w overlap (a group stride of {sw} elements, below the "
                f"{extent} of one group)")
    return None


def for_plan(device, dtype, out_dtype, rows, k, n, groups, kn, ldx, ldw, sw):
    """``(Hopper or None, why not)`` for a GroupedMM problem: the Hopper candidates, or None
    and the reason they are not offered (``refusal``, or a tensor-map rule broken)."""
    return _offer(refusal(device, dtype, rows, k, n, kn, ldw, sw),
                  lambda: Hopper(device, dtype, out_dtype, rows, k, n, groups, kn, ldx, ldw,
                                 sw))


def wgrad_refusal(device, dtype, rows, m, n, groups) -> str | None:
    """Why the Hopper weight-gradient kernels cannot run a problem (``m x n`` per group, the
    columns of the operands ``a`` and ``b``), or None when they can: another GPU or element
    type (as :func:`refusal`), an empty dimension (the sm_80 kernel writes the zeros of a
    problem without rows), more groups than the kernels' table holds, or more output tiles
    than their 32-bit count."""
    why = _unsupported(device, dtype)
    if why is not None:
        return why
    if not (rows and m and n):
        return f"an empty dimension (rows {rows}, a product of {m} x {n} per group)"
    if groups > WGRAD_GROUPS_MAX:
        return (f"{groups} groups; the kernels rank at most {WGRAD_GROUPS_MAX} in shared "
                "memory")
    most = max(wgrad_tiles(t, m, n, groups) for t in WGRAD_TILES)
    if most >= _TILES_LIMIT:
        return f"{most} output tiles, beyond the kernels' 32-bit count"
    return None


def wgrad_for_plan(device, dtype, out_dtype, rows, m, n, groups, lda, ldb):
    """``(HopperWgrad or None, why not)`` for a GroupedMMWgrad problem, its operands ``a``
    (rows, m) and ``b`` (rows, n) as the plan passes them (row strides ``lda``, ``ldb``
    elements): the Hopper candidates, or None and the reason they are not offered
    (:func:`wgrad_refusal`, or a tensor-map rule broken)."""
    return _offer(wgrad_refusal(device, dtype, rows, m, n, groups),
                  lambda: HopperWgrad(device, dtype, out_dtype, rows, m, n, groups, lda, ldb))
