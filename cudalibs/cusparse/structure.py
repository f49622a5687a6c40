"""The structure of a sparse matrix, checked on the host: pure numpy, no library call.

cuSPARSE assumes canonical input: compressed offsets that start at 0, never decrease and end
at the number of stored entries; indices in range; within each row (CSR, BSR) or column
(CSC) strictly increasing indices, hence no duplicates; COO entries sorted by row, then by
column.  It does not check any of this, and a violation gives wrong results or reads out of
bounds.  These functions check it with one pass of vectorised numpy each, and say what is
wrong and where.

:func:`canonical_compressed` and :func:`canonical_coo` make canonical copies of host data
that is merely unsorted or duplicated (what scipy's ``tobsr`` and ``tocoo`` give, or a matrix
assembled entry by entry): sorted, duplicates summed in their stored order -- the matrix
scipy means by those arrays.  Offsets and indices that are wrong (out of range, decreasing
offsets) are still errors: no copy could mean what the caller meant.

Blocked-ELL (:func:`check_blocked_ell` and the conversions after it) has no offsets: each
block row owns the same number of slots, a slot holding a block column or -1 (empty).  Its
canonical form has each block row's block columns strictly increasing, the empty slots
last; the conversions to and from BSR and dense host matrices make and read that form.
"""

from __future__ import annotations

import numpy as np

__all__ = ["INDEX_DTYPES", "VALUE_DTYPES", "check_shape", "check_compressed", "check_coo",
           "canonical_compressed", "canonical_coo", "index_dtype_for", "check_blocked_ell",
           "bsr_to_blocked_ell", "blocked_ell_blocks", "blocked_ell_to_bsr",
           "blocked_ell_to_dense", "blocked_ell_pattern", "dense_to_blocked_ell_values"]

#: Index types cuSPARSE's generic API takes (``CUSPARSE_INDEX_32I``, ``CUSPARSE_INDEX_64I``).
INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
#: Value types the wrappers take; the compute type is the value type.
VALUE_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64,
                                           np.complex128))
_INT32_MAX = np.iinfo(np.int32).max


def check_shape(shape, what: str) -> tuple[int, int]:
    """``(rows, cols)``: two non-negative Python ints (a bool is no size)."""
    try:
        rows, cols = shape
    except (TypeError, ValueError):
        raise TypeError(f"{what}: shape must be a pair (rows, cols), not {shape!r}") from None
    out = []
    for v in (rows, cols):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{what}: shape must hold two ints, not {shape!r}")
        if v < 0:
            raise ValueError(f"{what}: shape {tuple(shape)} has a negative size")
        out.append(int(v))
    return out[0], out[1]


def index_dtype_for(rows: int, cols: int, nnz: int) -> np.dtype:
    """int32 where every offset and index fits, else int64."""
    return INDEX_DTYPES[0] if max(rows, cols, nnz) <= _INT32_MAX else INDEX_DTYPES[1]


def _first(mask) -> int:
    return int(np.flatnonzero(mask)[0])


def _in_range(idx, n: int, name: str, what: str) -> None:
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        k = _first(bad)
        raise ValueError(f"{what}: {name} index {int(idx[k])} of entry {k} is out of range "
                         f"for {n} {name}s")


#: The axis the indices of a compressed format run along, by the axis its offsets run along.
_MINOR = {"row": "column", "column": "row", "block row": "block column"}


def _check_offsets(indptr, nnz: int, major: int, what: str, axis: str):
    """``indptr`` as ``major + 1`` zero-based offsets that never decrease and end at ``nnz``;
    returns the steps (entries per major slice)."""
    if indptr.shape != (major + 1,):
        raise ValueError(f"{what}: indptr has {indptr.size} entries; {major} {axis}s need "
                         f"{major + 1}")
    if indptr[0] != 0:
        raise ValueError(f"{what}: indptr[0] is {int(indptr[0])}, not 0 (zero-based indices "
                         "only)")
    if indptr[-1] != nnz:
        raise ValueError(f"{what}: indptr[-1] is {int(indptr[-1])}, but there are {nnz} "
                         "stored entries")
    steps = np.diff(indptr)
    if (steps < 0).any():
        i = _first(steps < 0)
        raise ValueError(f"{what}: indptr decreases at {axis} {i} ({int(indptr[i])} -> "
                         f"{int(indptr[i + 1])})")
    return steps


def _out_of_order(indptr, indices, steps):
    """The mask over ``indices[1:]`` of entries that do not follow their predecessor in the
    same major slice strictly (unsorted or duplicated); a step across slices is free."""
    nnz = indices.size
    starts = np.zeros(nnz, dtype=bool)
    starts[indptr[:-1][steps > 0]] = True
    return ~starts[1:] & (np.diff(indices) <= 0)


def check_compressed(indptr, indices, major: int, minor: int, what: str,
                     axis: str = "row") -> None:
    """Check compressed offsets ``indptr`` (``major + 1`` of them) and the ``minor``-axis
    indices they delimit: canonical, as cuSPARSE assumes.

    ``axis`` names what the offsets run along: ``"row"`` (CSR), ``"column"`` (CSC) or
    ``"block row"`` (BSR, whose indices are block columns).

    Raises
    ------
    ValueError
        Naming the first offset or entry that is wrong and why.
    """
    indptr, indices = np.asarray(indptr), np.asarray(indices)
    other = _MINOR[axis]
    nnz = indices.size
    steps = _check_offsets(indptr, nnz, major, what, axis)
    if nnz == 0:
        return
    _in_range(indices, minor, other, what)
    wrong = _out_of_order(indptr, indices, steps)
    if wrong.any():
        k = _first(wrong) + 1
        row = int(np.searchsorted(indptr, k, side="right") - 1)
        why = "a duplicate" if indices[k] == indices[k - 1] else "unsorted"
        raise ValueError(
            f"{what}: {axis} {row} is not canonical: {other} index {int(indices[k])} at "
            f"entry {k} follows {int(indices[k - 1])} ({why}); cuSPARSE needs sorted "
            f"{other} indices without duplicates (scipy: .sum_duplicates(), "
            "torch: .coalesce())")


def _summed(keys: tuple, data):
    """Entries sorted by ``keys`` (lexicographic, the first key major; stable), those with
    equal keys summed in their stored order: ``(keys, data)`` of the unique entries."""
    order = np.lexsort(keys[::-1])
    keys = tuple(k[order] for k in keys)
    data = data[order]
    n = data.shape[0]
    first = np.ones(n, dtype=bool)
    if n > 1:
        same = np.ones(n - 1, dtype=bool)
        for k in keys:
            same &= k[1:] == k[:-1]
        first[1:] = ~same
    starts = np.flatnonzero(first)
    if starts.size == n:
        return keys, data
    return tuple(k[starts] for k in keys), np.add.reduceat(data, starts, axis=0)


def canonical_compressed(indptr, indices, data, major: int, minor: int, what: str,
                         axis: str = "row"):
    """``(indptr, indices, data)`` of the same matrix, canonical: the arrays themselves when
    they are, else new ones with each major slice's indices sorted and duplicates summed.

    ``data`` holds one value (CSR, CSC) or one block (BSR: ``data[k]`` is a block) per
    index.  Offsets and indices are checked as by :func:`check_compressed`; only the order
    within a slice and duplicates are mended.

    Raises
    ------
    ValueError
        Offsets that are wrong, or an index out of range, naming the first.
    """
    indptr, indices, data = np.asarray(indptr), np.asarray(indices), np.asarray(data)
    nnz = indices.size
    steps = _check_offsets(indptr, nnz, major, what, axis)
    if data.shape[:1] != (nnz,):
        raise ValueError(f"{what}: {nnz} indices but {data.shape[0] if data.ndim else 0} "
                         "stored values")
    if nnz == 0:
        return indptr, indices, data
    _in_range(indices, minor, _MINOR[axis], what)
    if not _out_of_order(indptr, indices, steps).any():
        return indptr, indices, data
    slices = np.repeat(np.arange(major, dtype=np.int64), steps)
    (slices, indices), data = _summed((slices, indices), data)
    out = np.zeros(major + 1, dtype=np.int64)
    np.cumsum(np.bincount(slices, minlength=major), out=out[1:])
    return out.astype(indptr.dtype), indices, data


def canonical_coo(row, col, data, rows: int, cols: int, what: str):
    """``(row, col, data)`` of the same matrix, canonical: the arrays themselves when they
    are, else new ones sorted by row, then column, duplicates summed in their stored order.

    Raises
    ------
    ValueError
        An index out of range, or arrays of different lengths.
    """
    row, col, data = np.asarray(row), np.asarray(col), np.asarray(data)
    if row.shape != col.shape or data.shape[:1] != row.shape:
        raise ValueError(f"{what}: row, col and data have {row.size}, {col.size} and "
                         f"{data.shape[0] if data.ndim else 0} entries; they must match")
    if row.size == 0:
        return row, col, data
    _in_range(row, rows, "row", what)
    _in_range(col, cols, "column", what)
    dr, dc = np.diff(row), np.diff(col)
    if not ((dr < 0) | ((dr == 0) & (dc <= 0))).any():
        return row, col, data
    (row, col), data = _summed((row, col), data)
    return row, col, data


def check_coo(row, col, rows: int, cols: int, what: str) -> None:
    """Check COO indices: in range, sorted by row then column, no duplicates."""
    row, col = np.asarray(row), np.asarray(col)
    if row.shape != col.shape:
        raise ValueError(f"{what}: row has {row.size} indices, col {col.size}")
    if row.size == 0:
        return
    _in_range(row, rows, "row", what)
    _in_range(col, cols, "column", what)
    dr = np.diff(row)
    dc = np.diff(col)
    wrong = (dr < 0) | ((dr == 0) & (dc <= 0))
    if wrong.any():
        k = _first(wrong) + 1
        why = "a duplicate" if dr[k - 1] == 0 and dc[k - 1] == 0 else "out of order"
        raise ValueError(f"{what}: entry {k} ({int(row[k])}, {int(col[k])}) follows "
                         f"({int(row[k - 1])}, {int(col[k - 1])}): {why}; cuSPARSE needs COO "
                         "entries sorted by row, then column, without duplicates "
                         "(scipy: .sum_duplicates(), torch: .coalesce())")


# -- Blocked-ELL ----------------------------------------------------------------------------
# A Blocked-ELL matrix of square b x b blocks stores, for each of its rows // b block rows,
# the same number W of block slots: ell_col_ind[r, s] is the block column of slot s of block
# row r, or -1 for an empty slot, and the slot's block is values[r*b:(r+1)*b, s*b:(s+1)*b]
# (values is rows x W*b, row-major).  Canonical: in each block row the block columns strictly
# increase, and the empty slots (-1) come after the last stored block.


def check_blocked_ell(ell_col_ind, block_cols: int, what: str) -> None:
    """Check Blocked-ELL column indices (a 2-D host array, ``[block rows, slots]``):
    every entry a block column in ``[0, block_cols)`` or -1 (an empty slot), and canonical
    -- in each block row strictly increasing block columns, the -1 padding after them.

    Raises
    ------
    ValueError
        Naming the first wrong entry (block row and slot) and why.
    """
    ell = np.asarray(ell_col_ind)
    if ell.ndim != 2:
        raise ValueError(f"{what}: ell_col_ind must be 2-D (block rows, slots), got shape "
                         f"{ell.shape}")
    if ell.size == 0:
        return
    bad = (ell < -1) | (ell >= block_cols)
    if bad.any():
        r, s = np.argwhere(bad)[0]
        raise ValueError(f"{what}: ell_col_ind[{r}, {s}] is {int(ell[r, s])}; a block column "
                         f"index is in [0, {block_cols}) for {block_cols} block columns, or -1 "
                         "for an empty slot")
    empty = ell < 0
    # An empty slot followed by a stored block in the same block row.
    late = ~empty[:, 1:] & empty[:, :-1]
    if late.any():
        r, s = np.argwhere(late)[0]
        raise ValueError(f"{what}: block row {r} stores block column {int(ell[r, s + 1])} in "
                         f"slot {s + 1} after an empty slot (-1) in slot {s}; the -1 padding "
                         "must come after a block row's last stored block")
    wrong = ~empty[:, 1:] & (np.diff(ell, axis=1) <= 0)
    if wrong.any():
        r, s = np.argwhere(wrong)[0]
        why = "a duplicate" if ell[r, s + 1] == ell[r, s] else "unsorted"
        raise ValueError(f"{what}: block row {r} is not canonical: block column "
                         f"{int(ell[r, s + 1])} in slot {s + 1} follows {int(ell[r, s])} "
                         f"({why}); each block row needs strictly increasing block columns")


def bsr_to_blocked_ell(indptr, indices, data, block_rows: int):
    """``(ell_col_ind, values)`` of a canonical BSR matrix (``data``: ``(blocks, b, b)``):
    each block row's blocks in order, padded with empty slots (-1, zero values) to the
    widest block row's count (at least one slot)."""
    indptr, indices, data = np.asarray(indptr), np.asarray(indices), np.asarray(data)
    b = data.shape[1]
    counts = np.diff(indptr).astype(np.int64)
    width = max(int(counts.max(initial=0)), 1)
    rows_of = np.repeat(np.arange(block_rows, dtype=np.int64), counts)
    slot = np.arange(indices.size, dtype=np.int64) - np.repeat(indptr[:-1].astype(np.int64),
                                                               counts)
    ell = np.full((block_rows, width), -1, dtype=np.int32)
    ell[rows_of, slot] = indices
    values = np.zeros((block_rows, b, width, b), dtype=data.dtype)
    values[rows_of, :, slot, :] = data
    return ell, values.reshape(block_rows * b, width * b)


def blocked_ell_blocks(ell_col_ind, values, b: int):
    """The stored blocks of a Blocked-ELL matrix in slot order: ``(block rows, block
    columns, blocks)`` (``blocks``: ``(n, b, b)``), the empty slots left out."""
    ell = np.asarray(ell_col_ind)
    values = np.asarray(values)
    r, s = np.nonzero(ell >= 0)
    width = ell.shape[1] if ell.ndim == 2 else 0
    blocks = values.reshape(ell.shape[0], b, width, b)[r, :, s, :]
    return r, ell[r, s], blocks


def blocked_ell_to_bsr(ell_col_ind, values, b: int):
    """``(indptr, indices, data)`` of the BSR matrix holding a Blocked-ELL matrix's stored
    blocks (int32 indices; ``data``: ``(blocks, b, b)``)."""
    ell = np.asarray(ell_col_ind)
    r, c, blocks = blocked_ell_blocks(ell, values, b)
    indptr = np.zeros(ell.shape[0] + 1, dtype=np.int32)
    np.cumsum(np.bincount(r, minlength=ell.shape[0]), out=indptr[1:])
    return indptr, c.astype(np.int32), blocks


def blocked_ell_to_dense(ell_col_ind, values, b: int, shape):
    """The dense host matrix of a Blocked-ELL matrix, in ``values``' dtype (blocks stored
    twice are summed, as a product reads them)."""
    values = np.asarray(values)
    rows, cols = shape
    r, c, blocks = blocked_ell_blocks(ell_col_ind, values, b)
    wide = np.float64 if values.dtype.itemsize == 8 else np.float32
    dense = np.zeros((rows // b, b, cols // b, b), dtype=wide)
    np.add.at(dense, (r, slice(None), c, slice(None)), blocks.astype(wide))
    return dense.reshape(rows, cols).astype(values.dtype)


def blocked_ell_pattern(dense, b: int):
    """Blocked-ELL column indices of a dense host matrix's non-zero blocks: each block row's
    block columns in order, padded with -1 to the widest block row (at least one slot)."""
    dense = np.asarray(dense)
    rows, cols = dense.shape
    nz = (dense.reshape(rows // b, b, cols // b, b) != 0).any(axis=(1, 3))
    counts = nz.sum(axis=1)
    width = max(int(counts.max(initial=0)), 1)
    r, c = np.nonzero(nz)
    slot = np.arange(r.size) - np.repeat(np.cumsum(counts) - counts, counts)
    ell = np.full((rows // b, width), -1, dtype=np.int32)
    ell[r, slot] = c
    return ell


def dense_to_blocked_ell_values(dense, ell_col_ind, b: int):
    """The Blocked-ELL values of a dense host matrix for given column indices: each stored
    slot holds its block of ``dense``, each empty slot zeros; entries outside the pattern
    are left out."""
    dense = np.asarray(dense)
    ell = np.asarray(ell_col_ind)
    rows, cols = dense.shape
    width = ell.shape[1]
    values = np.zeros((rows // b, b, width, b), dtype=dense.dtype)
    r, s = np.nonzero(ell >= 0)
    values[r, :, s, :] = dense.reshape(rows // b, b, cols // b, b)[r, :, ell[r, s], :]
    return values.reshape(rows, width * b)
