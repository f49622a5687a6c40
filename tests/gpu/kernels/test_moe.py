"""The mixture-of-experts routing kernels (ptx/moe.cu through cudalibs.kernels.moe) against the
float64 references of cudalibs.testing.ref._moe.

The choices and the routing are integers, compared exactly -- ties included (integer-valued
logits), and ids out of range (clamped).  The permutation is a copy, compared bit for bit.  The
weights, the sums and the gradients are float32 computations on inputs widened exactly, so
they get float32's tolerance against float64 whatever the input type (a result rounded to a
16-bit output, that type's), with sums whose terms cancel judged against the size of their
terms.  Random inputs have no zeros, outputs are poisoned before the kernels write them, each
shape is called three times, and the gathers run on aligned rows (eight elements a thread) and
misaligned ones (one at a time), which must agree bit for bit.  Then the routing at the size
of a layer (8192 tokens, 64 experts, top-2) and its time, experts with no tokens or all of
them, eight threads bitwise against a serial run, and a captured forward and backward step
replayed with other logits.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import kernels as K
from cudalibs import ptx as P
from cudalibs import testing as T
from cudalibs.runtime import ptxlib

from .._sizes import bound, gpu_settings
from .._threads import match_serial

GPU = gpu_settings(25)

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
BF16 = np.dtype(cl.dtypes.bfloat16)
I32, I64 = np.dtype(np.int32), np.dtype(np.int64)
WIDE = [F32, F16, BF16]
IDS = lambda d: np.dtype(d).name  # noqa: E731

tokens_st = st.one_of(st.sampled_from([1, 7, 8, 9, 33, 257]), st.integers(1, bound(200, 4000)))
experts_st = st.one_of(st.sampled_from([1, 2, 8, 31, 32, 33, 64, 128, 256]),
                       st.integers(1, bound(300, 1024)))
k_st = st.one_of(st.sampled_from([1, 2, 8, 32]), st.integers(1, 32))
cols_st = st.one_of(st.sampled_from([1, 7, 8, 64, 264, 2048]), st.integers(1, bound(300, 5000)))


# -- helpers -----------------------------------------------------------------------------------
def poisoned(shape, dtype):
    return cl.to_device(np.full(shape, T.poison_value(dtype), dtype=dtype))


def host(a) -> np.ndarray:
    return np.asarray(a.get() if hasattr(a, "get") else a)


def logits_for(shape, dtype, rng, ties):
    """Random logits; with ``ties``, small integers (exact in every type), so that many are
    equal."""
    if ties:
        return rng.integers(-3, 4, size=shape).astype(dtype)
    return (T.random_array(shape, F32, rng=rng) * 4).astype(dtype)


def rows_of(x, pad):
    """``x`` on the device, as a view of rows ``pad`` elements longer when ``pad``."""
    if not pad:
        return cl.to_device(x)
    wide = np.zeros((x.shape[0], x.shape[1] + pad), x.dtype)
    wide[:, :x.shape[1]] = x
    return cl.to_device(wide)[:, :x.shape[1]]


def shifted(a, shift):
    """``a`` on the device, ``shift`` elements past a 256-byte boundary (misaligned rows for
    the eight-at-a-time path when ``shift`` is odd)."""
    a = np.ascontiguousarray(a)
    flat = cl.to_device(np.concatenate([np.zeros(shift, a.dtype), a.reshape(-1)]))
    return flat[shift:].reshape(a.shape)


def poisoned_at(shape, dtype, shift):
    return shifted(np.full(shape, T.poison_value(dtype), dtype=dtype), shift)


def assert_routing(got, want, msg=""):
    for name, g, w in zip(("offsets", "order", "slots"), got, want):
        np.testing.assert_array_equal(host(g), w, err_msg=f"{msg}: {name}")


def grad_scale(x, ids, g, renormalize):
    """The size of the terms of each element of the top-k gradient (what its rounding errors
    are relative to)."""
    w, ids = T.ref.topk_softmax(x, None, renormalize, ids=ids)
    big = np.abs(w * g).sum(axis=1, keepdims=True)
    scale = np.zeros(x.shape)
    rows = np.repeat(np.arange(x.shape[0]), ids.shape[1]).reshape(ids.shape)
    np.add.at(scale, (rows, ids), w * (np.abs(g) + big) if renormalize else w * np.abs(g))
    if not renormalize:
        e = np.exp(x.astype(np.float64) - x.astype(np.float64).max(axis=1, keepdims=True))
        scale += e / e.sum(axis=1, keepdims=True) * big
    return scale


# -- loading -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", P.ENTRIES["moe"])
def test_entry_loads_and_takes_its_block(device, name):
    # the routing's scan runs 1024 threads in one block; every other kernel at most 256
    need = 1024 if name == "moe_route_scan" else 256
    assert ptxlib.kernel(device, name).max_threads_per_block >= need


# -- top-k softmax -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", WIDE, ids=IDS)
@GPU
@given(tokens=tokens_st, experts=experts_st, k=k_st, renormalize=st.booleans(),
       ties=st.booleans(), pad=st.sampled_from([0, 0, 5]), seed=st.integers(0, 2**31))
def test_topk_softmax(device, dtype, tokens, experts, k, renormalize, ties, pad, seed):
    rng = np.random.default_rng(seed)
    k = min(k, experts)
    x = logits_for((tokens, experts), dtype, rng, ties)
    dx = rows_of(x, pad)
    want_w, want_ids = T.ref.topk_softmax(x, k, renormalize)
    for _ in range(3):
        w, ids = poisoned((tokens, k), F32), poisoned((tokens, k), I32)
        got = K.topk_softmax(dx, k, renormalize=renormalize, weights=w, ids=ids)
        assert got[0] is w and got[1] is ids
        np.testing.assert_array_equal(host(ids), want_ids, err_msg="ids")
        T.assert_close(w, want_w, F32, msg="weights")
    # allocated outputs: the same bits
    w2, ids2 = K.topk_softmax(dx, k, renormalize=renormalize)
    assert w2.dtype == F32 and ids2.dtype == I32 and w2.shape == ids2.shape == (tokens, k)
    np.testing.assert_array_equal(host(w2).view(np.uint32), host(w).view(np.uint32))
    np.testing.assert_array_equal(host(ids2), want_ids)


def test_topk_softmax_ties_and_signed_zeros(device):
    x = np.array([[0.0, -0.0, 1.0, 1.0, -0.0, 1.0],
                  [-0.0, 0.0, 0.0, -0.0, 0.0, 0.0],
                  [2.0, 2.0, 2.0, 2.0, 2.0, 3.0]], np.float32)
    for dtype in WIDE:
        w, ids = K.topk_softmax(cl.to_device(x.astype(dtype)), 4, renormalize=False)
        np.testing.assert_array_equal(host(ids), [[2, 3, 5, 0], [0, 1, 2, 3], [5, 0, 1, 2]])
        T.assert_close(w, T.ref.topk_softmax(x, 4, False)[0], F32, msg=dtype.name)


def test_topk_softmax_nan_rows_keep_their_ids_in_range(device):
    x = np.float32([[1.0, np.nan, 3.0, -np.nan, 0.5], [1.0, 2.0, 3.0, 4.0, 5.0]])
    w, ids = K.topk_softmax(cl.to_device(x), 5)
    got = host(ids)
    assert sorted(got[0]) == [0, 1, 2, 3, 4] and np.isnan(host(w)[0]).all()
    np.testing.assert_array_equal(got[1], [4, 3, 2, 1, 0])        # other rows unaffected
    assert np.isfinite(host(w)[1]).all()


@pytest.mark.parametrize("dtype", WIDE, ids=IDS)
@GPU
@given(tokens=tokens_st, experts=experts_st, k=k_st, renormalize=st.booleans(),
       chosen=st.booleans(), id_dtype=st.sampled_from([I32, I64]), pad=st.sampled_from([0, 3]),
       seed=st.integers(0, 2**31))
def test_topk_softmax_backward(device, dtype, tokens, experts, k, renormalize, chosen, id_dtype,
                               pad, seed):
    rng = np.random.default_rng(seed)
    x = logits_for((tokens, experts), dtype, rng, False)
    if chosen:
        k = min(k, experts)
        ids = T.ref.topk_softmax(x, k)[1]
    else:
        # repeats and ids out of range, which the kernel clamps as the reference does
        ids = rng.integers(-2, experts + 2, size=(tokens, k))
    ids = ids.astype(id_dtype)
    g = T.random_array((tokens, k), F32, rng=rng)
    dx, dids, dg = rows_of(x, pad), cl.to_device(ids), cl.to_device(g)
    want = T.ref.topk_softmax_backward(x, ids, g, renormalize)
    scale = grad_scale(x, ids, g, renormalize)
    for _ in range(3):
        out = poisoned((tokens, experts), F32)
        assert K.topk_softmax_backward(dx, dids, dg, renormalize=renormalize, out=out) is out
        T.assert_close(out, want, F32, scale=scale, msg="dlogits")
    got = host(K.topk_softmax_backward(dx, dids, dg, renormalize=renormalize))
    np.testing.assert_array_equal(got.view(np.uint32), host(out).view(np.uint32))


# -- routing -----------------------------------------------------------------------------------
def draw_ids(kind, shape, experts, rng, dtype=I32):
    if kind == "uniform":
        ids = rng.integers(0, experts, size=shape)
    elif kind == "skewed":              # most slots to a few experts, many experts empty
        ids = np.minimum(rng.geometric(0.3, size=shape) - 1, experts - 1)
    elif kind == "one":
        ids = np.full(shape, rng.integers(0, experts))
    else:                               # out of range both ways, clamped
        ids = rng.integers(-3, experts + 3, size=shape)
        if dtype == I64:
            ids[rng.random(shape) < 0.1] = 2**40
    return ids.astype(dtype)


@GPU
@given(tokens=st.one_of(st.sampled_from([1, 31, 64, 4096]), st.integers(1, bound(600, 40000))),
       k=st.sampled_from([1, 2, 3, 8, 32]), experts=st.one_of(
           st.sampled_from([1, 2, 7, 32, 33, 64, 256, 1000, 1024]), st.integers(1, 1024)),
       kind=st.sampled_from(["uniform", "skewed", "one", "out of range"]),
       id_dtype=st.sampled_from([I32, I64]), seed=st.integers(0, 2**31))
def test_routing(device, tokens, k, experts, kind, id_dtype, seed):
    rng = np.random.default_rng(seed)
    ids = draw_ids(kind, (tokens, k), experts, rng, id_dtype)
    want = T.ref.moe_routing(ids, experts)
    dids = cl.to_device(ids)
    n = tokens * k
    for _ in range(3):
        out = K.MoeRouting(poisoned((experts + 1,), I32), poisoned((n,), I32),
                           poisoned((n,), I32))
        got = K.moe_routing(dids, experts, out=out)
        assert got == out
        assert_routing(got, want, f"{kind}, {tokens}x{k} to {experts}")
    assert_routing(K.moe_routing(dids, experts), want, "allocated")


@pytest.mark.parametrize("experts", [1, 5, 64, 1024])
def test_routing_with_empty_and_full_experts(device, rng, experts):
    tokens, k = 300, 2
    cases = {"all to the last": np.full((tokens, k), experts - 1),
             "all to the first": np.zeros((tokens, k)),
             "even experts only": rng.integers(0, (experts + 1) // 2, (tokens, k)) * 2,
             "out of range": rng.choice([-5, experts + 7, 2**31 - 1, -2**31], (tokens, k))}
    for name, ids in cases.items():
        ids = np.minimum(ids, 2**31 - 1).astype(I32)
        r = K.moe_routing(cl.to_device(ids), experts)
        want = T.ref.moe_routing(ids, experts)
        assert_routing(r, want, name)
        offsets = host(r.offsets)
        assert offsets[0] == 0 and offsets[-1] == tokens * k
    r = K.moe_routing(cl.to_device(np.zeros((0, 4), I32)), experts)
    np.testing.assert_array_equal(host(r.offsets), np.zeros(experts + 1))
    assert r.order.shape == r.slots.shape == (0,)


def test_routing_at_layer_size_captured_and_replayed_with_new_logits(device, rng):
    """8192 tokens to 2 of 64 experts: right directly, and a captured top-k + routing replayed
    after new logits are written into the same input is right for those logits."""
    tokens, experts, k = 8192, 64, 2
    x = logits_for((tokens, experts), BF16, rng, False)
    s = cl.Stream()
    dx = cl.to_device(x, stream=s)
    w, ids = K.topk_softmax(dx, k, stream=s)
    r = K.moe_routing(ids, experts, stream=s)
    want_w, want_ids = T.ref.topk_softmax(x, k)
    np.testing.assert_array_equal(ids.get(stream=s), want_ids)
    T.assert_close(w.get(stream=s), want_w, F32)
    assert_routing([a.get(stream=s) for a in r], T.ref.moe_routing(want_ids, experts))

    with cl.graph.capture(s) as g:
        K.topk_softmax(dx, k, weights=w, ids=ids, stream=s)
        K.moe_routing(ids, experts, out=r, stream=s)
    exe = g.instantiate()
    for _ in range(2):
        x2 = logits_for((tokens, experts), BF16, rng, False)
        dx.copy_(x2, s)
        for a in (w, ids, *r):
            a.copy_(np.full(a.shape, T.poison_value(a.dtype), a.dtype), s)
        exe.replay(s)
        want_w, want_ids = T.ref.topk_softmax(x2, k)
        np.testing.assert_array_equal(ids.get(stream=s), want_ids)
        T.assert_close(w.get(stream=s), want_w, F32)
        assert_routing([a.get(stream=s) for a in r], T.ref.moe_routing(want_ids, experts))
    exe.close()
    g.close()
    s.close()


# -- permutations ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", WIDE, ids=IDS)
@GPU
@given(tokens=st.one_of(st.sampled_from([1, 5, 64]), st.integers(1, bound(120, 1500))),
       k=st.sampled_from([1, 2, 3, 8, 32]), cols=cols_st, experts=st.sampled_from([1, 3, 8, 64]),
       wide_out=st.booleans(), shift=st.sampled_from([0, 0, 1]), seed=st.integers(0, 2**31))
def test_permute_unpermute_and_gradients(device, dtype, tokens, k, cols, experts, wide_out,
                                         shift, seed):
    rng = np.random.default_rng(seed)
    if tokens * k * cols > bound(1 << 20, 1 << 23):
        tokens = max(1, bound(1 << 20, 1 << 23) // (k * cols))
    n = tokens * k
    ids = draw_ids("uniform", (tokens, k), experts, rng)
    r_host = T.ref.moe_routing(ids, experts)
    r = K.moe_routing(cl.to_device(ids), experts)
    out_dt = F32 if wide_out else dtype
    x = T.random_array((tokens, cols), dtype, rng=rng)
    a = T.random_array((n, cols), dtype, rng=rng)
    w = np.abs(T.random_array((tokens, k), F32, rng=rng))
    dy = T.random_array((tokens, cols), out_dt, rng=rng)
    dx_, da, dw_, ddy = (shifted(v, shift) for v in (x, a, w, dy))
    want_xs = T.ref.moe_permute(x, r_host)
    want_dx = T.ref.moe_permute_backward(a, r_host, k)
    want_y = T.ref.moe_unpermute(a, r_host, w)
    want_dys, want_dw = T.ref.moe_unpermute_backward(dy, a, r_host, w)
    gathered = np.abs(a.astype(np.float64))[r_host.slots].reshape(tokens, k, cols)
    dot_scale = np.einsum("td,tkd->tk", np.abs(dy.astype(np.float64)), gathered)
    results = []
    for _ in range(3):
        xs = poisoned_at((n, cols), dtype, shift)
        assert K.moe_permute(dx_, r, out=xs) is xs
        np.testing.assert_array_equal(host(xs).astype(np.float64), want_xs, err_msg="permute")
        dx = poisoned_at((tokens, cols), out_dt, shift)
        assert K.moe_permute_backward(da, r, k, out=dx) is dx
        T.assert_close(dx, want_dx, out_dt, scale=gathered.sum(axis=1), msg="permute_backward")
        y = poisoned_at((tokens, cols), out_dt, shift)
        assert K.moe_unpermute(da, r, dw_, out=y) is y
        T.assert_close(y, want_y, out_dt, scale=np.einsum("tk,tkd->td", w, gathered),
                       msg="unpermute")
        dys, dwts = poisoned_at((n, cols), dtype, shift), poisoned_at((tokens, k), F32, shift)
        got = K.moe_unpermute_backward(ddy, da, r, dw_, dy_sorted=dys, dweights=dwts)
        assert got[0] is dys and got[1] is dwts
        T.assert_close(dys, want_dys, dtype, msg="unpermute_backward: dy_sorted")
        T.assert_close(dwts, want_dw, F32, scale=dot_scale, msg="unpermute_backward: dweights")
        results.append([host(v) for v in (dx, y, dys, dwts)])
    # the allocated forms, and the other alignment: the same bits
    moved = 1 - shift
    again = [K.moe_permute_backward(shifted(a, moved), r, k, out=poisoned_at(
                 (tokens, cols), out_dt, moved)),
             K.moe_unpermute(shifted(a, moved), r, shifted(w, moved), out=poisoned_at(
                 (tokens, cols), out_dt, moved)),
             *K.moe_unpermute_backward(shifted(dy, moved), shifted(a, moved), r,
                                       shifted(w, moved))]
    for name, g, want in zip(("permute_backward", "unpermute", "dy_sorted", "dweights"), again,
                             results[0]):
        if name == "dweights":      # a dot product's order follows the alignment
            T.assert_close(g, want_dw, F32, scale=dot_scale, msg=name)
            continue
        np.testing.assert_array_equal(host(g).view(np.uint8), want.view(np.uint8), err_msg=name)
    np.testing.assert_array_equal(host(K.moe_permute(cl.to_device(x), r)).astype(np.float64),
                                  want_xs)


def test_permutations_clamp_indices_out_of_range(device, rng):
    """A routing whose order and slots hold anything: every read is clamped into the arrays."""
    tokens, k, cols = 6, 2, 40
    n = tokens * k
    x = T.random_array((tokens, cols), BF16, rng=rng)
    bad = T.ref.Routing(np.arange(4), rng.choice([-7, n, 2**31 - 1, 3], n),
                        rng.choice([-1, n + 5, 2], n))
    r = K.MoeRouting(*(cl.to_device(v.astype(np.int32)) for v in bad))
    np.testing.assert_array_equal(host(K.moe_permute(cl.to_device(x), r)).astype(np.float64),
                                  T.ref.moe_permute(x, bad))
    w = np.ones((tokens, k), np.float32)
    a = T.random_array((n, cols), F32, rng=rng)
    T.assert_close(K.moe_unpermute(cl.to_device(a), r, cl.to_device(w)),
                   T.ref.moe_unpermute(a, bad, w), F32)


# -- threads -----------------------------------------------------------------------------------
def _work(seed, stream):
    """A forward and backward of the routing of one layer, on ``stream``."""
    rng = np.random.default_rng(seed)
    dtype = WIDE[seed % 3]
    tokens, experts, k, cols = 100 + 37 * seed, 4 + seed, 1 + seed % 4, 64 + 8 * (seed % 3)
    logits = cl.to_device(logits_for((tokens, experts), dtype, rng, seed % 2 == 1), stream=stream)
    x = cl.to_device(T.random_array((tokens, cols), dtype, rng=rng), stream=stream)
    dy = cl.to_device(T.random_array((tokens, cols), dtype, rng=rng), stream=stream)
    w, ids = K.topk_softmax(logits, k, renormalize=seed % 2 == 0, stream=stream)
    r = K.moe_routing(ids, experts, stream=stream)
    xs = K.moe_permute(x, r, stream=stream)
    y = K.moe_unpermute(xs, r, w, stream=stream)
    dxs, dw = K.moe_unpermute_backward(dy, xs, r, w, stream=stream)
    dx = K.moe_permute_backward(dxs, r, k, out=cl.empty((tokens, cols), F32, stream=stream),
                                stream=stream)
    dlogits = K.topk_softmax_backward(logits, ids, dw, renormalize=seed % 2 == 0, stream=stream)
    return [w, ids, *r, xs, y, dxs, dw, dx, dlogits]


def test_threads_match_serial_bitwise(device):
    serial = match_serial(device, [lambda s, seed=seed: _work(seed, s) for seed in range(16)],
                          repeats=4, pick=lambda t, r: ((t, t + 8)[r % 2],))
    # and the serial routing is the reference's
    for seed in (0, 5):
        ids = serial[seed][1][1]
        assert_routing([v for _, v in serial[seed][2:5]], T.ref.moe_routing(ids, 4 + seed),
                       f"seed {seed}")


# -- a captured step ---------------------------------------------------------------------------
def test_captured_step_replays_with_other_logits(device, rng):
    """Route, permute, unpermute and their gradients captured once; replays with new logits
    route anew, matching eager calls bit for bit, and the reference."""
    s = cl.Stream()
    tokens, experts, k, cols = 512, 16, 2, 64
    batches = [logits_for((tokens, experts), F32, rng, False) for _ in range(3)]
    x = T.random_array((tokens, cols), BF16, rng=rng)
    dy = T.random_array((tokens, cols), BF16, rng=rng)
    n = tokens * k

    def state():
        return {"logits": cl.to_device(batches[0], stream=s),
                "x": cl.to_device(x, stream=s), "dy": cl.to_device(dy, stream=s),
                "w": cl.empty((tokens, k), F32, stream=s), "ids": cl.empty((tokens, k), I32,
                                                                            stream=s),
                "r": K.MoeRouting(cl.empty((experts + 1,), I32, stream=s),
                                  cl.empty((n,), I32, stream=s), cl.empty((n,), I32, stream=s)),
                "xs": cl.empty((n, cols), BF16, stream=s),
                "y": cl.empty((tokens, cols), BF16, stream=s),
                "dys": cl.empty((n, cols), BF16, stream=s),
                "dw": cl.empty((tokens, k), F32, stream=s),
                "dx": cl.empty((tokens, cols), F32, stream=s),
                "dlogits": cl.empty((tokens, experts), F32, stream=s)}

    def step(a):
        K.topk_softmax(a["logits"], k, weights=a["w"], ids=a["ids"], stream=s)
        K.moe_routing(a["ids"], experts, out=a["r"], stream=s)
        K.moe_permute(a["x"], a["r"], out=a["xs"], stream=s)
        K.moe_unpermute(a["xs"], a["r"], a["w"], out=a["y"], stream=s)
        K.moe_unpermute_backward(a["dy"], a["xs"], a["r"], a["w"], dy_sorted=a["dys"],
                                 dweights=a["dw"], stream=s)
        K.moe_permute_backward(a["dys"], a["r"], k, out=a["dx"], stream=s)
        K.topk_softmax_backward(a["logits"], a["ids"], a["dw"], out=a["dlogits"], stream=s)

    def snapshot(a):
        out = {name: a[name].get(stream=s) for name in ("w", "ids", "xs", "y", "dys", "dw",
                                                        "dx", "dlogits")}
        out.update(zip(("offsets", "order", "slots"), (v.get(stream=s) for v in a["r"])))
        return out

    eager = state()
    expected = []
    for b in batches:
        eager["logits"].copy_(b, stream=s)
        step(eager)
        expected.append(snapshot(eager))
    # the batches route differently, so a replay of the first routing would fail
    assert len({e["order"].tobytes() for e in expected}) == len(batches)

    graphed = state()
    with cl.graph.capture(s) as g:
        step(graphed)
    exe = g.instantiate()
    for i, b in enumerate(batches):
        graphed["logits"].copy_(b, stream=s)
        exe.replay(s)
        got = snapshot(graphed)
        for name, want in expected[i].items():
            np.testing.assert_array_equal(got[name].view(np.uint8), want.view(np.uint8),
                                          err_msg=f"replay {i}: {name}")
    # and what the step computed is the reference's
    for b, e in zip(batches, expected):
        want_w, want_ids = T.ref.topk_softmax(b, k)
        np.testing.assert_array_equal(e["ids"], want_ids)
        r = T.ref.moe_routing(want_ids, experts)
        assert_routing([e["offsets"], e["order"], e["slots"]], r)
        T.assert_close(e["y"], T.ref.moe_unpermute(T.ref.moe_permute(x, r), r, e["w"]), BF16)
        dys, dw = T.ref.moe_unpermute_backward(dy, e["xs"], r, e["w"])
        T.assert_close(e["dys"], dys, BF16)
        T.assert_close(e["dw"], dw, F32, scale=np.abs(dy.astype(np.float64) * x.astype(
            np.float64)).sum(axis=1, keepdims=True))     # each row's own token: x[t] . dy[t]
        T.assert_close(e["dlogits"], T.ref.topk_softmax_backward(b, want_ids, e["dw"]), F32,
                       scale=grad_scale(b, want_ids, e["dw"], True))
        T.assert_close(e["dx"], T.ref.moe_permute_backward(e["dys"], r, k), F32)
    exe.close()
    g.close()
    s.close()
