"""cuSPARSE against float64 scipy.sparse: SpMV and SpMM on every format (CSR, CSC, COO, BSR),
SDDMM, SpGEMM, the triangular solves, the conversions (from scipy matrices stored out of order
too); the choice of algorithms (every one by default, cuSPARSE's default untuned; only the
deterministic ones on request); plans from many threads (bitwise equal to serial results with
deterministic algorithms, within the tolerance with the default ones) and under CUDA graph
capture; autotuning and the plans' lifetime.  Blocked-ELL has test_blocked_ell.py.

Bounds: a product's error is judged element-wise against ``|A| @ |x|`` (the size of the terms
each sum adds; ``assert_close(..., scale=...)``), relative 1e-5 in float32 and the float64
default; outputs given through ``out=`` are poisoned (NaN) first, so an element left
unwritten fails.  Each drawn problem is called three times with fresh dense inputs, so the
second and third calls take the cached plan.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cusparse
from cudalibs import testing as T

from .._threads import in_threads, match_serial

GPU = settings(max_examples=30, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])
F32, F64, C128 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex128)
FORMATS = ("csr", "csc", "coo", "bsr")
CALLS = 3
SEEDS = st.integers(0, 2**32 - 1)


def _rtol(dt):
    return 1e-5 if dt in (F32, np.dtype(np.complex64)) else None


def _random(rows, cols, density, dt, rng, fmt="csr", block=2):
    """A canonical scipy matrix of ``fmt`` with values in [-1, 1] (non-zero)."""
    m = sp.random(rows, cols, density=density, format="csr", random_state=rng,
                  data_rvs=lambda n: rng.uniform(0.1, 1.0, n) * rng.choice((-1, 1), n))
    m = m.astype(dt)
    if dt.kind == "c":
        m = m + 1j * sp.random(rows, cols, density=density, format="csr", random_state=rng)
        m = m.astype(dt)
    m.sum_duplicates()
    if fmt == "bsr":
        b = m.tobsr(blocksize=(block, block))
        b.sort_indices()        # tobsr leaves a block row's block columns as it meets them
        return b
    if fmt == "coo":
        c = m.tocoo()
        order = np.lexsort((c.col, c.row))
        return sp.coo_matrix((c.data[order], (c.row[order], c.col[order])), shape=c.shape)
    return m.asformat(fmt)


def _messy(host, rng):
    """The matrix of canonical ``host`` (CSR, CSC, COO or BSR) stored as scipy may hold it:
    entries (BSR: blocks) out of order within their rows (columns), and, but for BSR, one
    entry split into two duplicates whose sum is exactly the entry."""
    fmt = host.format
    if fmt == "bsr":
        # Each block row's blocks reversed: block columns unsorted, as tobsr may leave them.
        order = np.concatenate([np.arange(hi - 1, lo - 1, -1)
                                for lo, hi in zip(host.indptr[:-1], host.indptr[1:])] + [[]])
        order = order.astype(np.int64)
        return sp.bsr_matrix((host.data[order], host.indices[order], host.indptr.copy()),
                             shape=host.shape)
    if fmt == "coo":
        r, c, d = host.row, host.col, host.data.copy()
        if d.size:
            half = d[0] / 2
            r, c, d = np.append(r, r[0]), np.append(c, c[0]), np.append(d, d[0] - half)
            d[0] = half
        p = rng.permutation(d.size)
        return sp.coo_matrix((d[p], (r[p], c[p])), shape=host.shape)
    indptr, indices, data = host.indptr.copy(), host.indices.copy(), host.data.copy()
    for lo, hi in zip(indptr[:-1], indptr[1:]):
        p = lo + rng.permutation(hi - lo)
        indices[lo:hi], data[lo:hi] = indices[p], data[p]
    if data.size:
        first = int(np.searchsorted(indptr, 0, side="right") - 1)   # the slice of entry 0
        half = data[0] / 2
        indices = np.insert(indices, 1, indices[0])
        data = np.insert(data, 1, data[0] - half)
        data[0] = half
        indptr[first + 1:] += 1
    return type(host)((data, indices, indptr), shape=host.shape)


def _vector(n, dt, rng):
    return T.random_array((n,), dt, rng=rng)


def _poisoned(shape, dt, stream=None):
    return cl.full(shape, T.poison_value(dt), dt, stream=stream)


def _need_bsr_spmv():
    if cusparse.version() < (12, 6, 0):
        pytest.skip("SpMV on BSR needs cuSPARSE 12.6 (CUDA 13)")


# -- SpMV ----------------------------------------------------------------------------------------
@GPU
@given(fmt=st.sampled_from(FORMATS), dt=st.sampled_from([F32, F64]), op=st.sampled_from("NT"),
       brows=st.integers(1, 40), bcols=st.integers(1, 40), density=st.floats(0, 0.5),
       beta=st.sampled_from([0.0, 0.5]), seed=SEEDS)
def test_spmv_matches_scipy(device, fmt, dt, op, brows, bcols, density, beta, seed):
    if fmt == "bsr":
        _need_bsr_spmv()
    rng = np.random.default_rng(seed)
    block = 2 if fmt == "bsr" else 1
    rows, cols = brows * block, bcols * block
    host = _random(rows, cols, density, dt, rng, fmt, block)
    A = cusparse.from_scipy(host)
    assert isinstance(A, cusparse.SparseMatrix) and A.format == fmt
    ref = host.toarray().astype(np.float64)
    if op == "T":
        ref = ref.T
    if fmt == "bsr" and op == "T":
        with pytest.raises(ValueError, match="BSR SpMV takes op='N' only"):
            cusparse.spmv(A, cl.to_device(_vector(ref.shape[1], dt, rng)), op=op)
        A.close()
        return
    for _ in range(CALLS):
        x = _vector(ref.shape[1], dt, rng)
        y0 = _vector(ref.shape[0], dt, rng)
        out = cl.to_device(y0) if beta else _poisoned((ref.shape[0],), dt)
        got = cusparse.spmv(A, cl.to_device(x), out, alpha=1.5, beta=beta, op=op)
        want = 1.5 * ref @ x + beta * y0
        scale = 1.5 * np.abs(ref) @ np.abs(x) + abs(beta) * np.abs(y0)
        T.assert_close(got, want, dt, rtol=_rtol(dt), scale=scale, msg=f"{fmt} op={op}")
    A.close()


def test_spmv_complex_and_conjugate_transpose(device, rng):
    host = _random(30, 20, 0.3, C128, rng)
    A = cusparse.from_scipy(host)
    x = _vector(30, C128, rng)
    got = cusparse.spmv(A, cl.to_device(x), op="H")
    T.assert_close(got, host.toarray().conj().T @ x, C128,
                   scale=np.abs(host.toarray()).T @ np.abs(x))


def test_spmv_plan_algorithms_and_autotune(device, rng):
    host = _random(500, 400, 0.05, F32, rng)
    A = cusparse.from_scipy(host)
    # deterministic=True: the one algorithm cuSPARSE documents as deterministic for CSR
    # with op "N".
    plan = cusparse.SpMV(A, deterministic=True).plan()
    assert [c["name"] for c in plan.candidates] == ["CUSPARSE_SPMV_CSR_ALG2"]
    assert plan.deterministic
    plan.close()
    # By default every algorithm, cuSPARSE's default first: what runs untuned.
    plan = cusparse.SpMV(A).plan()
    assert plan.candidates[0]["name"] == "CUSPARSE_SPMV_ALG_DEFAULT" and plan.choice == 0
    assert len(plan.candidates) == len(cusparse.plan.SPMV_ALGS["csr"])
    assert plan.deterministic is False
    plan.autotune(force=True)
    assert plan.tuned and "autotuned" in repr(plan)
    x = _vector(400, F32, rng)
    for i in range(len(plan.candidates)):
        plan.select(i)
        got = plan.execute(cl.to_device(x))
        T.assert_close(got, host.toarray().astype(np.float64) @ x, F32, rtol=1e-5,
                       scale=np.abs(host.toarray()) @ np.abs(x), msg=plan.candidates[i]["name"])
    plan.close()


def test_deterministic_choices(device, rng):
    host = _random(2000, 2000, 0.01, F32, rng)
    A = cusparse.from_scipy(host)
    C = cusparse.from_scipy(host.tocoo())
    x = cl.to_device(_vector(2000, F32, rng))
    b = T.random_array((2000, 16), F32, rng=rng)
    b, bf = cl.to_device(b), cl.to_device(np.asfortranarray(b))   # COO_ALG2: column-major
    cases = [(cusparse.SpMV(A, deterministic=True), "CUSPARSE_SPMV_CSR_ALG2", (x,)),
             (cusparse.SpMV(C, deterministic=True), "CUSPARSE_SPMV_COO_ALG2", (x,)),
             (cusparse.SpMM(A, b, deterministic=True), "CUSPARSE_SPMM_CSR_ALG3", (b,)),
             (cusparse.SpMM(C, bf, deterministic=True), "CUSPARSE_SPMM_COO_ALG2", (bf,))]
    for plan, name, args in cases:
        plan.autotune()
        assert [c["name"] for c in plan.candidates] == [name] and plan.deterministic, repr(plan)
        first = plan.execute(*args).get()
        for _ in range(3):
            np.testing.assert_array_equal(plan.execute(*args).get(), first, err_msg=name)
        plan.close()
    # A transposed product has no deterministic algorithm: asked for, it is refused; by
    # default the plan runs cuSPARSE's default and says it is not deterministic.
    with pytest.raises(ValueError, match="no deterministic algorithm"):
        cusparse.SpMV(A, op="T", deterministic=True)
    plan = cusparse.SpMV(A, op="T").plan()
    assert plan.deterministic is False
    assert plan.candidates[0]["name"] == "CUSPARSE_SPMV_ALG_DEFAULT"
    T.assert_close(plan.execute(x), host.toarray().T.astype(np.float64) @ x.get(), F32,
                   rtol=1e-5, scale=np.abs(host.toarray()).T @ np.abs(x.get()))
    plan.close()


# -- SpMM ----------------------------------------------------------------------------------------
@GPU
@given(fmt=st.sampled_from(FORMATS), dt=st.sampled_from([F32, F64]), op_a=st.sampled_from("NT"),
       b_major=st.sampled_from("CF"), m=st.integers(1, 24), k=st.integers(1, 24),
       n=st.integers(1, 12), density=st.floats(0, 0.5), seed=SEEDS)
def test_spmm_matches_scipy(device, fmt, dt, op_a, b_major, m, k, n, density, seed):
    rng = np.random.default_rng(seed)
    block = 2 if fmt == "bsr" else 1
    rows, cols = (m * block, k * block) if op_a == "N" else (k * block, m * block)
    host = _random(rows, cols, density, dt, rng, fmt, block)
    A = cusparse.from_scipy(host)
    ref = host.toarray().astype(np.float64)
    if op_a == "T":
        ref = ref.T
    if fmt == "bsr" and op_a == "T":
        b = cl.to_device(T.random_array((ref.shape[1], n), dt, rng=rng))
        with pytest.raises(ValueError, match="BSR SpMM takes op_a='N' only"):
            cusparse.spmm(A, b, op_a=op_a)
        A.close()
        return
    for _ in range(CALLS):
        b = T.random_array((ref.shape[1], n), dt, rng=rng)
        db = cl.to_device(np.asfortranarray(b) if b_major == "F" else b)
        out = _poisoned((ref.shape[0], n), dt)
        got = cusparse.spmm(A, db, out, op_a=op_a)
        T.assert_close(got, ref @ b, dt, rtol=_rtol(dt), scale=np.abs(ref) @ np.abs(b),
                       msg=f"{fmt} op_a={op_a} B {b_major}-major")
    entries = [e for e in cl.plan_cache().entries("cusparse")
               if e.key["matrix"] == A.token]
    assert entries and entries[0].plan.tuned
    A.close()
    assert not [e for e in cl.plan_cache().entries("cusparse")
                if e.key["matrix"] == A.token], "closing the matrix left its plans cached"


def test_spmm_autotune_against_the_default(device, rng):
    host = _random(2000, 2000, 0.01, F32, rng)
    A = cusparse.from_scipy(host)
    b = cl.to_device(T.random_array((2000, 64), F32, rng=rng))
    plan = cusparse.SpMM(A, b)      # every algorithm, the default first
    cands = plan.autotune(force=True)
    assert cands[0]["name"] == "CUSPARSE_SPMM_ALG_DEFAULT"
    assert len(cands) >= 2 and all("ms" in c for c in cands)
    assert plan.time_ms <= cands[0]["ms"]       # never slower than cuSPARSE's default
    got = plan.execute(b, beta=0.0)
    ref = host.toarray().astype(np.float64)
    T.assert_close(got, ref @ b.get(), F32, rtol=1e-5, scale=np.abs(ref) @ np.abs(b.get()))
    again = cusparse.SpMM(A, b)
    again.autotune()            # the tuning store's choice, without timing
    assert again.choice == plan.choice and again.tuned
    # The deterministic mode is tuned under a key of its own: it times its own candidates
    # and never takes the default mode's choice.
    det = cusparse.SpMM(A, b, deterministic=True)
    det.autotune()
    assert [c["name"] for c in det.candidates] == ["CUSPARSE_SPMM_CSR_ALG3"]
    assert det.deterministic and det.tuned
    for p in (plan, again, det):
        p.close()


def test_the_one_shots_run_cusparse_default_untuned(device, rng):
    """spmv and spmm(autotune=False) run the first candidate, cuSPARSE's default algorithm,
    with every algorithm offered (deterministic=False); spmm autotunes among them all."""
    host = _random(300, 300, 0.05, F32, rng)
    A = cusparse.from_scipy(host)
    x = cl.to_device(_vector(300, F32, rng))
    b = cl.to_device(T.random_array((300, 8), F32, rng=rng))
    cusparse.spmv(A, x)
    cusparse.spmm(A, b, autotune=False)
    cusparse.spmm(A, b)
    plans = {(e.key["op"], e.key["ops"][2] if e.key["op"] == "spmm" else None): e.plan
             for e in cl.plan_cache().entries("cusparse") if e.key["matrix"] == A.token}
    for key in (("spmv", None), ("spmm", False)):
        p = plans[key]
        assert p.choice == 0 and not p.tuned, repr(p)
        assert p.candidates[0]["name"].endswith("_ALG_DEFAULT"), repr(p)
        assert len(p.candidates) > 1, repr(p)
    tuned = plans[("spmm", True)]
    assert tuned.tuned and len(tuned.candidates) > 1 and all("ms" in c
                                                             for c in tuned.candidates)
    A.close()


# -- SDDMM, SpGEMM, solves, conversions ------------------------------------------------------------
@GPU
@given(dt=st.sampled_from([F32, F64]), m=st.integers(1, 30), k=st.integers(1, 16),
       n=st.integers(1, 30), density=st.floats(0, 0.6), seed=SEEDS)
def test_sddmm_matches_numpy(device, dt, m, k, n, density, seed):
    rng = np.random.default_rng(seed)
    pattern = _random(m, n, density, dt, rng)
    for _ in range(CALLS):
        C = cusparse.from_scipy(pattern)
        a = T.random_array((m, k), dt, rng=rng)
        b = T.random_array((k, n), dt, rng=rng)
        cusparse.sddmm(cl.to_device(a), cl.to_device(b), C, alpha=2.0, beta=0.5)
        got = C.to_scipy()
        mask = pattern.toarray() != 0
        full = 2.0 * a.astype(np.float64) @ b + 0.5 * pattern.toarray()
        T.assert_close(got.toarray()[mask], full[mask], dt, rtol=_rtol(dt),
                       scale=(2.0 * np.abs(a) @ np.abs(b) + 0.5 * np.abs(pattern.toarray()))[mask])
        C.close()
    C = cusparse.from_scipy(pattern)
    plan = cusparse.SDDMM(cl.to_device(a), cl.to_device(b), C).plan()
    got = plan.execute(cl.to_device(a), cl.to_device(b)).to_scipy().toarray()[mask]
    T.assert_close(got, (a.astype(np.float64) @ b)[mask], dt, rtol=_rtol(dt),
                   scale=(np.abs(a) @ np.abs(b))[mask])
    plan.close()
    C.close()


@GPU
@given(dt=st.sampled_from([F32, F64]), m=st.integers(1, 40), k=st.integers(1, 40),
       n=st.integers(1, 40), density=st.floats(0, 0.4), seed=SEEDS)
def test_spgemm_matches_scipy(device, dt, m, k, n, density, seed):
    rng = np.random.default_rng(seed)
    ha, hb = _random(m, k, density, dt, rng), _random(k, n, density, dt, rng)
    A, B = cusparse.from_scipy(ha), cusparse.from_scipy(hb)
    for _ in range(CALLS):
        C = cusparse.spgemm(A, B, alpha=1.0)
        assert isinstance(C, cusparse.CSR) and C.shape == (m, n)
        got = C.to_scipy()
        ref = ha.toarray().astype(np.float64) @ hb.toarray()
        T.assert_close(got.toarray(), ref, dt, rtol=_rtol(dt),
                       scale=np.abs(ha.toarray()) @ np.abs(hb.toarray()))
        C.check()               # the product is canonical
        C.close()
    plan = cusparse.SpGEMM(A, B)
    T.assert_close(plan.execute().to_dense(), ha.toarray() @ hb.toarray(), dt, rtol=_rtol(dt),
                   scale=np.abs(ha.toarray()) @ np.abs(hb.toarray()))
    plan.close()


def _triangular(n, dt, rng, lower=True):
    m = _random(n, n, 0.2, dt, rng).toarray()
    m = np.tril(m) if lower else np.triu(m)
    np.fill_diagonal(m, 4.0 + rng.uniform(0, 1, n))      # well conditioned
    return sp.csr_matrix(m.astype(dt))


@pytest.mark.parametrize("dt", [F32, F64])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("op", ["N", "T"])
def test_triangular_solves_match_numpy(device, rng, dt, lower, op):
    n = 64
    host = _triangular(n, dt, rng, lower)
    A = cusparse.from_scipy(host)
    ref = host.toarray().astype(np.float64)
    if op == "T":
        ref = ref.T
    for _ in range(CALLS):
        x = _vector(n, dt, rng)
        got = cusparse.spsv(A, cl.to_device(x), _poisoned((n,), dt), alpha=2.0, lower=lower,
                            op=op)
        T.assert_close(ref @ got.get().astype(np.float64), 2.0 * x, dt, rtol=_rtol(dt) and 1e-4)
        b = T.random_array((n, 5), dt, rng=rng)
        got = cusparse.spsm(A, cl.to_device(b), lower=lower, op=op)
        T.assert_close(ref @ got.get().astype(np.float64), b, dt, rtol=_rtol(dt) and 1e-4)
    plan = cusparse.SpSV(A, lower=lower, op=op)
    plan2 = cusparse.SpSM(A, cl.to_device(b), lower=lower, op=op)
    T.assert_close(ref @ plan.execute(cl.to_device(x)).get().astype(np.float64), x, dt,
                   rtol=_rtol(dt) and 1e-4)
    T.assert_close(ref @ plan2.execute(cl.to_device(b)).get().astype(np.float64), b, dt,
                   rtol=_rtol(dt) and 1e-4)
    plan.close()
    plan2.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trips(device, rng, fmt):
    host = _random(20, 30, 0.3, F64, rng, fmt)
    A = cusparse.from_scipy(_messy(host, rng))      # copied canonical: the same matrix
    A.check()
    assert A.nnz == host.nnz
    back = A.to_scipy()
    assert back.format == fmt
    np.testing.assert_array_equal(back.toarray(), host.toarray())
    if fmt != "bsr":
        np.testing.assert_array_equal(A.to_dense().get(), host.toarray())
    dense = cl.to_device(host.toarray())
    D = cusparse.from_dense(dense)
    assert D.nnz == host.count_nonzero()
    np.testing.assert_array_equal(D.to_scipy().toarray(), host.toarray())
    D.check()


def test_device_arrays_borrowed_and_checked(device, rng):
    host = _random(10, 10, 0.5, F32, rng)
    arrays = [cl.to_device(v) for v in (host.indptr, host.indices, host.data)]
    A = cusparse.CSR(*arrays, host.shape, check=True)
    assert not A.owned
    x = _vector(10, F32, rng)
    T.assert_close(cusparse.spmv(A, cl.to_device(x)), host.toarray() @ x, F32, rtol=1e-5,
                   scale=np.abs(host.toarray()) @ np.abs(x))
    bad = host.indices.copy()
    row = next(r for r in range(10) if host.indptr[r + 1] - host.indptr[r] >= 2)
    k = host.indptr[row]
    bad[k], bad[k + 1] = bad[k + 1], bad[k]
    with pytest.raises(ValueError, match=f"row {row} is not canonical"):
        cusparse.CSR(arrays[0], cl.to_device(bad), arrays[2], host.shape, check=True)
    coo = host.tocoo()
    C = cusparse.COO(cl.to_device(coo.row.astype(np.int32)), cl.to_device(coo.col.astype(np.int32)),
                     cl.to_device(coo.data), coo.shape, check=True)
    T.assert_close(cusparse.spmv(C, cl.to_device(x)), host.toarray() @ x, F32, rtol=1e-5,
                   scale=np.abs(host.toarray()) @ np.abs(x))
    bsr = _random(10, 10, 0.5, F32, rng, "bsr")        # block columns sorted
    B = cusparse.BSR(*[cl.to_device(v) for v in (bsr.indptr, bsr.indices, bsr.data)],
                     bsr.shape, check=True)
    assert not B.owned
    np.testing.assert_array_equal(B.to_scipy().toarray(), bsr.toarray())
    # Borrowed arrays are not the library's to sort: unsorted block columns are refused.
    brow = next(r for r in range(5) if bsr.indptr[r + 1] - bsr.indptr[r] >= 2)
    bad = bsr.indices.copy()
    k = bsr.indptr[brow]
    bad[k], bad[k + 1] = bad[k + 1], bad[k]
    with pytest.raises(ValueError, match=f"block row {brow} is not canonical: block column "
                                         "index"):
        cusparse.BSR(cl.to_device(bsr.indptr), cl.to_device(bad), cl.to_device(bsr.data),
                     bsr.shape, check=True)
    K = cusparse.CSC(*[cl.to_device(v) for v in (host.tocsc().indptr, host.tocsc().indices,
                                                 host.tocsc().data)], host.shape, check=True)
    np.testing.assert_array_equal(K.to_scipy().toarray(), host.toarray())


def test_from_torch(device, rng):
    torch = pytest.importorskip("torch")
    host = _random(12, 9, 0.4, F32, rng)
    t = torch.tensor(host.toarray(), device="cuda")
    x = _vector(9, F32, rng)
    for sparse in (t.to_sparse_csr(), t.to_sparse_coo(), t.to_sparse_csc()):
        A = cusparse.from_torch(sparse)
        T.assert_close(cusparse.spmv(A, cl.to_device(x)), host.toarray() @ x, F32, rtol=1e-5,
                       scale=np.abs(host.toarray()) @ np.abs(x), msg=str(sparse.layout))


# -- threads, graphs, lifetime ----------------------------------------------------------------------
def test_shared_plans_from_threads_are_bitwise_serial(device, rng):
    """Threads sharing plans get the serial results bit for bit with deterministic=True: it
    runs the algorithms cuSPARSE documents as deterministic (SpMV CSR_ALG2 and COO_ALG2, SpMM
    CSR_ALG3), so any difference is a plan's state shared wrongly, not summation order."""
    host = _random(3000, 3000, 0.005, F32, rng)
    A = cusparse.from_scipy(host)
    C = cusparse.from_scipy(host.tocoo())
    xs = [cl.to_device(_vector(3000, F32, rng)) for _ in range(8)]
    bs = [cl.to_device(T.random_array((3000, 16), F32, rng=rng)) for _ in range(8)]
    spmv = cusparse.SpMV(A, deterministic=True).plan()
    calls = [lambda s, x=x, b=b: (spmv.execute(x, stream=s),
                                  cusparse.spmm(A, b, deterministic=True, stream=s),
                                  cusparse.spmv(C, x, alpha=-0.5, deterministic=True,
                                                stream=s))
             for x, b in zip(xs, bs)]
    match_serial(device, calls, repeats=6, pick=lambda t, r: ((t + r) % len(xs),))
    plans = [spmv] + [e.plan for e in cl.plan_cache().entries("cusparse")
                      if e.key["matrix"] in (A.token, C.token)]
    assert len(plans) == 3 and all(p.deterministic for p in plans), [repr(p) for p in plans]
    spmv.close()


def test_shared_default_plans_from_threads_are_right(device, rng):
    """The default (fastest) algorithms may sum in another order on every run, so threads
    sharing their plans are judged against the float64 reference within the tolerance: each
    thread, on its own stream, gets its own operands' product, whichever thread wrote the
    plan's descriptors last (a product of another thread's operands, or an unwritten out,
    would be far outside it)."""
    host = _random(3000, 3000, 0.005, F32, rng)
    ref = host.toarray().astype(np.float64)
    A = cusparse.from_scipy(host)
    C = cusparse.from_scipy(host.tocoo())
    hx = [_vector(3000, F32, rng) for _ in range(8)]
    hb = [T.random_array((3000, 16), F32, rng=rng) for _ in range(8)]
    spmv = cusparse.SpMV(A).plan()
    spmm = cusparse.SpMM(A, cl.to_device(hb[0]))
    spmm.autotune()

    def work(t, s):
        x, b = cl.to_device(hx[t], stream=s), cl.to_device(hb[t], stream=s)
        got = []
        for _ in range(6):
            y = _poisoned((3000,), F32, stream=s)
            c = _poisoned((3000, 16), F32, stream=s)
            got.append((spmv.execute(x, y, stream=s), spmm.execute(b, c, stream=s),
                        cusparse.spmv(C, x, alpha=-0.5, stream=s)))
        s.sync()
        return [tuple(g.get() for g in r) for r in got]

    for t, rounds in enumerate(in_threads(device, work)):
        for y, c, z in rounds:
            T.assert_close(y, ref @ hx[t], F32, rtol=1e-5, scale=np.abs(ref) @ np.abs(hx[t]),
                           msg=f"thread {t} spmv")
            T.assert_close(c, ref @ hb[t], F32, rtol=1e-5, scale=np.abs(ref) @ np.abs(hb[t]),
                           msg=f"thread {t} spmm")
            T.assert_close(z, -0.5 * ref @ hx[t], F32, rtol=1e-5,
                           scale=0.5 * np.abs(ref) @ np.abs(hx[t]), msg=f"thread {t} coo")
    assert spmv.deterministic is False
    spmv.close()
    spmm.close()


def test_plans_under_graph_capture(device, rng):
    s = cl.Stream(device)
    host = _random(400, 300, 0.05, F32, rng)
    A = cusparse.from_scipy(host, stream=s)
    x = cl.to_device(_vector(300, F32, rng), stream=s)
    b = cl.to_device(T.random_array((300, 8), F32, rng=rng), stream=s)
    y = cl.empty((400,), F32, stream=s)
    c = cl.empty((400, 8), F32, stream=s)
    plan = cusparse.SpMV(A).plan()

    def step():
        plan.execute(x, y, stream=s)
        cusparse.spmm(A, b, c, stream=s)

    step()                      # plans, handles and the autotune exist before the capture
    s.sync()
    with cl.graph.capture(s) as g:
        step()
    exe = g.instantiate()
    ref = host.toarray().astype(np.float64)
    for _ in range(2):
        xv, bv = _vector(300, F32, rng), T.random_array((300, 8), F32, rng=rng)
        x.copy_(xv, s)
        b.copy_(bv, s)
        y.fill(np.nan, s)
        c.fill(np.nan, s)
        exe.replay(s)
        s.sync()
        T.assert_close(y, ref @ xv, F32, rtol=1e-5, scale=np.abs(ref) @ np.abs(xv))
        T.assert_close(c, ref @ bv, F32, rtol=1e-5, scale=np.abs(ref) @ np.abs(bv))
    # What cannot be captured is refused before anything reaches the stream: SpGEMM reads
    # its product's size on the host; a first call (a plan to make) sizes buffers and times
    # algorithms; a copy from host memory would be replayed from memory that is gone.
    B = cusparse.from_scipy(host.T.tocsr(), stream=s)
    xt = cl.to_device(_vector(400, F32, rng), stream=s)
    for refused in (lambda: cusparse.spgemm(A, B, stream=s),
                    lambda: cusparse.spmv(A, xt, op="T", stream=s),
                    lambda: cusparse.from_scipy(host, stream=s)):
        with pytest.raises(cl.CaptureError):
            with cl.graph.capture(s):
                refused()
    # The stream is usable after each refusal: the captured step still replays.
    exe.replay(s)
    s.sync()
    exe.close()
    g.close()
    plan.close()
    s.close()


def test_lifetime(device, rng):
    host = _random(50, 50, 0.1, F64, rng)
    A = cusparse.from_scipy(host)
    x = cl.to_device(_vector(50, F64, rng))
    cusparse.spmv(A, x)
    keys = [e.raw_key for e in cl.plan_cache().entries("cusparse")
            if e.key["matrix"] == A.token]
    assert len(keys) == 1 and keys[0][0] is cusparse.SPARSE_KEY
    plan = cusparse.SpMV(A).plan()
    A.close()
    assert not [e for e in cl.plan_cache().entries("cusparse") if e.key["matrix"] == A.token]
    with pytest.raises(cl.ClosedError):
        plan.execute(x)
    with pytest.raises(cl.ClosedError):
        cusparse.spmv(A, x)
    plan.close()
    plan.close()
