"""The Hopper grouped GEMM (``ptx/grouped90.cu``: TMA and wgmma, target sm_90a) through the
candidates of ``kernels.GroupedMM``, against float64 numpy per group.

On a GPU of compute capability 9.0 a GroupedMM plan offers the Hopper tiles first, then the
sm_80 kernel's; every test here runs every candidate it names and is skipped on other GPUs
(the kernels run on 9.0 only, and the plan offers them nowhere else; tests/gpu/cublas/
test_grouped.py covers the plan there).  Hypothesis draws skewed counts with empty groups,
more than 32 groups (the kernel's prefix sum runs over warps of 32), K and N no multiple of
any tile (TMA fills the boxes past the ends with zeros), int32/int64 offsets in both forms,
both layouts of w and both output types, x and out with padded rows (the padding must stay
as it was), rows no group covers (they must stay poisoned); each example runs every candidate
of one plan into a poisoned output.  Also: large groups with a deep K, one w for every group
(a zero group stride), a graph captured once per Hopper tile and replayed with new counts and
wild offsets written into the device offsets, and threads sharing a held plan and the
one-shot's bitwise.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import kernels
from cudalibs import testing as T
from cudalibs.kernels import grouped90

from .._sizes import bound, gpu_settings
from .._threads import match_serial
from ..cublas._util import poisoned
from ..cublas.test_grouped import _check_grouped, _clamped, _offsets, _rows, _weights

GPU = gpu_settings(25)
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
SM80 = ("m128", "m64")


@pytest.fixture()
def hopper(device):
    cc = tuple(device.compute_capability)
    if cc != grouped90.ARCH:
        pytest.skip(f"the Hopper kernels run on compute capability 9.0 only; device 0 has "
                    f"{cc[0]}.{cc[1]}")
    return device


def _ids(plan):
    return [c["id"] for c in plan.plan().candidates]


def _every_candidate(plan, x, w, offs, out_full, n, run=None):
    """``{candidate id: host copy of out_full}`` after each candidate ran into a poisoned
    ``out_full`` (``out`` is its first ``n`` columns)."""
    out = out_full[:, :n]
    got = {}
    for i, cid in enumerate(_ids(plan)):
        plan.select(i)
        out_full.fill(T.poison_value(out_full.dtype))
        assert (run or plan.execute)(x, w, offs, out) is out
        got[cid] = out_full.get()
    return got


def _check_all(got, x, w, spans, in_dtype, n, msg=""):
    for cid, full in got.items():
        where = f"{msg} candidate {cid}"
        assert np.isnan(full[:, n:].astype(np.float64)).all(), \
            f"{where}: the padding of out's rows was written"
        _check_grouped(full[:, :n], x, w, spans, in_dtype, msg=where)


@GPU
@given(data=st.data())
def test_every_candidate_matches_numpy(hopper, data):
    dtype = data.draw(st.sampled_from([BF16, F16]), label="dtype")
    out_dtype = data.draw(st.sampled_from([dtype, F32]), label="out dtype")
    layout = data.draw(st.sampled_from(["kn", "nk"]), label="w layout")
    groups = data.draw(st.one_of(st.integers(1, 6), st.sampled_from([31, 33, 40])),
                       label="groups")
    k = 8 * data.draw(st.integers(1, bound(32, 160)), label="k / 8")
    n = 8 * data.draw(st.integers(1, bound(40, 100)), label="n / 8")
    big = bound(200, 900) if groups <= 6 else 60
    count = st.one_of(st.sampled_from([0, 1, 63, 64, 65, 127, 128, 129, 255, 257]),
                      st.integers(0, big))
    counts = data.draw(st.lists(count, min_size=groups, max_size=groups), label="counts")
    slack = data.draw(st.integers(0, 40), label="rows no group covers")
    offs_dtype = data.draw(st.sampled_from([np.int32, np.int64]), label="offsets dtype")
    cumulative = data.draw(st.booleans(), label="G + 1 offsets")
    padded = data.draw(st.booleans(), label="x and out rows padded")
    rows = max(1, int(sum(counts)) + slack)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31), label="seed"))
    x = T.random_array((rows, k), dtype, rng=rng)
    w = T.random_array((groups, k, n), dtype, rng=rng)
    dx, dw = _rows(x, padded), _weights(w, layout)
    offs = _offsets(counts, offs_dtype, cumulative)
    doffs = cl.to_device(offs)
    pad = 8 if padded else 0
    out_full = poisoned((rows, n + pad), out_dtype)
    with kernels.GroupedMM(dx, dw, doffs, out_full[:, :n]) as plan:
        ids = _ids(plan)
        assert ids[:4] == list(grouped90.ORDER) and sorted(ids[4:]) == sorted(SM80), ids
        got = _every_candidate(plan, dx, dw, doffs, out_full, n)
    _check_all(got, x, w, _clamped(offs, groups, rows), dtype, n,
               msg=f"{dtype.name}->{out_dtype.name} {layout} k={k} n={n} counts={counts} "
                   f"padded={padded}")


@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("out_dtype", [BF16, F32], ids=["bf16", "f32"])
def test_large_groups_and_a_deep_k(hopper, rng, layout, out_dtype):
    """Groups of hundreds of rows, K = 1000 (15 full stages and a partial one), N = 520 (two
    256-column tiles and a partial one), every candidate; then autotune keeps one of them."""
    groups, k, n, counts = 4, 1000, 520, [300, 700, 0, 129]
    rows = sum(counts) + 19
    x = T.random_array((rows, k), BF16, rng=rng)
    w = T.random_array((groups, k, n), BF16, rng=rng)
    dx, dw = cl.to_device(x), _weights(w, layout)
    offs = _offsets(counts, np.int64, True)
    doffs = cl.to_device(offs)
    out_full = poisoned((rows, n), out_dtype)
    spans = _clamped(offs, groups, rows)
    with kernels.GroupedMM(dx, dw, doffs, out_full) as plan:
        got = _every_candidate(plan, dx, dw, doffs, out_full, n)
        _check_all(got, x, w, spans, BF16, n, msg=f"{layout} -> {out_dtype.name}")
        assert set(got) == set(grouped90.ORDER) | set(SM80)
        cands = plan.autotune(rounds=2, store=False)
        assert plan.tuned and all(c["ms"] > 0 for c in cands), cands
        out_full.fill(T.poison_value(out_dtype))
        plan.execute(dx, dw, doffs, out_full)
        _check_grouped(out_full.get(), x, w, spans, BF16,
                       msg=f"autotuned: {cands[plan.choice]['id']}")


def test_one_w_for_every_group(hopper, rng):
    """w broadcast over the groups (a zero group stride): a map of one group, read by all."""
    groups, k, n, counts = 5, 192, 264, [50, 0, 130, 1, 77]
    rows = sum(counts) + 3
    x = T.random_array((rows, k), BF16, rng=rng)
    w1 = T.random_array((k, n), BF16, rng=rng)
    base = cl.to_device(w1)
    dw = cl.DeviceArray.from_buffer(base.base, (groups, k, n), BF16, strides=(0, 2 * n, 2))
    dx = cl.to_device(x)
    offs = _offsets(counts, np.int32, False)
    doffs = cl.to_device(offs)
    out_full = poisoned((rows, n), BF16)
    with kernels.GroupedMM(dx, dw, doffs, out_full) as plan:
        assert _ids(plan)[:4] == list(grouped90.ORDER)
        got = _every_candidate(plan, dx, dw, doffs, out_full, n)
    _check_all(got, x, np.broadcast_to(w1, (groups, k, n)), _clamped(offs, groups, rows), BF16,
               n, msg="zero group stride")


@pytest.mark.parametrize("tile", ["m128n256s", "m128n256", "m64n256s"])
def test_capture_once_replay_with_changing_counts(hopper, rng, tile):
    """A Hopper launch captured once replays with any counts written into the device offsets
    (the tensor maps travel by value in the graph's kernel node; the offsets are read when it
    runs), wild ones clamped as always; more than 32 groups, K and N no multiple of a tile."""
    groups, k, n, rows = 40, 136, 264, 1200
    s = cl.Stream()
    x = T.random_array((rows, k), BF16, rng=rng)
    w = T.random_array((groups, k, n), BF16, rng=rng)
    dx, dw = cl.to_device(x, stream=s), _weights(w, "nk", stream=s)
    offs = cl.to_device(_offsets([30] * groups, np.int32, True), stream=s)
    out = poisoned((rows, n), BF16, stream=s)
    plan = kernels.GroupedMM(dx, dw, offs, out)
    plan.select(_ids(plan).index(tile))
    # The first call loads the kernels and encodes the maps, outside the capture.
    plan.execute(dx, dw, offs, out, stream=s)
    s.sync()
    with cl.graph.capture(s) as g:
        plan.execute(dx, dw, offs, out, stream=s)
    exe = g.instantiate()
    skewed = [int(v) for v in rng.integers(0, 60, groups)]
    skewed[3] = skewed[17] = 0
    one = [0] * groups
    one[33] = rows
    vectors = [one, skewed, [0] * groups, [1] * groups, [rows // groups] * groups]
    for counts in vectors:
        host = _offsets(counts, np.int32, True)
        offs.copy_(host, s)
        out.fill(T.poison_value(BF16), stream=s)
        exe.replay(s)
        _check_grouped(out.get(stream=s), x, w, _clamped(host, groups, rows), BF16,
                       msg=f"{tile} replay with counts {counts}")
    # wild offsets: clamped to [0, rows], the ends made non-decreasing
    wild = np.array([5, 900, 100, 10**6, -7] + [1199] * 36, np.int32)
    offs.copy_(wild, s)
    out.fill(T.poison_value(BF16), stream=s)
    exe.replay(s)
    _check_grouped(out.get(stream=s), x, w, _clamped(wild, groups, rows), BF16,
                   msg=f"{tile} replay with wild offsets")
    exe.close()
    g.close()
    plan.close()


def test_threads_share_a_hopper_plan_and_the_one_shot(hopper, rng):
    """Eight threads, each on its own stream, executing a held plan on each of two Hopper
    tiles and the one-shot (whose heuristic picks the first Hopper tile), with two x arrays
    (maps encoded from several threads at once): every result bitwise the serial one."""
    groups, k, n, rows = 6, 200, 392, 512
    counts = [[10, 0, 300, 46, 100, 56], [85, 85, 85, 85, 86, 86], [0, 0, 0, 512, 0, 0],
              [511, 1, 0, 0, 0, 0]]
    xs = [T.random_array((rows, k), BF16, rng=rng) for _ in range(2)]
    w = T.random_array((groups, k, n), BF16, rng=rng)
    dxs = [cl.to_device(a) for a in xs]
    dw = _weights(w, "kn")
    offs = [cl.to_device(_offsets(c, np.int32, False)) for c in counts]
    plans = []
    for tile in ("m128n256s", "m128n128s"):
        p = kernels.GroupedMM(dxs[0], dw, offs[0])
        p.select(_ids(p).index(tile))
        plans.append(p)
    calls = [(lambda s, p=p, dx=dx, o=o: p.execute(dx, dw, o, stream=s))
             for p in plans for dx in dxs for o in offs]
    calls += [(lambda s, dx=dx, o=o: kernels.grouped_mm(dx, dw, o, stream=s))
              for dx in dxs for o in offs]
    serial = match_serial(hopper, calls, repeats=4)
    i = 0
    for _ in range(len(plans) + 1):
        for xi in range(2):
            for o in offs:
                _check_grouped(serial[i][0][1], xs[xi], w, _clamped(o.get(), groups, rows),
                               BF16, msg=f"call {i}")
                i += 1
    for p in plans:
        p.close()
