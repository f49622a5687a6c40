"""Every planned cuDNN operation from eight threads at once, each on its own stream, against
the same calls made serially: results must match bit for bit.

The one-shot functions share their cached plans between threads (one plan cache), and a
user-held plan is executed by all threads together; nothing per call may leak from one
thread's call into another's (a variant pack, a workspace, a bias pointer).
"""

import threading

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cudnn

from ._helpers import rand

THREADS = 8
REPS = 12


def _host(result):
    """Host copies of a result (an array, or a tuple / BatchNormState of arrays)."""
    if isinstance(result, (tuple, list, cudnn.BatchNormState)):
        return tuple(np.array(r.get()) for r in result)
    return (np.array(result.get()),)


def _same_bits(a, b):
    return all(x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()
               for x, y in zip(a, b)) and len(a) == len(b)


def _hammer(device, calls):
    """Run each of ``calls`` (``fn(stream) -> result``) once serially, then from THREADS
    threads REPS times each (every thread on its own stream, calls interleaved); return the
    mismatches against the serial results."""
    serial = []
    with cl.Stream(device) as s:
        for fn in calls:
            serial.append(_host(fn(s)))
        s.sync()
    device.synchronize()
    errors, bad = [], []
    start = threading.Barrier(THREADS)

    def worker(t):
        try:
            device.set_current()
            with cl.Stream(device) as s:
                start.wait()
                pending = []
                for r in range(REPS):
                    for i, fn in enumerate(calls):
                        pending.append((i, r, fn(s)))
                s.sync()
                for i, r, res in pending:
                    if not _same_bits(_host(res), serial[i]):
                        bad.append((t, r, i))
        except BaseException as exc:   # noqa: BLE001 - reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return bad


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
    assert _hammer(device, calls) == []


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
        assert _hammer(device, calls) == []
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
    assert _hammer(device, calls) == []


@pytest.mark.parametrize("maxsize", [8])
def test_one_cache_bounds_descriptor_and_plan_caches(device, rng, maxsize):
    from cudalibs.driver.plan import cache

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
