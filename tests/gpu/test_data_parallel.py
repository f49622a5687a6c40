"""Data-parallel training of the examples (examples/_dp.py with examples/cnn_train.py and
examples/transformer_train.py).

One GPU: a one-rank world (a real one-rank NCCL communicator, the buckets, the
communication stream and its events, the CUDA graph with the all-reduces inside) must give
the plain single-GPU example's losses and weights -- bitwise for the CNN, whose computation is
identical; within the bounds of the transformer's eager-against-graph test for the
transformer, whose token-embedding gradient is an atomic scatter-add.  The launcher is run
in a spawned process too, and the examples' ``--gpus 1`` command lines end to end.

Two GPUs (skipped with "needs two GPUs" on fewer): both examples trained on two ranks, eager
and graph-replayed, with small buckets: the ranks' states bitwise identical after every step,
the weights equal to the one-GPU reference within the examples' tolerances.
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import testing as T

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "examples") not in sys.path:
    sys.path.insert(0, str(ROOT / "examples"))
import _dp  # noqa: E402

if __package__:
    from ._sizes import gpu_settings
else:
    # A spawned rank (examples/_dp.py) loads this file by its path, outside its package.
    _spec = importlib.util.spec_from_file_location("dp_test_sizes",
                                                   Path(__file__).with_name("_sizes.py"))
    _sizes = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_sizes)
    gpu_settings = _sizes.gpu_settings


def _load(name):
    spec = importlib.util.spec_from_file_location(f"dp_test_{name}",
                                                  ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod        # dataclasses look their module up while it loads
    spec.loader.exec_module(mod)
    return mod


CNN = _load("cnn_train")
TFM = _load("transformer_train")

FEW = gpu_settings(2)
BATCH, STEPS = 32, 4
LR, MOMENTUM, WD = 0.05, 0.9, 5e-4
#: Small buckets, so that the models' gradients spread over several of them.
SMALL = dict(bucket_bytes=8 << 10, first_bucket_bytes=2 << 10)


@pytest.fixture(scope="module")
def comm1(device):
    """A one-rank communicator on device 0."""
    from cudalibs import nccl

    c = nccl.Communicator(1, 0, nccl.UniqueId(), device)
    yield c
    c.close()


def _digest(arrays, stream):
    return _dp.state_digest(arrays, stream)


# -- the CNN on one rank -------------------------------------------------------------------------
def _cnn_batches(seed, steps=STEPS, batch=BATCH):
    rng = np.random.default_rng(seed)
    return [(T.random_array((batch, 1, 8, 8), np.float32, rng=rng, low=-2, high=2),
             rng.integers(0, 10, batch).astype(np.int32)) for _ in range(steps)]


def _cnn_run(model, step, data, graph):
    s = model.stream
    losses, runner = [], None
    for x, y in data:
        x, y = cl.to_device(x, stream=s), cl.to_device(y, stream=s)
        if graph and runner is None:
            runner = cl.StepGraph(step, x, y, stream=s)
        elif graph:
            runner(x, y)
        else:
            step(x, y)
        losses.append(model.loss.get(stream=s).item())
    return np.array(losses, np.float32), runner


@FEW
@given(seed=st.integers(0, 2**31))
def test_cnn_one_rank_equals_the_plain_example(comm1, seed):
    data = _cnn_batches(seed)
    opts = dict(batch=BATCH, lr=LR, momentum=MOMENTUM, weight_decay=WD)
    out = {}
    for graph in (False, True):
        plain = CNN.build(seed, **opts)
        losses, _ = _cnn_run(plain, plain.step, data, graph)
        out["plain", graph] = (losses, _digest(plain.state(), plain.stream), plain)
        model, sync, step = CNN.dp_replica(comm1, CNN.init_params(seed), **opts, **SMALL)
        losses, runner = _cnn_run(model, step, data, graph)
        out["dp", graph] = (losses, _digest(model.state(), model.stream), model)
        if graph:
            assert runner.num_nodes > 50 and runner.replays == STEPS - 1
        # every gradient announced, in the declared order; every bucket reduced once
        assert sync.observed == list(CNN.STAT_NAMES + CNN.GRAD_ORDER)
        assert sorted(sync.launched) == list(range(len(sync.buckets)))
        assert len(sync.buckets) >= 4, sync.describe()
    for graph in (False, True):
        (lp, dp_, mp), (ld, dd, md) = out["plain", graph], out["dp", graph]
        print("graph" if graph else "eager", "plain", lp, "dp", ld)
        np.testing.assert_array_equal(ld, lp)
        assert dd == dp_, "data-parallel state differs from the plain example's"
    # the replayed data-parallel steps against the eager plain ones (tolerance of
    # test_cnn_train.py's graph test)
    le, lg = out["plain", False][0], out["dp", True][0]
    assert np.max(np.abs(lg - le) / np.abs(le)) <= 1e-6
    a, b = out["plain", False][2].host_params(), out["dp", True][2].host_params()
    for name in a:
        T.assert_close(b[name], a[name].astype(np.float64), rtol=1e-5, msg=name)
    assert len(set(le.tolist())) == STEPS      # the steps trained


@FEW
@given(seed=st.integers(0, 2**31))
def test_cnn_accumulated_step_is_the_step_for_equal_shards(device, seed):
    """One shard: the plain step.  Two identical shards: their average is the shard's own
    gradient and statistics, so the same bits again (the running statistics must be
    restored before the second shard for this to hold)."""
    (x, y), = _cnn_batches(seed, steps=1)
    digests = []
    for shards in (0, 1, 2):
        model = CNN.build(seed, batch=BATCH, lr=LR, momentum=MOMENTUM, weight_decay=WD)
        s = model.stream
        xd, yd = cl.to_device(x, stream=s), cl.to_device(y, stream=s)
        if shards == 0:
            model.step(xd, yd)
            loss = model.loss.get(stream=s).item()
        else:
            loss = CNN.accumulated_step(model, [(xd, yd)] * shards)
        digests.append((np.float32(loss), _digest(model.state(), s)))
    assert digests[1] == digests[0]
    assert digests[2] == digests[0]


# -- the transformer on one rank ---------------------------------------------------------------
TCFG = TFM.Config()


def _tfm_run(model, step, batches, graph, loss_value):
    s = model.stream
    losses, runner = [], None
    for i, (ids, tg) in enumerate(batches):
        model.set_lr(TFM.lr_at(TCFG, i))
        ids, tg = cl.to_device(ids, stream=s), cl.to_device(tg, stream=s)
        if graph and runner is None:
            runner = cl.StepGraph(step, ids, tg, stream=s)
            out = runner.outputs
        elif graph:
            out = runner(ids, tg)
        else:
            out = step(ids, tg)
        losses.append(loss_value(out.get(stream=s)))
    return np.array(losses), runner


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@FEW
@given(seed=st.integers(0, 2**16))
def test_transformer_one_rank_equals_the_plain_example(comm1, seed):
    batches = TFM.make_batches(TCFG, STEPS, seed)
    plain = TFM.build(TCFG, seed)
    ref, _ = _tfm_run(plain, lambda a, b: TFM.train_step(plain, a, b), batches, False,
                      lambda v: v.item())
    pref = plain.host_params()
    for graph in (False, True):
        model, sync, step = TFM.dp_replica(comm1, TCFG, seed, **SMALL)
        got, runner = _tfm_run(model, step, batches, graph,
                               lambda v: float(v[0]) / float(v[1]))
        print("graph" if graph else "eager", "plain", ref, "dp", got)
        assert sync.observed == list(TFM.grad_order(TCFG))
        assert sorted(sync.launched) == list(range(len(sync.buckets)))
        assert len(sync.buckets) >= 6, sync.describe()
        # The first loss precedes any update: the same sum over the same count.
        assert got[0] == pytest.approx(ref[0], rel=1e-6)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)
        pg = model.host_params()
        worst = max(_rel(pg[k], pref[k]) for k in pref)
        print("parameters, worst relative difference", worst,
              "bitwise:", all(np.array_equal(pg[k], pref[k]) for k in pref))
        assert worst <= 1e-5
        if graph:
            assert runner.replays == STEPS - 1


# -- the machinery ---------------------------------------------------------------------------------
def test_flat_buffer_views_and_grad_sync_on_one_rank(comm1, rng):
    s = cl.Stream()
    b0 = T.random_array((7,), np.float32, rng=rng)
    fb = _dp.FlatBuffer({"a": (3, 5), "b": (7,), "c": (2,)}, np.float32, stream=s,
                        init={"b": cl.to_device(b0, stream=s)}, align=8)
    assert fb.spans == {"a": (0, 15), "b": (16, 23), "c": (24, 26)}
    a0 = T.random_array((3, 5), np.float32, rng=rng)
    fb.views["a"].copy_(a0, s)
    flat = fb.flat.get(stream=s)
    np.testing.assert_array_equal(flat[0:15], a0.ravel())       # views share the buffer
    np.testing.assert_array_equal(flat[16:23], b0)
    assert not flat[[15, 23, 26, 27, 28, 29, 30, 31]].any()     # padding stays zero

    sync = _dp.GradSync(comm1, s, [(fb.flat, fb.spans)], ["c", "b", "a"], bucket_bytes=40,
                        first_bucket_bytes=40)
    assert [b.names for b in sync.buckets] == [("c", "b"), ("a",)]
    with pytest.raises(RuntimeError, match="outside"):
        sync.ready("a")
    with sync.step():
        sync.ready("c")
        assert sync.launched == []
        sync.ready("b")
        assert sync.launched == [0]
        sync.ready("a")
    assert sync.launched == [0, 1]
    # one rank: the average is the value itself
    flat2 = fb.flat.get(stream=s)
    np.testing.assert_array_equal(flat2, flat)
    x0 = T.random_array((5,), np.float32, rng=rng)
    x = cl.to_device(x0, stream=s)
    np.testing.assert_array_equal(sync.all_reduce_now(x).get(stream=s), x0)
    with pytest.raises(RuntimeError, match="without announcing"):
        with sync.step():
            sync.ready("c", "b")
    with pytest.raises(KeyError, match="zzz"):
        with sync.step():
            sync.ready("zzz")
    with pytest.raises(RuntimeError, match="twice"):
        with sync.step():
            sync.ready("a", "a")
    with pytest.raises(ValueError, match="op"):
        _dp.GradSync(comm1, s, [(fb.flat, fb.spans)], ["c", "b", "a"], op="max")
    with pytest.raises(ValueError, match="1-D"):
        _dp.GradSync(comm1, s, [(fb.views["a"], {"a": (0, 1)})], ["a"])
    s.sync()


def _entry_reports(ctx, tag):
    """A spawned rank's report (loaded from this file in the child)."""
    return {"tag": tag, "rank": ctx.rank, "world": ctx.world,
            "device": ctx.device.ordinal, "comm": (ctx.comm.rank, ctx.comm.size)}


def test_launch_spawns_a_rank(device):
    out = _dp.launch(_entry_reports, 1, ("x",), spawn=True, timeout=240)
    assert out == [{"tag": "x", "rank": 0, "world": 1, "device": 0, "comm": (0, 1)}]


def test_launch_reports_a_failing_rank(device):
    with pytest.raises(_dp.RankError, match="TypeError"):
        _dp.launch(_entry_reports, 1, (), spawn=True, timeout=240)   # missing argument
    with pytest.raises(TypeError):
        _dp.launch(_entry_reports, 1, ())                           # in this process


#: Each example's short run: its module, its command line after ``--gpus N``, and the unit
#: of its closing speed line.
SHORT_RUNS = {
    "cnn": (CNN, ["--epochs", "2", "--synthetic", "--target", "0.2", "--bucket-mb", "0.01"],
            "images/s)"),
    "transformer": (TFM, ["--steps", "40", "--every", "10", "--target", "10",
                          "--bucket-mb", "0.25"], "tokens/s)"),
}


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("example", sorted(SHORT_RUNS))
def test_example_command_line_on_one_gpu(device, example, graph, capsys):
    mod, argv, unit = SHORT_RUNS[example]
    status = mod.main(["--gpus", "1"] + argv + (["--graph"] if graph else []))
    out = capsys.readouterr().out
    print(out)
    assert status == 0, out
    assert "bitwise identical" in out and ": OK" in out
    assert out.strip().splitlines()[-1].endswith(unit) and "steps/s" in out


def test_spawned_one_rank_cnn_run(device):
    opts = vars(CNN.arg_parser().parse_args(["--gpus", "1", "--epochs", "1", "--synthetic",
                                              "--target", "0", "--bucket-mb", "0.01"]))
    result, = _dp.launch(CNN.dp_rank, 1, (opts,), spawn=True, timeout=240)
    assert result["ok"] and result["identical"] and result["worst"] == 0.0, result
    assert np.isfinite(result["losses"]).all() and result["steps_per_s"] > 0


def test_too_few_gpus_is_status_2(device, capsys):
    status = CNN.main(["--gpus", str(cl.device_count() + 1)])
    assert status == 2
    assert "visible" in capsys.readouterr().out


# -- two GPUs -------------------------------------------------------------------------------------
def _two_gpus():
    if cl.device_count() < 2:
        pytest.skip(f"needs two GPUs ({cl.device_count()} visible)")


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("example", sorted(SHORT_RUNS))
def test_example_on_two_gpus(device, example, graph):
    _two_gpus()
    mod, argv, _ = SHORT_RUNS[example]
    opts = vars(mod.arg_parser().parse_args(["--gpus", "2"] + argv +
                                            (["--graph"] if graph else [])))
    r0, r1 = _dp.launch(mod.dp_rank, 2, (opts,), timeout=400)
    print({k: v for k, v in r0.items() if k != "losses"})
    assert r0["identical"] and r1["identical"]
    assert r0["worst"] <= opts["rtol"], r0["first_bad"]
    assert r0["ok"] and r1["ok"]
    # the loss is reduced over the ranks: the same on both
    np.testing.assert_array_equal(r0["losses"], r1["losses"])
    if graph:
        assert r0["graph_nodes"] > 50


def test_examples_command_lines_on_two_gpus(device, capfd):
    _two_gpus()
    assert CNN.main(["--gpus", "2", "--epochs", "3", "--synthetic", "--target", "0.5",
                     "--graph"]) == 0
    assert TFM.main(["--gpus", "2", "--steps", "60", "--every", "20", "--target", "10"]) == 0
    out = capfd.readouterr().out
    print(out)
    assert out.count("bitwise identical") == 2 and out.count("on 2 GPU(s)") == 2
