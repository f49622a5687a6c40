"""Capture blocks and NCCL groups interrupted at every step, against recording stand-ins for
the driver and NCCL: the capture is ended exactly once, the process-wide gate that holds frees
back is released (and the held frees run), the group start is paired with one end; and the
gate's counter stays exact when many threads open and close blocks at once."""

from __future__ import annotations

import ctypes
import importlib
import sys
import threading
import time

import pytest

from cudalibs import _ffi
from cudalibs.driver import _capture, _lib as drv_lib, graph as graph_mod, launch as launch_mod
from cudalibs.driver.device import Device
from cudalibs.driver.stream import Stream
from cudalibs.errors import CudaError
from cudalibs.nccl import _lib as nccl_lib

# The module, not the class of the same name that cudalibs.nccl exports.
group_mod = importlib.import_module("cudalibs.nccl.group")

STREAM = 0x5EED
NONE, ACTIVE, INVALIDATED = 0, 1, 2


def _address(ptr) -> int:
    return ctypes.cast(ptr, ctypes.c_void_p).value or 0


class FakeDriver:
    """The few driver calls a capture block makes, with the stream's capture state kept as the
    driver keeps it.  ``interrupt[name] = "before"`` raises KeyboardInterrupt before the call
    does anything; ``"after"`` once it has done its work (an interrupt delivered as a C call
    returns); ``hook`` runs at that moment (a finalizer running there)."""

    def __init__(self):
        self.state = {}              # stream handle -> capture status
        self.calls = []
        self.made = []               # graph handles returned by a successful end
        self.destroyed = []
        self.ends = 0                # captures actually ended
        self.interrupt = {}
        self.hook = None
        self.begin_status = 0
        self._next = 0x6000

    def _point(self, name, when):
        if self.interrupt.get(name) == when:
            del self.interrupt[name]         # one interruption, as one Ctrl-C
            if self.hook is not None:
                self.hook()
            raise KeyboardInterrupt(f"{name} ({when})")

    def cuCtxSetCurrent(self, ctx):
        return 0

    def cuStreamIsCapturing(self, h, status):
        status._obj.value = self.state.get(_address(h), NONE)
        return 0

    def cuStreamBeginCapture_v2(self, h, mode):
        self.calls.append("begin")
        self._point("cuStreamBeginCapture_v2", "before")
        if self.begin_status:
            return self.begin_status
        if self.state.get(_address(h), NONE) != NONE:
            return 401          # CUDA_ERROR_ILLEGAL_STATE: already capturing
        self.state[_address(h)] = ACTIVE
        self._point("cuStreamBeginCapture_v2", "after")
        return 0

    def cuStreamEndCapture(self, h, graph):
        self.calls.append("end")
        self._point("cuStreamEndCapture", "before")
        status = self.state.pop(_address(h), NONE)
        if status == NONE:
            return 401
        self.ends += 1
        if status == INVALIDATED:
            return 901
        self._next += 0x10
        ctypes.c_void_p.from_buffer(graph._obj).value = self._next
        self.made.append(self._next)
        self._point("cuStreamEndCapture", "after")
        return 0

    def cuGraphDestroy(self, g):
        self.destroyed.append(_address(g))
        return 0


class _Thing(_ffi.Resource):
    """A resource whose free is recorded: a free made while the gate is up must wait."""

    __slots__ = ()

    def __init__(self, freed, value):
        self._own(freed.append, value)


@pytest.fixture()
def drv(monkeypatch):
    fake = FakeDriver()
    monkeypatch.setattr(drv_lib, "get", lambda: fake)
    assert _ffi.CAPTURE_OPEN[0] == 0 and not _ffi._deferred
    yield fake
    # Whatever the test did, it must not leave the gate up for the rest of the suite.
    while _ffi.CAPTURE_OPEN[0]:
        _ffi.end_capture_block()


def _stream():
    dev = object.__new__(Device)
    dev._ordinal = 0
    dev._ctx = None
    return Stream._wrap(STREAM, dev, None)


def _assert_clean(drv, freed, *, began: bool):
    """What every interrupted block must leave: the stream not capturing, the capture ended
    once if it began, every graph made destroyed once, the gate down, the held frees run."""
    assert drv.state.get(STREAM, NONE) == NONE
    assert drv.ends == (1 if began else 0)
    assert sorted(drv.destroyed) == sorted(drv.made)          # each made graph, once
    assert _ffi.CAPTURE_OPEN[0] == 0 and not _ffi.thread_capturing()
    assert not _ffi._blocks and not _ffi._deferred
    assert freed == ["held"]
    assert launch_mod._capture_sinks == []


ENTER_POINTS = [
    # (what to interrupt, when, whether the capture began)
    ("cuStreamBeginCapture_v2", "before", False),
    ("cuStreamBeginCapture_v2", "after", True),
    ("gate", "before", False),
    ("gate", "after", False),
    ("sink", "before", False),
    ("sink", "after", False),
]


def _interrupt_wrapper(monkeypatch, owner, name, when, hook):
    real = getattr(owner, name)
    armed = [True]                        # one interruption, as one Ctrl-C

    def wrapped(*args):
        if not armed[0]:
            return real(*args)
        armed[0] = False
        if when == "before":
            hook()
            raise KeyboardInterrupt(f"{name} ({when})")
        out = real(*args)
        hook()
        raise KeyboardInterrupt(f"{name} ({when})")
        return out

    monkeypatch.setattr(owner, name, wrapped)


@pytest.mark.parametrize("point,when,began", ENTER_POINTS,
                         ids=[f"{p}-{w}" for p, w, _ in ENTER_POINTS])
def test_interrupted_enter_leaves_nothing_open(drv, monkeypatch, point, when, began):
    freed = []
    thing = _Thing(freed, "held")
    hook = thing.close            # a finalizer's free, arriving at the interrupted step
    if point == "cuStreamBeginCapture_v2":
        drv.interrupt[point] = when
        drv.hook = hook
    elif point == "gate":
        _interrupt_wrapper(monkeypatch, _capture, "begin", when, hook)
    else:
        _interrupt_wrapper(monkeypatch, launch_mod, "add_capture_sink", when, hook)
    cap = graph_mod.capture(_stream())
    with pytest.raises(KeyboardInterrupt):
        with cap:
            pytest.fail("the block must not run")
    _assert_clean(drv, freed, began=began)
    assert drv.calls.count("end") == (1 if began else 0)
    assert cap._graph.closed and not cap._graph._capturing
    with pytest.raises(Exception, match="already used"):
        cap.__enter__()


EXIT_POINTS = [
    ("cuStreamEndCapture", "before"),
    ("cuStreamEndCapture", "after"),
    ("sink", "before"),
    ("gate", "before"),
    ("gate", "after"),
    ("adopt", "before"),
]


@pytest.mark.parametrize("point,when", EXIT_POINTS, ids=[f"{p}-{w}" for p, w in EXIT_POINTS])
@pytest.mark.parametrize("block_raises", [False, True], ids=["ok-block", "failing-block"])
def test_interrupted_exit_ends_the_capture_once(drv, monkeypatch, point, when, block_raises):
    freed = []
    thing = _Thing(freed, "held")
    if point == "cuStreamEndCapture":
        drv.interrupt[point] = when
    elif point == "sink":
        _interrupt_wrapper(monkeypatch, launch_mod, "remove_capture_sink", when, lambda: None)
    elif point == "gate":
        _interrupt_wrapper(monkeypatch, _capture, "end", when, lambda: None)
    else:
        _interrupt_wrapper(monkeypatch, graph_mod.Graph, "_adopt", when, lambda: None)
    # A failing block never hands its graph over: there its own error comes out.
    expected = RuntimeError if point == "adopt" and block_raises else KeyboardInterrupt
    with pytest.raises(expected):
        with graph_mod.capture(_stream()) as g:
            assert drv.state[STREAM] == ACTIVE and _ffi.CAPTURE_OPEN[0] == 1
            thing.close()                      # held back: the capture is open
            assert freed == []
            if block_raises:
                raise RuntimeError("the block failed")
    _assert_clean(drv, freed, began=True)
    assert g.closed and not g._capturing


def test_interrupt_after_the_graph_is_handed_over_keeps_it(drv, monkeypatch):
    """Once the Graph owns the handle, it is the Graph's to destroy (once), never the
    block's."""
    real = graph_mod.Graph._adopt

    def adopt_then_interrupt(self, h):
        real(self, h)
        raise KeyboardInterrupt

    monkeypatch.setattr(graph_mod.Graph, "_adopt", adopt_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        with graph_mod.capture(_stream()) as g:
            pass
    assert drv.ends == 1 and drv.destroyed == [] and _ffi.CAPTURE_OPEN[0] == 0
    assert not g.closed
    g.close()
    g.close()
    assert drv.destroyed == drv.made and len(drv.made) == 1


def test_interrupt_in_a_held_free_runs_the_others(drv):
    """A KeyboardInterrupt raised by one held free does not strand the rest: they run, then
    it propagates."""
    freed = []

    def interrupting(value):
        raise KeyboardInterrupt

    bad = _Thing([], "bad")
    bad._own(interrupting, "bad")
    others = [_Thing(freed, i) for i in range(3)]
    with pytest.raises(KeyboardInterrupt):
        with graph_mod.capture(_stream()) as g:
            others[0].close()
            bad.close()
            others[1].close()
            others[2].close()
    assert sorted(freed) == [0, 1, 2]
    assert _ffi.CAPTURE_OPEN[0] == 0 and not _ffi._deferred and drv.ends == 1
    # The capture itself succeeded before the frees ran; the interrupt discards its graph.
    assert drv.destroyed == drv.made and g.closed


def test_failed_begin_and_foreign_capture(drv):
    freed = []
    drv.begin_status = 999
    with pytest.raises(CudaError):
        with graph_mod.capture(_stream()):
            pass
    assert drv.ends == 0 and _ffi.CAPTURE_OPEN[0] == 0 and "end" not in drv.calls
    # A stream someone else is capturing: the refused begin must not end their capture.
    drv.begin_status = 0
    drv.state[STREAM] = ACTIVE
    with pytest.raises(CudaError):
        with graph_mod.capture(_stream()):
            pass
    assert drv.state[STREAM] == ACTIVE and drv.ends == 0 and _ffi.CAPTURE_OPEN[0] == 0
    del drv.state[STREAM]
    _ffi.Resource.close(_Thing(freed, "held"))
    assert freed == ["held"]


def test_a_normal_capture_and_an_invalidated_one(drv):
    with graph_mod.capture(_stream()) as g:
        assert graph_mod.is_capturing(_stream()) and _ffi.thread_capturing()
    assert not g._capturing and not g.closed and drv.destroyed == []
    g.close()
    assert drv.destroyed == drv.made
    with pytest.raises(CudaError):
        with graph_mod.capture(_stream()):
            drv.state[STREAM] = INVALIDATED
    assert drv.state.get(STREAM, NONE) == NONE and _ffi.CAPTURE_OPEN[0] == 0


def test_sinks_are_removed_by_identity():
    a, b = set(), set()
    launch_mod.add_capture_sink(a)
    launch_mod.add_capture_sink(b)
    try:
        launch_mod.remove_capture_sink(b)          # equal to a, but not a
        assert len(launch_mod._capture_sinks) == 1 and launch_mod._capture_sinks[0] is a
        launch_mod.remove_capture_sink(b)          # not collecting: nothing happens
    finally:
        launch_mod.remove_capture_sink(a)
    assert launch_mod._capture_sinks == []


# -- the counter ------------------------------------------------------------------------------
def test_named_blocks_count_once():
    block = object()
    ran = []
    _ffi.begin_capture_block(block)
    _ffi.begin_capture_block(block)
    assert _ffi.CAPTURE_OPEN[0] == 1 and _ffi.holds_capture_block(block)
    assert _ffi.defer(ran.append, (1,))
    _ffi.end_capture_block(block)
    _ffi.end_capture_block(block)
    _ffi.end_capture_block(object())                # never opened: nothing happens
    assert _ffi.CAPTURE_OPEN[0] == 0 and ran == [1] and not _ffi.holds_capture_block(block)
    _ffi.end_capture_block()                        # none open: does not go below zero
    assert _ffi.CAPTURE_OPEN[0] == 0


class _YieldingCell(list):
    """A counter cell whose every read lets the other threads run: a read-modify-write of it
    made outside the lock then loses updates, as it would on a free-threaded interpreter."""

    def __getitem__(self, i):
        time.sleep(0)
        return list.__getitem__(self, i)


def test_counter_is_exact_under_threads(monkeypatch):
    cell = _YieldingCell([0])
    monkeypatch.setattr(_ffi, "CAPTURE_OPEN", cell)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)             # switch threads as often as possible
    errors = []
    seen = []
    n_threads, rounds = 8, 300

    def work(i):
        try:
            for j in range(rounds):
                block = (i, j) if j % 2 else None
                _ffi.begin_capture_block(block)
                seen.append(list.__getitem__(cell, 0))
                _ffi.end_capture_block(block)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors
    assert list.__getitem__(cell, 0) == 0 and not _ffi._blocks
    assert 1 <= min(seen) and max(seen) <= n_threads


def test_counter_update_is_not_split_by_another_thread(monkeypatch):
    """Thread A reads the counter and stalls before writing it back; thread B opens a block
    meanwhile.  Under the lock B waits for A, and both blocks are counted."""
    a_read, b_done = threading.Event(), threading.Event()
    stalled = []

    class StallingCell(list):
        def __getitem__(self, i):
            value = list.__getitem__(self, i)
            if threading.current_thread().name == "A" and not stalled:
                stalled.append(True)
                a_read.set()
                b_done.wait(0.5)          # under the lock B cannot finish: this runs out
            return value

    cell = StallingCell([0])
    monkeypatch.setattr(_ffi, "CAPTURE_OPEN", cell)

    def b():
        a_read.wait(5)
        _ffi.begin_capture_block()
        b_done.set()

    ta = threading.Thread(target=_ffi.begin_capture_block, name="A")
    tb = threading.Thread(target=b, name="B")
    tb.start()
    ta.start()
    ta.join()
    tb.join()
    assert stalled and list.__getitem__(cell, 0) == 2
    _ffi.end_capture_block()
    _ffi.end_capture_block()
    assert list.__getitem__(cell, 0) == 0


# -- NCCL groups ------------------------------------------------------------------------------
class FakeNcclGroups:
    """ncclGroupStart / ncclGroupEnd with NCCL's per-thread depth; ``interrupt_after`` names a
    call that raises KeyboardInterrupt once it has done its work."""

    def __init__(self):
        self.depth = 0
        self.calls = []
        self.interrupt_after = set()

    def ncclGroupStart(self):
        self.calls.append("start")
        self.depth += 1
        if "ncclGroupStart" in self.interrupt_after:
            raise KeyboardInterrupt
        return 0

    def ncclGroupEnd(self):
        self.calls.append("end")
        if self.depth == 0:
            return 5                     # ncclInvalidUsage: not in a group
        self.depth -= 1
        if "ncclGroupEnd" in self.interrupt_after:
            self.interrupt_after.discard("ncclGroupEnd")
            raise KeyboardInterrupt
        return 0


@pytest.fixture()
def nccl_fake(monkeypatch):
    fake = FakeNcclGroups()
    monkeypatch.setattr(nccl_lib, "get", lambda: fake)
    yield fake
    assert group_mod.state().depth == 0


def test_group_start_interrupted_is_ended(nccl_fake):
    nccl_fake.interrupt_after.add("ncclGroupStart")
    with pytest.raises(KeyboardInterrupt):
        with group_mod.group():
            pytest.fail("the block must not run")
    assert nccl_fake.depth == 0 and group_mod.state().depth == 0
    assert nccl_fake.calls == ["start", "end"]


def test_group_end_interrupted_is_not_repeated(nccl_fake):
    ran = []
    nccl_fake.interrupt_after.add("ncclGroupEnd")
    with pytest.raises(KeyboardInterrupt):
        with group_mod.group():
            group_mod.state().after.append(lambda: ran.append(1))
    assert nccl_fake.depth == 0 and group_mod.state().depth == 0
    assert nccl_fake.calls == ["start", "end"]
    g = group_mod.state()
    assert g.after == [] and g.comms == {} and g.created == []
    # The next group of this thread is a fresh one: the stale work is not run as its own.
    with group_mod.group():
        pass
    assert ran == [] and nccl_fake.depth == 0


def test_group_end_reached_even_if_interrupted_before_it(nccl_fake, monkeypatch):
    calls = {"n": 0}

    def get():
        calls["n"] += 1
        if calls["n"] == 2:       # the exit's lookup of the library
            raise KeyboardInterrupt
        return nccl_fake

    monkeypatch.setattr(nccl_lib, "get", get)
    with pytest.raises(KeyboardInterrupt):
        with group_mod.group():
            pass
    assert nccl_fake.depth == 0 and group_mod.state().depth == 0
    assert nccl_fake.calls == ["start", "end"]


def test_nested_group_interrupted_inside_keeps_the_outer(nccl_fake):
    with pytest.raises(KeyboardInterrupt):
        with group_mod.group():
            nccl_fake.interrupt_after.add("ncclGroupEnd")
            with group_mod.group():
                pass
    # The inner end was interrupted after NCCL ended it; the outer exit ended the outer one.
    assert nccl_fake.calls == ["start", "start", "end", "end"]
    assert nccl_fake.depth == 0 and group_mod.state().depth == 0
