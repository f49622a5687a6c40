"""cuDNN convolution against the float64 numpy references: forward, backward data/filter/bias,
fused conv+bias+activation, both layouts, 2-D and 3-D, algorithm choice and plan caching.

Every test runs twice: with the graph (backend) API enabled (``Options.conv_graph_api``
True, the default: problems it takes run there, the rest fall back to legacy plans) and with
the legacy API only.  tests/gpu/cudnn/test_graph.py checks that the graph path is really
taken."""

import ctypes
import threading

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs.cudnn.descriptors import layouts_of
from cudalibs import cudnn
from cudalibs import testing as T
from cudalibs.cudnn import backend as be
from cudalibs.cudnn.backend import engines
from cudalibs.testing import ref

from .._sizes import bound, fit_spatial
from .._threads import in_threads
from ._helpers import FLOATS, GPU, is_channels_last, poisoned, rand


def limit_the_engine_search(monkeypatch, compiled=1, plans=4):
    """Few candidates per graph-API search: the many small problems here stay quick.  The
    plans read FIND_MAX_PLANS through the ``cudnn.backend`` package and the search reads
    FIND_MAX_COMPILED in ``backend.engines``, so both names are set in both places."""
    for mod in (be, engines):
        monkeypatch.setattr(mod, "FIND_MAX_COMPILED", compiled)
        monkeypatch.setattr(mod, "FIND_MAX_PLANS", plans)


@pytest.fixture(autouse=True, params=["graph", "legacy"])
def backend(request, monkeypatch, process_options):
    """Run the test on the graph API (legacy fallbacks allowed) and on the legacy API only
    (process-wide, so that the worker threads of a test see it too)."""
    process_options(conv_graph_api=request.param == "graph")
    # one runtime-compiled candidate per search keeps the many small problems here quick
    limit_the_engine_search(monkeypatch)
    return request.param


@st.composite
def conv_problems(draw, nsp=2):
    g = draw(st.integers(1, 2))
    c, k = g * draw(st.integers(1, bound(3, 64))), g * draw(st.integers(1, bound(3, 64)))
    n = draw(st.integers(1, bound(3, 4)))
    x, w, pad, stride, dil, low = [n, c], [k, c // g], [], [], [], []
    for _ in range(nsp):
        r, d = draw(st.integers(1, 3)), draw(st.integers(1, 2))
        p, s = draw(st.integers(0, 2)), draw(st.integers(1, 2))
        ext = d * (r - 1) + 1
        low.append(max(1, ext - 2 * p))
        x.append(draw(st.integers(low[-1], ext + bound(6, 60))))
        w.append(r)
        pad.append(p)
        stride.append(s)
        dil.append(d)
    x = fit_spatial(x, w, stride, pad, dil, g, low)
    return dict(x=tuple(x), w=tuple(w), padding=tuple(pad), stride=tuple(stride),
                dilation=tuple(dil), groups=g)


def _params(p):
    return dict(stride=p["stride"], padding=p["padding"], dilation=p["dilation"],
                groups=p["groups"])


def _plan_note(op):
    plans = [e.plan for e in cudnn.algo_cache() if e.plan.op == op]
    return repr(plans[-1]) if plans else "no plan"


@GPU
@given(p=conv_problems(), dtype=st.sampled_from(FLOATS), cl_=st.booleans(),
       algo=st.sampled_from(["find", "heuristic"]), seed=st.integers(0, 2**31))
def test_conv_forward(device, p, dtype, cl_, algo, seed):
    rng = np.random.default_rng(seed)
    xh, x = rand(p["x"], dtype, rng, cl_)
    wh, w = rand(p["w"], dtype, rng, cl_)
    bh, b = rand((p["w"][0],), dtype, rng)
    yshape = ref.conv_output_shape(p["x"], p["w"], p["stride"], p["padding"], p["dilation"])
    out = poisoned(yshape, xh.dtype, cl_)
    note(f"{p} {dtype} channels_last={cl_} {algo}")
    y = cudnn.conv_forward(x, w, bias=b, algo=algo, out=out, **_params(p))
    assert y is out
    want = ref.conv_forward(xh, wh, bias=bh, **_params(p))
    T.assert_close(y, want, dtype, msg=_plan_note("forward"))
    # a new output is allocated in the input's layout
    y2 = cudnn.conv_forward(x, w, algo=algo, **_params(p))
    assert y2.shape == yshape and y2.dtype == xh.dtype
    if cl_ and len(layouts_of(x.shape, x.strides, x.itemsize)) == 1:
        # (inputs whose size-1 dimensions fit both layouts carry no layout to follow)
        assert is_channels_last(y2)
    T.assert_close(y2, ref.conv_forward(xh, wh, **_params(p)), dtype, msg=_plan_note("forward"))


@GPU
@given(p=conv_problems(), dtype=st.sampled_from(FLOATS), cl_=st.booleans(),
       seed=st.integers(0, 2**31))
def test_conv_backward_data(device, p, dtype, cl_, seed):
    rng = np.random.default_rng(seed)
    yshape = ref.conv_output_shape(p["x"], p["w"], p["stride"], p["padding"], p["dilation"])
    dyh, dy = rand(yshape, dtype, rng, cl_)
    wh, w = rand(p["w"], dtype, rng, cl_)
    out = poisoned(p["x"], dyh.dtype, cl_)
    note(f"{p} {dtype} channels_last={cl_}")
    dx = cudnn.conv_backward_data(dy, w, out=out, **_params(p))
    want = ref.conv_backward_data(dyh, wh, p["x"], **_params(p))
    T.assert_close(dx, want, dtype, msg=_plan_note("backward_data"))


@GPU
@given(p=conv_problems(), dtype=st.sampled_from(FLOATS), cl_=st.booleans(),
       det=st.booleans(), seed=st.integers(0, 2**31))
def test_conv_backward_filter(device, p, dtype, cl_, det, seed):
    rng = np.random.default_rng(seed)
    yshape = ref.conv_output_shape(p["x"], p["w"], p["stride"], p["padding"], p["dilation"])
    xh, x = rand(p["x"], dtype, rng, cl_)
    dyh, dy = rand(yshape, dtype, rng, cl_)
    out = poisoned(p["w"], xh.dtype, cl_)
    note(f"{p} {dtype} channels_last={cl_} deterministic={det}")
    dw = cudnn.conv_backward_filter(x, dy, out=out, deterministic=det, **_params(p))
    want = ref.conv_backward_filter(xh, dyh, p["w"], **_params(p))
    T.assert_close(dw, want, dtype, msg=_plan_note("backward_filter"))
    if det:
        plan = [e.plan for e in cudnn.algo_cache()
                if e.plan.op == "backward_filter" and e.key["deterministic"] is True][-1]
        assert plan.deterministic, repr(plan)
        if plan.backend == "graph":
            assert "nondeterministic" not in plan.notes, repr(plan)
        else:
            assert plan.algo not in (0, 3), repr(plan)


@GPU
@given(p=conv_problems(), dtype=st.sampled_from(FLOATS), cl_=st.booleans(),
       seed=st.integers(0, 2**31))
def test_conv_backward_bias(device, p, dtype, cl_, seed):
    rng = np.random.default_rng(seed)
    yshape = ref.conv_output_shape(p["x"], p["w"], p["stride"], p["padding"], p["dilation"])
    dyh, dy = rand(yshape, dtype, rng, cl_)
    out = poisoned((yshape[1],), dyh.dtype)
    if dtype == "bfloat16":
        with pytest.raises(TypeError, match="bfloat16"):
            cudnn.conv_backward_bias(dy, out=out)
        return
    db = cudnn.conv_backward_bias(dy, out=out)
    T.assert_close(db, ref.conv_backward_bias(dyh), dtype)


@GPU
@given(p=conv_problems(nsp=3), dtype=st.sampled_from(FLOATS), cl_=st.booleans(),
       seed=st.integers(0, 2**31))
def test_conv3d_forward_and_backward(device, p, dtype, cl_, seed):
    rng = np.random.default_rng(seed)
    xh, x = rand(p["x"], dtype, rng, cl_)
    wh, w = rand(p["w"], dtype, rng, cl_)
    note(f"{p} {dtype} channels_last={cl_}")
    y = cudnn.conv_forward(x, w, **_params(p))
    T.assert_close(y, ref.conv_forward(xh, wh, **_params(p)), dtype, msg=_plan_note("forward"))
    dyh, dy = rand(y.shape, dtype, rng, cl_)
    dx = cudnn.conv_backward_data(dy, w, p["x"], **_params(p))
    T.assert_close(dx, ref.conv_backward_data(dyh, wh, p["x"], **_params(p)), dtype,
                   msg=_plan_note("backward_data"))
    dw = cudnn.conv_backward_filter(x, dy, p["w"], **_params(p))
    T.assert_close(dw, ref.conv_backward_filter(xh, dyh, p["w"], **_params(p)), dtype,
                   msg=_plan_note("backward_filter"))


@GPU
@given(p=conv_problems(), dtype=st.sampled_from(FLOATS), cl_=st.booleans(),
       act=st.sampled_from(["relu", "identity"]), with_z=st.booleans(),
       seed=st.integers(0, 2**31))
def test_conv_bias_act_equals_composition(device, p, dtype, cl_, act, with_z, seed):
    rng = np.random.default_rng(seed)
    xh, x = rand(p["x"], dtype, rng, cl_)
    wh, w = rand(p["w"], dtype, rng, cl_)
    bh, b = rand((p["w"][0],), dtype, rng)
    yshape = ref.conv_output_shape(p["x"], p["w"], p["stride"], p["padding"], p["dilation"])
    zh, z = rand(yshape, dtype, rng, cl_) if with_z else (None, None)
    out = poisoned(yshape, xh.dtype, cl_)
    note(f"{p} {dtype} channels_last={cl_} {act} z={with_z}")
    y = cudnn.conv_bias_act(x, w, b, activation=act, z=z, alpha2=0.5, out=out, **_params(p))
    pre = ref.conv_forward(xh, wh, bias=bh, **_params(p))
    if with_z:
        pre = pre + 0.5 * zh.astype(np.float64)
    want = ref.activation(pre, act)
    if dtype == "float32":
        # The error is relative to the summands, not to their (possibly cancelled) sum; float32
        # engines may transform (Winograd, FFT), which spreads errors over the whole output, so
        # the norms' ratio scales the tolerance and assert_close's RMS floor stays.
        terms = ref.conv_forward(np.abs(xh), np.abs(wh), bias=np.abs(bh), **_params(p))
        if with_z:
            terms = terms + 0.5 * np.abs(zh.astype(np.float64))
        norm_pre = np.linalg.norm(pre)
        tol = T.TOLERANCES[dtype] * max(1.0, np.linalg.norm(terms) / norm_pre if norm_pre
                                        else np.inf)
        T.assert_close(y, want, rtol=tol, msg=_plan_note("fused"))
        check_composition = lambda y3: T.assert_close(y, y3, rtol=2 * tol)  # noqa: E731
    else:
        bound = _half_fused_bound(xh, wh, bh, zh, p)
        T.assert_within(y, want, bound, msg=_plan_note("fused"))
        check_composition = lambda y3: T.assert_within(y, y3, 2 * bound)  # noqa: E731
    # the three-step composition with our own primitives agrees too (y3 in z's layout: with
    # C = 1 or 1x1 images the layout is a tie conv_forward may break either way); both are
    # rounded, each within the bound of the reference
    y3 = cudnn.conv_forward(x, w, bias=b, out=poisoned(yshape, xh.dtype, cl_), **_params(p))
    if with_z:
        cudnn.add_tensor(z, y3, alpha=0.5, beta=1.0)
    y3 = cudnn.activation_forward(y3, act)
    check_composition(y3.get().astype(np.float64))


def _half_fused_bound(xh, wh, bh, zh, p):
    """The largest error of each element of a float16 / bfloat16 ``act(conv(x, w) + bias
    [+ 0.5 z])`` (ReLU or identity, which do not grow an error).

    The convolution accumulates in float32 (products of half-precision inputs are exact
    there); a sum of ``K`` products errs by at most ``γ_K`` times the sum of their magnitudes,
    ``|x| * |w|``, and 8 times that leaves room for engines that transform (Winograd, FFT) in
    float32.  The engines then round the convolution to the data type, add the bias and z
    and round again, each partial sum once at most (graph engines round only the result):
    each rounding errs by the type's unit roundoff ``u`` times the value rounded, which is
    at most ``|conv|``, ``|conv| + |bias| + 0.5 |z|`` and ``|pre|`` for the three.  Twice
    that, for margin, plus the type's subnormal spacing.
    """
    dt = xh.dtype
    conv = ref.conv_forward(xh, wh, **_params(p))
    mag = ref.conv_forward(np.abs(xh), np.abs(wh), **_params(p))
    bias = np.abs(bh.astype(np.float64)).reshape((1, -1) + (1,) * (conv.ndim - 2))
    summands = np.abs(conv) + bias
    pre = conv + bh.astype(np.float64).reshape(bias.shape)
    if zh is not None:
        summands = summands + 0.5 * np.abs(zh.astype(np.float64))
        pre = pre + 0.5 * zh.astype(np.float64)
    k = int(np.prod(wh.shape[1:]))                 # products per output: C / groups x taps
    u32 = T.unit_roundoff(np.float32)
    sums = 8 * k * u32 / (1 - k * u32) * mag
    u = T.unit_roundoff(dt)
    tiny = float(ml_dtypes.finfo(dt).smallest_subnormal)
    return sums + 2 * u * (np.abs(conv) + summands + np.abs(pre)) + tiny


def test_conv_float64(device, rng):
    xh, x = rand((2, 3, 7, 6), "float64", rng)
    wh, w = rand((4, 3, 3, 2), "float64", rng)
    y = cudnn.conv_forward(x, w, padding=1)
    T.assert_close(y, ref.conv_forward(xh, wh, padding=1), np.float64)


def test_tf32_math_is_opt_in(device, rng):
    xh, x = rand((4, 16, 12, 12), "float32", rng)
    wh, w = rand((16, 16, 3, 3), "float32", rng)
    want = ref.conv_forward(xh, wh, padding=1)
    y = cudnn.conv_forward(x, w, padding=1, math="tf32")
    T.assert_close(y, want, np.float32, compute="tf32")
    y = cudnn.conv_forward(x, w, padding=1)
    T.assert_close(y, want, np.float32, msg=_plan_note("forward"))


@pytest.mark.parametrize("op", ["forward", "backward_data", "backward_filter"])
def test_every_candidate_of_a_graph_plan_runs_right(device, rng, backend, op):
    """A graph-searched plan lists the legacy algorithms after its engines; whichever the
    autotune picks must compute the same thing, eagerly and replayed from a CUDA graph."""
    xh, x = rand((4, 16, 12, 12), "float32", rng)
    wh, w = rand((16, 16, 3, 3), "float32", rng)
    dyh, dy = rand((4, 16, 12, 12), "float32", rng)
    if op == "forward":
        plan = cudnn.ConvForwardPlan(x, w, padding=1, max_candidates=2)
        args, want = (x, w), ref.conv_forward(xh, wh, padding=1)
    elif op == "backward_data":
        plan = cudnn.ConvBackwardDataPlan(dy, w, x.shape, padding=1, max_candidates=2)
        args, want = (dy, w), ref.conv_backward_data(dyh, wh, x.shape, padding=1)
    else:
        plan = cudnn.ConvBackwardFilterPlan(x, dy, w.shape, padding=1, max_candidates=2)
        args, want = (x, dy), ref.conv_backward_filter(xh, dyh, w.shape, padding=1)
    kinds = [c["backend"] for c in plan.plan().candidates]
    if backend == "graph" and not plan.fallback:
        assert kinds[0] == "graph" and "legacy" in kinds, kinds
    else:
        assert set(kinds) == {"legacy"}, kinds
    s = cl.Stream(device)
    for i, c in enumerate(plan.candidates):
        plan.select(i)
        out, out2 = poisoned(want.shape, np.float32), poisoned(want.shape, np.float32)
        device.synchronize()            # the poison is written before s runs
        plan.execute(*args, out=out, stream=s)
        s.sync()                        # the checks read on another stream
        T.assert_close(out, want, np.float32, msg=f"candidate {c['id']}")
        with cl.graph.capture(s) as g:
            plan.execute(*args, out=out2, stream=s)
        exe = g.instantiate()
        exe.replay(s)
        s.sync()
        T.assert_close(out2, want, np.float32, msg=f"candidate {c['id']}, replayed")
        exe.close()
        g.close()
    plan.close()
    s.close()


def _cached():
    """``{raw key: plan}`` of the cached convolution plans."""
    return {e.raw_key: e.plan for e in cudnn.algo_cache()}


def test_plan_is_cached_and_find_never_touches_out(device, rng, backend):
    cudnn.clear_algo_cache()
    xh, x = rand((2, 4, 9, 9), "float32", rng)
    wh, w = rand((8, 4, 3, 3), "float32", rng)
    oh, out = rand((2, 8, 9, 9), "float32", rng)
    # beta=1 on the first call: if the algorithm search wrote into out, the sum would be wrong
    # (beta != 0 always runs a legacy plan: the graph bakes beta into its operation)
    cudnn.conv_forward(x, w, padding=1, out=out, beta=1.0)
    T.assert_close(out, ref.conv_forward(xh, wh, padding=1) + oh, np.float32)
    plans = _cached()
    assert len(plans) == 1
    (plan,) = plans.values()
    assert plan.op == "forward" and plan.source == "find" and isinstance(plan, cudnn.ConvPlan)
    assert "ConvForwardPlan" in repr(plan) and plan.backend == "legacy"
    # the default scaling is another key (alpha and beta are fixed per plan): one new plan
    cudnn.conv_forward(x, w, padding=1, out=out)
    plans2 = _cached()
    assert len(plans2) == 2
    (plan2,) = [v for v in plans2.values() if v is not plan]
    if backend == "graph":
        # graph engines first (then the legacy algorithms, which an autotune weighs too), or
        # legacy ones only with the reason the graph API could not serve the problem
        kinds = [c["backend"] for c in plan2.candidates]
        assert kinds[0] == "graph" or plan2.fallback, repr(plan2)
        assert kinds == sorted(kinds, key=lambda k: k != "graph"), kinds
    else:
        assert {c["backend"] for c in plan2.candidates} == {"legacy"}
    n_desc = cudnn.descriptor_cache_size()
    for _ in range(3):
        cudnn.conv_forward(x, w, padding=1, out=out)
    assert _cached() == plans2
    assert cudnn.descriptor_cache_size() == n_desc
    T.assert_close(out, ref.conv_forward(xh, wh, padding=1), np.float32, msg=repr(plan2))
    # and beta=1 again reuses the first (legacy) plan, not the graph one
    oh2, out2 = rand((2, 8, 9, 9), "float32", rng)
    cudnn.conv_forward(x, w, padding=1, out=out2, beta=1.0)
    T.assert_close(out2, ref.conv_forward(xh, wh, padding=1) + oh2, np.float32)
    assert _cached() == plans2


def test_workspace_limit_and_explicit_algorithms(device, rng):
    xh, x = rand((2, 8, 16, 16), "float16", rng, True)
    wh, w = rand((8, 8, 3, 3), "float16", rng, True)
    want = ref.conv_forward(xh, wh, padding=1)
    y = cudnn.conv_forward(x, w, padding=1, workspace_limit=0)
    T.assert_close(y, want, np.float16)
    plan = [e.plan for e in cudnn.algo_cache() if e.key["workspace_limit"] == 0][-1]
    assert plan.workspace_size == 0
    for algo in ("implicit_precomp_gemm", "heuristic", 1):
        T.assert_close(cudnn.conv_forward(x, w, padding=1, algo=algo), want, np.float16)
    assert cudnn.workspace_bytes(device) >= 0


def test_stream_argument(device, rng):
    xh, x = rand((2, 3, 8, 8), "float32", rng)
    wh, w = rand((4, 3, 3, 3), "float32", rng)
    with cl.Stream(device) as s:
        y = cudnn.conv_forward(x, w, padding=1, stream=s)
        s.sync()
    T.assert_close(y, ref.conv_forward(xh, wh, padding=1), np.float32)
    y = cudnn.conv_forward(x, w, padding=1)  # back on the default stream: handle rebinds
    T.assert_close(y, ref.conv_forward(xh, wh, padding=1), np.float32)


def test_bad_input_on_gpu(device, rng):
    _, x = rand((2, 4, 8, 8), "float32", rng)
    _, w = rand((6, 4, 3, 3), "float32", rng)
    with pytest.raises(ValueError, match="shape"):
        cudnn.conv_forward(x, w, out=cl.empty((2, 6, 8, 8), np.float32))
    with pytest.raises(TypeError, match="dtype"):
        cudnn.conv_forward(x, w, out=cl.empty((2, 6, 6, 6), np.float16))
    with pytest.raises(ValueError, match="layout"):
        cudnn.conv_forward(x, w, out=poisoned((2, 6, 6, 6), np.float32, True))
    with pytest.raises(ValueError, match="bias"):
        cudnn.conv_forward(x, w, bias=cl.empty((5,), np.float32))
    with pytest.raises(ValueError, match="neither packed"):
        cudnn.conv_forward(x[:, :, ::2], w)
    with pytest.raises((cudnn.NoAlgorithmError, cl.CudnnError)):  # too big, or unsupported
        cudnn.conv_forward(x, w, algo="fft", workspace_limit=0)
    x.close()
    with pytest.raises(cl.ClosedError):
        cudnn.conv_forward(x, w)


def test_threads_get_their_own_handle(device, rng):
    from cudalibs.cudnn import handle

    xh, x = rand((2, 3, 8, 8), "float32", rng)
    wh, w = rand((4, 3, 3, 3), "float32", rng)
    want = ref.conv_forward(xh, wh, padding=1)

    # Every thread holds its handle until all have theirs: a thread that ended first would
    # free its handle, and a later one could be given the same address.
    held = threading.Barrier(3)

    def work(t, s):
        y = cudnn.conv_forward(x, w, padding=1, stream=s).get(stream=s)
        h = ctypes.cast(handle.handle_for(device, s.handle).raw, ctypes.c_void_p).value
        held.wait(60)
        return y, h

    results = in_threads(device, work, 3)
    for y, _ in results:
        T.assert_close(y, want, np.float32)
    assert len({h for _, h in results}) == 3
