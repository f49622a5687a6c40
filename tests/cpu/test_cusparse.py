"""cuSPARSE bindings without a GPU.

* the host-side structure checks (:mod:`cudalibs.cusparse.structure`) against scipy.sparse:
  every canonical matrix scipy makes passes, in every format, and a matrix made
  non-canonical (unsorted, duplicated, out of range, bad offsets) fails naming the entry;
  the canonical copies ``from_scipy`` makes of unsorted or duplicated scipy matrices hold
  the matrix scipy means, in every format (BSR: as scipy's ``tobsr`` leaves it);
* matrix and plan validation before any C call, on arrays over no memory and a device with
  no context; a closed matrix is a clear error, and closing one drops its cached plans;
* the choice of algorithms by ``deterministic`` (by default every one, cuSPARSE's default
  first; with ``deterministic=True`` only those cuSPARSE documents as bitwise reproducible)
  against a stand-in buffer-size query, and its refusals before any C call;
* the execution's hot path against a recording stand-in library: the buffer from the pool on
  the call's stream (none for a workspace of 0), the handle bound to that stream, a dense
  descriptor's address written only when it changes, the plan's constant scalars for
  ``alpha=1, beta=0``, bad input refused before any of it;
* Blocked-ELL: the structure checks and the host conversions (BSR, dense, pattern) against
  scipy, the matrix's checks (dtypes, shapes, block size, -1 padding), its descriptor, and
  every operation that does not take it (or not so) refused before any C call;
* under graph capture: a one-shot's miss and ``from_scipy`` refused before any C call;
* the status texts (cuSPARSE's own, through ``cusparseGetErrorString``, which needs no GPU),
  the error class, the version, the loader entry and the wheels (the prototype table itself
  is checked against cusparse.h by test_headers.py).
"""

from __future__ import annotations

import ctypes
import pickle
import threading

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import _ffi, _loader, dtypes
from cudalibs.cusparse import _base, _lib, structure
from cudalibs.cusparse import ell as ell_mod
from cudalibs.cusparse import matrix as matrix_mod
from cudalibs.cusparse import plan as plan_mod
from cudalibs.cusparse.matrix import dense_layout
from cudalibs.driver.array import DeviceArray
from cudalibs.errors import CaptureError, ClosedError, CusparseError
from cudalibs.runtime import front
from cudalibs.runtime.cache import cache

cusparse = cl.cusparse
F32, F64, I32, I64 = (np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))


class _Dev:
    """A stand-in device: an ordinal, and nothing a C call could use."""

    ordinal = 0
    compute_capability = (9, 0)

    def __getattr__(self, name):
        raise AssertionError(f"a C call or device query (device.{name}) before the checks")


DEV = _Dev()
_NEXT = [1 << 32]


def fake(shape, dtype=F32, strides=None, device=DEV):
    """A DeviceArray over no memory (C-contiguous unless ``strides``) on ``device``."""
    dt = dtypes.lookup(dtype)
    if strides is None:
        strides, acc = [], dt.itemsize
        for n in reversed(shape):
            strides.append(acc)
            acc *= max(n, 1)
        strides = tuple(reversed(strides))
    _NEXT[0] += 1 << 20
    return DeviceArray._view(_NEXT[0], tuple(shape), tuple(strides), dt, device, None, None)


@pytest.fixture
def no_c(monkeypatch):
    """Any library load fails the test: validation must come first."""
    def refuse(self):
        raise AssertionError(f"load of {self.name} before the checks")
    monkeypatch.setattr(_ffi.LazyLibrary, "__call__", refuse)


def csr(rows=4, cols=4, nnz=8, idx=I32, val=F32):
    return cusparse.CSR(fake((rows + 1,), idx), fake((nnz,), idx), fake((nnz,), val),
                        (rows, cols))


# -- host-side structure checks against scipy --------------------------------------------------
@st.composite
def _scipy_matrices(draw):
    rows, cols = draw(st.integers(0, 30)), draw(st.integers(0, 30))
    density = draw(st.floats(0, 1))
    seed = draw(st.integers(0, 2**32 - 1))
    m = sp.random(rows, cols, density=density, format="csr", random_state=seed)
    return m


@settings(max_examples=60, deadline=None)
@given(_scipy_matrices())
def test_canonical_scipy_matrices_pass(m):
    rows, cols = m.shape
    structure.check_compressed(m.indptr, m.indices, rows, cols, "t")
    c = m.tocsc()
    structure.check_compressed(c.indptr, c.indices, cols, rows, "t", "column")
    coo = m.tocoo()
    order = np.lexsort((coo.col, coo.row))
    structure.check_coo(coo.row[order], coo.col[order], rows, cols, "t")


@settings(max_examples=60, deadline=None)
@given(_scipy_matrices(), st.sampled_from(["swap", "duplicate", "range"]))
def test_non_canonical_matrices_fail_naming_the_entry(m, how):
    rows, cols = m.shape
    long_rows = [r for r in range(rows) if m.indptr[r + 1] - m.indptr[r] >= 2]
    indices = m.indices.copy()
    if how == "range":
        if not indices.size:
            return
        indices[-1] = cols
        with pytest.raises(ValueError, match="out of range"):
            structure.check_compressed(m.indptr, indices, rows, cols, "t")
        return
    if not long_rows:
        return
    k = m.indptr[long_rows[0]]
    if how == "swap":
        indices[k], indices[k + 1] = indices[k + 1], indices[k]
        want = "unsorted"
    else:
        indices[k + 1] = indices[k]
        want = "duplicate"
    with pytest.raises(ValueError, match=f"row {long_rows[0]} is not canonical.*{want}"):
        structure.check_compressed(m.indptr, indices, rows, cols, "t")


def test_offsets_are_checked():
    with pytest.raises(ValueError, match=r"indptr\[0\] is 1"):
        structure.check_compressed([1, 1], [], 1, 3, "t")
    with pytest.raises(ValueError, match="decreases at row 1"):
        structure.check_compressed([0, 2, 1, 2], [0, 1], 3, 3, "t")
    with pytest.raises(ValueError, match="2 rows need 3"):
        structure.check_compressed([0, 0], [], 2, 3, "t")
    with pytest.raises(ValueError, match=r"indptr\[-1\] is 1, but there are 2"):
        structure.check_compressed([0, 1], [0, 1], 1, 3, "t")


def test_coo_order_and_duplicates():
    with pytest.raises(ValueError, match="out of order"):
        structure.check_coo([1, 0], [0, 0], 2, 2, "t")
    with pytest.raises(ValueError, match="a duplicate"):
        structure.check_coo([0, 0], [1, 1], 2, 2, "t")


def test_block_structure_names_block_columns():
    # Block row 0 holds block columns 4 then 2: unsorted; a fifth block column is too many.
    with pytest.raises(ValueError, match="block row 0 is not canonical: block column index 2 "
                                         "at entry 1 follows 4 .unsorted.; cuSPARSE needs "
                                         "sorted block column indices"):
        structure.check_compressed([0, 2], [4, 2], 1, 5, "BSR", "block row")
    with pytest.raises(ValueError, match="block column index 5 of entry 1 is out of range for "
                                         "5 block columns"):
        structure.check_compressed([0, 2], [0, 5], 1, 5, "BSR", "block row")


@st.composite
def _messy(draw):
    """A scipy matrix of any format whose entries are out of order and partly repeated,
    with the dense matrix scipy means by it."""
    rows, cols = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    n = draw(st.integers(0, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    fmt = draw(st.sampled_from(["csr", "csc", "coo", "bsr"]))
    rng = np.random.default_rng(seed)
    if fmt == "bsr":
        b = draw(st.sampled_from([1, 2, 3]))
        rows, cols = rows * b, cols * b
    r, c = rng.integers(0, rows, n), rng.integers(0, cols, n)
    v = rng.uniform(-1, 1, n).astype(F64)
    coo = sp.coo_matrix((v, (r, c)), shape=(rows, cols))
    dense = coo.toarray()                   # duplicates summed: the matrix scipy means
    if fmt == "coo":
        return coo, dense
    if fmt == "bsr":
        m = sp.csr_matrix(dense).tobsr((b, b))      # block columns as tobsr meets them
        return m, dense
    # Compressed arrays in the order of a shuffled coordinate list, duplicates kept.
    major, minor = (r, c) if fmt == "csr" else (c, r)
    order = np.argsort(major, kind="stable")
    slices = cols if fmt == "csc" else rows
    indptr = np.concatenate([[0], np.cumsum(np.bincount(major, minlength=slices))])
    cls = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
    return cls((v[order], minor[order].astype(np.int32), indptr.astype(np.int32)),
               shape=(rows, cols)), dense


@settings(max_examples=150, deadline=None)
@given(_messy())
def test_canonical_copies_hold_the_matrix_scipy_means(case):
    m, dense = case
    rows, cols = m.shape
    if m.format == "coo":
        row, col, data = structure.canonical_coo(m.row, m.col, m.data, rows, cols, "t")
        structure.check_coo(row, col, rows, cols, "t")
        got = sp.coo_matrix((data, (row, col)), shape=m.shape)
    else:
        b = m.blocksize[0] if m.format == "bsr" else 1
        axis = {"csr": "row", "csc": "column", "bsr": "block row"}[m.format]
        major, minor = (rows // b, cols // b) if m.format != "csc" else (cols, rows)
        indptr, indices, data = structure.canonical_compressed(m.indptr, m.indices, m.data,
                                                               major, minor, "t", axis)
        structure.check_compressed(indptr, indices, major, minor, "t", axis)
        got = type(m)((data, indices, indptr), shape=m.shape)
    np.testing.assert_allclose(got.toarray(), dense, rtol=1e-12, atol=1e-15)


def test_canonical_input_is_taken_as_it_is():
    m = sp.random(20, 30, density=0.3, format="csr", random_state=1)
    out = structure.canonical_compressed(m.indptr, m.indices, m.data, 20, 30, "t")
    assert all(a is b for a, b in zip(out, (m.indptr, m.indices, m.data)))
    c = m.tocoo()
    out = structure.canonical_coo(c.row, c.col, c.data, 20, 30, "t")
    assert all(a is b for a, b in zip(out, (c.row, c.col, c.data)))


def test_duplicates_are_summed_in_stored_order():
    # Blocks of one block column, twice in block row 0: summed; block row 1 unsorted.
    data = np.arange(16, dtype=F32).reshape(4, 2, 2)
    indptr, indices, out = structure.canonical_compressed(
        np.array([0, 2, 4], np.int32), np.array([1, 1, 2, 0], np.int32), data, 2, 3, "t",
        "block row")
    assert indptr.tolist() == [0, 1, 3] and indices.tolist() == [1, 0, 2]
    assert indptr.dtype == indices.dtype == np.int32
    np.testing.assert_array_equal(out, [data[0] + data[1], data[3], data[2]])
    with pytest.raises(ValueError, match="indptr decreases at row 1"):
        structure.canonical_compressed([0, 2, 1, 2], [0, 1], [1.0, 2.0], 3, 3, "t")
    with pytest.raises(ValueError, match="column index 3 of entry 1 is out of range"):
        structure.canonical_compressed([0, 2], [1, 3], [1.0, 2.0], 1, 3, "t")


@pytest.fixture
def copied(monkeypatch):
    """from_scipy's host arrays, as it would copy them to the device (no device needed)."""
    seen = {}

    def owned(cls, host, shape, device, stream, what, **attrs):
        seen.update(host, cls=cls, shape=shape, **attrs)
        return seen
    monkeypatch.setattr(matrix_mod, "owned_copy", owned)
    monkeypatch.setattr(ell_mod, "owned_copy", owned)
    return seen


def test_from_scipy_copies_a_canonical_matrix(copied):
    # Row 0 unsorted with a duplicate of column 1: 1 + 3 there, 2 at column 0.
    m = sp.csr_matrix((np.array([1, 2, 3], F32), np.array([1, 0, 1]), np.array([0, 3])),
                      shape=(1, 2))
    cusparse.from_scipy(m)
    assert copied["cls"] is cusparse.CSR
    assert copied["indptr"].tolist() == [0, 2] and copied["indices"].tolist() == [0, 1]
    assert copied["data"].tolist() == [2.0, 4.0] and copied["data"].dtype == F32
    assert m.indices.tolist() == [1, 0, 1]      # scipy's own matrix is left as it was
    # Block row 0 holds block columns 1 then 0, as tobsr may leave them.
    blocks = np.arange(8, dtype=F32).reshape(2, 2, 2)
    cusparse.from_scipy(sp.bsr_matrix((blocks, np.array([1, 0]), np.array([0, 2, 2])),
                                      shape=(4, 4)))
    assert copied["cls"] is cusparse.BSR and copied["indices"].tolist() == [0, 1]
    np.testing.assert_array_equal(copied["data"], blocks[::-1])
    coo = sp.coo_matrix((np.array([1.0, 2.0, 3.0]), (np.array([1, 0, 1]), np.array([0, 1, 0]))),
                        shape=(2, 2))
    cusparse.from_scipy(coo)
    assert (copied["row"].tolist(), copied["col"].tolist(), copied["data"].tolist()) == \
        ([0, 1], [1, 0], [2.0, 4.0])


def test_from_scipy_checks_on_the_host_before_any_copy(no_c):
    m = sp.csr_matrix((np.ones(2, F32), np.array([1, 2]), np.array([0, 2])), shape=(1, 2))
    with pytest.raises(ValueError, match="column index 2 of entry 1 is out of range for 2"):
        cusparse.from_scipy(m)
    with pytest.raises(TypeError, match="dtype int64"):
        cusparse.from_scipy(sp.eye(3, format="csr", dtype=np.int64))
    with pytest.raises(TypeError, match="matrix must be a scipy.sparse matrix"):
        cusparse.from_scipy(np.eye(3))
    with pytest.raises(ValueError, match="square blocks"):
        cusparse.from_scipy(sp.bsr_matrix(np.ones((4, 4), F32), blocksize=(2, 1)))


def test_index_dtype_for():
    assert structure.index_dtype_for(10, 10, 100) == I32
    assert structure.index_dtype_for(10, 2**31, 100) == I64


# -- matrices and plans: validation before any C call --------------------------------------------
def test_matrices_are_checked(no_c):
    A = csr()
    assert (A.shape, A.dtype, A.index_dtype, A.nnz, A.format) == ((4, 4), F32, I32, 8, "csr")
    assert "CSR 4x4 float32, 8 stored, int32 indices, borrowed" in repr(A)
    with pytest.raises(ValueError, match="indptr has 4 entries; 4 rows need 5"):
        cusparse.CSR(fake((4,), I32), fake((8,), I32), fake((8,)), (4, 4))
    with pytest.raises(ValueError, match="indices has 8 entries, data 7"):
        cusparse.CSR(fake((5,), I32), fake((8,), I32), fake((7,)), (4, 4))
    with pytest.raises(ValueError, match="4 columns need 5"):
        cusparse.CSC(fake((4,), I32), fake((8,), I32), fake((8,)), (4, 4))
    with pytest.raises(TypeError, match="indices has dtype int64, indptr int32"):
        cusparse.CSR(fake((5,), I32), fake((8,), I64), fake((8,)), (4, 4))
    with pytest.raises(TypeError, match="data has dtype float16"):
        cusparse.CSR(fake((5,), I32), fake((8,), I32), fake((8,), np.float16), (4, 4))
    with pytest.raises(ValueError, match="negative"):
        cusparse.CSR(fake((5,), I32), fake((8,), I32), fake((8,)), (4, -1))
    with pytest.raises(ValueError, match="row, col and data have 8, 7 and 8"):
        cusparse.COO(fake((8,), I32), fake((7,), I32), fake((8,)), (4, 4))
    with pytest.raises(ValueError, match="not a multiple of the block size 3"):
        cusparse.BSR(fake((3,), I32), fake((2,), I32), fake((2, 3, 3)), (4, 4))
    B = cusparse.BSR(fake((3,), I32), fake((2,), I32), fake((2, 2, 2)), (4, 4))
    assert (B.nnz, B.blocks, B.block) == (8, 2, 2) and "2x2 blocks" in repr(B)
    with pytest.raises(ValueError, match="must be contiguous"):
        cusparse.CSR(fake((5,), I32, strides=(8,)), fake((8,), I32), fake((8,)), (4, 4))


def test_plans_check_their_problem(no_c):
    A = csr(4, 6)
    with pytest.raises(ValueError, match="op must be 'N', 'T' or 'H'"):
        cusparse.SpMV(A, op="X")
    with pytest.raises(ValueError, match="alg 'CUSPARSE_SPMV_COO_ALG1' is not offered for csr"):
        cusparse.SpMV(A, alg="CUSPARSE_SPMV_COO_ALG1")
    with pytest.raises(ValueError, match="inner sizes differ"):
        cusparse.SpMM(A, fake((4, 3)))
    with pytest.raises(TypeError, match="b has dtype float64"):
        cusparse.SpMM(A, fake((6, 3), F64))
    with pytest.raises(ValueError, match="out has shape"):
        cusparse.SpMM(A, fake((6, 3)), fake((3, 4)))
    with pytest.raises(ValueError, match="neither row- nor column-major"):
        cusparse.SpMM(A, fake((6, 3), strides=(24, 8)))
    with pytest.raises(ValueError, match="does not give C's shape"):
        cusparse.SDDMM(fake((4, 2)), fake((2, 5)), A)
    with pytest.raises(ValueError, match="square matrix"):
        cusparse.SpSV(A)
    coo = cusparse.COO(fake((8,), I32), fake((8,), I32), fake((8,)), (6, 6))
    with pytest.raises(ValueError, match="B is coo; cuSPARSE's SpGEMM takes CSR"):
        cusparse.SpGEMM(csr(6, 6), coo)
    with pytest.raises(ValueError, match="inner sizes differ"):
        cusparse.SpGEMM(A, csr(4, 4))
    with pytest.raises(TypeError, match="A must be a cusparse sparse matrix"):
        cusparse.spmv(np.eye(3), fake((3,)))
    with pytest.raises(TypeError, match="x has dtype float64"):
        cusparse.spmv(A, fake((6,), F64))


# -- deterministic algorithms ----------------------------------------------------------------
N, T, H = (cusparse.plan.OPS[o] for o in "NTH")


def test_the_documented_deterministic_algorithms():
    det = plan_mod.deterministic_algorithms
    assert det("SpMV", "csr", N) == ("CUSPARSE_SPMV_CSR_ALG2",)
    assert det("SpMV", "coo", N) == ("CUSPARSE_SPMV_COO_ALG2",)
    assert det("SpMV", "bsr", N) == ("CUSPARSE_SPMV_BSR_ALG1",)
    assert det("SpMM", "csr", N, T) == ("CUSPARSE_SPMM_CSR_ALG3",)
    assert det("SpMM", "coo", N) == ("CUSPARSE_SPMM_COO_ALG2",)
    assert det("SpMM", "bsr", N) == ("CUSPARSE_SPMM_BSR_ALG1",)
    assert det("SDDMM", "csr", T, T) == ("CUSPARSE_SDDMM_ALG_DEFAULT",)
    # A transposed A scatters its sums (atomics); CSC has none; CSR_ALG3 takes no op_b="H".
    for kind in ("SpMV", "SpMM"):
        for fmt in ("csr", "csc", "coo", "bsr"):
            assert det(kind, fmt, T) == det(kind, fmt, H) == ()
        assert det(kind, "csc", N) == ()
    assert det("SpMM", "csr", N, H) == ()
    for kind, table in (("SpMV", plan_mod.SPMV_ALGS), ("SpMM", plan_mod.SPMM_ALGS)):
        for fmt, names in plan_mod.DETERMINISTIC[kind].items():
            assert set(names) <= set(table[fmt]), (kind, fmt)
            assert all(hasattr(_lib, n) for n in names)


def test_deterministic_requests_are_checked_before_any_c_call(no_c):
    A = csr(4, 6)
    with pytest.raises(ValueError, match=r"SpMV: no deterministic algorithm for T\(csr \(4, 6\)\) "
                                         r"@ x: with a transposed A .*atomics.*deterministic=False"):
        cusparse.SpMV(A, op="T", deterministic=True)
    with pytest.raises(ValueError, match="SpMM: no deterministic algorithm .* A.T.tocsr"):
        cusparse.SpMM(A, fake((4, 3)), op_a="T", deterministic=True)
    with pytest.raises(ValueError, match="does not take op_b='H'"):
        cusparse.SpMM(A, fake((3, 6)), op_b="H", deterministic=True)
    K = cusparse.CSC(fake((7,), I32), fake((8,), I32), fake((8,)), (4, 6))
    with pytest.raises(ValueError, match="no algorithm on CSC as deterministic.*A.tocsr"):
        cusparse.SpMV(K, deterministic=True)
    with pytest.raises(ValueError, match="alg 'CUSPARSE_SPMV_CSR_ALG1' is not deterministic .*"
                                         "CUSPARSE_SPMV_CSR_ALG2"):
        cusparse.SpMV(A, alg="CUSPARSE_SPMV_CSR_ALG1", deterministic=True)
    with pytest.raises(TypeError, match="SpMV: deterministic must be True or False"):
        cusparse.SpMV(A, deterministic="yes")
    # None was once the default; it is no mode now, so a caller who passes it hears so.
    with pytest.raises(TypeError, match="SpMM: deterministic must be True or False, not None"):
        cusparse.SpMM(A, fake((6, 2)), deterministic=None)
    with pytest.raises(TypeError, match="spmv: deterministic must be True or False"):
        cusparse.spmv(A, fake((6,)), deterministic=1)
    with pytest.raises(TypeError, match="spmm: deterministic must be True or False"):
        cusparse.spmm(A, fake((6, 2)), deterministic="no")
    B = cusparse.BSR(fake((3,), I32), fake((2,), I32), fake((2, 2, 2)), (4, 4))
    with pytest.raises(ValueError, match="cuSPARSE's BSR SpMV takes op='N' only"):
        cusparse.SpMV(B, op="T")
    with pytest.raises(ValueError, match="cuSPARSE's BSR SpMM takes op_a='N' only"):
        cusparse.SpMM(B, fake((4, 3)), op_a="H")


def _stand_in(fmt, op, deterministic, alg=None):
    """An SpMV plan's choosing state, without a matrix or a device."""
    p = object.__new__(cusparse.SpMV)
    code = cusparse.plan.OPS[op]
    p._algs, p._det, p._mode = plan_mod.algorithms(
        "SpMV", fmt, plan_mod.SPMV_ALGS[fmt], alg, deterministic, code, N, "problem")
    p._op_name, p.format, p.matrix_shape, p.dtype = op, fmt, (4, 6), F32
    return p


def _sizes(refuse=()):
    """A stand-in buffer-size query: the algorithms it was asked about, in order; those in
    ``refuse`` are refused as cuSPARSE does."""
    asked = []

    def size_of(alg):
        asked.append(alg)
        if alg in refuse:
            raise CusparseError.from_status(10, "cusparseSpMV_bufferSize", "", None)
        return 64 * alg
    return asked, size_of


def _names(cands):
    return [c["name"] for c in cands]


def test_the_default_offers_every_algorithm_cusparse_default_first():
    # Every algorithm, cuSPARSE's default first: what an untuned plan runs (CSR_ALG1's kind,
    # not the slower deterministic CSR_ALG2); the deterministic one marked as such.
    for fmt in ("csr", "csc", "coo", "bsr"):
        asked, size_of = _sizes()
        cands = _stand_in(fmt, "N", False)._choose("SpMV", size_of)
        assert _names(cands) == list(plan_mod.SPMV_ALGS[fmt])
        assert cands[0]["name"] == "CUSPARSE_SPMV_ALG_DEFAULT"
        assert asked == [getattr(_lib, n) for n in plan_mod.SPMV_ALGS[fmt]]
        assert [c["deterministic"] for c in cands] == [
            n in plan_mod.DETERMINISTIC["SpMV"].get(fmt, ()) for n in plan_mod.SPMV_ALGS[fmt]]
    for fmt, names in plan_mod.SPMM_ALGS.items():
        assert names[0] == "CUSPARSE_SPMM_ALG_DEFAULT", fmt
    # A transposed product: every algorithm too, none marked deterministic.
    cands = _stand_in("csr", "T", False)._choose("SpMV", _sizes()[1])
    assert _names(cands) == list(plan_mod.SPMV_ALGS["csr"])
    assert not any(c["deterministic"] for c in cands)
    # One cuSPARSE refuses is left out; the others stay, in order.
    cands = _stand_in("coo", "N", False)._choose(
        "SpMV", _sizes(refuse={_lib.CUSPARSE_SPMV_ALG_DEFAULT})[1])
    assert _names(cands) == ["CUSPARSE_SPMV_COO_ALG1", "CUSPARSE_SPMV_COO_ALG2"]
    # An algorithm named runs as named.
    cands = _stand_in("csr", "N", False, alg="CUSPARSE_SPMV_CSR_ALG1")._choose("SpMV",
                                                                               _sizes()[1])
    assert _names(cands) == ["CUSPARSE_SPMV_CSR_ALG1"] and not cands[0]["deterministic"]


def test_deterministic_true_offers_only_the_documented_ones():
    asked, size_of = _sizes()
    cands = _stand_in("csr", "N", True)._choose("SpMV", size_of)
    assert _names(cands) == ["CUSPARSE_SPMV_CSR_ALG2"] and cands[0]["deterministic"]
    assert asked == [_lib.CUSPARSE_SPMV_CSR_ALG2]       # nothing else asked (or timed)
    cands = _stand_in("bsr", "N", np.bool_(True))._choose("SpMV", _sizes()[1])
    assert _names(cands) == ["CUSPARSE_SPMV_BSR_ALG1"]
    # Only the deterministic ones, and cuSPARSE refuses them: said, with its reason, and
    # nothing else is tried in their place.
    asked, size_of = _sizes(refuse={_lib.CUSPARSE_SPMV_BSR_ALG1})
    with pytest.raises(ValueError, match="cuSPARSE takes no deterministic algorithm for "
                                         r".*CUSPARSE_SPMV_BSR_ALG1: CUSPARSE_STATUS_NOT_SUPP"):
        _stand_in("bsr", "N", True)._choose("SpMV", size_of)
    assert asked == [_lib.CUSPARSE_SPMV_BSR_ALG1]


def test_the_tuning_key_separates_the_modes():
    keys = {}
    for mode in (False, True):
        p = _stand_in("csr", "N", mode)
        p._matrix, p._weak = csr(4, 6), False
        p.op = N
        keys[mode] = cusparse.SpMV._tuning_key(p)
    assert keys[False] != keys[True]
    assert keys[False][-1] == {"deterministic": False, "algs": list(plan_mod.SPMV_ALGS["csr"])}
    assert keys[True][-1] == {"deterministic": True, "algs": list(plan_mod.SPMV_ALGS["csr"])}


# -- graph capture -----------------------------------------------------------------------------
def test_capture_refuses_plans_and_host_copies_before_any_c_call(no_c):
    A = csr(4, 6)
    _ffi.begin_capture_block()
    try:
        with pytest.raises(CaptureError, match="planning spmv"):
            cusparse.spmv(A, fake((6,)))
        with pytest.raises(CaptureError, match="planning spmm"):
            cusparse.spmm(A, fake((6, 2)))
        with pytest.raises(CaptureError, match="from_scipy .*host memory"):
            cusparse.from_scipy(sp.eye(3, format="csr", dtype=F32))
    finally:
        _ffi.end_capture_block()
    assert not [e for e in cl.plan_cache().entries("cusparse")
                if e.key["matrix"] == A.token], "a refused call left a plan cached"


class _Recorder:
    """What an execution touches, in order, with stand-ins for the library, the driver, the
    pool and the handle cache (no GPU)."""

    def __init__(self):
        self.events = []

    def pool_allocate(self, n, s):
        self.events.append(("allocate", n, s))
        rec = self

        class Buffer:
            ptr = 0x1000

            def close(self):
                rec.events.append(("free", s))
        return Buffer()


@pytest.fixture
def planned(monkeypatch):
    """``make(kind, workspace)``: a planned SpMV or SpMM over arrays on a stand-in device,
    its calls recorded; returns ``(plan, recorder, stream, arrays)``."""
    rec = _Recorder()

    class Pool:
        allocate = staticmethod(rec.pool_allocate)

    class Device:
        ordinal = 0
        compute_capability = (9, 0)
        raw_context = 7
        memory_pool = Pool()

    class Stream:
        raw_handle = 0xABC

    class Function:
        def __init__(self, name):
            self.name = name

        def __call__(self, *args):
            rec.events.append((self.name, *args))
            return 0

    class Library:
        def __getattr__(self, name):
            return Function(name)

    class Driver:
        def cuCtxSetCurrent(self, ctx):
            rec.events.append(("context", ctx))

    dev, stream = Device(), Stream()

    def handle(device, s):
        assert device is dev
        rec.events.append(("handle", s))
        return "h"

    monkeypatch.setattr(plan_mod, "cusparse_handle", handle)
    monkeypatch.setattr(plan_mod._drv, "get", Driver)
    monkeypatch.setattr(plan_mod._lib, "get", Library)
    monkeypatch.setattr(plan_mod, "as_stream", lambda s, device=None, what="": stream)

    def make(kind, workspace):
        A = cusparse.CSR(fake((5,), I32, device=dev), fake((8,), I32, device=dev),
                         fake((8,), device=dev), (4, 6))
        if kind == "SpMV":
            p = cusparse.SpMV(A)
            arrays = (fake((6,), device=dev), fake((4,), device=dev))
            setter = "cusparseDnVecSetValues"
        else:
            arrays = (fake((6, 3), device=dev), fake((4, 3), device=dev))
            p = cusparse.SpMM(A, arrays[0], arrays[1])
            setter = "cusparseDnMatSetValues"
        # What _sizes leaves behind: the descriptors, the call's parts, the candidates.
        p._candidates = [{"name": "X", "id": "X", "alg": 3, "workspace": workspace}]
        p._call = (Function(f"cusparse{kind}"), f"cusparse{kind}")
        ops = (N,) if kind == "SpMV" else (N, N)
        p._head, p._mid, p._tail = ops, ("A", "d0"), ("d1", p._cuda)
        p._bind([type("D", (), {"raw": "d0"}), type("D", (), {"raw": "d1"})], setter)
        p._select(0)
        p._choice, p._planned = 0, True
        return p, rec, stream, arrays
    return make


def test_an_execution_queues_with_the_least_it_can(planned, monkeypatch):
    p, rec, s, (x, y) = planned("SpMV", 256)
    one, zero = p._units
    p.execute(x, y)
    # The pool's buffer on the call's stream, the context, the handle bound to that stream,
    # both addresses written (none known yet), the call with the plan's constant scalars,
    # the buffer given back to the same stream once the call is queued.
    assert rec.events == [("allocate", 256, s), ("context", 7), ("handle", 0xABC),
                          ("cusparseDnVecSetValues", "d0", x.address),
                          ("cusparseDnVecSetValues", "d1", y.address),
                          ("cusparseSpMV", "h", N, one, "A", "d0", zero, "d1", p._cuda, 3,
                           0x1000), ("free", s)]
    # The same addresses again: no descriptor write; a new out: only its descriptor.
    rec.events.clear()
    p.execute(x, y, alpha=1, beta=0)
    assert [e[0] for e in rec.events] == ["allocate", "context", "handle", "cusparseSpMV",
                                          "free"]
    rec.events.clear()
    y2 = fake((4,), device=y.device)
    p.execute(x, y2)
    assert [e for e in rec.events if e[0] == "cusparseDnVecSetValues"] == [
        ("cusparseDnVecSetValues", "d1", y2.address)]
    # Other scalars: host scalars of the compute type, alive for this call.
    seen = []

    def call(h, op, a, sp, xd, b, yd, *rest):
        seen.append((a, b, ctypes.c_float.from_address(a).value,
                     ctypes.c_float.from_address(b).value))
        return 0
    p._call = (call, "cusparseSpMV")
    p.execute(x, y2, alpha=2.0, beta=0.5)
    (a, b, av, bv), = seen
    assert a not in (one, zero) and b not in (one, zero) and (av, bv) == (2.0, 0.5)
    # Bad input is refused before anything is touched.
    rec.events.clear()
    with pytest.raises(ValueError, match="SpMV.execute: x has length 4"):
        p.execute(y, y2)
    with pytest.raises(TypeError, match="SpMV.execute: alpha must be a number"):
        p.execute(x, y2, alpha=True)
    with pytest.raises(ValueError, match="beta is 0.5 but no out was given"):
        p.execute(x, beta=0.5)
    assert rec.events == []


def test_a_workspace_of_zero_makes_no_pool_call(planned):
    p, rec, s, (b, c) = planned("SpMM", 0)
    p.execute(b, c)
    assert [e[0] for e in rec.events] == ["context", "handle", "cusparseDnMatSetValues",
                                          "cusparseDnMatSetValues", "cusparseSpMM"]
    assert rec.events[-1][-2:] == (3, None)      # the algorithm, no buffer


def test_a_failed_descriptor_write_is_not_remembered(planned, monkeypatch):
    p, rec, s, (x, y) = planned("SpMV", 0)
    fail = [True]
    setter = p._set[0]

    def flaky(raw, ptr):
        if fail[0]:
            return 3
        return setter(raw, ptr)
    p._set = (flaky, p._set[1])
    with pytest.raises(CusparseError, match="cusparseDnVecSetValues"):
        p.execute(x, y)
    assert p._last == [None, None] and not p._lock.locked()
    fail[0] = False
    rec.events.clear()
    p.execute(x, y)
    assert [e[0] for e in rec.events].count("cusparseDnVecSetValues") == 2


def test_threads_sharing_a_plan_write_each_call_its_own_addresses(planned):
    """Many threads, one plan, each with its own operands: every call reaches the library
    with the descriptors holding that call's addresses (the writes and the call are one
    step under the plan's lock)."""
    p, rec, s, (x, _) = planned("SpMV", 0)
    held = {}
    calls = []

    def setter(raw, ptr):
        held[raw] = ptr
        return 0

    def call(*args):
        calls.append((held["d0"], held["d1"], threading.get_ident()))
        return 0
    p._set = (setter, p._set[1])
    p._call = (call, "cusparseSpMV")
    outs = [fake((4,), device=x.device) for _ in range(8)]
    expected = {}
    barrier = threading.Barrier(8)

    def work(i):
        expected[threading.get_ident()] = outs[i].address
        barrier.wait()
        for _ in range(200):
            p.execute(x, outs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1600
    assert all(xa == x.address and ya == expected[tid] for xa, ya, tid in calls)


def test_dense_layouts():
    assert dense_layout(fake((4, 3)), "b", "t") == (_lib.CUSPARSE_ORDER_ROW, 3)
    assert dense_layout(fake((4, 3), strides=(4, 16)), "b", "t") == (_lib.CUSPARSE_ORDER_COL, 4)
    assert dense_layout(fake((4, 3), strides=(32, 4)), "b", "t") == (_lib.CUSPARSE_ORDER_ROW, 8)


def test_closed_matrix_is_a_clear_error_and_drops_its_plans(no_c):
    A = csr()

    class _Plan:
        closed = False

        def usable(self):
            return not self.closed

        def close(self):
            self.closed = True

    key = (cusparse.SPARSE_KEY, "spmv", A.token, None, "N", None, None, DEV)
    plan = front.insert(key, _Plan(), None)
    A._remember(key)
    assert key in cache
    A.close()
    assert A.closed and plan.closed and key not in cache
    A.close()       # twice is harmless
    assert "(closed)" in repr(A)
    with pytest.raises(ClosedError, match="CSR is closed"):
        cusparse.SpMV(A)
    with pytest.raises(ClosedError):
        cusparse.spmv(A, fake((4,)))
    with pytest.raises(ClosedError):
        A.to_dense()


def test_tokens_are_never_reused(no_c):
    seen = {csr().token for _ in range(5)}
    assert len(seen) == 5


# -- Blocked-ELL ---------------------------------------------------------------------------------
F16 = np.dtype(np.float16)
BlockedELL = cusparse.BlockedELL


def test_blocked_ell_indices_are_checked_naming_the_slot():
    structure.check_blocked_ell(np.array([[0, 2, -1], [1, -1, -1], [-1, -1, -1]]), 3, "t")
    structure.check_blocked_ell(np.zeros((0, 1), np.int32), 3, "t")
    cases = [([[0, 3]], r"ell_col_ind\[0, 1\] is 3; a block column index is in \[0, 3\)"),
             ([[-2, 0]], r"ell_col_ind\[0, 0\] is -2"),
             ([[0, -1], [-1, 1]], "block row 1 stores block column 1 in slot 1 after an empty "
                                  "slot .-1. in slot 0; the -1 padding must come after"),
             ([[2, 1]], "block row 0 is not canonical: block column 1 in slot 1 follows 2 "
                        ".unsorted."),
             ([[1, 1]], "follows 1 .a duplicate."),
             ([0, 1], "ell_col_ind must be 2-D")]
    for ell, msg in cases:
        with pytest.raises(ValueError, match=msg):
            structure.check_blocked_ell(np.array(ell), 3, "t")


@st.composite
def _block_matrices(draw):
    """A scipy BSR matrix of square blocks with non-zero values, its blocks stored out of
    order and partly twice (as scipy may hold it), with the dense matrix it means."""
    b = draw(st.sampled_from([1, 2, 3, 4]))
    brows, bcols = draw(st.integers(0, 7)), draw(st.integers(1, 7))
    n = draw(st.integers(0, 25))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    r = rng.integers(0, brows, n) if brows else np.zeros(0, np.int64)
    c = rng.integers(0, bcols, r.size)
    blocks = rng.uniform(0.5, 1.0, (r.size, b, b)) * rng.choice((-1.0, 1.0), (r.size, b, b))
    order = np.argsort(r, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=brows))])
    m = sp.bsr_matrix((blocks[order], c[order].astype(np.int32), indptr.astype(np.int32)),
                      shape=(brows * b, bcols * b))
    dense = np.zeros((brows, b, bcols, b))
    np.add.at(dense, (r, slice(None), c, slice(None)), blocks)
    return m, dense.reshape(brows * b, bcols * b), b


@settings(max_examples=120, deadline=None)
@given(_block_matrices())
def test_blocked_ell_host_conversions_hold_the_matrix(case):
    m, dense, b = case
    rows, cols = m.shape
    indptr, indices, data = structure.canonical_compressed(
        m.indptr, m.indices, m.data, rows // b, cols // b, "t", "block row")
    ell, values = structure.bsr_to_blocked_ell(indptr, indices, data, rows // b)
    # Canonical, padded to the widest block row (at least one slot), int32.
    structure.check_blocked_ell(ell, cols // b, "t")
    width = max(int(np.diff(indptr).max(initial=0)), 1)
    assert ell.shape == (rows // b, width) and ell.dtype == np.int32
    assert values.shape == (rows, width * b)
    # Duplicates are summed in another order than the reference's: last bits differ.
    close = {"rtol": 1e-12, "atol": 1e-12}
    np.testing.assert_allclose(structure.blocked_ell_to_dense(ell, values, b, m.shape), dense,
                               **close)
    back = sp.bsr_matrix(structure.blocked_ell_to_bsr(ell, values, b)[::-1], shape=m.shape,
                         blocksize=(b, b))
    np.testing.assert_allclose(back.toarray(), dense, **close)
    # The pattern of the dense matrix's non-zero blocks is the same (a block that summed to
    # exactly zero is the one exception, and the draws cannot make one), and its values
    # under that pattern are the same values.
    pattern = structure.blocked_ell_pattern(dense, b)
    assert np.array_equal(pattern, ell)
    np.testing.assert_allclose(structure.dense_to_blocked_ell_values(dense, ell, b), values,
                               **close)


def test_blocked_ell_values_for_a_given_pattern():
    dense = np.arange(1, 25, dtype=F32).reshape(4, 6)
    ell = np.array([[1, -1], [0, 2]], np.int32)
    vals = structure.dense_to_blocked_ell_values(dense, ell, 2)
    # Block row 0 keeps only block column 1 (the rest of the row is outside the pattern);
    # its empty slot holds zeros.
    np.testing.assert_array_equal(vals, [[3, 4, 0, 0], [9, 10, 0, 0],
                                         [13, 14, 17, 18], [19, 20, 23, 24]])
    assert vals.dtype == F32
    want = np.zeros((4, 6), F32)
    want[:2, 2:4] = dense[:2, 2:4]
    want[2:, :2], want[2:, 4:] = dense[2:, :2], dense[2:, 4:]
    np.testing.assert_array_equal(structure.blocked_ell_to_dense(ell, vals, 2, (4, 6)), want)


def ell(rows=4, cols=6, b=2, slots=2, idx=I32, val=F16, device=DEV):
    return BlockedELL(fake((rows // b, slots), idx, device=device),
                      fake((rows, slots * b), val, device=device), (rows, cols), b)


def test_blocked_ell_matrices_are_checked(no_c):
    E = ell()
    assert (E.shape, E.dtype, E.index_dtype, E.block, E.ell_cols, E.slots, E.nnz,
            E.format) == ((4, 6), F16, I32, 2, 4, 2, 16, "blocked_ell")
    assert not E.owned
    assert "BlockedELL 4x6 float16, 16 stored, int32 indices, borrowed" in repr(E)
    assert "2x2 blocks, 2 slot(s) per block row" in repr(E)
    for dt in (F32, F64):
        assert ell(val=dt).dtype == dt
    with pytest.raises(TypeError, match="ell_col_ind has dtype int64; cuSPARSE's Blocked-ELL "
                                        "takes int32 block column indices only"):
        ell(idx=I64)
    with pytest.raises(TypeError, match="values has dtype complex64; supported: float16"):
        ell(val=np.complex64)
    with pytest.raises(ValueError, match="block_size must be at least 1, not 0"):
        BlockedELL(fake((2, 2), I32), fake((4, 4)), (4, 4), 0)
    for bad in (True, 2.0, "2"):
        with pytest.raises(TypeError, match="BlockedELL: block_size must be an int"):
            BlockedELL(fake((2, 2), I32), fake((4, 4)), (4, 4), bad)
    with pytest.raises(ValueError, match=r"shape \(4, 5\) is not a multiple of the block "
                                         "size 2"):
        BlockedELL(fake((2, 2), I32), fake((4, 4)), (4, 5), 2)
    with pytest.raises(ValueError, match="values has 6 rows; the matrix has 4"):
        BlockedELL(fake((2, 2), I32), fake((6, 4)), (4, 4), 2)
    with pytest.raises(ValueError, match="values has 3 columns; it needs a positive multiple "
                                         "of the block size 2"):
        BlockedELL(fake((2, 2), I32), fake((4, 3)), (4, 4), 2)
    with pytest.raises(ValueError, match=r"ell_col_ind has shape \(2, 2\); values of 4 x 2 "
                                         r"in 2 x 2 blocks need \(2, 1\)"):
        BlockedELL(fake((2, 2), I32), fake((4, 2)), (4, 4), 2)
    with pytest.raises(ValueError, match="ell_col_ind must have 2 dimensions"):
        BlockedELL(fake((2,), I32), fake((4, 2)), (4, 4), 2)
    with pytest.raises(ValueError, match="values must be contiguous"):
        BlockedELL(fake((2, 1), I32), fake((4, 2), strides=(16, 4)), (4, 4), 2)
    odd = fake((4, 2))
    odd = DeviceArray._view(odd.address + 2, odd.shape, odd.strides, dtypes.lookup(F32), DEV,
                            None, None)
    with pytest.raises(ValueError, match="values at 0x[0-9a-f]+ is not aligned to its 4-byte "
                                         "elements"):
        BlockedELL(fake((2, 1), I32), odd, (4, 4), 2)


def test_blocked_ell_from_scipy_copies_canonical_padded_blocks(copied):
    # Block row 0 holds block columns 2 then 0 (unsorted), block row 1 none, block row 2
    # block column 1 twice (summed).
    blocks = np.arange(1, 17, dtype=F64).reshape(4, 2, 2)
    m = sp.bsr_matrix((blocks, np.array([2, 0, 1, 1]), np.array([0, 2, 2, 4])), shape=(6, 6))
    BlockedELL.from_scipy(m)
    assert copied["cls"] is BlockedELL and copied["block"] == 2 and copied["shape"] == (6, 6)
    np.testing.assert_array_equal(copied["ell_col_ind"], [[0, 2], [-1, -1], [1, -1]])
    assert copied["ell_col_ind"].dtype == I32 and copied["values"].dtype == F64
    np.testing.assert_array_equal(structure.blocked_ell_to_dense(
        copied["ell_col_ind"], copied["values"], 2, (6, 6)), m.toarray())
    # Any format, cut into blocks of block_size; 16-bit values rounded from scipy's.
    BlockedELL.from_scipy(m.tocsr(), 3, dtype=np.float16)
    assert copied["block"] == 3 and copied["values"].dtype == F16
    np.testing.assert_array_equal(structure.blocked_ell_to_dense(
        copied["ell_col_ind"], copied["values"], 3, (6, 6)), m.toarray().astype(F16))
    with pytest.raises(ValueError, match="block_size is required for a csr matrix"):
        BlockedELL.from_scipy(m.tocsr())
    with pytest.raises(ValueError, match="block_size is required for a bsr matrix"):
        BlockedELL.from_scipy(sp.bsr_matrix(np.ones((4, 4), F32), blocksize=(2, 1)))
    with pytest.raises(ValueError, match=r"shape \(6, 6\) is not a multiple of the block size 4"):
        BlockedELL.from_scipy(m, 4)
    with pytest.raises(TypeError, match="dtype complex128; cuSPARSE's Blocked-ELL SpMM takes "
                                        "real values"):
        BlockedELL.from_scipy(m.astype(np.complex128))
    with pytest.raises(TypeError, match="dtype int8 is not a Blocked-ELL value type"):
        BlockedELL.from_scipy(m, dtype=np.int8)
    with pytest.raises(TypeError, match="matrix must be a scipy.sparse matrix"):
        BlockedELL.from_scipy(np.eye(4))


def test_blocked_ell_from_host_dense(copied):
    dense = np.zeros((4, 6), F32)
    dense[0, 3] = dense[3, 0] = dense[2, 5] = 1.0
    BlockedELL.from_dense(dense, 2)
    np.testing.assert_array_equal(copied["ell_col_ind"], [[1, -1], [0, 2]])
    np.testing.assert_array_equal(structure.blocked_ell_to_dense(
        copied["ell_col_ind"], copied["values"], 2, (4, 6)), dense)
    # A pattern given: what lies outside it is left out.
    BlockedELL.from_dense(dense, 2, ell_col_ind=[[1], [2]])
    np.testing.assert_array_equal(copied["ell_col_ind"], [[1], [2]])
    assert structure.blocked_ell_to_dense(copied["ell_col_ind"], copied["values"], 2,
                                          (4, 6))[3, 0] == 0
    with pytest.raises(ValueError, match="the -1 padding must come after"):
        BlockedELL.from_dense(dense, 2, ell_col_ind=[[-1, 1], [0, 2]])
    with pytest.raises(ValueError, match=r"ell_col_ind has shape \(3, 1\); 2 block rows"):
        BlockedELL.from_dense(dense, 2, ell_col_ind=[[0], [1], [2]])
    with pytest.raises(TypeError, match="ell_col_ind has dtype float64"):
        BlockedELL.from_dense(dense, 2, ell_col_ind=[[0.0], [1.0]])
    with pytest.raises(TypeError, match="x's dtype int32 is not a Blocked-ELL value type"):
        BlockedELL.from_dense(dense.astype(np.int32), 2)
    with pytest.raises(ValueError, match="not a multiple of the block size 4"):
        BlockedELL.from_dense(dense, 4)
    with pytest.raises(ValueError, match="x must be 2-D"):
        BlockedELL.from_dense(dense[0], 2)


def test_blocked_ell_is_refused_where_cusparse_does_not_take_it(no_c):
    E, S = ell(4, 4), ell(4, 4, val=F32)
    b = fake((4, 3), F16)
    with pytest.raises(ValueError, match="SpMV: A is Blocked-ELL, which cuSPARSE's SpMV does "
                                         "not take"):
        cusparse.SpMV(E)
    with pytest.raises(ValueError, match="SpMV: A is Blocked-ELL"):
        cusparse.spmv(E, fake((4,), F16))
    with pytest.raises(ValueError, match="C is blocked_ell; cuSPARSE samples CSR and BSR"):
        cusparse.SDDMM(fake((4, 2), F16), fake((2, 4), F16), E)
    with pytest.raises(ValueError, match="A is blocked_ell; cuSPARSE's SpGEMM takes CSR"):
        cusparse.SpGEMM(S, S)
    with pytest.raises(ValueError, match="A is blocked_ell; cuSPARSE's triangular solves take"):
        cusparse.SpSV(S)
    with pytest.raises(ValueError, match="cuSPARSE's Blocked-ELL SpMM takes op_a='N' only"):
        cusparse.SpMM(E, b, op_a="T")
    with pytest.raises(ValueError, match="does not take op_b='H'; its values are real"):
        cusparse.SpMM(E, fake((3, 4), F16), op_b="H")
    with pytest.raises(ValueError, match="no deterministic algorithm .*cuSPARSE documents no "
                                         "Blocked-ELL SpMM algorithm as deterministic"):
        cusparse.SpMM(E, b, deterministic=True)
    with pytest.raises(ValueError, match="alg 'CUSPARSE_SPMM_CSR_ALG1' is not offered for "
                                         "blocked_ell"):
        cusparse.SpMM(E, b, alg="CUSPARSE_SPMM_CSR_ALG1")
    with pytest.raises(TypeError, match="b has dtype float32"):
        cusparse.SpMM(E, fake((4, 3), F32))
    with pytest.raises(TypeError, match="A must be a cusparse sparse matrix .*BlockedELL"):
        cusparse.SpMM(np.eye(4), b)

    class Turing(_Dev):
        compute_capability = (7, 5)

    old = Turing()
    with pytest.raises(ValueError, match="Blocked-ELL SpMM of float32 runs on tensor cores of "
                                         "compute capability 8.0 or later; device 0 has 7.5"):
        cusparse.SpMM(ell(4, 4, val=F32, device=old), fake((4, 3), F32, device=old))
    # float16 needs 7.0 only.
    plan_mod.check_blocked_ell_spmm(ell(4, 4, device=old), N)


def test_blocked_ell_descriptor(monkeypatch):
    calls = []

    class Library:
        def cusparseCreateBlockedEll(self, raw, *args):
            calls.append(args)
            return 0

        def cusparseDestroySpMat(self, raw):
            calls.append("destroy")
            return 0

    monkeypatch.setattr(matrix_mod._lib, "get", Library)
    E = ell(8, 6, 2, 3, val=F32)
    with matrix_mod.descriptor(E):
        pass
    (args, done), = [calls]
    assert args == (8, 6, 2, 6, E.arrays["ell_col_ind"].address, E.arrays["values"].address,
                    _lib.CUSPARSE_INDEX_32I, _lib.CUSPARSE_INDEX_BASE_ZERO,
                    dtypes.lookup(F32).cuda)
    assert done == "destroy"


# -- status texts, errors, version, loader -------------------------------------------------------
def test_status_texts_are_cusparse_own():
    assert _base.error_name(3) == "CUSPARSE_STATUS_INVALID_VALUE"
    assert cusparse.error_name(10) == "CUSPARSE_STATUS_NOT_SUPPORTED"
    assert cusparse.error_string(3)
    with pytest.raises(TypeError, match="error_name: status must be an int"):
        cusparse.error_name("3")


def test_errors_carry_the_message_and_pickle():
    with pytest.raises(CusparseError) as info:
        _base.raise_for(3, "cusparseSpMV", "<SpMV ...>")
    e = info.value
    assert (e.library, e.status, e.name, e.function) == ("cusparse", 3,
                                                         "CUSPARSE_STATUS_INVALID_VALUE",
                                                         "cusparseSpMV")
    assert cusparse.error_string(3) in str(e) and "<SpMV ...>" in str(e)
    back = pickle.loads(pickle.dumps(e))
    assert (type(back), back.status, str(back)) == (CusparseError, 3, str(e))
    assert isinstance(e, cl.errors.StatusError)


def test_version():
    major, minor, patch = cusparse.version()
    assert major >= 12
    assert cusparse.version_int() == major * 1000 + minor * 100 + patch


def test_loader_entry_and_wheels():
    assert "libcusparse.so.12" in _loader.LIBRARIES["cusparse"].sonames
    assert _loader.WHEELS["cusparse"] == ("nvidia-cusparse", "nvidia-cusparse-cu12")


def test_the_key_schema():
    assert cusparse.SPARSE_KEY.name == "cusparse"
    assert "matrix" in cusparse.SPARSE_KEY.fields and "stream" in cusparse.SPARSE_KEY.fields
