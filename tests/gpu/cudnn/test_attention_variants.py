"""Attention variants on the GPU: the bottom-right causal diagonal, sliding windows, ALiBi,
softcapping and the bias gradient, forward and backward, against the float64 reference
(:mod:`cudalibs.testing.ref`) and torch's attention as a second oracle where torch has the
variant (its SDPA given the variant's mask: a boolean ``attn_mask`` for the diagonal and the
windows, an additive one for ALiBi and the bias, whose gradient torch's autograd gives);
softcapping has no torch counterpart, and torch takes no sequence lengths.  torch runs in
float32 on the inputs' values.  Also: a decode step and a chunk of prefill against full causal
attention, a window with dropout (its dumped mask), every candidate of a variant plan, eight threads sharing variant plans, a captured
graph replayed with new ALiBi slopes written into the same array, the bias gradient from every
candidate of its plan (all without the float32 ``dQ`` accumulator, the one form cuDNN writes
it from), and the combinations cuDNN does not take refused before any library call.

Error measure (as in test_attention.py): ``max |actual - expected| / max |expected|`` over the
rows that see a key, at most 1e-2 for float16/bfloat16 -- the probabilities are rounded to
the input type before the second matmul, as in every fused attention kernel; ALiBi and the
softcap act on the float32 scores before that rounding.
"""

from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs.cudnn import attention as A
from cudalibs.errors import CudaLibsError
from cudalibs.testing import poison_value
from cudalibs.testing.ref import _attention as R

from .._oracles import torch_oracle
from .._sizes import bound
from .test_attention import (BF16, F16, FEW, GRAD_FLOOR, _close, _dev, _host,
                             _plans_match_serial, _poisoned_like)

#: The variants drawn, by name: their options for a window of ``w`` keys to the left, ``r``
#: to the right and a softcap ``c``; "padding" draws sequence lengths (``len_q <= len_kv``,
#: so that every query that exists sees a key).
VARIANTS = {
    "bottom_right": lambda w, r, c: dict(causal="bottom_right"),
    "bottom_right+window": lambda w, r, c: dict(causal="bottom_right", window=(w, None)),
    "window": lambda w, r, c: dict(causal=True, window=(w, None)),
    "band": lambda w, r, c: dict(window=(w, r)),
    "right_only": lambda w, r, c: dict(window=(None, r)),
    "alibi": lambda w, r, c: dict(causal=True, alibi=True),
    "alibi+window": lambda w, r, c: dict(causal=True, alibi=True, window=(w, None)),
    "softcap": lambda w, r, c: dict(softcap=c),
    "softcap+window": lambda w, r, c: dict(causal=True, window=(w, None), softcap=c),
    "bottom_right+padding": lambda w, r, c: dict(causal="bottom_right", padding=True),
    "window+padding": lambda w, r, c: dict(causal=True, window=(w, None), padding=True),
}
VARIANT = st.tuples(st.sampled_from(sorted(VARIANTS)), st.sampled_from([0, 1, 31, 100]),
                    st.sampled_from([1, 17]), st.sampled_from([0.25, 1.0, 30.0]))

S_KV = [64, 96, 128, 200] + bound([], [640])
S_Q = [16, 64, 77, 128] + bound([], [509])


def _problems(decode: bool):
    """``(b, (h_q, h_kv), (s_q, s_kv), d, layout, dtype)`` with ``s_q <= s_kv`` (what a
    bottom-right diagonal and a window need without sequence lengths); ``decode`` adds
    ``s_q = 1``."""
    qs = ([1] if decode else []) + S_Q
    seqs = st.sampled_from(S_KV).flatmap(
        lambda s_kv: st.tuples(st.sampled_from([s for s in qs if s <= s_kv]), st.just(s_kv)))
    return st.tuples(st.sampled_from([1, 2]), st.sampled_from([(4, 4), (4, 2), (4, 1)]), seqs,
                     st.sampled_from([64, 128]), st.sampled_from(["bhsd", "bshd"]),
                     st.sampled_from([F16, BF16]))


class Case(NamedTuple):
    """One drawn problem: host inputs, device inputs, the library's and the reference's
    options, and the query rows that see a key."""

    host: tuple
    dev: tuple
    kw: dict
    ref_kw: dict
    rows: np.ndarray


def _case(problem, variant, rng, bias_batch=None) -> Case:
    b, (h_q, h_kv), (s_q, s_kv), d, layout, dtype = problem
    name, w, r, c = variant
    kw = VARIANTS[name](w, r, c)
    host = tuple(_host((b, h, s, d), dtype, rng) for h, s in ((h_q, s_q), (h_kv, s_kv),
                                                              (h_kv, s_kv)))
    ref_kw = {}
    if kw.pop("padding", False):
        lk = [int(x) for x in rng.integers(1, s_kv + 1, b)]
        lq = [int(rng.integers(1, min(n, s_q) + 1)) for n in lk]
        kw.update(seq_lens_q=lq, seq_lens_kv=lk)
    if bias_batch is not None:
        bh = _host((bias_batch, h_q, s_q, s_kv), dtype, rng)
        kw["bias"] = cl.to_device(bh)
        ref_kw["bias"] = bh
    ref_kw.update({k: x for k, x in kw.items() if k != "bias"})
    rows = R.valid_rows((b, s_q, s_kv), causal=kw.get("causal", False),
                        window=kw.get("window"), seq_lens_q=kw.get("seq_lens_q"),
                        seq_lens_kv=kw.get("seq_lens_kv"))
    return Case(host, tuple(_dev(x, layout) for x in host), kw, ref_kw, rows)


def _forward(problem, variant, seed, bias_batch=None, poisoned=False):
    """``(rng, case, o, stats)``: a drawn case and the library's training forward of it
    (into a NaN-filled ``o`` of ``q``'s layout when ``poisoned``)."""
    rng = np.random.default_rng(seed)
    case = _case(problem, variant, rng, bias_batch)
    out = _poisoned_like(case.dev[0]) if poisoned else None
    o, stats = A.sdpa(*case.dev, training=True, out=out, **case.kw)
    return rng, case, o, stats


def _torch(case: Case, do=None, bias_grad=False):
    """torch's SDPA in float32 on the case's inputs, the variant given as its mask: ``o``, or
    the gradients (and the bias's with ``bias_grad``) of ``sum(o * do)``; None where torch has
    no such attention (softcap, sequence lengths) or is absent (reported)."""
    kw = case.ref_kw
    if kw.get("softcap") or "seq_lens_q" in kw:
        return None
    torch = torch_oracle(cuda=True)
    if torch is None:
        return None
    qh, kh, vh = case.host
    b, h_q, s_q, d = qh.shape
    s_kv = kh.shape[2]
    grad = do is not None
    tq, tk, tv = (torch.tensor(x.astype(np.float32), device="cuda", requires_grad=grad)
                  for x in case.host)
    vis = R.sdpa_mask((b, s_q, s_kv), causal=kw.get("causal", False), window=kw.get("window"))
    mask = torch.tensor(vis, device="cuda")
    tbias = None
    if kw.get("alibi") or "bias" in kw:
        add = np.zeros((1, h_q, s_q, s_kv))
        if kw.get("alibi"):
            dist = np.arange(s_kv)[None, :] - np.arange(s_q)[:, None]
            add = add + R._alibi_slopes(h_q)[None, :, None, None] * dist
        add = np.where(vis, add, -np.inf).astype(np.float32)
        mask = torch.tensor(add, device="cuda")
        if "bias" in kw:
            tbias = torch.tensor(kw["bias"].astype(np.float32), device="cuda",
                                 requires_grad=bias_grad)
            mask = mask + tbias
    o = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=mask, scale=1 / np.sqrt(d), enable_gqa=h_q != kh.shape[1])
    if not grad:
        return o.detach().cpu().numpy()
    o.backward(torch.tensor(np.asarray(do).astype(np.float32), device="cuda"))
    ts = (tq, tk, tv) + ((tbias,) if bias_grad else ())
    return tuple(t.grad.cpu().numpy() for t in ts)


# -- forward and backward against the reference and torch ---------------------------------------------
@FEW
@given(_problems(decode=True), VARIANT, st.integers(0, 2**31))
def test_forward_against_reference(device, problem, variant, seed):
    _, case, o, stats = _forward(problem, variant, seed, poisoned=True)
    ro, rs = R.sdpa_forward(*case.host, **case.ref_kw)
    _close(o.get(), ro, case.rows, f"o ({variant[0]})")
    _close(stats.get(), rs, case.rows, f"stats ({variant[0]})")
    to = _torch(case)
    if to is not None:
        _close(o.get(), to, case.rows, f"o vs torch ({variant[0]})")


@FEW
@given(_problems(decode=False), VARIANT, st.integers(0, 2**31))
def test_backward_against_reference(device, problem, variant, seed):
    rng, case, o, stats = _forward(problem, variant, seed)
    q, k, v = case.dev
    doh = _host(o.shape, q.dtype, rng)
    do = _dev(doh, "bshd" if o.strides[1] < o.strides[2] else "bhsd")
    outs = tuple(_poisoned_like(x) for x in (q, k, v))
    grads = A.sdpa_backward(q, k, v, o, do, stats, out=outs, **case.kw)
    assert len(grads) == 3
    want = R.sdpa_backward(*case.host, doh, **case.ref_kw)
    for name, got, ref, rows in zip(("dq", "dk", "dv"), grads, want, (case.rows, None, None)):
        _close(got.get(), ref, rows, f"{name} ({variant[0]})", GRAD_FLOOR)
    theirs = _torch(case, doh)
    if theirs is not None:
        for name, got, ref, rows in zip(("dq", "dk", "dv"), grads, theirs,
                                        (case.rows, None, None)):
            _close(got.get(), ref, rows, f"{name} vs torch ({variant[0]})")


#: The variants a bias (and its gradient) goes with: cuDNN takes no bias with a bottom-right
#: diagonal.
BIASED = ["window", "band", "right_only", "alibi", "softcap", "softcap+window",
          "window+padding"]
#: Those the bias gradient goes with: cuDNN 9.19 writes a wrong one beside a softcap, so the
#: plans refuse it (test_a_bias_gradient_beside_a_softcap_is_refused).
DBIASED = [n for n in BIASED if "softcap" not in n]


@FEW
@given(_problems(decode=False), st.sampled_from(DBIASED), st.sampled_from(["1", "b"]),
       st.integers(0, 2**31))
def test_bias_gradient_against_reference(device, problem, name, bias_batch, seed):
    rng, case, o, stats = _forward(problem, (name, 31, 17, 1.0), seed,
                                   bias_batch=1 if bias_batch == "1" else problem[0])
    q, k, v = case.dev
    doh = _host(o.shape, q.dtype, rng)
    do = cl.to_device(np.ascontiguousarray(doh))
    bias = case.kw["bias"]
    dbias = cl.empty(bias.shape, bias.dtype).fill(poison_value(bias.dtype))
    dq, dk, dv, got = A.sdpa_backward(q, k, v, o, do, stats, dbias=dbias, **case.kw)
    assert got.address == dbias.address
    *want, want_db = R.sdpa_backward(*case.host, doh, want_dbias=True, **case.ref_kw)
    for n, g, ref, rows in zip(("dq", "dk", "dv", "dbias"), (dq, dk, dv, got),
                               want + [want_db], (case.rows, None, None, None)):
        _close(g.get(), ref, rows if n == "dq" else None, f"{n} ({name}, bias {bias_batch})")
    # want_dbias allocates it, in the bias's layout; the gradients of q, k, v are the same
    *again, fresh = A.sdpa_backward(q, k, v, o, do, stats, want_dbias=True, **case.kw)
    assert fresh.shape == bias.shape and fresh.strides == bias.strides
    _close(fresh.get(), want_db, None, "dbias (want_dbias)")
    theirs = _torch(case, doh, bias_grad=True)
    if theirs is not None:
        _close(got.get(), theirs[3], None, f"dbias vs torch ({name}, bias {bias_batch})")


def test_every_candidate_of_a_bias_gradient_plan_writes_it(device, rng):
    """cuDNN writes the bias gradient only from the backward without the float32 ``dQ``
    accumulator (``dP`` kept in the workspace): a plan with ``want_dbias`` says why the
    accumulator form has no candidate, and every candidate it has writes every entry of a
    poisoned ``dbias``, for a bias of ``[1, h]`` with a causal window and of ``[b, h]``
    with a band of (31, 17) keys."""
    b, h, s_q, s_kv, d = 2, 4, 128, 192, 64
    qh = _host((b, h, s_q, d), F16, rng)
    kh, vh = (_host((b, h, s_kv, d), F16, rng) for _ in range(2))
    q, k, v = (cl.to_device(x) for x in (qh, kh, vh))
    for bias_batch, variant in ((1, dict(causal=True, window=(63, None))),
                                (b, dict(window=(31, 17)))):
        bh = _host((bias_batch, h, s_q, s_kv), F16, rng)
        bias = cl.to_device(bh)
        o, stats = A.sdpa(q, k, v, training=True, bias=bias, **variant)
        doh = _host(o.shape, F16, rng)
        do = cl.to_device(doh)
        plan = A.SdpaBackwardPlan(q, k, v, o, do, bias=bias, want_dbias=True, **variant)
        plan.plan()
        assert "accumulator" in plan.unavailable["composite"]
        want = R.sdpa_backward(qh, kh, vh, doh, bias=bh, want_dbias=True, **variant)
        dbias = cl.empty(bias.shape, F16)
        for i, cand in enumerate(plan.candidates):
            assert cand["backend"] == "composite_dp"
            plan.select(i)
            dbias.fill(poison_value(F16))
            got = plan.execute(q, k, v, o, do, stats, bias=bias, dbias=dbias)
            for n, g, ref in zip(("dq", "dk", "dv", "dbias"), got, want):
                _close(g.get(), ref, None, f"{cand['name']} {n} (bias {bias_batch}, "
                       f"{variant})")


# -- what each variant means -----------------------------------------------------------------------
def test_decode_and_chunked_prefill_are_the_last_rows_of_causal_attention(device, rng):
    """A bottom-right diagonal gives the last queries of a full causal attention: one query
    (decode) or a chunk of them (prefill after a cache), with or without a window."""
    b, h, s, d = 2, 4, 256, 128
    qh, kh, vh = (_host((b, h, s, d), F16, rng) for _ in range(3))
    q, k, v = (cl.to_device(x) for x in (qh, kh, vh))
    for window in (None, (63, None)):
        full = A.sdpa(q, k, v, causal=True, window=window).get()
        for rows in (1, 64):
            tail = cl.to_device(np.ascontiguousarray(qh[:, :, s - rows:]))
            got = A.sdpa(tail, k, v, causal="bottom_right", window=window)
            _close(got.get(), full[:, :, s - rows:], None, f"last {rows} rows, {window}")
            ref, _ = R.sdpa_forward(qh[:, :, s - rows:], kh, vh, causal="bottom_right",
                                    window=window)
            _close(got.get(), ref, None, f"last {rows} rows vs reference, {window}")


def test_decode_with_sequence_lengths_in_device_arrays(device, rng):
    """One new query per sequence against caches of different lengths: the diagonal ends at
    each sequence's last key."""
    b, h_q, h_kv, s_kv, d = 3, 8, 2, 192, 64
    qh = _host((b, h_q, 1, d), BF16, rng)
    kh, vh = (_host((b, h_kv, s_kv, d), BF16, rng) for _ in range(2))
    lq, lk = np.array([1, 1, 1], np.int32), np.array([192, 5, 77], np.int32)
    kw = dict(causal="bottom_right", window=(31, None))
    o = A.sdpa(*(cl.to_device(x) for x in (qh, kh, vh)), seq_lens_q=cl.to_device(lq),
               seq_lens_kv=cl.to_device(lk), **kw)
    ref, _ = R.sdpa_forward(qh, kh, vh, seq_lens_q=lq, seq_lens_kv=lk, **kw)
    _close(o.get(), ref, None, "decode")


def test_the_papers_slopes_and_given_slopes(device, rng):
    b, h, s, d = 2, 12, 128, 64           # 12 heads: not a power of two
    qh, kh, vh = (_host((b, h, s, d), F16, rng) for _ in range(3))
    q, k, v = (cl.to_device(x) for x in (qh, kh, vh))
    own = A.sdpa(q, k, v, causal=True, alibi=True)
    given_ = A.sdpa(q, k, v, causal=True, alibi_slopes=cl.to_device(A.alibi_slopes(h)))
    assert np.array_equal(own.get(), given_.get())       # one graph, the same slopes
    _close(own.get(), R.sdpa_forward(qh, kh, vh, causal=True, alibi=True)[0], None, "alibi")
    steep = (A.alibi_slopes(h) * 4).astype(np.float32)
    got = A.sdpa(q, k, v, causal=True, alibi_slopes=cl.to_device(steep))
    _close(got.get(), R.sdpa_forward(qh, kh, vh, causal=True, alibi_slopes=steep)[0], None,
           "alibi, steeper slopes")


def test_a_window_with_dropout_replays_one_mask(device, rng):
    """A causal window with dropout: the forward's keep-mask (dumped) is the one the
    reference applies, and the backward given the same seed replays it.  cuDNN writes the
    dumped mask only where a query sees the key (it skips the tiles the causal mask removes
    whole): those entries are checked, and the reference reads no other."""
    p, seed = 0.2, (77, 5)
    b, h_q, h_kv, s_q, s_kv, d = 2, 4, 2, 128, 160, 64
    qh, kh, vh = (_host(x, BF16, rng) for x in ((b, h_q, s_q, d), (b, h_kv, s_kv, d),
                                               (b, h_kv, s_kv, d)))
    q, k, v = (cl.to_device(x) for x in (qh, kh, vh))
    kw = dict(causal=True, window=(31, None), dropout=p, seed=seed)
    plan = A.SdpaPlan(q, k, v, training=True, dump_mask=True, max_candidates=1, **kw)
    mask_d = cl.empty((b, h_q, s_q, s_kv), np.float32).fill(np.float32(np.nan))
    o, stats = plan.execute(q, k, v, mask_out=mask_d, seed=seed)
    mask = mask_d.get()
    vis = np.broadcast_to(R.sdpa_mask((b, s_q, s_kv), causal=True, window=(31, None)),
                          mask.shape)
    seen = mask[vis]
    assert set(np.unique(seen)) <= {0.0, 1.0}, "an entry a query sees was not written"
    assert abs(seen.mean() - (1 - p)) < 0.02            # 29k Bernoulli draws
    ref_kw = dict(causal=True, window=(31, None), dropout_mask=mask, dropout=p)
    ro, rs = R.sdpa_forward(qh, kh, vh, **ref_kw)
    _close(o.get(), ro, None, "o, window with dropout")
    _close(stats.get(), rs, None, "stats, window with dropout")
    doh = _host(o.shape, BF16, rng)
    grads = A.sdpa_backward(q, k, v, o, cl.to_device(doh), stats, **kw)
    for n, g, ref in zip(("dq", "dk", "dv"), grads, R.sdpa_backward(qh, kh, vh, doh,
                                                                     **ref_kw)):
        _close(g.get(), ref, None, f"{n}, window with dropout")


def test_every_candidate_of_a_variant_plan(device, rng):
    """Every engine of a variant's composite graph computes it; the single SDPA operation
    says why it has none."""
    qh, kh = _host((2, 4, 64, 64), F16, rng), _host((2, 2, 192, 64), F16, rng)
    q, k = cl.to_device(qh), cl.to_device(kh)
    kw = dict(causal="bottom_right", window=(47, None))
    plan = A.SdpaPlan(q, k, k, training=True, **kw).plan()
    assert "bottom-right" in plan.unavailable.get("unified", "bottom-right")
    ro, rs = R.sdpa_forward(qh, kh, kh, **kw)
    for i, cand in enumerate(plan.candidates):
        plan.select(i)
        o, stats = plan.execute(q, k, k)
        assert cand["backend"] == "composite"
        _close(o.get(), ro, None, cand["name"])
        _close(stats.get(), rs, None, cand["name"] + " stats")
    assert "bottom right, window (47, -)" in repr(plan)
    doh = _host(ro.shape, F16, rng)
    bp = A.SdpaBackwardPlan(q, k, k, o, cl.to_device(doh), **kw).plan()
    want = R.sdpa_backward(qh, kh, kh, doh, **kw)
    for i, cand in enumerate(bp.candidates):
        bp.select(i)
        for n, g, ref in zip(("dq", "dk", "dv"), bp.execute(q, k, k, o, cl.to_device(doh),
                                                             stats), want):
            _close(g.get(), ref, None, f"{cand['name']} {n}")


# -- plans: threads, capture -----------------------------------------------------------------------
def test_threads_executing_variant_plans_match_serial_results(device, rng):
    """Eight threads, each on its own stream, execute one forward and one backward plan of a
    bottom-right windowed problem: bit for bit the serial results."""
    shape, kv = (2, 4, 64, 64), (2, 2, 160, 64)
    sets = [tuple(cl.to_device(_host(s, F16, rng)) for s in (shape, kv, kv)) for _ in range(3)]
    _plans_match_serial(device, sets, causal="bottom_right", window=(40, None))


def test_a_captured_plan_reads_new_slopes_at_each_replay(device, rng):
    """ALiBi with a window, captured in a CUDA graph: new inputs and new slopes written into
    the captured arrays are what each replay computes with."""
    shape = (2, 4, 128, 64)
    hosts = [_host(shape, F16, rng) for _ in range(3)]
    q, k, v = (cl.to_device(x) for x in hosts)
    slopes = cl.to_device(A.alibi_slopes(4))
    kw = dict(causal=True, window=(63, None), alibi=True)
    plan = A.SdpaPlan(q, k, v, training=True, max_candidates=1, **kw)
    out = cl.empty(shape, F16)
    stats = cl.empty((2, 4, 128, 1), np.float32)
    with cl.Stream(device) as s:
        plan.execute(q, k, v, out=out, stats=stats, alibi_slopes=slopes, stream=s)  # warm
        s.sync()
        with cl.graph.capture(s) as g:
            plan.execute(q, k, v, out=out, stats=stats, alibi_slopes=slopes, stream=s)
        ge = g.instantiate()
        for scale in (1.0, 3.0):
            hosts = [_host(shape, F16, rng) for _ in range(3)]
            for dst, src in zip((q, k, v), hosts):
                dst.copy_(cl.to_device(src))
            new = (A.alibi_slopes(4) * scale).astype(np.float32)
            slopes.copy_(cl.to_device(new))
            out.fill(poison_value(F16))
            device.synchronize()
            ge.replay(s)
            s.sync()
            ro, rs = R.sdpa_forward(*hosts, causal=True, window=(63, None), alibi_slopes=new)
            _close(out.get(), ro, None, f"replayed o, slopes x{scale}")
            _close(stats.get(), rs, None, f"replayed stats, slopes x{scale}")


# -- refused before any library call, with real arrays ---------------------------------------------
def test_what_cudnn_does_not_take_is_refused_on_the_device(device, rng):
    q = cl.to_device(_host((2, 4, 128, 64), F16, rng))
    short = cl.to_device(_host((2, 4, 64, 64), F16, rng))
    bias = cl.to_device(_host((1, 4, 128, 128), F16, rng))
    for kw, match in ((dict(causal="bottom_right", bias=bias), "without a bias"),
                      (dict(causal="bottom_right", dropout=0.1, seed=3), "without dropout"),
                      (dict(causal="bottom_right", alibi=True), "without ALiBi"),
                      (dict(alibi=True), "under a causal mask"),
                      (dict(window=(8, 8), alibi=True), "under a causal mask")):
        with pytest.raises(CudaLibsError, match=match):
            A.sdpa(q, q, q, **kw)
    for kw, match in ((dict(causal="bottom_right"), "s_q <= s_kv"),
                      (dict(window=(8, None)), "sliding window only with s_q <= s_kv")):
        with pytest.raises(CudaLibsError, match=match):
            A.sdpa(q, short, short, **kw)
    o, stats = A.sdpa(q, q, q, training=True, bias=cl.to_device(_host((2, 1, 128, 128), F16,
                                                                         rng)))
    with pytest.raises(CudaLibsError, match="one per query head"):
        A.sdpa_backward(q, q, q, o, o, stats, want_dbias=True,
                        bias=cl.to_device(_host((2, 1, 128, 128), F16, rng)))
    with pytest.raises(ValueError, match="needs the bias"):
        A.sdpa_backward(q, q, q, o, o, stats, want_dbias=True)
    with pytest.raises(ValueError, match="no key right"):
        A.sdpa(q, q, q, causal=True, window=(4, 4))
    with pytest.raises(ValueError, match="4 contiguous float32"):
        A.sdpa(q, q, q, causal=True, alibi_slopes=cl.to_device(np.ones(3, np.float32)))


def test_a_bias_gradient_beside_a_softcap_is_refused(device, rng):
    """cuDNN 9.19's engine writes a bias gradient far from the reference beside a softcap (0.9
    relative, measured), so the plans and one-shots refuse the pair before any library call;
    the softcapped backward without dbias and dbias without softcap are tested above."""
    b, h, s_q, s_kv, d = 1, 2, 64, 64, 64
    q, k, v = (cl.to_device(_host((b, h, n, d), F16, rng)) for n in (s_q, s_kv, s_kv))
    bias = cl.to_device(_host((1, h, s_q, s_kv), F16, rng))
    o, stats = A.sdpa(q, k, v, training=True, bias=bias, softcap=5.0)
    do = cl.to_device(_host(o.shape, F16, rng))
    with pytest.raises(CudaLibsError, match="softcap"):
        A.SdpaBackwardPlan(q, k, v, o, do, bias=bias, softcap=5.0, want_dbias=True)
    with pytest.raises(CudaLibsError, match="softcap"):
        A.sdpa_backward(q, k, v, o, do, stats, bias=bias, softcap=5.0, want_dbias=True)
