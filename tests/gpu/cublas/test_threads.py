"""Planned cuBLAS operations executed from many threads at once give, bit for bit, what the
same calls give one after another."""

import threading

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T

THREADS, CALLS = 8, 30


def _inputs(rng, n, m=48, k=40, nn=24):
    return [(cl.to_device(T.random_array((m, k), np.float16, rng=rng)),
             cl.to_device(T.random_array((k, nn), np.float16, rng=rng)),
             cl.to_device(T.random_array((nn,), np.float16, rng=rng))) for _ in range(n)]


def _compare(run, inputs):
    """``run(inputs[i], stream)`` from THREADS threads, each on its own stream, CALLS times
    each; every result must equal the serial result bitwise."""
    s0 = cl.Stream()
    serial = [run(x, s0).get(stream=s0) for x in inputs]
    results = [[None] * CALLS for _ in range(THREADS)]
    errors = []

    def work(t):
        try:
            with cl.Stream() as s:
                for j in range(CALLS):
                    i = (t + j) % len(inputs)
                    results[t][j] = (i, run(inputs[i], s).get(stream=s))
        except Exception as exc:   # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    bad = sum(1 for row in results for i, r in row if not np.array_equal(
        r.view(np.uint16), serial[i].view(np.uint16)))
    assert bad == 0, f"{bad} of {THREADS * CALLS} results differ from the serial ones"


@pytest.mark.parametrize("backend", ["auto", "cublas"])
def test_gemm_threads(device, rng, backend):
    old = cublas.set_gemm_backend(backend)
    try:
        _compare(lambda x, s: cublas.gemm(x[0], x[1], stream=s), _inputs(rng, THREADS))
    finally:
        cublas.set_gemm_backend(old)


def test_gemm_strided_batched_threads(device, rng):
    xs = [(cl.to_device(T.random_array((4, 32, 16), np.float16, rng=rng)),
           cl.to_device(T.random_array((4, 16, 24), np.float16, rng=rng)), None)
          for _ in range(THREADS)]
    _compare(lambda x, s: cublas.gemm_strided_batched(x[0], x[1], stream=s), xs)


@pytest.mark.parametrize("epilogue", ["bias", "gelu_bias"])
def test_matmul_epilogue_threads(device, rng, epilogue):
    _compare(lambda x, s: cublas.matmul(x[0], x[1], bias=x[2], epilogue=epilogue, stream=s),
             _inputs(rng, THREADS))


def test_user_held_plan_threads(device, rng):
    xs = _inputs(rng, THREADS)
    with cublas.Matmul(xs[0][0], xs[0][1], epilogue="gelu_bias") as plan:
        _compare(lambda x, s: plan.execute(x[0], x[1], bias=x[2], stream=s), xs)
