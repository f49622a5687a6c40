"""Attention for serving on the GPU: paged key/value caches, packed (ragged) batches forward and
backward, chunked prefill (packed queries against a paged cache), single-token decode with
grouped heads against long caches -- each against the float64 reference of the equivalent
dense problem (cudalibs.testing.ref's paging and packing helpers) and torch's attention on each
sequence alone; every candidate engine; threads bit for bit; a captured CUDA graph replayed
with new page tables, offsets and lengths written into the arrays it binds.

Error measure: ``max |actual - expected| / max |expected|`` over the rows that exist (query rows
past a sequence's length, or that see no key, are unspecified), at most 1e-2 for
float16/bfloat16 as for the dense attention (tests/gpu/cudnn/test_attention.py).
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs.cudnn import attention as A
from cudalibs.testing import poison_value
from cudalibs.testing.ref import _attention as R

from .._oracles import torch_oracle
from .._threads import match_serial
from .test_attention import BF16, F16, FEW, GRAD_FLOOR, _close, _host


def _poisoned(shape, dtype):
    return cl.empty(shape, dtype).fill(poison_value(dtype))


def _lens(rng, b, top, low=1):
    return [int(x) for x in rng.integers(low, top + 1, b)]


def _torch_per_sequence(q, k, v, lq, lk, causal):
    """torch's attention of each sequence alone (``q[n, :, :lq[n]]`` against the first
    ``lk[n]`` keys, the causal mask the reference's), padded into ``q``'s ``[b, h_q, s_q,
    d_v]`` with NaN; None when torch is absent (which :func:`torch_oracle` reports)."""
    torch = torch_oracle(cuda=True)
    if torch is None:
        return None
    tdt = torch.float16 if q.dtype == F16 else torch.bfloat16
    b, h_q, s_q, _ = q.shape
    out = np.full((b, h_q, s_q, v.shape[3]), np.nan)

    def dev(x, n, length):
        host = np.ascontiguousarray(x[n:n + 1, :, :length].astype(np.float32))
        return torch.from_numpy(host).to("cuda", tdt)

    for n in range(b):
        mask = torch.from_numpy(R.sdpa_mask((1, lq[n], lk[n]), causal=causal)).to("cuda")
        o = torch.nn.functional.scaled_dot_product_attention(
            dev(q, n, lq[n]), dev(k, n, lk[n]), dev(v, n, lk[n]), attn_mask=mask,
            enable_gqa=h_q != k.shape[1])
        out[n, :, :lq[n]] = o.float().cpu().numpy()[0]
    return out


# -- paged caches ---------------------------------------------------------------------------------
def _paged_problem(rng, b, h_q, h_kv, s_q, per, page, d, dtype, *, spare=3):
    """Dense q, k, v on the host and k, v as page pools with one page table (the pages of
    each sequence shuffled through a pool with spare pages of garbage)."""
    s_kv = per * page
    qh = _host((b, h_q, s_q, d), dtype, rng)
    kh, vh = (_host((b, h_kv, s_kv, d), dtype, rng) for _ in range(2))
    order = np.random.default_rng(int(rng.integers(2**31)))
    pool_k, table = R.to_pages(kh, page, num_pages=b * per + spare, rng=order, fill=3.0)
    # v's pool in the same page order: one table serves both, as a serving cache keeps them
    pool_v = np.full_like(pool_k, -3.0)
    pool_v[table.reshape(-1)] = R.to_pages(vh, page, num_pages=b * per, rng=_Identity())[0]
    np.testing.assert_array_equal(R.from_pages(pool_v, table, s_kv), vh)
    return (qh, kh, vh), (pool_k, pool_v, table)


class _Identity:
    """An rng stand-in whose permutation is the identity: pages in sequence order."""

    @staticmethod
    def permutation(n):
        return np.arange(n)


PAGED = st.tuples(
    st.sampled_from([1, 3]),                              # b
    st.sampled_from([(8, 1), (8, 2), (4, 4)]),            # h_q, h_kv
    st.sampled_from([1, 1, 13, 64]),                      # s_q (decode twice as often)
    st.integers(1, 4),                                    # pages per sequence
    st.sampled_from([16, 32, 64]),                        # page size
    st.sampled_from([64, 128]),                           # d
    st.sampled_from([F16, BF16]),
    st.sampled_from([False, "bottom_right"]))


@FEW
@given(PAGED, st.integers(0, 2**31))
def test_paged_forward_against_reference_and_torch(device, problem, seed):
    rng = np.random.default_rng(seed)
    b, (h_q, h_kv), s_q, per, page, d, dtype, causal = problem
    (qh, kh, vh), (pool_k, pool_v, table) = _paged_problem(rng, b, h_q, h_kv, s_q, per, page,
                                                           d, dtype)
    s_kv = per * page
    lq = _lens(rng, b, s_q)
    lk = _lens(rng, b, s_kv)
    q = cl.to_device(qh)
    out = _poisoned(qh.shape, dtype)
    o = A.sdpa(q, cl.to_device(pool_k), cl.to_device(pool_v),
               page_table_k=cl.to_device(table), seq_lens_q=lq, seq_lens_kv=lk,
               causal=causal, out=out)
    rows = R.valid_rows((b, s_q, s_kv), causal=causal, seq_lens_q=lq, seq_lens_kv=lk)
    ro, _ = R.sdpa_forward(qh, kh, vh, causal=causal, seq_lens_q=lq, seq_lens_kv=lk)
    _close(o.get(), ro, rows, "o")
    to = _torch_per_sequence(qh, kh, vh, lq, lk, causal)
    if to is not None:
        _close(o.get(), to, rows, "o vs torch")


def test_paged_tables_of_their_own_and_four_dims(device, rng):
    """k and v through tables of their own, given as cuDNN's ``[b, 1, pages, 1]``; a table
    whose entries past a sequence's pages point anywhere in the pool."""
    b, h_q, h_kv, s_q, per, page, d = 2, 8, 2, 1, 5, 16, 128
    kh, vh = (_host((b, h_kv, per * page, d), BF16, rng) for _ in range(2))
    qh = _host((b, h_q, s_q, d), BF16, rng)
    pool_k, tk = R.to_pages(kh, page, num_pages=14, rng=rng)
    pool_v, tv = R.to_pages(vh, page, num_pages=11, rng=rng)
    lk = [20, 33]                   # two and three pages used: the rest of each table unused
    tk[0, 2:], tv[0, 2:], tk[1, 3:] = 13, 0, 7
    o = A.sdpa(cl.to_device(qh), cl.to_device(pool_k), cl.to_device(pool_v),
               page_table_k=cl.to_device(tk[:, None, :, None]),
               page_table_v=cl.to_device(tv[:, None, :, None]), seq_lens_q=[1, 1],
               seq_lens_kv=lk)
    ro, _ = R.sdpa_forward(qh, kh, vh, seq_lens_q=[1, 1], seq_lens_kv=lk)
    _close(o.get(), ro, None, "o through two 4-D tables")


# -- packed batches -------------------------------------------------------------------------------
PACKED = st.tuples(
    st.sampled_from([1, 3]),                              # b
    st.sampled_from([(4, 4), (8, 2), (4, 1)]),            # h_q, h_kv
    st.sampled_from([1, 37, 96]),                         # longest query sequence
    st.sampled_from([1, 40, 128]),                        # longest key sequence
    st.integers(0, 20),                                   # spare rows after the sequences
    st.sampled_from([64, 128]),                           # d
    st.sampled_from([F16, BF16]),
    st.booleans(),                                        # causal (top-left)
    st.booleans())                                        # keys and values packed too


def _packed_inputs(rng, problem):
    b, (h_q, h_kv), top_q, top_kv, spare, d, dtype, causal, kv_packed = problem
    lq, lk = _lens(rng, b, top_q), _lens(rng, b, top_kv)
    s_q, s_kv = max(lq), max(lk)
    qh = _host((b, h_q, s_q, d), dtype, rng)
    kh, vh = (_host((b, h_kv, s_kv, d), dtype, rng) for _ in range(2))
    q = cl.to_device(R.pack_sequences(qh, lq, tokens=sum(lq) + spare, fill=9.0))
    if kv_packed:
        k, v = (cl.to_device(R.pack_sequences(x, lk, tokens=sum(lk) + spare, fill=9.0))
                for x in (kh, vh))
    else:
        k, v = cl.to_device(kh), cl.to_device(vh)
    r = A.ragged_batch(lq, lk if kv_packed else None, q=q, k=k if kv_packed else None)
    assert isinstance(r, A.Ragged) and r.max_seq_len_q >= s_q
    return (qh, kh, vh), (q, k, v), r, lq, lk, causal


@FEW
@given(PACKED, st.integers(0, 2**31))
def test_packed_forward_and_backward_against_reference(device, problem, seed):
    rng = np.random.default_rng(seed)
    (qh, kh, vh), (q, k, v), r, lq, lk, causal = _packed_inputs(rng, problem)
    b, dtype = len(lq), qh.dtype
    sq = r.max_seq_len_q
    skv = r.max_seq_len_kv if r.offsets_kv is not None else kh.shape[2]
    kw = dict(ragged=r, seq_lens_q=lq, seq_lens_kv=lk, causal=causal)
    o, stats = A.sdpa(q, k, v, training=True, out=_poisoned(q.shape, dtype), **kw)
    assert o.shape == q.shape and stats.shape == (b, qh.shape[1], sq, 1)
    # the dense problem: sequences padded to the plan's longest
    pad = lambda x, lens, s: R.unpack_sequences(x, lens, s)            # noqa: E731
    qd = np.zeros((b, qh.shape[1], sq, qh.shape[3]), dtype)
    qd[:, :, :qh.shape[2]] = qh
    kd, vd = kh, vh
    if r.offsets_kv is not None:
        kd, vd = (np.zeros((b, kh.shape[1], skv, kh.shape[3]), dtype) for _ in range(2))
        kd[:, :, :kh.shape[2]], vd[:, :, :vh.shape[2]] = kh, vh
    rows = R.valid_rows((b, sq, skv), causal=causal, seq_lens_q=lq, seq_lens_kv=lk)
    ro, rs = R.sdpa_forward(qd, kd, vd, causal=causal, seq_lens_q=lq, seq_lens_kv=lk)
    _close(pad(o.get(), lq, sq), ro, rows, "o")
    _close(stats.get(), rs, rows, "stats")
    to = _torch_per_sequence(qd, kd, vd, lq, lk, causal)
    if to is not None:
        _close(pad(o.get(), lq, sq), to, rows, "o vs torch")
    # the backward, packed like the forward
    doh = _host((b, qh.shape[1], sq, qh.shape[3]), dtype, rng)
    do = cl.to_device(R.pack_sequences(doh, lq, tokens=q.shape[0]))
    outs = tuple(_poisoned(x.shape, dtype) for x in (q, k, v))
    dq, dk, dv = A.sdpa_backward(q, k, v, o, do, stats, out=outs, **kw)
    rq, rk, rv = R.sdpa_backward(qd, kd, vd, doh, causal=causal, seq_lens_q=lq,
                                 seq_lens_kv=lk)
    _close(pad(dq.get(), lq, sq), rq, rows, "dq", GRAD_FLOOR)
    keys = np.arange(skv)[None, None, :, None] < np.asarray(lk)[:, None, None, None]
    for got, want, n in ((dk, rk, "dk"), (dv, rv, "dv")):
        got = pad(got.get(), lk, skv) if r.offsets_kv is not None else got.get()
        _close(got, want, keys, n, GRAD_FLOOR)


def test_chunked_prefill_packs_queries_against_a_paged_cache(device, rng):
    """Each sequence's new tokens (packed) attend to its whole cache, bottom-right causal:
    the cache holds ``lk[n]`` tokens, the last ``lq[n]`` of them the new ones."""
    b, h_q, h_kv, per, page, d = 3, 8, 2, 9, 16, 128
    lq, lk = [5, 1, 17], [40, 9, 130]
    (qh, kh, vh), (pool_k, pool_v, table) = _paged_problem(rng, b, h_q, h_kv, 32, per, page,
                                                           d, BF16)
    q = cl.to_device(R.pack_sequences(qh, lq, tokens=30))
    r = A.ragged_batch(lq, None, q=q, max_seq_len_q=32)
    assert r == A.Ragged(r.offsets_q, None, 32, None)
    o = A.sdpa(q, cl.to_device(pool_k), cl.to_device(pool_v), page_table_k=cl.to_device(table),
               ragged=r, seq_lens_q=lq, seq_lens_kv=lk, causal="bottom_right")
    rows = R.valid_rows((b, 32, per * page), causal="bottom_right", seq_lens_q=lq,
                        seq_lens_kv=lk)
    ro, _ = R.sdpa_forward(qh, kh, vh, causal="bottom_right", seq_lens_q=lq, seq_lens_kv=lk)
    got = R.unpack_sequences(o.get(), lq, 32)
    _close(got, ro, rows, "o")
    to = _torch_per_sequence(qh, kh, vh, lq, lk, "bottom_right")
    if to is not None:
        _close(got, to, rows, "o vs torch")


# -- decode ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("s_kv", [4096, 1000])
def test_decode_grouped_heads_against_long_caches(device, rng, s_kv):
    """One query row per sequence, 32 query heads on 4 key/value heads, a long cache:
    contiguous (no sequence lengths, and with them) and paged, all the same attention; the
    heuristics' first engine is one of the plan's lowerings."""
    b, h_q, h_kv, d, page = 4, 32, 4, 128, 64
    qh = _host((b, h_q, 1, d), BF16, rng)
    kh, vh = (_host((b, h_kv, s_kv, d), BF16, rng) for _ in range(2))
    lk = [s_kv, 1, s_kv // 2 + 3, 77]
    q, k, v = cl.to_device(qh), cl.to_device(kh), cl.to_device(vh)
    plan = A.SdpaPlan(q, k, v).plan()
    assert plan.backend in ("composite", "unified") and plan.spec.s_q == 1
    _close(plan.execute(q, k, v).get(), R.sdpa_forward(qh, kh, vh)[0], None, "contiguous")
    ro, _ = R.sdpa_forward(qh, kh, vh, seq_lens_q=[1] * b, seq_lens_kv=lk)
    o = A.sdpa(q, k, v, seq_lens_q=[1] * b, seq_lens_kv=lk)
    _close(o.get(), ro, None, "contiguous with lengths")
    per = -(-s_kv // page)
    kp = np.zeros((b, h_kv, per * page, d), BF16)
    vp = np.zeros_like(kp)
    kp[:, :, :s_kv], vp[:, :, :s_kv] = kh, vh
    pool_k, table = R.to_pages(kp, page, rng=rng)
    pool_v = np.empty_like(pool_k)
    pool_v[table.reshape(-1)] = R.to_pages(vp, page, rng=_Identity())[0]
    pplan = A.SdpaPlan(q, cl.to_device(pool_k), cl.to_device(pool_v),
                       page_table_k=cl.to_device(table), seq_lens_q=[1] * b,
                       seq_lens_kv=lk).plan()
    assert pplan.spec.s_kv == per * page and pplan.backend in ("composite", "unified")
    o = pplan.execute(q, cl.to_device(pool_k), cl.to_device(pool_v),
                      page_table_k=cl.to_device(table), seq_lens_q=[1] * b, seq_lens_kv=lk)
    _close(o.get(), ro, None, "paged")


# -- every engine ---------------------------------------------------------------------------------
def _check_every_candidate(plan, run, want, rows):
    kinds = set()
    for i, cand in enumerate(plan.candidates):
        plan.select(i)
        _close(run(), want, rows, cand["name"])
        kinds.add(cand["backend"])
    assert "composite" in kinds or "composite" in plan.unavailable, plan.unavailable
    return kinds


def test_every_candidate_of_a_paged_decode(device, rng):
    b, h_q, h_kv, per, page, d = 3, 16, 2, 4, 32, 128
    (qh, kh, vh), (pool_k, pool_v, table) = _paged_problem(rng, b, h_q, h_kv, 1, per, page, d,
                                                           F16)
    q, pk, pv, t = (cl.to_device(x) for x in (qh, pool_k, pool_v, table))
    lk = [128, 3, 65]
    kw = dict(page_table_k=t, seq_lens_q=[1] * b, seq_lens_kv=lk)
    plan = A.SdpaPlan(q, pk, pv, **kw).plan()
    ro, _ = R.sdpa_forward(qh, kh, vh, seq_lens_q=[1] * b, seq_lens_kv=lk)
    kinds = _check_every_candidate(plan, lambda: plan.execute(q, pk, pv, **kw).get(), ro, None)
    assert kinds | set(plan.unavailable) >= set(cl.options().sdpa_lowerings)


def test_every_candidate_of_a_packed_forward(device, rng):
    lq = lk = [17, 64, 3]
    qh = _host((3, 8, 64, 64), F16, rng)
    kh, vh = (_host((3, 2, 64, 64), F16, rng) for _ in range(2))
    q, k, v = (cl.to_device(R.pack_sequences(x, lq)) for x in (qh, kh, vh))
    r = A.ragged_batch(lq, lk, q=q, k=k, dtype=np.int64)         # int64 offsets, too
    assert r.offsets_q.dtype == np.int64
    kw = dict(ragged=r, seq_lens_q=lq, seq_lens_kv=lk)
    plan = A.SdpaPlan(q, k, v, **kw).plan()
    ro, _ = R.sdpa_forward(qh, kh, vh, seq_lens_q=lq, seq_lens_kv=lk)
    rows = R.valid_rows((3, 64, 64), seq_lens_q=lq, seq_lens_kv=lk)
    _check_every_candidate(
        plan, lambda: R.unpack_sequences(plan.execute(q, k, v, **kw).get(), lq, 64), ro, rows)
    res = plan.autotune(store=False)
    assert plan.tuned and all("ms" in c for c in res)


# -- threads --------------------------------------------------------------------------------------
def test_threads_executing_serving_plans_match_serial_results(device, rng):
    """Eight threads, each on its own stream, execute one paged decode plan and one packed
    plan on alternating inputs -- pools, tables, offsets and lengths of their own: bit for
    bit what the same calls give serially.  A packed result is its sequences' rows: the
    spare rows after them are never written (a new output's hold whatever the stream-ordered
    memory held, which differs between the serial and the threaded runs)."""
    b, h_q, h_kv, per, page, d = 2, 8, 2, 3, 32, 64
    paged = []
    for _ in range(3):
        (qh, _, _), (pk, pv, t) = _paged_problem(rng, b, h_q, h_kv, 1, per, page, d, F16)
        lens = cl.to_device(np.array(_lens(rng, b, per * page), np.int32))
        paged.append(tuple(cl.to_device(x) for x in (qh, pk, pv, t)) + (lens,))
    ones = cl.to_device(np.ones(b, np.int32))
    q0, pk0, pv0, t0, l0 = paged[0]
    pplan = A.SdpaPlan(q0, pk0, pv0, page_table_k=t0, seq_lens_q=ones, seq_lens_kv=l0,
                       max_candidates=1)
    packed = []
    for _ in range(3):
        lq = _lens(rng, 3, 40)
        qh = _host((3, h_q, 40, d), F16, rng)
        kh = _host((3, h_kv, 40, d), F16, rng)
        q, k = cl.to_device(R.pack_sequences(qh, lq, tokens=120)), \
            cl.to_device(R.pack_sequences(kh, lq, tokens=120))
        r = A.ragged_batch(lq, lq, q=q, k=k, max_seq_len_q=64, max_seq_len_kv=64)
        lens = cl.to_device(np.array(lq, np.int32))
        packed.append((q, k, r, lens, sum(lq)))
    q0, k0, r0, l0, _ = packed[0]
    rplan = A.SdpaPlan(q0, k0, k0, ragged=r0, seq_lens_q=l0, seq_lens_kv=l0, causal=True,
                       max_candidates=1)
    calls = [lambda s, x=x: pplan.execute(x[0], x[1], x[2], page_table_k=x[3],
                                          seq_lens_q=ones, seq_lens_kv=x[4], stream=s)
             for x in paged]
    calls += [lambda s, x=x: rplan.execute(x[0], x[1], x[1], ragged=x[2], seq_lens_q=x[3],
                                           seq_lens_kv=x[3], stream=s)[:x[4]] for x in packed]
    match_serial(device, calls)


# -- captured graphs ------------------------------------------------------------------------------
def test_captured_paged_decode_replays_new_tables_and_lengths(device, rng):
    """The point of paging in a graph: the tables, the lengths and the cache change between
    replays, written into the arrays the capture bound."""
    b, h_q, h_kv, per, page, d = 3, 16, 2, 6, 16, 128
    (qh, _, _), (pk, pv, t) = _paged_problem(rng, b, h_q, h_kv, 1, per, page, d, BF16,
                                             spare=4)
    q, pool_k, pool_v, table = (cl.to_device(x) for x in (qh, pk, pv, t))
    ones = cl.to_device(np.ones(b, np.int32))
    lk = cl.to_device(np.full(b, per * page, np.int32))
    kw = dict(page_table_k=table, seq_lens_q=ones, seq_lens_kv=lk)
    plan = A.SdpaPlan(q, pool_k, pool_v, max_candidates=1, **kw)
    out = cl.empty(q.shape, BF16)
    with cl.Stream(device) as s:
        plan.execute(q, pool_k, pool_v, out=out, stream=s, **kw)     # warm: workspace, packs
        s.sync()
        with cl.graph.capture(s) as g:
            plan.execute(q, pool_k, pool_v, out=out, stream=s, **kw)
        ge = g.instantiate()
        for _ in range(3):          # new queries, cache, page order and lengths, then replay
            (qh, kh, vh), (pk, pv, t) = _paged_problem(rng, b, h_q, h_kv, 1, per, page, d,
                                                       BF16, spare=4)
            lens = _lens(rng, b, per * page)
            for dst, src in ((q, qh), (pool_k, pk), (pool_v, pv), (table, t),
                             (lk, np.array(lens, np.int32))):
                dst.copy_(src)
            out.fill(poison_value(BF16))
            device.synchronize()
            ge.replay(s)
            s.sync()
            ro, _ = R.sdpa_forward(qh, kh, vh, seq_lens_q=[1] * b, seq_lens_kv=lens)
            _close(out.get(), ro, None, "replayed o")


def test_captured_packed_batch_replays_new_offsets_and_lengths(device, rng):
    b, h_q, h_kv, d, tokens, top = 3, 8, 2, 64, 96, 64
    qh = _host((b, h_q, top, d), F16, rng)
    kh = _host((b, h_kv, top, d), F16, rng)
    lq = [32, 10, 40]
    q = cl.to_device(R.pack_sequences(qh, lq, tokens=tokens))
    k = cl.to_device(R.pack_sequences(kh, lq, tokens=tokens))
    r = A.ragged_batch(lq, lq, q=q, k=k, max_seq_len_q=top, max_seq_len_kv=top)
    lens = cl.to_device(np.array(lq, np.int32))
    kw = dict(ragged=r, seq_lens_q=lens, seq_lens_kv=lens)
    plan = A.SdpaPlan(q, k, k, causal=True, max_candidates=1, **kw)
    out = cl.empty(q.shape, F16)
    with cl.Stream(device) as s:
        plan.execute(q, k, k, out=out, stream=s, **kw)
        s.sync()
        with cl.graph.capture(s) as g:
            plan.execute(q, k, k, out=out, stream=s, **kw)
        ge = g.instantiate()
        for _ in range(3):          # another batch in the same buffers, offsets rewritten
            lq = _lens(rng, b, top)
            while sum(lq) > tokens:
                lq = _lens(rng, b, top)
            qh = _host((b, h_q, top, d), F16, rng)
            kh = _host((b, h_kv, top, d), F16, rng)
            q.copy_(R.pack_sequences(qh, lq, tokens=tokens))
            k.copy_(R.pack_sequences(kh, lq, tokens=tokens))
            again = A.ragged_batch(lq, lq, q=q, k=k, max_seq_len_q=top, max_seq_len_kv=top,
                                   out=r, stream=s)
            assert again.offsets_q is r.offsets_q and again.offsets_kv is r.offsets_kv
            lens.copy_(np.array(lq, np.int32))
            out.fill(poison_value(F16))
            device.synchronize()
            ge.replay(s)
            s.sync()
            ro, _ = R.sdpa_forward(qh, kh, kh, causal=True, seq_lens_q=lq, seq_lens_kv=lq)
            rows = R.valid_rows((b, top, top), causal=True, seq_lens_q=lq, seq_lens_kv=lq)
            _close(R.unpack_sequences(out.get(), lq, top), ro, rows, "replayed o")


# -- bad input with real arrays -------------------------------------------------------------------
def test_bad_serving_inputs_on_the_device(device, rng):
    torch = torch_oracle(cuda=True)
    (qh, kh, vh), (pk, pv, t) = _paged_problem(rng, 2, 8, 2, 1, 2, 16, 64, F16)
    q, pool_k, pool_v = cl.to_device(qh), cl.to_device(pk), cl.to_device(pv)
    with pytest.raises(TypeError, match="supported: int32"):
        A.sdpa(q, pool_k, pool_v, page_table_k=cl.to_device(t.astype(np.int64)),
               seq_lens_q=[1, 1], seq_lens_kv=[5, 5])
    with pytest.raises(ValueError, match="must lie in 1\\.\\.32"):
        A.sdpa(q, pool_k, pool_v, page_table_k=cl.to_device(t), seq_lens_q=[1, 1],
               seq_lens_kv=[5, 33])
    o, stats = A.sdpa(q, cl.to_device(kh), cl.to_device(vh), training=True)
    with pytest.raises(ValueError, match="forward \\(inference\\) only"):
        A.sdpa_backward(q, pool_k, pool_v, o, o, stats, page_table_k=cl.to_device(t),
                        seq_lens_q=[1, 1], seq_lens_kv=[5, 5])
    packed = cl.to_device(R.pack_sequences(_host((2, 8, 4, 64), F16, rng), [4, 4]))
    r = A.ragged_batch([4, 4], None, q=packed)
    with pytest.raises(ValueError, match="offsets_q is int64 .*this batch needs int32"):
        A.ragged_batch([2, 3], None, q=packed, out=A.Ragged(
            cl.to_device(np.zeros(3, np.int64)), None, 4, None))
    with pytest.raises(ValueError, match="made with packed q"):
        A.SdpaPlan(packed, cl.to_device(kh), cl.to_device(vh), ragged=r, seq_lens_q=[4, 4],
                   seq_lens_kv=[5, 5]).execute(packed, cl.to_device(kh), cl.to_device(vh),
                                               ragged=A.Ragged(), seq_lens_q=[4, 4],
                                               seq_lens_kv=[5, 5])
    if torch is not None:           # foreign tables and offsets are borrowed as they are
        tt = torch.from_numpy(t).cuda()
        o = A.sdpa(q, pool_k, pool_v, page_table_k=tt, seq_lens_q=[1, 1], seq_lens_kv=[20, 9])
        ro, _ = R.sdpa_forward(qh, kh, vh, seq_lens_q=[1, 1], seq_lens_kv=[20, 9])
        _close(o.get(), ro, None, "o through a torch page table")
