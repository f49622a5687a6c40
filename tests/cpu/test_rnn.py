"""Recurrent layers without a GPU: the float64 references against finite differences and
against a per-sequence loop written independently; the cuDNN RNN and data descriptors built by
the real library (they need no device); every argument check of the RNN plan, which must fire
before any C call."""

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudalibs import dtypes
from cudalibs.cudnn import _lib
from cudalibs.cudnn.rnn import descriptors as RD, plan as R, weights as W
from cudalibs.driver.array import DeviceArray
from cudalibs.errors import ClosedError, CudnnError
from cudalibs.testing.ref import _rnn as ref

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def _params(rng, mode, input_size, hidden, layers, bi, proj, bias=True, scale=0.6):
    shapes = ref.rnn_param_shapes(mode, input_size, hidden, num_layers=layers,
                                  bidirectional=bi, proj_size=proj, bias=bias)
    return {k: rng.uniform(-scale, scale, s) for k, s in shapes.items()}


def _problem(rng, mode, layers, bi, proj, bias, batch_first, lengths, t=4, f=3, hidden=4):
    b = len(lengths) if lengths is not None else 3
    p = _params(rng, mode, f, hidden, layers, bi, proj, bias)
    d = 2 if bi else 1
    out = proj or hidden
    x = rng.uniform(-1, 1, (b, t, f) if batch_first else (t, b, f))
    hx = rng.uniform(-1, 1, (layers * d, b, out))
    cx = rng.uniform(-1, 1, (layers * d, b, hidden)) if mode == "lstm" else None
    return p, x, hx, cx


def _numeric_grad(arr, f, eps=1e-6):
    g = np.zeros_like(arr)
    for i in np.ndindex(arr.shape):
        keep = arr[i]
        arr[i] = keep + eps
        hi = f()
        arr[i] = keep - eps
        lo = f()
        arr[i] = keep
        g[i] = (hi - lo) / (2 * eps)
    return g


# -- the references ----------------------------------------------------------------------------
@settings(max_examples=12, deadline=None)
@given(mode=st.sampled_from(MODES), layers=st.integers(1, 2), bi=st.booleans(),
       proj=st.booleans(), bias=st.booleans(), batch_first=st.booleans(),
       lengths=st.one_of(st.none(), st.lists(st.integers(1, 4), min_size=1, max_size=3)),
       seed=st.integers(0, 2 ** 16))
def test_reference_backward_matches_finite_differences(mode, layers, bi, proj, bias,
                                                       batch_first, lengths, seed):
    rng = np.random.default_rng(seed)
    proj = 2 if proj and mode == "lstm" else 0
    p, x, hx, cx = _problem(rng, mode, layers, bi, proj, bias, batch_first, lengths)
    kw = dict(seq_lengths=lengths, batch_first=batch_first)
    y, hy, cy, cache = ref.rnn_forward(mode, x, p, hx, cx, return_cache=True, **kw)
    gy, ghy = rng.uniform(-1, 1, y.shape), rng.uniform(-1, 1, hy.shape)
    gcy = rng.uniform(-1, 1, cy.shape) if cy is not None else None

    def loss():
        y2, hy2, cy2 = ref.rnn_forward(mode, x, p, hx, cx, **kw)
        return (y2 * gy).sum() + (hy2 * ghy).sum() + ((cy2 * gcy).sum() if gcy is not None
                                                       else 0.0)

    dx, dhx, dcx, dp = ref.rnn_backward(cache, gy, ghy, gcy)
    checks = [("x", x, dx), ("hx", hx, dhx)] + ([("cx", cx, dcx)] if cx is not None else [])
    checks += [(k, p[k], dp[k]) for k in p]
    assert set(dp) == set(p)
    for name, arr, analytic in checks:
        numeric = _numeric_grad(arr, loss)
        err = np.abs(numeric - analytic).max()
        assert err < 1e-6 * max(1.0, np.abs(numeric).max()), (name, err)


def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def _step(mode, w, xt, h, c):
    """One cell step on vectors, written out gate by gate."""
    hid = w["weight_hh"].shape[0] // ref.rnn_gates(mode)
    gi = w["weight_ih"] @ xt + w.get("bias_ih", 0.0)
    gh = w["weight_hh"] @ h + w.get("bias_hh", 0.0)
    gate = [slice(k * hid, (k + 1) * hid) for k in range(4)]
    if mode == "lstm":
        i, f = _sig(gi[gate[0]] + gh[gate[0]]), _sig(gi[gate[1]] + gh[gate[1]])
        g, o = np.tanh(gi[gate[2]] + gh[gate[2]]), _sig(gi[gate[3]] + gh[gate[3]])
        c = f * c + i * g
        h = o * np.tanh(c)
        if "weight_hr" in w:
            h = w["weight_hr"] @ h
        return h, c
    if mode == "gru":
        r, z = _sig(gi[gate[0]] + gh[gate[0]]), _sig(gi[gate[1]] + gh[gate[1]])
        n = np.tanh(gi[gate[2]] + r * gh[gate[2]])
        return (1 - z) * n + z * h, c
    a = gi + gh
    return (np.tanh(a) if mode == "rnn_tanh" else np.maximum(a, 0)), c


def _loop(mode, x, p, hx, cx, lengths, layers, dirs):
    """Each sequence on its own, truncated to its length, reversed by slicing."""
    t, b, _ = x.shape
    out_size = hx.shape[2]
    y = np.zeros((t, b, dirs * out_size))
    hy, cy = np.zeros_like(hx), (np.zeros_like(cx) if cx is not None else None)
    for n in range(b):
        seq = x[:lengths[n], n]
        for layer in range(layers):
            outs = []
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                w = {k[:-len(sfx)]: v for k, v in p.items() if k.endswith(sfx)}
                k = layer * dirs + d
                h, c = hx[k, n], (cx[k, n] if cx is not None else None)
                steps = seq if d == 0 else seq[::-1]
                res = []
                for xt in steps:
                    h, c = _step(mode, w, xt, h, c)
                    res.append(h)
                hy[k, n] = h
                if cy is not None:
                    cy[k, n] = c
                res = np.array(res)
                outs.append(res if d == 0 else res[::-1])
            seq = np.concatenate(outs, axis=1)
        y[:lengths[n], n] = seq
    return y, hy, cy


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bi", [False, True])
def test_reference_forward_matches_a_per_sequence_loop(mode, bi):
    rng = np.random.default_rng(7)
    lengths = [5, 2, 4, 1]
    proj = 3 if mode == "lstm" else 0
    p, x, hx, cx = _problem(rng, mode, 2, bi, proj, True, False, lengths, t=5, f=3, hidden=5)
    y, hy, cy = ref.rnn_forward(mode, x, p, hx, cx, seq_lengths=lengths)
    y2, hy2, cy2 = _loop(mode, x, p, hx, cx, lengths, 2, 2 if bi else 1)
    np.testing.assert_allclose(y, y2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(hy, hy2, rtol=1e-12, atol=1e-12)
    if mode == "lstm":
        np.testing.assert_allclose(cy, cy2, rtol=1e-12, atol=1e-12)
    # batch-first is the same computation on transposed data
    yb, hyb, _ = ref.rnn_forward(mode, x.transpose(1, 0, 2), p, hx, cx, seq_lengths=lengths,
                                 batch_first=True)
    np.testing.assert_allclose(yb, y.transpose(1, 0, 2), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(hyb, hy, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["rnn_relu", "lstm"])
def test_reference_storage_rounds_each_state(mode):
    rng = np.random.default_rng(7)
    spec = dict(input_size=5, hidden_size=6, num_layers=2, bias=True)
    p = {k: rng.uniform(-1, 1, s) for k, s in ref.rnn_param_shapes(mode, **spec).items()}
    x = rng.uniform(-1, 1, (4, 3, 5))
    y, hy, _ = ref.rnn_forward(mode, x, p)
    ys, hys, _ = ref.rnn_forward(mode, x, p, storage=np.float16)
    # every state is a float16 value, and close to the unrounded network's
    for v in (ys, hys):
        assert np.array_equal(v, v.astype(np.float16).astype(np.float64))
    np.testing.assert_allclose(ys, y, rtol=0, atol=1e-2)
    assert not np.array_equal(ys, y)
    y64, _, _ = ref.rnn_forward(mode, x, p, storage=np.float64)
    assert np.array_equal(y64, y)


def test_reference_checks_its_inputs():
    rng = np.random.default_rng(0)
    p, x, hx, cx = _problem(rng, "lstm", 1, False, 0, True, False, None)
    with pytest.raises(ValueError, match="seq_lengths"):
        ref.rnn_forward("lstm", x, p, seq_lengths=[1, 2, 9])
    with pytest.raises(ValueError, match="hx must have shape"):
        ref.rnn_forward("lstm", x, p, hx[:, :2])
    with pytest.raises(ValueError, match="mode"):
        ref.rnn_forward("elman", x, p)
    with pytest.raises(ValueError, match="LSTM option"):
        ref.rnn_param_shapes("gru", 3, 4, proj_size=2)


# -- the spec and the parameter names ----------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bi", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_spec_parameters_are_torch_names_and_shapes(mode, bi, bias):
    proj = 3 if mode == "lstm" else 0
    spec = W.rnn_spec(mode, 7, 6, num_layers=3, bidirectional=bi, proj_size=proj, bias=bias)
    names = [(n, shape) for n, _, _, shape in spec.params()]
    want = list(ref.rnn_param_shapes(mode, 7, 6, num_layers=3, bidirectional=bi,
                                     proj_size=proj, bias=bias).items())
    assert names == want
    pseudo = [p for _, p, _, _ in spec.params()]
    assert pseudo == sorted(pseudo) and max(pseudo) == spec.layer_dirs - 1
    assert spec.y_size == (2 if bi else 1) * (proj or 6)


def test_spec_defaults_and_math():
    s32 = W.rnn_spec("lstm", 4, 8)
    assert s32.math == "fma" and s32.math_type == _lib.CUDNN_FMA_MATH
    assert s32.math_prec == _lib.CUDNN_DATA_FLOAT and s32.data_type == _lib.CUDNN_DATA_FLOAT
    s16 = W.rnn_spec("gru", 4, 8, dtype=np.float16)
    assert s16.math == "tensor_op" and s16.math_type == _lib.CUDNN_TENSOR_OP_MATH
    sbf = W.rnn_spec("gru", 4, 8, dtype=dtypes.bfloat16)
    assert sbf.data_type == _lib.CUDNN_DATA_BFLOAT16 and sbf.math_prec == _lib.CUDNN_DATA_FLOAT
    s64 = W.rnn_spec("rnn_tanh", 4, 8, dtype=np.float64)
    assert s64.math_prec == _lib.CUDNN_DATA_DOUBLE
    assert "2 layers bidirectional" in W.rnn_spec("lstm", 4, 8, num_layers=2,
                                                   bidirectional=True).describe()


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(mode="elman"), ValueError, "mode must be one of"),
    (dict(input_size=0), ValueError, "input_size must be a positive"),
    (dict(hidden_size=2.5), TypeError, "hidden_size must be an int"),
    (dict(num_layers=True), ValueError, "num_layers"),
    (dict(mode="gru", proj_size=2), ValueError, "LSTM option"),
    (dict(proj_size=8), ValueError, "smaller than hidden_size"),
    (dict(proj_size=-1), ValueError, "proj_size must be >= 0"),
    (dict(dropout=1.0), ValueError, r"dropout must be in \[0, 1\)"),
    (dict(dtype=np.int32), TypeError, "dtype must be one of"),
    (dict(math="tf33"), ValueError, "math must be one of"),
])
def test_spec_refuses_bad_options(kwargs, exc, match):
    args = dict(mode="lstm", input_size=4, hidden_size=8)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        W.rnn_spec(args.pop("mode"), args.pop("input_size"), args.pop("hidden_size"), **args)


@pytest.mark.parametrize("kwargs, match", [
    (dict(algo="fastest"), "algo must be"),
    (dict(algo=()), "names no algorithm"),
    (dict(seq_len=8), "together"),
    (dict(seq_len=0, batch_size=2), "seq_len must be a positive"),
    (dict(mode="gru", proj_size=2), "LSTM option"),
])
def test_plan_refuses_bad_options_before_any_c_call(kwargs, match, monkeypatch):
    # No device is touched: a call into the driver would fail the test.
    monkeypatch.setattr(R, "as_device", lambda d: pytest.fail("reached the device"))
    args = dict(mode="lstm", input_size=4, hidden_size=8)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        R.RNN(args.pop("mode"), args.pop("input_size"), args.pop("hidden_size"), **args)


# -- descriptors, built by the real library without a GPU ------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_rnn_descriptor_round_trip(mode, dtype):
    proj = 5 if mode == "lstm" else 0
    spec = W.rnn_spec(mode, 12, 16, num_layers=2, bidirectional=True, proj_size=proj,
                      bias=mode != "gru", dtype=dtypes.lookup(dtype).numpy)
    with RD.RNNDescriptor(spec, _lib.CUDNN_RNN_ALGO_STANDARD) as d:
        got = d.read()
        assert "standard" in repr(d)
    assert d.closed
    assert got == {"algo": 0, "cellMode": spec.cell,
                   "biasMode": _lib.CUDNN_RNN_DOUBLE_BIAS if spec.bias else _lib.CUDNN_RNN_NO_BIAS,
                   "dirMode": _lib.CUDNN_BIDIRECTIONAL, "inputMode": _lib.CUDNN_LINEAR_INPUT,
                   "dataType": spec.data_type, "mathPrec": _lib.CUDNN_DATA_FLOAT,
                   "mathType": spec.math_type, "inputSize": 12, "hiddenSize": 16,
                   # cuDNN's "no projection" is projSize == hiddenSize
                   "projSize": proj or 16, "numLayers": 2,
                   "auxFlags": _lib.CUDNN_RNN_PADDED_IO_ENABLED, "dropoutDesc": None}


def test_persistent_algorithm_refuses_a_projection():
    spec = W.rnn_spec("lstm", 12, 16, proj_size=8)
    with pytest.raises(CudnnError) as info:
        RD.RNNDescriptor(spec, _lib.CUDNN_RNN_ALGO_PERSIST_STATIC)
    assert info.value.status == _lib.CUDNN_STATUS_NOT_SUPPORTED


def test_rnn_data_descriptor_round_trip_and_limits():
    with RD.RNNDataDescriptor(_lib.CUDNN_DATA_HALF, _lib.CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                             6, 3, 10, (6, 2, 4)) as d:
        dt, layout, t, b, v = (ctypes.c_int() for _ in range(5))
        lens, fill = (ctypes.c_int * 3)(), ctypes.c_double(7.0)
        assert _lib.get().cudnnGetRNNDataDescriptor(
            d.raw, ctypes.byref(dt), ctypes.byref(layout), ctypes.byref(t), ctypes.byref(b),
            ctypes.byref(v), 3, lens, ctypes.byref(fill)) == 0
        assert (dt.value, layout.value, t.value, b.value, v.value) == (
            _lib.CUDNN_DATA_HALF, _lib.CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, 6, 3, 10)
        assert list(lens) == [6, 2, 4]
        assert np.frombuffer(bytes(fill)[:2], np.float16)[0] == 0   # the padding symbol
    # the library checks what the plan checks first: a length beyond T
    with pytest.raises(CudnnError, match="maxSeqLength"):
        RD.RNNDataDescriptor(_lib.CUDNN_DATA_FLOAT, _lib.CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                            4, 2, 8, (4, 5))


def test_adv_sublibrary_matches():
    assert _lib.get().cudnnAdvVersionCheck() == 0


# -- argument checks of a plan, before any C call --------------------------------------------------
class _FakeDevice:
    ordinal = 0
    compute_capability = (9, 0)


_DEV = _FakeDevice()


def _fake(shape, dtype=np.float32, strides=None, dev=None):
    dt = dtypes.lookup(dtype)
    if strides is None:
        strides, acc = [], dt.itemsize
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= n
    return DeviceArray._view(0x10000, tuple(shape), tuple(strides), dt, dev or _DEV, None, None)


def _plan(mode="lstm", batch_first=False, **kw):
    """A plan object with its checked options only: enough for every check of a call."""
    p = object.__new__(R.RNN)
    p._spec = W.rnn_spec(mode, 4, 6, num_layers=2, batch_first=batch_first, **kw)
    p._init_plan(_DEV)
    p._inference_only, p._example, p._refused = False, None, {}
    p._borrow()
    return p


@pytest.mark.parametrize("call, exc, match", [
    (lambda p: p._inputs("op", _fake((5, 3, 5)), None, None, None, None), ValueError,
     "x has 5 features; the plan was made for input_size 4"),
    (lambda p: p._inputs("op", _fake((5, 3, 4), np.float16), None, None, None, None),
     TypeError, "x has dtype float16"),
    (lambda p: p._inputs("op", _fake((15, 4)), None, None, None, None), ValueError,
     "x must be 3-D"),
    (lambda p: p._inputs("op", _fake((5, 3, 4), strides=(16, 80, 4)), None, None, None, None),
     ValueError, "C-contiguous"),
    (lambda p: p._inputs("op", _fake((5, 3, 4)), _fake((2, 2, 6)), None, None, None),
     ValueError, r"hx must have shape \(2, 3, 6\)"),
    (lambda p: p._inputs("op", _fake((5, 3, 4)), None, _fake((2, 3, 5)), None, None),
     ValueError, r"cx must have shape \(2, 3, 6\)"),
    (lambda p: p._inputs("op", _fake((5, 3, 4)), None, None, [5, 6, 1], None), ValueError,
     r"in \[1, 5\]"),
    (lambda p: p._inputs("op", _fake((5, 3, 4)), None, None, [5, 0, 1], None), ValueError,
     r"in \[1, 5\]"),
    (lambda p: p._inputs("op", _fake((5, 3, 4)), None, None, [5, 1], None), ValueError,
     "3 integers"),
    (lambda p: p._inputs("op", _fake((5, 3, 4)), None, None, [5.0, 1.0, 2.0], None),
     ValueError, "3 integers"),
    (lambda p: p._inputs("op", _fake((5, 3, 4)), None, None, _fake((3,), np.int32), None),
     TypeError, "host integers"),
    (lambda p: p._inputs("op", _fake((5, 3, 4)), _fake((2, 3, 6), dev=_Other()), None, None,
                         None), ValueError, "device 1"),
])
def test_call_checks_fire_before_any_c_call(call, exc, match):
    with pytest.raises(exc, match=match):
        call(_plan())


class _Other:
    ordinal = 1
    compute_capability = (9, 0)


def test_gru_takes_no_cell_state_and_batch_first_reads_b_t():
    with pytest.raises(ValueError, match="cx belongs to an LSTM"):
        _plan("gru")._inputs("op", _fake((5, 3, 4)), None, _fake((2, 3, 6)), None, None)
    # batch-first: (B, T, F), so B = 5 and hx has batch 5
    with pytest.raises(ValueError, match=r"hx must have shape \(2, 5, 6\)"):
        _plan(batch_first=True)._inputs("op", _fake((5, 3, 4)), _fake((2, 3, 6)), None, None,
                                        None)
    with pytest.raises(ValueError, match=r"in \[1, 3\]"):
        _plan(batch_first=True)._inputs("op", _fake((5, 3, 4)), None, None, [3, 4, 1, 1, 1],
                                        None)


def test_lengths_all_full_share_the_unpadded_entry():
    assert R.RNN._lengths([4, 4, 4], 4, 3, "op") is None
    assert R.RNN._lengths(np.array([4, 1, 2], np.int64), 4, 3, "op") == (4, 1, 2)


def test_backward_checks_the_state():
    p, q = _plan(), _plan()
    st = RD.RNNState()
    st.plan, st.stage, st.algo, st.seq_len, st.batch = p, "forward", "standard", 5, 3
    with pytest.raises(ValueError, match="run backward_data on this state first"):
        p.backward_weights(st)
    with pytest.raises(ValueError, match="another RNN plan"):
        q.backward_data(st, _fake((5, 3, 6)))
    with pytest.raises(TypeError, match="RNNState"):
        p.backward_data((1, 2), _fake((5, 3, 6)))
    for stage in ("backward_data", "backward_weights"):
        st.stage = stage
        with pytest.raises(ValueError, match=f"{stage} already ran on this state"):
            p.backward_data(st, _fake((5, 3, 6)))
    with pytest.raises(ValueError, match="backward_weights already ran"):
        p.backward_weights(st)
    p.close()
    with pytest.raises(ClosedError):
        p.backward_data(st, _fake((5, 3, 6)))


def test_weights_load_checks_everything_before_copying():
    spec = W.rnn_spec("gru", 3, 4, bidirectional=True)
    layout, off = {}, 0
    for name, _, _, shape in spec.params():
        layout[name] = (off, shape)
        off += int(np.prod(shape))
    w = W.RNNWeights(_fake((off,)), layout)
    assert list(w) == [n for n, *_ in spec.params()] and len(w) == 8
    assert w["weight_ih_l0_reverse"].shape == (12, 3)
    assert w["bias_hh_l0"]._ptr == 0x10000 + 4 * layout["bias_hh_l0"][0]
    assert "RNNWeights float32" in repr(w)
    good = {n: np.ones(s, np.float32) for n, (_, s) in layout.items()}
    with pytest.raises(KeyError, match="no parameter"):
        w["weight_hr_l0"]
    with pytest.raises(KeyError, match="missing"):
        w.load({k: v for k, v in good.items() if k != "bias_ih_l0"})
    with pytest.raises(KeyError, match="unexpected"):
        w.load({**good, "weight_ih_l1": np.ones((12, 8))})
    with pytest.raises(ValueError, match=r"weight_hh_l0 has shape \(12, 5\)"):
        w.load({**good, "weight_hh_l0": np.ones((12, 5), np.float32)})
    with pytest.raises(TypeError, match="floating"):
        w.load({**good, "bias_ih_l0": np.ones(12, np.int64)})
