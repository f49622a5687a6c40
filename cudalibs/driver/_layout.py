"""Layout checks of the write side: whether a layout may overlap itself, and the one check
every write of cudalibs makes on its target (read-only memory, overlapping elements).

Both run before any call that writes: :meth:`DeviceArray.fill`, :meth:`DeviceArray.copy_`,
item assignment, and the libraries' ``out`` operands through
:func:`cudalibs.runtime.operand.operand`.
"""

from __future__ import annotations

__all__ = ["may_self_overlap", "check_writable"]


def may_self_overlap(shape, strides, itemsize) -> bool:
    """Whether two elements of a layout may share a byte.

    True for a zero stride on an axis longer than 1 (a broadcast) and for strides that
    interleave; False when each axis, taken by increasing ``abs(stride)``, steps past every
    byte the smaller ones span (all layouts numpy, PyTorch, CuPy and slicing make, reversed
    axes included).  Conservative: the few interleaved layouts that happen to be disjoint
    count as overlapping, which only refuses them as write targets.
    """
    if 0 in shape:
        return False
    span = itemsize
    for st, n in sorted((abs(st), n) for n, st in zip(shape, strides) if n > 1):
        if st < span:
            return True
        span += (n - 1) * st
    return False


def check_writable(arr, what: str, op: str | None = None) -> None:
    """Refuse ``arr`` as the target of a write, before any call that writes.

    Cheap when it passes (two slot reads once the array's contiguity is known): the one
    operand path calls it for every ``out``.

    Parameters
    ----------
    arr : DeviceArray
    what : str
        Names the target in the message (``"out"``, ``"fill: the array"``).
    op : str, optional
        The operation, put before ``what`` in the message (``"gemm: out"``).

    Raises
    ------
    ValueError
        ``arr`` is read-only (see :attr:`DeviceArray.readonly`), or two of its elements share
        memory (:func:`may_self_overlap`), so a write would give one address several values.
    """
    if arr._readonly:
        raise ValueError(f"{op + ': ' if op else ''}{what} is read-only (its producer exported "
                         "the memory read-only); write into a copy (.copy()) instead")
    contig = arr._contig
    if contig is None:
        contig = arr.is_c_contiguous
    if not contig and may_self_overlap(arr._shape, arr._strides, arr._dtype.itemsize):
        raise ValueError(f"{op + ': ' if op else ''}{what} has overlapping elements (shape "
                         f"{arr._shape}, strides {arr._strides}): a write would give one "
                         "address several values")
