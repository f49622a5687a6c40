"""Scaled dot-product attention on the GPU: forward and backward against the float64
reference (and torch, see tests/gpu/_oracles.py), over shapes, grouped heads, layouts, dtypes
and masks; dropout's forward/backward consistency; the plan captured in a CUDA graph; several
threads executing one plan; bad inputs.

Error measure: ``max |actual - expected| / max |expected|`` over the rows that exist (query
rows beyond a padded sequence length are unspecified), at most 1e-2 for float16/bfloat16
(the probabilities are rounded to the input type before the second matmul, as in every fused
attention kernel).
"""

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import dtypes
from cudalibs.cudnn import attention as A
from cudalibs.testing import poison_value
from cudalibs.testing.ref import _attention as R

from ._helpers import GPU
from .._oracles import torch_oracle
from .._sizes import bound, examples
from .._threads import match_serial

F16 = np.dtype(np.float16)
BF16 = dtypes.bfloat16
TOL = 1e-2
# Every example plans (and runtime-compiles) its own engines: a few random examples, and a
# failure is reported as found rather than shrunk through dozens more compilations.
FEW = settings(GPU, max_examples=examples(8),
               phases=(Phase.explicit, Phase.reuse, Phase.generate))

def _err(actual, expected, rows=None, floor=1e-30):
    """The largest error relative to the largest magnitude of the reference, or to ``floor``
    when that is larger: a gradient that is zero in exact arithmetic (a query that sees one
    key has dq = 0) comes back as rounding noise, which no relative measure accepts."""
    a = np.asarray(actual, np.float64)
    e = np.asarray(expected, np.float64)
    if rows is not None:
        rows = np.broadcast_to(rows, e.shape)
        a, e = a[rows], e[rows]
    assert np.isfinite(a).all(), "non-finite values where the reference has numbers"
    return float(np.abs(a - e).max() / max(np.abs(e).max(), floor))


#: The floor of :func:`_err` for gradients of inputs drawn from [-1, 1]: far below their
#: typical size (0.1 - 10), far above the rounding noise of an exact zero (1e-7).
GRAD_FLOOR = 1e-2


def _same_layout(a, b):
    """Whether two arrays of one shape step through memory alike (size-1 dims aside)."""
    return all(x == y for n, x, y in zip(a.shape, a.strides, b.strides) if n > 1)


def _close(actual, expected, rows=None, what="", floor=1e-30):
    err = _err(actual, expected, rows, floor)
    assert err <= TOL, f"{what}: max error {err:.3e} relative to the largest magnitude"


def _host(shape, dtype, rng, low=-1.0, high=1.0):
    x = rng.uniform(low, high, shape)
    x[x == 0] = 0.5
    return x.astype(dtype)


def _dev(host, layout):
    """``host`` [b, h, s, d] on the device as [b, h, s, d] or as a [b, s, h, d] buffer."""
    if layout == "bshd":
        return cl.to_device(np.ascontiguousarray(host.transpose(0, 2, 1, 3))).transpose(0, 2, 1, 3)
    return cl.to_device(np.ascontiguousarray(host))


def _poisoned_like(arr):
    """A NaN-filled array of ``arr``'s shape, dtype and strides (same layout)."""
    order = sorted(range(4), key=lambda i: -arr.strides[i])
    phys = cl.empty(tuple(arr.shape[i] for i in order), arr.dtype)
    phys.fill(poison_value(arr.dtype))
    return phys.transpose(tuple(order.index(i) for i in range(4)))


def _torch_ref(q, k, v, *, causal, bias, scale, do=None):
    """torch's attention (and its autograd gradients) on the same device data; None when
    torch is absent (which :func:`torch_oracle` reports)."""
    torch = torch_oracle(cuda=True)
    if torch is None:
        return None
    tq, tk, tv = (torch.from_dlpack(x).detach().clone().requires_grad_(do is not None)
                  for x in (q, k, v))
    mask = None
    if bias is not None:
        mask = torch.from_dlpack(bias)
    if causal and mask is not None:
        s_q, s_kv = q.shape[2], k.shape[2]
        tri = torch.ones(s_q, s_kv, dtype=torch.bool, device=tq.device).tril()
        mask = mask.masked_fill(~tri, float("-inf"))
        causal = False
    sdpa = torch.nn.functional.scaled_dot_product_attention
    o = sdpa(tq, tk, tv, attn_mask=mask, is_causal=causal, scale=scale,
             enable_gqa=q.shape[1] != k.shape[1])
    if do is None:
        return o.detach().float().cpu().numpy()
    o.backward(torch.from_dlpack(do))
    return tuple(t.grad.float().cpu().numpy() for t in (tq, tk, tv))


PROBLEMS = st.tuples(
    st.sampled_from([1, 2]),                              # b
    st.sampled_from([(4, 4), (4, 2), (4, 1)]),            # h_q, h_kv (MHA, GQA, MQA)
    st.sampled_from([64, 77, 128] + bound([], [509, 640])),      # s_q
    st.sampled_from([64, 96, 128] + bound([], [500, 640])),      # s_kv
    st.sampled_from([64, 128]),                           # d
    st.sampled_from(["bhsd", "bshd"]),                    # layout
    st.sampled_from([F16, BF16]),                         # dtype
    st.sampled_from(["none", "causal", "padding", "bias", "causal+bias"]))


def _inputs(problem, rng):
    b, (h_q, h_kv), s_q, s_kv, d, layout, dtype, mask = problem
    qh, kh, vh = (_host((b, h, s, d), dtype, rng) for h, s in ((h_q, s_q), (h_kv, s_kv),
                                                              (h_kv, s_kv)))
    kw = {"causal": "causal" in mask}
    ref_kw = dict(kw)
    if "bias" in mask:
        bh = _host((1, h_q, s_q, s_kv), dtype, rng)
        kw["bias"] = cl.to_device(bh)
        ref_kw["bias"] = bh
    if mask == "padding":
        lq = [int(x) for x in rng.integers(1, s_q + 1, b)]
        lk = [int(x) for x in rng.integers(1, s_kv + 1, b)]
        kw.update(seq_lens_q=lq, seq_lens_kv=lk)
        ref_kw.update(seq_lens_q=lq, seq_lens_kv=lk)
    rows = R.valid_rows((b, s_q, s_kv), causal=kw["causal"], seq_lens_q=ref_kw.get("seq_lens_q"),
                        seq_lens_kv=ref_kw.get("seq_lens_kv"))
    return (qh, kh, vh), tuple(_dev(x, layout) for x in (qh, kh, vh)), kw, ref_kw, rows


@FEW
@given(PROBLEMS, st.integers(0, 2**31))
def test_forward_against_reference(device, problem, seed):
    rng = np.random.default_rng(seed)
    (qh, kh, vh), (q, k, v), kw, ref_kw, rows = _inputs(problem, rng)
    out = _poisoned_like(q)                 # d == d_v here: o has q's shape and layout
    o, stats = A.sdpa(q, k, v, training=True, out=out, **kw)
    assert _same_layout(o, q)              # o in q's layout
    ro, rs = R.sdpa_forward(qh, kh, vh, **ref_kw)
    _close(o.get(), ro, rows, "o")
    _close(stats.get(), rs, rows, "stats")
    if "seq_lens_q" not in kw:          # torch's attention takes no sequence lengths
        to = _torch_ref(q, k, v, causal=kw["causal"], bias=kw.get("bias"),
                        scale=1 / np.sqrt(q.shape[3]))
        if to is not None:
            _close(o.get(), to, rows, "o vs torch")


@FEW
@given(PROBLEMS, st.integers(0, 2**31))
def test_backward_against_reference(device, problem, seed):
    rng = np.random.default_rng(seed)
    (qh, kh, vh), (q, k, v), kw, ref_kw, rows = _inputs(problem, rng)
    o, stats = A.sdpa(q, k, v, training=True, **kw)
    doh = _host(o.shape, q.dtype, rng)
    do = _dev(doh, "bshd" if o.strides[1] < o.strides[2] else "bhsd")
    outs = tuple(_poisoned_like(x) for x in (q, k, v))
    dq, dk, dv = A.sdpa_backward(q, k, v, o, do, stats, out=outs, **kw)
    assert _same_layout(dk, k) and _same_layout(dq, q) and _same_layout(dv, v)
    rq, rk, rv = R.sdpa_backward(qh, kh, vh, doh, **ref_kw)
    _close(dq.get(), rq, rows, "dq")
    _close(dk.get(), rk, None, "dk")
    _close(dv.get(), rv, None, "dv")
    if "seq_lens_q" not in kw:          # torch's attention takes no sequence lengths
        grads = _torch_ref(q, k, v, causal=kw["causal"], bias=kw.get("bias"),
                           scale=1 / np.sqrt(q.shape[3]), do=do)
        if grads is not None:
            tq, tk, tv = grads
            _close(dq.get(), tq, rows, "dq vs torch")
            _close(dk.get(), tk, None, "dk vs torch")
            _close(dv.get(), tv, None, "dv vs torch")


def test_forward_head_dim_256(device, rng):
    qh, kh = _host((1, 2, 128, 256), F16, rng), _host((1, 2, 96, 256), F16, rng)
    q, k = cl.to_device(qh), cl.to_device(kh)
    o = A.sdpa(q, k, k, causal=True)
    _close(o.get(), R.sdpa_forward(qh, kh, kh, causal=True)[0], None, "o (d = 256)")


def test_every_candidate_of_both_lowerings(device, rng):
    """Each engine the plan offers (composite and, where it applies, the SDPA operation)
    computes the same attention; autotune picks one of them."""
    qh, kh = _host((2, 4, 128, 64), F16, rng), _host((2, 2, 128, 64), F16, rng)
    q, k = cl.to_device(qh), cl.to_device(kh)
    plan = A.SdpaPlan(q, k, k, training=True).plan()
    ro, rs = R.sdpa_forward(qh, kh, kh)
    kinds = set()
    for i, cand in enumerate(plan.candidates):
        plan.select(i)
        o, stats = plan.execute(q, k, k)
        _close(o.get(), ro, None, cand["name"])
        _close(stats.get(), rs, None, cand["name"] + " stats")
        kinds.add(cand["backend"])
    # the plan draws from the lowerings the options name (both, by default)
    assert kinds == set(cl.options().sdpa_lowerings) - set(plan.unavailable) and \
        "composite" in kinds
    res = plan.autotune(store=False)
    assert plan.tuned and all("ms" in c for c in res)
    assert plan.backend in kinds and "us (autotuned)" in repr(plan)



def test_padded_sequences_with_device_lengths(device, rng):
    qh, kh = _host((3, 2, 96, 64), BF16, rng), _host((3, 2, 80, 64), BF16, rng)
    q, k = cl.to_device(qh), cl.to_device(kh)
    lq, lk = np.array([96, 40, 7], np.int32), np.array([1, 80, 33], np.int32)
    o, stats = A.sdpa(q, k, k, seq_lens_q=cl.to_device(lq), seq_lens_kv=cl.to_device(lk),
                      training=True)
    ro, rs = R.sdpa_forward(qh, kh, kh, seq_lens_q=lq, seq_lens_kv=lk)
    rows = R.valid_rows((3, 96, 80), seq_lens_q=lq, seq_lens_kv=lk)
    _close(o.get(), ro, rows, "o")
    _close(stats.get(), rs, rows, "stats")


# -- dropout -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("device_seed", [False, True], ids=["by_value", "device_seed"])
def test_dropout_forward_and_backward_replay_one_mask(device, rng, device_seed):
    p = 0.2
    b, h_q, h_kv, s_q, s_kv, d = 2, 4, 2, 128, 96, 64
    qh, kh, vh = (_host(s, F16, rng) for s in ((b, h_q, s_q, d), (b, h_kv, s_kv, d),
                                               (b, h_kv, s_kv, d)))
    q, k, v = cl.to_device(qh), cl.to_device(kh), cl.to_device(vh)
    seed = (cl.to_device(np.array([2024], np.int64)), cl.to_device(np.array([16], np.int64))) \
        if device_seed else (2024, 16)
    kw = dict(dropout=p, seed=seed, causal=True)
    plan = A.SdpaPlan(q, k, v, training=True, dump_mask=True, max_candidates=1, **kw)
    mask_d = cl.empty((b, h_q, s_q, s_kv), np.float32).fill(np.float32(np.nan))
    o, stats = plan.execute(q, k, v, mask_out=mask_d, seed=seed)
    mask = mask_d.get()
    assert set(np.unique(mask)) <= {0.0, 1.0}
    assert abs(mask.mean() - (1 - p)) < 0.02           # 98k Bernoulli draws
    ro, rs = R.sdpa_forward(qh, kh, vh, causal=True, dropout_mask=mask, dropout=p)
    _close(o.get(), ro, None, "o with dropout")
    _close(stats.get(), rs, None, "stats (before dropout)")
    # the one-shot forward (another graph: no dump) draws the same mask from the same seed
    o2, _ = A.sdpa(q, k, v, training=True, **kw)
    _close(o2.get(), ro, None, "o of the one-shot")
    # another offset, another mask
    other = (seed[0], cl.to_device(np.array([17], np.int64))) if device_seed else (2024, 17)
    o3 = A.sdpa(q, k, v, dropout=p, seed=other, causal=True)
    assert not np.array_equal(o3.get(), o.get())
    # the backward replays the mask: the gradient of the same masked function
    doh = _host(o.shape, F16, rng)
    do = cl.to_device(doh)
    dq, dk, dv = A.sdpa_backward(q, k, v, o, do, stats, **kw)
    rq, rk, rv = R.sdpa_backward(qh, kh, vh, doh, causal=True, dropout_mask=mask, dropout=p)
    _close(dq.get(), rq, None, "dq with dropout")
    _close(dk.get(), rk, None, "dk with dropout")
    _close(dv.get(), rv, None, "dv with dropout")


def test_by_value_and_device_seeds_draw_the_same_mask(device, rng):
    q = cl.to_device(_host((1, 2, 64, 64), F16, rng))
    a = A.sdpa(q, q, q, dropout=0.5, seed=(7, 3))
    b = A.sdpa(q, q, q, dropout=0.5, seed=(cl.to_device(np.array([7], np.int64)),
                                          cl.to_device(np.array([3], np.int64))))
    assert _err(a.get(), b.get()) <= 1e-3       # another mask would differ by O(1)


# -- plans: cache, graphs, threads -------------------------------------------------------------------------
def test_one_shot_finds_its_plan_by_named_key(device, rng):
    q = cl.to_device(_host((2, 4, 64, 64), F16, rng))
    before = len(cl.plan_cache.entries("cudnn_sdpa"))
    o1 = A.sdpa(q, q, q, causal=True)
    o2 = A.sdpa(q, q, q, causal=True)
    entries = [e for e in cl.plan_cache.entries("cudnn_sdpa") if e.key["q_shape"] == q.shape
               and e.key["causal"] and not e.key["training"]]
    assert len(entries) == 1 and len(cl.plan_cache.entries("cudnn_sdpa")) <= before + 1
    assert isinstance(entries[0].plan, A.SdpaPlan) and entries[0].plan.device is device
    assert np.array_equal(o1.get(), o2.get())


def test_plan_captured_in_a_cuda_graph_replays(device, rng):
    shape = (2, 4, 128, 64)
    qh = _host(shape, F16, rng)
    q, k, v = (cl.to_device(qh) for _ in range(3))
    plan = A.SdpaPlan(q, k, v, causal=True, training=True, max_candidates=1)
    out = cl.empty(shape, F16)
    stats = cl.empty((2, 4, 128, 1), np.float32)
    with cl.Stream(device) as s:
        plan.execute(q, k, v, out=out, stats=stats, stream=s)     # warm: workspace, packs
        s.sync()
        with cl.graph.capture(s) as g:
            plan.execute(q, k, v, out=out, stats=stats, stream=s)
        ge = g.instantiate()
        for _ in range(2):           # new inputs in the captured buffers, then replay
            hosts = [_host(shape, F16, rng) for _ in range(3)]
            for dst, src in zip((q, k, v), hosts):
                dst.copy_(cl.to_device(src))
            out.fill(poison_value(F16))
            device.synchronize()
            ge.replay(s)
            s.sync()
            ro, rs = R.sdpa_forward(*hosts, causal=True)
            _close(out.get(), ro, None, "replayed o")
            _close(stats.get(), rs, None, "replayed stats")


def test_threads_executing_one_plan_match_serial_results(device, rng):
    """Eight threads, each on its own stream, execute one forward and one backward plan on
    alternating inputs: bit for bit what the same calls give serially."""
    shape, kv = (2, 4, 128, 64), (2, 2, 96, 64)
    sets = [tuple(cl.to_device(_host(s, F16, rng)) for s in (shape, kv, kv)) for _ in range(3)]
    _plans_match_serial(device, sets, causal=True)


def _plans_match_serial(device, sets, **options):
    """One forward and one backward plan of the problem of ``sets[0]`` with ``options``,
    executed by eight threads, each on its own stream, on the inputs of ``sets`` in turn: bit
    for bit what the same calls give serially (the backward's dq only where cuDNN reports the
    engine deterministic; its atomics may order sums otherwise)."""
    q0, k0, v0 = sets[0]
    fplan = A.SdpaPlan(q0, k0, v0, training=True, max_candidates=1, **options)
    fwd = [fplan.execute(*x) for x in sets]
    device.synchronize()
    bplan = A.SdpaBackwardPlan(q0, k0, v0, fwd[0][0], fwd[0][0], max_candidates=1,
                               **options).plan()
    exact_dq = bplan.candidates[bplan.choice]["deterministic"]

    def backward(i, s):
        (q, k, v), (o, stats) = sets[i], fwd[i]
        dq, dk, dv = bplan.execute(q, k, v, o, o, stats, stream=s)
        return (dq, dk, dv) if exact_dq else (dk, dv)

    calls = [lambda s, x=x: fplan.execute(*x, stream=s) for x in sets]
    calls += [lambda s, i=i: backward(i, s) for i in range(len(sets))]
    match_serial(device, calls)


# -- bad input with real arrays ----------------------------------------------------------------------------
def test_bad_inputs_on_the_device(device, rng):
    q = cl.to_device(_host((2, 4, 64, 64), F16, rng))
    with pytest.raises(ValueError, match=r"must lie in 1\.\.64"):
        A.sdpa(q, q, q, seq_lens_q=[64, 65], seq_lens_kv=[64, 64])
    with pytest.raises(ValueError, match="int32"):
        A.sdpa(q, q, q, seq_lens_q=cl.to_device(np.array([3, 4], np.int64)),
               seq_lens_kv=cl.to_device(np.array([3, 4], np.int32)))
    o, stats = A.sdpa(q, q, q, training=True)
    wrong = cl.empty((2, 4, 32, 1), np.float32)
    with pytest.raises(ValueError, match="statistics from another problem"):
        A.sdpa_backward(q, q, q, o, o, wrong)
    with pytest.raises(ValueError, match="overlaps"):
        A.sdpa(q, q, q, out=q)
    with pytest.raises(ValueError, match="up to 128"):
        big = cl.to_device(_host((1, 1, 64, 256), F16, rng))
        A.sdpa_backward(big, big, big, big, big, cl.empty((1, 1, 64, 1), np.float32))
    with pytest.raises(ValueError, match="device seed|one int64 element"):
        A.sdpa(q, q, q, dropout=0.1, seed=(cl.to_device(np.array([1, 2], np.int64)),
                                           cl.to_device(np.array([1], np.int64))))


def test_every_backward_candidate(device, rng):
    """Both composite forms of the backward (with and without the float32 dQ accumulator)
    and the SDPA operation where cuDNN builds it: every engine gives the gradients."""
    qh, kh = _host((2, 4, 128, 64), F16, rng), _host((2, 2, 128, 64), F16, rng)
    q, k = cl.to_device(qh), cl.to_device(kh)
    o, stats = A.sdpa(q, k, k, training=True, causal=True)
    doh = _host(o.shape, F16, rng)
    do = cl.to_device(doh)
    bp = A.SdpaBackwardPlan(q, k, k, o, do, causal=True).plan()
    rq, rk, rv = R.sdpa_backward(qh, kh, kh, doh, causal=True)
    kinds = set()
    for i, cand in enumerate(bp.candidates):
        bp.select(i)
        dq, dk, dv = bp.execute(q, k, k, o, do, stats)
        for got, want, n in ((dq, rq, "dq"), (dk, rk, "dk"), (dv, rv, "dv")):
            _close(got.get(), want, None, f"{cand['name']} {n}")
        kinds.add(cand["backend"])
    assert kinds == set(cl.options().sdpa_backward_lowerings) - set(bp.unavailable) and \
        "composite" in kinds
