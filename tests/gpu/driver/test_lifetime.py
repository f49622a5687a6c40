"""Lifetime of every driver object that owns a handle (Stream, Event, Graph, GraphExec,
Module, MemoryPool), all on the one base: close twice, use after close, ``with``, collection,
a release inside a capture block, interpreter exit; and per-stream state released with its
stream."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import pytest

import cudalibs as cl
from cudalibs import _ffi
from cudalibs.driver import nvrtc
from cudalibs.runtime import handles
from cudalibs.driver.module import Module

from ._sources import SAXPY


def _graph(device):
    s = cl.Stream(device)
    buf = cl.alloc(256, device)
    with cl.graph.capture(s) as g:
        buf.memset(1, s)
    return g, (s, buf)


def _make(kind, device):
    """A live object of ``kind`` and whatever must outlive it."""
    if kind == "Stream":
        return cl.Stream(device), ()
    if kind == "Event":
        return cl.Event(device), ()
    if kind == "Graph":
        return _graph(device)
    if kind == "GraphExec":
        g, keep = _graph(device)
        return g.instantiate(), (g, keep)
    if kind == "Module":
        # A module of its own (compile() may hand out a cached one).
        out = nvrtc.build(SAXPY, arch=device.compute_capability, target="ptx",
                          driver_cuda=cl.driver_version())
        return Module.from_ptx(out.ptx, device=device), ()
    if kind == "MemoryPool":
        return cl.MemoryPool(device), ()
    raise AssertionError(kind)


def _use(kind, obj):
    """One operation that needs the object's handle."""
    if kind == "Stream":
        obj.sync()
    elif kind == "Event":
        obj.record()
    elif kind == "Graph":
        obj.instantiate()
    elif kind == "GraphExec":
        obj.replay()
    elif kind == "Module":
        obj["saxpy"]
    elif kind == "MemoryPool":
        obj.allocate(16)


KINDS = ["Stream", "Event", "Graph", "GraphExec", "Module", "MemoryPool"]


@pytest.mark.parametrize("kind", KINDS)
def test_close_twice_and_use_after_close(device, kind):
    obj, keep = _make(kind, device)
    assert isinstance(obj, _ffi.Resource) and not obj.closed
    _use(kind, obj)
    cl.Device(0).synchronize()
    obj.close()
    obj.close()
    assert obj.closed
    with pytest.raises(cl.ClosedError):
        _use(kind, obj)
    assert "closed" in repr(obj)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "Stream"])
def test_with_closes(device, kind):
    obj, keep = _make(kind, device)
    with obj as same:
        assert same is obj and not obj.closed
    assert obj.closed


def test_stream_with_makes_current_and_close_closes(device):
    # A stream's ``with`` block makes it the thread's current stream (it does not close it).
    s = cl.Stream(device)
    with s:
        assert cl.current_stream() is s
    assert not s.closed
    s.close()
    assert s.closed
    with pytest.raises(cl.ClosedError):
        with s:
            pass


@pytest.mark.parametrize("kind", KINDS)
def test_collected_object_frees_its_handle(device, kind):
    obj, keep = _make(kind, device)
    fin = obj._finalizer
    ref = weakref.ref(obj)
    del obj
    gc.collect()
    assert ref() is None
    assert not fin.alive           # the release ran
    assert gc.garbage == []


@pytest.mark.parametrize("kind", KINDS)
def test_release_inside_capture_waits_for_its_end(device, kind):
    obj, keep = _make(kind, device)
    fin = obj._finalizer
    s = cl.Stream(device)
    before = len(_ffi._deferred)
    with cl.graph.capture(s):
        obj.close()
        assert obj.closed                          # unusable at once
        assert len(_ffi._deferred) > before        # the destroy waits for the block's end
        assert not fin.alive
    assert not fin.alive and len(_ffi._deferred) == 0


def test_collected_inside_capture_waits_too(device):
    s = cl.Stream(device)
    ev = cl.Event(device)
    ref = weakref.ref(ev)
    with cl.graph.capture(s):
        del ev
        gc.collect()
        assert ref() is None and _ffi._deferred
    assert not _ffi._deferred


def test_exit_with_live_objects_is_silent():
    code = (
        "import cudalibs as cl\n"
        f"SAXPY = {SAXPY!r}\n"
        "d = cl.Device(0)\n"
        "s = cl.Stream(d); e = cl.Event(d); e.record(s)\n"
        "pool = cl.MemoryPool(d); b = pool.allocate(1024, s)\n"
        "m = cl.compile(SAXPY)\n"
        "buf = cl.alloc(256)\n"
        "with cl.graph.capture(s) as g:\n"
        "    buf.memset(0, s)\n"
        "exe = g.instantiate()\n"
        "a = cl.zeros((1000,), stream=s)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert "Exception ignored" not in out.stderr, out.stderr


def test_module_refuses_to_close_under_a_live_graph_exec(device):
    mod = cl.compile(SAXPY, device=device)
    k = mod["saxpy"]
    s = cl.Stream(device)
    x = cl.zeros((32,), device=device)
    with cl.graph.capture(s) as g:
        k.launch(1, 32, 1.0, x, x, 32, stream=s)
    exe = g.instantiate()
    with pytest.raises(cl.CudaLibsError, match="executable graph"):
        mod.close()
    assert not mod.closed
    exe.close()
    mod.close()
    assert mod.closed
    s.sync()


def test_stream_close_frees_its_cached_blocks(device):
    pool = cl.MemoryPool(device)
    s = cl.Stream(device)
    buf = pool.allocate(4096, s)
    buf.close()
    assert pool.cached_bytes > 0
    s.close()
    device.synchronize()
    assert pool.cached_bytes == 0 and pool.used_bytes == 0
    pool.close()


def test_buffer_freed_after_its_stream_closed(device):
    s = cl.Stream(device)
    a = cl.empty((1024,), device=device, stream=s)
    s.close()
    a.close()              # falls back to the legacy stream, never the destroyed handle
    device.synchronize()


# -- per-stream state goes with its stream -----------------------------------------------------
def _free_bytes(device):
    import ctypes

    from cudalibs.driver import _lib

    L = _lib.get()
    L.cuCtxSetCurrent(device.raw_context)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert L.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    return free.value


def test_short_lived_streams_leave_memory_where_it_was(device):
    ws = handles.Workspaces()
    binds = []
    cache = handles.HandleCache("fake", lambda d: object(), lambda raw: None,
                                lambda raw, s: binds.append(s))
    pool = device.memory_pool
    device.synchronize()
    pool.trim()
    used0 = pool.used_bytes
    free0 = _free_bytes(device)
    for _ in range(100):
        s = cl.Stream(device)
        buf = ws.get(device, s.handle, 8 << 20)
        buf.memset(0, s)
        h = cache.get(device)
        h.bind(s.handle)
        a = cl.empty((4096,), device=device, stream=s)   # a cached block of this stream
        a.fill(1.0, s)
        a.close()
        s.close()
        assert ws.size(device, s.raw_handle) == 0       # freed before the stream went
        assert h.stream is None                         # and unbound: the next call rebinds
    device.synchronize()
    assert ws.total_bytes() == 0
    assert pool.used_bytes <= used0
    pool.trim()
    # Allow for the driver's own bookkeeping (a few MiB); 100 leaked workspaces are 800 MiB.
    assert _free_bytes(device) >= free0 - (32 << 20)


def test_collected_stream_releases_its_workspace(device):
    ws = handles.Workspaces()
    s = cl.Stream(device)
    ws.get(device, s.handle, 1 << 20)
    assert ws.total_bytes() > 0
    del s
    gc.collect()
    assert ws.total_bytes() == 0


def test_release_all_frees_workspaces_and_cached_blocks(device):
    ws = handles.Workspaces()
    s = cl.Stream(device)
    ws.get(device, s.handle, 1 << 20)
    a = cl.empty((4096,), device=device, stream=s)
    a.close()
    assert device.memory_pool.cached_bytes > 0
    cl.release_all()
    assert ws.total_bytes() == 0
    assert device.memory_pool.cached_bytes == 0
    s.close()


def test_eviction_while_another_thread_captures(device):
    """Evicting a stream's workspace waits for the device; while another thread records a
    graph that wait is refused, so the buffer is freed once the recording ends instead."""
    import threading
    ws = handles.Workspaces()
    streams = [cl.Stream(device) for _ in range(ws.MAX)]
    for s in streams:
        ws.get(device, s.handle, 1 << 20)
    capturing, evicted = threading.Event(), threading.Event()
    errors = []

    def record():
        s = cl.Stream(device)
        buf = cl.alloc(256, device)
        try:
            with cl.graph.capture(s):
                buf.memset(1, s)
                capturing.set()
                evicted.wait(30)
        except BaseException as exc:   # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    t = threading.Thread(target=record)
    t.start()
    assert capturing.wait(30)
    extra = cl.Stream(device)
    try:
        ws.get(device, extra.handle, 1 << 20)   # one stream too many: the oldest is evicted
        assert ws.size(device, streams[0].handle) == 0
        assert ws.total_bytes() == ws.MAX * (1 << 20)
    finally:
        evicted.set()
        t.join()
    assert not errors, errors
    ws.release()
    assert ws.total_bytes() == 0 and not ws._retired
