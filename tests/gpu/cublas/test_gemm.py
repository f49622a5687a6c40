"""cuBLAS GEMM against float64 numpy: every dtype, layout, alpha/beta, batching, tuning, graphs."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T
from cudalibs.runtime.cache import cache as plan_cache

from .._sizes import GEMM_BUDGET, gemm_sizes, gpu_settings
from .._threads import in_threads
from ._util import LAYOUTS, on_device, poisoned

GPU = gpu_settings(25)

# (input dtype, compute, output dtype): every combination gemm supports.
COMBOS = [
    ("float64", None, "float64"), ("float32", None, "float32"), ("float32", "tf32", "float32"),
    ("float16", None, "float16"), ("float16", "f16", "float16"), ("float16", None, "float32"),
    ("bfloat16", None, "bfloat16"), ("bfloat16", None, "float32"), ("int8", None, "int32"),
    ("complex64", None, "complex64"), ("complex128", None, "complex128"),
]


def _np(name):
    return cl.dtypes.lookup(name).numpy


def _tol_args(dtype, compute):
    return dict(dtype=dtype, compute="tf32" if compute == "tf32" else None)


def _scalars(draw, dtype, accumulate):
    if dtype == "int8":
        alpha = draw(st.sampled_from([1, 2, -3]))
        beta = draw(st.sampled_from([1, -1, 2])) if accumulate else 0
    elif dtype.startswith("complex"):
        alpha = draw(st.sampled_from([1, 0.5 - 1.5j, -2j]))
        beta = draw(st.sampled_from([1, 0.25 + 1j])) if accumulate else 0
    else:
        alpha = draw(st.sampled_from([1, 0.5, -1.75]))
        beta = draw(st.sampled_from([1.0, -0.5, 2.0])) if accumulate else 0
    return alpha, beta


@pytest.mark.parametrize("dtype, compute, out_dtype", COMBOS,
                         ids=[f"{a}-{c}-{o}" for a, c, o in COMBOS])
@GPU
@given(data=st.data())
def test_gemm_matches_numpy(device, dtype, compute, out_dtype, data):
    if compute == "f16":
        # float16 accumulation errs by about k units of 2**-11: small sides in every profile
        sizes = gemm_sizes(128, wide_mn=128, wide_k=128)
    else:
        # complex products cost four real ones
        sizes = gemm_sizes(300, budget=GEMM_BUDGET // (4 if dtype.startswith("complex") else 1))
    m, n, k = data.draw(sizes, label="m, n, k")
    if dtype == "int8":   # cuBLAS: k and every leading dimension a multiple of 4
        n, k = 4 * ((n + 3) // 4), 4 * ((k + 3) // 4)
        m_layout = st.sampled_from(("C", "padded"))   # padding keeps ld a multiple of 4
    else:
        m_layout = st.sampled_from(LAYOUTS)
    la, lb = data.draw(m_layout, label="layout a"), data.draw(m_layout, label="layout b")
    accumulate = data.draw(st.booleans(), label="accumulate")
    alpha, beta = _scalars(data.draw, dtype, accumulate)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    a = T.random_array((m, k), _np(dtype), rng=rng)
    b = T.random_array((k, n), _np(dtype), rng=rng)
    da, db = on_device(a, la), on_device(b, lb)
    if accumulate:
        c = T.random_array((m, n), _np(out_dtype), rng=rng)
        out = cl.to_device(c)
    else:
        c = None
        out = poisoned((m, n), _np(out_dtype)) if out_dtype != dtype or data.draw(
            st.booleans(), label="give out") else None
    res = cublas.gemm(da, db, out, alpha=alpha, beta=beta, compute=compute)
    assert res.shape == (m, n) and res.dtype == _np(out_dtype)
    if out is not None:
        assert res is out
    expected = T.ref.gemm(a, b, c, alpha=alpha, beta=beta)
    T.assert_close(res, expected, **_tol_args(dtype, compute),
                   msg=f"{dtype}->{out_dtype} compute={compute} m={m} n={n} k={k} "
                       f"layouts={la},{lb} alpha={alpha} beta={beta}")
    # Inputs are never written.
    np.testing.assert_array_equal(da.get().view(np.uint8), a.view(np.uint8))


@GPU
@given(data=st.data())
def test_gemm_on_a_stream_and_views(device, data):
    m, n, k = data.draw(gemm_sizes(64), label="m, n, k")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    big = T.random_array((m + 3, k + 5), np.float32, rng=rng)
    b = T.random_array((n, k), np.float32, rng=rng)
    with cl.Stream() as s:
        dbig = cl.to_device(big, stream=s)
        view = dbig[2:2 + m, 1:1 + k]            # offset pointer, row stride k + 5
        res = cublas.gemm(view, cl.to_device(b, stream=s).T, stream=s)
        got = res.get(stream=s)
    T.assert_close(got, T.ref.gemm(big[2:2 + m, 1:1 + k], b.T), np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "complex64"])
@GPU
@given(data=st.data())
def test_strided_batched(device, dtype, data):
    batch = data.draw(st.integers(1, 9), label="batch")
    m, n, k = data.draw(gemm_sizes(96, wide_mn=1025, wide_k=2049, budget=GEMM_BUDGET // 9),
                        label="m, n, k")
    shape_a = data.draw(st.sampled_from(["3d", "2d", "batch1"]), label="a")
    shape_b = data.draw(st.sampled_from(["3d", "2d", "batch1"]), label="b")
    la, lb = (data.draw(st.sampled_from(LAYOUTS), label=f"layout {x}") for x in "ab")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))

    def operand(kind, rows, cols):
        if kind == "3d":
            return T.random_array((batch, rows, cols), _np(dtype), rng=rng)
        if kind == "batch1":
            return T.random_array((1, rows, cols), _np(dtype), rng=rng)
        return T.random_array((rows, cols), _np(dtype), rng=rng)

    a, b = operand(shape_a, m, k), operand(shape_b, k, n)
    if a.ndim == 2 and b.ndim == 2:
        a = a[None]
    expected = T.ref.gemm(a, b)
    out = poisoned(expected.shape, _np(dtype))
    res = cublas.gemm_strided_batched(on_device(a, la), on_device(b, lb), out=out)
    assert res is out
    T.assert_close(res, expected, dtype,
                   msg=f"batch={batch} a={shape_a}/{la} b={shape_b}/{lb} m={m} n={n} k={k}")


def test_strided_batched_accumulates(device, rng):
    a = T.random_array((4, 33, 17), np.float32, rng=rng)
    b = T.random_array((4, 17, 9), np.float32, rng=rng)
    c = T.random_array((4, 33, 9), np.float32, rng=rng)
    out = cl.to_device(c)
    cublas.gemm_strided_batched(cl.to_device(a), cl.to_device(b), out, alpha=0.5, beta=-2.0)
    T.assert_close(out, T.ref.gemm(a, b, c, alpha=0.5, beta=-2.0), np.float32)


def test_gemm_batched_lists(device, rng):
    shapes = [(5, 7), (7, 3)]
    a = [T.random_array(shapes[0], np.float32, rng=rng) for _ in range(6)]
    b = [T.random_array(shapes[1], np.float32, rng=rng) for _ in range(6)]
    res = cublas.gemm_batched([cl.to_device(x) for x in a],
                              [cl.to_device(x).T.copy().T for x in b])
    for r, x, y in zip(res, a, b):
        T.assert_close(r, T.ref.gemm(x, y), np.float32)
    outs = [cl.to_device(T.random_array((5, 3), np.float32, rng=rng)) for _ in range(6)]
    before = [o.get() for o in outs]
    cublas.gemm_batched([cl.to_device(x) for x in a], [cl.to_device(x) for x in b], outs,
                        alpha=2.0, beta=1.0)
    for o, c0, x, y in zip(outs, before, a, b):
        T.assert_close(o, T.ref.gemm(x, y, c0, alpha=2.0, beta=1.0), np.float32)


def test_repeat_calls_reuse_the_plan(device, rng):
    a = cl.to_device(T.random_array((64, 64), np.float32, rng=rng))
    b = cl.to_device(T.random_array((64, 64), np.float32, rng=rng))
    cublas.gemm(a, b)
    n_plans = len(plan_cache.entries("gemm"))
    for _ in range(5):
        r = cublas.gemm(a, b)
    assert len(plan_cache.entries("gemm")) == n_plans
    T.assert_close(r, T.ref.gemm(a.get(), b.get()), np.float32)


def _gemm_module():
    import importlib

    return importlib.import_module("cudalibs.cublas.gemm")


def test_copy_path_for_strided_operands(device, rng):
    a = T.random_array((20, 30), np.float32, rng=rng)
    b = T.random_array((30, 10), np.float32, rng=rng)
    res = cublas.gemm(on_device(a, "strided"), on_device(b, "strided"))
    T.assert_close(res, T.ref.gemm(a, b), np.float32)


def test_bad_input_on_gpu(device, rng):
    a = cl.to_device(T.random_array((8, 8), np.float32, rng=rng))
    with pytest.raises(ValueError, match="overlaps"):
        cublas.gemm(a, a, out=a)
    with pytest.raises(ValueError, match="overlaps"):
        cublas.gemm(a[:4], a[:, :4], out=a[4:, :4])
    dead = cl.to_device(T.random_array((8, 8), np.float32, rng=rng))
    dead.close()
    with pytest.raises(cl.ClosedError):
        cublas.gemm(a, dead)
    with pytest.raises(ValueError, match="multiple of 4"):
        cublas.gemm(cl.to_device(np.ones((3, 6), np.int8)), cl.to_device(np.ones((6, 4),
                                                                                   np.int8)))


def test_tune_gemm(device, rng):
    cublas.clear_algo_cache()
    a = T.random_array((128, 96), np.float32, rng=rng)
    b = T.random_array((96, 64), np.float32, rng=rng)
    da, db = cl.to_device(a), cl.to_device(b)
    out = poisoned((128, 64), np.float32)
    info = cublas.tune_gemm(da, db, out, iterations=2)
    print("tune_gemm:", {k: v for k, v in info.items() if k != "times"},
          "timed", len(info["times"]))
    assert info["algo"] in cublas.GEMM_ALGOS and info["ms"] > 0
    assert np.isnan(out.get()).all()          # tuning never writes the caller's out
    assert len(cublas.algo_cache()) == 1
    res = cublas.gemm(da, db, out, algo="tuned")
    T.assert_close(res, T.ref.gemm(a, b), np.float32)
    assert len(cublas.algo_cache()) == 1      # the tuned entry was reused
    # A miss tunes on the fly.
    res = cublas.gemm(da[:100], db, algo="tuned")
    T.assert_close(res, T.ref.gemm(a[:100], b), np.float32)
    assert len(cublas.algo_cache()) == 2


def test_explicit_algorithms(device, rng):
    a = T.random_array((64, 48), np.float16, rng=rng)
    b = T.random_array((48, 32), np.float16, rng=rng)
    for algo in (-1, 0, 99, 100):
        res = cublas.gemm(cl.to_device(a), cl.to_device(b), algo=algo)
        T.assert_close(res, T.ref.gemm(a, b), np.float16, msg=f"algo {algo}")


def test_graph_capture_replays(device, rng):
    graph = getattr(cl, "graph", None) or pytest.importorskip("cudalibs.graph")
    a = T.random_array((96, 80), np.float32, rng=rng)
    b = T.random_array((80, 72), np.float32, rng=rng)
    s = cl.Stream()
    cublas.prepare(s)                  # handle and workspace exist before the capture
    da, db = cl.to_device(a, stream=s), cl.to_device(b, stream=s)
    dbt = db.T.copy(stream=s).T            # a transposed view: a transpose flag in the call
    out = poisoned((96, 72), np.float32, stream=s)
    s.sync()
    with graph.capture(s) as g:
        cublas.gemm(da, dbt, out, stream=s)
    exe = g.instantiate()
    assert np.isnan(out.get(stream=s)).all()       # capture ran nothing
    exe.replay(s)
    T.assert_close(out.get(stream=s), T.ref.gemm(a, b), np.float32)
    # New inputs in the same memory: the replay reads them.
    a2 = T.random_array((96, 80), np.float32, rng=rng)
    da.copy_(a2, s)
    exe.replay(s)
    T.assert_close(out.get(stream=s), T.ref.gemm(a2, b), np.float32)
    exe.close()
    g.close()


def test_handles_are_per_thread(device, rng):
    a = T.random_array((32, 32), np.float32, rng=rng)

    def work(t, s):
        return cublas.gemm(cl.to_device(a, stream=s), cl.to_device(a, stream=s),
                           stream=s).get(stream=s)

    for r in in_threads(device, work, 4):
        T.assert_close(r, T.ref.gemm(a, a), np.float32)


@pytest.mark.parametrize("backend", ["auto", "cublas"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_repeated_calls_compute_what_the_call_would(device, rng, dtype, backend):
    """Repeated calls of a problem relaunch the library's recorded kernels (``replay=True`` is
    accepted and changes nothing): each call reads the arrays' current contents, and other
    scalars are another call shape, recorded (or refused, with a reason) on its own."""
    dt = cl.dtypes.lookup(dtype).numpy
    plan_cache.clear("gemm")        # the one plan of this problem is the one looked at below
    s = cl.Stream()
    a = cl.empty((33, 20), dt, stream=s)
    b = cl.empty((20, 17), dt, stream=s)
    out = poisoned((33, 17), dt, stream=s)
    # Six calls of each shape: a recording that raises is tried again on later calls, and
    # after three tries refused, so by the sixth call every shape is decided.
    with cl.option_context(gemm_backend=backend):
        for i in range(6):
            ah = T.random_array((33, 20), dt, rng=rng)
            bh = T.random_array((20, 17), dt, rng=rng)
            a.copy_(ah, stream=s)
            b.copy_(bh, stream=s)
            assert cublas.gemm(a, b, out, stream=s, replay=True) is out
            T.assert_close(out.get(stream=s), T.ref.gemm(ah, bh), dtype, msg=f"call {i}")
            # another scalar is another call shape
            cublas.gemm(a, b, out, alpha=0.5, beta=0.0, stream=s, replay=True)
            T.assert_close(out.get(stream=s), 0.5 * T.ref.gemm(ah, bh), dtype,
                           msg=f"alpha {i}")
        plan = next(e.plan for e in plan_cache.entries("gemm")
                    if e.key["out_shape"] == (33, 17) and e.key["a_dtype"] == dt)
        info = plan.relaunch_info()
        # What replaced the replay graphs: each call shape was recorded on its second call,
        # or refused with a reason.  cublasGemmEx (the "cublas" backend, or a problem
        # cuBLASLt has no algorithm for) keys its shapes by the scalars: two of them.  The
        # cuBLASLt route relaunches the plan's own scalars only: one.
        shapes = 1 if plan.lt else 2
        assert info["recorded"] + info["refused"] == shapes, (info, plan)
        assert info["pending"] == 0 and info["failed"] == 0, info
        if backend == "cublas":
            assert not plan.lt, plan            # never built when the backend is cuBLAS
            assert len(plan.relaunches) + len(plan.relaunches.reasons()) == 2, info
        total = cl.plan_cache.info()["relaunch"]
        assert total["recorded"] >= info["recorded"] and total["refused"] >= info["refused"]
        # strided-batched, allocating: every call's output is a new block, whose address
        # the relaunch takes like any other
        a3 = cl.to_device(T.random_array((5, 8, 6), dt, rng=rng), stream=s)
        b3h = T.random_array((5, 6, 7), dt, rng=rng)
        b3 = cl.to_device(b3h, stream=s)
        for _ in range(4):
            y = cublas.gemm_strided_batched(a3, b3, stream=s, replay=True)
            T.assert_close(y.get(stream=s), T.ref.gemm(a3.get(stream=s), b3h), dtype)
            del y
        # the legacy stream computes the product too
        s.sync()
        out.fill(T.poison_value(dt), stream=s)
        s.sync()
        cublas.gemm(a, b, out, replay=True)
        cl.default_stream().sync()
        T.assert_close(out.get(), T.ref.gemm(ah, bh), dtype, msg="legacy stream")
        # inside a capture block the library call itself is captured
        cublas.handle.prepare(s)
        with cl.graph.capture(s) as g:
            cublas.gemm(a, b, out, stream=s, replay=True)
        assert g.num_nodes >= 1
    s.sync()
