"""cuDNN's legacy-API ops from frameworks' streams, threads and memory: batch norm (training,
inference, backward), pooling and softmax (forward and backward) and an LSTM training step
(forward, backward data, backward weights) on a held :class:`~cudalibs.cudnn.RNN` plan.

None of these relaunches recorded kernels: each call is the library call, which every
combination must make on the stream it was given, with the framework's arrays in place."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cudnn
from cudalibs import testing as T

from ._harness import each_combo, given, run

pytest.importorskip("torch")
pytest.importorskip("cupy")

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)

# -- batch norm --------------------------------------------------------------------------------
BN_X = (8, 16, 6, 6)
BN_C = (BN_X[1],)
EPS = 1e-5


def _bn_params(r):
    return {"scale": T.random_array(BN_C, F32, rng=r), "bias": T.random_array(BN_C, F32, rng=r),
            "mean": T.random_array(BN_C, F32, rng=r),
            "var": T.random_array(BN_C, F32, rng=r, low=0.5, high=1.5)}


@each_combo
def test_batch_norm_train(device, rng, combo):
    def inputs(r):
        return {"x": T.random_array(BN_X, F32, rng=r), **_bn_params(r)}

    def batch_norm_train(d, s):
        y, mean, inv = cudnn.batch_norm_train(d["x"], d["scale"], d["bias"], d["mean"],
                                              d["var"], momentum=0.1, eps=EPS,
                                              out=d.get("out"), stream=s)
        # The running statistics are the caller's arrays, updated in place.
        return y, mean, inv, d["mean"], d["var"]

    run(combo, rng, inputs=inputs, call=batch_norm_train, dtype="float32",
        outs={"out": (BN_X, F32)})


@each_combo
def test_batch_norm_infer(device, rng, combo):
    def inputs(r):
        return {"x": T.random_array(BN_X, F32, rng=r), **_bn_params(r)}

    def batch_norm_infer(d, s):
        return (cudnn.batch_norm_infer(d["x"], d["scale"], d["bias"], d["mean"], d["var"],
                                       eps=EPS, out=d.get("out"), stream=s),)

    run(combo, rng, inputs=inputs, call=batch_norm_infer, dtype="float32",
        outs={"out": (BN_X, F32)})


@each_combo
def test_batch_norm_backward(device, rng, combo):
    def inputs(r):
        h = {"x": T.random_array(BN_X, F32, rng=r), "dy": T.random_array(BN_X, F32, rng=r),
             "scale": T.random_array(BN_C, F32, rng=r)}
        _, mean, inv = cudnn.batch_norm_train(cl.to_device(h["x"]), cl.to_device(h["scale"]),
                                              cl.to_device(np.zeros(BN_C, F32)), eps=EPS)
        h["save_mean"], h["save_inv_std"] = mean.get(), inv.get()
        return h

    def batch_norm_backward(d, s):
        return cudnn.batch_norm_backward(d["x"], d["dy"], d["scale"], d["save_mean"],
                                         d["save_inv_std"], eps=EPS, out=d.get("out"), stream=s)

    # The scale and bias gradients are sums over the batch and every position, whose order
    # cuDNN does not promise (it reports nothing about its batch-norm kernels): within the
    # bound, and dx with them (it is computed from those sums).
    run(combo, rng, inputs=inputs, call=batch_norm_backward, dtype="float32",
        outs={"out": (BN_X, F32)}, exact=False)


# -- pooling and softmax -----------------------------------------------------------------------
POOL_X, POOL_Y = (4, 8, 12, 12), (4, 8, 6, 6)
# Windows that do not overlap: each input element gets at most one gradient, so max pooling's
# backward has one order of additions and is compared bit for bit.
WINDOW = 2


@each_combo
def test_pooling_forward(device, rng, combo):
    def pooling_forward(d, s):
        return (cudnn.pooling_forward(d["x"], WINDOW, mode="max", out=d.get("out"), stream=s),)

    run(combo, rng, inputs=lambda r: {"x": T.random_array(POOL_X, F16, rng=r)},
        call=pooling_forward, dtype="float16", outs={"out": (POOL_Y, F16)})


@each_combo
def test_pooling_backward(device, rng, combo):
    def inputs(r):
        x = T.random_array(POOL_X, F16, rng=r)
        y = cudnn.pooling_forward(cl.to_device(x), WINDOW, mode="max").get()
        return {"x": x, "y": y, "dy": T.random_array(POOL_Y, F16, rng=r)}

    def pooling_backward(d, s):
        return (cudnn.pooling_backward(d["y"], d["dy"], d["x"], WINDOW, mode="max",
                                       out=d.get("out"), stream=s),)

    run(combo, rng, inputs=inputs, call=pooling_backward, dtype="float16",
        outs={"out": (POOL_X, F16)})


SOFTMAX_X = (32, 100)


@each_combo
def test_softmax_forward(device, rng, combo):
    def softmax_forward(d, s):
        return (cudnn.softmax_forward(d["x"], out=d.get("out"), stream=s),)

    run(combo, rng, inputs=lambda r: {"x": T.random_array(SOFTMAX_X, F32, rng=r)},
        call=softmax_forward, dtype="float32", outs={"out": (SOFTMAX_X, F32)})


@each_combo
def test_softmax_backward(device, rng, combo):
    def inputs(r):
        x = T.random_array(SOFTMAX_X, F32, rng=r)
        return {"y": cudnn.softmax_forward(cl.to_device(x)).get(),
                "dy": T.random_array(SOFTMAX_X, F32, rng=r)}

    def softmax_backward(d, s):
        return (cudnn.softmax_backward(d["y"], d["dy"], out=d.get("out"), stream=s),)

    run(combo, rng, inputs=inputs, call=softmax_backward, dtype="float32",
        outs={"out": (SOFTMAX_X, F32)})


# -- an LSTM training step ---------------------------------------------------------------------
T_, BATCH, IN, HID = 5, 3, 8, 16


@each_combo
def test_lstm_training_step(device, rng, combo):
    def inputs(r):
        return {"x": T.random_array((T_, BATCH, IN), F32, rng=r),
                "hx": T.random_array((1, BATCH, HID), F32, rng=r),
                "cx": T.random_array((1, BATCH, HID), F32, rng=r),
                "dy": T.random_array((T_, BATCH, HID), F32, rng=r)}

    def lstm_step(d, s):
        rnn = d["plan"]
        y, hy, cy, state = rnn.forward(d["x"], d["hx"], d["cx"], training=True,
                                       out=given(d, "y", "hy", "cy"), stream=s)
        dx, dhx, dcx = rnn.backward_data(state, d["dy"], out=given(d, "dx", "dhx", "dcx"),
                                         stream=s)
        dw = rnn.backward_weights(state, stream=s)
        return y, hy, cy, dx, dhx, dcx, dw.space

    state_shape = ((1, BATCH, HID), F32)
    outs = {"y": ((T_, BATCH, HID), F32), "hy": state_shape, "cy": state_shape,
            "dx": ((T_, BATCH, IN), F32), "dhx": state_shape, "dcx": state_shape}
    run(combo, rng, inputs=inputs, call=lstm_step, dtype="float32", outs=outs,
        plan=lambda d: cudnn.RNN("lstm", IN, HID, seed=7), relaunch=False)
