"""The plan protocol, the one plan cache, the tuning store and the operand path, without a GPU."""

from __future__ import annotations

import contextlib
import gc
import json
import threading
import weakref

import numpy as np
import pytest

from cudalibs import ClosedError
from cudalibs.runtime import cache as C, front, plan as P, tuning as T
from cudalibs.runtime.operand import operand, operands


# -- named keys and the cache ---------------------------------------------------------------
KIND = C.KeyKind("toy", ("shape", "dtype"))


class _Freed:
    def __init__(self):
        self.calls = []

    def __call__(self, tag):
        self.calls.append(tag)


class _Toy(P.Plan):
    """A plan with fake candidates: 'runs' are recorded, nothing touches a GPU."""

    kind = "toy"

    def __init__(self, freed, tag=0, n=3, device=None):
        self._init_plan(device)
        self._own(freed, tag)
        self.n = n
        self.selected = []

    def _heuristics(self):
        return [{"name": f"algo{i}", "id": f"a{i}", "workspace": 16 * i} for i in range(self.n)]

    def _select(self, i):
        self.selected.append(i)

    @contextlib.contextmanager
    def _runner(self, stream):
        yield lambda i: None

    def _problem(self):
        return "toy 4x4"

    def _tuning_key(self):
        return {"m": 4, "n": 4}

    def _library_version(self):
        return "1.0"

    def _store_key(self):   # no device here: a fixed architecture
        return json.dumps([self.kind, "sm_test", self._library_version(), self._tuning_key()])


def test_key_kind_names_fields_and_checks_arity():
    k = KIND.key((2, 3), "float32")
    assert k == (KIND, (2, 3), "float32")
    assert KIND.named(k) == {"shape": (2, 3), "dtype": "float32"}
    with pytest.raises(TypeError, match="2 fields"):
        KIND.key((2, 3))
    with pytest.raises(ValueError, match="not a toy key"):
        KIND.named(("other", 1, 2))


def test_cache_is_lru_bounded_and_drops_evicted_plans():
    freed = _Freed()
    c = C.PlanCache(maxsize=2)
    c.put(KIND.key(1, "f"), _Toy(freed, 1))
    c.put(KIND.key(2, "f"), _Toy(freed, 2))
    assert c.get(KIND.key(1, "f")) is not None          # 1 is now most recently used
    c.put(KIND.key(3, "f"), _Toy(freed, 3))
    assert KIND.key(2, "f") not in c and KIND.key(1, "f") in c
    gc.collect()
    assert freed.calls == [2]                            # the evicted plan was freed
    assert c.evictions == 1 and len(c) == 2
    c.maxsize = 1
    assert len(c) == 1 and freed.calls == [2, 1]
    with pytest.raises(ValueError):
        c.maxsize = 0
    [e] = c.entries()
    assert e.kind == "toy" and e.key == {"shape": 3, "dtype": "f"}
    assert "toy" in repr(c) and "1/1" in repr(c)


def test_evicted_plan_held_by_a_caller_stays_usable_until_released():
    freed = _Freed()
    c = C.PlanCache(maxsize=1)
    held = c.put(KIND.key(1, "f"), _Toy(freed, 1))
    c.put(KIND.key(2, "f"), _Toy(freed, 2))
    assert not held.closed and freed.calls == []         # a caller still holds it
    r = weakref.ref(held)
    del held
    gc.collect()
    assert r() is None and freed.calls == [1]


def test_cache_first_insert_wins_and_the_loser_is_closed():
    freed = _Freed()
    c = C.PlanCache(maxsize=4)
    first = c.put(KIND.key(1, "f"), _Toy(freed, "first"))
    loser = _Toy(freed, "second")
    got = c.put(KIND.key(1, "f"), loser)
    assert got is first and loser.closed and freed.calls == ["second"]


def test_cache_clear_by_kind():
    other = C.KeyKind("other", ("x",))
    c = C.PlanCache(maxsize=8)
    freed = _Freed()
    c.put(KIND.key(1, "f"), _Toy(freed, 1))
    c.put(other.key(1), _Toy(freed, 2))
    assert c.kinds() == {"toy": 1, "other": 1}
    assert c.clear("toy") == 1 and c.kinds() == {"other": 1}
    assert c.clear() == 1 and len(c) == 0


def test_cache_threads_never_exceed_the_bound_and_agree_on_one_plan_per_key(monkeypatch):
    c = C.PlanCache(maxsize=16)
    # The one front over a private cache, so the process-wide one is left alone.
    monkeypatch.setattr(front, "cache", c)
    monkeypatch.setattr(front, "lookup", c.lookup)
    freed = _Freed()
    seen: dict = {}
    lock = threading.Lock()

    def work(t):
        for i in range(400):
            key = KIND.key(i % 24, "f")
            p = front.planned(key, lambda: _Toy(freed, (t, i)))
            # an evicted plan is still open for the thread that holds it
            assert not p.closed
            with lock:
                seen.setdefault((i % 24, t), p)
            assert len(c) <= 16

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(c) <= 16
    # every key still cached maps to a single live plan
    for e in c.entries():
        assert not e.plan.closed


# -- the plan protocol ----------------------------------------------------------------------
def test_plan_protocol_plan_select_repr_close():
    freed = _Freed()
    p = _Toy(freed, "p")
    assert "not planned" in repr(p) and p.choice == -1
    assert p.plan() is p and p.plan() is p               # idempotent
    assert p.choice == 0 and p.selected == [0]
    assert "algo0" in repr(p) and "toy 4x4" in repr(p) and "untimed" in repr(p)
    p.select(2)
    assert p.choice == 2 and p.workspace_bytes == 32
    with pytest.raises(IndexError):
        p.select(3)
    assert [c["name"] for c in p.candidates] == ["algo0", "algo1", "algo2"]
    p.close()
    p.close()
    assert p.closed and freed.calls == ["p"] and "closed" in repr(p)
    with pytest.raises(ClosedError, match="_Toy is closed"):
        p.plan()
    with pytest.raises(ClosedError):
        with p:
            pass


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "tuning.json"
    monkeypatch.setenv("CUDALIBS_TUNING_CACHE", str(path))
    return path


def _fake_timer(times, calls):
    def fake(runs, stream, **kw):
        calls.append(len(runs))
        for r in runs:
            r()
        return list(times)
    return fake


def test_autotune_keeps_the_fastest_and_a_second_plan_reads_it_from_disk(store, monkeypatch):
    calls = []
    monkeypatch.setattr(P, "time_candidates", _fake_timer([3.0, 1.0, 2.0], calls))
    monkeypatch.setattr(P, "as_stream", lambda s, d=None: None)
    p = _Toy(_Freed())
    cands = p.autotune()
    assert p.choice == 1 and p.tuned and calls == [3]
    assert [c["ms"] for c in cands] == [3.0, 1.0, 2.0]
    assert "autotuned" in repr(p) and "1000.0 us" in repr(p)
    assert store.exists()
    # A new process would build a new store object: drop the cached one.
    T._store[0] = None
    q = _Toy(_Freed())
    q.autotune()
    assert q.choice == 1 and q.tuned and calls == [3]        # no second timing
    q.autotune(force=True)
    assert calls == [3, 3]


def test_a_corrupt_or_stale_store_entry_is_measured_again(store, monkeypatch):
    calls = []
    monkeypatch.setattr(P, "time_candidates", _fake_timer([2.0, 1.0, 3.0], calls))
    monkeypatch.setattr(P, "as_stream", lambda s, d=None: None)
    store.write_text("{not json")
    T._store[0] = None
    p = _Toy(_Freed())
    p.autotune()
    assert calls == [3] and p.choice == 1
    json.loads(store.read_text())                              # rewritten, valid
    # an entry naming a candidate the library no longer offers is re-measured
    data = json.loads(store.read_text())
    for rec in data["entries"].values():
        rec["value"]["candidate"] = "gone"
        rec["value"]["index"] = 7
    store.write_text(json.dumps(data))
    T._store[0] = None
    q = _Toy(_Freed())
    q.autotune()
    assert calls == [3, 3] and q.choice == 1


def test_tuning_store_off_keeps_results_in_memory(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDALIBS_TUNING_CACHE", "off")
    st = T.tuning_store()
    assert st.path is None
    st.put("k", {"candidate": 1})
    assert st.get("k") == {"candidate": 1}
    assert "memory only" in repr(st)


def test_tuning_store_merges_writers(tmp_path):
    path = str(tmp_path / "t.json")
    a, b = T.TuningStore(path), T.TuningStore(path)
    a.put("one", {"candidate": 1})
    b.put("two", {"candidate": 2})
    c = T.TuningStore(path)
    assert c.get("one") == {"candidate": 1} and c.get("two") == {"candidate": 2}
    c.clear()
    assert T.TuningStore(path).get("one") is None


def test_the_process_wide_stores_are_read_one_way():
    import cudalibs
    from cudalibs import cublas

    # Both stores are called to be had; the plan cache is also the object itself.
    assert cudalibs.plan_cache() is cudalibs.plan_cache is C.cache
    assert isinstance(cudalibs.tuning_store(), T.TuningStore)
    assert cudalibs.plan_cache().maxsize == cudalibs.plan_cache.maxsize
    # cuBLAS's view of its matmul plans is named like the other libraries' views
    assert isinstance(cublas.matmul_cache(), dict)
    with pytest.warns(DeprecationWarning, match=r"cublas\.matmul_cache\(\)"):
        assert cublas.plan_cache() == cublas.matmul_cache()
    with pytest.warns(DeprecationWarning, match=r"cublas\.clear_matmul_cache\(\)"):
        cublas.clear_plan_cache()


def test_release_all_clears_the_cache_and_runs_hooks(monkeypatch):
    ran = []
    monkeypatch.setattr(C, "RELEASE_HOOKS", [lambda: ran.append(1)])
    monkeypatch.setattr(C, "RELEASE_LAST", [lambda: ran.append(2)])
    freed = _Freed()
    C.cache.put(KIND.key("release", "f"), _Toy(freed, "r"))
    C.release_all()
    gc.collect()
    # the pools' trim (RELEASE_LAST) runs after every other hook
    assert ran == [1, 2] and KIND.key("release", "f") not in C.cache and freed.calls == ["r"]


# -- the one operand path -------------------------------------------------------------------
HOST_MSG = r"gemm: a is a host numpy array; copy it to the GPU first with cudalibs.to_device\(\)"


def test_operand_refuses_host_numpy_with_one_message():
    with pytest.raises(TypeError, match=HOST_MSG):
        operand(np.ones(3, np.float32), "a", "gemm")
    with pytest.raises(TypeError, match=HOST_MSG):
        operands("gemm", (np.ones(3, np.float32), "a"))


def test_operand_refuses_none_and_non_arrays():
    with pytest.raises(TypeError, match="conv_forward: x is required"):
        operand(None, "x", "conv_forward")
    with pytest.raises(TypeError, match="softmax: x is a list, not a device array"):
        operand([1.0, 2.0], "x", "softmax")


def test_operand_refuses_host_dlpack_producers():
    class HostTensor:
        def __dlpack__(self, stream=None, max_version=None):
            raise AssertionError("must not be consumed")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match=r"all_reduce: send is a HostTensor in host memory "
                                        r"\(DLPack device \(1, 0\)\); copy it to the GPU"):
        operand(HostTensor(), "send", "all_reduce")


@pytest.mark.parametrize("cai, missing", [
    ({"typestr": "<f4", "data": (0, False), "version": 3}, "'shape'"),
    ({"shape": (2,), "data": (0, False), "version": 3}, "'typestr'"),
    ({"shape": (2,), "typestr": "<f4", "version": 3}, "'data'"),
])
def test_asarray_of_an_incomplete_cuda_array_interface_is_a_type_error(cai, missing):
    import cudalibs as cl

    class Partial:
        __cuda_array_interface__ = cai

    with pytest.raises(TypeError, match=f"lacks {missing}"):
        cl.asarray(Partial())
    with pytest.raises(TypeError, match=f"matmul: b: __cuda_array_interface__ lacks {missing}"):
        operand(Partial(), "b", "matmul")


def test_asarray_checks_host_numpy_before_dlpack():
    import cudalibs as cl

    with pytest.raises(TypeError, match="host numpy array; copy it to the GPU first"):
        cl.asarray(np.zeros(2))


class _Float8Tensor:
    """A producer whose __cuda_array_interface__ cannot describe its dtype (as torch's float8
    tensors raise KeyError) and which speaks no DLPack."""

    dtype = "torch.float8_e4m3fn"

    @property
    def __cuda_array_interface__(self):
        raise KeyError("float8_e4m3fn")


def test_a_producer_failing_to_describe_its_dtype_is_a_type_error_naming_it():
    import cudalibs as cl

    with pytest.raises(TypeError, match=r"_Float8Tensor of dtype torch.float8_e4m3fn cannot be "
                                        r"described through __cuda_array_interface__ "
                                        r"\(KeyError: 'float8_e4m3fn'\) and has no __dlpack__"):
        cl.asarray(_Float8Tensor())
    with pytest.raises(TypeError, match="matmul: b: a _Float8Tensor of dtype "
                                        "torch.float8_e4m3fn"):
        operand(_Float8Tensor(), "b", "matmul")


def test_a_failed_description_with_host_dlpack_gets_the_host_message():
    import cudalibs as cl

    class HostFloat8(_Float8Tensor):
        def __dlpack__(self, stream=None, max_version=None):
            raise AssertionError("must not be consumed")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match=r"HostFloat8 in host memory \(DLPack device \(1, 0\)\)"):
        cl.asarray(HostFloat8())


def test_untyped_two_byte_elements_go_through_dlpack():
    """bfloat16 as PyTorch describes it through __cuda_array_interface__ ("<V2", raw bytes)
    is taken through DLPack, which names the dtype; what DLPack refuses is a TypeError."""
    import cudalibs as cl

    class Bfloat16Tensor:
        dtype = "torch.bfloat16"
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<V2", "data": (1 << 20, False),
                                    "version": 3}

        def __dlpack_device__(self):
            return (2, 0)           # kDLCUDA

        def __dlpack__(self, stream=None, max_version=None, **kw):
            raise BufferError("not exported")

    with pytest.raises(TypeError, match="Bfloat16Tensor of dtype torch.bfloat16 cannot be "
                                        "exported through DLPack"):
        cl.asarray(Bfloat16Tensor())
