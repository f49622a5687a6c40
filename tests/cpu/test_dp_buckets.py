"""The parts of the examples' data-parallel machinery (examples/_dp.py) that need no GPU: the
flat layout, the bucket assignment, the shard of a batch, the launcher's argument checks and
its processes' bootstrap (rank 0's NCCL unique id piped to the others)."""

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
# Imported by name, as the examples do: the launcher's spawned processes import it so too.
if str(ROOT / "examples") not in sys.path:
    sys.path.insert(0, str(ROOT / "examples"))
import _dp as D  # noqa: E402


# -- layout ------------------------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(0, 700), min_size=1, max_size=12),
       align=st.sampled_from([1, 8, 128]))
def test_layout_packs_aligned_disjoint_spans(sizes, align):
    named = {f"p{i}": n for i, n in enumerate(sizes)}
    spans, total = D.layout(named, align)
    assert list(spans) == list(named)
    prev_stop = 0
    for name, (a, b) in spans.items():
        assert b - a == named[name]
        assert a % align == 0 and a >= prev_stop
        assert a - prev_stop < align          # no more padding than the alignment needs
        prev_stop = b
    assert total % align == 0 and total >= prev_stop and total - prev_stop < align


def test_layout_refuses_bad_input():
    with pytest.raises(ValueError, match="align"):
        D.layout({"a": 3}, 0)
    with pytest.raises(ValueError, match="negative"):
        D.layout({"a": -1})


# -- bucket assignment ---------------------------------------------------------------------
def _check_buckets(buffers, order, cap, first, buckets):
    """Every property plan_buckets promises."""
    pos = {n: i for i, n in enumerate(order)}
    owner = {n: b for b, (spans, _) in enumerate(buffers) for n in spans}
    seen = []
    for i, bk in enumerate(buckets):
        assert bk.index == i
        spans, itemsize = buffers[bk.buffer]
        assert all(owner[n] == bk.buffer for n in bk.names)
        # contiguous: exactly the spans inside [start, stop) are the bucket's
        inside = {n for n, (a, b) in spans.items() if a >= bk.start and b <= bk.stop}
        assert inside == set(bk.names)
        assert bk.start == min(spans[n][0] for n in bk.names)
        assert bk.stop == max(spans[n][1] for n in bk.names)
        assert bk.nbytes == (bk.stop - bk.start) * itemsize
        # within the limit unless a single gradient exceeds it
        limit = max(cap, first) if first is not None else cap
        assert len(bk.names) == 1 or bk.nbytes <= limit
        # names in production order
        assert [pos[n] for n in bk.names] == sorted(pos[n] for n in bk.names)
        seen += bk.names
    assert sorted(seen) == sorted(order)
    last = [max(pos[n] for n in bk.names) for bk in buckets]
    assert last == sorted(last)          # in the order they complete


@st.composite
def _problems(draw):
    nbuf = draw(st.integers(1, 3))
    buffers, names = [], []
    for b in range(nbuf):
        sizes = draw(st.lists(st.integers(1, 300), min_size=1, max_size=8))
        itemsize = draw(st.sampled_from([2, 4]))
        named = {f"b{b}.p{i}": n for i, n in enumerate(sizes)}
        spans, _ = D.layout(named, draw(st.sampled_from([1, 16, 128])))
        buffers.append((spans, itemsize))
        names += list(named)
    order = draw(st.permutations(names))
    cap = draw(st.integers(1, 4000))
    first = draw(st.one_of(st.none(), st.integers(1, 4000)))
    return buffers, list(order), cap, first


@settings(max_examples=300, deadline=None)
@given(problem=_problems())
def test_plan_buckets_properties(problem):
    buffers, order, cap, first = problem
    buckets = D.plan_buckets(buffers, order, cap, first)
    _check_buckets(buffers, order, cap, first, buckets)


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(1, 500), min_size=1, max_size=10))
def test_reverse_layout_order_with_a_large_limit_is_one_bucket(sizes):
    named = {f"p{i}": n for i, n in enumerate(sizes)}
    spans, _ = D.layout(named)
    buckets = D.plan_buckets([(spans, 4)], list(reversed(named)), 1 << 30)
    assert len(buckets) == 1
    assert buckets[0].names == tuple(reversed(named))


def test_cnn_like_layout_in_backward_order():
    # The gradients laid out in the order the backward writes them, one float32 buffer:
    # 1 KiB buckets split them where the next one would overflow.
    order = ["fc.w", "fc.b", "bn.g", "bn.b", "conv.w"]
    spans, _ = D.layout({"fc.w": 320, "fc.b": 10, "bn.g": 32, "bn.b": 32, "conv.w": 300}, 1)
    buckets = D.plan_buckets([(spans, 4)], order, 1024, 1024)
    assert [b.names for b in buckets] == [("fc.w",), ("fc.b", "bn.g", "bn.b"), ("conv.w",)]
    # fc.w alone is 1280 bytes: over the limit, in a bucket of its own
    assert buckets[0].nbytes == 1280


def test_transformer_like_groups_split_where_memory_is_not_adjacent():
    # Laid out in forward order (tok, pos, layer, head), written in backward order with the
    # embeddings last: the bucket of head..layer cannot take tok (pos lies between them).
    spans, _ = D.layout({"tok": 64, "pos": 32, "l0": 256, "l1": 256, "head": 64})
    vec, _ = D.layout({"ln": 16, "bias": 16})
    order = ["head", "ln", "l1", "bias", "l0", "tok", "pos"]
    buckets = D.plan_buckets([(spans, 4), (vec, 2)], order, 1 << 20, None)
    assert [(b.buffer, b.names) for b in buckets] == [
        (1, ("ln", "bias")), (0, ("head", "l1", "l0")), (0, ("tok", "pos"))]


def test_first_bucket_limit():
    spans, _ = D.layout({f"p{i}": 64 for i in range(6)}, 1)
    order = [f"p{i}" for i in reversed(range(6))]
    buckets = D.plan_buckets([(spans, 4)], order, 1 << 20, 256)
    assert [len(b.names) for b in buckets] == [1, 5]


def test_plan_buckets_refuses_bad_input():
    spans = {"a": (0, 4), "b": (4, 8)}
    with pytest.raises(ValueError, match="misses"):
        D.plan_buckets([(spans, 4)], ["a"])
    with pytest.raises(ValueError, match="twice"):
        D.plan_buckets([(spans, 4)], ["a", "b", "a"])
    with pytest.raises(ValueError, match="in no buffer"):
        D.plan_buckets([(spans, 4)], ["a", "b", "c"])
    with pytest.raises(ValueError, match="overlaps"):
        D.plan_buckets([({"a": (0, 5), "b": (4, 8)}, 4)], ["a", "b"])
    with pytest.raises(ValueError, match="buffers 0 and 1"):
        D.plan_buckets([(spans, 4), ({"a": (0, 2)}, 4)], ["a", "b"])
    with pytest.raises(ValueError, match="bucket_bytes"):
        D.plan_buckets([(spans, 4)], ["a", "b"], 0)
    with pytest.raises(ValueError, match="first_bucket_bytes"):
        D.plan_buckets([(spans, 4)], ["a", "b"], 8, 0)
    with pytest.raises(ValueError, match="bad span"):
        D.plan_buckets([({"a": (3, 1)}, 4)], ["a"])


# -- ranks, checks and the launcher ------------------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(world=st.integers(1, 4), per=st.integers(1, 5), axis=st.integers(0, 1))
def test_rank_shards_partition_the_batch(world, per, axis):
    rng = np.random.default_rng(world * 100 + per)
    shape = [3, 3]
    shape[axis] = world * per
    x = rng.standard_normal(shape)
    parts = [D.Rank(r, world, None, None).shard(x, axis) for r in range(world)]
    assert all(p.flags.c_contiguous for p in parts)
    np.testing.assert_array_equal(np.concatenate(parts, axis=axis), x)
    if world > 1:
        bad = np.zeros([world * per + 1 if a == axis else 3 for a in range(2)])
        with pytest.raises(ValueError, match="does not split"):
            D.Rank(0, world, None, None).shard(bad, axis)


def test_max_rel_diff_names_the_worst_array():
    rng = np.random.default_rng(7)
    want = {"a": rng.standard_normal(5), "b": rng.standard_normal(5)}
    got = {"a": want["a"] * (1 + 1e-6), "b": want["b"] * (1 + 1e-3)}
    worst, name = D.max_rel_diff(got, want)
    assert name == "b" and worst == pytest.approx(1e-3, rel=1e-6)
    assert D.max_rel_diff(want, want) == (0.0, "a")


def test_launch_refuses_bad_worlds():
    with pytest.raises(ValueError, match="positive"):
        D.launch(print, 0)
    # more ranks than visible GPUs (none at all on the CPU tier)
    import cudalibs

    with pytest.raises(ValueError, match="visible"):
        D.launch(print, cudalibs.device_count() + 1)


def test_spawned_entry_must_be_a_module_function():
    with pytest.raises(TypeError, match="module-level"):
        D._entry_ref(lambda ctx: None)

    def local(ctx):
        return None
    with pytest.raises(TypeError, match="module-level"):
        D._entry_ref(local)
    path, name = D._entry_ref(D.train)
    assert name == "train" and path.endswith("_dp.py")


# -- the spawned processes' bootstrap (NCCL's unique id needs no GPU) --------------------------
def _uid_body(rank, world, uid):
    return rank, world, bytes(uid)


def _fail_on_rank_1(rank, world, uid):
    if rank == 1:
        raise KeyError("rank 1 fails")
    time.sleep(600)         # waits like a rank in a collective whose peer is gone


def test_spawned_ranks_get_rank_0s_unique_id():
    out = D.spawn_ranks(_uid_body, 3, timeout=120)
    assert [(r, w) for r, w, _ in out] == [(0, 3), (1, 3), (2, 3)]
    assert len({u for _, _, u in out}) == 1 and len(out[0][2]) == 128


def test_a_failing_rank_ends_the_job(monkeypatch):
    monkeypatch.setattr(D, "GRACE", 1.0)
    start = time.monotonic()
    with pytest.raises(D.RankError, match="rank 1 fails") as info:
        D.spawn_ranks(_fail_on_rank_1, 3, timeout=120)
    assert "rank 0: killed" in str(info.value) and "rank 2: killed" in str(info.value)
    assert time.monotonic() - start < 60
