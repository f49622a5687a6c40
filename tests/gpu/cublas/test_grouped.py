"""Grouped GEMM for mixture-of-experts layers, both paths, against float64 numpy per group:
cuBLAS's grouped call (host sizes, ``cublas.gemm_grouped`` / ``GroupedGemm``) and the kernel
library's grouped GEMM whose group sizes are read from device memory (``kernels.grouped_mm`` /
``GroupedMM``).  Hypothesis draws with skewed and empty groups, outputs poisoned with NaN first,
three calls per shape, torch streams and torch._grouped_mm as a second oracle, threads sharing
a plan, wild device offsets that must never write outside the output, and a graph captured
once and replayed with new group sizes written into the device offsets."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cublas, kernels
from cudalibs import testing as T
from cudalibs.runtime.cache import cache as plan_cache

from .._sizes import bound, gpu_settings
from .._threads import match_serial
from ._util import on_device, poisoned

GPU = gpu_settings(25)
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)


def _np(name):
    return cl.dtypes.lookup(name).numpy


def _ends(counts):
    return np.cumsum(np.asarray(counts, np.int64))


def _offsets(counts, dtype, cumulative):
    """Offsets of ``counts`` as the kernel takes them: ``G + 1`` cumulative ones or torch's
    ``G`` ends."""
    ends = _ends(counts)
    return (np.concatenate([[0], ends]) if cumulative else ends).astype(dtype)


def _clamped(offsets, groups, rows):
    """``[(start, end)]`` of each group as the kernel reads device offsets: each clamped to
    ``[0, rows]``, the ends made non-decreasing (so groups never overlap)."""
    vals = np.clip(np.asarray(offsets, np.int64), 0, rows)
    if len(vals) == groups:
        vals = np.concatenate([[0], vals])
    ends = np.maximum.accumulate(vals)
    return [(int(ends[g]), int(ends[g + 1])) for g in range(groups)]


def _check_grouped(out, x, w, spans, in_dtype, msg=""):
    """Rows of each span equal ``x @ w[g]`` (float64); every other row is still NaN."""
    got = np.asarray(out.get() if hasattr(out, "get") else out).astype(np.float64)
    covered = np.zeros(got.shape[0], bool)
    for g, (lo, hi) in enumerate(spans):
        covered[lo:hi] = True
        if hi > lo:
            want = x[lo:hi].astype(np.float64) @ w[g].astype(np.float64)
            T.assert_close(got[lo:hi], want, in_dtype, msg=f"{msg} group {g} rows {lo}:{hi}")
    assert np.isnan(got[~covered]).all(), f"{msg}: a row no group covers was written"


def _weights(w, layout, stream=None):
    """``w`` (G, K, N) on the device: N contiguous ("kn"), or the transposed view of a
    (G, N, K) array ("nk")."""
    if layout == "kn":
        return cl.to_device(w, stream=stream)
    return cl.to_device(np.ascontiguousarray(w.transpose(0, 2, 1)),
                        stream=stream).transpose(0, 2, 1)


def _rows(x, padded, stream=None):
    """``x`` on the device, C-contiguous or with rows padded by 8 elements."""
    if not padded:
        return cl.to_device(x, stream=stream)
    big = np.zeros((x.shape[0], x.shape[1] + 8), x.dtype)
    big[:, :x.shape[1]] = x
    return cl.to_device(big, stream=stream)[:, :x.shape[1]]


# -- the device-offsets kernel ------------------------------------------------------------------
@GPU
@given(data=st.data())
def test_grouped_mm_matches_numpy(device, data):
    dtype = data.draw(st.sampled_from([BF16, F16]), label="dtype")
    out_dtype = data.draw(st.sampled_from([dtype, np.dtype(np.float32)]), label="out dtype")
    layout = data.draw(st.sampled_from(["kn", "nk"]), label="w layout")
    groups = data.draw(st.integers(1, bound(6, 12)), label="groups")
    k = 8 * data.draw(st.integers(0, bound(16, 96)), label="k / 8")
    n = 8 * data.draw(st.integers(1, bound(24, 160)), label="n / 8")
    big = bound(150, 700)
    count = st.one_of(st.sampled_from([0, 1, 63, 64, 65, 127, 128, 129]), st.integers(0, big))
    slack = data.draw(st.integers(0, 40), label="rows no group covers")
    offs_dtype = data.draw(st.sampled_from([np.int32, np.int64]), label="offsets dtype")
    cumulative = data.draw(st.booleans(), label="G + 1 offsets")
    padded = data.draw(st.booleans(), label="x rows padded")
    # Three calls of the one plan, each with its own group sizes; the capacity fits all.
    draws = [data.draw(st.lists(count, min_size=groups, max_size=groups), label=f"counts {c}")
             for c in range(3)]
    rows = max(int(sum(c)) for c in draws) + slack
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31), label="seed"))
    x = T.random_array((rows, k), dtype, rng=rng)
    w = T.random_array((groups, k, n), dtype, rng=rng)
    dx, dw = _rows(x, padded), _weights(w, layout)
    before = len(plan_cache.entries(kernels.GROUPED_MM_KEY.name))
    for c, counts in enumerate(draws):
        offs = _offsets(counts, offs_dtype, cumulative)
        out = poisoned((rows, n), out_dtype)
        res = kernels.grouped_mm(dx, dw, cl.to_device(offs), out)
        assert res is out
        _check_grouped(out, x, w, _clamped(offs, groups, rows), dtype,
                       msg=f"call {c} {dtype.name}->{out_dtype.name} {layout} k={k} n={n} "
                           f"counts={counts}")
    # One plan served the three calls.
    assert len(plan_cache.entries(kernels.GROUPED_MM_KEY.name)) <= before + 1
    # A new output: the input type by default, the covered rows computed.
    offs = cl.to_device(_offsets(draws[0], offs_dtype, cumulative))
    new = kernels.grouped_mm(dx, dw, offs, out_dtype=out_dtype)
    assert new.shape == (rows, n) and new.dtype == out_dtype
    total = int(sum(draws[0]))
    _check_grouped(new.get()[:total], x, w, _clamped(offs.get(), groups, total), dtype,
                   msg="new out")


@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_grouped_mm_tiles_agree_and_autotune(device, rng, layout):
    """Every candidate of the plan against the reference; the sm_80 kernel's two tile heights
    compute every element in the same order: bitwise equal.  On compute capability 9.0 the
    Hopper tiles come first (tests/gpu/kernels/test_grouped90.py tests them further).
    Autotune times every candidate and keeps one, whose result is the one it gave before."""
    groups, k, n = 5, 200, 264
    counts = [0, 300, 1, 129, 64]
    rows = sum(counts) + 11
    x = T.random_array((rows, k), BF16, rng=rng)
    w = T.random_array((groups, k, n), BF16, rng=rng)
    dx, dw = cl.to_device(x), _weights(w, layout)
    offs = cl.to_device(_offsets(counts, np.int64, True))
    spans = _clamped(offs.get(), groups, rows)
    hopper = tuple(device.compute_capability) == (9, 0)
    with kernels.GroupedMM(dx, dw, offs) as plan:
        assert "not planned" in repr(plan)
        plan.plan()
        names = [c["id"] for c in plan.candidates]
        assert sorted(names[-2:]) == ["m128", "m64"]
        assert names[:-2] == (["m128n256s", "m128n256", "m128n128s", "m64n256s"] if hopper
                              else [])
        results = {}
        for i, name in enumerate(names):
            plan.select(i)
            out = poisoned((rows, n), BF16)
            for _ in range(3):
                assert plan.execute(dx, dw, offs, out) is out
            results[name] = out.get()
            _check_grouped(results[name], x, w, spans, BF16, msg=f"candidate {name}")
        np.testing.assert_array_equal(results["m128"].view(np.uint16),
                                      results["m64"].view(np.uint16))
        cands = plan.autotune(rounds=2, store=False)
        assert plan.tuned and all(c["ms"] > 0 for c in cands), cands
        assert "tiles" in repr(plan) and "autotuned" in repr(plan)
        out = poisoned((rows, n), BF16)
        plan.execute(dx, dw, offs, out)
        np.testing.assert_array_equal(out.get().view(np.uint16),
                                      results[names[plan.choice]].view(np.uint16))
    assert plan.closed
    with pytest.raises(cl.ClosedError):
        plan.execute(dx, dw, offs)


def test_grouped_mm_host_offsets(device, rng):
    """Offsets given on the host are checked and copied: the same result as device ones."""
    groups, k, n, counts = 3, 16, 24, [5, 0, 9]
    x = T.random_array((20, k), F16, rng=rng)
    w = T.random_array((groups, k, n), F16, rng=rng)
    dx, dw = cl.to_device(x), cl.to_device(w)
    for offs in (list(_offsets(counts, np.int64, True)), _offsets(counts, np.int32, False)):
        out = poisoned((20, n), F16)
        kernels.grouped_mm(dx, dw, offs, out)
        _check_grouped(out, x, w, _clamped(offs, groups, 20), F16)
    with pytest.raises(ValueError, match="beyond the capacity"):
        kernels.grouped_mm(dx, dw, [0, 5, 10, 21])
    with pytest.raises(ValueError, match="decrease"):
        kernels.grouped_mm(dx, dw, [0, 5, 4, 9])


def test_wild_device_offsets_never_write_outside(device, rng):
    """Device offsets are not checked: the kernel clamps them, so whatever they hold, nothing
    outside ``out`` is written and groups never overlap."""
    groups, k, n, rows, guard = 4, 32, 16, 100, 64
    x = T.random_array((rows, k), BF16, rng=rng)
    w = T.random_array((groups, k, n), BF16, rng=rng)
    dx, dw = cl.to_device(x), cl.to_device(w)
    big = poisoned((rows + 2 * guard, n), BF16)
    out = big[guard:guard + rows]
    cases = ([-50, 60, 30, 1000, 80], [0, 10**6, 5, 7, 9], [90, 10, 20, 30, 40],
             [2**31 - 1, -2**31, 2**31 - 1, 0, 5], [30, 20, 10, 0])
    for offsets in cases:
        for dt in (np.int32, np.int64):
            out.fill(T.poison_value(BF16))
            kernels.grouped_mm(dx, dw, cl.to_device(np.array(offsets, dt)), out)
            host = big.get()
            assert np.isnan(host[:guard].astype(np.float32)).all(), offsets
            assert np.isnan(host[guard + rows:].astype(np.float32)).all(), offsets
            _check_grouped(host[guard:guard + rows], x, w, _clamped(offsets, groups, rows),
                           BF16, msg=f"offsets {offsets}")


def test_grouped_mm_against_torch(device, rng):
    """torch._grouped_mm as a second oracle, on torch tensors and torch's stream."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip(f"torch {torch.__version__} has no _grouped_mm")
    groups, k, n = 6, 256, 384
    counts = [700, 0, 33, 1, 250, 40]
    rows = sum(counts)
    gen = torch.Generator(device="cuda").manual_seed(int(rng.integers(2**31)))
    tx = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    tw = torch.randn(groups, k, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    toffs = torch.tensor(_ends(counts), device="cuda", dtype=torch.int32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for wt in (tw, tw.transpose(1, 2).contiguous().transpose(1, 2)):
            want = torch._grouped_mm(tx, wt, toffs)
            ours = kernels.grouped_mm(tx, wt, toffs, stream=side)
            got = torch.from_dlpack(ours)
            T.assert_close(got.float().cpu().numpy(), want.float().cpu().numpy(), BF16,
                           msg="against torch._grouped_mm")
            # and against float64 numpy
            _check_grouped(got.float().cpu().numpy(), tx.float().cpu().numpy(),
                           wt.float().cpu().numpy(), _clamped(toffs.cpu().numpy(), groups, rows),
                           BF16)
    side.synchronize()


def test_capture_once_replay_with_new_device_counts(device, rng):
    """A MoE step captured once serves every token distribution: the counts are written into
    the device offsets between replays, and each replay computes the new groups."""
    groups, k, n, rows = 5, 96, 136, 400
    s = cl.Stream()
    x = T.random_array((rows, k), BF16, rng=rng)
    w = T.random_array((groups, k, n), BF16, rng=rng)
    dx, dw = cl.to_device(x, stream=s), _weights(w, "nk", stream=s)
    offs = cl.to_device(_offsets([80] * groups, np.int32, True), stream=s)
    out = poisoned((rows, n), BF16, stream=s)
    # The first call plans the problem and loads the kernels, outside the capture.
    kernels.grouped_mm(dx, dw, offs, out, stream=s)
    s.sync()
    with cl.graph.capture(s) as g:
        kernels.grouped_mm(dx, dw, offs, out, stream=s)
    exe = g.instantiate()
    for counts in ([0, 400, 0, 0, 0], [100, 0, 37, 200, 63], [1, 2, 3, 4, 5]):
        host = _offsets(counts, np.int32, True)
        offs.copy_(host, s)
        out.fill(T.poison_value(BF16), stream=s)
        exe.replay(s)
        _check_grouped(out.get(stream=s), x, w, _clamped(host, groups, rows), BF16,
                       msg=f"replay with counts {counts}")
    exe.close()
    g.close()


# -- cuBLAS's grouped call ----------------------------------------------------------------------
# (input dtype, compute): every combination cublasGemmGroupedBatchedEx takes (output = input).
COMBOS = [("bfloat16", None), ("float16", None), ("float32", None), ("float32", "tf32"),
          ("float64", None)]


@pytest.mark.parametrize("dtype, compute", COMBOS, ids=[f"{d}-{c}" for d, c in COMBOS])
@GPU
@given(data=st.data())
def test_gemm_grouped_matches_numpy(device, dtype, compute, data):
    dt = _np(dtype)
    groups = data.draw(st.integers(1, bound(5, 9)), label="groups")
    side = bound(70, 400)
    shapes = data.draw(st.lists(st.tuples(st.one_of(st.just(0), st.integers(1, side)),
                                          st.integers(1, side), st.integers(1, side)),
                                min_size=groups, max_size=groups), label="m, n, k per group")
    layouts = data.draw(st.lists(st.tuples(*[st.sampled_from(("C", "T", "padded"))] * 2),
                                 min_size=groups, max_size=groups), label="layouts")
    accumulate = data.draw(st.booleans(), label="accumulate")
    alpha = data.draw(st.sampled_from([1, 0.5, -1.75]), label="alpha")
    beta = data.draw(st.sampled_from([1.0, -0.5]), label="beta") if accumulate else 0
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31), label="seed"))
    before = len(plan_cache.entries(cublas.GROUPED_KEY.name))
    # Three calls of the shape, each on new data: one plan.
    for call in range(3):
        a = [T.random_array((m, k), dt, rng=rng) for m, n, k in shapes]
        b = [T.random_array((k, n), dt, rng=rng) for m, n, k in shapes]
        da = [on_device(x, la) for x, (la, _) in zip(a, layouts)]
        db = [on_device(y, lb) for y, (_, lb) in zip(b, layouts)]
        if accumulate:
            c = [T.random_array((m, n), dt, rng=rng) for m, n, k in shapes]
            outs = [cl.to_device(x) for x in c]
        else:
            c = [None] * groups
            outs = [poisoned((m, n), dt) for m, n, k in shapes]
        res = cublas.gemm_grouped(da, db, outs, alpha=alpha, beta=beta, compute=compute)
        assert all(r is o for r, o in zip(res, outs))
        for i, (r, x, y, c0) in enumerate(zip(res, a, b, c)):
            T.assert_close(r, T.ref.gemm(x, y, c0, alpha=alpha, beta=beta), dtype,
                           compute=compute, msg=f"call {call} group {i} {shapes[i]} "
                                                f"{layouts[i]} alpha={alpha} beta={beta}")
        np.testing.assert_array_equal(da[0].get().view(np.uint8), a[0].view(np.uint8))
    assert len(plan_cache.entries(cublas.GROUPED_KEY.name)) <= before + 1
    # New outputs, of the input type.
    new = cublas.gemm_grouped(da, db, compute=compute)
    for i, (r, x, y) in enumerate(zip(new, a, b)):
        assert r.shape == (x.shape[0], y.shape[1]) and r.dtype == dt
        T.assert_close(r, T.ref.gemm(x, y), dtype, compute=compute, msg=f"new out {i}")


def test_gemm_grouped_plan_protocol(device, rng):
    """A held plan: two candidates, autotune times both and keeps the faster, execute checks
    the layout, close."""
    shapes = [(30, 20, 16), (30, 20, 16), (0, 8, 8), (7, 5, 3), (30, 20, 16)]
    a = [cl.to_device(T.random_array((m, k), BF16, rng=rng)) for m, n, k in shapes]
    b = [cl.to_device(T.random_array((k, n), BF16, rng=rng)) for m, n, k in shapes]
    with cublas.GroupedGemm(a, b) as plan:
        # Consecutive problems of one shape merge into one cuBLAS group; empty ones drop.
        assert plan.group_count == 3 and list(plan.group_size[:3]) == [2, 1, 1]
        # small products: the grouped call is the heuristic's first
        assert [c["id"] for c in plan.plan().candidates] == ["grouped", "per_group"]
        cands = plan.autotune(rounds=2, store=False)
        times = [c["ms"] for c in cands]
        assert all(np.isfinite(times)) and plan.tuned
        assert plan.choice == int(np.argmin(times))
        assert cands[plan.choice]["name"] in repr(plan)
        assert plan.per_group == (cands[plan.choice]["id"] == "per_group")
        for _ in range(3):
            res = plan.execute(a, b)
        for r, x, y in zip(res, a, b):
            T.assert_close(r, T.ref.gemm(x.get(), y.get()), BF16)
        with pytest.raises(ValueError, match="not the plan's"):
            plan.execute(a[:4], b[:4])
    with pytest.raises(cl.ClosedError):
        plan.execute(a, b)


def _pick(plan, cid):
    """Make candidate ``cid`` ("grouped" or "per_group") the one the plan runs."""
    plan.select([c["id"] for c in plan.plan().candidates].index(cid))
    assert plan.per_group == (cid == "per_group")
    return plan


@pytest.mark.parametrize("dtype, compute", COMBOS, ids=[f"{d}-{c}" for d, c in COMBOS])
def test_gemm_grouped_both_candidates_match_numpy_and_each_other(device, rng, dtype, compute):
    """Each candidate, picked on a held plan, against float64 numpy (mixed layouts, an empty
    group, repeated shapes, alpha and beta, three calls, new outputs); the two agree within
    the type's tolerance (other kernels: not bit for bit)."""
    dt = _np(dtype)
    shapes = [(33, 24, 40), (0, 24, 40), (33, 24, 40), (129, 7, 65), (1, 130, 9),
              (200, 96, 160)]
    layouts = [("C", "C"), ("C", "C"), ("C", "C"), ("T", "padded"), ("padded", "T"),
               ("T", "C")]
    results = {}
    for cid in ("grouped", "per_group"):
        a = [T.random_array((m, k), dt, rng=rng) for m, n, k in shapes]
        b = [T.random_array((k, n), dt, rng=rng) for m, n, k in shapes]
        da = [on_device(x, la) for x, (la, _) in zip(a, layouts)]
        db = [on_device(y, lb) for y, (_, lb) in zip(b, layouts)]
        outs = [poisoned((m, n), dt) for m, n, k in shapes]
        with _pick(cublas.GroupedGemm(da, db, outs, compute=compute), cid) as plan:
            for call in range(3):
                c = [T.random_array((m, n), dt, rng=rng) for m, n, k in shapes]
                for o, h in zip(outs, c):
                    if h.size:
                        o.copy_(h)
                res = plan.execute(da, db, outs, alpha=0.5, beta=-0.5)
                assert all(r is o for r, o in zip(res, outs))
                for i, (r, x, y, c0) in enumerate(zip(res, a, b, c)):
                    T.assert_close(r, T.ref.gemm(x, y, c0, alpha=0.5, beta=-0.5), dtype,
                                   compute=compute, msg=f"{cid} call {call} group {i} "
                                                        f"{shapes[i]} {layouts[i]}")
        with _pick(cublas.GroupedGemm(da, db, compute=compute), cid) as plan:
            new = plan.execute(da, db)
            for i, (r, x, y) in enumerate(zip(new, a, b)):
                assert r.shape == (x.shape[0], y.shape[1]) and r.dtype == dt
                T.assert_close(r, T.ref.gemm(x, y), dtype, compute=compute,
                               msg=f"{cid} new out {i}")
            # the same inputs for both candidates: kept to compare them
            results[cid] = (a, b, [r.get() for r in new])
    # run the grouped candidate on the per-group candidate's inputs: they agree to rounding
    a, b, per = results["per_group"]
    da = [on_device(x, la) for x, (la, _) in zip(a, layouts)]
    db = [on_device(y, lb) for y, (_, lb) in zip(b, layouts)]
    with _pick(cublas.GroupedGemm(da, db, compute=compute), "grouped") as plan:
        for i, (g, q) in enumerate(zip(plan.execute(da, db), per)):
            T.assert_close(g, q.astype(np.float64), dtype, compute=compute,
                           msg=f"grouped vs per-group, group {i}")


def test_gemm_grouped_large_products_run_per_group_gemms(device, rng):
    """A mean product past PER_GROUP_MNK: the one-shot runs one GEMM per group (its
    heuristic's first), right; an autotune of the same problem keeps one of the two."""
    shapes = [(1200, 1024, 4096), (0, 1024, 4096), (900, 1024, 4096), (2048, 4096, 1024)]
    a = [T.random_array((m, k), BF16, rng=rng) for m, n, k in shapes]
    b = [T.random_array((k, n), BF16, rng=rng) for m, n, k in shapes]
    da, db = [cl.to_device(x) for x in a], [cl.to_device(y) for y in b]
    with cublas.GroupedGemm(da, db) as plan:
        assert plan.mean_mnk >= cublas.grouped.PER_GROUP_MNK
        assert plan.plan().per_group and plan.candidates[0]["id"] == "per_group"
        cands = plan.autotune(rounds=2, store=False)
        assert {c["id"] for c in cands} == {"grouped", "per_group"}
        assert all(np.isfinite(c["ms"]) for c in cands)
        assert plan.choice == int(np.argmin([c["ms"] for c in cands]))
        for r, x, y in zip(plan.execute(da, db), a, b):
            T.assert_close(r, T.ref.gemm(x, y), BF16)
    res = cublas.gemm_grouped(da, db)
    for i, (r, x, y) in enumerate(zip(res, a, b)):
        T.assert_close(r, T.ref.gemm(x, y), BF16, msg=f"one-shot group {i}")


def test_gemm_grouped_refuses_what_cublas_does_not_take(device, rng):
    a = [cl.to_device(T.random_array((4, 8), BF16, rng=rng))]
    b = [cl.to_device(T.random_array((8, 8), BF16, rng=rng))]
    with pytest.raises(TypeError) as info:
        cublas.gemm_grouped(a, b, [cl.empty((4, 8), np.float32)])
    assert all(text in str(info.value) for text in cublas.GROUPED_SUPPORTED)
    e4 = cl.dtypes.lookup("float8_e4m3fn").numpy
    f8 = [cl.to_device(T.random_array((4, 8), e4, rng=rng))]
    with pytest.raises(TypeError, match="fp8 is not among them"):
        cublas.gemm_grouped(f8, [cl.to_device(T.random_array((8, 8), e4, rng=rng))])
    with pytest.raises(ValueError, match="no unit stride"):
        cublas.gemm_grouped([on_device(T.random_array((4, 8), BF16, rng=rng), "strided")], b)
    with pytest.raises(ValueError, match="overlaps"):
        cublas.gemm_grouped(a, b, [a[0]])


def test_gemm_grouped_on_a_torch_stream(device, rng):
    torch = pytest.importorskip("torch")
    side = torch.cuda.Stream()
    shapes = [(33, 24, 40), (0, 24, 40), (129, 24, 40)]
    a = [T.random_array((m, k), F16, rng=rng) for m, n, k in shapes]
    b = [T.random_array((k, n), F16, rng=rng) for m, n, k in shapes]
    ta = [torch.from_numpy(x).cuda() for x in a]
    tb = [torch.from_numpy(y).cuda() for y in b]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        outs = [torch.empty(m, n, device="cuda", dtype=torch.float16) for m, n, k in shapes]
        cublas.gemm_grouped(ta, tb, outs, stream=side)
    side.synchronize()
    for o, x, y in zip(outs, a, b):
        T.assert_close(o.cpu().numpy(), T.ref.gemm(x, y), F16)


@pytest.mark.parametrize("cid", [None, "grouped", "per_group"])
def test_gemm_grouped_capture_replays(device, rng, cid):
    """Captured with its sizes: the pointer kernel, the allocation and the free and cuBLAS's
    kernels replay, reading the inputs' current contents -- the one-shot, and each candidate
    of a held plan (the per-group GEMMs with no pointer arrays)."""
    shapes = [(64, 32, 48), (5, 32, 48), (128, 16, 8)]
    s = cl.Stream()
    cublas.prepare(s)
    da = [cl.empty((m, k), BF16, stream=s) for m, n, k in shapes]
    db = [cl.empty((k, n), BF16, stream=s) for m, n, k in shapes]
    outs = [poisoned((m, n), BF16, stream=s) for m, n, k in shapes]
    if cid is None:
        def call():
            cublas.gemm_grouped(da, db, outs, stream=s)
    else:
        plan = _pick(cublas.GroupedGemm(da, db, outs), cid)

        def call():
            plan.execute(da, db, outs, stream=s)
    call()      # plans and loads, outside the capture
    call()      # (a repeated gemm records its relaunch on its second call)
    s.sync()
    with cl.graph.capture(s) as g:
        call()
    exe = g.instantiate()
    for _ in range(3):
        a = [T.random_array((m, k), BF16, rng=rng) for m, n, k in shapes]
        b = [T.random_array((k, n), BF16, rng=rng) for m, n, k in shapes]
        for d, h in zip(da + db, a + b):
            d.copy_(h, s)
        for o in outs:
            o.fill(T.poison_value(BF16), stream=s)
        exe.replay(s)
        for o, x, y in zip(outs, a, b):
            T.assert_close(o.get(stream=s), T.ref.gemm(x, y), BF16)
    exe.close()
    g.close()
    if cid is not None:
        plan.close()


# -- both, from many threads --------------------------------------------------------------------
def test_threads_share_the_plans(device, rng):
    """Eight threads, each on its own stream, calling both grouped GEMMs through their cached
    plans: every result bitwise what the calls give one after another."""
    groups, k, n = 4, 64, 136
    counts = [[10, 0, 200, 46], [64, 64, 64, 64], [0, 0, 0, 256], [255, 1, 0, 0]]
    rows = 256
    x = cl.to_device(T.random_array((rows, k), BF16, rng=rng))
    w = cl.to_device(T.random_array((groups, k, n), BF16, rng=rng))
    offs = [cl.to_device(_offsets(c, np.int32, False)) for c in counts]
    al = [[x[lo:hi] for lo, hi in _clamped(o.get(), groups, rows)] for o in offs]
    bl = [w[g] for g in range(groups)]
    calls = [(lambda s, o=o: kernels.grouped_mm(x, w, o, stream=s)) for o in offs] + \
        [(lambda s, a=a: cublas.gemm_grouped(a, bl, stream=s)) for a in al]
    serial = match_serial(device, calls, repeats=6)
    # and the serial results are right
    host_x, host_w = x.get(), w.get()
    for i, o in enumerate(offs):
        _check_grouped(serial[i][0][1], host_x, host_w, _clamped(o.get(), groups, rows), BF16)


@pytest.mark.parametrize("cid", ["grouped", "per_group"])
def test_threads_share_a_held_plan(device, rng, cid):
    """Eight threads, each on its own stream, executing one held GroupedGemm (either
    candidate; the per-group GEMMs' plans made by whichever thread runs first): every result
    bitwise what the calls give one after another, and right."""
    shapes = [(40, 72, 64), (0, 72, 64), (97, 72, 64), (256, 72, 64)]
    sets = [([cl.to_device(T.random_array((m, k), BF16, rng=rng)) for m, n, k in shapes],
             [cl.to_device(T.random_array((k, n), BF16, rng=rng)) for m, n, k in shapes])
            for _ in range(3)]
    plan = cublas.GroupedGemm(*sets[0])
    plan.select([c["id"] for c in plan.plan().candidates].index(cid))
    calls = [(lambda s, a=a, b=b: plan.execute(a, b, stream=s)) for a, b in sets]
    serial = match_serial(device, calls, repeats=6)
    for (a, b), got in zip(sets, serial):
        assert len(got) == len(shapes)
        for (_, r), x, y in zip(got, a, b):
            T.assert_close(r, T.ref.gemm(x.get(), y.get()), BF16)
    plan.close()
