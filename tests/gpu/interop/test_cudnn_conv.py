"""cuDNN convolutions from frameworks' streams, threads and memory: forward (with and without
bias), backward data, backward filter, the bias gradient and the fused convolution + bias +
ReLU.

The data are channels-last float16 -- what mixed-precision training hands cuDNN, and what its
graph-API engines (which relaunch their recorded kernels) take on every recent GPU -- laid out
physically NHWC and seen as logical NCHW, as ``tensor.permute(0, 3, 1, 2)`` shows them."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cudnn
from cudalibs import testing as T

from ._harness import each_combo, engine_deterministic, run

pytest.importorskip("torch")
pytest.importorskip("cupy")

F16 = np.dtype(np.float16)
N, C, H, W, K, R = 4, 16, 12, 12, 32, 3
PAD = 1
X, WT, Y = (N, C, H, W), (K, C, R, R), (N, K, H, W)


def nhwc(shape):
    """The physical (channels-last) shape of a logical NCHW (or KCRS) shape."""
    return (shape[0],) + tuple(shape[2:]) + (shape[1],)


def logical(a):
    """An NHWC buffer (a DeviceArray, tensor or CuPy array) seen as logical NCHW."""
    if hasattr(a, "permute"):
        return a.permute(0, 3, 1, 2)
    return a.transpose(0, 3, 1, 2)


def _rand(r, shape):
    return T.random_array(nhwc(shape), F16, rng=r)


def _out(d, name="out"):
    o = d.get(name)
    return None if o is None else logical(o)


@each_combo
def test_conv_forward(device, rng, combo):
    def inputs(r):
        return {"x": _rand(r, X), "w": _rand(r, WT)}

    def conv_forward(d, s):
        return (cudnn.conv_forward(logical(d["x"]), logical(d["w"]), padding=PAD,
                                   algo="heuristic", out=_out(d), stream=s),)

    run(combo, rng, inputs=inputs, call=conv_forward, dtype="float16",
        outs={"out": (nhwc(Y), F16)}, kind="cudnn_conv_forward",
        match=lambda key: key["x_shape"] == X, exact=engine_deterministic)


@each_combo
def test_conv_forward_with_bias(device, rng, combo):
    # Another batch size than test_conv_forward's: a plan of its own, so that the thread
    # checks see this test's threads alone.
    x2, y2 = (2,) + X[1:], (2,) + Y[1:]

    def inputs(r):
        return {"x": _rand(r, x2), "w": _rand(r, WT), "bias": T.random_array((K,), F16, rng=r)}

    def conv_forward(d, s):
        return (cudnn.conv_forward(logical(d["x"]), logical(d["w"]), bias=d["bias"],
                                   padding=PAD, algo="heuristic", out=_out(d), stream=s),)

    run(combo, rng, inputs=inputs, call=conv_forward, dtype="float16",
        outs={"out": (nhwc(y2), F16)}, kind="cudnn_conv_forward",
        match=lambda key: key["x_shape"] == x2, exact=engine_deterministic,
        name="conv_forward+bias")


@each_combo
def test_conv_backward_data(device, rng, combo):
    def inputs(r):
        return {"dy": _rand(r, Y), "w": _rand(r, WT)}

    def conv_backward_data(d, s):
        return (cudnn.conv_backward_data(logical(d["dy"]), logical(d["w"]), X, padding=PAD,
                                         algo="heuristic", out=_out(d), stream=s),)

    run(combo, rng, inputs=inputs, call=conv_backward_data, dtype="float16",
        outs={"out": (nhwc(X), F16)}, kind="cudnn_conv_backward_data",
        match=lambda key: key["x_shape"] == X, exact=engine_deterministic)


@each_combo
def test_conv_backward_filter(device, rng, combo):
    def inputs(r):
        return {"x": _rand(r, X), "dy": _rand(r, Y)}

    def conv_backward_filter(d, s):
        return (cudnn.conv_backward_filter(logical(d["x"]), logical(d["dy"]), WT, padding=PAD,
                                           algo="heuristic", out=_out(d), stream=s),)

    # Filter gradients sum over the batch and every position: engines that split that sum
    # across blocks add with atomics, which cuDNN reports as non-deterministic.
    run(combo, rng, inputs=inputs, call=conv_backward_filter, dtype="float16",
        outs={"out": (nhwc(WT), F16)}, kind="cudnn_conv_backward_filter",
        match=lambda key: key["w_shape"] == WT, exact=engine_deterministic)


@each_combo
def test_conv_backward_bias(device, rng, combo):
    def inputs(r):
        return {"dy": _rand(r, Y)}

    def conv_backward_bias(d, s):
        return (cudnn.conv_backward_bias(logical(d["dy"]), out=d.get("out"), stream=s),)

    # cudnnConvolutionBackwardBias reports nothing about how it sums: compared within the
    # bound (a legacy call, nothing recorded to relaunch).
    run(combo, rng, inputs=inputs, call=conv_backward_bias, dtype="float16",
        outs={"out": ((K,), F16)}, exact=False)


@each_combo
def test_conv_bias_act(device, rng, combo):
    def inputs(r):
        return {"x": _rand(r, X), "w": _rand(r, WT), "bias": T.random_array((K,), F16, rng=r)}

    def conv_bias_act(d, s):
        return (cudnn.conv_bias_act(logical(d["x"]), logical(d["w"]), d["bias"], padding=PAD,
                                    algo="heuristic", out=_out(d), stream=s),)

    run(combo, rng, inputs=inputs, call=conv_bias_act, dtype="float16",
        outs={"out": (nhwc(Y), F16)}, kind="cudnn_conv_bias_act", exact=engine_deterministic)


def test_bias_gradient_in_bfloat16_is_refused_before_any_gpu_work(device):
    # cuDNN has no bfloat16 cudnnConvolutionBackwardBias: the one-shot says so, naming the
    # call, before a descriptor is made -- whichever framework's array it is given.
    import torch

    dy = torch.ones((2, 4, 3, 3), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"cudnnConvolutionBackwardBias.*bfloat16"):
        cudnn.conv_backward_bias(dy)
    assert not [e for e in cl.plan_cache.entries("cudnn_conv_backward_bias")
                if e.key["dtype"].name == "bfloat16"]
