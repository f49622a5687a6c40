"""Layer norm and RMS norm on cuDNN's backend norm operations: forward (training and
inference) and backward against the float64 references and torch, the plans (autotune,
CUDA graph replay, threads bitwise against serial), and bad input."""

import importlib

import numpy as np
import pytest
from hypothesis import Phase, given, note, settings
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import testing as T
from cudalibs.testing.ref import _norm as ref

from ._helpers import FLOATS, GPU, np_dtype, poisoned, rand
from .._sizes import bound, examples
from .._threads import match_serial

# The module by its full name: once cudalibs.cudnn exports the function layer_norm, the
# package attribute of that name is the function, not this module.
LN = importlib.import_module("cudalibs.cudnn.norm.layer")

# Every engine cuDNN 9.19 offers for the norm graphs is compiled at run time (about half a
# second per plan on an H100), so the examples draw problems from a few shapes -- each
# compiled once and then found in the plan cache -- and vary the data, the dtype and eps;
# no shrinking, which would multiply the device time.
FEW = settings(GPU, max_examples=examples(12),
               phases=(Phase.explicit, Phase.reuse, Phase.generate))
#: (leading dims, features, eps): a 3-D batch x sequence x hidden problem, a wide one, an odd
#: number of rows with a hidden size that is no power of two; under HYPOTHESIS_PROFILE=wide
#: also hidden sizes of several thousand.
SHAPES = (((4, 50), 768, 1e-5), ((64,), 1024, 1e-3), ((3, 7), 1280, 0.1)) + bound(
    (), (((8,), 4096, 1e-5), ((2, 3), 6144, 1e-3)))


def _torch():
    """torch with CUDA, the second oracle; its absence skips the test, visibly (and fails it
    under CUDALIBS_REQUIRE_GPU=1)."""
    torch = pytest.importorskip("torch", reason="torch (a second oracle) is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch has no usable CUDA device (a CPU-only build?)")
    return torch


def _tol(dtype):
    return T.TOLERANCES[np.dtype(np_dtype(dtype)).name]


def _close(actual, expected, dtype, what):
    T.assert_close(np.asarray(actual.get(), np.float64), expected, rtol=_tol(dtype), msg=what)


def _problem(rng, rows_shape, feats, dtype, wdtype, bias=True):
    shape = tuple(rows_shape) + (feats,)
    xh, x = rand(shape, dtype, rng)
    wh, w = rand((feats,), wdtype, rng, low=0.5, high=1.5)
    bh, b = rand((feats,), wdtype, rng) if bias else (None, None)
    return shape, (xh, x), (wh, w), (bh, b)


problems = st.tuples(st.sampled_from(SHAPES), st.sampled_from(FLOATS),
                     st.integers(0, 2**32 - 1))


@FEW
@given(p=problems)
def test_layer_norm_matches_reference(device, p):
    (lead, feats, eps), dtype, seed = p
    rng = np.random.default_rng(seed)
    shape, (xh, x), (wh, w), (bh, b) = _problem(rng, lead, feats, dtype, dtype)
    note(f"{shape} {dtype} eps {eps}")
    y_ref, m_ref, r_ref = ref.layer_norm(xh, wh, bh, eps)
    npd = np_dtype(dtype)
    outs = (poisoned(shape, npd), poisoned(m_ref.shape, np.float32),
            poisoned(m_ref.shape, np.float32))
    y, m, r = LN.layer_norm(x, w, b, eps=eps, training=True, out=outs)
    assert y is outs[0] and m is outs[1] and r is outs[2]
    _close(y, y_ref, dtype, "y")
    _close(m, m_ref, "float32", "mean")
    _close(r, r_ref, "float32", "inv_std")
    yi = LN.layer_norm(x, w, b, eps=eps, out=poisoned(shape, npd))
    _close(yi, y_ref, dtype, "inference y")
    dyh, dy = rand(shape, dtype, rng)
    dx, dw, db = LN.layer_norm_backward(dy, x, w, m, r)
    dx_ref, dw_ref, db_ref = ref.layer_norm_backward(dyh, xh, wh, m.get(), r.get())
    assert dx.dtype == npd and dw.dtype == npd and db.shape == (feats,)
    _close(dx, dx_ref, dtype, "dx")
    _close(dw, dw_ref, dtype, "dweight")
    _close(db, db_ref, dtype, "dbias")


@FEW
@given(p=problems)
def test_rms_norm_matches_reference(device, p):
    (lead, feats, eps), dtype, seed = p
    rng = np.random.default_rng(seed)
    shape, (xh, x), (wh, w), _ = _problem(rng, lead, feats, dtype, dtype, False)
    note(f"{shape} {dtype} eps {eps}")
    y_ref, r_ref = ref.rms_norm(xh, wh, eps)
    y, r = LN.rms_norm(x, w, eps=eps, training=True,
                       out=(poisoned(shape, np_dtype(dtype)), None))
    assert r.shape == r_ref.shape and r.dtype == np.float32
    _close(y, y_ref, dtype, "y")
    _close(r, r_ref, "float32", "inv_rms")
    _close(LN.rms_norm(x, w, eps=eps), y_ref, dtype, "inference y")
    dyh, dy = rand(shape, dtype, rng)
    dx, dw = LN.rms_norm_backward(dy, x, w, r, out=(poisoned(shape, np_dtype(dtype)), None))
    dx_ref, dw_ref = ref.rms_norm_backward(dyh, xh, wh, r.get())
    _close(dx, dx_ref, dtype, "dx")
    _close(dw, dw_ref, dtype, "dweight")


@pytest.mark.parametrize("mode", ["layer", "rms"])
def test_normalized_ndim_two(device, rng, mode):
    xh, x = rand((6, 12, 64), "float32", rng)
    wh, w = rand((12, 64), "float32", rng)
    if mode == "layer":
        bh, b = rand((12, 64), "float32", rng)
        y, m, r = LN.layer_norm(x, w, b, training=True, normalized_ndim=2)
        y_ref, m_ref, r_ref = ref.layer_norm(xh, wh, bh, 1e-5, normalized_ndim=2)
        assert m.shape == (6, 1, 1)
        _close(m, m_ref, "float32", "mean")
    else:
        y, r = LN.rms_norm(x, w, training=True, normalized_ndim=2)
        y_ref, r_ref = ref.rms_norm(xh, wh, 1e-5, normalized_ndim=2)
    _close(y, y_ref, "float32", "y")
    _close(r, r_ref, "float32", "inv")
    dyh, dy = rand((6, 12, 64), "float32", rng)
    if mode == "layer":
        got = LN.layer_norm_backward(dy, x, w, m, r, normalized_ndim=2)
        want = ref.layer_norm_backward(dyh, xh, wh, m.get(), r.get(), normalized_ndim=2)
    else:
        got = LN.rms_norm_backward(dy, x, w, r, normalized_ndim=2)
        want = ref.rms_norm_backward(dyh, xh, wh, r.get(), normalized_ndim=2)
    for g, wnt, name in zip(got, want, ("dx", "dweight", "dbias")):
        assert g.shape == wnt.shape
        _close(g, wnt, "float32", name)


@pytest.mark.parametrize("feats", [1, 7, 100, 5000, 65536])
@pytest.mark.parametrize("mode", ["layer", "rms"])
def test_other_sizes_compute_right_or_say_no(device, rng, mode, feats):
    # Sizes outside the common list: cuDNN either computes them right or we say it has no
    # engine (never a wrong answer, never a crash).
    xh, x = rand((5, feats), "bfloat16", rng)
    wh, w = rand((feats,), "bfloat16", rng)
    try:
        out = (LN.layer_norm(x, w, training=True) if mode == "layer"
               else LN.rms_norm(x, w, training=True))
    except LN.NoNormEngineError as exc:
        print(f"{mode} {feats}: {exc}")
        assert "no engine" in str(exc)
        return
    want = ref.layer_norm(xh, wh) if mode == "layer" else ref.rms_norm(xh, wh)
    _close(out[0], want[0], "bfloat16", f"{mode} y, {feats} features")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mode", ["layer", "rms"])
def test_float32_weights_with_half_data_compute_right_or_say_no(device, rng, mode, dtype):
    shape, (xh, x), (wh, w), (bh, b) = _problem(rng, (64,), 1024, dtype, "float32",
                                                mode == "layer")
    dyh, dy = rand(shape, dtype, rng)
    try:
        if mode == "layer":
            y, m, r = LN.layer_norm(x, w, b, training=True)
            got = (y,) + LN.layer_norm_backward(dy, x, w, m, r)
            want = (ref.layer_norm(xh, wh, bh)[0],) + ref.layer_norm_backward(
                dyh, xh, wh, m.get(), r.get())
        else:
            y, r = LN.rms_norm(x, w, training=True)
            got = (y,) + LN.rms_norm_backward(dy, x, w, r)
            want = (ref.rms_norm(xh, wh)[0],) + ref.rms_norm_backward(dyh, xh, wh, r.get())
    except LN.NoNormEngineError as exc:
        # cuDNN 9.19 on an H100 offers (only its generic) engine for bfloat16 with float32
        # weights; float16 is allowed to say no, clearly.
        if dtype == "bfloat16":
            raise
        print(f"{mode} {dtype} with float32 weights: {exc}")
        assert "weight float32" in str(exc) and "x's dtype" in str(exc)
        return
    print(f"{mode} {dtype} with float32 weights: supported")
    assert got[2].dtype == np.float32
    for g, wnt, name in zip(got, want, ("y", "dx", "dweight", "dbias")):
        _close(g, wnt, dtype, name)


def test_layer_norm_without_bias(device, rng):
    xh, x = rand((33, 256), "float16", rng)
    wh, w = rand((256,), "float16", rng)
    y = LN.layer_norm(x, w, None)
    _close(y, ref.layer_norm(xh, wh)[0], "float16", "y without bias")
    y2, m, r = LN.layer_norm(x, w, None, training=True)
    _close(y2, ref.layer_norm(xh, wh)[0], "float16", "training y without bias")


def _close_to_torch(pairs, dtype):
    for ours, theirs, name in pairs:
        T.assert_close(np.asarray(ours.get(), np.float64),
                       theirs.detach().double().cpu().numpy(), rtol=_tol(dtype), msg=name)


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_against_torch_and_autograd(device, rng, dtype):
    torch = _torch()
    shape, (xh, x), (wh, w), (bh, b) = _problem(rng, (4, 50), 768, dtype, dtype)
    dyh, dy = rand(shape, dtype, rng)
    tx = torch.from_dlpack(x).clone().requires_grad_(True)
    tw = torch.from_dlpack(w).clone().requires_grad_(True)
    tb = torch.from_dlpack(b).clone().requires_grad_(True)
    ty = torch.nn.functional.layer_norm(tx.float(), (768,), tw.float(), tb.float(),
                                        1e-5).to(tx.dtype)
    tdx, tdw, tdb = torch.autograd.grad(ty, (tx, tw, tb), torch.from_dlpack(dy))
    y, m, r = LN.layer_norm(x, w, b, training=True)
    dx, dw, db = LN.layer_norm_backward(dy, x, w, m, r)
    _close_to_torch(((y, ty, "y"), (dx, tdx, "dx"), (dw, tdw, "dweight"), (db, tdb, "dbias")),
                    dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm_against_torch_and_autograd(device, rng, dtype):
    torch = _torch()
    F = torch.nn.functional
    if not hasattr(F, "rms_norm"):
        # A skip of its own (a failure under CUDALIBS_REQUIRE_GPU=1), not a silent pass.
        pytest.skip(f"torch {torch.__version__} has no rms_norm (torch 2.4 added it)")
    shape, (xh, x), (wh, w), _ = _problem(rng, (4, 50), 768, dtype, dtype, bias=False)
    dyh, dy = rand(shape, dtype, rng)
    tx = torch.from_dlpack(x).clone().requires_grad_(True)
    tw = torch.from_dlpack(w).clone().requires_grad_(True)
    ty = F.rms_norm(tx.float(), (768,), tw.float(), 1e-5).to(tx.dtype)
    tdx, tdw = torch.autograd.grad(ty, (tx, tw), torch.from_dlpack(dy))
    y, r = LN.rms_norm(x, w, training=True)
    dx, dw = LN.rms_norm_backward(dy, x, w, r)
    _close_to_torch(((y, ty, "rms y"), (dx, tdx, "rms dx"), (dw, tdw, "rms dweight")), dtype)


def test_torch_tensors_in_and_out(device, rng):
    torch = _torch()
    tx, tw, tb = (torch.from_numpy(T.random_array(shape, np.float32, rng=rng, low=low,
                                                  high=high)).to("cuda", torch.bfloat16)
                  for shape, low, high in (((64, 512), -1, 1), (512, 0.5, 1.5), (512, -1, 1)))
    ty = torch.empty_like(tx)
    y = LN.layer_norm(tx, tw, tb, out=ty)
    torch.cuda.synchronize()
    want = ref.layer_norm(tx.float().cpu().numpy(), tw.float().cpu().numpy(),
                          tb.float().cpu().numpy())[0]
    T.assert_close(ty.double().cpu().numpy(), want, rtol=1e-2)
    assert y.ptr == ty.data_ptr()


# -- the plans -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["layer", "rms"])
def test_plans_autotune_and_match_the_one_shots(device, rng, mode, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDALIBS_TUNING_CACHE", str(tmp_path / "tuning.json"))
    shape, (xh, x), (wh, w), (bh, b) = _problem(rng, (256,), 1024, "bfloat16", "bfloat16",
                                                mode == "layer")
    fwd = LN.NormForwardPlan(x, w, b, mode=mode, training=True)
    assert "not planned" in repr(fwd)
    cands = fwd.autotune(rounds=2)
    print(fwd, [(c["name"], c.get("ms")) for c in cands])
    assert fwd.tuned and fwd.time_ms > 0 and "autotuned" in repr(fwd)
    assert fwd.engine in repr(fwd) and fwd.stats_shape == (256, 1)
    outs = fwd.execute(x, w, b)
    one = (LN.layer_norm(x, w, b, training=True) if mode == "layer"
           else LN.rms_norm(x, w, training=True))
    for a, c in zip(outs, one):
        _close(a, np.asarray(c.get(), np.float64), "bfloat16", "plan vs one-shot")
    dyh, dy = rand(shape, "bfloat16", rng)
    bwd = LN.NormBackwardPlan(dy, x, w, mode=mode)
    bwd.autotune(rounds=2)
    print(bwd)
    stats = outs[1:] if mode == "layer" else (None, outs[1])
    grads = bwd.execute(dy, x, w, *stats)
    want = (ref.layer_norm_backward(dyh, xh, wh, outs[1].get(), outs[2].get())
            if mode == "layer" else ref.rms_norm_backward(dyh, xh, wh, outs[1].get()))
    for g, wnt in zip(grads, want):
        _close(g, wnt, "bfloat16", "plan backward")
    # a second plan of the same problem takes the stored choice without timing
    again = LN.NormForwardPlan(x, w, b, mode=mode, training=True)
    again.autotune()
    assert again.choice == fwd.choice and again.tuned
    for p in (fwd, bwd, again):
        p.close()
        assert "closed" in repr(p)
    with pytest.raises(cl.ClosedError):
        fwd.execute(x, w, b)


def test_one_shots_share_plans_in_the_cache(device, rng):
    LN.clear_norm_cache()
    _, (_, x), (_, w), (_, b) = _problem(rng, (8,), 256, "float16", "float16")
    for _ in range(3):
        LN.layer_norm(x, w, b)
    y, m, r = LN.layer_norm(x, w, b, training=True)
    LN.layer_norm_backward(y, x, w, m, r)
    entries = LN.norm_cache()
    assert len(entries) == 3
    kinds = sorted((e.kind, e.key.get("training")) for e in entries)
    assert kinds == [("cudnn_norm_backward", None), ("cudnn_norm_forward", False),
                     ("cudnn_norm_forward", True)]
    for e in entries:
        assert e.key["x_shape"] == (8, 256) and e.key["mode"] == "layer"
        assert e.key["alignment"] == 16
    LN.clear_norm_cache()
    assert LN.norm_cache() == []


@pytest.mark.parametrize("mode", ["layer", "rms"])
def test_plan_replays_in_a_cuda_graph(device, rng, mode):
    s = cl.Stream()
    shape = (128, 512)
    xh, x = rand(shape, "bfloat16", rng)
    wh, w = rand((512,), "bfloat16", rng)
    dyh, dy = rand(shape, "bfloat16", rng)
    fwd = LN.NormForwardPlan(x, w, mode=mode, training=True)
    bwd = LN.NormBackwardPlan(dy, x, w, mode=mode)
    n_stats = 2 if mode == "layer" else 1
    outs = (cl.empty(shape, x.dtype),) + tuple(cl.empty((128, 1), np.float32)
                                               for _ in range(n_stats))
    grads = (cl.empty(shape, x.dtype), cl.empty((512,), w.dtype)) + (
        (cl.empty((512,), w.dtype),) if mode == "layer" else ())
    stats = outs[1:] if mode == "layer" else (None, outs[1])
    fwd.execute(x, w, out=outs, stream=s)      # plans and packs made before the capture
    bwd.execute(dy, x, w, *stats, out=grads, stream=s)
    s.sync()
    with cl.graph.capture(s) as g:
        fwd.execute(x, w, out=outs, stream=s)
        bwd.execute(dy, x, w, *stats, out=grads, stream=s)
    exe = g.instantiate()
    for _ in range(2):
        xh, xn = rand(shape, "bfloat16", rng)
        dyh, dyn = rand(shape, "bfloat16", rng)
        x.copy_(xn, stream=s)
        dy.copy_(dyn, stream=s)
        for o in outs + grads:
            o.fill(T.poison_value(o.dtype), stream=s)
        exe.replay(s)
        s.sync()
        if mode == "layer":
            y_ref, m_ref, r_ref = ref.layer_norm(xh, wh)
            g_ref = ref.layer_norm_backward(dyh, xh, wh, m_ref, r_ref)
        else:
            y_ref, r_ref = ref.rms_norm(xh, wh)
            g_ref = ref.rms_norm_backward(dyh, xh, wh, r_ref)
        _close(outs[0], y_ref, "bfloat16", "replayed y")
        _close(outs[-1], r_ref, "float32", "replayed inverse deviation")
        for got, want in zip(grads, g_ref):
            _close(got, want, "bfloat16", "replayed gradient")
    exe.close()
    g.close()
    s.close()


def test_threads_match_serial_bitwise(device, rng):
    # every engine cuDNN 9.19 offers here reports no nondeterminism: bit equality holds
    shape = (96, 768)
    _, x = rand(shape, "bfloat16", rng)
    _, w = rand((768,), "bfloat16", rng)
    _, b = rand((768,), "bfloat16", rng)
    _, dy = rand(shape, "bfloat16", rng)
    _, m, r = LN.layer_norm(x, w, b, training=True)
    _, rr = LN.rms_norm(x, w, training=True)
    plan = LN.NormForwardPlan(x, w, b, training=True)
    bplan = LN.NormBackwardPlan(dy, x, w)
    assert "nondeterministic" not in bplan.notes
    match_serial(device, [
        lambda s: LN.layer_norm(x, w, b, training=True, stream=s),
        lambda s: LN.rms_norm(x, w, training=True, stream=s),
        lambda s: LN.layer_norm_backward(dy, x, w, m, r, stream=s),
        lambda s: LN.rms_norm_backward(dy, x, w, rr, stream=s),
        lambda s: plan.execute(x, w, b, stream=s),
        lambda s: bplan.execute(dy, x, w, m, r, stream=s)])


# -- the norm.ptx kernel as a candidate of the forward plans ----------------------------------
def _forward_ref(mode, xh, wh, bh):
    return ref.layer_norm(xh, wh, bh) if mode == "layer" else ref.rms_norm(xh, wh)


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("mode", ["layer", "rms"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_float32_weights_run_the_kernel_first_and_every_candidate_is_right(device, rng, dtype,
                                                                           mode, training):
    """float32 weights on 16-bit data: the heuristic choice is the norm.ptx kernel (cuDNN has
    only its generic engine there); every candidate, kernel or engine, computes the same
    normalisation, and the one-shot runs the kernel."""
    bias = mode == "layer"
    shape, (xh, x), (wh, w), (bh, b) = _problem(rng, (3, 37), 1024, dtype, "float32", bias)
    plan = LN.NormForwardPlan(x, w, b, mode=mode, training=training).plan()
    assert plan.candidates[0]["backend"] == "kernel" and plan.engine == "norm.ptx", repr(plan)
    want = _forward_ref(mode, xh, wh, bh)
    npd = np_dtype(dtype)
    n = (3 if mode == "layer" else 2) if training else 1
    for i, c in enumerate(plan.candidates):
        plan.select(i)
        outs = (poisoned(shape, npd),) + tuple(poisoned(want[1].shape, np.float32)
                                               for _ in range(n - 1))
        got = plan.execute(x, w, b, out=outs if training else outs[0])
        got = got if training else (got,)
        names = ("y", "mean", "inv_std") if mode == "layer" else ("y", "inv_rms")
        for g_, wnt, name in zip(got, want, names):
            _close(g_, wnt, dtype if name == "y" else "float32", f"{c['id']} {name}")
    one = (LN.layer_norm(x, w, b, training=training) if mode == "layer"
           else LN.rms_norm(x, w, training=training))
    _close(one[0] if training else one, want[0], dtype, "one-shot y")
    (entry,) = [e for e in LN.norm_cache() if e.key["weight_dtype"] == "float32"
                and e.key["dtype"] == np.dtype(np_dtype(dtype)) and e.key["x_shape"] == shape
                and e.key["mode"] == mode and e.key["training"] == training]
    assert entry.plan.engine == "norm.ptx"
    plan.close()


def test_same_dtype_weights_offer_the_kernel_after_the_engines(device, rng):
    shape, (xh, x), (wh, w), (bh, b) = _problem(rng, (64,), 768, "bfloat16", "bfloat16")
    plan = LN.NormForwardPlan(x, w, b, training=True).plan()
    kinds = [c["backend"] for c in plan.candidates]
    assert kinds[0] == "graph" and kinds[-1] == "kernel" and kinds.count("kernel") == 1, kinds
    plan.select(len(kinds) - 1)
    y, m, r = plan.execute(x, w, b)
    for got, want, name in zip((y, m, r), ref.layer_norm(xh, wh, bh), ("y", "mean", "rstd")):
        _close(got, want, "bfloat16" if name == "y" else "float32", f"kernel {name}")
    plan.close()


@pytest.mark.parametrize("mode", ["layer", "rms"])
def test_kernel_candidate_replays_in_a_cuda_graph_and_threads_match(device, rng, mode):
    s = cl.Stream()
    shape = (256, 2048)
    bias = mode == "layer"
    _, (xh, x), (wh, w), (bh, b) = _problem(rng, (256,), 2048, "bfloat16", "float32", bias)
    plan = LN.NormForwardPlan(x, w, b, mode=mode, training=True)
    assert plan.engine == "norm.ptx"
    n_stats = 2 if mode == "layer" else 1
    outs = (cl.empty(shape, x.dtype),) + tuple(cl.empty((256, 1), np.float32)
                                               for _ in range(n_stats))
    plan.execute(x, w, b, out=outs, stream=s)
    s.sync()
    with cl.graph.capture(s) as g:
        plan.execute(x, w, b, out=outs, stream=s)
    exe = g.instantiate()
    for _ in range(2):
        xh, xn = rand(shape, "bfloat16", rng)
        x.copy_(xn, stream=s)
        for o in outs:
            o.fill(T.poison_value(o.dtype), stream=s)
        exe.replay(s)
        s.sync()
        want = _forward_ref(mode, xh, wh, bh)
        _close(outs[0], want[0], "bfloat16", "replayed y")
        _close(outs[-1], want[-1], "float32", "replayed inverse deviation")
    exe.close()
    g.close()
    s.close()
    call = (lambda s_: LN.layer_norm(x, w, b, training=True, stream=s_)) if bias else (
        lambda s_: LN.rms_norm(x, w, training=True, stream=s_))
    match_serial(device, [call, lambda s_: plan.execute(x, w, b, stream=s_)])
    plan.close()


# -- bad input -------------------------------------------------------------------------------
def test_bad_input_raises_clearly(device, rng):
    _, x = rand((8, 256), "float16", rng)
    _, w = rand((256,), "float16", rng)
    _, b = rand((256,), "float16", rng)
    _, m, r = LN.layer_norm(x, w, b, training=True)
    with pytest.raises(ValueError, match="weight has shape"):
        LN.layer_norm(x, rand((32,), "float32", rng)[1])
    with pytest.raises(TypeError, match="bias has dtype"):
        LN.layer_norm(x, w, rand((256,), "float32", rng)[1])
    with pytest.raises(TypeError, match="float32 or float16"):
        LN.layer_norm(x, rand((256,), "bfloat16", rng)[1])
    with pytest.raises(TypeError, match="supported"):
        LN.rms_norm(cl.to_device(np.ones((4, 64))), w)
    with pytest.raises(ValueError, match="C-contiguous"):
        LN.layer_norm(rand((8, 512), "float16", rng)[1][:, ::2], w)
    with pytest.raises(ValueError, match="another problem"):
        LN.layer_norm_backward(x, x, w, m[:4], r[:4])
    with pytest.raises(TypeError, match="float32"):
        LN.rms_norm_backward(x, x, w, cl.empty((8, 1), np.float16))
    with pytest.raises(TypeError, match="mean is required"):
        LN.layer_norm_backward(x, x, w, None, r)
    with pytest.raises(ValueError, match="dy has shape"):
        LN.layer_norm_backward(rand((4, 256), "float16", rng)[1], x, w, m, r)
    with pytest.raises(ValueError, match="overlaps"):
        LN.layer_norm(x, w, b, out=x)
    with pytest.raises(ValueError, match="out has 1 entries"):
        LN.layer_norm(x, w, b, training=True, out=(None,))
    with pytest.raises(ValueError, match="expected C-contiguous"):
        LN.layer_norm(x, w, b, out=cl.empty((8, 32), np.float16))
    with pytest.raises(ValueError, match="eps"):
        LN.rms_norm(x, w, eps=-1)
    with pytest.raises(ValueError, match="normalized_ndim"):
        LN.rms_norm(x, w, normalized_ndim=3)
    with pytest.raises(ValueError, match="algo"):
        LN.rms_norm(x, w, algo="fastest")
    with pytest.raises(TypeError, match="host numpy array"):
        LN.rms_norm(np.ones((8, 256), np.float16), w)
    plan = LN.NormForwardPlan(x, w, b)
    with pytest.raises(ValueError, match="plan was made"):
        plan.execute(rand((4, 256), "float16", rng)[1], w, b)
    with pytest.raises(ValueError, match="with a bias"):
        plan.execute(x, w)


def test_misaligned_operands_are_refused_before_cudnn(device, rng):
    # x one element into a buffer: 2-byte aligned.  cuDNN 9.19's engines accept that
    # alignment at finalize and fail at execution (BAD_PARAM_MISALIGNED_POINTER), so it is
    # refused by name before any C call; the copy the message suggests runs right.
    xh, big = rand((8 * 256 + 1,), "float16", rng)
    x = big[1:].reshape(8, 256)
    wh, w = rand((256,), "float16", rng)
    with pytest.raises(LN.NoNormEngineError, match="only 2-byte aligned"):
        LN.rms_norm(x, w)
    y = LN.rms_norm(x.copy(), w)
    _close(y, ref.rms_norm(xh[1:].reshape(8, 256), wh)[0], "float16", "copied x")