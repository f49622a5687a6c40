"""The runtime's public names on a GPU: the operand path (``operand``, ``operands``,
``check_device``) on real device memory and borrowed arrays, a ``PlanCache`` of real plans
under a ``KeyKind`` (bounded, evicted plans closed, ``CacheEntry`` by field name), the
``TuningStore`` answering a second autotune without the timer, ``Options`` in force, and
``capture_step``: a captured training step whose replays equal the eager steps bit for bit."""

import gc
import types
import weakref

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cublas
from cudalibs import kernels as K
from cudalibs import testing as T
from cudalibs.runtime import plan as plan_mod


class _Interface:
    """An array that speaks ``__cuda_array_interface__`` only (a foreign producer)."""

    def __init__(self, arr, readonly=False):
        cai = dict(arr.__cuda_array_interface__)
        if readonly:
            cai["data"] = (cai["data"][0], True)
        self.__cuda_array_interface__ = cai
        self._keep = arr


# -- the operand path ---------------------------------------------------------------------------
def test_operand_borrows_foreign_memory_and_checks_it(device, rng):
    x = T.random_array((6, 5), np.float32, rng=rng)
    d = cl.to_device(x)
    assert cl.operand(d, "x", "op") is d
    borrowed = cl.runtime.operand(_Interface(d), "x", "op", device=device, dtypes=(d.dtype,),
                                  ndim=2, contiguous=True)
    assert isinstance(borrowed, cl.DeviceArray) and borrowed is not d
    assert (borrowed.address, borrowed.shape, borrowed.dtype) == (d.address, d.shape, d.dtype)
    borrowed.fill(2.5)                      # no copy: the write lands in d
    np.testing.assert_array_equal(d.get(), np.full((6, 5), 2.5, np.float32))
    with pytest.raises(TypeError, match=r"^op: x is a host numpy array; copy it to the GPU "
                                        r"first with cudalibs.to_device\(\)"):
        cl.operand(x, "x", "op")
    with pytest.raises(TypeError, match="op: x has dtype float32; supported: float16"):
        cl.operand(d, "x", "op", dtypes=(np.dtype(np.float16),))
    with pytest.raises(ValueError, match="op: x must have 3 dimensions"):
        cl.operand(d, "x", "op", ndim=3)
    with pytest.raises(ValueError, match="op: x must be C-contiguous"):
        cl.operand(d.T, "x", "op", contiguous=True)
    with pytest.raises(ValueError, match="op: out is read-only"):
        cl.operand(_Interface(d, readonly=True), "out", "op")
    dead = cl.to_device(x)
    dead.close()
    with pytest.raises(cl.ClosedError, match="op: x is closed"):
        cl.operand(dead, "x", "op")


def test_operands_share_one_device(device, rng):
    a = cl.to_device(T.random_array((4,), np.float32, rng=rng))
    b = cl.to_device(T.random_array((4,), np.float32, rng=rng))
    got_a, got_b, none, dev = cl.operands("op", (a, "a"), (_Interface(b), "b"), (None, "c"))
    assert got_a is a and got_b.address == b.address and none is None and dev is device
    with pytest.raises(TypeError, match=r"op: b is required \(got None\)"):
        cl.runtime.operands("op", (a, "a"), (None, "b"), required=2)
    cl.runtime.check_device(a, device, "a", "op")      # the same device: nothing to say
    elsewhere = types.SimpleNamespace(ordinal=7)
    with pytest.raises(ValueError, match="op: a is on device 0, the other operands on "
                                         "device 7; copy it there first"):
        cl.runtime.check_device(a, elsewhere, "a", "op")


# -- the plan cache -----------------------------------------------------------------------------
def test_a_plan_cache_of_real_plans(device, rng):
    kind = cl.runtime.KeyKind("test_gemm_plans", ("m", "n"))
    cache = cl.PlanCache(maxsize=2)
    hosts, plans = {}, {}
    for m in (8, 16, 24):
        a = T.random_array((m, 12), np.float32, rng=rng)
        b = T.random_array((12, 5), np.float32, rng=rng)
        hosts[m] = (a, b)
        p = cublas.GemmPlan(cl.to_device(a), cl.to_device(b))
        assert cache.put(kind.key(m, 5), p) is p
        plans[m] = weakref.ref(p)
        del p
    # bounded: the least recently used went, and nothing holds it any more, so it is freed
    assert len(cache) == 2 and cache.evictions == 1
    gc.collect()
    assert plans[8]() is None
    assert cache.lookup(kind.key(8, 5)) is None and cache.misses == 1
    entries = cache.entries("test_gemm_plans")
    assert [e.key for e in entries] == [{"m": 16, "n": 5}, {"m": 24, "n": 5}]
    for e in entries:
        assert isinstance(e, cl.runtime.CacheEntry) and e.kind == "test_gemm_plans"
        assert kind.field(e.raw_key, "m") == e.key["m"] and kind.named(e.raw_key) == e.key
        a, b = hosts[e.key["m"]]
        T.assert_close(e.plan.execute(cl.to_device(a), cl.to_device(b)), T.ref.gemm(a, b),
                       np.float32)
    # another plan for a key already there loses, and is closed
    late = cublas.GemmPlan(cl.to_device(hosts[24][0]), cl.to_device(hosts[24][1]))
    assert cache.put(kind.key(24, 5), late) is plans[24]() and late.closed
    # a lower bound evicts at once
    cache.maxsize = 1
    assert len(cache) == 1 and cache.evictions == 2 and cache.kinds() == {"test_gemm_plans": 1}
    with pytest.raises(TypeError, match="test_gemm_plans keys have 2 fields"):
        kind.key(1)
    # the process's cache is one of these, and calling it gives itself
    assert isinstance(cl.plan_cache, cl.runtime.PlanCache) and cl.plan_cache() is cl.plan_cache
    assert {"plans", "maxsize", "misses", "evictions", "kinds", "relaunch"} <= \
        set(cl.plan_cache.info())


# -- the tuning store ---------------------------------------------------------------------------
def test_the_tuning_store_answers_a_second_autotune(device, rng, tmp_path, monkeypatch):
    path = tmp_path / "tuning.json"
    monkeypatch.setenv("CUDALIBS_TUNING_CACHE", str(path))
    store = cl.tuning_store()
    assert isinstance(store, cl.runtime.TuningStore) and store.path == str(path)
    assert cl.runtime.tuning_store() is store
    a = T.random_array((96, 80), np.float32, rng=rng)
    b = T.random_array((80, 72), np.float32, rng=rng)
    da, db = cl.to_device(a), cl.to_device(b)
    first = cublas.GemmPlan(da, db)
    first.autotune(rounds=2)
    assert first.tuned and first.time_ms is not None and first.time_ms > 0
    chosen = first.candidates[first.choice]["id"]
    store.flush()
    assert path.is_file() and len(store) >= 1

    def no_timing(*args, **kwargs):
        raise AssertionError("the tuning store should have answered")

    # a new plan of the same problem takes the stored choice without timing anything
    monkeypatch.setattr(plan_mod, "time_candidates", no_timing)
    second = cublas.GemmPlan(da, db)
    second.autotune()
    assert second.tuned and second.candidates[second.choice]["id"] == chosen
    T.assert_close(second.execute(da, db), T.ref.gemm(a, b), np.float32)
    with pytest.raises(AssertionError, match="should have answered"):
        second.autotune(force=True)          # force times again, whatever is stored
    first.close()
    second.close()


# -- options ------------------------------------------------------------------------------------
def test_options_in_force(device):
    now = cl.options()
    assert isinstance(now, cl.Options) and cl.runtime.Options is cl.Options
    with cl.option_context(relaunch=not now.relaunch) as inside:
        assert isinstance(inside, cl.Options) and cl.options() == inside
        assert inside.relaunch is (not now.relaunch) and inside.replace(
            relaunch=now.relaunch) == now
    assert cl.options() == now


# -- a whole training step ----------------------------------------------------------------------
def _classifier(rng, n_in, classes):
    """Weights, bias and their momentum buffers of a linear classifier (host arrays)."""
    return {"w": T.random_array((n_in, classes), np.float32, rng=rng, low=-0.3, high=0.3),
            "b": T.random_array((1, classes), np.float32, rng=rng, low=-0.1, high=0.1),
            "mw": np.zeros((n_in, classes), np.float32),
            "mb": np.zeros((1, classes), np.float32)}


def _train_step(p, lr):
    """One SGD (momentum 0.9) step of softmax cross-entropy on ``x @ w + b``: cuBLAS for the
    products, the kernel library for the loss, its gradient and the updates, in place.  The
    loss stays on the device as the step's output."""
    def step(x, labels):
        ones = cl.full((x.shape[0], 1), 1.0, np.float32)
        logits = cublas.gemm(x, p["w"])
        cublas.gemm(ones, p["b"], logits, beta=1.0)          # + b on every row
        res = K.cross_entropy(logits, labels)
        grad = K.cross_entropy_backward(logits, labels, res.count)
        K.sgd(p["w"], cublas.gemm(x.T, grad), p["mw"], lr=lr, momentum=0.9)
        K.sgd(p["b"], cublas.gemm(ones.T, grad), p["mb"], lr=lr, momentum=0.9)
        return res.loss
    return step


@pytest.mark.parametrize("mode", sorted(cl.graph.CAPTURE_MODES))
def test_a_captured_training_step_replays_the_eager_steps(device, rng, mode):
    n, n_in, classes, steps = 37, 29, 11, 5
    init = _classifier(rng, n_in, classes)
    batches = [(T.random_array((n, n_in), np.float32, rng=rng),
                rng.integers(0, classes, n).astype(np.int64)) for _ in range(steps)]
    s = cl.Stream()
    eager = {k: cl.to_device(v, stream=s) for k, v in init.items()}
    graphed = {k: cl.to_device(v, stream=s) for k, v in init.items()}
    with s:
        eager_step = _train_step(eager, 0.1)
        eager_losses = [eager_step(cl.to_device(x, stream=s), cl.to_device(y, stream=s))
                        .get(stream=s) for x, y in batches]
    # The first eager loss against float64 numpy: the step computes what it says.
    x0, y0 = batches[0]
    logits = x0.astype(np.float64) @ init["w"] + init["b"]
    want, _, _ = T.ref.cross_entropy(logits, y0)
    T.assert_close(eager_losses[0].reshape(1), np.array([want]), np.float32)
    # Captured: the warm-up is the step on batch 0, the replays run the rest.
    step = cl.capture_step(_train_step(graphed, 0.1), *batches[0], stream=s, mode=mode)
    assert isinstance(step, cl.StepGraph) and step.stream is s
    np.testing.assert_array_equal(step.outputs.get(stream=s), eager_losses[0])
    for i, (x, y) in enumerate(batches[1:], 1):
        np.testing.assert_array_equal(step(x, y).get(stream=s), eager_losses[i],
                                      err_msg=f"loss of step {i}")
    assert step.replays == steps - 1
    for k in init:
        np.testing.assert_array_equal(graphed[k].get(stream=s), eager[k].get(stream=s),
                                      err_msg=f"parameter {k} after {steps} steps")
    # the parameters moved: the replays updated them in place, not a copy
    assert not np.array_equal(graphed["w"].get(stream=s), init["w"])
    step.close()
