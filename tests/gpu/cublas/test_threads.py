"""Planned cuBLAS operations executed from many threads at once give, bit for bit, what the
same calls give one after another."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T

from .._threads import THREADS, match_serial

CALLS = 30


def _inputs(rng, n, m=48, k=40, nn=24):
    return [(cl.to_device(T.random_array((m, k), np.float16, rng=rng)),
             cl.to_device(T.random_array((k, nn), np.float16, rng=rng)),
             cl.to_device(T.random_array((nn,), np.float16, rng=rng))) for _ in range(n)]


def _compare(device, run, inputs):
    """``run(inputs[i], stream)`` from THREADS threads, each on its own stream, CALLS times
    each (thread ``t`` takes input ``(t + j) % len(inputs)`` at its ``j``-th call, copying
    each result at once); every result must equal the serial result bitwise."""
    calls = [lambda s, x=x: run(x, s) for x in inputs]
    match_serial(device, calls, repeats=CALLS, copy_each=True,
                 pick=lambda t, j: ((t + j) % len(inputs),))


@pytest.mark.parametrize("backend", ["auto", "cublas"])
def test_gemm_threads(device, rng, backend):
    old = cublas.set_gemm_backend(backend)
    try:
        _compare(device, lambda x, s: cublas.gemm(x[0], x[1], stream=s), _inputs(rng, THREADS))
    finally:
        cublas.set_gemm_backend(old)


def test_gemm_strided_batched_threads(device, rng):
    xs = [(cl.to_device(T.random_array((4, 32, 16), np.float16, rng=rng)),
           cl.to_device(T.random_array((4, 16, 24), np.float16, rng=rng)), None)
          for _ in range(THREADS)]
    _compare(device, lambda x, s: cublas.gemm_strided_batched(x[0], x[1], stream=s), xs)


@pytest.mark.parametrize("epilogue", ["bias", "gelu_bias"])
def test_matmul_epilogue_threads(device, rng, epilogue):
    _compare(device, lambda x, s: cublas.matmul(x[0], x[1], bias=x[2], epilogue=epilogue,
                                                stream=s), _inputs(rng, THREADS))


def test_user_held_plan_threads(device, rng):
    xs = _inputs(rng, THREADS)
    with cublas.Matmul(xs[0][0], xs[0][1], epilogue="gelu_bias") as plan:
        _compare(device, lambda x, s: plan.execute(x[0], x[1], bias=x[2], stream=s), xs)
