"""The plan protocol on cuBLAS: build, plan, autotune with the tuning store, repr, close; the
one cache's bound; per-stream workspaces released with their streams."""

import gc
import weakref

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T
from cudalibs.runtime import plan as plan_mod
from cudalibs.runtime.cache import cache as plan_cache


@pytest.fixture()
def store(tmp_path, monkeypatch):
    path = tmp_path / "tuning.json"
    monkeypatch.setenv("CUDALIBS_TUNING_CACHE", str(path))
    return path


def test_matmul_plan_protocol(device, rng, store):
    a = cl.to_device(T.random_array((64, 32), np.float32, rng=rng))
    b = cl.to_device(T.random_array((32, 48), np.float32, rng=rng))
    plan = cublas.Matmul(a, b)
    assert plan.choice == -1 and "not planned" in repr(plan)
    plan.plan()
    assert plan.choice == 0 and all("id" in c for c in plan.candidates)
    assert "Matmul" in repr(plan) and "heuristic" in repr(plan)
    cands = plan.autotune(rounds=2)
    assert plan.tuned and any(np.isfinite(c["ms"]) for c in cands if c.get("ms") is not None)
    assert store.exists() and "autotuned" in repr(plan)
    T.assert_close(plan.execute(a, b), T.ref.gemm(a.get(), b.get()), np.float32)
    # A second plan of the same problem picks the stored choice without timing.
    again = cublas.Matmul(a, b)
    calls = []
    real = plan_mod.time_candidates
    plan_mod.time_candidates = lambda *x, **k: calls.append(1) or real(*x, **k)
    try:
        again.autotune(rounds=2)
    finally:
        plan_mod.time_candidates = real
    assert calls == [] and again.tuned and again.choice == plan.choice
    plan.close()
    plan.close()
    assert plan.closed and "closed" in repr(plan)
    with pytest.raises(cl.ClosedError):
        plan.execute(a, b)
    again.close()


def test_corrupt_store_is_measured_again(device, rng, store):
    store.write_text("{not json")
    a = cl.to_device(T.random_array((32, 32), np.float16, rng=rng))
    plan = cublas.Matmul(a, a).plan()
    plan.autotune(rounds=1)
    assert plan.tuned and "version" in store.read_text()
    plan.close()


def test_gemm_plan_tuning_persists(device, rng, store):
    a = cl.to_device(T.random_array((64, 64), np.float32, rng=rng))
    info = cublas.tune_gemm(a, a, iterations=2)
    assert info["algo"] in cublas.GEMM_ALGOS and info["ms"] > 0
    cublas.clear_algo_cache()
    res = cublas.gemm(a, a, algo="tuned")          # a new plan: the store answers
    (e,) = [e for e in plan_cache.entries("gemm") if e.key["algo"] == "tuned"]
    assert e.plan.tuned and e.plan.algo == info["algo"]
    T.assert_close(res, T.ref.gemm(a.get(), a.get()), np.float32)


def test_cache_bound_frees_evicted_plans(device, rng):
    cache = plan_cache
    old = cache.maxsize
    cache.clear()
    try:
        cache.maxsize = 4
        refs = []
        for n in range(8, 20):
            x = cl.to_device(T.random_array((n, n), np.float32, rng=rng))
            cublas.matmul(x, x)
            cublas.gemm(x, x)
            refs.append(weakref.ref(next(e.plan for e in cache.entries("cublaslt_matmul")
                                         if e.key["a_shape"] == (n, n))))
        assert len(cache) <= 4
        gc.collect()
        live = {id(e.plan) for e in cache.entries()}
        # Every plan the cache dropped (nobody else holds one) is gone, its descriptors freed.
        dropped = [r for r in refs[:-2] if r() is None or id(r()) not in live]
        assert len(dropped) >= len(refs) - 4 and all(r() is None for r in dropped)
        assert all(not e.plan.closed for e in cache.entries())
    finally:
        cache.maxsize = old


def test_stream_per_request_releases_workspaces(device, rng):
    a = cl.to_device(T.random_array((64, 64), np.float32, rng=rng))
    for _ in range(3):                      # warm: plans, handles, pool
        with cl.Stream() as s:
            cublas.gemm(a, a, stream=s)
            cublas.matmul(a, a, stream=s)
            s.sync()
    cl.default_stream().sync()
    free_before, _ = device.mem_info()
    ws = cublas.handle._workspaces
    held_before = ws.total_bytes()
    for _ in range(50):
        s = cl.Stream()
        cublas.gemm(a, a, stream=s)
        cublas.matmul(a, a, stream=s)
        s.sync()
        s.close()
    gc.collect()
    assert ws.total_bytes() <= held_before, ws
    free_after, _ = device.mem_info()
    assert free_before - free_after < 4 * cublas.WORKSPACE_BYTES, (free_before, free_after)
