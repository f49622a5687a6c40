"""Attention variants without a GPU -- bottom-right causal diagonal, sliding window, ALiBi,
softcapping, the bias gradient: the float64 reference against a naive loop and finite
differences; the composite graphs finalized by the real library (host-side in cuDNN 9) with
the tensors they bind; the plans' problems and keys; every bad argument and every combination
cuDNN's engines do not take refused before any C call."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudalibs import dtypes
from cudalibs.cudnn import _base
from cudalibs.cudnn import backend as _be
from cudalibs.cudnn import attention
from cudalibs.cudnn.attention import lower as AG
from cudalibs.cudnn.attention import masks as M
from cudalibs.cudnn.attention import plan as AP
from cudalibs.driver.array import DeviceArray
from cudalibs.errors import CudaLibsError
from cudalibs.runtime import front
from cudalibs.testing.ref import _attention as R
# the module of the plans (A), the naive loop of every rule, the stand-in plans, the stop of
# the one-shots' insert
from test_attention import (A, F16, _by_differences, _naive, _PlannedBackward, _PlannedForward,
                            _problem, _Stop, _visible)

F32 = np.dtype(np.float32)


@pytest.fixture(autouse=True)
def _no_stand_in_environment():
    """Keys built here name a stand-in device: forget its environment after each test."""
    yield
    _base._env_of.clear()


# -- the references -------------------------------------------------------------------------------
WINDOWS = st.sampled_from([None, (0, None), (2, None), (None, 1), (1, 2), (3, 0)])


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from([False, True, "top_left", "bottom_right"]),
       WINDOWS, st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_forward_reference_matches_a_naive_loop(seed, causal, window, padding, with_bias,
                                                 alibi, cap):
    if causal and window is not None and window[1]:
        window = (window[0], None)
    rng = np.random.default_rng(seed)
    q, k, v = _problem(rng)
    lq, lk = ([3, 5], [7, 6]) if padding else (None, None)
    bias = rng.standard_normal((2, 1, 5, 7)) if with_bias else None
    slopes = rng.uniform(0.1, 1.0, 4) if alibi else None
    kw = dict(scale=0.7, causal=causal, window=window, seq_lens_q=lq, seq_lens_kv=lk,
              bias=bias, alibi_slopes=slopes, softcap=1.3 if cap else None)
    o, stats = R.sdpa_forward(q, k, v, **kw)
    no, nstats = _naive(q, k, v, 0.7, causal, bias, lq, lk, window=window, slopes=slopes,
                        cap=1.3 if cap else 0.0)
    np.testing.assert_allclose(o, no, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.isinf(stats), np.isinf(nstats))
    fin = np.isfinite(nstats)
    np.testing.assert_allclose(stats[fin], nstats[fin], rtol=1e-12, atol=1e-12)
    # the mask is the naive rule, and the rows that see a key are the finite statistics
    vis = R.sdpa_mask((2, 5, 7), causal=causal, window=window, seq_lens_q=lq, seq_lens_kv=lk)
    want = np.array([[[_visible(i, j, n, 5, 7, causal, window, lq, lk) for j in range(7)]
                      for i in range(5)] for n in range(2)])
    np.testing.assert_array_equal(vis[:, 0], want)
    rows = R.valid_rows((2, 5, 7), causal=causal, window=window, seq_lens_q=lq,
                        seq_lens_kv=lk)
    np.testing.assert_array_equal(np.broadcast_to(rows, stats.shape), np.isfinite(stats))


def test_the_diagonals_and_windows_the_serving_cases_use():
    # decode: one query aligned to the end sees every key (bottom right), only the first
    # (top left); with a window of 3 it sees the last 4 keys
    last = R.sdpa_mask((1, 1, 9), causal="bottom_right")[0, 0, 0]
    assert last.all() and R.sdpa_mask((1, 1, 9), causal=True)[0, 0, 0].sum() == 1
    win = R.sdpa_mask((1, 1, 9), causal="bottom_right", window=(3, None))[0, 0, 0]
    assert win.tolist() == [False] * 5 + [True] * 4
    # chunked prefill: a chunk of 3 queries after 5 cached keys
    chunk = R.sdpa_mask((1, 3, 8), causal="bottom_right")[0, 0]
    assert chunk.sum(axis=1).tolist() == [6, 7, 8]
    # per batch entry with sequence lengths: the diagonal ends at each entry's last key
    per = R.sdpa_mask((2, 2, 6), causal="bottom_right", seq_lens_q=[1, 2],
                      seq_lens_kv=[4, 6])[:, 0]
    assert per[0, 0].tolist() == [True] * 4 + [False] * 2 and not per[0, 1].any()
    assert per[1].sum(axis=1).tolist() == [5, 6]
    # s_q == s_kv: both alignments are one; an open window is no window
    same = dict(seq_lens_q=None, seq_lens_kv=None)
    np.testing.assert_array_equal(R.sdpa_mask((1, 6, 6), causal="bottom_right", **same),
                                  R.sdpa_mask((1, 6, 6), causal=True, **same))
    np.testing.assert_array_equal(R.sdpa_mask((2, 5, 7), window=(None, None)),
                                  R.sdpa_mask((2, 5, 7)))
    np.testing.assert_array_equal(R.sdpa_mask((2, 5, 7), window=(2, 0)),
                                  R.sdpa_mask((2, 5, 7), causal=True, window=(2, None)))


def test_alibi_slopes_are_the_papers():
    np.testing.assert_array_equal(attention.alibi_slopes(8), 2.0 ** -np.arange(1, 9))
    # 12 heads: the 8 of the power of two, then the odd terms of the sequence for 16
    np.testing.assert_allclose(attention.alibi_slopes(12)[8:],
                               2.0 ** -np.array([0.5, 1.5, 2.5, 3.5]), rtol=1e-7)
    for h in range(1, 80):
        got = attention.alibi_slopes(h)
        assert got.dtype == F32 and got.shape == (h,)
        np.testing.assert_allclose(got, R._alibi_slopes(h), rtol=1e-7)
    for bad in (0, -3, 2.5, True, "8"):
        with pytest.raises(ValueError, match="positive int"):
            attention.alibi_slopes(bad)
    # the reference's alibi=True is its slopes, given explicitly
    rng = np.random.default_rng(3)
    q, k, v = _problem(rng, h_q=6)
    a = R.sdpa_forward(q, k, v, causal=True, alibi=True)
    b = R.sdpa_forward(q, k, v, causal=True, alibi_slopes=R._alibi_slopes(6))
    np.testing.assert_array_equal(a[0], b[0])


@pytest.mark.parametrize("shape", [(1, 4, 5, 7), (2, 4, 5, 7), (2, 1, 5, 7), (5, 7)],
                         ids=["1,h", "b,h", "b,1", "2-D"])
def test_bias_gradient_matches_finite_differences(shape):
    rng = np.random.default_rng(5)
    q, k, v = _problem(rng)
    bias = rng.standard_normal(shape)
    kw = dict(scale=0.5, causal=True, softcap=1.5, window=(3, None))
    do = rng.standard_normal((2, 4, 5, 3))
    *grads, dbias = R.sdpa_backward(q, k, v, do, bias=bias, want_dbias=True, **kw)
    assert dbias.shape == shape
    nums = _by_differences(kw, [q, k, v, bias], do)
    for g, num in zip(grads + [dbias], nums):
        np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-8)
    # the gradients of q, k, v are those without want_dbias
    for g, plain in zip(grads, R.sdpa_backward(q, k, v, do, bias=bias, **kw)):
        np.testing.assert_array_equal(g, plain)


def test_reference_reads_the_dropout_mask_only_where_a_key_is_seen():
    """A dumped keep-mask may hold anything (here NaN) where no query sees the key: the
    reference's results are those of the mask with zeros there."""
    rng = np.random.default_rng(11)
    q, k, v = _problem(rng)
    do = rng.standard_normal((2, 4, 5, 3))
    kw = dict(causal=True, window=(1, None), seq_lens_q=[5, 3], seq_lens_kv=[7, 4],
              dropout=0.25)
    vis = R.sdpa_mask((2, 5, 7), causal=True, window=(1, None), seq_lens_q=[5, 3],
                      seq_lens_kv=[7, 4])
    keep = (rng.random((2, 4, 5, 7)) > 0.25).astype(np.float32)
    dumped = np.where(vis, keep, np.float32(np.nan))
    clean = np.where(vis, keep, np.float32(0.0))
    for got, want in zip(R.sdpa_forward(q, k, v, dropout_mask=dumped, **kw),
                         R.sdpa_forward(q, k, v, dropout_mask=clean, **kw)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(R.sdpa_backward(q, k, v, do, dropout_mask=dumped, **kw),
                         R.sdpa_backward(q, k, v, do, dropout_mask=clean, **kw)):
        assert np.isfinite(got).all()
        np.testing.assert_array_equal(got, want)


def test_reference_refuses_bad_variants():
    rng = np.random.default_rng(0)
    q, k, v = _problem(rng)
    for kw, match in ((dict(causal="diagonal"), "causal must be"),
                      (dict(window=(-1, None)), "window sides"),
                      (dict(window=(1.5, None)), "window sides"),
                      (dict(causal=True, window=(1, 2)), "right side"),
                      (dict(alibi_slopes=[1.0, 2.0]), "4 values")):
        with pytest.raises(ValueError, match=match):
            R.sdpa_forward(q, k, v, **kw)
    with pytest.raises(ValueError, match="needs the bias"):
        R.sdpa_backward(q, k, v, q[..., :3], want_dbias=True)


# -- the graphs -----------------------------------------------------------------------------------
def _spec(sq=64, skv=96, hq=4, hkv=2, d=64, **variants):
    b = 2
    qs, ks = AG._packed((b, hq, sq, d)), AG._packed((b, hkv, skv, d))
    bias = variants.pop("bias", None)
    bb = (bias, AG._packed(bias)) if bias else None
    padding = variants.pop("padding", False)
    dropout = variants.pop("dropout", 0.0)
    spec = AG.Spec(F16, b, hq, hkv, sq, skv, d, d, qs, ks, ks, qs, 0.125,
                   variants.pop("causal", False), bb, padding, dropout, True, True, False,
                   False, qs, qs, ks, ks)
    return spec._replace(**variants)


VARIANTS = [
    (dict(causal=True, bottom_right=True), {"band_s_q", "band_s_kv", "neg_inf"}),
    (dict(causal=True, bottom_right=True, padding=True), {"seq_q", "seq_kv", "neg_inf"}),
    (dict(causal=True, bottom_right=True, window=(31, None)),
     {"band_s_q", "band_s_kv", "window_left", "neg_inf"}),
    (dict(causal=True, bottom_right=True, window=(31, None), padding=True),
     {"seq_q", "seq_kv", "window_left", "neg_inf"}),
    (dict(causal=True, window=(31, None)), {"window_left", "neg_inf"}),
    (dict(window=(31, 7)), {"window_left", "window_right", "neg_inf"}),
    (dict(window=(None, 7), dropout=0.1, bias=(1, 4, 64, 96)),
     {"window_right", "neg_inf", "bias", "seed", "offset", "drop_scale"}),
    (dict(causal=True, alibi=True), {"alibi_slopes", "neg_inf"}),
    (dict(softcap=30.0), {"softcap"}),
    (dict(causal=True, softcap=30.0, alibi=True, window=(15, None), bias=(2, 4, 64, 96)),
     {"softcap", "alibi_slopes", "window_left", "neg_inf", "bias"}),
]


@pytest.mark.cudnn_finalize
@pytest.mark.parametrize("variants, extra", VARIANTS,
                         ids=[",".join(f"{k}" for k in v) for v, _ in VARIANTS])
def test_composite_graphs_of_the_variants_finalize(variants, extra):
    spec = _spec(**variants)
    fwd = AG.forward_graph(spec)
    assert fwd.graph.finalized and fwd.kind == "composite"
    assert set(fwd.slots) == {"q", "k", "v", "o", "stats", "scale"} | extra
    assert list(fwd.uids) == sorted(fwd.uids) == [AG.UIDS[s] for s in fwd.slots]
    # the by-value scalars hold the bounds: the window length, and s_q, s_kv bottom-right
    sc = fwd.scalars
    if "window_left" in sc:
        length = spec.window[0] + 1
        want = length - (spec.s_kv - spec.s_q) * (spec.bottom_right and not spec.padding)
        assert sc["window_left"].value == want
    if "band_s_kv" in sc:
        assert (sc["band_s_q"].value, sc["band_s_kv"].value) == (spec.s_q, spec.s_kv)
    if "softcap" in sc:
        assert sc["softcap"].value == spec.softcap
    for dq_accumulator in (True, False):
        bwd = AG.backward_graph(spec._replace(backward=True), dq_accumulator=dq_accumulator)
        assert bwd.graph.finalized and extra - {"seed", "offset"} <= set(bwd.slots)


@pytest.mark.cudnn_finalize
@pytest.mark.parametrize("shape", [(1, 4, 64, 96), (2, 4, 64, 96)])
def test_backward_graph_writes_the_bias_gradient(shape):
    spec = _spec(bias=shape, causal=True, softcap=20.0, window=(15, None))
    spec = spec._replace(backward=True, dbias=AG._packed(shape))
    low = AG.backward_graph_dp(spec)
    assert low.kind == "composite_dp" and low.graph.finalized
    assert {"dbias", "bias", "softcap"} <= set(low.slots)
    assert "dq_accum" not in low.slots
    assert "dbias" not in AG.forward_graph(spec._replace(backward=False, dbias=None)).slots
    # cuDNN's engines take the accumulator form and leave dbias unwritten: no graph
    with pytest.raises(_be.NoGraph, match="only without the float32 dQ accumulator"):
        AG.backward_graph(spec)
    assert M.accumulator_misses(spec) is not None
    assert M.accumulator_misses(spec._replace(dbias=None)) is None
    assert AG.backward_graph(spec._replace(dbias=None)).kind == "composite"


@pytest.mark.cudnn_finalize
def test_a_bias_gradient_plan_draws_no_candidate_from_the_accumulator_form(monkeypatch):
    """The plan's engine search with ``want_dbias``: the accumulator form is refused before
    its graph is built, with why; the candidates are those of ``"composite_dp"``; a plan
    limited to the accumulator form has no engine and says why."""
    built = []

    def candidates(h, graph, uids, banned, limit, room):
        built.append(graph)
        return [({"name": "eng0"}, type("Found", (), {"workspace_size": 0})())]

    monkeypatch.setattr(AP, "as_stream", lambda s, dev: type("S", (), {"raw_handle": 0})())
    monkeypatch.setattr(AP, "handle_for", lambda dev, raw: type("H", (), {"raw": None})())
    monkeypatch.setattr(AP._be, "candidates", candidates)
    q, k, v = _qkv()
    bias = _fake(B1, ptr=0x90000)
    plan = A.SdpaBackwardPlan(q, k, v, q, q, bias=bias, want_dbias=True, causal=True,
                              window=(15, None), graphs=("composite", "composite_dp"))
    cands = plan._heuristics()
    assert [c["backend"] for c in cands] == ["composite_dp"] and len(built) == 1
    assert "only without the float32 dQ accumulator" in plan._unavailable["composite"]
    only = A.SdpaBackwardPlan(q, k, v, q, q, bias=bias, want_dbias=True, graphs=("composite",))
    with pytest.raises(CudaLibsError, match="no engine for backward .*dbias.*composite: "
                                            "cuDNN's fused backward writes the bias gradient"):
        only._heuristics()
    assert len(built) == 1
    # without the bias gradient both forms build their graphs
    both = A.SdpaBackwardPlan(q, k, v, q, q, bias=bias, graphs=("composite", "composite_dp"))
    assert [c["backend"] for c in both._heuristics()] == ["composite", "composite_dp"]


def test_the_single_sdpa_operation_takes_no_variant():
    assert AG.unified_applies(_spec()) is None
    for variants, name in ((dict(bottom_right=True), "bottom-right"),
                           (dict(window=(7, None)), "sliding window"),
                           (dict(alibi=True), "ALiBi"), (dict(softcap=5.0), "softcap"),
                           (dict(bias=(1, 4, 64, 96), dbias=AG._packed((1, 4, 64, 96))),
                            "bias gradient")):
        assert name in AG.unified_applies(_spec(**variants))


def test_variant_operands_and_description():
    spec = _spec(causal=True, bottom_right=True, window=(4095, None), alibi=True,
                 softcap=30.0, bias=(1, 4, 64, 96), dbias=AG._packed((1, 4, 64, 96)))
    assert M.operands(spec) == [("alibi_slopes", (1, 4, 1, 1), (4, 1, 1, 1)),
                                ("dbias", (1, 4, 64, 96), AG._packed((1, 4, 64, 96)))]
    assert M.describe(spec) == ["bottom right", "window (4095, -)", "alibi", "softcap 30",
                                "dbias"]
    assert M.describe(_spec()) == [] and M.operands(_spec()) == []


# -- the plans: problems, keys, bad input -----------------------------------------------------------
class _Dev:
    ordinal = 0
    compute_capability = (9, 0)


_DEV = _Dev()


def _fake(shape, dtype=F16, ptr=0x10000, strides=None):
    dt = dtypes.lookup(dtype)
    strides = strides or tuple(s * dt.itemsize for s in AG._packed(shape))
    return DeviceArray._view(ptr, tuple(shape), strides, dt, _DEV, None, None)


Q, K = (2, 4, 64, 64), (2, 2, 96, 64)


def _qkv(q=Q, k=K):
    return _fake(q), _fake(k, ptr=0x20000), _fake(k, ptr=0x30000)


def test_plans_take_the_variants_into_their_problems():
    q, k, v = _qkv()
    plan = A.SdpaPlan(q, k, v, causal="bottom_right", window=(31, None), training=True)
    sp = plan.spec
    assert sp.causal and sp.bottom_right and sp.window == (31, None) and not sp.alibi
    assert "causal, bottom right, window (31, -)" in repr(plan)
    plan = A.SdpaPlan(q, k, v, causal="top_left", alibi=True, softcap=30)
    assert plan.spec.alibi and plan.spec.softcap == 30.0 and not plan.spec.bottom_right
    assert "alibi, softcap 30" in repr(plan)
    assert ("alibi_slopes", (1, 4, 1, 1), (4, 1, 1, 1)) in plan._specs
    assert plan._slot_dtype("alibi_slopes") == F32
    assert A.SdpaPlan(q, k, v, window=(None, None)).spec.window is None
    assert A.SdpaPlan(q, k, v, causal=True, window=(8, 0)).spec.window == (8, None)
    key = plan._tuning_key()
    assert key["spec"]["alibi"] is True and key["spec"]["softcap"] == 30.0
    bias = _fake((1, 4, 64, 96), ptr=0x40000)
    bp = A.SdpaBackwardPlan(q, k, v, q, q, bias=bias, want_dbias=True, window=(16, 8))
    assert bp.spec.dbias == AG._packed((1, 4, 64, 96)) and "dbias" in repr(bp)
    with pytest.raises(CudaLibsError, match="wrong bias gradient beside a softcap"):
        A.SdpaBackwardPlan(q, k, v, q, q, bias=bias, want_dbias=True, softcap=5.0)
    assert ("dbias", (1, 4, 64, 96), bp.spec.dbias) in bp._specs
    # an example dbias gives its strides
    strided = _fake((1, 4, 64, 96), strides=(2 * 4 * 64 * 128, 2 * 64 * 128, 2 * 128, 2),
                    ptr=0x50000)
    bp = A.SdpaBackwardPlan(q, k, v, q, q, bias=bias, dbias=strided)
    assert bp.spec.dbias == (4 * 64 * 128, 64 * 128, 128, 1)
    assert A.SdpaBackwardPlan(q, k, v, q, q, bias=bias).spec.dbias is None


B1 = (1, 4, 64, 96)
BAD = [
    (lambda: A.SdpaPlan(*_qkv(), causal="diagonal"), ValueError, "causal must be"),
    (lambda: A.SdpaPlan(*_qkv(), window=4096), TypeError, "window must be a"),
    (lambda: A.SdpaPlan(*_qkv(), window=(1, 2, 3)), TypeError, "window must be a"),
    (lambda: A.SdpaPlan(*_qkv(), window=(-1, None)), ValueError, "left side must be"),
    (lambda: A.SdpaPlan(*_qkv(), window=(None, 1.5)), ValueError, "right side must be"),
    (lambda: A.SdpaPlan(*_qkv(), window=(True, None)), ValueError, "left side must be"),
    (lambda: A.SdpaPlan(*_qkv(), causal=True, window=(3, 2)), ValueError, "no key right"),
    (lambda: A.SdpaPlan(*_qkv(), softcap=0.0), ValueError, "positive and finite"),
    (lambda: A.SdpaPlan(*_qkv(), softcap=float("inf")), ValueError, "positive and finite"),
    (lambda: A.SdpaPlan(*_qkv(), softcap="30"), TypeError, "softcap must be"),
    (lambda: A.SdpaPlan(*_qkv(), softcap=True), TypeError, "softcap must be"),
    (lambda: A.SdpaPlan(*_qkv(), causal=True, alibi=_fake((4,), F32)), TypeError,
     "alibi_slopes="),
    (lambda: A.SdpaPlan(*_qkv(), causal="bottom_right", bias=_fake(B1)), CudaLibsError,
     "bottom-right causal diagonal without a bias"),
    (lambda: A.SdpaPlan(*_qkv(), causal="bottom_right", dropout=0.1, seed=1), CudaLibsError,
     "without dropout"),
    (lambda: A.SdpaPlan(*_qkv(), causal="bottom_right", alibi=True), CudaLibsError,
     "without ALiBi"),
    (lambda: A.SdpaPlan(*_qkv(q=(2, 4, 128, 64)), causal="bottom_right"), CudaLibsError,
     "s_q <= s_kv"),
    (lambda: A.SdpaPlan(*_qkv(q=(2, 4, 128, 64)), window=(8, None)), CudaLibsError,
     "sliding window only with s_q <= s_kv"),
    (lambda: A.SdpaPlan(*_qkv(), alibi=True), CudaLibsError, "under a causal mask"),
    (lambda: A.SdpaPlan(*_qkv(), window=(3, 2), alibi=True), CudaLibsError,
     "under a causal mask"),
    (lambda: A.SdpaBackwardPlan(*_qkv(), _fake(Q), _fake(Q), want_dbias=True), ValueError,
     "needs the bias"),
    (lambda: A.SdpaBackwardPlan(*_qkv(), _fake(Q), _fake(Q), bias=_fake((2, 1, 64, 96)),
                                want_dbias=True), CudaLibsError, "one per query head"),
    (lambda: A.SdpaBackwardPlan(*_qkv(), _fake(Q), _fake(Q), bias=_fake(B1),
                                dbias=_fake((1, 4, 64, 96), F32)), ValueError,
     "dbias must be float16"),
    (lambda: A.SdpaBackwardPlan(*_qkv(), _fake(Q), _fake(Q), bias=_fake(B1),
                                dbias=_fake((2, 4, 64, 96))), ValueError, "the bias's shape"),
    (lambda: A.SdpaBackwardPlan(*_qkv(), _fake(Q), _fake(Q), causal="bottom_right",
                                window=(8, 4)), ValueError, "no key right"),
    (lambda: A.sdpa(*_qkv(), causal="bottom-right"), ValueError, "causal must be"),
    (lambda: A.sdpa(*_qkv(), window=(None, -2)), ValueError, "right side must be"),
    (lambda: A.sdpa_backward(*_qkv(), _fake(Q), _fake(Q), _fake((2, 4, 64, 1), F32),
                             softcap=-1.0), ValueError, "softcap must be positive"),
]


@pytest.mark.parametrize("call, exc, match", BAD, ids=[m for _, _, m in BAD])
def test_bad_variants_raise_before_any_c_call(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_bottom_right_and_windows_with_sequence_lengths_take_any_s_q():
    q, k, v = _qkv(q=(2, 4, 128, 64))
    lens = dict(seq_lens_q=[1, 1], seq_lens_kv=[1, 1])
    assert A.SdpaPlan(q, k, v, causal="bottom_right", **lens).spec.bottom_right
    assert A.SdpaPlan(q, k, v, window=(3, None), **lens).spec.window == (3, None)


def test_no_engine_for_a_softcapped_problem_says_what_softcap_is(monkeypatch):
    def none(self):
        raise CudaLibsError("SdpaPlan: cuDNN 9.19.0 has no engine for forward ...")

    monkeypatch.setattr(AP.SdpaPlanBase, "_heuristics", none)
    with pytest.raises(CudaLibsError, match="no engine for forward .* softcapping is a "
                                            "pointwise subgraph"):
        A.SdpaPlan(*_qkv(), softcap=30.0).plan()
    with pytest.raises(CudaLibsError, match=r"no engine for forward \.\.\.$"):
        A.SdpaPlan(*_qkv(), causal="bottom_right").plan()


@pytest.mark.parametrize("slopes, match", [
    (_fake((4,), F16, ptr=0x60000), "float32"),
    (_fake((3,), F32, ptr=0x60000), "4 contiguous float32"),
    (_fake((4, 2), F32, ptr=0x60000, strides=(8, 4))[:, 0], "4 contiguous float32"),
    (_fake((4,), F32, ptr=0x60004), "16-byte aligned"),
])
def test_execute_checks_the_alibi_slopes(slopes, match):
    plan = _PlannedForward(*_qkv(), causal=True, alibi=True)
    with pytest.raises(ValueError, match=match):
        plan.execute(*_qkv(), alibi_slopes=slopes)
    with pytest.raises(ValueError, match="made without alibi"):
        _PlannedForward(*_qkv()).execute(*_qkv(), alibi_slopes=_fake((4,), F32, ptr=0x60000))


def test_execute_checks_the_bias_gradient():
    q, k, v = _qkv()
    o, stats = _fake(Q, ptr=0x70000), _fake((2, 4, 64, 1), F32, ptr=0x80000)
    bias = _fake(B1, ptr=0x90000)
    out = (_fake(Q, ptr=0x100000), _fake(K, ptr=0x110000), _fake(K, ptr=0x120000))
    plain = _PlannedBackward(q, k, v, o, o, bias=bias)
    with pytest.raises(ValueError, match="without want_dbias"):
        plain.execute(q, k, v, o, o, stats, bias=bias, out=out, dbias=_fake(B1, ptr=0xA0000))
    plan = _PlannedBackward(q, k, v, o, o, bias=bias, want_dbias=True)
    with pytest.raises(ValueError, match="dbias overlaps bias"):
        plan.execute(q, k, v, o, o, stats, bias=bias, out=out,
                     dbias=_fake(B1, ptr=0x90000 + 64))
    with pytest.raises(ValueError, match="dbias overlaps dq"):
        plan.execute(q, k, v, o, o, stats, bias=bias, out=out, dbias=_fake(B1, ptr=0x100000))
    with pytest.raises(ValueError, match="plan was made for"):
        plan.execute(q, k, v, o, o, stats, bias=bias, out=out,
                     dbias=_fake((2, 4, 64, 96), ptr=0xA0000))


def test_one_shot_keys_name_the_variants():
    assert set(A._VARIANTS) <= set(A.SDPA_KEY.fields)
    assert set(A._VARIANTS) | {"dbias"} <= set(A.SDPA_BACKWARD_KEY.fields)
    for kind in (A.SDPA_KEY, A.SDPA_BACKWARD_KEY):
        assert len(kind.fields) == len(set(kind.fields))
    plain = M.key("sdpa", True, None, False, None, None)
    assert plain == ("top_left", None, False, 0.0) and plain.alibi is False
    assert M.key("sdpa", "bottom_right", [8, 0], False, None, 2) == \
        ("bottom_right", (8, None), False, 2.0)
    assert M.key("sdpa", False, None, False, _fake((4,), F32), None).alibi is True
    assert M.key("sdpa", "top_left", None, False, None, None) == plain


def test_one_shots_hand_the_variants_to_their_plans(monkeypatch):
    seen = []

    def insert(key, plan, prepare):
        seen.append((key, plan))
        raise _Stop

    monkeypatch.setattr(front, "insert", insert)
    q, k, v = _qkv()
    o, stats = _fake(Q, ptr=0x70000), _fake((2, 4, 64, 1), F32, ptr=0x80000)
    bias = _fake(B1, ptr=0x90000)
    with pytest.raises(_Stop):
        A.sdpa(q, k, v, causal="bottom_right", window=(63, None))
    with pytest.raises(_Stop):
        A.sdpa(q, k, v, causal=True, alibi_slopes=_fake((4,), F32, ptr=0x60000), softcap=50)
    with pytest.raises(_Stop):
        A.sdpa_backward(q, k, v, o, o, stats, bias=bias, want_dbias=True, window=(8, 8))
    with pytest.raises(CudaLibsError, match="softcap"):   # refused before any plan is made
        A.sdpa_backward(q, k, v, o, o, stats, bias=bias, want_dbias=True, softcap=50.0)
    with pytest.raises(_Stop):
        A.sdpa_backward(q, k, v, o, o, stats, bias=bias, dbias=_fake(B1, ptr=0xA0000))
    (k1, p1), (k2, p2), (k3, p3), (k4, p4) = seen
    n1, n2 = A.SDPA_KEY.named(k1), A.SDPA_KEY.named(k2)
    assert (n1["causal"], n1["diagonal"], n1["window"]) == (True, "bottom_right", (63, None))
    assert p1.spec.bottom_right and p1.spec.window == (63, None)
    assert (n2["alibi"], n2["softcap"]) == (True, 50.0) and p2.spec.alibi
    n3, n4 = A.SDPA_BACKWARD_KEY.named(k3), A.SDPA_BACKWARD_KEY.named(k4)
    assert n3["dbias"] is True and n4["dbias"] == (1 * 4 * 64 * 96 * 2, 64 * 96 * 2, 96 * 2, 2)
    assert p3.spec.dbias == p4.spec.dbias == AG._packed(B1) and p3.spec.window == (8, 8)
    assert k3 != k4
