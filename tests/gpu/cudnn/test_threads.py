"""Every planned cuDNN operation from eight threads at once, each on its own stream, against
the same calls made serially: results must match bit for bit (the harness:
``tests/gpu/_threads.py``).

The one-shot functions share their cached plans between threads (one plan cache), and a
user-held plan is executed by all threads together; nothing per call may leak from one
thread's call into another's (a variant pack, a workspace, a bias pointer).
"""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cudnn
from cudalibs import testing as T

from .._threads import in_threads, match_serial
from ._helpers import rand

REPS = 12


def test_convolutions_from_many_threads_match_serial(device, rng):
    _, x = rand((4, 16, 12, 12), "float16", rng, True)
    _, w = rand((32, 16, 3, 3), "float16", rng, True)
    _, dy = rand((4, 32, 12, 12), "float16", rng, True)
    _, b = rand((32,), "float16", rng)
    _, xf = rand((2, 8, 10, 10), "float32", rng)
    _, wf = rand((8, 8, 3, 3), "float32", rng)
    opts = dict(padding=1, deterministic=True)
    calls = [
        lambda s: cudnn.conv_forward(x, w, stream=s, **opts),
        lambda s: cudnn.conv_forward(x, w, bias=b, algo="heuristic", stream=s, **opts),
        lambda s: cudnn.conv_forward(xf, wf, alpha=0.5, stream=s, **opts),   # legacy plan
        lambda s: cudnn.conv_backward_data(dy, w, x.shape, stream=s, **opts),
        lambda s: cudnn.conv_backward_filter(x, dy, w.shape, stream=s, **opts),
        lambda s: cudnn.conv_bias_act(x, w, b, stream=s, **opts),
        lambda s: cudnn.conv_bias_act(x, w, b, activation="identity", stream=s, **opts),
    ]
    match_serial(device, calls, repeats=REPS)


def test_one_user_held_plan_from_many_threads(device, rng):
    _, x = rand((4, 16, 12, 12), "float16", rng, True)
    _, w = rand((32, 16, 3, 3), "float16", rng, True)
    _, b = rand((32,), "float16", rng)
    _, x2 = rand((4, 16, 12, 12), "float16", rng, True)
    with cudnn.ConvForwardPlan(x, w, padding=1, deterministic=True) as plan:
        fused = cudnn.ConvBiasActPlan(x, w, padding=1, deterministic=True)
        # two inputs: the threads alternate pointer sets on one shared plan
        calls = [lambda s: plan.execute(x, w, stream=s),
                 lambda s: plan.execute(x2, w, bias=b, stream=s),
                 lambda s: fused.execute(x, w, b, stream=s),
                 lambda s: fused.execute(x2, w, b, stream=s)]
        match_serial(device, calls, repeats=REPS)
        fused.close()


def test_norm_pooling_activation_from_many_threads(device, rng):
    _, x = rand((4, 8, 10, 10), "float32", rng)
    _, dy = rand((4, 8, 10, 10), "float32", rng)
    _, scale = rand((8,), "float32", rng)
    _, bias = rand((8,), "float32", rng)
    _, mean = rand((8,), "float32", rng)
    _, var = rand((8,), "float32", rng, low=0.5, high=1.5)
    state = cudnn.batch_norm_train(x, scale, bias)
    device.synchronize()
    _, px = rand((2, 4, 8, 8), "float32", rng)
    py = cudnn.pooling_forward(px, 2)
    _, pdy = rand(py.shape, "float32", rng)
    device.synchronize()
    calls = [
        lambda s: cudnn.batch_norm_train(x, scale, bias, stream=s),
        lambda s: cudnn.batch_norm_backward(x, dy, scale, state, stream=s),
        lambda s: cudnn.batch_norm_infer(x, scale, bias, mean, var, stream=s),
        lambda s: cudnn.pooling_forward(px, 2, stream=s),
        lambda s: cudnn.pooling_forward(px, 3, stride=1, padding=1, mode="avg", stream=s),
        lambda s: cudnn.pooling_backward(py, pdy, px, 2, stream=s),
        lambda s: cudnn.softmax(x, stream=s),
        lambda s: cudnn.softmax(x, algorithm="log", mode="instance", stream=s),
        lambda s: cudnn.activation(x, "tanh", stream=s),
        lambda s: cudnn.activation_backward(x, dy, x, "relu", stream=s),
    ]
    match_serial(device, calls, repeats=REPS)


@pytest.mark.parametrize("maxsize", [8])
def test_one_cache_bounds_descriptor_and_plan_caches(device, rng, maxsize):
    from cudalibs.runtime.cache import cache

    old = cache.maxsize
    cache.maxsize = maxsize
    try:
        for n in range(1, 201):
            shape = (1, 2, 2 + n % 50, 2 + n // 50)
            _, x = rand(shape, "float32", rng)
            _, g = rand((2,), "float32", rng)
            cudnn.batch_norm_train(x, g, g)
            cudnn.pooling_forward(x, 1)
            cudnn.softmax(x)
            assert len(cache) <= maxsize
        kinds = cache.kinds()
        assert {"cudnn_batch_norm", "cudnn_pooling", "cudnn_elementwise_tensor"} & set(kinds)
        assert cache.clear("cudnn_pooling") >= 0 and "cudnn_pooling" not in cache.kinds()
    finally:
        cache.maxsize = old
        device.synchronize()


def test_stream_per_request_releases_workspaces(device, rng):
    _, x = rand((4, 16, 12, 12), "float16", rng, True)
    _, w = rand((32, 16, 3, 3), "float16", rng, True)
    cudnn.release_workspaces()
    device.synchronize()
    before = cudnn.workspace_bytes(device)
    for _ in range(30):
        s = cl.Stream(device)
        y = cudnn.conv_forward(x, w, padding=1, stream=s)
        cudnn.softmax(y, stream=s)
        s.sync()
        s.close()
    device.synchronize()
    # every stream's workspace went with its stream
    assert cudnn.workspace_bytes(device) <= before


@pytest.mark.parametrize("dtype, channels_last", [("float32", False), ("float16", True)])
def test_one_batch_norm_plan_from_many_threads(device, rng, dtype, channels_last):
    """One held training plan and one inference plan, executed by every thread at once on
    two inputs (the Ex path with its reserve and, for half data, the fused add + relu)."""
    shape = (4, 8, 6, 6)
    _, x = rand(shape, dtype, rng, channels_last)
    _, x2 = rand(shape, dtype, rng, channels_last)
    _, dy = rand(shape, dtype, rng, channels_last)
    _, g = rand((8,), "float32", rng)
    _, b = rand((8,), "float32", rng)
    _, mean = rand((8,), "float32", rng)
    _, var = rand((8,), "float32", rng, low=0.5, high=1.5)
    train = cudnn.BatchNormPlan(x)
    infer = cudnn.BatchNormPlan(x, training=False)
    state = train.execute(x, g, b)
    state2 = train.execute(x2, g, b, eps=1e-3)
    calls = [
        lambda s: train.execute(x, g, b, stream=s),
        lambda s: train.execute(x2, g, b, eps=1e-3, stream=s),
        lambda s: train.backward(x, dy, g, state, stream=s),
        lambda s: train.backward(x2, dy, g, state2, stream=s),
        lambda s: infer.execute(x, g, b, mean, var, stream=s),
        lambda s: infer.execute(x2, g, b, mean, var, eps=1e-2, stream=s),
    ]
    if channels_last:
        fused = train.execute(x, g, b, activation="relu", z=x2)
        calls += [lambda s: train.execute(x, g, b, activation="relu", z=x2, stream=s),
                  lambda s: train.backward(x, dy, g, fused, stream=s)]
    device.synchronize()
    try:
        match_serial(device, calls, repeats=REPS)
    finally:
        train.close()
        infer.close()


def test_many_distinct_scalars_from_many_threads(device, rng):
    # More distinct alpha/beta values than cuDNN's host scalars keep (1,120 alphas over eight
    # threads, each with its own beta): every call must read its own values, whatever the
    # other threads make meanwhile.
    n_threads, per = 8, 140
    x_h = rng.standard_normal((4, 8, 6, 6)).astype(np.float32) + 0.1
    y0_h = rng.standard_normal((4, 8, 6, 6)).astype(np.float32)
    x = cl.to_device(x_h)
    alphas = (1.0 + np.arange(n_threads * per) * 1e-3).reshape(n_threads, per)
    betas = -0.5 - np.arange(n_threads * per).reshape(n_threads, per) * 7e-4
    assert alphas.size + betas.size > cudnn._common.MAX_SCALARS

    def work(t, s):
        got = []
        for a, b in zip(alphas[t], betas[t]):
            y = cl.to_device(y0_h, stream=s)
            cudnn.activation_forward(x, "relu", out=y, alpha=float(a), beta=float(b), stream=s)
            got.append(y.get(stream=s))
        return got

    threaded = in_threads(device, work, threads=n_threads)
    relu = np.maximum(x_h.astype(np.float64), 0)
    for t in range(n_threads):
        for i in (0, per // 2, per - 1):
            want = alphas[t, i] * relu + betas[t, i] * y0_h.astype(np.float64)
            T.assert_close(threaded[t][i], want, dtype=np.float32,
                           msg=f"thread {t} call {i}")
    # the same calls made serially give the same bits
    s = cl.Stream(device)
    for t in range(n_threads):
        serial = work(t, s)
        for i in range(per):
            np.testing.assert_array_equal(threaded[t][i], serial[i],
                                          err_msg=f"thread {t} call {i}")
    s.close()
