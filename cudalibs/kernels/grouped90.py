"""Wrapper of ``grouped90.ptx``: the Hopper kernels of the device-offsets grouped GEMM.

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

This module has no public function: :class:`~cudalibs.kernels.GroupedMM` offers its tiles as
its first candidates on a GPU of compute capability 9.0 (the file's target is sm_90a, whose
code runs on 9.0 only: not on older GPUs, nor on newer ones), and :class:`Hopper` holds what a
plan needs to launch them -- the kernels' names, shared memory and grids, and the tensor maps
of its operands.

Tensor maps hold addresses, so they are made for each call's ``x`` and ``w``: encoded on the
host (``cuTensorMapEncodeTiled``, no GPU work) and kept per plan in a small bounded cache by
address -- a map is a function of the address and of the plan's layout alone, so a hit is
right even for memory freed and allocated again.  They are passed by value in the launch's
parameters, so a captured launch keeps them and replays with whatever offsets the device
holds.  Problems the maps cannot describe (an empty dimension; strides TMA cannot encode;
groups of ``w`` that overlap) get no Hopper candidate; a map the driver refuses at a call (it
should never, the rules being checked when the plan is made) runs the plan's sm_80 kernel
instead of failing.
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
#: Threads per block: a producer warpgroup and two consumer warpgroups.
THREADS = 384
#: The compute capability the kernels run on, and the only one.
ARCH = (9, 0)
#: The K depth of a stage: the inner extent of every box (64 16-bit elements = 128 bytes, the
#: swizzle span).
BK = 64
#: Tensor maps kept per plan (x and w maps together; the oldest is dropped first).
MAPS_MAX = 64


def smem_bytes(tile: str, out_itemsize: int) -> int:
    """Dynamic shared memory a launch of ``tile`` gives (the .cu's ``G9Smem::TOTAL``): 1024
    bytes of alignment slack, the stages, their barriers and tile records rounded up to 128,
    and for the staged epilogue with 16-bit outputs two staging tiles of 64 padded rows."""
    bm, bn, stages, bulk = TILES[tile]
    wn = bn // (2 // (bm // 64))
    epi = 64 * (wn * out_itemsize + 16) if bulk and out_itemsize == 2 else 0
    ring = stages * (bm + bn) * 128
    meta = (32 * stages + 127) // 128 * 128
    return 1024 + ring + meta + 2 * epi


class Hopper:
    """The Hopper candidates of one :class:`~cudalibs.kernels.GroupedMM` plan: kernel names,
    launch geometry and the tensor maps of its operands.

    Made by :func:`for_plan` (None where the kernels cannot run the plan's problem); holds no
    C resource.  Threads may share it: the map cache takes a lock only to insert.
    """

    __slots__ = ("_device", "dtype", "kn", "names", "smem", "_tiles", "_grids", "_x", "_w",
                 "_boxes", "_maps", "_lock")

    def __init__(self, device, dtype, out_dtype, rows, k, n, groups, kn, ldx, ldw, sw):
        self._device = device
        self.dtype = np.dtype(dtype)
        self.kn = bool(kn)
        item = self.dtype.itemsize
        suffix = "bf16" if self.dtype.name == "bfloat16" else "f16"
        out_suffix = suffix if np.dtype(out_dtype) == self.dtype else "f32"
        layout = "kn" if self.kn else "nk"
        #: tile -> kernel name
        self.names = {t: f"grouped90_{suffix}_{layout}_{t}_{out_suffix}" for t in ORDER}
        #: tile -> dynamic shared memory of a launch
        self.smem = {t: smem_bytes(t, np.dtype(out_dtype).itemsize) for t in ORDER}
        # Output tiles no offsets can exceed: sum of ceil(rows_g / BM) <= (rows + G (BM - 1))
        # / BM row tiles, by the column tiles.
        self._tiles = {}
        for t in ORDER:
            bm, bn = TILES[t][:2]
            self._tiles[t] = (rows + groups * (bm - 1)) // bm * -(-n // bn)
        self._grids = None
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
        self._maps = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        some = next(iter(self.names.values())).replace(ORDER[0], "*")
        return (f"<Hopper grouped GEMM {some}: tiles {', '.join(ORDER)}; "
                f"{len(self._maps)} tensor maps cached>")

    # -- the maps -------------------------------------------------------------------------------
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

    def _encode(self, key, args) -> bytes:
        m = encode_tiled(self.dtype, *args, device=self._device)
        with self._lock:
            self._maps[key] = m
            while len(self._maps) > MAPS_MAX:
                del self._maps[next(iter(self._maps))]
        return m

    def maps(self, tile: str, x_ptr: int, w_ptr: int) -> tuple[bytes, bytes]:
        """The tensor maps of ``x`` and ``w`` at these addresses for ``tile`` (encoded once,
        then from the cache: keyed by box and address, x's boxes of two dimensions, w's of
        three; a hit takes no lock)."""
        bx, bw = self.boxes(tile)
        tx = self._maps.get((bx, x_ptr))
        if tx is None:
            tx = self._encode((bx, x_ptr), (x_ptr, *self._x, bx))
        tw = self._maps.get((bw, w_ptr))
        if tw is None:
            tw = self._encode((bw, w_ptr), (w_ptr, *self._w, bw))
        return tx, tw

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
        """The plan's Hopper candidates, in :data:`ORDER`."""
        out = []
        for t in ORDER:
            bm, bn, _, staged = TILES[t]
            epi = ", staged epilogue" if staged else ""
            out.append({"name": f"{bm}x{bn} wgmma tiles{epi} (sm_90a)", "id": t,
                        "workspace": 0})
        return out

    def launch(self, tile, args, x_ptr, w_ptr, stream) -> bool:
        """Queue ``tile``'s kernel with the 13 arguments of the sm_80 kernels and the two
        maps; False (nothing queued) when the driver refused a map."""
        try:
            tx, tw = self.maps(tile, x_ptr, w_ptr)
        except (CudaLibsError, ValueError) as exc:
            _log.once(_logger, logging.WARNING, ("grouped90 map", self.names[tile], str(exc)),
                      "grouped GEMM: the tensor maps of %s were refused (%s); running the "
                      "sm_80 kernel instead", self.names[tile], exc)
            return False
        ptxlib.launch(self._device, self.names[tile], self.grid(tile), (THREADS, 1, 1),
                      (*args, tx, tw), stream, self.smem[tile])
        return True


def refusal(device, dtype, rows, k, n, kn, ldw, sw) -> str | None:
    """Why the Hopper kernels cannot run a problem, or None when they can: a GPU of another
    compute capability than 9.0, an element type TMA does not take here, an empty dimension
    (a tensor map has none; the sm_80 kernel writes the zeros of K = 0), or groups of ``w``
    that overlap (a group stride below one group's extent)."""
    cc = tuple(device.compute_capability)
    if cc != ARCH:
        return f"the GPU has compute capability {cc[0]}.{cc[1]}; the kernels run on 9.0 only"
    if np.dtype(dtype) not in TMA_DTYPES:
        return f"{np.dtype(dtype)} inputs"
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
    why = refusal(device, dtype, rows, k, n, kn, ldw, sw)
    if why is not None:
        return None, why
    h = Hopper(device, dtype, out_dtype, rows, k, n, groups, kn, ldx, ldw, sw)
    try:
        h.check()
    except ValueError as exc:
        return None, str(exc)
    return h, None
