"""The cuDNN RNN plan on the device: LSTM (with projection), GRU, tanh / ReLU cells, stacked,
bidirectional, sequence- or batch-first, padded batches of sequences of different lengths, in
float32 / float16 / bfloat16 -- forward, backward data and backward weights against the float64
reference and against torch.nn.LSTM / GRU / RNN loaded with the same weights through the
plan's views; every algorithm the plan offers; autotune and the tuning store; graph capture;
threads against serial calls bit for bit; bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import testing as T
from cudalibs.cudnn.rnn import RNN, RNNState
from cudalibs.cudnn.rnn.weights import RNNWeights
from cudalibs.runtime import plan as plan_mod
from cudalibs.errors import ClosedError
from cudalibs.testing.ref import _rnn as ref

from ._helpers import GPU, np_dtype, poisoned
from .._sizes import bound
from .._threads import match_serial

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
#: Hidden sizes of the property tests (wide: the sizes of real recurrent layers too).
HIDDEN = bound((8,), (8, 256, 512))


@pytest.fixture()
def store(tmp_path, monkeypatch):
    path = tmp_path / "tuning.json"
    monkeypatch.setenv("CUDALIBS_TUNING_CACHE", str(path))
    return path


def _weights(rnn, rng):
    """Random nonzero host parameters of the plan's dtype (PyTorch's scale), loaded."""
    k = 1.0 / np.sqrt(rnn.spec.hidden_size)
    dt = rnn.spec.dtype
    params = {name: T.random_array(v.shape, dt, rng=rng, low=-k, high=k)
              for name, v in rnn.parameters().items()}
    rnn.load_torch_state(params)
    return params


def _case(rng, mode, layers, bi, proj, bias, batch_first, dtype, lengths, t, b, f=6, h=8):
    rnn = RNN(mode, f, h, num_layers=layers, bidirectional=bi, proj_size=proj, bias=bias,
              batch_first=batch_first, dtype=np_dtype(dtype))
    params = _weights(rnn, rng)
    dt = rnn.spec.dtype
    x_shape = (b, t, f) if batch_first else (t, b, f)
    hs, cs = (layers * (2 if bi else 1), b, proj or h), (layers * (2 if bi else 1), b, h)
    xh = T.random_array(x_shape, dt, rng=rng)
    hxh = T.random_array(hs, dt, rng=rng)
    cxh = T.random_array(cs, dt, rng=rng) if mode == "lstm" else None
    return rnn, params, xh, hxh, cxh


def _dev(a):
    return cl.to_device(a) if a is not None else None


def _close(got, want, other, dt, msg):
    """``got`` against the reference ``want`` within ``dt``'s tolerance, widened by how far
    ``want`` moves when the network keeps its states unrounded (``other``; None: not at all).

    A ReLU network in half precision has no saturation to damp a rounded state: an output
    that cancelled, or a gradient through a unit near zero, moves by more than the tolerance
    of its own size when a state rounds.  The spread between the two references measures
    that sensitivity for this very input; an error several times larger is a bug."""
    if other is None:
        T.assert_close(got, want, dt, msg=msg)
        return
    a = np.asarray(got.get() if hasattr(got, "get") else got, np.float64)
    e, spread = np.asarray(want, np.float64), np.abs(np.asarray(want, np.float64) - other)
    tol = T.TOLERANCES[np.dtype(dt).name]
    err = np.linalg.norm(a - e)
    assert err <= tol * np.linalg.norm(e) + 4 * np.linalg.norm(spread), (
        f"{msg}: error {err:.3e} beyond {tol:g} x |expected| {np.linalg.norm(e):.3e} + 4 x "
        f"rounding spread {np.linalg.norm(spread):.3e}")
    rms = np.sqrt(np.mean(e ** 2)) if e.size else 0.0
    T.assert_within(a, e, 10 * tol * (np.abs(e) + rms) + 4 * spread, msg=msg)


def _pad_mask(lengths, t, b, batch_first):
    """True at the padded steps of a (T, B, ...) / (B, T, ...) array."""
    if lengths is None:
        return None
    steps = np.arange(t)[:, None] >= np.asarray(lengths)[None, :]
    return steps.T if batch_first else steps


# -- against the float64 reference ----------------------------------------------------------------
@GPU
@given(mode=st.sampled_from(MODES), layers=st.integers(1, 2), bi=st.booleans(),
       proj=st.booleans(), bias=st.booleans(), batch_first=st.booleans(),
       dtype=st.sampled_from(["float32", "float16", "bfloat16"]), t=st.integers(1, 6),
       b=st.integers(1, 5), hidden=st.sampled_from(HIDDEN), data=st.data())
def test_forward_and_backward_match_reference(device, mode, layers, bi, proj, bias,
                                              batch_first, dtype, t, b, hidden, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))
    lengths = data.draw(st.one_of(st.none(), st.lists(st.integers(1, t), min_size=b,
                                                      max_size=b)))
    with_states = data.draw(st.booleans())
    proj = 4 if proj and mode == "lstm" else 0
    rnn, params, xh, hxh, cxh = _case(rng, mode, layers, bi, proj, bias, batch_first, dtype,
                                      lengths, t, b, h=hidden)
    if not with_states:
        hxh = cxh = None
    dt = rnn.spec.dtype
    x, hx, cx = _dev(xh), _dev(hxh), _dev(cxh)
    ys, hs, cs = rnn._io_shapes(t, b)[1], *rnn._state_shapes(b)
    out = (poisoned(ys, dt), poisoned(hs, dt), poisoned(cs, dt) if mode == "lstm" else None)
    y, hy, cy, state = rnn.forward(x, hx, cx, seq_lengths=lengths, training=True, out=out)
    assert y is out[0] and hy is out[1] and isinstance(state, RNNState)
    # A ReLU network's gradient takes or drops a whole term where a pre-activation lies within
    # rounding of zero; in half precision the library computes from states stored rounded, so
    # the reference does too, and its masks are the library's.
    storage = xh.dtype if mode == "rnn_relu" and xh.dtype.itemsize == 2 else None
    ry, rhy, rcy, cache = ref.rnn_forward(mode, xh, params, hxh, cxh, seq_lengths=lengths,
                                          batch_first=batch_first, return_cache=True,
                                          storage=storage)
    what = f"{rnn!r} lengths={lengths}"
    # A ReLU network is sums of products all the way through, with nothing that saturates:
    # in half precision each value errs relative to the same network run on magnitudes
    # (the bound of first-order error analysis), not to itself, which may have cancelled.
    py = phy = pcache = None
    if storage is not None:
        py, phy, _, pcache = ref.rnn_forward(mode, xh, params, hxh, cxh, seq_lengths=lengths,
                                             batch_first=batch_first, return_cache=True)
    _close(y, ry, py, dt, f"y {what}")
    _close(hy, rhy, phy, dt, f"hy {what}")
    if mode == "lstm":
        T.assert_close(cy, rcy, dt, msg=f"cy {what}")
    else:
        assert cy is None
    pad = _pad_mask(lengths, t, b, batch_first)
    if pad is not None:
        assert (np.asarray(y.get(), np.float64)[pad] == 0).all(), "y is not zero at padding"
    # inference gives the same outputs
    yi, hyi, _ = rnn.forward(x, hx, cx, seq_lengths=lengths)
    _close(yi, ry, py, dt, f"inference y {what}")
    _close(hyi, rhy, phy, dt, f"inference hy {what}")

    dyh = T.random_array(ys, dt, rng=rng)
    dhyh = T.random_array(hs, dt, rng=rng)
    dcyh = T.random_array(cs, dt, rng=rng) if mode == "lstm" else None
    dout = (poisoned(xh.shape, dt), poisoned(hs, dt), poisoned(cs, dt) if mode == "lstm"
            else None)
    dx, dhx, dcx = rnn.backward_data(state, _dev(dyh), _dev(dhyh), _dev(dcyh), out=dout)
    rdx, rdhx, rdcx, rdp = ref.rnn_backward(cache, dyh, dhyh, dcyh)
    pdx = pdhx = None
    pdp = {}
    if pcache is not None:
        pdx, pdhx, _, pdp = ref.rnn_backward(pcache, dyh, dhyh, dcyh)
    _close(dx, rdx, pdx, dt, f"dx {what}")
    _close(dhx, rdhx, pdhx, dt, f"dhx {what}")
    if mode == "lstm":
        T.assert_close(dcx, rdcx, dt, msg=f"dcx {what}")
    with pytest.raises(ValueError, match="backward_data already ran"):
        rnn.backward_data(state, _dev(dyh))
    # a new gradient space, or one that already holds something: added to, or overwritten
    how = data.draw(st.sampled_from(["new", "add", "set"]))
    if how == "new":
        dw, base = rnn.backward_weights(state), {k: 0.0 for k in rdp}
    else:
        dw = rnn.new_weights()
        base = {k: T.random_array(v.shape, dt, rng=rng) for k, v in dw.items()}
        dw.load(base)
        assert rnn.backward_weights(state, dw, accumulate=how == "add") is dw
        if how == "set":
            base = {k: 0.0 for k in rdp}
    assert isinstance(dw, RNNWeights) and list(dw) == list(rdp)
    for name, g in dw.items():
        want = rdp[name] + np.asarray(base[name], np.float64)
        other = pdp[name] + np.asarray(base[name], np.float64) if name in pdp else None
        _close(g, want, other, dt, f"d{name} ({how}) {what}")
    rnn.close()


# -- against torch ------------------------------------------------------------------------------------
def _torch_module(torch, rnn):
    s = rnn.spec
    kw = dict(input_size=s.input_size, hidden_size=s.hidden_size, num_layers=s.num_layers,
              bias=s.bias, batch_first=s.batch_first, bidirectional=s.dirs == 2)
    if s.mode == "lstm":
        cls = torch.nn.LSTM
        kw["proj_size"] = s.proj_size
    elif s.mode == "gru":
        cls = torch.nn.GRU
    else:
        cls = torch.nn.RNN
        kw["nonlinearity"] = s.mode[4:]
    tdt = {"float32": torch.float32, "float16": torch.float16}[str(s.dtype)]
    return cls(**kw).to(device="cuda", dtype=tdt)


def _both(dt) -> float:
    """The bound for our result against torch's: both are rounded in ``dt``, so each may sit
    the dtype's tolerance away from the exact value (one float32 dhx of a 1-step, batch-1
    bidirectional tanh RNN differed by 1.03e-5)."""
    return 2 * T.TOLERANCES[cl.dtypes.lookup(dt).name]


@GPU
@given(mode=st.sampled_from(MODES), layers=st.integers(1, 2), bi=st.booleans(),
       proj=st.booleans(), batch_first=st.booleans(),
       dtype=st.sampled_from(["float32", "float16"]), t=st.integers(1, 7),
       b=st.integers(1, 5), hidden=st.sampled_from(HIDDEN), data=st.data())
def test_matches_torch_with_the_same_weights(device, mode, layers, bi, proj, batch_first,
                                              dtype, t, b, hidden, data):
    torch = pytest.importorskip("torch")
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))
    lengths = data.draw(st.one_of(st.none(), st.lists(st.integers(1, t), min_size=b,
                                                      max_size=b)))
    proj = 3 if proj and mode == "lstm" else 0
    rnn, params, xh, hxh, cxh = _case(rng, mode, layers, bi, proj, True, batch_first, dtype,
                                      lengths, t, b, h=hidden)
    dt = rnn.spec.dtype
    m = _torch_module(torch, rnn)
    # torch's weights into ours through the views: its parameters, device to device
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.copy_(torch.from_numpy(params[name].astype(np.float32)))
    rnn.load_torch_state({k: v.detach() for k, v in m.state_dict().items()})
    torch.cuda.synchronize()
    old_tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False      # float32 in full precision on both sides
    try:
        tx = torch.from_numpy(xh.astype(np.float32)).cuda().to(m.weight_ih_l0.dtype)
        th = torch.from_numpy(hxh.astype(np.float32)).cuda().to(tx.dtype)
        tc = torch.from_numpy(cxh.astype(np.float32)).cuda().to(tx.dtype) if cxh is not None \
            else None
        for v in (tx, th, tc):
            if v is not None:
                v.requires_grad_(True)
        state0 = (th, tc) if mode == "lstm" else th
        if lengths is not None:
            packed = pack_padded_sequence(tx, torch.tensor(lengths), batch_first=batch_first,
                                          enforce_sorted=False)
            tout, tstate = m(packed, state0)
            ty, _ = pad_packed_sequence(tout, batch_first=batch_first, total_length=t)
        else:
            ty, tstate = m(tx, state0)
        thy, tcy = tstate if mode == "lstm" else (tstate, None)
        x, hx, cx = cl.from_dlpack(tx.detach()), cl.from_dlpack(th.detach()), \
            (cl.from_dlpack(tc.detach()) if tc is not None else None)
        y, hy, cy, state = rnn.forward(x, hx, cx, seq_lengths=lengths, training=True)
        what = f"{rnn!r} lengths={lengths}"
        T.assert_close(y, ty.detach().cpu().double().numpy(), dt,
                       rtol=_both(dt), msg=f"y vs torch {what}")
        T.assert_close(hy, thy.detach().cpu().double().numpy(), dt,
                       rtol=_both(dt), msg=f"hy vs torch {what}")
        if mode == "lstm":
            T.assert_close(cy, tcy.detach().cpu().double().numpy(), dt, msg=f"cy {what}")
        if dtype == "float32":   # the reference's semantics are torch's
            ry, rhy, _ = ref.rnn_forward(mode, xh, params, hxh, cxh, seq_lengths=lengths,
                                         batch_first=batch_first)
            T.assert_close(ty.detach().cpu().double().numpy(), ry, dt, msg=f"torch vs ref {what}")
            T.assert_close(thy.detach().cpu().double().numpy(), rhy, dt, msg="torch hy vs ref")
        dyh = T.random_array(y.shape, dt, rng=rng)
        dhyh = T.random_array(hy.shape, dt, rng=rng)
        dcyh = T.random_array(cy.shape, dt, rng=rng) if cy is not None else None
        tdy, tdhy = (torch.from_numpy(a.astype(np.float32)).cuda().to(tx.dtype)
                     for a in (dyh, dhyh))
        loss = (ty * tdy).sum() + (thy * tdhy).sum()
        if tcy is not None:
            tdcy = torch.from_numpy(dcyh.astype(np.float32)).cuda().to(tx.dtype)
            loss = loss + (tcy * tdcy).sum()
        inputs = [tx, th] + ([tc] if tc is not None else [])
        names = [n for n, _ in m.named_parameters()]
        grads = torch.autograd.grad(loss, inputs + [p for _, p in m.named_parameters()])
        dx, dhx, dcx = rnn.backward_data(state, _dev(dyh), _dev(dhyh), _dev(dcyh))
        T.assert_close(dx, grads[0].cpu().double().numpy(), dt,
                       rtol=_both(dt), msg=f"dx vs torch {what}")
        T.assert_close(dhx, grads[1].cpu().double().numpy(), dt,
                       rtol=_both(dt), msg=f"dhx vs torch {what}")
        if tc is not None:
            T.assert_close(dcx, grads[2].cpu().double().numpy(), dt,
                           rtol=_both(dt), msg=f"dcx vs torch {what}")
        dw = rnn.backward_weights(state)
        assert sorted(dw) == sorted(names)
        for name, g in zip(names, grads[len(inputs):]):
            # Twice _both: a weight gradient sums over steps, batch and (in the second layer)
            # both directions' outputs, and the two libraries sum in different orders (a
            # float32 dbias of a 2-layer bidirectional tanh RNN, 1 step, batch 4, hidden 8,
            # differed by 2.54e-5).  A weight in the wrong place differs by far more.
            T.assert_close(dw[name], g.cpu().double().numpy(), dt,
                           rtol=2 * _both(dt), msg=f"d{name} vs torch")
    finally:
        torch.backends.cudnn.allow_tf32 = old_tf32
        rnn.close()


# -- the weight space ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_views_are_disjoint_torch_shaped_and_inside_the_space(device, mode):
    proj = 5 if mode == "lstm" else 0
    rnn = RNN(mode, 7, 12, num_layers=3, bidirectional=True, proj_size=proj)
    params = rnn.parameters()
    want = ref.rnn_param_shapes(mode, 7, 12, num_layers=3, bidirectional=True,
                                proj_size=proj)
    assert [(k, v.shape) for k, v in params.items()] == list(want.items())
    space = rnn.weights.space
    spans = sorted((v.ptr, v.ptr + v.nbytes) for v in params.values())
    assert spans[0][0] >= space.ptr and spans[-1][1] <= space.ptr + space.nbytes
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "views overlap"
    assert rnn.weight_space_bytes == space.nbytes
    # the initial weights are PyTorch's: uniform in +-1/sqrt(H), none zero in a matrix
    w = params["weight_ih_l0"].get().astype(np.float64)
    assert np.abs(w).max() <= 1 / np.sqrt(12) and (w != 0).all()
    # a write into one view changes that parameter only
    before = rnn.weights.to_host()
    params["weight_hh_l1_reverse"].fill(0.5)
    after = rnn.weights.to_host()
    for k in before:
        same = np.array_equal(before[k], after[k])
        assert same == (k != "weight_hh_l1_reverse"), k
    rnn.close()


def test_weights_of_the_wrong_size_are_refused_and_nothing_is_copied(device, rng):
    rnn = RNN("gru", 4, 6)
    before = rnn.weights.to_host()
    bad = {k: np.ones(v.shape, np.float32) for k, v in rnn.parameters().items()}
    bad["weight_hh_l0"] = np.ones((18, 5), np.float32)
    with pytest.raises(ValueError, match=r"weight_hh_l0 has shape \(18, 5\)"):
        rnn.load_torch_state(bad)
    with pytest.raises(KeyError, match="missing"):
        rnn.load_torch_state({"weight_ih_l0": np.ones((18, 4), np.float32)})
    with pytest.raises(TypeError, match="dtype"):
        rnn.load_torch_state({**bad, "weight_hh_l0": cl.to_device(np.ones((18, 6),
                                                                          np.float16))})
    after = rnn.weights.to_host()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    # a partial load with strict=False
    rnn.load_torch_state({"bias_ih_l0": np.full(18, 0.25)}, strict=False)
    assert (rnn.parameters()["bias_ih_l0"].get() == 0.25).all()
    rnn.close()


# -- algorithms, autotune, fallback -----------------------------------------------------------------------
def _train_step(rnn, rng, t, b, lengths=None):
    dt = rnn.spec.dtype
    xs, ys = rnn._io_shapes(t, b)
    hs, cs = rnn._state_shapes(b)
    xh, hxh, dyh = (T.random_array(s, dt, rng=rng) for s in (xs, hs, ys))
    cxh = T.random_array(cs, dt, rng=rng) if rnn.spec.lstm else None
    return xh, hxh, cxh, dyh


def _check_step(rnn, params, step, lengths=None, msg=""):
    xh, hxh, cxh, dyh = step
    dt = rnn.spec.dtype
    y, hy, cy, state = rnn.forward(_dev(xh), _dev(hxh), _dev(cxh), seq_lengths=lengths,
                                   training=True)
    ry, rhy, rcy, cache = ref.rnn_forward(rnn.spec.mode, xh, params, hxh, cxh,
                                          seq_lengths=lengths,
                                          batch_first=rnn.spec.batch_first, return_cache=True)
    T.assert_close(y, ry, dt, msg=f"y {msg}")
    T.assert_close(hy, rhy, dt, msg=f"hy {msg}")
    dx, dhx, dcx = rnn.backward_data(state, _dev(dyh))
    rdx, rdhx, rdcx, rdp = ref.rnn_backward(cache, dyh)
    T.assert_close(dx, rdx, dt, msg=f"dx {msg}")
    T.assert_close(dhx, rdhx, dt, msg=f"dhx {msg}")
    dw = rnn.backward_weights(state)
    for name, g in dw.items():
        T.assert_close(g, rdp[name], dt, msg=f"d{name} {msg}")
    return state


@pytest.mark.parametrize("mode, dtype, hidden, bi", [
    ("lstm", "float16", 64, False), ("gru", "float16", 64, True),
    ("lstm", "float32", 32, False), ("rnn_tanh", "bfloat16", 48, False)])
def test_every_algorithm_offered_is_right(device, rng, store, mode, dtype, hidden, bi):
    t, b = 6, 16
    rnn = RNN(mode, 16, hidden, num_layers=2, bidirectional=bi, dtype=np_dtype(dtype),
              seq_len=t, batch_size=b)
    params = _weights(rnn, rng)
    rnn.plan()
    names = [c["name"] for c in rnn.candidates]
    assert names[0] == "standard" and rnn.algo == "standard"
    assert set(names) | set(rnn.refused) == {"standard", "persist_static",
                                             "persist_static_small_h", "persist_dynamic"}
    print(f"{rnn!r}\n  candidates {names}\n  refused {rnn.refused}")
    step = _train_step(rnn, rng, t, b)
    padded = _train_step(rnn, rng, t, b)
    lengths = [int(v) for v in rng.integers(1, t + 1, b)]
    for i, name in enumerate(names):
        rnn.select(i)
        st_ = _check_step(rnn, params, step, msg=f"{name} of {rnn!r}")
        assert st_.algo == name
        # sequences of different lengths: right, by this algorithm or by standard
        st_ = _check_step(rnn, params, padded, lengths, msg=f"{name} padded {lengths}")
        print(f"  {name} with lengths {lengths}: ran {st_.algo}")
    rnn.autotune()
    assert rnn.tuned and all("ms" in c for c in rnn.candidates)
    ok = [c["ms"] for c in rnn.candidates if np.isfinite(c["ms"])]
    assert rnn.candidates[rnn.choice]["ms"] == min(ok)
    assert "autotuned" in repr(rnn)
    _check_step(rnn, params, step, msg=f"autotuned {rnn!r}")
    rnn.close()


def test_autotune_is_stored_and_a_call_the_choice_refuses_runs_standard(device, rng, store,
                                                                         monkeypatch):
    t, b = 5, 8
    kw = dict(num_layers=1, dtype=np.float16, seq_len=t, batch_size=b)
    rnn = RNN("lstm", 32, 64, **kw)
    rnn.autotune()
    assert store.exists()
    calls = []
    real = plan_mod.time_candidates
    monkeypatch.setattr(plan_mod, "time_candidates",
                        lambda runs, *a, **k: calls.append(len(runs)) or real(runs, *a, **k))
    again = RNN("lstm", 32, 64, **kw)
    again.autotune()
    assert calls == [] and again.tuned and again.choice == rnn.choice
    # persist_dynamic is compiled for batch 8: a batch of 3 runs standard, correctly
    names = [c["name"] for c in rnn.candidates]
    if "persist_dynamic" in names:
        rnn.select(names.index("persist_dynamic"))
        params = _weights(rnn, rng)
        state = _check_step(rnn, params, _train_step(rnn, rng, t, 3), msg="dynamic, batch 3")
        assert state.algo == "standard"
        state = _check_step(rnn, params, _train_step(rnn, rng, t, b), msg="dynamic, batch 8")
        assert state.algo == "persist_dynamic"
    rnn.close()
    again.close()


def test_inference_only_plans_offer_inference_algorithms(device, rng):
    rnn = RNN("gru", 16, 32, dtype=np.float16, seq_len=4, batch_size=8, inference_only=True)
    params = _weights(rnn, rng)
    print(f"{rnn!r}\n  candidates {[c['name'] for c in rnn.candidates]} refused {rnn.refused}")
    xh = T.random_array((4, 8, 16), np.float16, rng=rng)
    for i in range(len(rnn.candidates)):
        rnn.select(i)
        y, hy, _ = rnn.forward(_dev(xh), seq_lengths=[4, 3, 1, 2, 4, 4, 2, 1])
        ry, rhy, _ = ref.rnn_forward("gru", xh, params, seq_lengths=[4, 3, 1, 2, 4, 4, 2, 1])
        T.assert_close(y, ry, np.float16, msg=rnn.candidates[i]["name"])
        T.assert_close(hy, rhy, np.float16, msg=rnn.candidates[i]["name"])
    with pytest.raises(ValueError, match="inference_only"):
        rnn.forward(_dev(xh), training=True)
    rnn.autotune()
    assert rnn.tuned
    rnn.close()


#: Dropout between the layers of :func:`_see_through`: each unit of layer 0's output is
#: zeroed with this probability and the others are scaled by ``1 / (1 - p)``.
DROPOUT = 0.25
#: Sequence, batch, input and hidden sizes of :func:`_see_through`: T * B * H = 8,192 units
#: go through the dropout in each training call.
DROP_T, DROP_B, DROP_F, DROP_H = 8, 16, 8, 64
#: Layer 1's input bias in :func:`_see_through`: its ReLU never sees 0, so its gradient has no
#: kink to disagree on.
DROP_BIAS = 0.25


def _see_through(seed):
    """A two-layer ReLU RNN whose dropout mask shows in its output, with its parameters.

    Layer 0 has positive weights and biases, and takes positive inputs: all its outputs
    ``h0`` are positive.  Layer 1 is the identity plus :data:`DROP_BIAS` (input weights I,
    recurrent weights 0, ``bias_ih`` the constant): ``y = dropout(h0) + DROP_BIAS``, so a
    unit is dropped exactly where ``y == DROP_BIAS`` and kept (scaled by ``1 / (1 - p)``)
    where ``y > DROP_BIAS``.  Every plan gets the same parameters; ``seed`` is the dropout's.
    """
    f, h = DROP_F, DROP_H
    rnn = RNN("rnn_relu", f, h, num_layers=2, dropout=DROPOUT, seed=seed)
    rng = np.random.default_rng(1234)
    params = {"weight_ih_l0": T.random_array((h, f), np.float32, rng=rng, low=0.1 / f,
                                             high=1 / f),
              "weight_hh_l0": T.random_array((h, h), np.float32, rng=rng, low=0.05 / h,
                                             high=0.5 / h),
              "bias_ih_l0": T.random_array(h, np.float32, rng=rng, low=0.01, high=0.1),
              "bias_hh_l0": T.random_array(h, np.float32, rng=rng, low=0.01, high=0.1),
              "weight_ih_l1": np.eye(h, dtype=np.float32),
              "weight_hh_l1": np.zeros((h, h), np.float32),
              "bias_ih_l1": np.full(h, DROP_BIAS, np.float32),
              "bias_hh_l1": np.zeros(h, np.float32)}
    rnn.load_torch_state(params)
    return rnn, params


def _dropout_reference(xh, params, kept, dyh=None):
    """The float64 results of :func:`_see_through`'s network for the dropout mask ``kept``
    (True where a unit of layer 0's output is kept): ``(y, hy)``, and with ``dyh`` also
    ``(dx, dhx, dparams)`` of the backward pass for ``dy = dyh``."""
    layer0 = {k: v for k, v in params.items() if k.endswith("_l0")}
    h0, hy0, _, cache = ref.rnn_forward("rnn_relu", xh, layer0, return_cache=True)
    dropped = np.where(kept, h0 / (1 - DROPOUT), 0.0)         # layer 1's input
    y = dropped + DROP_BIAS                                     # its ReLU is on throughout
    hy = np.stack([hy0[0], y[-1]])
    if dyh is None:
        return y, hy
    dy = np.asarray(dyh, np.float64)
    # Layer 1 passes dy to its input unchanged (ReLU on, identity weights, no recurrence),
    # and the dropout passes it on where kept, scaled: that is layer 0's output gradient.
    dx, dhx0, _, grads = ref.rnn_backward(cache, np.where(kept, dy / (1 - DROPOUT), 0.0))
    prev = np.concatenate([np.zeros_like(y[:1]), y[:-1]])       # layer 1's state before each step
    grads["weight_ih_l1"] = np.einsum("tbi,tbj->ij", dy, dropped)
    grads["weight_hh_l1"] = np.einsum("tbi,tbj->ij", dy, prev)
    grads["bias_ih_l1"] = grads["bias_hh_l1"] = dy.sum(axis=(0, 1))
    return y, hy, dx, np.stack([dhx0[0], np.zeros_like(dhx0[0])]), grads


def _binomial_ok(count, n, p):
    """Whether ``count`` successes of ``n`` independent trials of probability ``p`` are within
    6 standard deviations of ``n p``: a correct draw fails 1 time in 500 million."""
    return abs(count - n * p) <= 6 * np.sqrt(n * p * (1 - p))


def test_dropout_applies_in_training_only(device, rng):
    rnn, params = _see_through(seed=3)
    xh = T.random_array((DROP_T, DROP_B, DROP_F), np.float32, rng=rng, low=0.1, high=1.0)
    ry, rhy, _ = ref.rnn_forward("rnn_relu", xh, params)
    assert (ry - DROP_BIAS).min() > 0.01       # every unit of layer 0 is on: masks show
    y, hy, _ = rnn.forward(_dev(xh))
    T.assert_close(y, ry, np.float32, msg="inference ignores dropout")
    T.assert_close(hy, rhy, np.float32, msg="inference hy")
    yt, hyt, _, _ = rnn.forward(_dev(xh), training=True)
    yt = yt.get().astype(np.float64)
    kept = yt > DROP_BIAS
    assert (yt[~kept] == DROP_BIAS).all(), "a unit neither kept nor dropped"
    # Each unit dropped independently with probability p; the others scaled by 1 / (1 - p)
    # (and not, say, by 1 / p, or left as they are).
    assert _binomial_ok(int((~kept).sum()), kept.size, DROPOUT), \
        f"{int((~kept).sum())} of {kept.size} units dropped, for p = {DROPOUT}"
    want_y, want_hy = _dropout_reference(xh, params, kept)
    T.assert_close(yt, want_y, np.float32, msg="training y: kept units scaled by 1 / (1 - p)")
    # hy: layer 0's last state is not dropped out; layer 1's is its last output
    T.assert_close(hyt, want_hy, np.float32, msg="training hy")
    rnn.close()


def test_dropout_masks_follow_the_seed_and_train_the_backward(device, rng):
    xh = T.random_array((DROP_T, DROP_B, DROP_F), np.float32, rng=rng, low=0.1, high=1.0)
    rnn, params = _see_through(seed=3)
    twin, _ = _see_through(seed=3)
    other, _ = _see_through(seed=4)
    y, _, _, state = rnn.forward(_dev(xh), training=True)
    y = y.get()
    kept = y > DROP_BIAS
    # The same seed draws the same first mask: the same result, bit for bit.
    y_twin = twin.forward(_dev(xh), training=True)[0].get()
    np.testing.assert_array_equal(y_twin, y, err_msg="same seed, same input")
    # The backward passes go through the forward's mask: the reference built from it.
    dyh = T.random_array(y.shape, np.float32, rng=rng)
    _, _, rdx, rdhx, rdp = _dropout_reference(xh, params, kept, dyh)
    dx, dhx, _ = rnn.backward_data(state, _dev(dyh))
    T.assert_close(dx, rdx, np.float32, msg="dx through the dropout mask")
    T.assert_close(dhx, rdhx, np.float32, msg="dhx through the dropout mask")
    dw = rnn.backward_weights(state)
    assert sorted(dw) == sorted(rdp)
    for name, g in dw.items():
        T.assert_close(g, rdp[name], np.float32, msg=f"d{name} through the dropout mask")
    # Another seed, and the next training call of the same plan (the states advance), draw
    # new masks: two independent masks differ on each unit with probability 2 p (1 - p).
    n = kept.size
    for what, plan in (("another seed", other), ("the next call", rnn)):
        again = plan.forward(_dev(xh), training=True)[0].get() > DROP_BIAS
        differ = int((again != kept).sum())
        assert _binomial_ok(differ, n, 2 * DROPOUT * (1 - DROPOUT)), \
            f"{what}: the mask differs from the first on {differ} of {n} units"
    for plan in (rnn, twin, other):
        plan.close()


# -- capture, threads ---------------------------------------------------------------------------------------
def test_captured_forward_replays_with_new_inputs(device, rng):
    rnn = RNN("lstm", 8, 16, num_layers=2, bidirectional=True, batch_first=True)
    params = _weights(rnn, rng)
    lengths = [5, 2, 4]
    s = cl.Stream(device)
    x = cl.to_device(T.random_array((3, 5, 8), np.float32, rng=rng), stream=s)
    hx = cl.to_device(T.random_array((4, 3, 16), np.float32, rng=rng), stream=s)
    out = (cl.empty((3, 5, 32), np.float32, stream=s), cl.empty((4, 3, 16), np.float32, stream=s),
           cl.empty((4, 3, 16), np.float32, stream=s))
    rnn.forward(x, hx, seq_lengths=lengths, out=out, stream=s)   # descriptors, workspace
    s.sync()
    with cl.graph.capture(s) as g:
        rnn.forward(x, hx, seq_lengths=lengths, out=out, stream=s)
    exe = g.instantiate()
    for _ in range(2):
        xh = T.random_array((3, 5, 8), np.float32, rng=rng)
        x.copy_(xh, s)
        for o in out:
            o.fill(np.nan, s)
        exe.replay(s)
        s.sync()
        ry, rhy, rcy = ref.rnn_forward("lstm", xh, params, hx.get(), seq_lengths=lengths,
                                       batch_first=True)
        T.assert_close(out[0], ry, np.float32, msg="replayed y")
        T.assert_close(out[1], rhy, np.float32, msg="replayed hy")
        T.assert_close(out[2], rcy, np.float32, msg="replayed cy")
    s.close()
    rnn.close()


def test_one_plan_from_many_threads_matches_serial(device, rng):
    rnn = RNN("lstm", 16, 32, num_layers=2, bidirectional=True, dtype=np.float16)
    _weights(rnn, rng)
    xs = [cl.to_device(T.random_array((6, 4, 16), np.float16, rng=rng)) for _ in range(2)]
    dy = cl.to_device(T.random_array((6, 4, 64), np.float16, rng=rng))
    lengths = [6, 3, 5, 1]
    device.synchronize()

    def infer(x):
        return lambda s: rnn.forward(x, seq_lengths=lengths, stream=s)[:2]

    def train(x):
        def step(s):
            y, hy, cy, state = rnn.forward(x, training=True, stream=s)
            dx, dhx, dcx = rnn.backward_data(state, dy, stream=s)
            dw = rnn.backward_weights(state, stream=s)
            return (y, hy, cy, dx, dhx, dcx, dw.space)
        return step

    calls = [infer(xs[0]), infer(xs[1]), train(xs[0]), train(xs[1])]
    match_serial(device, calls)
    rnn.close()


# -- bad input -------------------------------------------------------------------------------------------
def test_bad_calls_raise_clear_errors(device, rng):
    rnn = RNN("lstm", 4, 6, num_layers=2)
    x = cl.to_device(T.random_array((5, 3, 4), np.float32, rng=rng))
    with pytest.raises(TypeError, match="dtype float16"):
        rnn.forward(cl.to_device(T.random_array((5, 3, 4), np.float16, rng=rng)))
    with pytest.raises(ValueError, match="input_size 4"):
        rnn.forward(cl.to_device(T.random_array((5, 3, 5), np.float32, rng=rng)))
    with pytest.raises(ValueError, match=r"in \[1, 5\]"):
        rnn.forward(x, seq_lengths=[5, 6, 2])
    with pytest.raises(ValueError, match=r"hx must have shape \(2, 3, 6\)"):
        rnn.forward(x, cl.zeros((2, 4, 6), np.float32))
    with pytest.raises(ValueError, match=r"y has shape"):
        rnn.forward(x, out=(cl.empty((5, 3, 7), np.float32),))
    h = cl.zeros((2, 3, 6), np.float32)
    with pytest.raises(ValueError, match="overlaps hx"):
        rnn.forward(x, h, out=(None, h))
    with pytest.raises(ValueError, match="LSTM output"):
        RNN("gru", 4, 6).forward(x, out=(None, None, cl.zeros((1, 3, 6), np.float32)))
    y, hy, cy, state = rnn.forward(x, training=True)
    with pytest.raises(ValueError, match="backward_data on this state first"):
        rnn.backward_weights(state)
    with pytest.raises(ValueError, match=r"dy must have shape"):
        rnn.backward_data(state, cl.zeros((5, 3, 5), np.float32))
    other = RNN("lstm", 4, 6, num_layers=2)
    with pytest.raises(ValueError, match="another RNN plan"):
        other.backward_data(state, cl.zeros((5, 3, 6), np.float32))
    rnn.backward_data(state, cl.zeros((5, 3, 6), np.float32))
    wider = RNN("lstm", 4, 7, num_layers=2)
    with pytest.raises(ValueError, match="not a weight space of this plan"):
        rnn.backward_weights(state, wider.new_weights())
    rnn.backward_weights(state, other.new_weights())     # same layout: a valid space
    with pytest.raises(ValueError, match="backward_weights already ran"):
        rnn.backward_weights(state)
    wider.close()
    rnn.close()
    with pytest.raises(ClosedError):
        rnn.forward(x)
    other.close()
