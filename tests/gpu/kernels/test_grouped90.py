"""The Hopper grouped GEMM and its weight gradient (``ptx/grouped90.cu``: TMA and wgmma,
target sm_90a) through the candidates of ``kernels.GroupedMM`` and ``kernels.GroupedMMWgrad``,
against float64 numpy per group.

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

The weight gradient (``dw[g] = x_g^T @ dy_g``, test_grouped_wgrad.py's helpers): hypothesis
runs every one of its six tiles (a float32 plan offers only the plain ones; its staged ones
are shipped kernels all the same, run through the plan's launch) on skewed counts with empty
groups, more than 32 groups and the most the kernels' table holds (256), NaN in the rows no
group covers (before the first group and after the last: a group's last step of 64 rows must
not let them in), both input types, both output types and layouts, padded rows of x, dy and
dw (the padding must stay as it was), accumulation (an empty group's dw bit for bit), exact
integer data and random data held to the float32 accumulation's bound.  Also: groups of
thousands of rows (the ring wraps many times), each tile twice bitwise and autotune; 257
groups, which only the sm_80 kernel runs; a graph captured once per tile and replayed with new
counts; threads sharing held Hopper plans and the one-shot bitwise.
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
from .test_grouped_wgrad import (_bits, _check_dw, _counts, _draw_types, _dw, _host,
                                 _integer_data, _integers)

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


def _shared_by_threads(device, plans, one_shot, dxs, b, offs):
    """Eight threads (``match_serial``) run each held plan, then the one-shot, on every x of
    ``dxs`` with every offsets of ``offs`` (``b``: w or dy): ``[(x index, offsets, host
    result)]`` of the serial runs, in that order, for checks against numpy."""
    runs = [p.execute for p in plans] + [one_shot]
    which = [(run, xi, o) for run in runs for xi in range(len(dxs)) for o in offs]
    calls = [(lambda s, run=run, dx=dxs[xi], o=o: run(dx, b, o, stream=s))
             for run, xi, o in which]
    serial = match_serial(device, calls, repeats=4)
    return [(xi, o, got[0][1]) for (_, xi, o), got in zip(which, serial)]


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
    results = _shared_by_threads(hopper, plans, kernels.grouped_mm, dxs, dw, offs)
    for i, (xi, o, got) in enumerate(results):
        _check_grouped(got, xs[xi], w, _clamped(o.get(), groups, rows), BF16, msg=f"call {i}")
    for p in plans:
        p.close()


# -- the weight gradient -------------------------------------------------------------------------
def _wgrad_order(out_dtype):
    """The Hopper tiles a weight-gradient plan offers for ``out_dtype``, best first."""
    return list(grouped90.WGRAD_ORDER if np.dtype(out_dtype).itemsize == 2
                else grouped90.WGRAD_ORDER_F32)


def _run_wgrad(plan, tile, x, dy, offs, out, stream, accumulate=False):
    """Run the Hopper weight-gradient ``tile`` of ``plan``: selected and executed where the
    plan offers it; a float32 plan's staged tiles (not offered: with a float32 output they are
    the plain tiles with a stage fewer) through the plan's launch, as the shipped kernels they
    are."""
    ids = _ids(plan)
    if tile in ids:
        plan.select(ids.index(tile))
        assert plan.execute(x, dy, offs, out, accumulate=accumulate, stream=stream) is out
    else:
        plan._launch(tile, x.address, dy.address, offs.address, out.address, stream,
                     accumulate)


def _nan_rows(a, spans):
    """``a`` with NaN in every row no group covers (their sums must not reach any dw)."""
    covered = np.zeros(a.shape[0], bool)
    for lo, hi in spans:
        covered[lo:hi] = True
    a = a.copy()
    a[~covered] = np.nan
    return a


@GPU
@given(data=st.data())
def test_every_wgrad_tile_matches_numpy(hopper, data):
    dtype, out_dtype, layout = _draw_types(data)
    groups = data.draw(st.one_of(st.integers(1, 6), st.sampled_from([31, 33, 40, 256])),
                       label="groups")
    few = groups <= 6
    k = 8 * data.draw(st.integers(1, bound(24, 64) if few else 10), label="k / 8")
    n = 8 * data.draw(st.integers(1, bound(36, 96) if few else 10), label="n / 8")
    counts = _counts(data, groups, bound(200, 700) if few else 40, "counts")
    offs_dtype = data.draw(st.sampled_from([np.int32, np.int64]), label="offsets dtype")
    cumulative = data.draw(st.booleans(), label="G + 1 offsets")
    lead = data.draw(st.integers(0, 70), label="rows before group 0") if cumulative else 0
    slack = data.draw(st.integers(0, 70), label="rows after the last group")
    padded = data.draw(st.booleans(), label="x and dy rows padded")
    pad = data.draw(st.sampled_from([0, 8]), label="dw rows padded by")
    accumulate = data.draw(st.booleans(), label="accumulate")
    exact = data.draw(st.booleans(), label="integer data")
    rows = max(1, lead + int(sum(counts)) + slack)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31), label="seed"))
    offs = _offsets(counts, offs_dtype, cumulative)
    if lead:
        offs = (offs + lead).astype(offs_dtype)
    spans = _clamped(offs, groups, rows)
    make = ((lambda shape, dt: _integers(shape, dt, rng)) if exact
            else (lambda shape, dt: T.random_array(shape, dt, rng=rng)))
    x = _nan_rows(make((rows, k), dtype), spans)
    dy = _nan_rows(make((rows, n), dtype), spans)
    init = None
    if accumulate:
        init = make((groups, k, n), out_dtype)
        init.reshape(-1)[::7] = -0.0            # an empty group must keep their sign
    s = cl.Stream()
    dx, ddy = _rows(x, padded, stream=s), _rows(dy, padded, stream=s)
    doffs = cl.to_device(offs, stream=s)
    out, _ = _dw(groups, k, n, out_dtype, layout, init, stream=s, pad=pad)
    what = (f"{dtype.name}->{out_dtype.name} {layout} k={k} n={n} counts={counts} lead={lead} "
            f"accumulate={accumulate} padded={padded}/{pad}")
    with kernels.GroupedMMWgrad(dx, ddy, doffs, out) as plan:
        order = _wgrad_order(out_dtype)
        ids = _ids(plan)
        assert ids[:len(order)] == order and sorted(ids[len(order):]) == sorted(SM80), ids
        for tile in grouped90.WGRAD_TILES:
            out, base = _dw(groups, k, n, out_dtype, layout, init, stream=s, pad=pad)
            _run_wgrad(plan, tile, dx, ddy, doffs, out, s, accumulate)
            _check_dw(_host(base, layout, stream=s, pad=pad), x, dy, spans, init, dtype, exact,
                      msg=f"{tile} {what}")
    s.close()


@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("out_dtype", [BF16, F32], ids=["bf16", "f32"])
def test_wgrad_large_groups_every_tile_twice_and_autotune(hopper, rng, layout, out_dtype):
    """Groups of up to 3000 rows (47 steps of 64: the ring of stages wraps many times), K =
    264 and N = 520 (partial tiles of every shape), NaN before the first group and after the
    last; every tile twice, bitwise the same; then autotune keeps one of the candidates."""
    groups, k, n, counts, lead, slack = 4, 264, 520, [700, 3000, 0, 129], 37, 91
    rows = lead + sum(counts) + slack
    offs = _offsets(counts, np.int64, True) + lead
    spans = _clamped(offs, groups, rows)
    x = _nan_rows(T.random_array((rows, k), BF16, rng=rng), spans)
    dy = _nan_rows(T.random_array((rows, n), BF16, rng=rng), spans)
    s = cl.Stream()
    dx, ddy, doffs = (cl.to_device(a, stream=s) for a in (x, dy, offs))
    out, base = _dw(groups, k, n, out_dtype, layout, stream=s)
    with kernels.GroupedMMWgrad(dx, ddy, doffs, out) as plan:
        for tile in grouped90.WGRAD_TILES:
            runs = []
            for _ in range(2):
                base.fill(T.poison_value(out_dtype), stream=s)
                _run_wgrad(plan, tile, dx, ddy, doffs, out, s)
                runs.append(_host(base, layout, stream=s))
            np.testing.assert_array_equal(_bits(runs[0]), _bits(runs[1]),
                                          err_msg=f"{tile}: a rerun differs")
            _check_dw(runs[0], x, dy, spans, None, BF16, False,
                      msg=f"{tile} {layout} -> {out_dtype.name}")
        cands = plan.autotune(rounds=2, store=False, stream=s)
        assert plan.tuned and all(c["ms"] > 0 for c in cands), cands
        base.fill(T.poison_value(out_dtype), stream=s)
        plan.execute(dx, ddy, doffs, out, stream=s)
        _check_dw(_host(base, layout, stream=s), x, dy, spans, None, BF16, False,
                  msg=f"autotuned: {cands[plan.choice]['id']}")
    s.close()


def test_wgrad_past_the_group_table_runs_the_sm80_kernel(hopper, rng):
    """256 groups fit the Hopper kernels' table in shared memory; a plan of 257 offers only
    the sm_80 tiles (the Hopper kernel would write nothing).  Both are right."""
    k, n = 64, 72
    for groups in (256, 257):
        counts = [int(c) for c in rng.integers(0, 9, groups)]
        counts[::5] = [0] * len(counts[::5])
        rows = sum(counts) + 5
        offs = _offsets(counts, np.int32, False)
        spans = _clamped(offs, groups, rows)
        x = _nan_rows(_integers((rows, k), BF16, rng), spans)
        dy = _nan_rows(_integers((rows, n), BF16, rng), spans)
        dx, ddy, doffs = cl.to_device(x), cl.to_device(dy), cl.to_device(offs)
        out, base = _dw(groups, k, n, F32, "kn")
        with kernels.GroupedMMWgrad(dx, ddy, doffs, out) as plan:
            ids = _ids(plan)
            if groups == 256:
                assert ids[:3] == _wgrad_order(F32), ids
            else:
                assert sorted(ids) == sorted(SM80) and "257 groups" in plan._hopper_why
            assert plan.execute(dx, ddy, doffs, out) is out
        _check_dw(_host(base, "kn"), x, dy, spans, None, BF16, True, msg=f"{groups} groups")


@pytest.mark.parametrize("tile", ["m128n256s", "m128n256", "m128n128s", "m64n256s"])
def test_wgrad_capture_once_replay_with_changing_counts(hopper, rng, tile):
    """A Hopper weight gradient captured once -- a 16-bit dw with padded rows on ``tile``, and
    an accumulating float32 one of the transposed layout (the main gradient's form) on the
    same tile's plain kernel -- replays with any counts written into the device offsets: each
    replay ranks the new groups and writes (adds) their dw, the maps travelling by value in
    the graph's kernel nodes; wild offsets clamped as always.  More than 32 groups, K and N
    no multiple of a tile."""
    groups, k, n, rows = 40, 136, 264, 1200
    s = cl.Stream()
    x, dy, dx, ddy = _integer_data(rows, k, n, rng, stream=s)
    offs = cl.to_device(_offsets([30] * groups, np.int32, True), stream=s)
    out, base = _dw(groups, k, n, BF16, "kn", stream=s, pad=8)
    init = _integers((groups, k, n), F32, rng)
    init.reshape(-1)[::7] = -0.0
    acc, acc_base = _dw(groups, k, n, F32, "nk", init, stream=s)
    plan = kernels.GroupedMMWgrad(dx, ddy, offs, out)
    plan.select(_ids(plan).index(tile))
    acc_plan = kernels.GroupedMMWgrad(dx, ddy, offs, acc)
    acc_plan.select(_ids(acc_plan).index(tile.rstrip("s")))

    def step():
        plan.execute(dx, ddy, offs, out, stream=s)
        acc_plan.execute(dx, ddy, offs, acc, accumulate=True, stream=s)

    step()          # loads the kernels and encodes the maps, outside the capture
    s.sync()
    with cl.graph.capture(s) as g:
        step()
    exe = g.instantiate()
    skewed = [int(v) for v in rng.integers(0, 60, groups)]
    skewed[3] = skewed[17] = 0
    one = [0] * groups
    one[33] = rows
    vectors = [_offsets(c, np.int32, True) for c in
               (one, skewed, [0] * groups, [1] * groups, [rows // groups] * groups)]
    # wild offsets: clamped to [0, rows], the ends made non-decreasing
    vectors.append(np.array([5, 900, 100, 10**6, -7] + [1199] * 36, np.int32))
    acc_init = np.ascontiguousarray(init.transpose(0, 2, 1))
    for host in vectors:
        offs.copy_(host, s)
        base.fill(T.poison_value(BF16), stream=s)
        acc_base.copy_(acc_init, s)
        exe.replay(s)
        spans = _clamped(host, groups, rows)
        _check_dw(_host(base, "kn", stream=s, pad=8), x, dy, spans, None, BF16, True,
                  msg=f"{tile} replay with offsets {list(host)}")
        _check_dw(_host(acc_base, "nk", stream=s), x, dy, spans, init, BF16, True,
                  msg=f"{tile.rstrip('s')} accumulating replay with offsets {list(host)}")
    exe.close()
    g.close()
    plan.close()
    acc_plan.close()
    s.close()


def test_threads_share_hopper_wgrad_plans_and_the_one_shot(hopper, rng):
    """Eight threads, each on its own stream, executing held plans on two Hopper tiles (16-bit
    dw) and the one-shot (float32 dw, its heuristic's first Hopper tile), with two x arrays
    (maps encoded from several threads at once): every result bitwise the serial one."""
    groups, k, n, rows = 6, 200, 392, 512
    counts = [[10, 0, 300, 46, 100, 56], [85, 85, 85, 85, 86, 86], [0, 0, 0, 512, 0, 0],
              [511, 1, 0, 0, 0, 0]]
    xs = [T.random_array((rows, k), BF16, rng=rng) for _ in range(2)]
    dy = T.random_array((rows, n), BF16, rng=rng)
    dxs = [cl.to_device(a) for a in xs]
    ddy = cl.to_device(dy)
    offs = [cl.to_device(_offsets(c, np.int32, False)) for c in counts]
    plans = []
    for tile in ("m128n256s", "m64n256s"):
        p = kernels.GroupedMMWgrad(dxs[0], ddy, offs[0], out_dtype=BF16)
        p.select(_ids(p).index(tile))
        plans.append(p)
    results = _shared_by_threads(hopper, plans, kernels.grouped_mm_wgrad, dxs, ddy, offs)
    for i, (xi, o, got) in enumerate(results):
        _check_dw(got, xs[xi], dy, _clamped(o.get(), groups, rows), None, BF16, False,
                  msg=f"call {i}")
    for p in plans:
        p.close()
