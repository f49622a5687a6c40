"""cuDNN's graph-API attention and norms from frameworks' streams, threads and memory:
``sdpa`` and ``sdpa_backward`` (causal, float16 and bfloat16), ``layer_norm`` / ``rms_norm``
in training and their backwards.  Each relaunches its recorded engine kernels; the backwards
are fed by their forward's outputs, as autograd feeds them."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cudnn
from cudalibs import testing as T

from ._harness import each_combo, engine_deterministic, given, run

pytest.importorskip("torch")
pytest.importorskip("cupy")

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
HALF = {"float16": F16, "bfloat16": cl.dtypes.bfloat16}

# -- attention ---------------------------------------------------------------------------------
B, HEADS, S, D = 2, 4, 64, 64
QKV = (B, HEADS, S, D)


def _qkv(r, dt):
    return {n: T.random_array(QKV, dt, rng=r) for n in ("q", "k", "v")}


@pytest.mark.parametrize("dtype", list(HALF))
@each_combo
def test_sdpa(device, rng, combo, dtype):
    dt = HALF[dtype]

    def sdpa(d, s):
        return cudnn.sdpa(d["q"], d["k"], d["v"], causal=True, training=True, out=d.get("out"),
                          stream=s)

    run(combo, rng, inputs=lambda r: _qkv(r, dt), call=sdpa, dtype=dtype,
        outs={"out": (QKV, dt)}, kind="cudnn_sdpa",
        match=lambda key: key["dtype"] == dt and key["training"] and key["causal"],
        exact=engine_deterministic, name=f"sdpa[{dtype}]")


@pytest.mark.parametrize("dtype", list(HALF))
@each_combo
def test_sdpa_backward(device, rng, combo, dtype):
    dt = HALF[dtype]

    def inputs(r):
        h = _qkv(r, dt)
        h["do"] = T.random_array(QKV, dt, rng=r)
        # The forward's output and statistics, as the training forward leaves them.
        o, stats = cudnn.sdpa(*(cl.to_device(h[n]) for n in ("q", "k", "v")), causal=True,
                              training=True)
        h["o"], h["stats"] = o.get(), stats.get()
        return h

    def sdpa_backward(d, s):
        return cudnn.sdpa_backward(d["q"], d["k"], d["v"], d["o"], d["do"], d["stats"],
                                   causal=True, out=given(d, "dq", "dk", "dv"), stream=s)

    run(combo, rng, inputs=inputs, call=sdpa_backward, dtype=dtype,
        outs={g: (QKV, dt) for g in ("dq", "dk", "dv")}, kind="cudnn_sdpa_backward",
        match=lambda key: key["dtype"] == dt and key["causal"], exact=engine_deterministic,
        name=f"sdpa_backward[{dtype}]")


# -- layer norm and RMS norm -------------------------------------------------------------------
ROWS, FEATS = 64, 256


def _norm_inputs(r, mode):
    h = {"x": T.random_array((ROWS, FEATS), F16, rng=r),
         "w": T.random_array((FEATS,), F16, rng=r)}
    if mode == "layer":
        h["b"] = T.random_array((FEATS,), F16, rng=r)
    return h


#: The statistics' shape and dtype: torch's native_layer_norm shape, float32.
STAT = ((ROWS, 1), F32)


@each_combo
def test_layer_norm(device, rng, combo):
    def layer_norm(d, s):
        return cudnn.layer_norm(d["x"], d["w"], d["b"], training=True,
                                out=given(d, "y", "mean", "inv"), stream=s)

    run(combo, rng, inputs=lambda r: _norm_inputs(r, "layer"), call=layer_norm,
        dtype="float16", outs={"y": ((ROWS, FEATS), F16), "mean": STAT, "inv": STAT},
        kind="cudnn_norm_forward", match=lambda key: key["mode"] == "layer",
        exact=engine_deterministic)


@each_combo
def test_rms_norm(device, rng, combo):
    def rms_norm(d, s):
        return cudnn.rms_norm(d["x"], d["w"], training=True, out=given(d, "y", "inv"), stream=s)

    run(combo, rng, inputs=lambda r: _norm_inputs(r, "rms"), call=rms_norm, dtype="float16",
        outs={"y": ((ROWS, FEATS), F16), "inv": STAT}, kind="cudnn_norm_forward",
        match=lambda key: key["mode"] == "rms", exact=engine_deterministic)


@each_combo
def test_layer_norm_backward(device, rng, combo):
    def inputs(r):
        h = _norm_inputs(r, "layer")
        h["dy"] = T.random_array((ROWS, FEATS), F16, rng=r)
        _, mean, inv = cudnn.layer_norm(*(cl.to_device(h[n]) for n in ("x", "w", "b")),
                                        training=True)
        h["mean"], h["inv"] = mean.get(), inv.get()
        return h

    def layer_norm_backward(d, s):
        return cudnn.layer_norm_backward(d["dy"], d["x"], d["w"], d["mean"], d["inv"],
                                         out=given(d, "dx", "dw", "db"), stream=s)

    run(combo, rng, inputs=inputs, call=layer_norm_backward, dtype="float16",
        outs={"dx": ((ROWS, FEATS), F16), "dw": ((FEATS,), F16), "db": ((FEATS,), F16)},
        kind="cudnn_norm_backward", match=lambda key: key["mode"] == "layer",
        exact=engine_deterministic)


@each_combo
def test_rms_norm_backward(device, rng, combo):
    def inputs(r):
        h = _norm_inputs(r, "rms")
        h["dy"] = T.random_array((ROWS, FEATS), F16, rng=r)
        _, inv = cudnn.rms_norm(cl.to_device(h["x"]), cl.to_device(h["w"]), training=True)
        h["inv"] = inv.get()
        return h

    def rms_norm_backward(d, s):
        return cudnn.rms_norm_backward(d["dy"], d["x"], d["w"], d["inv"],
                                       out=given(d, "dx", "dw"), stream=s)

    run(combo, rng, inputs=inputs, call=rms_norm_backward, dtype="float16",
        outs={"dx": ((ROWS, FEATS), F16), "dw": ((FEATS,), F16)}, kind="cudnn_norm_backward",
        match=lambda key: key["mode"] == "rms", exact=engine_deterministic)
