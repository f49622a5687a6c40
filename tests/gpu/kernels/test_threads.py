"""The kernel wrappers under load and at the operand boundary.

- Eight threads, each on a stream of its own, call softmax, bias_gelu, channel_bias_act
  (channels-first and channels-last) and transpose many times with outputs allocated per
  call: every result must equal, bit for bit, the same call made serially on one stream.
  The wrappers keep no state; the launchers they reach are per thread, so nothing may leak
  from one thread's call into another's.
- Short-lived streams: a stream per request, used and closed, leaves no launcher behind that
  a later stream (the driver may reuse the handle) would run on.
- Host numpy inputs are refused with the operand path's one message,
  ``"<op>: <name> is a host numpy array; copy it to the GPU first with cudalibs.to_device()"``.
"""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import kernels as K
from cudalibs import testing as T

from .._threads import THREADS, match_serial

ROUNDS = 25
F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
BF16 = cl.dtypes.bfloat16


def _case(i):
    """The inputs of work item ``i``: shapes and dtypes vary, so that threads run different
    launch shapes (several launcher cache entries) at once."""
    rng = np.random.default_rng(1000 + i)
    dtype = (F32, F16, BF16)[i % 3]
    rows, cols = 3 + i % 5, 17 + 13 * (i % 7)
    n, c, h, w = 2, 3 + i % 4, 5, 4 + i % 3
    return {
        "dtype": dtype,
        "x": T.random_array((rows, cols), dtype, rng=rng),
        "bias": T.random_array((cols,), dtype, rng=rng),
        "y": T.random_array((n, c, h, w), dtype, rng=rng),
        "cbias": T.random_array((c,), dtype, rng=rng),
        "z": T.random_array((n, c, h, w), dtype, rng=rng),
    }


def _upload(case, stream):
    return {k: (v if k == "dtype" else cl.to_device(v, stream=stream)) for k, v in case.items()}


def _run(d, stream):
    """Every kernel under test once on ``stream``; the results as host arrays."""
    out = {}
    out["softmax"] = K.softmax(d["x"], stream=stream)
    out["bias_gelu"] = K.bias_gelu(d["x"], d["bias"], stream=stream)
    out["transpose"] = K.transpose(d["x"], stream=stream)
    # channel_bias_act works in place: give it fresh copies of y.
    nchw = d["y"].copy(stream=stream)
    out["cba_nchw"] = K.channel_bias_act(nchw, d["cbias"], z=d["z"], alpha2=0.5,
                                         activation="relu", stream=stream)
    # The same data channels-last: an NHWC buffer seen through (N, C, H, W) strides.
    nhwc = K.nchw_to_nhwc(d["y"], stream=stream)
    z_nhwc = K.nchw_to_nhwc(d["z"], stream=stream)
    out["cba_nhwc"] = K.channel_bias_act(nhwc.transpose(0, 3, 1, 2), d["cbias"],
                                         z=z_nhwc.transpose(0, 3, 1, 2), alpha2=-1.25,
                                         activation="identity", stream=stream)
    host = {k: v.get(stream=stream) for k, v in out.items()}
    return host


def _bits(a):
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def test_threads_on_their_own_streams_match_serial_bitwise(device):
    cases = [_case(i) for i in range(THREADS * 2)]
    upload = cl.Stream(device)
    uploaded = [_upload(c, upload) for c in cases]
    upload.sync()
    # two cases per thread, alternating, interleaved with the other threads'
    match_serial(device, [lambda s, d=d: _run(d, s) for d in uploaded], repeats=ROUNDS,
                 pick=lambda t, r: ((t, t + THREADS)[r % 2],))
    upload.close()


def test_serial_results_are_right(device):
    """The reference the threads are held to is itself correct (float64 numpy)."""
    from cudalibs.testing import ref

    s = cl.Stream(device)
    case = _case(4)
    got = _run(_upload(case, s), s)
    x64 = case["x"].astype(np.float64)
    dt = case["dtype"]
    T.assert_close(got["softmax"], ref.softmax(x64), dt)
    np.testing.assert_array_equal(_bits(got["transpose"]), _bits(case["x"].T))
    y64, z64, b64 = (case[k].astype(np.float64) for k in ("y", "z", "cbias"))
    want = np.maximum(y64 + 0.5 * z64 + b64[None, :, None, None], 0)
    T.assert_close(got["cba_nchw"], want, dt)
    want = y64 - 1.25 * z64 + b64[None, :, None, None]
    T.assert_close(np.ascontiguousarray(got["cba_nhwc"]), want, dt)
    s.close()


def test_stream_per_request_leaves_nothing_behind(device):
    """Streams made, used and closed one after another: each call gets the right answer,
    never a launcher prepared for a stream that no longer exists."""
    case = _case(1)
    ref_stream = cl.Stream(device)
    want = _run(_upload(case, ref_stream), ref_stream)
    for _ in range(20):
        s = cl.Stream(device)
        got = _run(_upload(case, s), s)
        s.close()
        for name in want:
            np.testing.assert_array_equal(_bits(got[name]), _bits(want[name]), err_msg=name)
    ref_stream.close()


# -- host data is refused with the one message --------------------------------------------------
_HOST_CALLS = [
    ("softmax", "x", lambda h, d: K.softmax(h)),
    ("log_softmax", "x", lambda h, d: K.log_softmax(h)),
    ("bias_gelu", "x", lambda h, d: K.bias_gelu(h, d[0])),
    ("bias_gelu", "bias", lambda h, d: K.bias_gelu(d, h[0])),
    ("bias_relu", "bias", lambda h, d: K.bias_relu(d, h[0])),
    ("add", "x", lambda h, d: K.add(h, d)),
    ("add", "y", lambda h, d: K.add(d, h)),
    ("add", "out", lambda h, d: K.add(d, d, out=h)),
    ("transpose", "x", lambda h, d: K.transpose(h)),
    ("nchw_to_nhwc", "x", lambda h, d: K.nchw_to_nhwc(h.reshape(1, 1, 4, 4))),
    ("matmul_tiled", "b", lambda h, d: K.matmul_tiled(d, h)),
    ("channel_bias_act", "y", lambda h, d: K.channel_bias_act(h.reshape(1, 4, 4),
                                                              d.reshape(-1)[:4])),
    ("channel_bias_act", "bias", lambda h, d: K.channel_bias_act(d.reshape(1, 4, 4), h[0])),
]


@pytest.mark.parametrize("op,name,call", _HOST_CALLS, ids=[f"{o}-{n}" for o, n, _ in _HOST_CALLS])
def test_host_numpy_inputs_get_the_operand_message(device, op, name, call):
    host = np.ones((4, 4), np.float32)
    dev = cl.to_device(host)
    text = (f"{op}: {name} is a host numpy array; copy it to the GPU first with "
            "cudalibs.to_device()")
    with pytest.raises(TypeError) as info:
        call(host, dev)
    assert str(info.value) == text
