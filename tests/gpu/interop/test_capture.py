"""Calls captured by a framework: ``torch.cuda.graph`` on a side stream, the way CUDA-graph
training steps are made.

A capturing stream is the one place a recorded relaunch must not be used (launching an
executable graph into a capture would capture the launch, not the library's work): the call
is captured as the library call itself, nothing fails, and the graph's replay on new inputs
gives, bit for bit, what the library call gives on them."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cublas, cudnn
from cudalibs import testing as T

from ._harness import (CALLS, bitwise_diff, cached_plan, engine_deterministic, host,
                       torch_tensor)

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def _gemm():
    def inputs(r):
        return {"a": T.random_array((64, 80), F32, rng=r),
                "b": T.random_array((80, 48), F32, rng=r)}

    return dict(inputs=inputs, outs={"out": ((64, 48), F32)}, kind="gemm",
                match=lambda key: key["out_shape"] == (64, 48),
                call=lambda d, s: (cublas.gemm(d["a"], d["b"], d["out"], stream=s),))


def _matmul():
    def inputs(r):
        return {"a": T.random_array((64, 96), F16, rng=r),
                "b": T.random_array((96, 128), F16, rng=r),
                "bias": T.random_array((128,), F16, rng=r)}

    return dict(inputs=inputs, outs={"out": ((64, 128), F16)}, kind="cublaslt_matmul",
                match=lambda key: key["epilogue"] == "gelu_bias" and key["out_layout"],
                call=lambda d, s: (cublas.matmul(d["a"], d["b"], bias=d["bias"],
                                                 epilogue="gelu_bias", out=d["out"],
                                                 stream=s),))


def _conv_forward():
    def inputs(r):
        # channels-last float16, physically NHWC (as permute(0, 3, 1, 2) shows it)
        return {"x": T.random_array((4, 12, 12, 16), F16, rng=r),
                "w": T.random_array((32, 3, 3, 16), F16, rng=r)}

    return dict(inputs=inputs, outs={"out": ((4, 12, 12, 32), F16)}, kind="cudnn_conv_forward",
                match=lambda key: key["x_shape"] == (4, 16, 12, 12) and key["out_strides"],
                call=lambda d, s: (cudnn.conv_forward(
                    d["x"].permute(0, 3, 1, 2), d["w"].permute(0, 3, 1, 2), padding=1,
                    algo="heuristic", out=d["out"].permute(0, 3, 1, 2), stream=s),))


def _layer_norm():
    def inputs(r):
        return {"x": T.random_array((64, 256), F16, rng=r), "w": T.random_array((256,), F16, rng=r),
                "b": T.random_array((256,), F16, rng=r)}

    return dict(inputs=inputs, outs={"out": ((64, 256), F16)}, kind="cudnn_norm_forward",
                match=lambda key: key["mode"] == "layer" and not key["training"],
                call=lambda d, s: (cudnn.layer_norm(d["x"], d["w"], d["b"], out=d["out"],
                                                    stream=s),))


CASES = {"gemm": _gemm, "matmul": _matmul, "conv_forward": _conv_forward,
         "layer_norm": _layer_norm}


def _upload(case, h):
    d = {k: torch_tensor(v) for k, v in h.items()}
    for k, (shape, dt) in case["outs"].items():
        d[k] = torch_tensor(np.full(shape, T.poison_value(dt), dt))
    return d


@pytest.mark.parametrize("op", list(CASES))
def test_captured_call_is_the_library_call(device, rng, op):
    case = CASES[op]()
    side = torch.cuda.Stream()
    d = _upload(case, case["inputs"](rng))
    torch.cuda.synchronize()
    # Warm-up on the side stream, as torch.cuda.graph requires: the plan, the stream's
    # workspace and handle binding, and the recorded relaunch all exist before the capture.
    with torch.cuda.stream(side):
        for _ in range(CALLS):
            case["call"](d, torch.cuda.current_stream())
    side.synchronize()
    plan = cached_plan(case["kind"], case["match"])
    warm = plan.relaunch_info()
    assert warm["recorded"] >= 1, f"{op}: not recorded before the capture: {warm}"

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=side):
        res = case["call"](d, torch.cuda.current_stream())
    # New inputs into the captured buffers, then the replay.
    h = case["inputs"](rng)
    for k, v in h.items():
        d[k].copy_(torch_tensor(v))
    g.replay()
    torch.cuda.synchronize()
    got = [host(r) for r in res]

    after = plan.relaunch_info()
    assert after["failed"] == 0, f"{op}: a relaunch failed: {after}"
    assert after["recorded"] == warm["recorded"], (warm, after)

    ref = _upload(case, h)
    torch.cuda.synchronize()
    rs = cl.Stream()
    with cl.option_context(relaunch=False):
        ref_res = case["call"](ref, rs)
    # The reference ran on a stream of its own: wait for it before reading its results.
    rs.sync()
    want = [host(r) for r in ref_res]
    rs.close()
    exact = engine_deterministic(plan) if op in ("conv_forward", "layer_norm") else True
    for j, (a, b) in enumerate(zip(got, want)):
        assert np.isfinite(a.astype(np.float64)).all(), f"{op}: output {j} left unwritten"
        if exact:
            diff = bitwise_diff(a, b)
            assert diff is None, f"{op}: the replay's output {j} differs: {diff}"
        else:
            T.assert_close(a, b.astype(np.float64), dtype=a.dtype, msg=f"{op} output {j}")
