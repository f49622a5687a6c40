"""fp8 attention without a GPU: the float64 fp8 references against the half-precision ones and
a naive loop that rounds where the graph rounds; the fp8 graphs finalized by the real library
(host-side in cuDNN 9) with the tensors they bind; the plans' problems, keys and every bad
input refused before any C call."""

import itertools
import json

import ml_dtypes
import numpy as np
import pytest

from cudalibs import dtypes
from cudalibs.cudnn import _base
from cudalibs.cudnn.attention import fp8 as F
from cudalibs.cudnn.attention import lower as AG
from cudalibs.driver.array import DeviceArray
from cudalibs.errors import CudaLibsError
from cudalibs.runtime import front
from cudalibs.testing import ref as R

E4, E5 = dtypes.float8_e4m3fn, dtypes.float8_e5m2
BF16 = dtypes.bfloat16
F32 = np.dtype(np.float32)


@pytest.fixture(autouse=True)
def _forget_fake_devices():
    """Keys built here use a stand-in device; never let its environment leak."""
    yield
    _base._env_of.clear()


# -- the references ---------------------------------------------------------------------------------
def test_quantize_rounds_to_nearest_even_and_saturates():
    x = np.array([1.0625, 1.1875, 1.125 + 2.0 ** -30, 460.0, -1e9, 2.0 ** -10, 3 * 2.0 ** -11,
                  np.nan])
    got = R.quantize_fp8(x, 1.0, E4).astype(np.float64)
    np.testing.assert_array_equal(got[:7], [1.0, 1.25, 1.125, 448.0, -448.0, 0.0, 2.0 ** -9])
    assert np.isnan(got[7]) and R.quantize_fp8(x, 1.0, E4).dtype == E4
    assert R.quantize_fp8([1e9], 1.0, E5).astype(np.float64)[0] == 57344.0    # not inf
    np.testing.assert_array_equal(R.quantize_fp8([3.0], 0.5, E5).astype(np.float64), [1.5])
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        R.quantize_fp8([1.0], 1.0, np.int8)


def _fp8_problem(rng, b=2, h_q=4, h_kv=2, s_q=5, s_kv=7, d=16, dtype=E4):
    """Stored fp8 q, k, v and their descales (powers of two)."""
    out = []
    for h, s in ((h_q, s_q), (h_kv, s_kv), (h_kv, s_kv)):
        x = rng.standard_normal((b, h, s, d)) * 2.0
        out += [R.quantize_fp8(x, 32.0, dtype), 1 / 32.0]
    return out


def _dq(x, descale):
    return np.asarray(x, np.float64) * descale


MASKS = [dict(), dict(causal=True), dict(seq_lens_q=[3, 5], seq_lens_kv=[7, 2]),
         dict(causal=True, seq_lens_q=[5, 4], seq_lens_kv=[6, 7])]


@pytest.mark.parametrize("mask", MASKS, ids=["plain", "causal", "padding", "both"])
def test_unrounded_forward_is_the_attention_of_the_dequantised_inputs(mask):
    rng = np.random.default_rng(3)
    q, dq_, k, dk_, v, dv_ = _fp8_problem(rng)
    res = R.sdpa_fp8_forward(q, k, v, descale_q=dq_, descale_k=dk_, descale_v=dv_,
                             descale_s=1 / 64, scale_s=64.0, scale_o=8.0, scale=0.3,
                             quantize_p=False, **mask)
    assert isinstance(res, R.Fp8Attention) and res.o.dtype == E4
    o, stats = R.sdpa_forward(_dq(q, dq_), _dq(k, dk_), _dq(v, dv_), scale=0.3, **mask)
    rows = np.broadcast_to(R.valid_rows((2, 5, 7), **mask), o.shape)
    np.testing.assert_allclose(res.o_real[rows], o[rows], rtol=1e-12, atol=1e-12)
    fin = np.isfinite(stats)
    np.testing.assert_allclose(res.stats[fin], stats[fin], rtol=1e-12)
    assert res.amax_o == pytest.approx(np.abs(o[rows]).max(), rel=1e-12)
    np.testing.assert_array_equal(res.o, R.quantize_fp8(res.o_real, 8.0, E4))
    vis = R.sdpa_mask((2, 5, 7), **mask)
    s = np.einsum("bhid,bhjd->bhij", _dq(q, dq_), np.repeat(_dq(k, dk_), 2, axis=1)) * 0.3
    s = np.where(vis, s, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(axis=3, keepdims=True))
        p = np.nan_to_num(p / p.sum(axis=3, keepdims=True))
    assert res.amax_s == pytest.approx(p.max(), rel=1e-12)


def _naive_forward(q, k, v, dq_, dk_, dv_, scale, scale_s, causal, lq, lk):
    """One row at a time: P rounded to fp8 with scale_s, then the second matmul."""
    b, h_q, s_q, _ = q.shape
    h_kv, s_kv = k.shape[1], k.shape[2]
    o = np.zeros((b, h_q, s_q, v.shape[3]))
    for n, h, i in itertools.product(range(b), range(h_q), range(s_q)):
        hk = h // (h_q // h_kv)
        js = [j for j in range(s_kv) if not (causal and j > i) and j < lk[n]]
        if i >= lq[n] or not js:
            continue
        sc = np.array([float(np.dot(_dq(q[n, h, i], dq_), _dq(k[n, hk, j], dk_))) * scale
                       for j in js])
        w = np.exp(sc - sc.max())
        for j, pj in zip(js, w / w.sum()):
            p8 = float(np.asarray(np.float64(pj * scale_s)).astype(E4)) / scale_s
            o[n, h, i] += p8 * _dq(v[n, hk, j], dv_)
    return o


@pytest.mark.parametrize("causal", [False, True])
def test_rounded_forward_matches_a_naive_loop(causal):
    rng = np.random.default_rng(5)
    q, dq_, k, dk_, v, dv_ = _fp8_problem(rng, h_q=2, h_kv=1)
    lq, lk = [5, 3], [7, 4]
    res = R.sdpa_fp8_forward(q, k, v, descale_q=dq_, descale_k=dk_, descale_v=dv_,
                             descale_s=1 / 64, scale_s=64.0, scale_o=4.0, scale=0.25,
                             causal=causal, seq_lens_q=lq, seq_lens_kv=lk)
    want = _naive_forward(q, k, v, dq_, dk_, dv_, 0.25, 64.0, causal, lq, lk)
    rows = np.broadcast_to(R.valid_rows((2, 5, 7), causal=causal, seq_lens_q=lq,
                                        seq_lens_kv=lk), want.shape)
    np.testing.assert_allclose(res.o_real[rows], want[rows], rtol=1e-12, atol=1e-13)
    # P rounding is what the graph does: the unrounded attention differs by about u
    exact = R.sdpa_fp8_forward(q, k, v, descale_q=dq_, descale_k=dk_, descale_v=dv_,
                               descale_s=1 / 64, scale_s=64.0, scale_o=4.0, scale=0.25,
                               causal=causal, seq_lens_q=lq, seq_lens_kv=lk, quantize_p=False)
    err = np.linalg.norm((res.o_real - exact.o_real)[rows]) / np.linalg.norm(exact.o_real[rows])
    assert 0 < err < 2 ** -4


@pytest.mark.parametrize("mask", MASKS, ids=["plain", "causal", "padding", "both"])
def test_unrounded_backward_is_the_gradient_of_the_dequantised_attention(mask):
    rng = np.random.default_rng(11)
    q, dq_, k, dk_, v, dv_ = _fp8_problem(rng)
    qr, kr, vr = _dq(q, dq_), _dq(k, dk_), _dq(v, dv_)
    do = R.quantize_fp8(rng.standard_normal((2, 4, 5, 16)), 16.0, E5)
    o, stats = R.sdpa_forward(qr, kr, vr, scale=0.3, **mask)
    scales = dict(descale_q=dq_, descale_k=dk_, descale_v=dv_, descale_o=1.0,
                  descale_do=1 / 16, descale_s=1 / 64, descale_dp=1.0, scale_s=64.0,
                  scale_dq=1.0, scale_dk=1.0, scale_dv=1.0, scale_dp=1.0)
    res = R.sdpa_fp8_backward(q, k, v, o, do, scale=0.3, quantize=False, **scales, **mask)
    want = R.sdpa_backward(qr, kr, vr, _dq(do, 1 / 16), scale=0.3, **mask)
    rows = R.valid_rows((2, 5, 7), **mask)
    for got, w, n in zip((res.dq_real, res.dk_real, res.dv_real), want, ("dq", "dk", "dv")):
        r = np.broadcast_to(rows, w.shape) if n == "dq" else np.ones(w.shape, bool)
        np.testing.assert_allclose(got[r], w[r], rtol=1e-10, atol=1e-12, err_msg=n)
    assert res.dq.dtype == E5 and res.amax_dq == pytest.approx(np.abs(res.dq_real).max())
    # P from the statistics the forward wrote is the same P
    again = R.sdpa_fp8_backward(q, k, v, o, do, scale=0.3, quantize=False, stats=stats,
                                **scales, **mask)
    np.testing.assert_allclose(again.dk_real, res.dk_real, rtol=1e-10, atol=1e-12)


def test_rounded_backward_rounds_p_and_ds_where_the_graph_does():
    rng = np.random.default_rng(13)
    q, dq_, k, dk_, v, dv_ = _fp8_problem(rng, h_q=2, h_kv=2)
    qr, kr, vr = _dq(q, dq_), _dq(k, dk_), _dq(v, dv_)
    do = R.quantize_fp8(rng.standard_normal((2, 2, 5, 16)), 16.0, E4)
    fwd = R.sdpa_fp8_forward(q, k, v, descale_q=dq_, descale_k=dk_, descale_v=dv_,
                             descale_s=1 / 64, scale_s=64.0, scale_o=32.0, scale=0.3)
    res = R.sdpa_fp8_backward(q, k, v, fwd.o, do, descale_q=dq_, descale_k=dk_, descale_v=dv_,
                              descale_o=1 / 32, descale_do=1 / 16, descale_s=1 / 64,
                              descale_dp=1 / 128, scale_s=64.0, scale_dq=8.0, scale_dk=8.0,
                              scale_dv=8.0, scale_dp=128.0, scale=0.3)
    # the graph's steps, written out with numpy
    s = np.einsum("bhid,bhjd->bhij", qr, kr) * 0.3
    p = np.exp(s - s.max(axis=3, keepdims=True))
    p /= p.sum(axis=3, keepdims=True)
    p8 = R.quantize_fp8(p, 64.0, E4).astype(np.float64) / 64
    dor = _dq(do, 1 / 16)
    np.testing.assert_allclose(res.dv_real, np.einsum("bhij,bhid->bhjd", p8, dor), rtol=1e-12)
    d_rows = (dor * _dq(fwd.o, 1 / 32)).sum(axis=3, keepdims=True)
    ds = p * (np.einsum("bhid,bhjd->bhij", dor, vr) - d_rows) * 0.3
    assert res.amax_dp == pytest.approx(np.abs(ds).max(), rel=1e-12)
    ds8 = R.quantize_fp8(ds, 128.0, E4).astype(np.float64) / 128
    np.testing.assert_allclose(res.dq_real, np.einsum("bhij,bhjd->bhid", ds8, kr), rtol=1e-12)
    np.testing.assert_allclose(res.dk_real, np.einsum("bhij,bhid->bhjd", ds8, qr), rtol=1e-12)
    np.testing.assert_array_equal(res.dk, R.quantize_fp8(res.dk_real, 8.0, E4))
    assert isinstance(res, R.Fp8Gradients) and res.dv.dtype == E4


# -- the fp8 graphs -----------------------------------------------------------------------------------
def _spec(b=2, hq=4, hkv=2, sq=128, skv=192, d=128, dv=128, causal=False, padding=False,
          stats=True, backward=False, o=E4, do=E4, grads=E4, dtype=E4):
    qs, ks, vs = AG._packed((b, hq, sq, d)), AG._packed((b, hkv, skv, d)), \
        AG._packed((b, hkv, skv, dv))
    os_ = AG._packed((b, hq, sq, dv))
    sp = AG.Spec(dtype, b, hq, hkv, sq, skv, d, dv, qs, ks, vs, os_, 0.125, causal, None,
                 padding, 0.0, True, stats, False, fp8=AG.Fp8(o))
    if backward:
        sp = sp._replace(backward=True, stats=True, do_strides=os_, dq_strides=qs,
                         dk_strides=ks, dv_strides=vs, fp8=AG.Fp8(o, do, grads, grads, grads))
    return sp


@pytest.mark.cudnn_finalize
@pytest.mark.parametrize("opts", [dict(), dict(causal=True), dict(padding=True),
                                  dict(hkv=4, stats=False), dict(dtype=E5, o=E5)],
                         ids=["plain", "causal", "padding", "mha-nostats", "e5m2"])
def test_fp8_forward_graph_binds_scales_and_amax(opts):
    sp = _spec(**opts)
    low = AG.fp8_forward_graph(sp)
    assert low.graph.finalized and low.kind == "fp8"
    want = {"q", "k", "v", "o", "scale", *AG.FP8_SCALES["forward"], *AG.FP8_AMAX["forward"]}
    want |= {"stats"} if sp.stats else set()
    want |= {"seq_q", "seq_kv"} if sp.padding else set()
    want |= {"neg_inf"} if sp.causal or sp.padding else set()
    assert set(low.slots) == want
    assert list(low.uids) == sorted(low.uids) == [AG.UIDS[s] for s in low.slots]
    assert set(low.scalars) == {"scale"} | ({"neg_inf"} & want)   # the scales: device tensors


@pytest.mark.cudnn_finalize
@pytest.mark.parametrize("opts", [dict(), dict(causal=True, padding=True), dict(hkv=1),
                                  dict(do=E5, grads=E5)], ids=["plain", "masks", "mqa", "hybrid"])
def test_fp8_backward_graph_binds_scales_and_amax(opts):
    sp = _spec(backward=True, **opts)
    low = AG.fp8_backward_graph(sp)
    assert low.graph.finalized and low.kind == "fp8"
    want = {"q", "k", "v", "o", "do", "stats", "dq", "dk", "dv", "scale",
            *AG.FP8_SCALES["backward"], *AG.FP8_AMAX["backward"]}
    want |= {"seq_q", "seq_kv"} if sp.padding else set()
    want |= {"neg_inf"} if sp.causal or sp.padding else set()
    assert set(low.slots) == want            # no float32 scratch: D stays in the kernel


def test_fp8_slots_are_the_calls_arguments():
    import inspect

    fwd = inspect.signature(F.SdpaFp8Plan.execute).parameters
    bwd = inspect.signature(F.SdpaFp8BackwardPlan.execute).parameters
    assert set(AG.FP8_SCALES["forward"] + AG.FP8_AMAX["forward"]) <= set(fwd)
    assert set(AG.FP8_SCALES["backward"] + AG.FP8_AMAX["backward"]) <= set(bwd)
    for name in AG.FP8_SCALES["backward"]:
        assert bwd[name].default is inspect.Parameter.empty     # required, keyword-only
        assert bwd[name].kind is inspect.Parameter.KEYWORD_ONLY


# -- the plans: problem, keys, bad input ---------------------------------------------------------------
def _dev(cc):
    return type("D", (), {"ordinal": 0, "compute_capability": cc})()


HOPPER, BLACKWELL, AMPERE = _dev((9, 0)), _dev((10, 0)), _dev((8, 0))


def _fake(shape, dtype=E4, strides=None, dev=HOPPER, ptr=0x10000):
    dt = dtypes.lookup(dtype)
    if strides is None:
        strides = tuple(s * dt.itemsize for s in AG._packed(shape))
    return DeviceArray._view(ptr, tuple(shape), tuple(strides), dt, dev, None, None)


Q, K = (2, 4, 128, 128), (2, 2, 192, 128)


def _qkv(q=Q, k=K, dtype=E4, dev=HOPPER):
    return _fake(q, dtype, dev=dev), _fake(k, dtype, dev=dev), _fake(k, dtype, dev=dev)


def test_plan_problem_text_and_tuning_key():
    q, k, v = _qkv()
    plan = F.SdpaFp8Plan(q, k, v, causal=True, training=True)
    sp = plan.spec
    assert sp.fp8 == AG.Fp8(E4) and sp.stats and sp.causal and sp.scale == pytest.approx(1 / 128 ** 0.5)
    assert "o float8_e4m3fn" in repr(plan) and "not planned" in repr(plan)
    key = plan._tuning_key()
    json.dumps(key)
    assert key["spec"]["fp8"][0] == "float8_e4m3fn" and key["graphs"] == ["fp8"]
    bp = F.SdpaFp8BackwardPlan(q, k, v, _fake(Q), _fake(Q, E5), causal=True)
    assert bp.spec.fp8 == AG.Fp8(E4, E5, E5, E5, E5) and bp.spec.backward
    assert "do float8_e5m2, grads float8_e5m2" in repr(bp)
    assert bp._slot_dtype("do") == E5 and bp._slot_dtype("stats") == F32 and \
        bp._slot_dtype("q") == E4
    # another gradient type, and Blackwell's half-precision outputs
    bp2 = F.SdpaFp8BackwardPlan(q, k, v, _fake(Q), _fake(Q), out_dtype=E5)
    assert bp2.spec.fp8.dq == E5
    bq, bk, bv = _qkv(dev=BLACKWELL)
    if _base.version() >= (9, 13, 0):
        assert F.SdpaFp8Plan(bq, bk, bv, out_dtype=BF16).spec.fp8.o == BF16


def test_one_shot_keys_name_their_fields(monkeypatch):
    seen = []

    class _Stop(Exception):
        pass

    def insert(key, plan, prepare):
        seen.append((key, plan))
        raise _Stop

    monkeypatch.setattr(front, "insert", insert)
    q, k, v = _qkv()
    s = _fake((1,), F32)
    scales = {n: s for n in AG.FP8_SCALES["forward"]}
    with pytest.raises(_Stop):
        F.sdpa_fp8(q, k, v, causal=True, out_dtype=E5, **scales)
    stats = _fake((2, 4, 128, 1), F32)
    with pytest.raises(_Stop):
        F.sdpa_fp8_backward(q, k, v, _fake(Q), _fake(Q, E5), stats,
                            **{n: s for n in AG.FP8_SCALES["backward"]})
    (fk, fp), (bk, bp) = seen
    F.SDPA_FP8_KEY.check(fk)
    F.SDPA_FP8_BACKWARD_KEY.check(bk)
    named = F.SDPA_FP8_KEY.named(fk)
    assert named["out_dtype"] == E5 and named["causal"] and not named["padding"]
    assert isinstance(fp, F.SdpaFp8Plan) and fp.spec.fp8.o == E5 and fp._max == 1
    nb = F.SDPA_FP8_BACKWARD_KEY.named(bk)
    assert nb["do_dtype"] == E5 and nb["out_dtype"] is None and nb["o_dtype"] == E4
    assert isinstance(bp, F.SdpaFp8BackwardPlan) and bp.spec.fp8.dq == E5


BAD = [
    (lambda: F.SdpaFp8Plan(*_qkv(dtype=np.float16)), TypeError, "fp8 attention takes"),
    (lambda: F.SdpaFp8Plan(_fake(Q), _fake(K, E5), _fake(K)), TypeError, "share one dtype"),
    (lambda: F.SdpaFp8Plan(*_qkv(q=(2, 4, 128, 120), k=(2, 2, 192, 120))), ValueError,
     "multiples of 16 up to 256"),
    (lambda: F.SdpaFp8Plan(*_qkv(q=(2, 4, 128, 272), k=(2, 2, 192, 272))), ValueError,
     "multiples of 16 up to 256"),
    (lambda: F.SdpaFp8Plan(*_qkv(dev=AMPERE)), CudaLibsError, "compute capability 9.0"),
    (lambda: F.SdpaFp8Plan(*_qkv(q=(2, 4, 128, 256), k=(2, 2, 192, 256), dev=BLACKWELL)),
     ValueError, "up to 128"),
    (lambda: F.SdpaFp8Plan(*_qkv(), out_dtype=BF16), CudaLibsError, "compute capability 10"),
    (lambda: F.SdpaFp8Plan(*_qkv(), out_dtype=np.float32), TypeError, "written as fp8"),
    (lambda: F.SdpaFp8Plan(*_qkv(), out=_fake(Q, E5), out_dtype=E4), TypeError,
     "out_dtype is float8_e4m3fn"),
    (lambda: F.SdpaFp8Plan(*_qkv(), out=_fake((2, 4, 128, 64))), ValueError, "out must be"),
    (lambda: F.SdpaFp8Plan(*_qkv(), seq_lens_q=[1, 1]), ValueError, "together"),
    (lambda: F.SdpaFp8Plan(_fake(Q, strides=(Q[1] * Q[2] * Q[3], Q[2] * Q[3], 136, 1)),
                           *_qkv()[1:]), ValueError, "multiples of 16 bytes"),
    (lambda: F.SdpaFp8BackwardPlan(*_qkv(q=(2, 4, 100, 128)), _fake((2, 4, 100, 128)),
                                   _fake((2, 4, 100, 128))), ValueError, "a multiple of 16"),
    (lambda: F.SdpaFp8BackwardPlan(*_qkv(q=(2, 4, 128, 64), k=(2, 2, 192, 64)),
                                   _fake((2, 4, 128, 64)), _fake((2, 4, 128, 64))),
     ValueError, "d = d_v = 128 only"),
    (lambda: F.SdpaFp8BackwardPlan(*_qkv(), _fake(Q), _fake(Q, BF16)), TypeError,
     "do has dtype bfloat16"),
    (lambda: F.SdpaFp8BackwardPlan(*_qkv(), _fake((2, 4, 64, 128)), _fake(Q)), ValueError,
     "o must be"),
    (lambda: F.SdpaFp8BackwardPlan(*_qkv(), _fake(Q, BF16), _fake(Q)), CudaLibsError,
     "compute capability 10"),
    (lambda: F.SdpaFp8BackwardPlan(*_qkv(), _fake(Q), _fake(Q),
                                   out=(_fake(Q, E5), None, _fake(K))), TypeError,
     "share one dtype"),
    (lambda: F.SdpaFp8BackwardPlan(*_qkv(), _fake(Q), _fake(Q), out=(None, _fake(Q), None)),
     ValueError, "dk must be"),
    (lambda: F.SdpaFp8BackwardPlan(*_qkv(), _fake(Q), _fake(Q), out=[None]), TypeError,
     "out must be"),
    (lambda: F.sdpa_fp8(np.zeros(Q, E4), *_qkv()[1:], **{n: None for n in
                                                          AG.FP8_SCALES["forward"]}),
     TypeError, "host numpy"),
]


@pytest.mark.parametrize("call, exc, match", BAD, ids=[m for _, _, m in BAD])
def test_bad_input_raises_before_any_c_call(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


class _Planned(F.SdpaFp8Plan):
    """A forward plan whose candidate is a stand-in: execute's checks run, no library call."""

    def plan(self):
        self._exe = object()
        return self


def _scales(**kw):
    out = {n: _fake((1,), F32, ptr=0x20000 + 256 * i)
           for i, n in enumerate(AG.FP8_SCALES["forward"])}
    out.update(kw)
    return out


_OUT = dict(out=_fake(Q, ptr=0x900000), amax_s=_fake((1,), F32, ptr=0x30000),
            amax_o=_fake((1,), F32, ptr=0x30100))


@pytest.mark.parametrize("kw, exc, match", [
    (_scales(scale_o=None), TypeError, "scale_o= is required"),
    (_scales(scale_s=_fake((1,), np.float64, ptr=0x40000)), ValueError, "one float32"),
    (_scales(scale_s=_fake((2,), F32, ptr=0x40000)), ValueError, "one float32"),
    (_scales(descale_q=_fake((1,), F32, ptr=0x40004)), ValueError, "16-byte aligned"),
    (dict(_scales(), **dict(_OUT, amax_o=_fake((1,), F32, ptr=0x20000))), ValueError,
     "same memory as descale_q"),
    (dict(_scales(), **dict(_OUT, amax_s=_fake((1,), F32, ptr=0x30100))), ValueError,
     "same memory as amax_s"),
    (dict(_scales(), **dict(_OUT, amax_s=_fake((1,), F32, ptr=0x10010))), ValueError,
     "amax_s overlaps q"),
    (dict(_scales(), **dict(_OUT, out=_fake(Q, E5, ptr=0x900000))), ValueError,
     "plan was made for float8_e4m3fn"),
    (dict(_scales(), stats=_fake((2, 4, 128, 1), F32), **_OUT), ValueError,
     "without training"),
])
def test_execute_checks_before_any_c_call(kw, exc, match):
    plan = _Planned(*_qkv())
    kw = dict(_OUT, **kw) if "out" not in kw else kw
    with pytest.raises(exc, match=match):
        plan.execute(*_qkv(), **kw)
    assert ml_dtypes.finfo(E4).max == 448      # the type the bounds of the GPU tier assume
