"""Attention without a GPU: the float64 references against a naive loop and finite
differences; the graph builders it needs and the attention graphs finalized by the real
library (host-side in cuDNN 9); the plan's problem, keys and every bad input refused before
any C call."""

import importlib
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cudalibs
from cudalibs import dtypes
from cudalibs.cudnn import _base
from cudalibs.cudnn import _lib as T
from cudalibs.cudnn import backend as G
from cudalibs.cudnn.attention import lower as AG
from cudalibs.cudnn.attention import masks as AM
from cudalibs.cudnn.attention import plan as AP
from cudalibs.cudnn.attention import serving as AS
from cudalibs.runtime import front
from cudalibs.runtime.options import SDPA_BACKWARD_LOWERINGS, SDPA_LOWERINGS
from cudalibs.driver.array import DeviceArray
from cudalibs.errors import CudaLibsError
from cudalibs.testing.ref import _attention as R

# The package's ``sdpa`` is the function; the module of the plans is reached by its path.
A = importlib.import_module("cudalibs.cudnn.attention.sdpa")

F16 = np.dtype(np.float16)
BF16 = dtypes.bfloat16


@pytest.fixture(autouse=True)
def _forget_fake_devices():
    """Keys built here use a stand-in device; never let its environment leak."""
    yield
    _base._env_of.clear()


# -- the references ---------------------------------------------------------------------------------
def _visible(i, j, n, s_q, s_kv, causal=False, window=None, lq=None, lk=None):
    """Whether key ``j`` is visible to query ``i`` of batch entry ``n``, rule by rule."""
    if lq is not None and (i >= lq[n] or j >= lk[n]):
        return False
    n_q = s_q if lq is None else lq[n]
    n_kv = s_kv if lk is None else lk[n]
    diag = i + (n_kv - n_q if causal == "bottom_right" else 0)   # the diagonal's key
    left, right = window if window is not None else (None, None)
    if causal:
        right = 0
    if right is not None and j > diag + right:
        return False
    return left is None or j >= diag - left


def _naive(q, k, v, scale, causal=False, bias=None, lq=None, lk=None, keep=None, p=0.0,
           window=None, slopes=None, cap=0.0):
    """One query row at a time, with Python loops over every mask rule (and the variants:
    the window, ALiBi ``slopes``, the softcap ``cap``)."""
    b, h_q, s_q, _ = q.shape
    h_kv, s_kv = k.shape[1], k.shape[2]
    o = np.zeros((b, h_q, s_q, v.shape[3]))
    stats = np.full((b, h_q, s_q, 1), -np.inf)
    for n, h, i in itertools.product(range(b), range(h_q), range(s_q)):
        hk = h // (h_q // h_kv)
        if lq is not None and i >= lq[n]:
            continue
        scores, js = [], []
        for j in range(s_kv):
            if not _visible(i, j, n, s_q, s_kv, causal, window, lq, lk):
                continue
            sc = float(np.dot(q[n, h, i], k[n, hk, j])) * scale
            if cap:
                sc = cap * np.tanh(sc / cap)
            if bias is not None:
                sc += bias[min(n, bias.shape[0] - 1), min(h, bias.shape[1] - 1), i, j]
            if slopes is not None:
                sc += slopes[h] * (j - i)
            scores.append(sc)
            js.append(j)
        if not js:
            continue
        m = max(scores)
        w = [np.exp(x - m) for x in scores]
        total = sum(w)
        stats[n, h, i, 0] = m + np.log(total)
        for j, wj in zip(js, w):
            pj = wj / total
            if keep is not None:
                pj = pj * keep[n, h, i, j] / (1.0 - p)
            o[n, h, i] += pj * v[n, hk, j]
    return o, stats


def _problem(rng, b=2, h_q=4, h_kv=2, s_q=5, s_kv=7, d=4, d_v=3):
    q = rng.standard_normal((b, h_q, s_q, d))
    k = rng.standard_normal((b, h_kv, s_kv, d))
    v = rng.standard_normal((b, h_kv, s_kv, d_v))
    return q, k, v


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31), st.booleans(), st.booleans(), st.booleans(), st.booleans(),
       st.sampled_from([(4, 4), (4, 2), (6, 1)]))
def test_forward_reference_matches_a_naive_loop(seed, causal, with_bias, padding, drop, heads):
    rng = np.random.default_rng(seed)
    h_q, h_kv = heads
    q, k, v = _problem(rng, h_q=h_q, h_kv=h_kv)
    bias = rng.standard_normal((1, h_q, 5, 7)) if with_bias else None
    lq, lk = ([3, 5], [7, 2]) if padding else (None, None)
    keep = (rng.random((2, h_q, 5, 7)) > 0.3).astype(np.float64) if drop else None
    p = 0.3 if drop else 0.0
    o, stats = R.sdpa_forward(q, k, v, scale=0.7, causal=causal, bias=bias, seq_lens_q=lq,
                              seq_lens_kv=lk, dropout_mask=keep, dropout=p)
    no, nstats = _naive(q, k, v, 0.7, causal, bias, lq, lk, keep, p)
    # Both are float64 sums of a handful of terms in different orders: a few ulps apart, so
    # a stat that nearly cancels to 0 needs an absolute floor besides the relative bound.
    np.testing.assert_allclose(o, no, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.isinf(stats), np.isinf(nstats))
    fin = np.isfinite(nstats)
    np.testing.assert_allclose(stats[fin], nstats[fin], rtol=1e-12, atol=1e-12)


def test_stats_are_the_log_sum_exp_and_default_scale():
    rng = np.random.default_rng(1)
    q, k, v = _problem(rng, h_kv=4)
    _, stats = R.sdpa_forward(q, k, v)
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(4)
    np.testing.assert_allclose(stats[..., 0], np.log(np.exp(s).sum(-1)), rtol=1e-12)
    rows = R.valid_rows((2, 5, 7), causal=True, seq_lens_q=[2, 5], seq_lens_kv=[1, 7])
    assert rows.shape == (2, 1, 5, 1) and rows[0, 0, :2, 0].all() and not rows[0, 0, 2:].any()


def _loss(args, do, **kw):
    o, _ = R.sdpa_forward(*args, **kw)
    return float((o * do).sum())


@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"seq_lens_q": [4, 2],
                                                       "seq_lens_kv": [3, 7]},
                                {"bias": "b"}, {"dropout": 0.25},
                                # the variants (tests/cpu/test_attention_variants.py)
                                {"softcap": 1.2}, {"causal": True, "alibi": True},
                                {"causal": True, "window": (2, None), "alibi": True,
                                 "softcap": 0.8},
                                {"causal": "bottom_right", "window": (1, None)},
                                {"window": (1, 2)},
                                {"causal": "bottom_right", "seq_lens_q": [4, 2],
                                 "seq_lens_kv": [6, 7]},
                                {"dropout": 0.25, "window": (3, 1), "softcap": 2.0}],
                         ids=["plain", "causal", "padding", "bias", "dropout", "softcap",
                              "alibi", "alibi+window+softcap", "bottom_right+window", "window",
                              "bottom_right+padding", "dropout+window+softcap"])
def test_backward_reference_matches_finite_differences(kw):
    rng = np.random.default_rng(7)
    q, k, v = _problem(rng)           # grouped-query: 4 query heads share 2 key/value heads
    kw = dict(kw, scale=0.6)
    if kw.get("bias") == "b":
        kw["bias"] = rng.standard_normal((2, 1, 5, 7))
    if kw.get("dropout"):
        kw["dropout_mask"] = (rng.random((2, 4, 5, 7)) > 0.25).astype(np.float64)
    do = rng.standard_normal((2, 4, 5, 3))
    grads = R.sdpa_backward(q, k, v, do, **kw)
    for g, num in zip(grads, _by_differences(kw, [q, k, v], do)):
        np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-8)


def _by_differences(kw, args, do, eps=1e-6):
    """The gradients of ``sum(o * do)`` against each of ``args`` (``q, k, v`` and, when
    given, the bias) by central differences of the reference forward with options ``kw``."""
    def loss(vals):
        return _loss(vals[:3], do, **kw, **({"bias": vals[3]} if len(vals) > 3 else {}))

    out = []
    for which in range(len(args)):
        num = np.zeros_like(args[which])
        for idx in np.ndindex(num.shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[which][idx] += eps
            minus[which][idx] -= eps
            num[idx] = (loss(plus) - loss(minus)) / (2 * eps)
        out.append(num)
    return out


def test_reference_bad_input():
    rng = np.random.default_rng(0)
    q, k, v = _problem(rng, h_q=3, h_kv=2)
    with pytest.raises(ValueError, match="divide"):
        R.sdpa_forward(q, k, v)
    q, k, v = _problem(rng)
    with pytest.raises(ValueError, match="dropout_mask"):
        R.sdpa_forward(q, k, v, dropout=0.5)
    with pytest.raises(ValueError, match="mismatched"):
        R.sdpa_forward(q, k[:, :, :, :3], v)


# -- the generic graph builders -------------------------------------------------------------------------
def test_pointwise_modes_cover_the_enum():
    modes = {k for k in vars(T) if k.startswith("CUDNN_POINTWISE_")
             and isinstance(getattr(T, k), int)}
    assert {f"CUDNN_POINTWISE_{m.upper()}" for m in G.POINTWISE_MODES} >= modes
    assert G.POINTWISE_MODES["relu"] == T.CUDNN_POINTWISE_RELU_FWD
    assert G.POINTWISE_MODES["select"] == T.CUDNN_POINTWISE_BINARY_SELECT
    assert "relu_bwd" in G.BACKWARD_MODES and "binary_select" in G.TERNARY_MODES
    assert G.REDUCTION_OPS["max"] == T.CUDNN_REDUCE_TENSOR_MAX


@pytest.mark.cudnn_finalize
@pytest.mark.parametrize("mode", sorted(G.POINTWISE_MODES))
def test_every_pointwise_mode_finalizes(mode):
    kw = {"axis": 3} if mode == "gen_index" else {}
    compute = np.bool_ if mode.startswith("logical") else np.float32
    pw = G.pointwise(mode, compute=compute, **kw)
    assert pw.finalized and pw.kind == T.CUDNN_BACKEND_POINTWISE_DESCRIPTOR


def test_builders_refuse_bad_arguments():
    with pytest.raises(ValueError, match="axis"):
        G.pointwise("gen_index")
    with pytest.raises(ValueError, match="axis"):
        G.pointwise("add", axis=1)
    with pytest.raises(TypeError, match="unknown parameter"):
        G.pointwise("elu", elu_beta=1.0)
    with pytest.raises(ValueError, match="pointwise mode"):
        G.pointwise("fma")
    with pytest.raises(ValueError, match="reduction op"):
        G.reduction("sum")
    with pytest.raises(ValueError, match="distribution"):
        G.rng("poisson")
    with pytest.raises(TypeError, match="bernoulli"):
        G.rng("bernoulli", mean=0.0)
    with pytest.raises(ValueError, match="probability"):
        G.rng("bernoulli", probability=1.5)
    # The operations refuse before they look at their descriptors: none needs a finalize.
    x = G.BackendDescriptor(T.CUDNN_BACKEND_TENSOR_DESCRIPTOR)
    pw = G.BackendDescriptor(T.CUDNN_BACKEND_POINTWISE_DESCRIPTOR)
    rng = G.BackendDescriptor(T.CUDNN_BACKEND_RNG_DESCRIPTOR)
    with pytest.raises(ValueError, match="needs b"):
        G.pointwise_operation(pw, x, x, t=x)
    with pytest.raises(ValueError, match="offset"):
        G.rng_operation(rng, x, seed=x)
    with pytest.raises(ValueError, match="no offset"):
        G.rng_operation(rng, x, seed=3, offset=x)


@pytest.mark.cudnn_finalize
def test_generic_operations_finalize_host_side():
    f32, i32, b8 = np.float32, np.int32, np.bool_
    a = G.tensor(1, np.float16, (2, 4, 8, 16), (512, 128, 16, 1))
    bt = G.tensor(2, np.float16, (2, 1, 16, 8), (128, 128, 1, 16))     # one head, broadcast
    c = G.tensor(3, f32, (2, 4, 8, 8), (256, 64, 8, 1), virtual=True)
    mm = G.matmul_operation(a, bt, c, G.matmul(padding=0.0))
    red = G.tensor(4, f32, (2, 4, 8, 1), (32, 8, 1, 1), virtual=True)
    ro = G.reduction_operation(G.reduction("max", deterministic=False), c, red)
    idx = G.tensor(5, i32, (2, 4, 8, 8), (256, 64, 8, 1), virtual=True)
    gi = G.pointwise_operation(G.pointwise("gen_index", axis=2), c, idx)
    keep = G.tensor(6, b8, (2, 4, 8, 8), (256, 64, 8, 1), virtual=True)
    cmp = G.pointwise_operation(G.pointwise("cmp_ge", compute=b8), idx, keep, idx)
    neg = G.tensor(7, f32, (1, 1, 1, 1), (1, 1, 1, 1), by_value=True)
    y = G.tensor(8, f32, (2, 4, 8, 8), (256, 64, 8, 1))
    sel = G.pointwise_operation(G.pointwise("binary_select"), c, y, neg, t=keep)
    mask = G.tensor(9, f32, (2, 4, 8, 8), (256, 64, 8, 1), virtual=True)
    seed = G.tensor(10, np.int64, (1, 1, 1, 1), (1, 1, 1, 1))
    off = G.tensor(11, np.int64, (1, 1, 1, 1), (1, 1, 1, 1), by_value=True)
    rg = G.rng_operation(G.rng(probability=0.9), mask, seed=seed, offset=off)
    rg2 = G.rng_operation(G.rng("normal", mean=0.0, std=1.0), mask, seed=5)
    rs = G.reshape_operation(c, G.tensor(12, f32, (2, 4, 8, 8), (256, 64, 1, 8), virtual=True))
    dx = G.tensor(13, f32, (2, 4, 8, 8), (256, 64, 8, 1), virtual=True)
    bw = G.pointwise_backward_operation(G.pointwise("relu_bwd"), c, y, dx)
    for op in (mm, ro, gi, cmp, sel, rg, rg2, rs, bw):
        assert op.finalized
    # a grouped matmul (one key head for four query heads) makes a graph on its own
    assert G.operation_graph([mm]).finalized


# -- the attention graphs ---------------------------------------------------------------------------
def _packed(dims):
    return AG._packed(dims)


def _spec(b=2, hq=4, hkv=2, sq=64, skv=96, d=64, dv=64, causal=False, bias=False,
          padding=False, dropout=0.0, by_value=True, stats=True, dump=False, backward=False,
          bshd=False):
    if bshd:
        qs, ks, vs = ((sq * hq * d, d, hq * d, 1), (skv * hkv * d, d, hkv * d, 1),
                      (skv * hkv * dv, dv, hkv * dv, 1))
    else:
        qs, ks, vs = _packed((b, hq, sq, d)), _packed((b, hkv, skv, d)), \
            _packed((b, hkv, skv, dv))
    os_ = AP.like(qs, (b, hq, sq, dv))
    bb = ((1, hq, sq, skv), _packed((1, hq, sq, skv))) if bias else None
    return AG.Spec(F16, b, hq, hkv, sq, skv, d, dv, qs, ks, vs, os_, 0.125, causal, bb, padding,
                   dropout, by_value, stats, dump, backward, os_, qs, ks, vs)


OPTIONS = [dict(), dict(causal=True), dict(bias=True), dict(padding=True),
           dict(dropout=0.1), dict(dropout=0.1, by_value=False, dump=True),
           dict(causal=True, bias=True, padding=True, dropout=0.2, bshd=True), dict(hkv=4),
           dict(stats=False), dict(dv=32)]


@pytest.mark.cudnn_finalize
@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_composite_graphs_finalize_with_the_tensors_they_bind(opts):
    spec = _spec(**opts)
    fwd = AG.forward_graph(spec)
    assert fwd.graph.finalized and fwd.kind == "composite"
    want = {"q", "k", "v", "o", "scale"} | ({"stats"} if spec.stats else set())
    want |= {"bias"} if spec.bias else set()
    want |= {"seq_q", "seq_kv"} if spec.padding else set()
    want |= {"seed", "offset", "drop_scale"} if spec.dropout else set()
    want |= {"mask"} if spec.dump_mask else set()
    want |= {"neg_inf"} if spec.causal or spec.padding else set()
    assert set(fwd.slots) == want
    assert list(fwd.uids) == sorted(fwd.uids) == [AG.UIDS[s] for s in fwd.slots]
    if spec.dropout and spec.seed_by_value:
        assert {"seed", "offset"} <= set(fwd.scalars)
    if not spec.dump_mask:
        bwd = AG.backward_graph(spec._replace(backward=True, stats=True))
        assert bwd.graph.finalized
        assert {"do", "dq", "dk", "dv", "stats", "dq_accum", "softmax_sum"} <= set(bwd.slots)
        assert ("drop_keep" in bwd.slots) == bool(spec.dropout)


def test_lowerings_each_plan_draws_from():
    # by default, every lowering each plan has
    assert tuple(A.SdpaPlan._builders) == SDPA_LOWERINGS == cudalibs.Options().sdpa_lowerings
    assert tuple(A.SdpaBackwardPlan._builders) == SDPA_BACKWARD_LOWERINGS == \
        cudalibs.Options().sdpa_backward_lowerings


@pytest.mark.cudnn_finalize
def test_backward_lowering_without_an_accumulator():
    dp = AG.backward_graph_dp(_spec(backward=True))
    assert dp.kind == "composite_dp" and dp.graph.finalized
    assert "dq_accum" not in dp.slots and {"dq", "softmax_sum"} <= set(dp.slots)


def test_unified_lowering_applies_to_the_plain_problem_only():
    assert AG.unified_applies(_spec()) is None
    assert AG.unified_applies(_spec(padding=True)) is None
    for opts in (dict(causal=True), dict(bias=True), dict(dropout=0.1)):
        assert "take no" in AG.unified_applies(_spec(**opts))


@pytest.mark.cudnn_finalize
def test_unified_lowering_binds_its_tensors():
    low = AG.unified_forward_graph(_spec(padding=True))
    assert low.kind == "unified" and set(low.slots) == {"q", "k", "v", "o", "stats", "seq_q",
                                                        "seq_kv", "scale"}


def test_aux_bytes_and_run_layout():
    spec = _spec(b=3, hq=5, sq=7, d=8)
    rows, acc = AG.aux_bytes(spec)
    assert rows == 512 and acc == (3 * 5 * 7 * 8 * 4 + 255) // 256 * 256

    class _P:
        workspace_size = 1000

    low = AG.Lowered(None, "composite", ("q", "softmax_sum", "dq_accum", "scale"), (1, 17, 16, 20),
                     {"scale": AG.ctypes.c_float(0.5)})
    run = AP.Run(_P(), low, {"softmax_sum": rows, "dq_accum": acc})
    assert run.aux == {"softmax_sum": 1024, "dq_accum": 1024 + rows}
    assert run.workspace == 1024 + rows + acc
    ptrs = run.pointers({"q": 0x1000}, 0x100000)
    assert ptrs[:3] == (0x1000, 0x100000 + 1024, 0x100000 + 1024 + rows)
    assert ptrs[3] == AG.ctypes.addressof(low.scalars["scale"])


# -- the plans: problem, keys, bad input (no GPU: a library call would fail differently) ---------------
class _FakeDevice:
    ordinal = 0
    compute_capability = (9, 0)


class _OldDevice:
    ordinal = 0
    compute_capability = (7, 5)


_DEV = _FakeDevice()
_OLD = _OldDevice()


def _fake(shape, dtype=F16, strides=None, dev=None, ptr=0x10000):
    dt = dtypes.lookup(dtype)
    if strides is None:
        strides = tuple(s * dt.itemsize for s in _packed(shape))
    return DeviceArray._view(ptr, tuple(shape), tuple(strides), dt, dev or _DEV, None, None)


def _bshd(b, h, s, d, dtype=F16):
    it = np.dtype(dtype).itemsize
    return _fake((b, h, s, d), dtype, (s * h * d * it, d * it, h * d * it, it))


def test_plan_problem_from_strides():
    q, k = _bshd(2, 8, 64, 64), _bshd(2, 2, 96, 64)
    plan = A.SdpaPlan(q, k, k, causal=True, training=True)
    sp = plan.spec
    assert (sp.b, sp.h_q, sp.h_kv, sp.s_q, sp.s_kv, sp.d) == (2, 8, 2, 64, 96, 64)
    assert sp.q_strides == (64 * 8 * 64, 64, 8 * 64, 1)
    assert sp.k_strides == (96 * 2 * 64, 64, 2 * 64, 1)
    assert sp.o_strides == sp.q_strides            # o takes q's layout
    assert sp.scale == pytest.approx(1 / 8) and sp.causal and sp.stats
    assert "not planned" in repr(plan) and "hq8 hkv2" in repr(plan)
    key = plan._tuning_key()
    assert key["spec"]["dtype"] == "float16" and key["graphs"] == list(SDPA_LOWERINGS)
    bp = A.SdpaBackwardPlan(q, k, k, q, q, causal=True)
    assert bp.spec.dk_strides == sp.k_strides and bp.spec.backward
    assert "backward" in repr(bp)
    # size-1 dimensions: any stride reads the same memory
    one = _fake((1, 1, 4, 64), F16, (0, 0, 128, 2))
    assert A.SdpaPlan(one, one, one).spec.q_strides == (256, 256, 64, 1)


def test_one_shot_keys_name_their_fields():
    q = _fake((2, 4, 64, 64))
    key = (A.SDPA_KEY, 0, q.dtype, q.shape, q.strides, q.shape, q.strides, q.shape,
           q.strides, None, *A._common_key(None, None, True, None, None, 0.0, None), True,
           SDPA_LOWERINGS, False, "env", *AM.key("sdpa", True, None, False, None, None),
           *AS.key_fields(None, None, None))
    A.SDPA_KEY.check(key)
    named = A.SDPA_KEY.named(key)
    assert named["causal"] is True and named["training"] is True and named["padding"] is False
    assert named["q_strides"] == q.strides and named["seed_by_value"] is True
    assert named["lowerings"] == SDPA_LOWERINGS and named["autotune"] is False
    k2 = A._common_key(None, 0.5, False, [1], [1], 0.1, (_fake((1,), np.int64),) * 2)
    assert dict(zip(A._COMMON, k2))["seed_by_value"] is False
    assert len(A.SDPA_BACKWARD_KEY.fields) == len(set(A.SDPA_BACKWARD_KEY.fields))


Q = (2, 4, 64, 64)
K = (2, 2, 80, 64)


class _Stop(Exception):
    """Raised by the stand-in insert below: planning would need a GPU."""


def test_one_shot_keys_and_plans_follow_the_options_in_force(monkeypatch):
    # What the one-shots hand to the one front on a miss, stopped before any planning.
    seen = []

    def insert(key, plan, prepare):
        seen.append((key, plan, prepare))
        raise _Stop

    monkeypatch.setattr(front, "insert", insert)
    q, k, v = _qkv()
    o = _fake(Q)
    stats = _fake((2, 4, 64, 1), np.float32)
    for scope in ({}, {"sdpa_lowerings": "composite", "sdpa_autotune": True,
                       "sdpa_backward_lowerings": ("composite_dp",)}):
        with cudalibs.option_context(**scope):
            with pytest.raises(_Stop):
                A.sdpa(q, k, v)
            with pytest.raises(_Stop):
                A.sdpa_backward(q, k, v, o, o, stats)
    (fk, fp, fprep), (bk, bp, bprep), (fk2, fp2, fprep2), (bk2, bp2, bprep2) = seen
    named = [kind.named(key) for kind, key in ((A.SDPA_KEY, fk), (A.SDPA_BACKWARD_KEY, bk),
                                               (A.SDPA_KEY, fk2), (A.SDPA_BACKWARD_KEY, bk2))]
    assert [(n["lowerings"], n["autotune"]) for n in named] == [
        (SDPA_LOWERINGS, False), (SDPA_BACKWARD_LOWERINGS, False),
        (("composite",), True), (("composite_dp",), True)]
    # plans made under different options never stand in for each other
    assert fk != fk2 and bk != bk2
    assert (fp._graphs, bp._graphs, fp2._graphs, bp2._graphs) == (
        SDPA_LOWERINGS, SDPA_BACKWARD_LOWERINGS, ("composite",), ("composite_dp",))
    # untuned: the heuristics' first choice, one candidate; tuned: every candidate, timed
    assert fprep is front.PLAN and bprep is front.PLAN and fp._max == 1
    assert fprep2 is not front.PLAN and bprep2 is not front.PLAN and fp2._max > 1


def _qkv(q=Q, k=K, v=None, dtype=F16):
    return _fake(q, dtype), _fake(k, dtype), _fake(v or k, dtype)


BAD = [
    (lambda: A.sdpa(*_qkv(dtype=np.float32)), TypeError, "float16"),
    (lambda: A.sdpa(_fake(Q), _fake(K, BF16), _fake(K)), TypeError, "share one dtype"),
    (lambda: A.sdpa(_fake(Q[:3]), _fake(K), _fake(K)), ValueError, "4-D"),
    (lambda: A.sdpa(*_qkv(q=(2, 3, 64, 64))), ValueError, "does not divide"),
    (lambda: A.sdpa(*_qkv(k=(2, 2, 80, 32))), ValueError, "mismatched"),
    (lambda: A.sdpa(*_qkv(k=(3, 2, 80, 64))), ValueError, "mismatched"),
    (lambda: A.sdpa(*_qkv(v=(2, 2, 81, 64))), ValueError, "mismatched"),
    (lambda: A.sdpa(*_qkv(q=(2, 4, 64, 264), k=(2, 2, 80, 264))), ValueError, "up to 256"),
    (lambda: A.sdpa(*_qkv(q=(2, 4, 64, 60), k=(2, 2, 80, 60))), ValueError, "multiples of 8"),
    (lambda: A.sdpa_backward(*_qkv(q=(2, 4, 64, 192), k=(2, 2, 80, 192)), _fake((2, 4, 64, 192)),
                             _fake((2, 4, 64, 192)), _fake((2, 4, 64, 1), np.float32)),
     ValueError, "backward takes multiples of 8 up to 128"),
    (lambda: A.sdpa(*_qkv(), seq_lens_q=[64, 64]), ValueError, "together"),
    (lambda: A.sdpa(*_qkv(), dropout=0.1), ValueError, "needs seed"),
    (lambda: A.sdpa(*_qkv(), dropout=1.0, seed=1), ValueError, r"\[0, 1\)"),
    (lambda: A.sdpa(*_qkv(), dropout=0.1, seed="x"), TypeError, "seed must be"),
    (lambda: A.sdpa(*_qkv(), dropout=0.1, seed=(1, _fake((1,), np.int64))), TypeError,
     "seed must be"),
    (lambda: A.sdpa(*_qkv(), bias=_fake((2, 4, 64, 81))), ValueError, "bias must be"),
    (lambda: A.sdpa(*_qkv(), bias=_fake((3, 4, 64, 80))), ValueError, "bias must be"),
    (lambda: A.sdpa(*_qkv(), bias=_fake((1, 4, 64, 80), np.float32)), TypeError, "match q"),
    (lambda: A.sdpa(*_qkv(), out=_fake((2, 4, 64, 32))), ValueError, "out must be"),
    (lambda: A.sdpa(_fake(Q, strides=(2 * 4 * 64 * 64 * 2, 4 * 64 * 64 * 2, 64 * 2, 4)),
                    _fake(K), _fake(K)), ValueError, "contiguous last"),
    (lambda: A.sdpa(_fake(Q, strides=(65536, 16384, 130, 2)), _fake(K), _fake(K)),
     ValueError, "multiples of 16 bytes"),
    (lambda: A.sdpa(*_qkv(), causal=True, out=_fake(Q, dev=type("D", (), {"ordinal": 1})())),
     ValueError, "device 1"),
    (lambda: A.SdpaPlan(*_qkv(), graphs=("fast",)), ValueError, "graphs must name"),
    (lambda: A.SdpaPlan(*_qkv(), dump_mask=True), ValueError, "dropout > 0"),
    (lambda: A.SdpaPlan(*(_fake(s, dev=_OLD) for s in (Q, K, K))), CudaLibsError,
     "compute capability 8.0"),
    (lambda: A.SdpaBackwardPlan(*_qkv(), _fake((2, 4, 64, 32)), _fake(Q)), ValueError,
     "o must be"),
    (lambda: A.SdpaBackwardPlan(*_qkv(), _fake(Q), _fake(Q, BF16)), ValueError, "do must be"),
    (lambda: A.SdpaBackwardPlan(*_qkv(), _fake(Q), _fake(Q), out=(None, _fake(Q), None)),
     ValueError, "dk must be"),
    (lambda: A.SdpaBackwardPlan(*_qkv(), _fake(Q), _fake(Q), out=[None]), TypeError,
     "out must be"),
    (lambda: A.sdpa(np.zeros(Q, np.float16), _fake(K), _fake(K)), TypeError, "host numpy"),
]


@pytest.mark.parametrize("call, exc, match", BAD, ids=[m for _, _, m in BAD])
def test_bad_input_raises_before_any_c_call(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


class _PlannedForward(A.SdpaPlan):
    """A forward plan whose candidate is a stand-in: execute's checks run, no library call."""

    def plan(self):
        self._exe = object()
        return self


@pytest.mark.parametrize("kw, exc, match", [
    (dict(seq_lens_q=[64, 65], seq_lens_kv=[80, 80]), ValueError, r"must lie in 1\.\.64"),
    (dict(seq_lens_q=[0, 3], seq_lens_kv=[80, 80]), ValueError, r"must lie in 1\.\.64"),
    (dict(seq_lens_q=[64], seq_lens_kv=[80, 80]), ValueError, "must hold 2 integers"),
    (dict(seq_lens_q=_fake((2,), np.int64), seq_lens_kv=_fake((2,), np.int32)), ValueError,
     "int32"),
    (dict(bias=_fake((1, 4, 64, 80))), ValueError, "without a bias"),
    (dict(out=_fake((2, 4, 64, 64), ptr=0x10008)), ValueError, "16-byte aligned"),
    (dict(stats=_fake((2, 4, 64, 1), np.float32)), ValueError, "without training"),
])
def test_execute_checks_before_any_c_call(kw, exc, match):
    padding = "seq_lens_q" in kw
    plan = _PlannedForward(*_qkv(), seq_lens_q=[1, 1] if padding else None,
                           seq_lens_kv=[1, 1] if padding else None)
    q, k, v = _qkv()
    with pytest.raises(exc, match=match):
        plan.execute(q, k, v, **kw)


def test_size_one_dimensions_keep_or_get_a_stride_and_match_any():
    k = _bshd(2, 1, 96, 64)                     # multi-query, [b, s, h, d] memory
    plan = _PlannedForward(_bshd(2, 4, 64, 64), k, k)
    assert plan.spec.k_strides == (96 * 64, 64, 64, 1)
    other = _fake(k.shape, F16, (96 * 64 * 2, 0, 128, 2))     # the head stride never stepped
    plan._match("op", other, "k", k.shape, plan.spec.k_strides, F16)
    assert AP.same_steps(AP.elem_strides(_fake(k.shape), "k", "op"), plan.spec.k_strides,
                         k.shape)                    # one head: [b, h, s, d] is the same memory
    with pytest.raises(ValueError, match="element strides"):
        plan._match("op", _fake(k.shape, F16, (96 * 256, 256, 256, 2)), "k", k.shape,
                    plan.spec.k_strides, F16)


def test_execute_refuses_operands_of_another_problem():
    plan = _PlannedForward(*_qkv(), causal=True)
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="plan was made for"):
        plan.execute(_fake((2, 4, 32, 64)), k, v)
    with pytest.raises(ValueError, match="element strides"):
        plan.execute(_bshd(2, 4, 64, 64), k, v)
    with pytest.raises(ValueError, match="device 1"):
        plan.execute(q, k, _fake(K, dev=type("D", (), {"ordinal": 1})()))
    dplan = _PlannedForward(*_qkv(), dropout=0.2, seed=(1, 2))
    with pytest.raises(ValueError, match="pass seed"):
        dplan.execute(q, k, v)
    with pytest.raises(TypeError, match="by value"):
        dplan.execute(q, k, v, seed=(_fake((1,), np.int64), _fake((1,), np.int64)))
    with pytest.raises(ValueError, match=r"\[0, 2\*\*63\)"):
        dplan.execute(q, k, v, seed=-1)


class _PlannedBackward(A.SdpaBackwardPlan):
    def plan(self):
        self._exe = object()
        return self


def test_backward_refuses_statistics_of_another_problem():
    q, k, v = _qkv()
    o = _fake(Q)
    plan = _PlannedBackward(q, k, v, o, o)
    for stats in (_fake((2, 4, 64), np.float32), _fake((2, 4, 32, 1), np.float32),
                  _fake((2, 4, 64, 1), F16), _fake((2, 4, 64, 1), np.float32,
                                                   strides=(512, 4, 8, 4))):
        with pytest.raises(ValueError, match="statistics from another problem"):
            plan.execute(q, k, v, o, o, stats)
    with pytest.raises(ValueError, match="overlaps q"):
        plan.execute(q, k, v, o, o, _fake((2, 4, 64, 1), np.float32, ptr=0x90000000),
                     out=(q, None, None))
