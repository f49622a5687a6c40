"""A real capture interrupted (KeyboardInterrupt) as the driver's begin or end call returns:
the stream is left not capturing, the process-wide gate that holds frees back is down (a later
free runs at once), and the stream captures again."""

from __future__ import annotations

import ctypes

import pytest

import cudalibs as cl
from cudalibs import _ffi
from cudalibs.driver import _lib as drv_lib

CU_STREAM_CAPTURE_STATUS_NONE = 0


class _InterruptAfter:
    """The bound driver, except that ``name`` raises KeyboardInterrupt once, after the real
    call has returned: an interrupt delivered as the C call comes back."""

    def __init__(self, real, name):
        self._real, self._name, self.fired = real, name, False

    def __getattr__(self, attr):
        fn = getattr(self._real, attr)
        if attr != self._name:
            return fn

        def call(*args):
            st = fn(*args)
            if not self.fired:
                self.fired = True
                raise KeyboardInterrupt(f"after {attr}")
            return st

        return call


def _capture_status(stream) -> int:
    status = ctypes.c_int()
    assert drv_lib.get().cuStreamIsCapturing(stream.raw, ctypes.byref(status)) == 0
    return status.value


def _assert_left_clean(stream, device):
    assert _capture_status(stream) == CU_STREAM_CAPTURE_STATUS_NONE
    assert _ffi.CAPTURE_OPEN[0] == 0 and not _ffi.capture_open()
    assert not _ffi._deferred
    # A later free is not held back: the event's destroy runs at its close.
    ev = cl.Event(device)
    fin = ev._finalizer
    ev.close()
    assert not fin.alive and not _ffi._deferred
    # The stream works and captures again.
    stream.sync()
    with cl.graph.capture(stream) as g:
        assert cl.graph.is_capturing(stream)
    assert g.num_nodes == 0 and not cl.graph.is_capturing(stream)
    g.close()


@pytest.mark.parametrize("name", ["cuStreamBeginCapture_v2", "cuStreamEndCapture"])
def test_interrupted_capture_is_ended(device, monkeypatch, name):
    s = cl.Stream(device)
    held = cl.Event(device)
    held_fin = held._finalizer
    proxy = _InterruptAfter(drv_lib.get(), name)
    monkeypatch.setattr(drv_lib, "get", lambda: proxy)
    with pytest.raises(KeyboardInterrupt):
        with cl.graph.capture(s) as g:
            held.close()                       # held back while the capture is open
            assert held_fin.alive is False and _ffi._deferred
    monkeypatch.undo()
    assert proxy.fired
    if name == "cuStreamEndCapture":
        assert g.closed                        # the graph made as the interrupt came is gone
    _assert_left_clean(s, device)
    s.close()
