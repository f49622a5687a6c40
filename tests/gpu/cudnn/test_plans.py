"""The convolution and batch-norm plans as user-held objects: build, plan, autotune (persisted
in the tuning store, picked up by a fresh plan without timing, a corrupt store or entry
measured again), execute, repr, close; and the refusal of an output that overlaps an input."""

import json

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cudnn
from cudalibs import testing as T
from cudalibs.runtime import plan as plan_mod
from cudalibs.runtime import tuning as tuning_mod
from cudalibs.errors import ClosedError
from cudalibs.testing import ref

from ._helpers import FLOATS, GPU, poisoned, rand
from .._oracles import torch_oracle
from .._sizes import bound, fit


@pytest.fixture()
def store(tmp_path, monkeypatch):
    path = tmp_path / "tuning.json"
    monkeypatch.setenv("CUDALIBS_TUNING_CACHE", str(path))
    return path


@pytest.fixture()
def timings(monkeypatch):
    """Counts the calls of the one timer."""
    calls = []
    real = plan_mod.time_candidates

    def counting(runs, *a, **k):
        calls.append(len(runs))
        return real(runs, *a, **k)

    monkeypatch.setattr(plan_mod, "time_candidates", counting)
    return calls


def _problem(rng):
    xh, x = rand((2, 8, 10, 10), "float16", rng, True)
    wh, w = rand((16, 8, 3, 3), "float16", rng, True)
    return xh, x, wh, w


def test_forward_plan_protocol(device, rng, store):
    xh, x, wh, w = _problem(rng)
    plan = cudnn.ConvForwardPlan(x, w, padding=1)
    assert "not planned" in repr(plan) and plan.choice == -1
    plan.plan()
    assert plan.plan() is plan          # idempotent
    r = repr(plan)
    assert "ConvForwardPlan" in r and "(2, 8, 10, 10)" in r and "workspace" in r
    assert plan.algo_name in r and "untimed" in r
    assert plan.out_shape == (2, 16, 10, 10) and plan.layout == "NHWC"
    y = plan.execute(x, w)
    T.assert_close(y, ref.conv_forward(xh, wh, padding=1), np.float16, msg=repr(plan))
    # several outputs, the same plan
    out = plan.execute(x, w)
    assert plan.execute(x, w, out=out) is out
    plan.close()
    plan.close()
    assert plan.closed and "closed" in repr(plan)
    with pytest.raises(ClosedError):
        plan.execute(x, w)
    with pytest.raises(ClosedError):
        plan.plan()


def test_autotune_is_persisted_and_reused_without_timing(device, rng, store, timings,
                                                        monkeypatch):
    monkeypatch.setattr(tuning_mod, "_store", [None])
    xh, x, wh, w = _problem(rng)
    p1 = cudnn.ConvForwardPlan(x, w, padding=1)
    cands = p1.autotune()
    assert timings and p1.tuned and any("ms" in c for c in cands)
    assert "autotuned" in repr(p1) and p1.time_ms is not None
    assert store.exists()
    chosen = p1.candidates[p1.choice]["id"]
    n = len(timings)
    p2 = cudnn.ConvForwardPlan(x, w, padding=1)
    p2.autotune()
    assert len(timings) == n, "the stored choice must be picked without timing"
    assert p2.tuned and p2.candidates[p2.choice]["id"] == chosen
    T.assert_close(p2.execute(x, w), ref.conv_forward(xh, wh, padding=1), np.float16)
    # a corrupt store file is measured again (and rewritten); a fresh store object reads
    # the file as a new process would
    store.write_text("{not json")
    tuning_mod._store[0] = None
    p3 = cudnn.ConvForwardPlan(x, w, padding=1)
    p3.autotune()
    assert len(timings) == n + 1
    json.loads(store.read_text())
    # an entry naming a candidate that does not exist is measured again
    data = json.loads(store.read_text())
    for rec in data["entries"].values():
        rec["value"]["candidate"] = "graph:eng-nonexistent"
        rec["value"]["index"] = 999
    store.write_text(json.dumps(data))
    tuning_mod._store[0] = None
    p4 = cudnn.ConvForwardPlan(x, w, padding=1)
    p4.autotune()
    assert len(timings) == n + 2
    for p in (p1, p2, p3, p4):
        p.close()


def test_find_one_shot_autotunes_on_first_use_only(device, rng, store, timings):
    cudnn.clear_algo_cache()
    xh, x, wh, w = _problem(rng)
    y = cudnn.conv_forward(x, w, padding=1, algo="find")
    assert len(timings) >= 1
    n = len(timings)
    for _ in range(3):
        cudnn.conv_forward(x, w, padding=1, algo="find", out=y)
    assert len(timings) == n
    # out= given is another key (its strides decide the layout); the second plan takes the
    # first one's stored choice without timing (checked by the count above)
    entries = [e for e in cudnn.algo_cache() if e.plan.op == "forward"
               and e.key["x_shape"] == x.shape]
    assert sorted(str(e.key["out_strides"]) for e in entries) == sorted([str(y.strides),
                                                                          "None"])
    assert all(e.plan.tuned and e.key["algo"] == "find" for e in entries)
    T.assert_close(y, ref.conv_forward(xh, wh, padding=1), np.float16)


def test_backward_and_fused_plans(device, rng, store):
    xh, x, wh, w = _problem(rng)
    dyh, dy = rand((2, 16, 10, 10), "float16", rng, True)
    bh, b = rand((16,), "float16", rng)
    with cudnn.ConvBackwardDataPlan(dy, w, x.shape, padding=1) as pd:
        T.assert_close(pd.execute(dy, w), ref.conv_backward_data(dyh, wh, x.shape, padding=1),
                       np.float16, msg=repr(pd))
    with cudnn.ConvBackwardFilterPlan(x, dy, w.shape, padding=1) as pf:
        pf.autotune()
        T.assert_close(pf.execute(x, dy), ref.conv_backward_filter(xh, dyh, w.shape, padding=1),
                       np.float16, msg=repr(pf))
    with cudnn.ConvBiasActPlan(x, w, padding=1) as pb:
        pb.autotune()
        want = ref.activation(ref.conv_forward(xh, wh, bias=bh, padding=1), "relu")
        T.assert_close(pb.execute(x, w, b), want, np.float16, msg=repr(pb))
        assert pb.backend in ("graph", "graph+kernel", "legacy")
        with pytest.raises(ValueError, match="residual"):
            pb.execute(x, w, b, z=x)


def test_plan_refuses_other_problems(device, rng):
    _, x, _, w = _problem(rng)
    _, other = rand((2, 8, 12, 12), "float16", rng, True)
    with cudnn.ConvForwardPlan(x, w, padding=1) as plan:
        with pytest.raises(ValueError, match="made for"):
            plan.execute(other, w)


def test_out_overlapping_an_input_is_refused(device, rng):
    _, x = rand((2, 4, 6, 6), "float32", rng)
    _, w = rand((4, 4, 1, 1), "float32", rng)
    with pytest.raises(ValueError, match="overlaps x"):
        cudnn.conv_forward(x, w, out=x)
    with pytest.raises(ValueError, match="overlaps"):
        cudnn.conv_backward_data(x, w, out=x)
    _, b = rand((4,), "float32", rng)
    with pytest.raises(ValueError, match="overlaps"):
        cudnn.conv_bias_act(x, w, b, out=x)
    with cudnn.ConvForwardPlan(x, w) as plan:
        with pytest.raises(ValueError, match="overlaps"):
            plan.execute(x, w, out=x)


# -- batch-norm --------------------------------------------------------------------------------
def _bn_params(rng, pshape, pdtype):
    g = rand(pshape, pdtype, rng, low=0.5, high=1.5)
    b = rand(pshape, pdtype, rng)
    rm = rand(pshape, pdtype, rng)
    rv = rand(pshape, pdtype, rng, low=0.5, high=1.5)
    return g, b, rm, rv


def _torch_batch_norm(xh, dyh, gh, bh, rmh, rvh, momentum, eps):
    """torch's float64 batch-norm on the host (training, spatial): y, running statistics and
    the gradients, as a second oracle; None when torch is absent (which :func:`torch_oracle`
    reports)."""
    torch = torch_oracle(cuda=False)
    if torch is None:
        return None
    F = torch.nn.functional
    tx = torch.from_numpy(xh.astype(np.float64)).requires_grad_(True)
    tg = torch.from_numpy(gh.astype(np.float64)).requires_grad_(True)
    tb = torch.from_numpy(bh.astype(np.float64)).requires_grad_(True)
    trm, trv = (torch.from_numpy(a.astype(np.float64)) for a in (rmh, rvh))
    y = F.batch_norm(tx, trm, trv, tg, tb, training=True, momentum=momentum, eps=eps)
    y.backward(torch.from_numpy(dyh.astype(np.float64)))
    return [t.detach().numpy() for t in (y, trm, trv, tx.grad, tg.grad, tb.grad)]


@GPU
@given(shape=st.tuples(st.integers(4, bound(6, 16)), st.integers(1, bound(6, 512)),
                       st.integers(1, bound(5, 32)), st.integers(1, bound(5, 32))
                       ).map(lambda s: fit(s, 1 << 20, keep=(0, 1))),
       dtype=st.sampled_from(FLOATS + ("float64",)), cl_=st.booleans(),
       mode=st.sampled_from(["spatial", "per_activation"]), seed=st.integers(0, 2**31))
def test_batch_norm_plan_against_numpy_and_torch(device, shape, dtype, cl_, mode, seed):
    rng = np.random.default_rng(seed)
    pd = np.float64 if dtype == "float64" else np.float32
    pshape = (shape[1],) if mode == "spatial" else shape[1:]
    xh, x = rand(shape, dtype, rng, cl_)
    dyh, dy = rand(shape, dtype, rng, cl_)
    (gh, g), (bh, b), (rmh, rm), (rvh, rv) = _bn_params(rng, pshape, pd)
    plan = cudnn.BatchNormPlan(x, mode=mode)
    note(repr(plan.plan()))
    state = plan.execute(x, g, b, rm, rv, momentum=0.2, eps=1e-4,
                         out=poisoned(shape, xh.dtype, cl_))
    note(f"{state!r}; {plan!r}")
    wy, wmean, winv, wrm, wrv = ref.batch_norm_train(xh, gh, bh, rmh, rvh, 0.2, 1e-4, mode)
    T.assert_close(state.y, wy, dtype, msg=repr(plan))
    for got, want in ((state.save_mean, wmean), (state.save_inv_std, winv), (rm, wrm),
                      (rv, wrv)):
        T.assert_close(got, want, pd, msg=repr(plan))
    dx, dg, db = plan.backward(x, dy, g, state, out=poisoned(shape, xh.dtype, cl_))
    wdx, wdg, wdb = ref.batch_norm_backward(xh, dyh, gh, 1e-4, mode)
    for got, want in ((dx, wdx), (dg, wdg), (db, wdb)):
        T.assert_close(got, want, dtype, msg=repr(plan))
    if mode == "spatial":
        tor = _torch_batch_norm(xh, dyh, gh, bh, rmh, rvh, 0.2, 1e-4)
        if tor is not None:
            # two computations, each rounded: within twice the dtype's bound of each other
            rtol = 2 * T.TOLERANCES[np.dtype(state.y.dtype).name]
            for got, want in zip((state.y, rm, rv, dx, dg, db), tor):
                T.assert_close(got, want, rtol=rtol, msg=f"vs torch: {plan!r}")
    # inference with the updated running statistics, on an inference plan
    with cudnn.BatchNormPlan(x, mode=mode, training=False) as inf:
        y = inf.execute(x, g, b, rm, rv, eps=1e-3, out=poisoned(shape, xh.dtype, cl_))
        mean, var = rm.get(), rv.get()
        if mode == "spatial":
            want = ref.batch_norm_infer(xh, gh, bh, mean, var, eps=1e-3)
        else:   # per activation: statistics of each (C, *spatial) position
            want = (xh.astype(np.float64) - mean) / np.sqrt(var.astype(np.float64) + 1e-3) \
                * gh + bh
        T.assert_close(y, want, dtype, msg=repr(inf))
    plan.close()


def test_batch_norm_plan_protocol(device, rng, store):
    shape = (4, 8, 6, 6)
    xh, x = rand(shape, "float16", rng, True)
    (gh, g), (bh, b), _, _ = _bn_params(rng, (8,), np.float32)
    plan = cudnn.BatchNormPlan(x)
    assert "not planned" in repr(plan) and plan.choice == -1
    assert plan.plan() is plan and plan.plan() is plan      # idempotent
    r = repr(plan)
    assert "BatchNormPlan" in r and "(4, 8, 6, 6)" in r and "NHWC" in r and "forward: " in r
    assert "backward: " in r and "workspace" in r and "untimed" in r
    # channels-last half data: the Ex entry points, whose forward leaves a reserve
    assert plan.entry_points["forward"] == "ex", r
    assert len(plan.candidates) == 1 and plan.reserve_bytes >= 0
    assert "reserve" in r and f"reserve {plan.reserve_bytes} B" in r
    state = plan.execute(x, g, b, eps=1e-3, out=poisoned(shape, np.float16, True))
    assert state.path == "ex" and plan.paths["forward"] == "ex"
    if plan.reserve_bytes:
        assert state.reserve is not None and state.reserve.nbytes == plan.reserve_bytes
    T.assert_close(state.y, ref.batch_norm_train(xh, gh, bh, eps=1e-3)[0], np.float16)
    dyh, dy = rand(shape, "float16", rng, True)
    dx, dg, db = plan.backward(x, dy, g, state)
    wdx, wdg, wdb = ref.batch_norm_backward(xh, dyh, gh, 1e-3)
    for got, want in ((dx, wdx), (dg, wdg), (db, wdb)):
        T.assert_close(got, want, np.float16, msg=repr(plan))
    # fused relu(bn(x) + z), then its backward through the state
    zh, z = rand(shape, "float16", rng, True)
    fused = plan.execute(x, g, b, eps=1e-3, activation="relu", z=z)
    pre = ref.batch_norm_train(xh, gh, bh, eps=1e-3)[0] + zh.astype(np.float64)
    T.assert_close(fused.y, ref.relu(pre), np.float16)
    assert len(plan.backward(x, dy, g, fused)) == 4 and "forward+add+relu: Ex" in repr(plan)
    # the one candidate timed; nothing to choose, so nothing goes to the tuning store
    cands = plan.autotune()
    assert len(cands) == 1 and cands[0]["ms"] > 0 and plan.tuned
    assert "(timed)" in repr(plan) and not store.exists()
    # the one-shots keep their own plan in the cache, the held one is not shared
    cudnn.batch_norm_train(x, g, b)
    from cudalibs.runtime.cache import cache

    cached = [e.plan for e in cache.entries("cudnn_batch_norm") if e.key["x_shape"] == shape
              and e.key["x_strides"] == x.strides and e.key["dtype"] == np.float16]
    assert len(cached) == 1 and cached[0] is not plan
    assert isinstance(cached[0], cudnn.BatchNormPlan)
    plan.close()
    plan.close()
    assert plan.closed and "closed" in repr(plan)
    for call in (lambda: plan.execute(x, g, b), lambda: plan.backward(x, dy, g, state),
                 plan.plan, lambda: plan.entry_points):
        with pytest.raises(ClosedError, match="BatchNormPlan is closed"):
            call()
    # an inference plan
    mh, m = rand((8,), np.float32, rng)
    vh, v = rand((8,), np.float32, rng, low=0.5, high=1.5)
    with cudnn.BatchNormPlan(x, training=False) as inf:
        y = inf.execute(x, g, b, m, v, out=poisoned(shape, np.float16, True))
        assert "inference" in repr(inf.plan())
        T.assert_close(y, ref.batch_norm_infer(xh, gh, bh, mh, vh), np.float16)
        with pytest.raises(ValueError, match="training=False"):
            inf.backward(x, dy, g, state)


def test_batch_norm_plan_refuses_other_problems(device, rng):
    _, x = rand((4, 8, 6, 6), "float32", rng)
    _, other = rand((4, 8, 6, 7), "float32", rng)
    _, g = rand((8,), "float32", rng)
    with cudnn.BatchNormPlan(x) as plan:
        with pytest.raises(ValueError, match="made for"):
            plan.execute(other, g, g)
        with pytest.raises(ValueError, match="made for"):
            plan.execute(cl.to_device(x.get().astype(np.float16)), g, g)
