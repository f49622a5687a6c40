"""Whole steps as CUDA graphs: StepGraph replays a training step exactly as the eager step
runs it, and what cannot be captured is refused by name."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cublas, cudnn, kernels as K
from cudalibs import testing as T

from .._sizes import gpu_settings
from .._threads import in_threads

GPU = gpu_settings(6)


def _mlp(seed, n_in, n_hid, n_out):
    rng = np.random.default_rng(seed)
    return {"w1": T.random_array((n_in, n_hid), np.float32, rng=rng, low=-0.3, high=0.3),
            "b1": T.random_array((n_hid,), np.float32, rng=rng, low=-0.1, high=0.1),
            "w2": T.random_array((n_hid, n_out), np.float32, rng=rng, low=-0.3, high=0.3)}


def _make_step(p, lr):
    """An SGD step of ``mean((relu(x w1 + b1) w2 - y)^2) / 2`` (gradient scaled by 1/batch):
    every operation from cuBLAS and the kernel library, parameters updated in place, the
    loss gradient's norm kept on the device as the output."""
    def step(x, y):
        n = x.shape[0]
        h = K.bias_relu(cublas.gemm(x, p["w1"]), p["b1"])
        out = cublas.gemm(h, p["w2"])
        diff = K.add(out, K.scale(y, -1.0))
        g = K.scale(diff, 1.0 / n)
        dw2 = cublas.gemm(h.T, g)
        dh = K.relu_backward(cublas.gemm(g, p["w2"].T), h)
        dw1 = cublas.gemm(x.T, dh)
        db1 = cublas.gemm(cl.full((1, n), 1.0, np.float32), dh).reshape(-1)
        K.axpy(-lr, dw1, p["w1"])
        K.axpy(-lr, db1, p["b1"])
        K.axpy(-lr, dw2, p["w2"])
        return {"diff": diff}
    return step


@GPU
@given(batch=st.integers(1, 48), n_in=st.integers(1, 40), n_hid=st.integers(1, 64),
       n_out=st.integers(1, 12), steps=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_replayed_steps_equal_eager_steps_bitwise(device, batch, n_in, n_hid, n_out, steps, seed):
    init = _mlp(seed, n_in, n_hid, n_out)
    rng = np.random.default_rng(seed + 1)
    batches = [(T.random_array((batch, n_in), np.float32, rng=rng),
                T.random_array((batch, n_out), np.float32, rng=rng)) for _ in range(steps + 1)]
    s = cl.Stream()
    eager = {k: cl.to_device(v, stream=s) for k, v in init.items()}
    graphed = {k: cl.to_device(v, stream=s) for k, v in init.items()}
    with s:
        eager_step = _make_step(eager, 0.05)
        eager_diffs = [eager_step(cl.to_device(x, stream=s), cl.to_device(y, stream=s))["diff"]
                       .get(stream=s) for x, y in batches]
    # The warm-up is the step on batch 0 (its outputs are the static outputs until the
    # first replay); the capture only records; replays run the rest.
    step = cl.StepGraph(_make_step(graphed, 0.05), *batches[0], stream=s)
    first = step.outputs["diff"].get(stream=s)
    np.testing.assert_array_equal(first, eager_diffs[0])
    for i, (x, y) in enumerate(batches[1:], 1):
        out = step(cl.to_device(x, stream=s), y)    # a device input and a host input
        np.testing.assert_array_equal(out["diff"].get(stream=s), eager_diffs[i])
    assert step.replays == steps
    assert step.num_nodes > 10
    assert "StepGraph" in repr(step) and "replays" in repr(step)
    step.close()
    assert step.closed
    with pytest.raises(cl.ClosedError):
        step.replay()


def test_parameters_follow_the_eager_sequence(device):
    init = _mlp(7, 16, 32, 4)
    rng = np.random.default_rng(3)
    batches = [(T.random_array((8, 16), np.float32, rng=rng),
                T.random_array((8, 4), np.float32, rng=rng)) for _ in range(4)]
    s = cl.Stream()
    eager = {k: cl.to_device(v, stream=s) for k, v in init.items()}
    graphed = {k: cl.to_device(v, stream=s) for k, v in init.items()}
    # The warm-up runs batch 0; the capture records without running; replays run 1, 2, 3.
    with s:
        st_e = _make_step(eager, 0.1)
        for x, y in batches:
            st_e(cl.to_device(x, stream=s), cl.to_device(y, stream=s))
    step = cl.StepGraph(_make_step(graphed, 0.1), *batches[0], stream=s)
    for x, y in batches[1:]:
        step(x, y)
    for k in init:
        np.testing.assert_array_equal(graphed[k].get(stream=s), eager[k].get(stream=s))


def test_cudnn_step_replays(device):
    """Convolution, batch-norm, activation and pooling forward and backward in one graph."""
    rng = np.random.default_rng(11)
    x0 = T.random_array((4, 3, 12, 12), np.float32, rng=rng)
    w = cl.to_device(T.random_array((8, 3, 3, 3), np.float32, rng=rng, low=-0.3, high=0.3))
    gamma = cl.to_device(T.random_array((8,), np.float32, rng=rng, low=0.5, high=1.5))
    beta = cl.to_device(T.random_array((8,), np.float32, rng=rng))

    def step(x):
        y = cudnn.conv_forward(x, w, padding=1)
        state = cudnn.batch_norm_train(y, gamma, beta)
        z = state[0]
        a = cudnn.activation_forward(z, "relu")
        p = cudnn.pooling_forward(a, (2, 2), stride=(2, 2), mode="max")
        dp = K.scale(p, 1.0)
        da = cudnn.pooling_backward(p, dp, a, (2, 2), stride=(2, 2), mode="max")
        dz = cudnn.activation_backward(a, da, z, "relu")
        dy, dgamma, _ = cudnn.batch_norm_backward(y, dz, gamma, state)
        dw = cudnn.conv_backward_filter(x, dy, w.shape, padding=1)
        return p, dw, dgamma

    s = cl.Stream()
    g = cl.StepGraph(step, x0, stream=s)
    for _ in range(3):
        x = T.random_array(x0.shape, np.float32, rng=rng)
        with s:
            want = [o.get(stream=s) for o in step(cl.to_device(x, stream=s))]
        got = [o.get(stream=s) for o in g(x)]
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("what, call", [
    ("Stream.synchronize", lambda s, a: s.synchronize()),
    ("DeviceArray.get", lambda s, a: a.get(stream=s)),
    ("cudalibs.alloc", lambda s, a: cl.alloc(1024)),
    ("copying a host array", lambda s, a: a.copy_(np.ones(a.shape, a.dtype), s)),
    ("GemmPlan.autotune", lambda s, a: cublas.GemmPlan(a, a).autotune(stream=s, store=False)),
])
def test_what_cannot_be_captured_is_refused_by_name(device, rng, what, call):
    s = cl.Stream()
    a = cl.to_device(T.random_array((16, 16), np.float32, rng=rng), stream=s)
    s.synchronize()
    with pytest.raises(cl.CaptureError, match=what.split(" (")[0].replace(".", r"\.")):
        with cl.graph.capture(s):
            call(s, a)
    # The failed capture was discarded and the stream works as before.
    out = cublas.gemm(a, a, stream=s)
    T.assert_close(out.get(stream=s), T.ref.gemm(a.get(stream=s), a.get(stream=s)),
                   np.float32)


def test_step_graph_checks_its_inputs(device, rng):
    s = cl.Stream()
    x = cl.to_device(T.random_array((4, 4), np.float32, rng=rng), stream=s)
    step = cl.StepGraph(lambda a: K.scale(a, 2.0), x, stream=s)
    with pytest.raises(TypeError, match="takes 1 inputs"):
        step(x, x)
    with pytest.raises(ValueError, match=r"input 0 is \(4, 5\)"):
        step(cl.to_device(T.random_array((4, 5), np.float32, rng=rng)))
    with pytest.raises(ValueError, match="float64"):
        step(T.random_array((4, 4), np.float64, rng=rng))
    with pytest.raises(ValueError, match="warmup"):
        cl.StepGraph(lambda a: a, x, stream=s, warmup=0)
    with pytest.raises(ValueError, match="default stream"):
        cl.StepGraph(lambda a: a, x, stream=cl.default_stream())
    with pytest.raises(TypeError, match="must return"):
        cl.StepGraph(lambda a: 3.0, x, stream=s)
    np.testing.assert_array_equal(step(x).get(stream=s), 2 * x.get(stream=s))


def test_other_threads_are_not_refused_while_one_captures(device, rng):
    s = cl.Stream()
    a = cl.to_device(T.random_array((8, 8), np.float32, rng=rng), stream=s)
    s.synchronize()

    def other(t, s2):
        b = cl.to_device(T.random_array((8, 8), np.float32, rng=rng), stream=s2)
        s2.synchronize()           # would be refused in the capturing thread
        return b.get(stream=s2).shape

    with cl.graph.capture(s):
        K.scale(a, 2.0, stream=s)
        seen = in_threads(device, other, 1)
    assert seen == [(8, 8)]


def test_memory_from_before_the_capture_is_not_freed_inside_it(device, rng):
    """Garbage of eager work collected during a capture waits for its end: a free node for
    memory the graph never allocated would free it again at every replay."""
    s = cl.Stream()
    x = cl.to_device(T.random_array((256,), np.float32, rng=rng), stream=s)
    y = cl.empty((256,), np.float32, stream=s)
    old = cl.empty((1 << 20,), np.float32, stream=s)     # pool memory from before the capture
    s.synchronize()
    with cl.graph.capture(s) as g:
        K.scale(x, 2.0, out=y, stream=s)
        del old                                           # its free must not be captured
        tmp = K.scale(x, 3.0, stream=s)                   # graph memory, freed in the graph
        K.add(tmp, y, out=y, stream=s)
        del tmp
    assert g.num_nodes == 5      # two kernels, the add, one allocation and its free
    exe = g.instantiate()
    for _ in range(3):
        exe.replay(s)
    xh = x.get(stream=s)
    np.testing.assert_array_equal(y.get(stream=s),
                                  xh * np.float32(3.0) + xh * np.float32(2.0))
    exe.close()
    g.close()
