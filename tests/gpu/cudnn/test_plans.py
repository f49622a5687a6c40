"""The convolution plans as user-held objects: build, plan, autotune (persisted in the tuning
store, picked up by a fresh plan without timing, a corrupt store or entry measured again),
execute, repr, close; and the refusal of an output that overlaps an input."""

import json

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cudnn
from cudalibs import testing as T
from cudalibs.driver import plan as plan_mod
from cudalibs.errors import ClosedError
from cudalibs.testing import ref

from ._helpers import rand


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
    monkeypatch.setattr(plan_mod, "_store", [None])
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
    plan_mod._store[0] = None
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
    plan_mod._store[0] = None
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
