"""CUDA graphs: capture, instantiate, replay, update; plain, prepared and replayed launches
agree; allocation inside a capture; lifetime of modules under graphs."""

import gc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import testing as T

from .._sizes import gpu_settings
from ._sources import MISC, SAXPY

GPU = gpu_settings(15)


@pytest.fixture(scope="module")
def misc(device):
    return cl.compile(MISC)


@pytest.fixture(scope="module")
def saxpy(device):
    return cl.compile(SAXPY)["saxpy"]


@GPU
@given(n=st.integers(1, 2000), reps=st.integers(1, 4), replays=st.integers(1, 3),
       seed=st.integers(0, 2**32 - 1))
def test_plain_prepared_and_replay_agree(saxpy, n, reps, replays, seed):
    # The data's seed is drawn by hypothesis, so a failing example replays (and shrinks).
    rng = np.random.default_rng(seed)
    x = T.random_array(n, np.float32, rng=rng)
    y = T.random_array(n, np.float32, rng=rng)
    grid = (n + 255) // 256
    s = cl.Stream()
    dx = cl.to_device(x, stream=s)
    plain, prepared, graphed = (cl.to_device(y, stream=s) for _ in range(3))
    launcher = saxpy.prepare(grid, 256, stream=s)
    for _ in range(reps * replays):
        saxpy.launch(grid, 256, 0.5, dx, plain, n, stream=s)
        launcher(0.5, dx, prepared, n)
    with cl.graph.capture(s) as g:
        for i in range(reps):
            if i % 2:
                launcher(0.5, dx, graphed, n)
            else:
                saxpy.launch(grid, 256, 0.5, dx, graphed, n, stream=s)
    assert g.num_nodes == reps
    exe = g.instantiate()
    for _ in range(replays):
        exe.replay(s)
    s.sync()
    a, b, c = plain.get(stream=s), prepared.get(stream=s), graphed.get(stream=s)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    exe.close()
    g.close()
    s.close()


def test_capture_records_without_running(misc):
    s = cl.Stream()
    n = 1000
    x = T.random_array(n, np.float32, rng=1)
    dx = cl.to_device(x, stream=s)
    s.sync()
    k = misc["add_scalar"]
    with cl.graph.capture(s) as g:
        assert cl.graph.is_capturing(s)
        k.launch(4, 256, dx, 1.0, n, stream=s)
        k.launch(4, 256, dx, 2.0, n, stream=s)
    assert not cl.graph.is_capturing(s)
    np.testing.assert_array_equal(dx.get(stream=s), x)  # nothing ran yet
    exe = g.instantiate(upload=True)
    exe.replay(s)
    exe.launch(s)  # alias
    T.assert_close(dx.get(stream=s), x + 6.0, np.float32)
    assert "2 nodes" in repr(g)


def test_update_with_new_arguments(misc):
    s = cl.Stream()
    n = 512
    k = misc["add_scalar"]
    xa, xb = T.random_array(n, np.float32, rng=3), T.random_array(n, np.float32, rng=4)
    a = cl.to_device(xa, stream=s)
    b = cl.to_device(xb, stream=s)
    with cl.graph.capture(s) as g1:
        k.launch(2, 256, a, 1.0, n, stream=s)
    exe = g1.instantiate()
    exe.replay(s)
    with cl.graph.capture(s) as g2:
        k.launch(2, 256, b, 5.0, n, stream=s)
    exe.update(g2)
    exe.replay(s)
    exe.replay(s)
    T.assert_close(a.get(stream=s), xa + 1.0, np.float32)
    T.assert_close(b.get(stream=s), xb + 10.0, np.float32)
    with cl.graph.capture(s) as g3:  # another topology
        k.launch(2, 256, b, 5.0, n, stream=s)
        k.launch(2, 256, b, 5.0, n, stream=s)
    with pytest.raises(cl.CudaError) as info:
        exe.update(g3)
    assert info.value.name == "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"
    assert "instantiate the new graph" in str(info.value)
    print(info.value)  # the reason the driver gave, on failure of the next line
    exe.replay(s)  # still the previous parameters
    T.assert_close(b.get(stream=s), xb + 15.0, np.float32)


def test_allocation_inside_capture(misc):
    s = cl.Stream()
    n = 300
    x = T.random_array(n, np.float32, rng=2)
    src = cl.to_device(x, stream=s)
    out = cl.empty(n, np.float32, stream=s).fill(T.poison_value(np.float32), stream=s)
    copy = misc["copy_f32"]
    add = misc["add_scalar"]
    with cl.graph.capture(s) as g:
        tmp = cl.empty(n, np.float32, stream=s)  # an allocation node
        copy.launch(2, 256, tmp, src, n, stream=s)
        add.launch(2, 256, tmp, 1.0, n, stream=s)
        copy.launch(2, 256, out, tmp, n, stream=s)
        tmp.close()  # a free node: each replay allocates and frees again
    print("nodes:", g.num_nodes)
    exe = g.instantiate()
    for _ in range(3):
        exe.replay(s)
    T.assert_close(out.get(stream=s), x + 1.0, np.float32)


def test_capture_needs_a_real_stream():
    with pytest.raises(ValueError, match="default stream"):
        cl.graph.capture(cl.default_stream())
    with pytest.raises(ValueError, match="non-default stream"):
        cl.graph.capture(None)
    with pytest.raises(ValueError, match="mode must be one of"):
        cl.graph.capture(cl.Stream(), mode="sometimes")


@pytest.mark.parametrize("mode", sorted(cl.graph.CAPTURE_MODES))
def test_capture_modes(misc, rng, mode):
    s = cl.Stream()
    x = T.random_array(64, np.float32, rng=rng)
    d = cl.to_device(x, stream=s)
    with cl.graph.capture(s, mode=mode) as g:
        misc["add_scalar"].launch(1, 64, d, 3.0, 64, stream=s)
    g.instantiate().replay(s)
    T.assert_close(d.get(stream=s), x + 3.0, np.float32)


def test_error_inside_capture_discards_it(misc, rng):
    s = cl.Stream()
    x = T.random_array(64, np.float32, rng=rng)
    d = cl.to_device(x, stream=s)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        with cl.graph.capture(s) as g:
            misc["add_scalar"].launch(1, 64, d, 3.0, 64, stream=s)
            misc["add_scalar"].launch(1, 64, d, stream=s)
    assert not cl.graph.is_capturing(s)
    with pytest.raises(cl.ClosedError):
        g.instantiate()
    misc["add_scalar"].launch(1, 64, d, 1.0, 64, stream=s)  # the stream works normally
    T.assert_close(d.get(stream=s), x + 1.0, np.float32)


def test_synchronising_inside_capture_fails_cleanly(misc, rng):
    s = cl.Stream()
    x = T.random_array(64, np.float32, rng=rng)
    d = cl.to_device(x, stream=s)
    s.sync()
    # Refused by name before the driver sees it; the capture is discarded.
    with pytest.raises(cl.CaptureError, match=r"Stream\.synchronize"):
        with cl.graph.capture(s):
            misc["add_scalar"].launch(1, 64, d, 3.0, 64, stream=s)
            s.sync()  # not allowed while capturing
    assert not cl.graph.is_capturing(s)
    # The driver's own refusal (a raw call, past the check) ends the block cleanly too.
    from cudalibs.driver import _lib as drv
    with pytest.raises(cl.CudaError):
        with cl.graph.capture(s):
            misc["add_scalar"].launch(1, 64, d, 3.0, 64, stream=s)
            st = drv.get().cuStreamSynchronize(s.raw)
            if st:
                from cudalibs.driver._core import raise_for
                raise_for(st, "cuStreamSynchronize")
    assert not cl.graph.is_capturing(s)
    misc["add_scalar"].launch(1, 64, d, 1.0, 64, stream=s)
    T.assert_close(d.get(stream=s), x + 1.0, np.float32)


def test_graph_keeps_module_alive(device, rng):
    m = cl.compile(MISC, cache=False)
    s = cl.Stream()
    x = T.random_array(64, np.float32, rng=rng)
    d = cl.to_device(x, stream=s)
    with cl.graph.capture(s) as g:
        m["add_scalar"].launch(1, 64, d, 1.0, 64, stream=s)
    exe = g.instantiate()
    g.close()
    with pytest.raises(cl.CudaLibsError, match="live executable graph"):
        m.close()
    exe.replay(s)
    exe.close()
    exe.close()  # twice is harmless
    with pytest.raises(cl.ClosedError):
        exe.replay(s)
    m.close()
    T.assert_close(d.get(stream=s), x + 1.0, np.float32)
    del m, exe, g
    gc.collect()
    assert gc.garbage == []


def test_graph_objects(misc, rng, tmp_path):
    s = cl.Stream()
    d = cl.to_device(T.random_array(8, np.float32, rng=rng), stream=s)
    with cl.graph.capture(s) as g:
        misc["add_scalar"].launch(1, 8, d, 1.0, 8, stream=s)
    assert g.handle and g.device is cl.Device(0)
    path = tmp_path / "graph.dot"
    g.debug_dot(path)
    assert path.read_text().startswith("digraph")
    exe = g.instantiate()
    assert exe.handle and "GraphExec" in repr(exe)
    with pytest.raises(TypeError):
        exe.update("not a graph")
    with g:
        pass
    assert g.closed and "closed" in repr(g)
    with pytest.raises(cl.ClosedError):
        g.num_nodes
