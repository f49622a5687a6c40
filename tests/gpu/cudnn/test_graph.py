"""The cuDNN graph (backend) API on a GPU: the convolutions and the fused conv+bias+act really
take it where they should, give the numpy reference's results, fall back cleanly, and keep
their per-plan variant packs bounded."""

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cudnn
from cudalibs import testing as T
from cudalibs.cudnn import backend
from cudalibs.cudnn.backend import engines
from cudalibs.cudnn.conv import lower
from cudalibs.testing import ref

from .._sizes import bound, examples, fit_spatial
from ._helpers import GPU, poisoned, rand


@pytest.fixture(autouse=True)
def graph_on(process_options):
    process_options(conv_graph_api=True)


def _plan(op, x_shape=None):
    plans = [e.plan for e in cudnn.algo_cache()
             if e.plan.op == op and (x_shape is None
                                     or next(iter(e.plan.operand_shapes.values())) == x_shape)]
    assert plans, f"no {op} plan cached"
    return plans[-1]


def _all_plans():
    return "\n".join(repr(e.plan) for e in cudnn.algo_cache())


@pytest.mark.parametrize("dtype, channels_last, math, compute", [
    ("float16", True, None, None),
    ("bfloat16", True, None, None),
    ("float32", False, "tf32", "tf32"),
    ("float32", False, None, None),  # math="fma": true float32, no tensor cores
])
@pytest.mark.parametrize("algo", ["find", "heuristic"])
def test_forward_takes_the_graph_path(device, rng, dtype, channels_last, math, compute, algo):
    xh, x = rand((4, 16, 12, 12), dtype, rng, channels_last)
    wh, w = rand((32, 16, 3, 3), dtype, rng, channels_last)
    out = poisoned((4, 32, 12, 12), xh.dtype, channels_last)
    y = cudnn.conv_forward(x, w, padding=1, out=out, math=math, algo=algo)
    plan = _plan("forward", x.shape)
    print(plan)
    assert plan.backend == "graph", repr(plan)
    assert plan.source == algo and plan.algo_name.startswith("eng") and plan.gplan is not None
    assert "graph" in repr(plan) and plan.algo_name in repr(plan)
    if algo == "find":
        assert plan.time_ms is not None and plan.time_ms > 0 and len(plan.candidates) >= 1
    if dtype == "float32" and math is None:
        assert "tensor_core" not in plan.notes and "down_convert_inputs" not in plan.notes
    if dtype == "float32" and math == "tf32":
        assert "down_convert_inputs" not in plan.notes
    T.assert_close(y, ref.conv_forward(xh, wh, padding=1), xh.dtype, compute=compute,
                   msg=repr(plan))


@pytest.mark.parametrize("dtype, channels_last", [("float16", True), ("float32", False)])
def test_backward_on_the_graph_path(device, rng, dtype, channels_last):
    xh, x = rand((2, 16, 10, 10), dtype, rng, channels_last)
    wh, w = rand((16, 16, 3, 3), dtype, rng, channels_last)
    dyh, dy = rand((2, 16, 10, 10), dtype, rng, channels_last)
    dx = cudnn.conv_backward_data(dy, w, x.shape, padding=1,
                                  out=poisoned(x.shape, xh.dtype, channels_last))
    pd = _plan("backward_data")
    T.assert_close(dx, ref.conv_backward_data(dyh, wh, x.shape, padding=1), xh.dtype,
                   msg=repr(pd))
    dw = cudnn.conv_backward_filter(x, dy, w.shape, padding=1,
                                    out=poisoned(w.shape, xh.dtype, channels_last))
    pf = _plan("backward_filter")
    T.assert_close(dw, ref.conv_backward_filter(xh, dyh, w.shape, padding=1), xh.dtype,
                   msg=repr(pf))
    print(pd, pf, sep="\n")
    assert pd.backend == "graph", repr(pd)
    assert pf.backend == "graph", repr(pf)


def test_switch_and_scaling_pick_the_legacy_path(device, rng, process_options):
    xh, x = rand((2, 8, 8, 8), "float16", rng, True)
    wh, w = rand((8, 8, 3, 3), "float16", rng, True)
    want = ref.conv_forward(xh, wh, padding=1)
    cudnn.clear_algo_cache()
    cudnn.conv_forward(x, w, padding=1)
    assert _plan("forward").backend == "graph", _all_plans()
    # alpha != 1: a legacy plan under its own key, the graph plan untouched
    y = cudnn.conv_forward(x, w, padding=1, alpha=0.5)
    T.assert_close(y, 0.5 * want, np.float16)
    backends = sorted(e.plan.backend for e in cudnn.algo_cache())
    assert backends == ["graph", "legacy"], _all_plans()
    # an explicit legacy algorithm stays legacy
    cudnn.conv_forward(x, w, padding=1, algo="implicit_precomp_gemm")
    assert _plan("forward").backend == "legacy"
    # the switch off: legacy plans only
    process_options(conv_graph_api=False)
    cudnn.clear_algo_cache()
    T.assert_close(cudnn.conv_forward(x, w, padding=1), want, np.float16)
    assert all(e.plan.backend == "legacy" for e in cudnn.algo_cache())


def test_float64_falls_back_and_says_why(device, rng):
    xh, x = rand((2, 3, 7, 6), "float64", rng)
    wh, w = rand((4, 3, 3, 2), "float64", rng)
    T.assert_close(cudnn.conv_forward(x, w, padding=1), ref.conv_forward(xh, wh, padding=1),
                   np.float64)
    plan = _plan("forward", x.shape)
    assert plan.backend == "legacy" and "float64" in plan.fallback and "float64" in repr(plan)


def test_misaligned_pointers_run_a_legacy_plan(device, rng):
    # x[1:] of float32 (1+N, 3, 5, 5) starts 300 bytes in: packed, but not 16-byte aligned
    xh, x = rand((3, 3, 5, 5), "float32", rng)
    wh, w = rand((4, 3, 3, 3), "float32", rng)
    cudnn.conv_forward(x[:2], w, padding=1)  # aligned: the graph plan
    plan = _plan("forward", (2, 3, 5, 5))
    assert plan.backend == "graph", repr(plan)
    y = cudnn.conv_forward(x[1:], w, padding=1)
    T.assert_close(y, ref.conv_forward(xh[1:], wh, padding=1), np.float32)
    assert plan.legacy is not None and plan.legacy.backend == "legacy"


def test_variant_packs_are_cached_and_bounded(device, rng):
    # The packs serve the calls made through cudnnBackendExecute; a recorded relaunch skips
    # them, so relaunching is off here and every call below is such a call.  A fresh plan:
    # one cached by an earlier test would hold packs of its pointers.
    cudnn.clear_algo_cache()
    xh, x = rand((2, 8, 8, 8), "float16", rng, True)
    wh, w = rand((8, 8, 3, 3), "float16", rng, True)
    with cl.option_context(relaunch=False):
        y = cudnn.conv_forward(x, w, padding=1)
        plan = _plan("forward", x.shape)
        assert plan.backend == "graph", repr(plan)
        for _ in range(5):
            cudnn.conv_forward(x, w, padding=1, out=y)
        assert len(plan.gplan._packs) == 1  # one pointer set, one pack
        outs = [cudnn.conv_forward(x, w, padding=1) for _ in range(20)]
        assert 1 <= len(plan.gplan._packs) <= engines._PACK_CACHE_MAX
    want = ref.conv_forward(xh, wh, padding=1)
    for o in outs[-3:] + [y]:
        T.assert_close(o, want, np.float16)


def test_deterministic_and_workspace_limit_on_the_graph(device, rng):
    xh, x = rand((4, 16, 12, 12), "float16", rng, True)
    dyh, dy = rand((4, 16, 12, 12), "float16", rng, True)
    dw = cudnn.conv_backward_filter(x, dy, (16, 16, 3, 3), padding=1, deterministic=True,
                                    workspace_limit=0)
    plan = _plan("backward_filter")
    print(plan)
    assert plan.workspace_size == 0
    if plan.backend == "graph":
        assert "nondeterministic" not in plan.notes
    T.assert_close(dw, ref.conv_backward_filter(xh, dyh, (16, 16, 3, 3), padding=1),
                   np.float16, msg=repr(plan))


# -- fused conv + bias + activation ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("act", ["relu", "identity"])
@pytest.mark.parametrize("with_z", [False, True])
def test_fused_fp16_nhwc_takes_the_graph_path(device, rng, dtype, act, with_z):
    xh, x = rand((4, 16, 10, 10), dtype, rng, True)
    wh, w = rand((32, 16, 3, 3), dtype, rng, True)
    bh, b = rand((32,), dtype, rng)
    zh, z = rand((4, 32, 10, 10), dtype, rng, True) if with_z else (None, None)
    out = poisoned((4, 32, 10, 10), xh.dtype, True)
    y = cudnn.conv_bias_act(x, w, b, activation=act, z=z, padding=1, out=out)
    plan = _plan("fused")
    print(plan)
    conv = ref.conv_forward(xh, wh, padding=1)
    pre = conv + bh.astype(np.float64).reshape(1, -1, 1, 1)
    if with_z:
        pre = pre + zh.astype(np.float64)
    T.assert_close(y, ref.activation(pre, act), xh.dtype, msg=repr(plan))
    # without z, find may prefer the plain convolution + one epilogue pass
    assert plan.backend == "graph" or (not with_z and plan.backend == "graph+kernel"), \
        repr(plan)
    # a second call (cache hit) with the same buffers gives the same result
    y2 = cudnn.conv_bias_act(x, w, b, activation=act, z=z, padding=1, out=out)
    T.assert_close(y2, ref.activation(pre, act), xh.dtype, msg=repr(plan))
    # other alpha values are another graph (alpha is baked in), never the cached one; the
    # runtime-fusion engines may refuse them, and the legacy path then gives the same answer
    y3 = cudnn.conv_bias_act(x, w, b, activation=act, z=z, alpha=0.75, alpha2=0.5, padding=1)
    pre3 = 0.75 * conv + bh.astype(np.float64).reshape(1, -1, 1, 1)
    if with_z:
        pre3 = pre3 + 0.5 * zh.astype(np.float64)
    print(_plan("fused"))
    T.assert_close(y3, ref.activation(pre3, act), xh.dtype, msg=_all_plans())


@st.composite
def fused_problems(draw):
    c = draw(st.sampled_from([3, 8, 16] + bound([], [64, 128])))
    k = draw(st.sampled_from([4, 8, 16] + bound([], [64, 128])))
    n, hw = draw(st.integers(1, 3)), draw(st.integers(3, bound(9, 48)))
    r = draw(st.sampled_from([1, 3]))
    stride = draw(st.integers(1, 2))
    x = fit_spatial((n, c, hw, hw), (k, c, r, r), stride, r // 2, 1, low=(3, 3))
    return dict(x=x, w=(k, c, r, r), padding=r // 2, stride=stride)


@settings(GPU, max_examples=examples(8))
@given(p=fused_problems(), dtype=st.sampled_from(["float32", "float16", "bfloat16"]),
       cl_=st.booleans(), act=st.sampled_from(["relu", "identity"]), with_z=st.booleans(),
       seed=st.integers(0, 2**31))
def test_fused_equals_composition_and_reference(device, p, dtype, cl_, act, with_z, seed,
                                                monkeypatch):
    # the search reads the bound in backend.engines (its package re-exports a copy)
    monkeypatch.setattr(engines, "FIND_MAX_COMPILED", 1)
    monkeypatch.setattr(backend, "FIND_MAX_COMPILED", 1)
    rng = np.random.default_rng(seed)
    xh, x = rand(p["x"], dtype, rng, cl_)
    wh, w = rand(p["w"], dtype, rng, cl_)
    bh, b = rand((p["w"][0],), dtype, rng)
    kw = dict(padding=p["padding"], stride=p["stride"])
    yshape = ref.conv_output_shape(p["x"], p["w"], p["stride"], p["padding"], 1)
    zh, z = rand(yshape, dtype, rng, cl_) if with_z else (None, None)
    note(f"{p} {dtype} channels_last={cl_} {act} z={with_z}")
    y = cudnn.conv_bias_act(x, w, b, activation=act, z=z, alpha2=0.5,
                            out=poisoned(yshape, xh.dtype, cl_), **kw)
    plan = _plan("fused")
    note(repr(plan))
    pre = ref.conv_forward(xh, wh, bias=bh, **kw)
    if with_z:
        pre = pre + 0.5 * zh.astype(np.float64)
    T.assert_close(y, ref.activation(pre, act), dtype, msg=repr(plan))
    y3 = cudnn.conv_forward(x, w, bias=b, out=poisoned(yshape, xh.dtype, cl_), **kw)
    if with_z:
        cudnn.add_tensor(z, y3, alpha=0.5, beta=1.0)
    y3 = cudnn.activation_forward(y3, act)
    T.assert_close(y, y3.get().astype(np.float64), dtype, msg=repr(plan))


def test_fused_legacy_when_switched_off(device, rng, process_options):
    process_options(conv_graph_api=False)
    xh, x = rand((2, 8, 6, 6), "float16", rng, True)
    wh, w = rand((8, 8, 3, 3), "float16", rng, True)
    bh, b = rand((8,), "float16", rng)
    y = cudnn.conv_bias_act(x, w, b, padding=1)
    assert _plan("fused").backend == "legacy"
    T.assert_close(y, ref.activation(ref.conv_forward(xh, wh, bias=bh, padding=1), "relu"),
                   np.float16)


def test_graph_plan_lifetime(device, rng):
    cudnn.clear_algo_cache()    # _plan() finds plans by shape: none of other tests' may match
    _, x = rand((2, 8, 8, 8), "float16", rng, True)
    _, w = rand((8, 8, 3, 3), "float16", rng, True)
    cudnn.conv_forward(x, w, padding=1)
    plan = _plan("forward", x.shape)
    assert plan.backend == "graph"
    gp = plan.gplan
    assert "ExecutionPlan" in repr(gp) and gp.workspace_size >= 0
    gp.descriptor.close()  # a closed plan is rebuilt, never executed
    assert not plan.usable()
    y = cudnn.conv_forward(x, w, padding=1)
    assert _plan("forward", x.shape) is not plan
    assert y.shape == (2, 8, 8, 8)
    with pytest.raises(cl.ClosedError):
        gp.execute(0, (x.ptr, w.ptr, y.ptr))


@pytest.mark.parametrize("dtype, channels_last", [("float32", False), ("float16", True)])
@pytest.mark.parametrize("act", ["relu", "identity"])
def test_fused_convolution_plus_epilogue_pass(device, rng, monkeypatch, dtype, channels_last,
                                              act):
    """With no fused engine (forced here), find takes the graph convolution and the
    channel_bias_act pass; cache hits rerun that pair, into the caller's out."""
    def no_engine(*a, **k):
        raise backend.NoGraph("forced off for this test")

    monkeypatch.setattr(lower, "fused_graph", no_engine)
    cudnn.clear_algo_cache()
    xh, x = rand((3, 16, 9, 9), dtype, rng, channels_last)
    wh, w = rand((24, 16, 3, 3), dtype, rng, channels_last)
    bh, b = rand((24,), dtype, rng)
    for _ in range(2):
        out = poisoned((3, 24, 9, 9), xh.dtype, channels_last)
        y = cudnn.conv_bias_act(x, w, b, activation=act, padding=1, out=out)
        assert y is out
        plan = _plan("fused")
        assert plan.backend == "graph+kernel" and plan.composite.backend == "graph", repr(plan)
        T.assert_close(y, ref.activation(ref.conv_forward(xh, wh, bias=bh, padding=1), act),
                       dtype, msg=repr(plan))
    # z and alpha != 1 are not served by the pair
    y = cudnn.conv_bias_act(x, w, b, activation=act, padding=1, alpha=0.5)
    assert _plan("fused").backend == "legacy"
    T.assert_close(y, ref.activation(0.5 * ref.conv_forward(xh, wh, padding=1)
                                     + bh.astype(np.float64).reshape(1, -1, 1, 1), act), dtype)
