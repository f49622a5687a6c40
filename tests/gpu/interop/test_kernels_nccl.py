"""The shipped kernels (softmax, an elementwise epilogue, a layout transpose) and a one-rank
NCCL all-reduce from frameworks' streams, threads and memory.

Neither relaunches recorded kernels: each call launches the kernel (or the collective) on the
stream it was given, reading and writing the framework's arrays in place."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import kernels as K
from cudalibs import testing as T

from ._harness import each_combo, run

pytest.importorskip("torch")
pytest.importorskip("cupy")

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


@each_combo
def test_softmax_kernel(device, rng, combo):
    shape = (16, 100)

    def softmax(d, s):
        return (K.softmax(d["x"], out=d.get("out"), stream=s),)

    run(combo, rng, inputs=lambda r: {"x": T.random_array(shape, F16, rng=r)}, call=softmax,
        dtype="float16", outs={"out": (shape, F16)}, name="kernels.softmax")


@each_combo
def test_bias_gelu_kernel(device, rng, combo):
    rows, cols = 16, 64

    def inputs(r):
        return {"x": T.random_array((rows, cols), F16, rng=r),
                "bias": T.random_array((cols,), F16, rng=r)}

    def bias_gelu(d, s):
        return (K.bias_gelu(d["x"], d["bias"], out=d.get("out"), stream=s),)

    run(combo, rng, inputs=inputs, call=bias_gelu, dtype="float16",
        outs={"out": ((rows, cols), F16)}, name="kernels.bias_gelu")


@each_combo
def test_transpose_kernel(device, rng, combo):
    rows, cols = 24, 40

    def transpose(d, s):
        return (K.transpose(d["x"], out=d.get("out"), stream=s),)

    got = run(combo, rng, inputs=lambda r: {"x": T.random_array((rows, cols), F32, rng=r)},
              call=transpose, dtype="float32", outs={"out": ((cols, rows), F32)},
              name="kernels.transpose")
    assert all(g[0].shape == (cols, rows) for g in got)


@pytest.fixture(scope="module")
def comm():
    """A one-rank communicator on device 0, for the whole module."""
    from cudalibs import nccl

    comms = nccl.Communicator.init_all([cl.Device(0)])
    yield comms[0]
    nccl.close_all(comms)


@each_combo
def test_all_reduce_one_rank(device, rng, comm, combo):
    n = 1000
    sent = []

    def inputs(r):
        x = T.random_array((n,), F32, rng=r)
        sent.append(x)
        return {"x": x}

    def all_reduce(d, s):
        return (comm.all_reduce(d["x"], out=d.get("out"), op="sum", stream=s),)

    got = run(combo, rng, inputs=inputs, call=all_reduce, dtype="float32",
              outs={"out": ((n,), F32)}, name="nccl.all_reduce")
    # One rank: the sum over ranks is the input itself, to the bit.
    for g, x in zip(got, sent):
        np.testing.assert_array_equal(g[0], x)
