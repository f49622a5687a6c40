"""Launch geometry of ``norm.ptx`` and its forward launch, below the libraries that use them.

:mod:`cudalibs.kernels.norm` wraps the norm kernels for users; cuDNN's norm plans offer the
forward kernel as a candidate (it runs float32 weights on 16-bit data at the speed of
same-dtype weights, which cuDNN 9.19 serves only with its generic engine).  Both launch it
through :func:`launch_norm_forward` with arguments they have checked.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from . import ptxlib

__all__ = ["ALIGN", "Geometry", "geometry", "threads_per_row", "vector_aligned",
           "launch_norm_forward"]

#: Bytes of one vector load; the aligned kernels need every array at such a boundary.
ALIGN = 16
#: Vectors per thread the forward kernel holds (its ``_v4``), and the largest row group.
FWD_NV, FWD_MAX_TPR = 4, 1024
#: The backward's vectors per thread, in order of preference, and its largest row group (its
#: sums of dweight/dbias live in registers: 512 threads keep them there without spilling).
BWD_NV, BWD_MAX_TPR = (2, 4), 512
#: Threads a forward block fills with rows when a row takes fewer; the backward's.
FWD_BLOCK, BWD_BLOCK = 128, 256
#: Block of the any-D kernels (one row each).
ANY_THREADS = 256
#: The largest grid x dimension.
_GRID_X_MAX = 2**31 - 1
_F32 = np.dtype(np.float32)


class Geometry(NamedTuple):
    """A launch shape: the kernel (``"v2"``, ``"v4"`` or ``"any"``), the threads of a row,
    of a block, and the block's dynamic shared memory in bytes."""

    kind: str
    tpr: int
    threads: int
    shared: int


def threads_per_row(n: int) -> int:
    """Threads for a row of ``n`` thread-loads: a power of two up to 32 (the row's sums stay
    inside a warp), else a multiple of 32."""
    if n <= 32:
        return 1 << max(0, n - 1).bit_length()
    return -(-n // 32) * 32


@functools.lru_cache(maxsize=1024)
def geometry(direction: str, rms: bool, itemsize: int, d: int, aligned: bool) -> Geometry:
    """The launch shape of a row of ``d`` elements of ``itemsize`` bytes (``direction``
    "fwd" or "bwd"); ``aligned``: D is a whole number of 16-byte vectors and every array is
    16-byte aligned."""
    if aligned:
        nvec = d // (ALIGN // itemsize)
        if direction == "fwd":
            tpr = threads_per_row(-(-nvec // FWD_NV))
            if tpr <= FWD_MAX_TPR:
                return Geometry(f"v{FWD_NV}", tpr, tpr * max(1, FWD_BLOCK // tpr), 0)
        else:
            for nv in BWD_NV:
                tpr = threads_per_row(-(-nvec // nv))
                if tpr <= BWD_MAX_TPR:
                    rows = max(1, BWD_BLOCK // tpr)
                    # Several rows of a block add their sums in shared memory (<= 16 KiB).
                    shared = 0 if rows == 1 else (1 if rms else 2) * d * 4
                    return Geometry(f"v{nv}", tpr, tpr * rows, shared)
    return Geometry("any", ANY_THREADS, ANY_THREADS, 0)


def vector_aligned(d: int, itemsize: int, *addresses: int) -> bool:
    """Whether the vector kernels can take rows of ``d`` elements at these addresses: D whole
    16-byte vectors, every (nonzero) address at a 16-byte boundary."""
    return d % (ALIGN // itemsize) == 0 and all(a % ALIGN == 0 for a in addresses)


def launch_norm_forward(dev, rms: bool, dtype, x: int, residual: int, y: int,
                        residual_out: int, weight: int, weight_dtype, bias: int, bias_dtype,
                        mean: int, rstd: int, rows: int, d: int, eps: float, stream) -> None:
    """Queue the layer-norm (RMS norm with ``rms``) forward kernel of ``norm.ptx``.

    Addresses are ints (0: absent); every argument has been checked by the caller: ``x``,
    ``y`` (and ``residual``, ``residual_out``) C-contiguous ``(rows, d)`` of ``dtype``, the
    weight and bias ``(d,)`` of float32 or ``dtype``, the statistics ``rows`` float32 each,
    ``eps`` a finite float32 ``>= 0``.
    """
    if not rows:
        return
    dt = np.dtype(dtype)
    g = geometry("fwd", rms, dt.itemsize, d,
                 vector_aligned(d, dt.itemsize, x, residual, y, residual_out, weight, bias))
    grid = (min(-(-rows // (g.threads // g.tpr)), _GRID_X_MAX), 1, 1)
    flags = int(np.dtype(weight_dtype) == _F32) | (
        int(bias != 0 and np.dtype(bias_dtype) == _F32) << 1)
    name = f"{'rms' if rms else 'layer'}_norm_fwd_{ptxlib.SUFFIX[dt]}_{g.kind}"
    ptxlib.launch(dev, name, grid, (g.threads, 1, 1),
                  (x, residual, y, residual_out, weight, bias, mean, rstd, rows, d, g.tpr,
                   flags, float(eps)), stream)
