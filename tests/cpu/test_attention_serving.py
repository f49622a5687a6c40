"""Attention for serving without a GPU -- paged key/value caches, packed (ragged) batches,
single-token decode: the reference helpers that turn each form into the dense problem; the
offsets :func:`ragged_batch` computes; the plans' problems, the arrays a call passes and
binds, their keys; the graphs finalized by the real library (host-side in cuDNN 9) with the
tensors they bind; every bad argument refused before any C call."""

import importlib
import json
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudalibs import dtypes
from cudalibs.cudnn import _base
from cudalibs.cudnn import attention
from cudalibs.cudnn.attention import lower as AG
from cudalibs.cudnn.attention import plan as AP
from cudalibs.cudnn.attention import serving as SV
from cudalibs.driver.array import DeviceArray
from cudalibs.errors import CudaLibsError
from cudalibs.runtime import front
from cudalibs.testing.ref import _attention as R

# The package's ``sdpa`` is the function; the module of the plans is reached by its path.
A = importlib.import_module("cudalibs.cudnn.attention.sdpa")

F16 = np.dtype(np.float16)
I32 = np.dtype(np.int32)
I64 = np.dtype(np.int64)


@pytest.fixture(autouse=True)
def _forget_fake_devices():
    """Keys built here use a stand-in device; never let its environment leak."""
    yield
    _base._env_of.clear()


# -- the reference helpers ------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 3), st.integers(1, 3), st.integers(1, 40),
       st.sampled_from([1, 4, 16]), st.integers(0, 5))
def test_pages_hold_the_dense_tensor(seed, b, h, s, page_size, spare):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, h, s, 8))
    per = -(-s // page_size)
    pool, table = R.to_pages(x, page_size, num_pages=b * per + spare, rng=rng, fill=-7.0)
    assert pool.shape == (b * per + spare, h, page_size, 8) and table.shape == (b, per)
    assert table.dtype == I32 and len(set(table.ravel().tolist())) == b * per
    np.testing.assert_array_equal(R.from_pages(pool, table, s), x)
    # row j of sequence n, gathered one element at a time
    for n in range(b):
        for j in range(s):
            np.testing.assert_array_equal(pool[table[n, j // page_size], :, j % page_size],
                                          x[n, :, j])
    unused = sorted(set(range(b * per + spare)) - set(table.ravel().tolist()))
    assert (pool[unused] == -7.0).all()
    # cuDNN's [b, 1, pages, 1] table reads the same
    np.testing.assert_array_equal(R.from_pages(pool, table[:, None, :, None], s), x)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.integers(0, 9), min_size=1, max_size=4),
       st.integers(0, 6))
def test_packed_sequences_hold_the_valid_rows(seed, lens, spare):
    rng = np.random.default_rng(seed)
    s = max(max(lens), 1)
    x = rng.standard_normal((len(lens), 3, s, 4))
    packed = R.pack_sequences(x, lens, tokens=sum(lens) + spare, fill=5.0)
    assert packed.shape == (sum(lens) + spare, 3, 4)
    assert (packed[sum(lens):] == 5.0).all()
    at = 0
    for n, length in enumerate(lens):
        np.testing.assert_array_equal(packed[at:at + length], x[n, :, :length].transpose(1, 0, 2))
        at += length
    back = R.unpack_sequences(packed, lens, s, fill=np.nan)
    for n, length in enumerate(lens):
        np.testing.assert_array_equal(back[n, :, :length], x[n, :, :length])
        assert np.isnan(back[n, :, length:]).all()


def test_the_dense_reference_serves_the_packed_and_paged_forms():
    """The packed and paged forms feed the dense reference through the helpers; the valid
    rows of a padded problem are those of each sequence computed on its own."""
    rng = np.random.default_rng(3)
    lq, lk = [3, 1, 5], [6, 2, 7]
    q = rng.standard_normal((3, 4, 5, 8))
    k = rng.standard_normal((3, 2, 7, 8))
    pool, table = R.to_pages(k, 4, rng=rng)
    dense_k = R.from_pages(pool, table, 7)
    o, _ = R.sdpa_forward(R.unpack_sequences(R.pack_sequences(q, lq), lq, 5), dense_k, dense_k,
                          seq_lens_q=lq, seq_lens_kv=lk)
    for n in range(3):
        alone, _ = R.sdpa_forward(q[n:n + 1, :, :lq[n]], k[n:n + 1, :, :lk[n]],
                                  k[n:n + 1, :, :lk[n]])
        np.testing.assert_allclose(o[n, :, :lq[n]], alone[0], rtol=1e-12, atol=1e-12)


def test_reference_helpers_refuse_bad_input():
    x = np.zeros((2, 1, 5, 4))
    with pytest.raises(ValueError, match="need 4 pages"):
        R.to_pages(x, 3, num_pages=3)
    with pytest.raises(ValueError, match=r"\[b, h, s, d\]"):
        R.to_pages(x[0], 3)
    pool, table = R.to_pages(x, 3)
    with pytest.raises(ValueError, match="page numbers"):
        R.from_pages(pool, table + 10)
    with pytest.raises(ValueError, match="more than"):
        R.pack_sequences(x, [5, 5], tokens=9)
    with pytest.raises(ValueError, match="seq_lens"):
        R.pack_sequences(x, [6, 1])
    with pytest.raises(ValueError, match="at most"):
        R.unpack_sequences(np.zeros((4, 1, 4)), [3, 2], 4)


# -- stand-ins for device arrays ------------------------------------------------------------------
_DEV = types.SimpleNamespace(ordinal=0, compute_capability=(9, 0))     # a Hopper stand-in


def _fake(shape, dtype=F16, strides=None, ptr=0x100000, dev=None):
    dt = dtypes.lookup(dtype)
    if strides is None:
        strides = tuple(s * dt.itemsize for s in AG._packed(shape))
    return DeviceArray._view(ptr, tuple(shape), tuple(strides), dt, dev or _DEV, None, None)


B, HQ, HKV, D = 4, 8, 2, 64
PAGES, PAGE, PER = 40, 16, 6            # a pool of 40 pages of 16 tokens, 6 per sequence
TQ, TKV = 100, 120                      # rows of the packed tensors


def _pool(pages=PAGES, page=PAGE, d=D, ptr=0x200000):
    return _fake((pages, HKV, page, d), ptr=ptr)


def _table(b=B, per=PER, dtype=I32, ptr=0x300000, **kw):
    return _fake((b, per), dtype, ptr=ptr, **kw)


def _lens(b=B, ptr=0x400000):
    return _fake((b,), I32, ptr=ptr)


def _offsets(b=B, dtype=I32, ptr=0x500000):
    return _fake((b + 1,), dtype, ptr=ptr)


def _packed_q(tokens=TQ, h=HQ, d=D, ptr=0x600000, **kw):
    return _fake((tokens, h, d), ptr=ptr, **kw)


def _packed_kv(tokens=TKV, d=D, ptr=0x700000):
    return _fake((tokens, HKV, d), ptr=ptr)


def _ragged(q=True, kv=True, sq=64, skv=64, dq=I32, dkv=I64):
    return SV.Ragged(_offsets(dtype=dq) if q else None,
                     _offsets(dtype=dkv, ptr=0x580000) if kv else None,
                     sq if q else None, skv if kv else None)


class _Planned(A.SdpaPlan):
    """A forward plan whose candidate is a stand-in: execute's checks and binding run, and
    the pointers a launch would pass are kept instead."""

    def plan(self):
        self._exe = object()
        return self

    def _launch(self, dev, s, vals, by_value):
        self.vals = dict(vals)


class _PlannedBackward(A.SdpaBackwardPlan):
    def plan(self):
        self._exe = object()
        return self

    def _launch(self, dev, s, vals, by_value):
        self.vals = dict(vals)


LENS = dict(seq_lens_q=_lens(), seq_lens_kv=_lens(ptr=0x480000))


def _decode_plan(**kw):
    q = _fake((B, HQ, 1, D))
    kw = dict(LENS, page_table_k=_table(), **kw) if "page_table_k" not in kw else \
        dict(LENS, **kw)
    return _Planned(q, _pool(), _pool(ptr=0x280000), **kw)


# -- ragged_batch ---------------------------------------------------------------------------------
@pytest.fixture
def host_copies(monkeypatch):
    """ragged_batch's uploads kept as host arrays (this tier has no device)."""
    monkeypatch.setattr(SV, "to_device", lambda host, device=None, stream=None: host)


def test_ragged_batch_offsets_are_tokens_before_times_the_token_stride(host_copies):
    q = _packed_q()                                     # rows HQ * D elements apart
    kv = _fake((TKV, 3, HKV, D))[:, 0]                 # k of a packed kv buffer: 3 rows apart
    r = attention.ragged_batch([5, 1, 12, 30], [7, 9, 2, 40], q=q, k=kv)
    np.testing.assert_array_equal(r.offsets_q, np.array([0, 5, 6, 18, 48]) * HQ * D)
    np.testing.assert_array_equal(r.offsets_kv, np.array([0, 7, 16, 18, 58]) * 3 * HKV * D)
    assert r.offsets_q.dtype == I32
    assert (r.max_seq_len_q, r.max_seq_len_kv) == (32, 64)   # rounded up to powers of two
    r = attention.ragged_batch([5, 1], None, q=q, max_seq_len_q=7, dtype=np.int64)
    assert r.offsets_kv is None and r.max_seq_len_kv is None and r.max_seq_len_q == 7
    assert r.offsets_q.dtype == I64


@pytest.mark.parametrize("kw, exc, match", [
    (dict(seq_lens_q=[1], q=_packed_q(), dtype=np.float32), TypeError, "int32 or int64"),
    (dict(), ValueError, "give seq_lens_q, seq_lens_kv or both"),
    (dict(seq_lens_q=[1, 2]), TypeError, "needs q="),
    (dict(seq_lens_kv=[1, 2]), TypeError, "needs k="),
    (dict(seq_lens_q=[1, 0], q=_packed_q()), ValueError, "positive integers"),
    (dict(seq_lens_q=[], q=_packed_q()), ValueError, "non-empty"),
    (dict(seq_lens_q=[60, 50], q=_packed_q()), ValueError, "add up to 110 tokens"),
    (dict(seq_lens_q=[3], q=_fake((2, HQ, 1, D))), ValueError, "packed"),
    (dict(seq_lens_q=[3, 4], q=_packed_q(), max_seq_len_q=3), ValueError, "below the longest"),
    (dict(seq_lens_q=[3, 4], seq_lens_kv=[3], q=_packed_q(), k=_packed_kv()), ValueError,
     "one length per sequence"),
    (dict(seq_lens_q=[3], q=_packed_q(), out=(1, 2)), TypeError, "out must be a Ragged"),
    (dict(seq_lens_q=[3], q=_packed_q(), out=SV.Ragged()), ValueError, "no offsets_q"),
    (dict(seq_lens_q=[2**20, 2**20], q=_fake((2**21, 32, 128))), ValueError,
     "pass dtype=numpy.int64"),
])
def test_ragged_batch_refuses_bad_input(host_copies, kw, exc, match):
    with pytest.raises(exc, match=match):
        attention.ragged_batch(**kw)


# -- the plans' problems --------------------------------------------------------------------------
def test_paged_decode_plan_reads_the_pools_through_the_tables():
    plan = _decode_plan()
    sp = plan.spec
    assert (sp.b, sp.h_q, sp.h_kv, sp.s_q, sp.s_kv, sp.d) == (B, HQ, HKV, 1, PER * PAGE, D)
    assert sp.paged == SV.PagedLayout(PAGES, PAGES, PAGE, PER, (PER, PER, 1, 1),
                                      (PER, PER, 1, 1))
    assert sp.ragged is None and sp.padding
    assert sp.k_strides == AG._packed((PAGES, HKV, PAGE, D))      # the pool's own
    specs = {n: (shape, est) for n, shape, est in plan._specs}
    assert specs["k"] == ((PAGES, HKV, PAGE, D), sp.k_strides)    # what a call passes
    assert specs["q"][0] == (B, HQ, 1, D) and plan.out_shape == (B, HQ, 1, D)
    assert f"paged {PER}x{PAGE} of {PAGES} pages" in repr(plan) and "sq1" in repr(plan)
    json.dumps(plan._tuning_key(), default=str)
    # a [b, 1, pages, 1] table is the same problem; v through a table of its own too
    four = _table(strides=None).reshape(B, 1, PER, 1)
    assert _decode_plan(page_table_v=four).spec == sp


def test_packed_plan_sees_logical_tensors_and_takes_packed_ones():
    plan = _Planned(_packed_q(), _packed_kv(), _packed_kv(ptr=0x800000), ragged=_ragged(),
                    causal=True, training=True, **LENS)
    sp = plan.spec
    assert (sp.b, sp.s_q, sp.s_kv) == (B, 64, 64)
    assert sp.ragged == SV.RaggedLayout(I32, I64, TQ, TKV)
    # logical [b, h, s, d]: batch stride s * token stride, then head, token, element
    assert sp.q_strides == (64 * HQ * D, D, HQ * D, 1)
    assert sp.k_strides == (64 * HKV * D, D, HKV * D, 1)
    assert sp.o_strides == sp.q_strides                   # o shares q's token stride
    specs = {n: (shape, est) for n, shape, est in plan._specs}
    assert specs["q"] == ((TQ, HQ, D), (HQ * D, D, 1))
    assert specs["v"] == ((TKV, HKV, D), (HKV * D, D, 1))
    assert specs["stats"][0] == (B, HQ, 64, 1)            # the statistics stay dense
    assert plan.out_shape == (TQ, HQ, D)
    assert "packed q and kv (int32 / int64 offsets)" in repr(plan)
    json.dumps(plan._tuning_key(), default=str)


def test_packed_output_of_another_head_dim_shares_the_token_stride():
    # q a slice of a fused qkv buffer: its rows are (HQ + 2 HKV) * D elements apart
    it = F16.itemsize
    fused = (HQ + 2 * HKV) * D
    q = _fake((TQ, HQ, D), strides=(fused * it, D * it, it))
    v = _fake((TKV, HKV, 32))
    k = _fake((TKV, HKV, D), strides=(HKV * 32 * it, D * it, it))    # k rows as far as v's
    plan = _Planned(q, k, v, ragged=_ragged(), **LENS)
    assert plan.spec.o_strides == (64 * fused, 32, fused, 1)
    assert dict((n, est) for n, _, est in plan._specs)["o"] == (fused, 32, 1)


def test_packed_backward_gradients_take_their_inputs_layouts():
    q, k = _packed_q(), _packed_kv()
    o = _packed_q(ptr=0x900000)
    plan = _PlannedBackward(q, k, k, o, o, ragged=_ragged(), causal=True, **LENS)
    sp = plan.spec
    assert (sp.dq_strides, sp.dk_strides, sp.dv_strides) == (sp.q_strides, sp.k_strides,
                                                             sp.v_strides)
    specs = {n: shape for n, shape, _ in plan._specs}
    assert specs["dq"] == (TQ, HQ, D) and specs["dk"] == (TKV, HKV, D)
    assert specs["stats"] == (B, HQ, 64, 1)
    assert "backward" in repr(plan) and "packed q and kv" in repr(plan)


def test_chunked_prefill_packs_queries_against_a_paged_cache():
    plan = _Planned(_packed_q(), _pool(), _pool(ptr=0x280000), page_table_k=_table(),
                    ragged=_ragged(kv=False, sq=32), causal="bottom_right", **LENS)
    sp = plan.spec
    assert sp.ragged == SV.RaggedLayout(I32, None, TQ, 0) and sp.paged is not None
    assert (sp.s_q, sp.s_kv) == (32, PER * PAGE)
    assert "packed q (int32 offsets)" in repr(plan) and "paged" in repr(plan)


def test_decode_takes_one_query_row_in_any_layout():
    """s_q = 1: no rule of the plans involves the sequence length; the row's stride is never
    stepped, so any value is taken (here 0, a broadcast)."""
    it = F16.itemsize
    q = _fake((32, 32, 1, 128), strides=(32 * 128 * it, 128 * it, 0, it))
    k = _fake((32, 4, 8192, 128), strides=(8192 * 4 * 128 * it, 128 * it, 4 * 128 * it, it))
    plan = _Planned(q, k, k)
    sp = plan.spec
    assert (sp.s_q, sp.s_kv, sp.h_q // sp.h_kv) == (1, 8192, 8)
    assert sp.q_strides[2] > 0 and "sq1 skv8192" in repr(plan)


def test_serving_uids_are_their_own():
    assert len(set(AG.UIDS.values())) == len(AG.UIDS)
    assert all(AG.UIDS[n] == u for n, u in SV.UIDS.items())
    assert list(AG.SLOTS) == sorted(AG.UIDS, key=AG.UIDS.get)


def test_unified_lowering_takes_serving_options_from_its_version(monkeypatch):
    assert AG.unified_applies(_decode_plan().spec) is None
    assert "take no causal" in AG.unified_applies(_decode_plan(causal=True).spec)
    assert AG.unified_applies(_packed_plan().spec) is None
    assert "dense statistics" in AG.unified_applies(_packed_plan(training=True).spec)
    monkeypatch.setattr(SV, "version", lambda: (9, 14, 0))
    assert "from cuDNN 9.15.0" in AG.unified_applies(_decode_plan().spec)


# -- the graphs ----------------------------------------------------------------------------------
def _packed_plan(**kw):
    return _Planned(_packed_q(), _packed_kv(), _packed_kv(ptr=0x800000),
                    **dict(LENS, ragged=_ragged(), **kw) if "ragged" not in kw else
                    dict(LENS, **kw))


GRAPHS = {
    "paged decode": lambda: _decode_plan().spec,
    "paged, v's own table": lambda: _decode_plan(page_table_v=_table(ptr=0x380000)).spec,
    "paged d_v 32": lambda: _Planned(_fake((B, HQ, 1, D)), _pool(), _pool(d=32, ptr=0x280000),
                                     page_table_k=_table(), **LENS).spec,
    "packed causal training": lambda: _packed_plan(causal=True, training=True).spec,
    "packed q only": lambda: _Planned(_packed_q(), _fake((B, HKV, 80, D)),
                                      _fake((B, HKV, 80, D)), ragged=_ragged(kv=False),
                                      **LENS).spec,
    "chunked prefill": lambda: _Planned(_packed_q(), _pool(), _pool(ptr=0x280000),
                                        page_table_k=_table(),
                                        ragged=_ragged(kv=False, sq=32), **LENS).spec,
}


@pytest.mark.cudnn_finalize
@pytest.mark.parametrize("case", sorted(GRAPHS))
def test_forward_graphs_finalize_with_the_tensors_they_bind(case):
    spec = GRAPHS[case]()
    for build in (AG.forward_graph, AG.unified_forward_graph):
        low = build(spec)
        assert low.graph.finalized
        slots = set(low.slots)
        assert {"q", "k", "v", "o", "seq_q", "seq_kv"} <= slots
        assert ({"page_table_k", "page_table_v"} <= slots) == (spec.paged is not None)
        assert ("ragged_q" in slots) == (spec.ragged is not None and spec.ragged.q is not None)
        assert ("ragged_kv" in slots) == (spec.ragged is not None and
                                          spec.ragged.kv is not None)
        assert list(low.uids) == sorted(low.uids) == [AG.UIDS[n] for n in low.slots]


@pytest.mark.cudnn_finalize
@pytest.mark.parametrize("kv", [True, False], ids=["packed q and kv", "packed q"])
def test_packed_backward_graphs_finalize(kv):
    q = _packed_q()
    k = _packed_kv() if kv else _fake((B, HKV, 80, D))
    o = _packed_q(ptr=0x900000)
    plan = _PlannedBackward(q, k, k, o, o, ragged=_ragged(kv=kv), causal=True, **LENS)
    for build in (AG.backward_graph, AG.backward_graph_dp):
        low = build(plan.spec)
        assert low.graph.finalized and {"ragged_q", "do", "dq", "dk", "dv"} <= set(low.slots)
        assert ("ragged_kv" in low.slots) == kv


@pytest.mark.cudnn_finalize
def test_a_decode_no_engine_takes_is_refused_by_name(monkeypatch):
    """Where cuDNN has no engine for a decode problem, the plan says which problem -- one
    query row, the heads, the paged cache -- and each lowering's answer."""
    monkeypatch.setattr(AP, "as_stream", lambda s, dev: types.SimpleNamespace(raw_handle=0))
    monkeypatch.setattr(AP, "handle_for", lambda dev, s: types.SimpleNamespace(raw=None))

    def none(*args):
        raise AP._be.NoGraph("no engine passes the filters (workspace limit 0)")

    monkeypatch.setattr(AP._be, "candidates", none)
    plan = A.SdpaPlan(_fake(Q1), _pool(), _pool(ptr=0x280000), page_table_k=_table(), **LENS)
    with pytest.raises(CudaLibsError, match=r"no engine for forward float16 b4 hq8 hkv2 sq1 "
                       r"skv96 d64 \(padding, paged 6x16 of 40 pages\): composite: no engine"):
        plan.plan()


# -- bad input, before any C call -----------------------------------------------------------------
def _old(monkeypatch, v):
    monkeypatch.setattr(SV, "version", lambda: v)


Q1 = (B, HQ, 1, D)
BAD = [
    (lambda: A.SdpaBackwardPlan(_fake(Q1), _pool(), _pool(), _fake(Q1), _fake(Q1),
                                page_table_k=_table(), **LENS),
     ValueError, "forward \\(inference\\) only"),
    (lambda: A.SdpaPlan(_fake(Q1), _pool(), _pool(), page_table_k=_table()), ValueError,
     "page tables need seq_lens_q and seq_lens_kv"),
    (lambda: A.SdpaPlan(_packed_q(), _packed_kv(), _packed_kv(), ragged=_ragged()),
     ValueError, "ragged offsets need seq_lens_q"),
    (lambda: _decode_plan(page_table_k=_table(dtype=I64)), TypeError, "supported: int32"),
    (lambda: _decode_plan(page_table_k=_fake((B, PER, 1), I32)), ValueError,
     "2 or 4 dimensions"),
    (lambda: _decode_plan(page_table_k=_fake((B, 2, PER, 1), I32)), ValueError,
     r"\[b, 1, pages_per_seq, 1\]"),
    (lambda: A.SdpaPlan(_fake(Q1), _pool(), _pool(), page_table_v=_table(), **LENS),
     ValueError, "give page_table_k"),
    (lambda: A.SdpaPlan(_fake(Q1), _fake((B * 96, HKV, D)), _pool(), page_table_k=_table(),
                        **LENS), ValueError, "k is the page pool"),
    (lambda: A.SdpaPlan(_fake(Q1), _pool(), _pool(page=8), page_table_k=_table(), **LENS),
     ValueError, "one page size"),
    (lambda: _decode_plan(page_table_v=_table(per=PER + 1)), ValueError, "span one length"),
    (lambda: _decode_plan(page_table_k=_table(b=B - 1)), ValueError,
     "page_table_k says the batch has 3 sequences, q 4"),
    (lambda: _packed_plan(ragged=(1, 2, 3, 4)), TypeError, "must be a Ragged"),
    (lambda: _packed_plan(ragged=SV.Ragged(_fake((B + 1,), np.float32), None, 64)),
     TypeError, "ragged.offsets_q has dtype float32"),
    (lambda: _packed_plan(ragged=SV.Ragged(_fake((B + 1, 2), I32), None, 64)), ValueError,
     "must hold b \\+ 1 offsets"),
    (lambda: _packed_plan(ragged=SV.Ragged(_fake((1,), I32), None, 64)), ValueError,
     "must hold b \\+ 1 offsets"),
    (lambda: _packed_plan(ragged=SV.Ragged(_offsets(ptr=0x500008), None, 64)), ValueError,
     "16-byte aligned"),
    (lambda: _packed_plan(ragged=_ragged(sq=None)), ValueError,
     "max_seq_len_q must be a positive int"),
    (lambda: _packed_plan(ragged=_ragged(sq=0)), ValueError, "positive int"),
    (lambda: _packed_plan(ragged=SV.Ragged(_offsets(), None, 64, 64)), ValueError,
     "max_seq_len_kv is for packed kv"),
    (lambda: _Planned(_packed_q(), _pool(), _pool(), page_table_k=_table(),
                      ragged=_ragged(), **LENS), ValueError, "a paged cache is not packed"),
    (lambda: _Planned(_fake((B, HQ, 64, D)), _packed_kv(), _packed_kv(), ragged=_ragged(),
                      **LENS), ValueError, "q is the packed \\[total_tokens, h, d\\] tensor"),
    (lambda: _Planned(_packed_q(), _packed_kv(), _packed_kv(),
                      out=_fake((TQ, HQ, D), strides=(HQ * D * 4, D * 2, 2)),
                      ragged=_ragged(), **LENS), ValueError, "one token stride"),
    (lambda: _Planned(_packed_q(), _packed_kv(), _packed_kv(), out=_packed_q(tokens=TQ - 1),
                      ragged=_ragged(), **LENS), ValueError, "hold the same tokens"),
    (lambda: _Planned(_packed_q(tokens=3), _packed_kv(), _packed_kv(), ragged=_ragged(),
                      **LENS), ValueError, "holds 3 tokens, fewer than its 4 sequences"),
    (lambda: _Planned(_packed_q(d=32), _fake((TKV, HKV, 32), strides=(HKV * D * 2, 64, 2)),
                      _packed_kv(), ragged=_ragged(), **LENS), ValueError,
     "do not fit in q's token stride"),
    (lambda: _Planned(_packed_q(), _packed_kv(), _packed_kv(), ragged=_ragged(),
                      seq_lens_q=_lens(b=3), seq_lens_kv=_lens(b=3)).execute(
        _packed_q(), _packed_kv(), _packed_kv(), ragged=_ragged(), seq_lens_q=_lens(b=3),
        seq_lens_kv=_lens(b=3), out=_packed_q(ptr=0x900000)), ValueError, "must be 4"),
]


@pytest.mark.parametrize("call, exc, match", BAD, ids=[m for _, _, m in BAD])
def test_bad_input_raises_before_any_c_call(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_old_libraries_and_devices_are_refused_by_name(monkeypatch):
    _old(monkeypatch, (9, 4, 0))
    with pytest.raises(CudaLibsError, match="paged key/value caches need cuDNN 9.5.0"):
        _decode_plan()
    _old(monkeypatch, (9, 6, 0))
    with pytest.raises(CudaLibsError, match="packed queries with a paged cache need cuDNN 9.7"):
        _Planned(_packed_q(), _pool(), _pool(), page_table_k=_table(),
                 ragged=_ragged(kv=False), **LENS)
    _old(monkeypatch, (9, 18, 0))
    amp = types.SimpleNamespace(ordinal=0, compute_capability=(8, 0))
    q = _fake((TQ, HQ, D), dev=amp)
    kv = _fake((TKV, HKV, D), dev=amp)
    with pytest.raises(CudaLibsError, match="before Hopper need cuDNN 9.18.1"):
        _Planned(q, kv, kv, ragged=SV.Ragged(_fake((B + 1,), I32, dev=amp),
                                             _fake((B + 1,), I32, dev=amp), 64, 64),
                 seq_lens_q=_fake((B,), I32, dev=amp), seq_lens_kv=_fake((B,), I32, dev=amp))


# -- a call: what it binds, what it refuses -------------------------------------------------------
def _call(plan, q, k, v, **kw):
    kw = dict(LENS, out=_fake(plan.out_shape, ptr=0xA00000), **kw)
    plan.execute(q, k, v, **kw)
    return plan.vals


def test_paged_call_without_v_table_needs_one_layout():
    plan = _decode_plan(page_table_v=_fake((B, PER), I32, strides=(4, 4 * B), ptr=0x380000))
    with pytest.raises(ValueError, match="page_table_v of its own layout"):
        _call(plan, _fake(Q1), _pool(), _pool(ptr=0x280000), page_table_k=_table())


def test_paged_call_binds_the_tables():
    plan = _decode_plan()
    q, kp, vp = _fake(Q1), _pool(), _pool(ptr=0x280000)
    vals = _call(plan, q, kp, vp, page_table_k=_table(ptr=0x310000))
    assert vals["page_table_k"] == vals["page_table_v"] == 0x310000      # v through k's
    vals = _call(plan, q, kp, vp, page_table_k=_table(ptr=0x310000),
                 page_table_v=_table(ptr=0x320000).reshape(B, 1, PER, 1))
    assert (vals["page_table_k"], vals["page_table_v"]) == (0x310000, 0x320000)
    assert (vals["k"], vals["v"]) == (0x200000, 0x280000)


def test_packed_call_binds_the_offsets():
    plan = _packed_plan(causal=True)
    q, k, v = _packed_q(), _packed_kv(), _packed_kv(ptr=0x800000)
    r = SV.Ragged(_offsets(ptr=0x510000), _offsets(dtype=I64, ptr=0x520000), 32, 64)
    vals = _call(plan, q, k, v, ragged=r)
    assert (vals["ragged_q"], vals["ragged_kv"]) == (0x510000, 0x520000)


def test_packed_call_takes_a_single_head_in_any_layout():
    """Multi-query: the packed keys' one head is never stepped, so its stride may be anything
    (the plan compares the strides it steps through, in bytes, in three dimensions)."""
    k = _fake((TKV, 1, D))
    plan = _Planned(_packed_q(), k, k, ragged=_ragged(), **LENS)
    odd = _fake((TKV, 1, D), strides=(D * 2, 0, 2), ptr=0x700000)
    vals = _call(plan, _packed_q(), odd, odd, ragged=_ragged())
    assert vals["k"] == vals["v"] == 0x700000
    with pytest.raises(ValueError, match="element strides"):
        wide = _fake((TKV, 1, D), strides=(2 * D * 2, D * 2, 2))
        _call(plan, _packed_q(), wide, wide, ragged=_ragged())


PAGED_CALLS = [
    (dict(), ValueError, "made with page tables"),
    (dict(page_table_k=_table(per=PER + 1)), ValueError, "the plan was made for"),
    (dict(page_table_k=_fake((B, PER), I32, strides=(4 * PER * 2, 4), ptr=0x300000)),
     ValueError, "element strides"),
    (dict(page_table_k=_table(ptr=0x300004)), ValueError, "16-byte aligned"),
    (dict(page_table_k=_table(), ragged=_ragged()), ValueError, "without ragged offsets"),
]


@pytest.mark.parametrize("kw, exc, match", PAGED_CALLS, ids=[m for _, _, m in PAGED_CALLS])
def test_paged_call_refuses_what_its_plan_was_not_made_for(kw, exc, match):
    with pytest.raises(exc, match=match):
        _call(_decode_plan(), _fake(Q1), _pool(), _pool(ptr=0x280000), **kw)


RAGGED_CALLS = [
    (dict(), ValueError, "made with ragged offsets"),
    (dict(ragged=_ragged(), page_table_k=_table()), ValueError, "without page tables"),
    (dict(ragged=(1, 2)), TypeError, "must be a Ragged"),
    (dict(ragged=_ragged(kv=False)), ValueError, "ragged.offsets_kv must be given"),
    (dict(ragged=_ragged(dq=I64)), ValueError, "offsets_q is int64; the plan was made for int32"),
    (dict(ragged=SV.Ragged(_offsets(b=B + 1), _offsets(dtype=I64), 64, 64)), ValueError,
     "has 6 offsets; the plan's batch of 4 needs 5"),
    (dict(ragged=_ragged(sq=128)), ValueError, "max_seq_len_q = 128 exceeds the plan's 64"),
]


@pytest.mark.parametrize("kw, exc, match", RAGGED_CALLS, ids=[m for _, _, m in RAGGED_CALLS])
def test_packed_call_refuses_what_its_plan_was_not_made_for(kw, exc, match):
    with pytest.raises(exc, match=match):
        _call(_packed_plan(), _packed_q(), _packed_kv(), _packed_kv(ptr=0x800000), **kw)


def test_dense_plan_refuses_serving_arguments():
    q = _fake((B, HQ, 64, D))
    plan = _Planned(q, _fake((B, HKV, 64, D)), _fake((B, HKV, 64, D)))
    with pytest.raises(ValueError, match="without page tables"):
        plan.execute(q, _fake((B, HKV, 64, D)), _fake((B, HKV, 64, D)), page_table_k=_table(),
                     out=_fake((B, HQ, 64, D), ptr=0xA00000))
    with pytest.raises(ValueError, match="without ragged offsets"):
        plan.execute(q, _fake((B, HKV, 64, D)), _fake((B, HKV, 64, D)), ragged=_ragged(),
                     out=_fake((B, HQ, 64, D), ptr=0xA00000))


# -- timing operands ------------------------------------------------------------------------------
def test_timing_operands_fit_the_pools_and_the_packed_rows(monkeypatch):
    """Autotuning runs each candidate on scratch operands: page numbers inside the pool
    (every element the table's strides reach), packed lengths and offsets inside the rows."""
    class _Up:
        def __init__(self, host):
            self.host = self.base = host

    monkeypatch.setattr(SV, "to_device", lambda host, device=None, stream=None: _Up(host))
    monkeypatch.setattr(SV, "DeviceArray", types.SimpleNamespace(
        from_buffer=lambda base, shape, dtype, strides: (base, shape, strides)))
    got = SV.scratch(_decode_plan(page_table_v=_fake(
        (B, PER), I32, strides=(4, 4 * B), ptr=0x300000)).spec, _DEV, None)
    for slot in ("page_table_k", "page_table_v"):
        host, shape, strides = got[slot]
        assert shape == (B, 1, PER, 1) and host.dtype == I32
        assert 0 <= host.min() and host.max() < PAGES
        assert host.size * 4 > sum((n - 1) * s for n, s in zip(shape, strides))
    assert got["page_table_v"][2] == (4, 4, 4 * B, 4)
    spec = _packed_plan().spec
    got = SV.scratch(spec, _DEV, None)
    n_q, n_kv = min(64, TQ // B), min(64, TKV // B)
    np.testing.assert_array_equal(got["seq_q"].host, [n_q] * B)
    np.testing.assert_array_equal(got["ragged_q"].host, np.arange(B + 1) * n_q * HQ * D)
    np.testing.assert_array_equal(got["ragged_kv"].host, np.arange(B + 1) * n_kv * HKV * D)
    assert got["ragged_q"].host.dtype == I32 and got["ragged_kv"].host.dtype == I64
    assert got["ragged_q"].host[-1] <= TQ * HQ * D


# -- the one-shots' keys --------------------------------------------------------------------------
class _Stop(Exception):
    """Raised by the stand-in insert below: planning would need a GPU."""


def test_one_shot_keys_name_the_serving_options(monkeypatch):
    seen = []

    def insert(key, plan, prepare):
        seen.append((key, plan))
        raise _Stop

    monkeypatch.setattr(front, "insert", insert)
    with pytest.raises(_Stop):
        A.sdpa(_fake(Q1), _pool(), _pool(), page_table_k=_table(), **LENS)
    with pytest.raises(_Stop):
        A.sdpa(_packed_q(), _packed_kv(), _packed_kv(), ragged=_ragged(), causal=True, **LENS)
    o = _packed_q(ptr=0x900000)
    stats = _fake((B, HQ, 64, 1), np.float32)
    with pytest.raises(_Stop):
        A.sdpa_backward(_packed_q(), _packed_kv(), _packed_kv(), o, o, stats, ragged=_ragged(),
                        causal=True, **LENS)
    (paged, pplan), (packed, rplan), (bwd, bplan) = seen
    named = A.SDPA_KEY.named(paged)
    assert named["paged"] == (((B, PER), (PER * 4, 4), I32), None) and named["ragged"] is None
    assert pplan.spec.paged is not None
    named = A.SDPA_KEY.named(packed)
    assert named["paged"] is None and named["ragged"] == (I32, I64, 64, 64)
    assert A.SDPA_BACKWARD_KEY.named(bwd)["ragged"] == (I32, I64, 64, 64)
    assert bplan.spec.ragged == rplan.spec.ragged
    for kind in (A.SDPA_KEY, A.SDPA_BACKWARD_KEY):
        assert len(kind.fields) == len(set(kind.fields)) and \
            kind.fields[-2:] == SV.KEY_FIELDS
    # the backward refuses a paged cache, whatever the one-shot is given
    with pytest.raises(ValueError, match="forward \\(inference\\) only"):
        A.sdpa_backward(_fake(Q1), _pool(), _pool(), _fake(Q1), _fake(Q1),
                        _fake((B, HQ, 1, 1), np.float32), page_table_k=_table(), **LENS)
    with pytest.raises(TypeError, match="sdpa: ragged must be a Ragged"):
        A.sdpa(_packed_q(), _packed_kv(), _packed_kv(), ragged=[1, 2], **LENS)
