"""The lifetime base (:class:`cudalibs._ffi.Resource`) with stand-in free functions, and the
driver objects' lifetime rules that need no GPU."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import pytest

from cudalibs import _ffi
from cudalibs.driver import stream as stream_mod
from cudalibs.runtime import handles as _handles
from cudalibs.driver.graph import Graph, GraphExec
from cudalibs.driver.memory import MemoryPool
from cudalibs.driver.module import Module
from cudalibs.driver.stream import Event, Stream
from cudalibs.errors import ClosedError


class _Thing(_ffi.Resource):
    __slots__ = ("value",)

    def __init__(self, freed, ctx=None, value=1):
        self.value = value
        self._own(freed.append, ("freed", value), ctx=ctx)


@pytest.fixture
def contexts():
    made_current = []
    saved = _ffi._set_context[0]
    _ffi._set_context[0] = made_current.append
    yield made_current
    _ffi._set_context[0] = saved


def test_close_twice_frees_once(contexts):
    freed = []
    t = _Thing(freed, ctx="ctx0")
    assert not t.closed
    t.close()
    t.close()
    assert freed == [("freed", 1)] and t.closed
    assert contexts == ["ctx0"]   # the owning context was made current for the free


def test_use_after_close_raises(contexts):
    t = _Thing([])
    t.close()
    with pytest.raises(ClosedError, match="_Thing is closed"):
        t._live()
    with pytest.raises(ClosedError):
        with t:
            pass


def test_with_closes(contexts):
    freed = []
    with _Thing(freed) as t:
        assert not t.closed
    assert t.closed and freed == [("freed", 1)]


def test_collected_object_is_freed_without_holding_it(contexts):
    freed = []
    t = _Thing(freed, value=7)
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None and freed == [("freed", 7)]
    assert gc.garbage == []


def test_release_during_capture_waits_for_its_end(contexts):
    freed = []
    a, b = _Thing(freed, value=1), _Thing(freed, value=2)
    _ffi.begin_capture_block()
    try:
        a.close()
        assert a.closed          # unusable at once ...
        del b
        gc.collect()
        assert freed == []       # ... but nothing is released inside the block
    finally:
        _ffi.end_capture_block()
    assert sorted(freed) == [("freed", 1), ("freed", 2)]


def test_borrowed_frees_nothing():
    class _Wrapped(_ffi.Resource):
        __slots__ = ()

    w = _Wrapped()
    assert w.closed              # not built yet
    w._borrow()
    assert not w.closed
    w.close()
    assert w.closed
    with pytest.raises(ClosedError):
        w._live()


def test_finalizers_skip_interpreter_exit():
    code = ("from cudalibs import _ffi\n"
            "class T(_ffi.Resource):\n"
            "    __slots__ = ()\n"
            "def boom(*a):\n"
            "    raise RuntimeError('freed at exit')\n"
            "keep = []\n"
            "for _ in range(3):\n"
            "    t = T(); t._own(boom, 1); keep.append(t)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Exception ignored" not in out.stderr and "freed at exit" not in out.stderr


@pytest.mark.parametrize("cls", [Stream, Event, Graph, GraphExec, Module, MemoryPool])
def test_driver_handle_owners_use_the_one_base(cls):
    assert issubclass(cls, _ffi.Resource)
    # The base holds the finalizer and the weak reference slot; no subclass repeats them.
    for klass in cls.__mro__[:-2]:
        slots = klass.__dict__.get("__slots__", ())
        if klass is not _ffi.Resource:
            assert "_finalizer" not in slots and "__weakref__" not in slots, klass


def test_borrowed_stream_close():
    s = Stream._wrap(0x1234, None, None)
    assert not s.closed and not s.owned
    assert s.handle == 0x1234
    s.close()
    s.close()
    assert s.closed
    with pytest.raises(ClosedError, match="Stream is closed"):
        s.handle
    with pytest.raises(ClosedError):
        s._check()


def test_stream_destroy_runs_hooks_then_destroys(monkeypatch):
    calls = []
    monkeypatch.setattr(stream_mod, "DESTROY_HOOKS",
                        [lambda raw: calls.append(("hook", raw)),
                         lambda raw: 1 / 0,      # a failing hook does not stop the destroy
                         lambda raw: calls.append(("hook2", raw))])
    alive = [True]
    stream_mod._destroy_stream(lambda h: calls.append(("destroy", h)), "H", 0xABC, alive)
    assert alive == [False]
    assert calls == [("hook", 0xABC), ("hook2", 0xABC), ("destroy", "H")]


def test_handle_cache_forgets_a_destroyed_stream():
    binds = []
    cache = _handles.HandleCache("fake", lambda d: object(), lambda raw: None,
                                 lambda raw, s: binds.append(s))
    h1 = _handles.Handle("raw1", None, cache._set_stream)
    h2 = _handles.Handle("raw2", None, cache._set_stream)
    cache._all.extend([h1, h2])
    assert h1.bind(0x10) and h2.bind(0x20)
    assert not h1.bind(0x10)                 # bound: no library call
    assert cache.forget_stream(0x10) == 1
    assert h1.stream is None and h2.stream == 0x20
    assert h1.bind(0x10)                     # the next call rebinds
    assert binds == [0x10, 0x20, 0x10]


def test_stream_destroy_hook_reaches_every_cache():
    cache = _handles.HandleCache("fake", lambda d: object(), lambda raw: None)
    h = _handles.Handle("raw", None, None)
    cache._all.append(h)
    h.bind(0x77)
    ws = _handles.Workspaces()          # empty: nothing to free, nothing synchronised
    assert _handles._stream_destroyed in stream_mod.DESTROY_HOOKS
    _handles._stream_destroyed(0x77)
    assert h.stream is None and ws.total_bytes() == 0
    # The registries are weak: a dropped cache is not kept alive by them.
    ref = weakref.ref(cache)
    del cache, h
    gc.collect()
    assert ref() is None


def test_workspace_release_hooks_are_registered():
    from cudalibs.driver import memory
    from cudalibs.runtime import cache

    assert _handles._release_workspaces in cache.RELEASE_HOOKS
    # The pools' trim runs after every library's release, so what those free is trimmed too.
    assert memory.trim_pools in cache.RELEASE_LAST
    assert memory.trim_pools not in cache.RELEASE_HOOKS
    assert _handles.Workspaces().release_all() == 0


def test_capture_refusal_is_per_thread():
    """An operation that cannot be captured is refused in the capturing thread only, by
    name, and only while its block is open."""
    import threading

    from cudalibs import _ffi
    from cudalibs.errors import CaptureError

    _ffi.refuse_in_capture("anything")          # no capture: nothing happens
    seen = []
    _ffi.begin_capture_block()
    try:
        with pytest.raises(CaptureError, match="Stream.synchronize.*run the work once"):
            _ffi.refuse_in_capture("Stream.synchronize()", "a graph cannot wait")
        assert _ffi.thread_capturing()

        def other():
            _ffi.refuse_in_capture("Stream.synchronize()")
            seen.append(_ffi.thread_capturing())

        t = threading.Thread(target=other)
        t.start()
        t.join()
    finally:
        _ffi.end_capture_block()
    assert seen == [False]
    assert not _ffi.thread_capturing()
    _ffi.refuse_in_capture("anything")


class _FakeDevice:
    """What HandleCache needs of a device: an ordinal, and ``with device:`` to make its
    context current (counted, since handles must be created inside it)."""

    def __init__(self, ordinal):
        self.ordinal = ordinal
        self.entered = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc):
        return False


def _wait_until(cond, seconds=5.0):
    # A thread's local storage is dropped as the thread finishes, a moment after join()
    # may already have returned: wait a little for that rather than race it.
    import time

    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        gc.collect()
        time.sleep(0.01)
    return cond()


def _run_in_thread(fn):
    import threading

    t = threading.Thread(target=fn)
    t.start()
    t.join()


def test_handle_cache_gives_an_ended_threads_handle_to_the_next_thread():
    made, destroyed = [], []
    cache = _handles.HandleCache("fake", lambda d: made.append(d.ordinal) or f"raw{len(made)}",
                                 destroyed.append)
    dev = _FakeDevice(0)
    got = []
    _run_in_thread(lambda: got.append(cache.get(dev)))
    assert made == [0] and dev.entered == 1       # created with the device's context current
    assert _wait_until(lambda: cache.free == 1)   # the thread ended: its handle is free
    _run_in_thread(lambda: got.append(cache.get(dev)))
    assert got[1] is got[0] and made == [0]       # taken over, not created again
    assert len(cache) == 1 and destroyed == []    # nothing is destroyed before exit
    assert _wait_until(lambda: cache.free == 1)


def test_handle_cache_makes_one_handle_per_live_thread_and_device():
    import threading

    made = []
    cache = _handles.HandleCache("fake", lambda d: made.append(d.ordinal) or object(),
                                 lambda raw: None)
    dev0, dev1 = _FakeDevice(0), _FakeDevice(1)
    both_have = threading.Barrier(2)
    got = {}

    def work(name):
        got[name] = (cache.get(dev0), cache.get(dev0), cache.get(dev1))
        both_have.wait()            # both threads alive at once: no handle is free to share

    threads = [threading.Thread(target=work, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (a0, a0_again, a1), (b0, _, b1) = got["a"], got["b"]
    assert a0 is a0_again                          # one handle per thread and device
    assert len({id(a0), id(b0), id(a1), id(b1)}) == 4
    assert sorted(made) == [0, 0, 1, 1] and len(cache) == 4
    assert _wait_until(lambda: cache.free == 4)
    # The next thread takes a free handle of each device it uses, and only of that device.
    _run_in_thread(lambda: got.setdefault("c", cache.get(dev1)))
    assert got["c"] in (a1, b1) and sorted(made) == [0, 0, 1, 1]
    assert _wait_until(lambda: cache.free == 4)
    assert "4 handle(s)" in repr(cache)
