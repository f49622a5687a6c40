"""The weight gradient of the device-offsets grouped GEMM (``kernels.grouped_mm_wgrad`` /
``GroupedMMWgrad``, and ``grouped_mm_backward``) against float64 numpy per group.

``dw[g] = x[o[g]:o[g+1]]^T @ dy[o[g]:o[g+1]]``, the reduction over the rows of each group read
from device memory.  Hypothesis draws skewed counts, empty groups and all rows in one group,
int32/int64 offsets in both forms, both output types and layouts, padded rows, accumulation,
and two kinds of data: small integers, whose sums every order of addition gives exactly (so
the kernel's result must equal the reference bit for bit once rounded to the output type: a
row dropped or counted twice cannot hide), and random values held to a bound derived from the
float32 accumulation.  Outputs are poisoned (NaN) first, an accumulating one holds random
values and negative zeros that an empty group must leave bit for bit.  Also: both tile
heights bitwise equal and autotune, host offsets, wild device offsets that must never write
outside ``dw``, torch as a second oracle (per-group ``torch.matmul`` and the backward of
``torch._grouped_mm``), a graph captured once and replayed with three count vectors, threads
sharing the plans bitwise.  On a GPU of compute capability 9.0 the plans' first candidates,
which the one-shots run, are the Hopper kernels (``ptx/grouped90.cu``); test_grouped90.py runs
every one of their tiles.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import kernels
from cudalibs import testing as T
from cudalibs.runtime.cache import cache as plan_cache

from .._sizes import bound, gpu_settings
from .._threads import match_serial
from ..cublas._util import poisoned
from ..cublas.test_grouped import _clamped, _offsets

GPU = gpu_settings(25)
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
#: The unit roundoff of each output type.
U = {BF16: 2.0 ** -8, F16: 2.0 ** -11, F32: 2.0 ** -24}


def _ref(x, dy, spans):
    """``dw[g] = x_g^T @ dy_g`` in float64 (zeros for an empty group), and ``|x_g|^T @ |dy_g|``,
    the size of each element's terms."""
    xf, df = x.astype(F64), dy.astype(F64)
    want = np.stack([xf[lo:hi].T @ df[lo:hi] for lo, hi in spans])
    scale = np.stack([np.abs(xf[lo:hi]).T @ np.abs(df[lo:hi]) for lo, hi in spans])
    return want, scale


def _integers(shape, dtype, rng):
    """Integers in ±[1, 3]: their products and sums (below 2**24 in magnitude) are exact in
    float32 whatever the order of the additions."""
    return rng.choice(np.array([-3, -2, -1, 1, 2, 3]), size=shape).astype(dtype)


def _integer_data(rows, k, n, rng, stream=None):
    """``(x, dy, x on the device, dy on the device)``: bfloat16 small integers (rows, K) and
    (rows, N)."""
    x, dy = _integers((rows, k), BF16, rng), _integers((rows, n), BF16, rng)
    return x, dy, cl.to_device(x, stream=stream), cl.to_device(dy, stream=stream)


def _dw(groups, k, n, dtype, layout, init=None, stream=None, pad=0):
    """``(view, base)``: dw (G, K, N) on the device, N contiguous ("kn") or the transposed view
    of a (G, N, K) array ("nk"), the rows of ``base`` padded by ``pad`` elements; poisoned, or
    holding ``init`` (the padding poisoned)."""
    inner, outer = (n, k) if layout == "kn" else (k, n)
    full = np.full((groups, outer, inner + pad), T.poison_value(dtype), dtype)
    if init is not None:
        full[:, :, :inner] = init if layout == "kn" else init.transpose(0, 2, 1)
    base = cl.to_device(full, stream=stream)
    view = base[:, :, :inner] if pad else base
    return (view if layout == "kn" else view.transpose(0, 2, 1)), base


def _host(base, layout, stream=None, pad=0):
    """dw (G, K, N) on the host from ``base``; the padding of its rows must still be poison."""
    full = base.get(stream=stream)
    inner = full.shape[2] - pad
    assert np.isnan(full[:, :, inner:].astype(F64)).all(), "the padding of dw's rows was written"
    got = full[:, :, :inner]
    return got if layout == "kn" else got.transpose(0, 2, 1)


def _bits(a):
    """The bytes of ``a`` (any layout), to compare bit for bit."""
    return np.ascontiguousarray(a).view(np.uint8)


def _rows(a, padded, stream=None):
    """``a`` on the device, C-contiguous or with rows padded by 8 elements."""
    if not padded:
        return cl.to_device(a, stream=stream)
    big = np.zeros((a.shape[0], a.shape[1] + 8), a.dtype)
    big[:, :a.shape[1]] = a
    return cl.to_device(big, stream=stream)[:, :a.shape[1]]


def _check_dw(got, x, dy, spans, init, in_dtype, exact, msg=""):
    """``got`` (G, K, N, host) against the float64 reference: bit for bit (after the one
    rounding to the output type) on integer data, else within the bound of float32
    accumulation; with ``init`` (accumulate) added to it, and an empty group's ``init`` left
    bit for bit."""
    odt = got.dtype
    want, scale = _ref(x, dy, spans)
    if init is not None:
        want = want + init.astype(F64)
    for g, (lo, hi) in enumerate(spans):
        where = f"{msg} group {g} rows {lo}:{hi}"
        if init is not None and hi <= lo:
            np.testing.assert_array_equal(_bits(got[g]), _bits(init[g]),
                                          err_msg=f"{where}: an empty group changed out")
            continue
        if not got[g].size:
            continue
        if exact:
            np.testing.assert_array_equal(got[g].astype(F64), want[g].astype(odt).astype(F64),
                                          err_msg=where)
        else:
            # float32 accumulation of hi - lo exact products: at most (rows + 16) units of
            # 2**-21 of the terms' sum (tensor cores truncate, hence twice float32's unit
            # roundoff, and a margin of 16 for the order within one product), then the one
            # rounding (and the one addition of accumulate) to the output type.
            size = np.abs(want[g]) + (0 if init is None else np.abs(init[g].astype(F64)))
            err = (hi - lo + 16) * 2.0 ** -21 * scale[g] + 2 * U[odt] * size
            T.assert_within(got[g], want[g], err, msg=where)


def _counts(data, groups, big, label):
    """A count per group: skewed (edges of the tiles among them), all in one group, or none."""
    kind = data.draw(st.sampled_from(["skewed", "one group", "none"]), label=f"{label} kind")
    if kind == "none":
        return [0] * groups
    if kind == "one group":
        hit = data.draw(st.integers(0, groups - 1), label=f"{label} group")
        return [data.draw(st.integers(1, 4 * big), label=f"{label} rows") if g == hit else 0
                for g in range(groups)]
    count = st.one_of(st.sampled_from([0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 129]),
                      st.integers(0, big))
    return data.draw(st.lists(count, min_size=groups, max_size=groups), label=label)


def _draw_types(data):
    """``(input dtype, output dtype, dw layout)``: bfloat16 or float16 in, float32 or the
    input type out, N contiguous ("kn") or the transposed view of a (G, N, K) array ("nk")."""
    dtype = data.draw(st.sampled_from([BF16, F16]), label="dtype")
    out_dtype = data.draw(st.sampled_from([F32, dtype]), label="out dtype")
    layout = data.draw(st.sampled_from(["kn", "nk"]), label="dw layout")
    return dtype, out_dtype, layout


@GPU
@given(data=st.data())
def test_grouped_mm_wgrad_matches_numpy(device, data):
    dtype, out_dtype, layout = _draw_types(data)
    groups = data.draw(st.integers(1, bound(6, 12)), label="groups")
    k = 8 * data.draw(st.integers(0, bound(24, 64)), label="k / 8")
    n = 8 * data.draw(st.integers(1, bound(24, 96)), label="n / 8")
    big = bound(150, 600)
    slack = data.draw(st.integers(0, 40), label="rows no group covers")
    offs_dtype = data.draw(st.sampled_from([np.int32, np.int64]), label="offsets dtype")
    cumulative = data.draw(st.booleans(), label="G + 1 offsets")
    padded = data.draw(st.booleans(), label="rows padded")
    accumulate = data.draw(st.booleans(), label="accumulate")
    exact = data.draw(st.booleans(), label="integer data")
    # Three calls of the one plan, each with its own group sizes; the capacity fits all.
    draws = [_counts(data, groups, big, f"counts {c}") for c in range(3)]
    rows = max(int(sum(c)) for c in draws) + slack
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31), label="seed"))
    make = ((lambda shape, dt: _integers(shape, dt, rng)) if exact
            else (lambda shape, dt: T.random_array(shape, dt, rng=rng)))
    x, dy = make((rows, k), dtype), make((rows, n), dtype)
    dx, ddy = _rows(x, padded), _rows(dy, padded)
    before = len(plan_cache.entries(kernels.GROUPED_MM_WGRAD_KEY.name))
    for c, counts in enumerate(draws):
        offs = _offsets(counts, offs_dtype, cumulative)
        init = None
        if accumulate:
            init = make((groups, k, n), out_dtype)
            init.reshape(-1)[::7] = -0.0            # an empty group must keep their sign
        out, base = _dw(groups, k, n, out_dtype, layout, init)
        res = kernels.grouped_mm_wgrad(dx, ddy, cl.to_device(offs), out, accumulate=accumulate)
        assert res is out
        _check_dw(_host(base, layout), x, dy, _clamped(offs, groups, rows), init, dtype, exact,
                  msg=f"call {c} {dtype.name}->{out_dtype.name} {layout} k={k} n={n} "
                      f"counts={counts} accumulate={accumulate}")
    # One plan served the three calls.
    assert len(plan_cache.entries(kernels.GROUPED_MM_WGRAD_KEY.name)) <= before + 1
    # A new output: float32 by default, every element written (empty groups: zeros).
    offs = _offsets(draws[0], offs_dtype, cumulative)
    new = kernels.grouped_mm_wgrad(dx, ddy, cl.to_device(offs), groups=groups)
    assert new.shape == (groups, k, n) and new.dtype == F32
    _check_dw(new.get(), x, dy, _clamped(offs, groups, rows), None, dtype, exact, msg="new out")


@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_grouped_mm_wgrad_tiles_agree_and_autotune(device, rng, layout):
    """Both sm_80 tile heights add every element's terms in the same order: bitwise equal;
    every candidate (on compute capability 9.0 the Hopper tiles first: test_grouped90.py) is
    right; autotune times them all and keeps one."""
    groups, k, n = 5, 200, 264
    counts = [0, 300, 1, 129, 64]
    rows = sum(counts) + 11
    x = T.random_array((rows, k), BF16, rng=rng)
    dy = T.random_array((rows, n), BF16, rng=rng)
    dx, ddy = cl.to_device(x), cl.to_device(dy)
    offs = cl.to_device(_offsets(counts, np.int64, True))
    out, base = _dw(groups, k, n, F32, layout)
    spans = _clamped(offs.get(), groups, rows)
    with kernels.GroupedMMWgrad(dx, ddy, offs, out) as plan:
        assert "not planned" in repr(plan)
        plan.plan()
        names = [c["id"] for c in plan.candidates]
        sm80 = [i for i, name in enumerate(names) if name in ("m128", "m64")]
        assert len(sm80) == 2 and sm80 == [len(names) - 2, len(names) - 1], names
        results = []
        for i in range(len(names)):
            plan.select(i)
            base.fill(T.poison_value(F32))
            for _ in range(3):
                assert plan.execute(dx, ddy, offs, out) is out
            results.append(_host(base, layout))
            _check_dw(results[i], x, dy, spans, None, BF16, False, msg=names[i])
        np.testing.assert_array_equal(_bits(results[sm80[0]]), _bits(results[sm80[1]]))
        cands = plan.autotune(rounds=2, store=False)
        assert plan.tuned and all(c["ms"] > 0 for c in cands), cands
        assert "tiles" in repr(plan) and "autotuned" in repr(plan)
        base.fill(T.poison_value(F32))
        plan.execute(dx, ddy, offs, out)
        np.testing.assert_array_equal(_bits(_host(base, layout)),
                                      _bits(results[plan.choice]))
    assert plan.closed
    with pytest.raises(cl.ClosedError):
        plan.execute(dx, ddy, offs, out)


def test_grouped_mm_wgrad_host_offsets(device, rng):
    """Offsets given on the host are checked and copied: the same result as device ones."""
    groups, k, n, counts = 3, 16, 24, [5, 0, 9]
    x = _integers((20, k), F16, rng)
    dy = _integers((20, n), F16, rng)
    dx, ddy = cl.to_device(x), cl.to_device(dy)
    for offs in (list(_offsets(counts, np.int64, True)), _offsets(counts, np.int32, False)):
        out = poisoned((groups, k, n), F16)
        kernels.grouped_mm_wgrad(dx, ddy, offs, out)
        _check_dw(out.get(), x, dy, _clamped(offs, groups, 20), None, F16, True)
    # G end offsets by default, G + 1 cumulative ones with groups=
    assert kernels.grouped_mm_wgrad(dx, ddy, [5, 5, 14]).shape == (3, k, n)
    got = kernels.grouped_mm_wgrad(dx, ddy, [0, 5, 5, 14], groups=3).get()
    _check_dw(got, x, dy, _clamped([0, 5, 5, 14], groups, 20), None, F16, True)
    with pytest.raises(ValueError, match="beyond the capacity"):
        kernels.grouped_mm_wgrad(dx, ddy, [0, 5, 10, 21], groups=3)
    with pytest.raises(ValueError, match="decrease"):
        kernels.grouped_mm_wgrad(dx, ddy, [0, 5, 4, 9], groups=3)


def test_wild_device_offsets_never_write_outside_dw(device, rng):
    """Device offsets are not checked: the kernel clamps them, so whatever they hold, nothing
    outside dw is written and the groups are the forward's."""
    groups, k, n, rows, guard = 4, 32, 16, 100, 64
    x, dy, dx, ddy = _integer_data(rows, k, n, rng)
    size = groups * k * n
    flat = poisoned((size + 2 * guard,), F32)
    out = flat[guard:guard + size].reshape(groups, k, n)
    init = _integers((groups, k, n), F32, rng)
    cases = ([-50, 60, 30, 1000, 80], [0, 10**6, 5, 7, 9], [90, 10, 20, 30, 40],
             [2**31 - 1, -2**31, 2**31 - 1, 0, 5], [30, 20, 10, 0])
    for offsets in cases:
        for dt in (np.int32, np.int64):
            for accumulate in (False, True):
                if accumulate:
                    out.copy_(init)
                else:
                    out.fill(T.poison_value(F32))
                kernels.grouped_mm_wgrad(dx, ddy, cl.to_device(np.array(offsets, dt)), out,
                                         groups=groups, accumulate=accumulate)
                host = flat.get()
                assert np.isnan(host[:guard]).all() and np.isnan(host[guard + size:]).all(), \
                    (offsets, dt, accumulate)
                _check_dw(host[guard:guard + size].reshape(groups, k, n), x, dy,
                          _clamped(offsets, groups, rows), init if accumulate else None, BF16,
                          True, msg=f"offsets {offsets} {dt.__name__} accumulate={accumulate}")


def _torch_data(torch, rng, groups, k, n, counts, slack):
    rows = sum(counts) + slack
    gen = torch.Generator(device="cuda").manual_seed(int(rng.integers(2**31)))
    tx = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    tdy = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    ends = np.cumsum(counts)
    return tx, tdy, torch.tensor(ends, device="cuda", dtype=torch.int32), ends, gen


def test_grouped_mm_wgrad_against_torch_matmul(device, rng):
    """A torch.matmul per group (float32) as a second oracle, on torch tensors and torch's
    stream, into a float32 and a bfloat16 dw."""
    torch = pytest.importorskip("torch")
    groups, k, n, counts = 6, 256, 384, [700, 0, 33, 1, 250, 40]
    tx, tdy, toffs, ends, _ = _torch_data(torch, rng, groups, k, n, counts, 17)
    starts = np.concatenate([[0], ends[:-1]])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        want = torch.stack([tx[lo:hi].float().T @ tdy[lo:hi].float()
                            for lo, hi in zip(starts, ends)])
        for odt in (torch.float32, torch.bfloat16):
            tout = torch.full((groups, k, n), float("nan"), device="cuda", dtype=odt)
            kernels.grouped_mm_wgrad(tx, tdy, toffs, tout, stream=side)
            T.assert_close(tout.float().cpu().numpy(), want.cpu().numpy(), BF16,
                           msg=f"against torch.matmul per group, dw {odt}")
    side.synchronize()
    _check_dw(tout.float().cpu().numpy().astype(BF16), tx.float().cpu().numpy(),
              tdy.float().cpu().numpy(), list(zip(starts, ends)), None, BF16, False)


def test_grouped_mm_wgrad_against_torch_grouped_mm_backward(device, rng):
    """The backward of torch._grouped_mm with respect to w, where torch has it."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip(f"torch {torch.__version__} has no _grouped_mm")
    groups, k, n, counts = 5, 128, 256, [300, 0, 64, 1, 150]
    tx, tdy, toffs, ends, gen = _torch_data(torch, rng, groups, k, n, counts, 0)
    tw = torch.randn(groups, k, n, device="cuda", dtype=torch.bfloat16, generator=gen,
                     requires_grad=True)
    torch._grouped_mm(tx, tw, toffs).backward(tdy)
    torch.cuda.synchronize()
    ours = kernels.grouped_mm_wgrad(tx, tdy, toffs, out_dtype=BF16)
    T.assert_close(ours.get().astype(F64), tw.grad.float().cpu().numpy(), BF16,
                   msg="against torch._grouped_mm's backward")


def test_capture_once_replay_with_three_count_vectors(device, rng):
    """A backward captured once serves every token distribution: the counts are written into
    the device offsets between replays; each replay writes the new groups' dw (and adds them
    to an accumulated one)."""
    groups, k, n, rows = 5, 96, 136, 400
    s = cl.Stream()
    x, dy, dx, ddy = _integer_data(rows, k, n, rng, stream=s)
    offs = cl.to_device(_offsets([80] * groups, np.int32, True), stream=s)
    out = poisoned((groups, k, n), F32, stream=s)
    init = _integers((groups, k, n), F32, rng)
    acc, acc_base = _dw(groups, k, n, F32, "nk", init, stream=s)

    def step():
        kernels.grouped_mm_wgrad(dx, ddy, offs, out, stream=s)
        kernels.grouped_mm_wgrad(dx, ddy, offs, acc, accumulate=True, stream=s)

    step()          # plans and loads, outside the capture
    s.sync()
    with cl.graph.capture(s) as g:
        step()
    exe = g.instantiate()
    for counts in ([0, 400, 0, 0, 0], [100, 0, 37, 200, 63], [1, 2, 3, 4, 5]):
        host = _offsets(counts, np.int32, True)
        offs.copy_(host, s)
        out.fill(T.poison_value(F32), stream=s)
        acc_base.copy_(np.ascontiguousarray(init.transpose(0, 2, 1)), s)
        exe.replay(s)
        spans = _clamped(host, groups, rows)
        _check_dw(out.get(stream=s), x, dy, spans, None, BF16, True,
                  msg=f"replay with counts {counts}")
        _check_dw(_host(acc_base, "nk", stream=s), x, dy, spans, init, BF16, True,
                  msg=f"accumulating replay with counts {counts}")
    exe.close()
    g.close()


def test_threads_share_the_wgrad_plans(device, rng):
    """Eight threads, each on its own stream, through the cached plans and a held one: every
    result bitwise what the calls give one after another."""
    groups, k, n, rows = 4, 64, 136, 256
    counts = [[10, 0, 200, 46], [64, 64, 64, 64], [0, 0, 0, 256], [255, 1, 0, 0]]
    x = cl.to_device(T.random_array((rows, k), BF16, rng=rng))
    dy = cl.to_device(T.random_array((rows, n), BF16, rng=rng))
    offs = [cl.to_device(_offsets(c, np.int32, False)) for c in counts]
    held = kernels.GroupedMMWgrad(x, dy, offs[0], out_dtype=BF16)
    calls = [(lambda s, o=o: kernels.grouped_mm_wgrad(x, dy, o, stream=s)) for o in offs] + \
        [(lambda s, o=o: held.execute(x, dy, o, stream=s)) for o in offs]
    serial = match_serial(device, calls, repeats=6)
    hx, hdy = x.get(), dy.get()
    for i, o in enumerate(offs):
        spans = _clamped(o.get(), groups, rows)
        _check_dw(serial[i][0][1], hx, hdy, spans, None, BF16, False)
        _check_dw(serial[len(offs) + i][0][1], hx, hdy, spans, None, BF16, False)
    held.close()


@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_grouped_mm_backward_matches_numpy(device, rng, layout):
    """dx = dy @ w[g]^T on each group's rows (zeros on rows no group covers) and dw."""
    groups, k, n, counts = 4, 72, 40, [30, 0, 129, 7]
    rows = sum(counts) + 13
    x = _integers((rows, k), BF16, rng)
    w = _integers((groups, k, n), BF16, rng)
    dy = _integers((rows, n), BF16, rng)
    dw = (cl.to_device(w) if layout == "kn" else
          cl.to_device(np.ascontiguousarray(w.transpose(0, 2, 1))).transpose(0, 2, 1))
    offs = _offsets(counts, np.int64, True)
    for o in (cl.to_device(offs), list(offs)):
        gx, gw = kernels.grouped_mm_backward(cl.to_device(x), dw, cl.to_device(dy), o)
        assert gx.shape == (rows, k) and gx.dtype == BF16 and gw.dtype == F32
        spans = _clamped(offs, groups, rows)
        want = np.zeros((rows, k))
        for g, (lo, hi) in enumerate(spans):
            want[lo:hi] = dy[lo:hi].astype(F64) @ w[g].astype(F64).T
        np.testing.assert_array_equal(gx.get().astype(F64), want.astype(BF16).astype(F64))
        _check_dw(gw.get(), x, dy, spans, None, BF16, True)
