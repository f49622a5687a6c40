"""cuSPARSE Blocked-ELL against float64 scipy.sparse: SpMM in float16, bfloat16, float32 and
float64 (B row- or column-major, op_b "N" or "T", beta 0 or not), the conversions (from scipy,
from host and device dense arrays, with and without a given pattern, from device arrays, back
to scipy, numpy and the device), the plan's algorithms, the operations cuSPARSE does not run
on Blocked-ELL refused, and one matrix in Blocked-ELL, BSR and CSR giving one product.

Bounds: judged against ``|A| @ |B|`` (``assert_close(..., scale=...)``) of the values as
stored (16-bit values rounded first): 1e-2 in float16 and bfloat16, the float64 default, and
for float32 TF32's 1e-3 -- cuSPARSE multiplies float32 Blocked-ELL on tensor cores at TF32
precision (relative errors near 1e-4 on an H100, where BSR and CSR give float32's 1e-7; the
three-format test shows both); outputs given through ``out=`` are poisoned (NaN) first.
Each drawn problem is called three times with fresh dense inputs, so the second and third
calls take the cached (autotuned) plan.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cusparse
from cudalibs import testing as T

from .._sizes import gpu_settings

GPU = gpu_settings(30)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BF16 = cl.dtypes.bfloat16
DTYPES = [F16, F32, F64] + ([np.dtype(BF16)] if BF16 is not None else [])
CALLS = 3
SEEDS = st.integers(0, 2**32 - 1)


def _tol(dt) -> dict:
    """``assert_close``'s tolerance arguments for a Blocked-ELL product of ``dt``: float32 is
    computed at TF32 precision."""
    return {"compute": "tf32"} if dt == F32 else {}


def _blocks(brows, bcols, b, density, rng):
    """A canonical scipy BSR matrix of ``b x b`` blocks with non-zero float64 values (every
    block row may be empty, full, or in between)."""
    pattern = sp.random(brows, bcols, density=density, format="csr", random_state=rng)
    pattern.sort_indices()
    data = T.random_array((pattern.nnz, b, b), F64, rng=rng)
    return sp.bsr_matrix((data, pattern.indices, pattern.indptr), shape=(brows * b, bcols * b))


def _stored(E):
    """The matrix as ``E`` stores it, in float64 (16-bit values rounded as stored)."""
    return E.to_numpy().astype(np.float64)


def _poisoned(shape, dt):
    return cl.full(shape, T.poison_value(dt), dt)


@GPU
@given(dt=st.sampled_from(DTYPES), b=st.sampled_from([1, 2, 4, 8, 16]),
       brows=st.integers(1, 12), bcols=st.integers(1, 12), n=st.integers(1, 24),
       density=st.floats(0, 1), op_b=st.sampled_from("NT"), b_major=st.sampled_from("CF"),
       beta=st.sampled_from([0.0, 0.5]), seed=SEEDS)
def test_spmm_matches_scipy(device, dt, b, brows, bcols, n, density, op_b, b_major, beta,
                            seed):
    rng = np.random.default_rng(seed)
    host = _blocks(brows, bcols, b, density, rng)
    E = cusparse.BlockedELL.from_scipy(host, dtype=dt)
    assert isinstance(E, cusparse.BlockedELL) and E.format == "blocked_ell" and E.owned
    assert (E.dtype, E.block, E.shape) == (dt, b, host.shape)
    ref = _stored(E)
    rows, cols = ref.shape
    for _ in range(CALLS):
        bh = T.random_array((cols, n) if op_b == "N" else (n, cols), dt, rng=rng)
        db = cl.to_device(np.asfortranarray(bh) if b_major == "F" else bh)
        y0 = T.random_array((rows, n), dt, rng=rng)
        out = cl.to_device(y0) if beta else _poisoned((rows, n), dt)
        got = cusparse.spmm(E, db, out, alpha=1.5, beta=beta, op_b=op_b)
        bm = bh.astype(np.float64) if op_b == "N" else bh.astype(np.float64).T
        want = 1.5 * ref @ bm + beta * y0.astype(np.float64)
        scale = 1.5 * np.abs(ref) @ np.abs(bm) + abs(beta) * np.abs(y0.astype(np.float64))
        T.assert_close(got, want, dt, scale=scale, **_tol(dt),
                       msg=f"{dt} b={b} op_b={op_b} B {b_major}-major beta={beta}")
    entries = [e for e in cl.plan_cache().entries("cusparse") if e.key["matrix"] == E.token]
    assert entries and entries[0].plan.tuned
    assert not entries[0].plan.deterministic
    E.close()
    assert not [e for e in cl.plan_cache().entries("cusparse")
                if e.key["matrix"] == E.token], "closing the matrix left its plans cached"


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_round_trips(device, rng, dt):
    host = _blocks(6, 5, 4, 0.4, rng)
    host.data[:] = host.data.astype(dt).astype(np.float64)      # representable in dt
    dense = host.toarray()
    # from scipy: the blocks padded to the widest block row; back to scipy (BSR, 16-bit
    # values as float32), numpy and the device.
    E = cusparse.BlockedELL.from_scipy(host, dtype=dt)
    E.check()
    assert E.slots == max(int(np.diff(host.indptr).max()), 1)
    back = E.to_scipy()
    assert back.format == "bsr" and back.blocksize == (4, 4)
    np.testing.assert_array_equal(back.toarray(), dense)
    np.testing.assert_array_equal(E.to_numpy().astype(np.float64), dense)
    assert E.to_numpy().dtype == dt
    D = E.to_dense()
    assert D.dtype == dt and D.shape == dense.shape
    np.testing.assert_array_equal(D.get().astype(np.float64), dense)
    # Any scipy format with a block size; a BSR of other blocks is cut anew.
    for m in (host.tocsr(), host.tocoo(), host.tobsr(blocksize=(2, 2))):
        F = cusparse.BlockedELL.from_scipy(m, 4, dtype=dt)
        np.testing.assert_array_equal(F.to_numpy().astype(np.float64), dense)
        F.close()
    # from dense: on the host, and on the device through cusparseDenseToSparse, with the
    # pattern found (a host copy) or given (on the host or the device).
    hd = dense.astype(dt)
    dd = cl.to_device(hd)
    made = [cusparse.BlockedELL.from_dense(hd, 4), cusparse.BlockedELL.from_dense(dd, 4),
            cusparse.BlockedELL.from_dense(dd, 4, ell_col_ind=E.arrays["ell_col_ind"].get()),
            cusparse.BlockedELL.from_dense(dd, 4, ell_col_ind=E.arrays["ell_col_ind"],
                                           check=True),
            cusparse.BlockedELL.from_dense(cl.to_device(np.asfortranarray(hd)), 4)]
    for G in made:
        assert G.owned and G.dtype == dt
        G.check()
        np.testing.assert_array_equal(G.arrays["ell_col_ind"].get(),
                                      E.arrays["ell_col_ind"].get())
        np.testing.assert_array_equal(G.to_numpy().astype(np.float64), dense)
        G.close()
    # A narrower pattern: what lies outside it is left out, on the device as on the host.
    pattern = np.full((6, 1), -1, np.int32)
    pattern[0, 0] = 2
    want = np.zeros_like(dense)
    want[:4, 8:12] = dense[:4, 8:12]
    for x in (hd, dd):
        G = cusparse.BlockedELL.from_dense(x, 4, ell_col_ind=pattern)
        np.testing.assert_array_equal(G.to_numpy().astype(np.float64), want)
        G.close()
    # From device arrays, borrowed; their pattern checked on request.
    ell_d, val_d = E.arrays["ell_col_ind"].copy(), E.arrays["values"].copy()
    B = cusparse.BlockedELL(ell_d, val_d, E.shape, 4, check=True)
    assert not B.owned
    np.testing.assert_array_equal(B.to_numpy().astype(np.float64), dense)
    bad = E.arrays["ell_col_ind"].get()
    row = int(np.argmax((bad >= 0).sum(axis=1)))
    if (bad[row] >= 0).sum() >= 2:
        bad[row, :2] = bad[row, 1::-1]          # two block columns out of order
        with pytest.raises(ValueError, match=f"block row {row} is not canonical"):
            cusparse.BlockedELL(cl.to_device(bad), val_d, E.shape, 4, check=True)
    bad = E.arrays["ell_col_ind"].get()
    bad[0, 0] = 5                                # 5 block columns: 0..4
    with pytest.raises(ValueError, match=r"ell_col_ind\[0, 0\] is 5"):
        cusparse.BlockedELL(cl.to_device(bad), val_d, E.shape, 4, check=True)
    B.close()
    E.close()


def test_plan_algorithms_and_autotune(device, rng):
    host = _blocks(64, 64, 16, 0.1, rng)
    E = cusparse.BlockedELL.from_scipy(host, dtype=F16)
    b = cl.to_device(T.random_array((1024, 64), F16, rng=rng))
    plan = cusparse.SpMM(E, b).plan()
    names = [c["name"] for c in plan.candidates]
    assert names and set(names) <= set(cusparse.plan.SPMM_ALGS["blocked_ell"])
    assert names[0] == cusparse.plan.SPMM_ALGS["blocked_ell"][0]
    assert plan.deterministic is False and "blocked_ell" in repr(plan)
    plan.autotune(force=True)
    assert plan.tuned
    ref = _stored(E)
    out = _poisoned((1024, 64), F16)
    for i in range(len(plan.candidates)):
        plan.select(i)
        got = plan.execute(b, out)
        T.assert_close(got, ref @ b.get().astype(np.float64), F16,
                       scale=np.abs(ref) @ np.abs(b.get().astype(np.float64)),
                       msg=plan.candidates[i]["name"])
    plan.close()
    E.close()


def test_one_matrix_in_three_formats_gives_one_product(device, rng):
    host = _blocks(40, 30, 8, 0.2, rng)
    b = T.random_array((240, 16), F32, rng=rng)
    db = cl.to_device(b)
    ref = host.toarray()
    got = {}
    for name, A in (("blocked_ell", cusparse.BlockedELL.from_scipy(host, dtype=F32)),
                    ("bsr", cusparse.from_scipy(host.astype(F32))),
                    ("csr", cusparse.from_scipy(host.tocsr().astype(F32)))):
        got[name] = cusparse.spmm(A, db).get()
        # Blocked-ELL's float32 runs at TF32 precision, BSR's and CSR's at float32's.
        tol = _tol(F32) if name == "blocked_ell" else {"rtol": 1e-5}
        T.assert_close(got[name], ref @ b, F32, scale=np.abs(ref) @ np.abs(b), **tol,
                       msg=name)
        A.close()


def test_operations_cusparse_does_not_run_on_blocked_ell_are_refused(device, rng):
    host = _blocks(8, 8, 4, 0.5, rng)
    E = cusparse.BlockedELL.from_scipy(host, dtype=F32)
    x = cl.to_device(T.random_array((32,), F32, rng=rng))
    d = cl.to_device(T.random_array((32, 32), F32, rng=rng))
    for call, msg in ((lambda: cusparse.spmv(E, x), "cuSPARSE's SpMV does not take"),
                      (lambda: cusparse.SpMV(E), "cuSPARSE's SpMV does not take"),
                      (lambda: cusparse.sddmm(d, d, E), "cuSPARSE samples CSR and BSR"),
                      (lambda: cusparse.spgemm(E, E), "cuSPARSE's SpGEMM takes CSR"),
                      (lambda: cusparse.spsv(E, x), "triangular solves take CSR and COO"),
                      (lambda: cusparse.spmm(E, d, op_a="T"), "takes op_a='N' only"),
                      (lambda: cusparse.spmm(E, d, op_b="H"), "does not take op_b='H'"),
                      (lambda: cusparse.spmm(E, d, deterministic=True),
                       "no deterministic algorithm")):
        with pytest.raises(ValueError, match=msg):
            call()
    # What cannot be captured is refused before anything reaches the stream.
    s = cl.Stream(device)
    for refused in (lambda: E.to_dense(stream=s),
                    lambda: cusparse.BlockedELL.from_dense(d, 4, stream=s)):
        with pytest.raises(cl.CaptureError):
            with cl.graph.capture(s):
                refused()
    s.close()
    E.close()
