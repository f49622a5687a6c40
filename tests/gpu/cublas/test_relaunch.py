"""The recorded-kernel route of gemm: bitwise the library call, for every operand change."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T
from cudalibs.runtime import relaunch
from cudalibs.runtime.cache import cache as plan_cache

from .._sizes import GEMM_BUDGET, gemm_sizes, gpu_settings
from .._threads import match_serial
from ._util import on_device, poisoned


GPU = gpu_settings(20)

DTYPES = [("float32", None), ("float32", "tf32"), ("float16", None), ("bfloat16", None),
          ("float64", None)]


def _np(name):
    return cl.dtypes.lookup(name).numpy


def _plan(a, b, compute):
    for e in plan_cache.entries("gemm"):
        k = e.key
        if k["a_shape"] == a.shape and k["a_strides"] == a.strides and \
                k["b_shape"] == b.shape and k["b_strides"] == b.strides and \
                k["a_dtype"] == a.dtype and k["compute"] == compute and k["out_shape"] is None:
            return e.plan
    raise AssertionError("no cached plan for this problem")


def _lt_state(p):
    """The relaunch of the plan's cuBLASLt route (its Matmul plan, called with c as the
    output), the reason it has none, or None before the route's second call."""
    assert p.lt, f"the cuBLASLt route is not in use: {p!r}"
    return p.lt.relaunches.state((p.lt.choice, True))


def _library_results(calls, compute, s):
    """The products through the cuBLASLt call itself (relaunching off)."""
    plan_cache.clear("gemm")
    try:
        with cl.option_context(relaunch=False):
            return [cublas.gemm(a, b, compute=compute, stream=s).get(stream=s)
                    for a, b in calls]
    finally:
        plan_cache.clear("gemm")


@pytest.fixture
def lt_backend():
    old = cublas.set_gemm_backend("lt")
    yield
    cublas.set_gemm_backend(old)


@pytest.mark.parametrize("dtype, compute", DTYPES, ids=[f"{d}-{c}" for d, c in DTYPES])
@GPU
@given(data=st.data())
def test_relaunched_gemm_is_the_library_call(device, lt_backend, dtype, compute, data):
    # seven calls on three operand pairs per example
    m, n, k = data.draw(gemm_sizes(160, wide_mn=1025, wide_k=2049, budget=GEMM_BUDGET // 4),
                        label="m, n, k")
    la, lb = (data.draw(st.sampled_from(("C", "T")), label=f"layout {x}") for x in "ab")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    hosts = [(T.random_array((m, k), _np(dtype), rng=rng),
              T.random_array((k, n), _np(dtype), rng=rng)) for _ in range(3)]
    s = cl.Stream()
    devs = [(on_device(a, la, s), on_device(b, lb, s)) for a, b in hosts]
    # Every operand changes alone, then together, then nothing changes: each path of the
    # partial rewrite runs.
    a0, b0 = devs[0]
    a1, b1 = devs[1]
    a2, b2 = devs[2]
    calls = [(a0, b0), (a0, b0), (a1, b0), (a1, b1), (a2, b2), (a2, b2), (a0, b2)]
    want = _library_results(calls, compute, s)
    got = []
    for a, b in calls:
        out = cublas.gemm(a, b, compute=compute, stream=s)
        got.append(out.get(stream=s))
    p = _plan(a0, b0, compute)
    state = _lt_state(p)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.tobytes() == w.tobytes(), f"call {i} differs from cublasLtMatmul ({state!r})"
    ha, hb = hosts[0]
    T.assert_close(got[0], T.ref.gemm(ha, hb), dtype=dtype, compute=compute)
    # Recorded on the second call: a relaunch, or the reason there is none.
    assert isinstance(state, (relaunch.KernelRelaunch, str)) and state
    s.close()


def test_relaunch_engages_for_a_small_gemm(device, lt_backend):
    s = cl.Stream()
    rng = np.random.default_rng(1)
    a = cl.to_device(T.random_array((64, 64), np.float32, rng=rng), stream=s)
    b = cl.to_device(T.random_array((64, 64), np.float32, rng=rng), stream=s)
    plan_cache.clear("gemm")
    outs = [poisoned((64, 64), np.float32, s) for _ in range(4)]
    for o in outs:
        cublas.gemm(a, b, o, stream=s)
    p = next(e.plan for e in plan_cache.entries("gemm") if e.key["out_shape"] == (64, 64))
    rl = _lt_state(p)
    assert isinstance(rl, relaunch.KernelRelaunch), rl
    assert rl.patched_words >= 4
    assert "KernelRelaunch cublasLtMatmul" in repr(rl) and rl.nodes >= 1
    want = T.ref.gemm(a.get(stream=s), b.get(stream=s))
    for o in outs:
        T.assert_close(o.get(stream=s), want, dtype="float32")
    # Closing the plan cache frees the recorded graph; the next call records again.
    plan_cache.clear("gemm")
    del p
    import gc
    gc.collect()
    assert rl.closed
    with pytest.raises(cl.ClosedError):
        rl.launch((0, 0, 0, 0), s.raw)
    T.assert_close(cublas.gemm(a, b, stream=s).get(stream=s), want, dtype="float32")
    s.close()


def test_scaled_calls_and_captures_keep_the_library_call(device, lt_backend):
    s = cl.Stream()
    rng = np.random.default_rng(2)
    ha = T.random_array((48, 32), np.float32, rng=rng)
    hb = T.random_array((32, 40), np.float32, rng=rng)
    a, b = cl.to_device(ha, stream=s), cl.to_device(hb, stream=s)
    plan_cache.clear("gemm")
    for _ in range(3):
        cublas.gemm(a, b, stream=s)
    out = poisoned((48, 40), np.float32, s)
    cublas.gemm(a, b, out, alpha=0.5, stream=s)
    T.assert_close(out.get(stream=s), T.ref.gemm(ha, hb, alpha=0.5), dtype="float32")
    # Inside a capture the library call itself is recorded; the replay computes the product.
    cublas.prepare(s)
    out2 = poisoned((48, 40), np.float32, s)
    cublas.gemm(a, b, out2, stream=s)
    s.sync()
    out2.fill(T.poison_value(np.float32), s)
    with cl.graph.capture(s) as g:
        cublas.gemm(a, b, out2, stream=s)
    g.instantiate().replay(s)
    T.assert_close(out2.get(stream=s), T.ref.gemm(ha, hb), dtype="float32")
    s.close()


def test_threads_relaunch_bitwise(device, lt_backend):
    rng = np.random.default_rng(3)
    # A shape cuBLASLt runs as one kernel on Hopper (see test_relaunch_engages...).
    hosts = [(T.random_array((64, 64), np.float32, rng=rng),
              T.random_array((64, 64), np.float32, rng=rng)) for _ in range(8)]
    plan_cache.clear("gemm")
    s0 = cl.Stream()
    ops = [(cl.to_device(a, stream=s0), cl.to_device(b, stream=s0)) for a, b in hosts]
    for a, b in ops:            # record the relaunch before the threads start
        for _ in range(2):
            cublas.gemm(a, b, stream=s0)
    s0.sync()
    # Each thread runs its own executable graph; the operands change between its calls.
    match_serial(device, [lambda s, o=o: cublas.gemm(*o, stream=s) for o in ops], repeats=20,
                 copy_each=True, pick=lambda t, r: ((t + r) % len(ops),))
    p = _plan(*ops[0], None)
    assert isinstance(_lt_state(p), relaunch.KernelRelaunch), _lt_state(p)
    s0.close()


def test_split_and_semaphore_calls_relaunch(device, lt_backend):
    # Products cuBLASLt runs as more than one node on Hopper: a split-K kernel and its
    # reduction (a thin fp32 product with a long k), and a memset of semaphores before a
    # persistent bf16 kernel.  Each either relaunches (every node patched) or says why not;
    # every call is right.
    s = cl.Stream()
    rng = np.random.default_rng(4)
    for (m, n, k), dt in (((64, 64, 4096), np.float32), ((33, 96, 512), np.float32),
                          ((2048, 2048, 2048), cl.dtypes.bfloat16)):
        ha = T.random_array((m, k), dt, rng=rng)
        hbs = [T.random_array((k, n), dt, rng=rng) for _ in range(4)]
        a = cl.to_device(ha, stream=s)
        bs = [cl.to_device(h, stream=s) for h in hbs]
        plan_cache.clear("gemm")
        outs = [cublas.gemm(a, b, stream=s) for b in bs]
        p = _plan(a, bs[0], None)
        state = _lt_state(p)
        assert isinstance(state, (relaunch.KernelRelaunch, str)) and state
        for o, hb in zip(outs, hbs):
            T.assert_close(o.get(stream=s), T.ref.gemm(ha, hb), dtype=np.dtype(dt).name)
        print((m, n, k), np.dtype(dt).name, state)
    s.close()


EPILOGUE_CASES = ["default", "bias", "relu_bias", "gelu_aux_bias", "dgelu_bgrad"]


def _matmul_calls(epi, dt, rng, s, M=96, N=64, K=80):
    """Several calls of one Matmul plan whose operands (and bias / aux) change between
    calls; returns the list of result tuples as host arrays."""
    a = [cl.to_device(T.random_array((M, K), dt, rng=rng), stream=s) for _ in range(2)]
    b = [cl.to_device(T.random_array((K, N), dt, rng=rng), stream=s) for _ in range(2)]
    bias = [cl.to_device(T.random_array((N,), dt, rng=rng), stream=s) for _ in range(2)]
    aux_in = [cl.to_device(T.random_array((M, N), dt, rng=rng), stream=s) for _ in range(2)]
    plan = cublas.Matmul(a[0], b[0], epilogue=epi)
    out = []
    for i, (ia, ib, ic) in enumerate([(0, 0, 0), (0, 0, 0), (1, 0, 0), (1, 1, 1), (0, 1, 1),
                                      (0, 1, 1)]):
        kw = {}
        if epi in ("bias", "relu_bias", "gelu_aux_bias"):
            kw["bias"] = bias[ic]
        if epi == "dgelu_bgrad":
            kw["aux"] = aux_in[ic]
            kw["bias"] = cl.full((N,), T.poison_value(dt), dt, stream=s)
        r = plan.execute(a[ia], b[ib], stream=s, **kw)
        arrays = r if isinstance(r, tuple) else (r,)
        if epi == "dgelu_bgrad":
            arrays += (kw["bias"],)
        out.append(tuple(x.get(stream=s) for x in arrays))
    return plan, out


@pytest.mark.parametrize("epi", EPILOGUE_CASES)
def test_relaunched_matmul_is_the_library_call(device, epi):
    dt = cl.dtypes.bfloat16 if "gelu" in epi else np.float32
    s = cl.Stream()
    with cl.option_context(relaunch=False):
        _, want = _matmul_calls(epi, dt, np.random.default_rng(7), s)
    plan, got = _matmul_calls(epi, dt, np.random.default_rng(7), s)
    for i, (g, w) in enumerate(zip(got, want)):
        for j, (x, y) in enumerate(zip(g, w)):
            assert x.tobytes() == y.tobytes(), f"call {i}, result {j} ({epi}) differs"
    assert len(plan.relaunches) + len(plan.relaunches.reasons()) >= 1, plan.relaunches
    s.close()


def test_a_memset_and_kernel_call_relaunches_bitwise(device, lt_backend):
    # A large bf16 product that cuBLASLt runs, on Hopper, as a memset of its semaphores in the
    # workspace followed by a persistent kernel: the memset's destination is patched too.
    # Compared bitwise with the library call (a float64 reference would take minutes).
    n = 4096
    rng = np.random.default_rng(5)
    dt = cl.dtypes.bfloat16
    s = cl.Stream()
    a = cl.to_device(T.random_array((n, n), dt, rng=rng), stream=s)
    bs = [cl.to_device(T.random_array((n, n), dt, rng=rng), stream=s) for _ in range(3)]
    calls = [(a, bs[0]), (a, bs[0]), (a, bs[1]), (a, bs[2])]
    want = _library_results(calls, None, s)
    got = [cublas.gemm(x, y, stream=s).get(stream=s) for x, y in calls]
    state = _lt_state(_plan(a, bs[0], None))
    assert isinstance(state, (relaunch.KernelRelaunch, str)) and state
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.tobytes() == w.tobytes(), f"call {i} differs from cublasLtMatmul ({state!r})"
    print(state)
    s.close()
