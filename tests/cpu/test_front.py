"""The one front without a GPU: key schemas, the plan cache's lookup and summary, inserting
and building plans through cudalibs.runtime.front, and the one relaunch path's fallback to
the library call (RelaunchSlots.launch) with stand-ins for the stream and the plan."""

from __future__ import annotations

import gc
import pickle
import threading

import numpy as np
import pytest

import cudalibs
from cudalibs import _ffi
from cudalibs.errors import ClosedError
from cudalibs.runtime import cache as C, front, plan as P, relaunch as R

KIND = C.KeyKind("front_toy", ("shape", "dtype"))


class _Toy(P.Plan):
    """A plan with stand-in candidates; records what was done to it."""

    kind = "front_toy"

    def __init__(self, tag=0, slots=()):
        self._init_plan(None)
        self.freed = []
        self._own(self.freed.append, tag)
        self.tag = tag
        self.slots = list(slots)
        self.tuned_on = []

    def _heuristics(self):
        return [{"name": "algo0", "id": 0}, {"name": "algo1", "id": 1}]

    def _select(self, i):
        pass

    def _problem(self):
        return f"toy {self.tag}"

    def autotune(self, *, stream=None, **kw):      # the timer needs a GPU: record the call
        self.tuned_on.append(stream)
        return self.candidates

    def relaunch_slots(self):
        return self.slots


@pytest.fixture(autouse=True)
def _clear_toy_plans():
    """Plans of this file's kind never outlive a test in the process-wide cache; relaunches
    are on (as by default) whatever the environment of this run says."""
    before = cudalibs.set_options(relaunch=True)
    yield
    cudalibs.set_options(before)
    C.cache.clear(KIND.name)


# -- key schemas ----------------------------------------------------------------------------
def test_check_accepts_a_key_of_its_kind():
    assert KIND.check(KIND.key((2, 3), "float32")) is None
    assert KIND.check((KIND, None, None)) is None


@pytest.mark.parametrize("key, match", [
    ((C.KeyKind("front_other", ("shape", "dtype")), (2, 3), "f"), "not a front_toy key"),
    (("front_toy", (2, 3), "f"), "not a front_toy key"),      # the name is not the kind
    ([KIND, (2, 3), "f"], "not a front_toy key"),               # a list is no key
    ((), "not a front_toy key"),
    ((KIND, (2, 3)), "2 fields"),
    ((KIND, (2, 3), "f", "extra"), "this one 3 values"),
    ((KIND, [2, 3], "f"), "unhashable"),
    ((KIND, (2, 3), {"dtype": "f"}), "unhashable"),
])
def test_check_refuses_keys_that_do_not_fit(key, match):
    with pytest.raises(TypeError, match=match):
        KIND.check(key)


def test_fields_are_read_by_name():
    k = KIND.key((4, 4), "float16")
    assert KIND.field(k, "dtype") == "float16" and KIND.field(k, "shape") == (4, 4)
    with pytest.raises(KeyError, match="no field 'layout'.*shape, dtype"):
        KIND.field(k, "layout")
    with pytest.raises(ValueError, match="names a field twice"):
        C.KeyKind("twice", ("a", "b", "a"))
    again = pickle.loads(pickle.dumps(KIND))
    assert (again.name, again.fields) == (KIND.name, KIND.fields)


# -- the cache ------------------------------------------------------------------------------
def test_lookup_returns_a_usable_plan_and_makes_it_most_recent():
    c = C.PlanCache(maxsize=4)
    a, b = _Toy("a"), _Toy("b")
    c.put(KIND.key(1, "f"), a)
    c.put(KIND.key(2, "f"), b)
    assert a.usable() and c.lookup(KIND.key(1, "f")) is a
    assert [e.plan for e in c.entries()] == [b, a]          # least recently used first
    assert c.misses == 0


def test_an_unusable_plan_is_discarded_and_counts_as_a_miss():
    c = C.PlanCache(maxsize=4)
    p = c.put(KIND.key(1, "f"), _Toy("closed"))
    p.close()
    assert not p.usable()
    assert c.lookup(KIND.key(1, "f")) is None
    assert KIND.key(1, "f") not in c and c.misses == 1
    assert c.lookup(KIND.key(9, "f")) is None and c.misses == 2     # a plain miss too


def test_discard_leaves_a_plan_another_thread_put_in_its_place():
    c = C.PlanCache(maxsize=4)
    old, new = _Toy("old"), _Toy("new")
    c.put(KIND.key(1, "f"), new)
    c.discard(KIND.key(1, "f"), old)
    assert c.lookup(KIND.key(1, "f")) is new
    c.discard(KIND.key(1, "f"), new)
    assert KIND.key(1, "f") not in c


def _slots_with(pending=0, refused=()):
    """RelaunchSlots holding ``pending`` shapes seen once and shapes refused for having no
    recording (all made through the one relaunch path, no GPU needed)."""
    slots = R.RelaunchSlots()
    owner = _Owner(recording=None)
    for i in range(pending):
        assert slots.launch(("pending", i), (0x1000,), _Stream(), owner, None) is False
    for key in refused:
        for _ in range(2):      # seen, then due: refused, since it has no recording
            assert slots.launch(key, (0x1000,), _Stream(), owner, None) is False
    return slots


def test_info_reports_the_cache_and_its_relaunches():
    c = C.PlanCache(maxsize=3)
    info = c.info()
    assert set(info) == {"plans", "maxsize", "misses", "evictions", "kinds", "relaunch"}
    assert (info["plans"], info["maxsize"], info["misses"], info["evictions"]) == (0, 3, 0, 0)
    assert set(info["relaunch"]) == {"recorded", "refused", "pending", "failed", "threads",
                                     "reasons", "totals"}
    assert set(info["relaunch"]["totals"]) == {"recorded", "refused", "retried", "failed"}
    other = C.KeyKind("front_other", ("x",))
    c.put(KIND.key(1, "f"), _Toy(1, [_slots_with(pending=2)]))
    c.put(KIND.key(2, "f"), _Toy(2, [_slots_with(refused=["a", "b"]), _slots_with(1)]))
    c.put(other.key(1), object())          # something without relaunches is counted too
    c.lookup(KIND.key(3, "f"))
    info = c.info()
    assert (info["plans"], info["misses"], info["kinds"]) == (3, 1, {"front_toy": 2,
                                                                     "front_other": 1})
    rel = info["relaunch"]
    assert (rel["recorded"], rel["refused"], rel["pending"], rel["failed"]) == (0, 2, 3, 0)
    assert rel["reasons"] == {"the call shape has no recording": 2}
    c.put(other.key(2), object())
    assert c.info()["evictions"] == 1 and c.info()["plans"] == 3


def test_the_process_cache_is_the_public_one():
    assert cudalibs.plan_cache is C.cache and isinstance(cudalibs.plan_cache, cudalibs.PlanCache)
    assert set(cudalibs.plan_cache.info()) >= {"plans", "relaunch"}


@pytest.mark.parametrize("bad, exc", [("x", TypeError), (2.5, TypeError), (None, TypeError),
                                      (True, TypeError), (0, ValueError), (-3, ValueError)])
def test_maxsize_must_be_a_positive_int(bad, exc):
    if bad is not None:
        with pytest.raises(exc, match="maxsize"):
            C.PlanCache(maxsize=bad)
    c = C.PlanCache(maxsize=2)
    with pytest.raises(exc, match="maxsize"):
        c.maxsize = bad
    assert c.maxsize == 2


def test_maxsize_takes_integer_likes_and_the_environment(monkeypatch):
    assert C.PlanCache(maxsize=np.int64(5)).maxsize == 5
    monkeypatch.setenv("CUDALIBS_PLAN_CACHE_SIZE", "7")
    assert C.PlanCache().maxsize == 7
    monkeypatch.setenv("CUDALIBS_PLAN_CACHE_SIZE", "lots")
    assert C.PlanCache().maxsize == 1024


# -- the front ------------------------------------------------------------------------------
def test_lookup_is_the_process_caches():
    assert front.lookup == C.cache.lookup


def test_insert_checks_the_key_before_preparing():
    prepared = []
    for key in (("front_toy", 1, "f"), (KIND, 1), 17, (KIND, [1], "f")):
        p = _Toy("bad key")
        with pytest.raises(TypeError):
            front.insert(key, p, prepared.append)
        assert not p.closed
    assert prepared == [] and C.cache.kinds().get(KIND.name) is None


def test_insert_prepares_the_plan_and_caches_it():
    p = _Toy("planned")
    assert front.insert(KIND.key(1, "f"), p) is p          # default: front.PLAN
    assert p.choice == 0 and front.lookup(KIND.key(1, "f")) is p
    q = _Toy("as is")
    assert front.insert(KIND.key(2, "f"), q, None) is q     # None: planned on first use
    assert q.choice == -1
    r = _Toy("tuned")
    stream = object()
    assert front.insert(KIND.key(3, "f"), r, front.tuned(stream)) is r
    assert r.tuned_on == [stream]


class _Refusal(Exception):
    pass


@pytest.mark.parametrize("exc", [_Refusal, KeyboardInterrupt])
def test_insert_closes_the_plan_and_reraises_when_preparing_fails(exc):
    p = _Toy("doomed")

    def prepare(plan):
        raise exc("no candidate")

    with pytest.raises(exc, match="no candidate"):
        front.insert(KIND.key(1, "f"), p, prepare)
    assert p.closed and p.freed == ["doomed"]
    assert front.lookup(KIND.key(1, "f")) is None


def test_the_first_insert_wins_between_two_threads():
    both_prepared = threading.Barrier(2)
    got, plans = {}, {}

    def prepare(plan):
        plan.plan()
        both_prepared.wait(10)          # both have built a plan before either inserts

    def work(name):
        plans[name] = _Toy(name)
        got[name] = front.insert(KIND.key("race", "f"), plans[name], prepare)

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winner = got["a"]
    assert got["b"] is winner and front.lookup(KIND.key("race", "f")) is winner
    loser = plans["b"] if winner is plans["a"] else plans["a"]
    assert loser.closed and not winner.closed


def test_planned_builds_on_a_miss_only():
    built = []

    def build():
        built.append(_Toy(len(built)))
        return built[-1]

    key = KIND.key(1, "f")
    p = front.planned(key, build)
    assert front.planned(key, build) is p and len(built) == 1 and p.choice == 0
    p.close()                            # closed behind the cache's back: built again
    q = front.planned(key, build)
    assert q is not p and len(built) == 2 and q.usable()
    tuned = front.planned(KIND.key(2, "f"), build, tune=True, stream="s")
    assert tuned.tuned_on == ["s"]              # prepared by autotuning on the stream
    bare = front.planned(KIND.key(3, "f"), build, prepare=None)
    assert bare.choice == -1


def test_planned_checks_the_key_and_builds_nothing_cached_for_a_bad_one():
    with pytest.raises(TypeError, match="2 fields"):
        front.planned((KIND, 1), lambda: _Toy("x"))


def test_plans_are_usable_until_closed_and_summarise_their_relaunches():
    p = _Toy("p")
    assert p.usable() and p.relaunch_slots() == []
    assert P.Plan.relaunch_slots(p) == []                  # the base plan relaunches nothing
    assert p.relaunch_info() == {"recorded": 0, "refused": 0, "pending": 0, "failed": 0,
                                 "threads": 0, "reasons": {}}
    p.slots = [_slots_with(pending=1, refused=["k"])]
    p.plan()
    info = p.relaunch_info()
    assert (info["pending"], info["refused"]) == (1, 1)
    assert "relaunch: 1 refused, 1 pending" in repr(p)
    p.close()
    assert not p.usable()
    with pytest.raises(ClosedError):
        p.plan()


# -- the one relaunch path: falling back to the library call ------------------------------
class _Stream:
    """What RelaunchSlots.launch reads of a stream: an owned one is never asked whether it
    is capturing (a framework's may be)."""

    owned = True
    raw = None


class _Device:
    """Not a Device: anything that reached the driver with it would fail."""

    ordinal = 0


class _Owner:
    """The plan side of a relaunch: says how to record a call shape, counts the asks."""

    def __init__(self, recording="default"):
        self.asked = []
        self._recording = recording

    def recording(self, key):
        self.asked.append(key)
        if self._recording != "default":
            return self._recording

        def enqueue(stream, addresses):
            raise AssertionError("nothing is captured without a driver")

        return R.Recording(enqueue, (256, R.WORKSPACE_ALIGN), f"toy call {key}")


def _launch(slots, key, owner, n):
    return [slots.launch(key, (0x10000, 0x20000), _Stream(), owner, _Device())
            for _ in range(n)]


def test_a_failing_recording_is_retried_then_refused_without_raising():
    slots, owner = R.RelaunchSlots(), _Owner()
    before = R.totals()
    # First sight: pending; the second call records, which fails here (no driver), and the
    # library call goes on; the shape is tried again on later calls.
    assert _launch(slots, "shape", owner, 2) == [False, False]
    assert owner.asked == ["shape"]
    assert slots.state("shape") is None and slots.reasons() == {}
    assert "1 pending" in repr(slots)
    assert _launch(slots, "shape", owner, 40) == [False] * 40
    assert len(owner.asked) == R.RETRIES                 # then no more tries
    why = slots.state("shape")
    assert isinstance(why, str) and why.startswith("recording failed:")
    assert f"after {R.RETRIES} tries" in why
    assert slots.reasons() == {"shape": why} and slots.get("shape") is None
    assert len(slots) == 0 and "1 refused" in repr(slots)
    out = {"recorded": 0, "refused": 0, "pending": 0, "failed": 0, "threads": 0,
           "reasons": {}}
    R.summarise(slots, out)
    assert (out["refused"], out["pending"], out["reasons"]) == (1, 0, {why: 1})
    after = R.totals()
    assert after["retried"] - before["retried"] == R.RETRIES - 1
    assert after["refused"] - before["refused"] == 1
    assert after["recorded"] == before["recorded"]


def test_a_shape_without_a_recording_is_refused_at_once():
    slots, owner = R.RelaunchSlots(), _Owner(recording=None)
    assert _launch(slots, "k", owner, 5) == [False] * 5
    assert owner.asked == ["k"] and slots.state("k") == "the call shape has no recording"


def test_relaunch_off_records_nothing():
    slots, owner = R.RelaunchSlots(), _Owner()
    with cudalibs.option_context(relaunch=False):
        assert _launch(slots, "off", owner, 6) == [False] * 6
    assert owner.asked == [] and "0 pending" in repr(slots)
    with cudalibs.option_context({"relaunch": False}):
        assert _launch(slots, "off", owner, 2) == [False, False]
    assert owner.asked == []
    # On again: the shape is seen for the first time now.
    assert _launch(slots, "off", owner, 1) == [False] and "1 pending" in repr(slots)


def test_an_open_capture_records_nothing():
    slots, owner = R.RelaunchSlots(), _Owner()
    _ffi.begin_capture_block()
    try:
        assert _launch(slots, "captured", owner, 4) == [False] * 4
    finally:
        _ffi.end_capture_block()
    assert owner.asked == [] and "0 pending" in repr(slots)


def test_slots_keep_at_most_max_shapes():
    slots, owner = R.RelaunchSlots(), _Owner()
    for i in range(R.RelaunchSlots.MAX + 5):
        assert _launch(slots, ("shape", i), owner, 1) == [False]
    assert f"{R.RelaunchSlots.MAX} pending" in repr(slots)


def test_a_relaunch_failing_at_launch_is_turned_off_for_its_shape():
    # A recorded relaunch closed behind the slots' back: launching it raises inside the
    # machinery, so the call goes to the library and the shape is refused from then on.
    rl = object.__new__(R.KernelRelaunch)
    rl._borrow()
    rl._alive = [False]
    rl.name = "toy call"
    rl.close()
    slots, owner = R.RelaunchSlots(), _Owner()
    slots._d["shape"] = rl          # where a successful recording would have put it
    before = R.totals()
    assert _launch(slots, "shape", owner, 3) == [False] * 3
    why = slots.state("shape")
    assert why.startswith("relaunch failed at launch: ClosedError")
    out = {"recorded": 0, "refused": 0, "pending": 0, "failed": 0, "threads": 0,
           "reasons": {}}
    R.summarise(slots, out)
    assert (out["failed"], out["refused"]) == (1, 0)
    assert R.totals()["failed"] - before["failed"] == 1
    assert owner.asked == []                     # never recorded again
    slots.close()
    assert slots.state("shape") is None
    gc.collect()
