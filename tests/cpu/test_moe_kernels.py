"""The mixture-of-experts routing kernels (ptx/moe.cu, cudalibs.kernels.moe) and their
references, without a GPU.

- The selection keys of moe.cu, compiled for the host with nvcc (they are ``__host__
  __device__``): their order is numpy's order of the values (``-0 == +0``, ties by the lower
  index) on every float16 and bfloat16 value and on random float32 bits, and a key gives its
  value back.  The GPU tier checks the kernels that use them against the same references.
- The references of cudalibs.testing.ref: values worked out by hand, ties, the gradient of the
  top-k softmax against finite differences (with and without renormalisation, repeated and
  out-of-range ids), the routing's invariants (stable, inverse, clamped, empty and full
  experts), and the permutations against their gradients (adjoint identities).
- The wrappers: launch arguments pack into the PTX signatures, the routing's three launches
  and its scratch (allocated and freed on the call's stream), empty inputs, and bad input
  refused before any launch.
"""

from __future__ import annotations


import numpy as np
import pytest

from cudalibs import dtypes, kernels
from cudalibs.driver.array import DeviceArray
from cudalibs.errors import ClosedError
from cudalibs.kernels import moe
from cudalibs.runtime import ptxlib
from cudalibs.testing import ref

from host_cuda import compile_harness, run_harness
from test_ptx import DEV0, DEV1, _FakeBuffer, _check_launch, fake

F32, F16, BF16 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(dtypes.bfloat16)
I32, I64 = np.dtype(np.int32), np.dtype(np.int64)
WIDE = [F32, F16, BF16]
IDS = lambda d: np.dtype(d).name  # noqa: E731


# -- the selection keys of moe.cu, compiled for the host ----------------------------------------
_HARNESS = r"""
#include <cstdio>
#include <vector>
#include "moe.cu"

// argv: floats in; per float its key at index 7 (u64) and the value the key gives back.
int main(int argc, char** argv) {
    if (argc != 4) return 2;
    FILE* in = fopen(argv[1], "rb");
    FILE* keys = fopen(argv[2], "wb");
    FILE* back = fopen(argv[3], "wb");
    if (!in || !keys || !back) return 3;
    std::vector<float> v(1 << 16);
    size_t got;
    while ((got = fread(v.data(), sizeof(float), v.size(), in)) > 0) {
        for (size_t i = 0; i < got; ++i) {
            const unsigned long long k = topk_key(v[i], 7u);
            const float b = key_value(k);
            const unsigned idx = key_index(k);
            if (idx != 7u) return 4;
            fwrite(&k, sizeof k, 1, keys);
            fwrite(&b, sizeof b, 1, back);
        }
    }
    fclose(in);
    fclose(keys);
    fclose(back);
    return 0;
}
"""


@pytest.fixture(scope="module")
def host_keys(tmp_path_factory):
    """``run(float32 array) -> (keys, values back)`` through moe.cu's own key functions."""
    tmp, exe = compile_harness(tmp_path_factory, "moe_host", _HARNESS)

    def run(values):
        values.astype(np.float32).tofile(tmp / "in.bin")
        run_harness(exe, tmp / "in.bin", tmp / "keys.bin", tmp / "back.bin")
        return (np.fromfile(tmp / "keys.bin", np.uint64),
                np.fromfile(tmp / "back.bin", np.float32))

    return run


def _every_16_bit(dtype) -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype).astype(np.float32)


@pytest.mark.parametrize("source", ["float16", "bfloat16", "float32"])
def test_host_compiled_keys_order_like_numpy(host_keys, source):
    if source == "float32":
        v = np.random.default_rng(11).integers(0, 1 << 32, 1 << 18, dtype=np.uint64)
        v = v.astype(np.uint32).view(np.float32)
    else:
        v = _every_16_bit(np.dtype(np.float16) if source == "float16" else BF16)
    keys, back = host_keys(v)
    nan = np.isnan(v)
    # the value comes back, bit for bit, but -0 as +0
    want = np.where(v == 0, np.float32(0), v)
    assert (back[~nan].view(np.uint32) == want[~nan].view(np.uint32)).all()
    # the order of the keys (the index part is the same for all) is the order of the values,
    # equal values (0 and -0) having equal keys; NaNs above +inf or below -inf by sign
    hi = keys >> np.uint64(32)
    num = v[~nan]
    by_key = np.argsort(hi[~nan], kind="stable")
    assert (np.diff(num[by_key].astype(np.float64)) >= 0).all()
    ranks = np.unique(num.astype(np.float64), return_inverse=True)[1]
    np.testing.assert_array_equal(np.unique(hi[~nan], return_inverse=True)[1], ranks)
    sign = np.signbit(v[nan])
    if nan.any():
        assert (hi[nan][~sign] > hi[~nan].max()).all() and (hi[nan][sign] < hi[~nan].min()).all()
    assert (keys > 0).all()


# -- references ---------------------------------------------------------------------------------
def test_topk_reference_by_hand():
    x = np.array([[1.0, 3.0, 2.0, 3.0], [-0.0, 0.0, -1.0, 0.0]])
    w, ids = ref.topk_softmax(x, 2)
    np.testing.assert_array_equal(ids, [[1, 3], [0, 1]])     # ties: lower index first
    np.testing.assert_allclose(w, [[0.5, 0.5], [0.5, 0.5]])
    w, ids = ref.topk_softmax(x, 3, renormalize=False)
    np.testing.assert_array_equal(ids, [[1, 3, 2], [0, 1, 3]])
    z = np.exp(1.0) + 2 * np.exp(3.0) + np.exp(2.0)
    np.testing.assert_allclose(w[0], [np.exp(3.0) / z, np.exp(3.0) / z, np.exp(2.0) / z])
    np.testing.assert_allclose(w[1], [1 / (3 + np.exp(-1.0))] * 3)
    # given ids: clamped, repeats allowed, the weights of those
    w, ids = ref.topk_softmax(x, None, ids=[[2, 9], [-4, -4]])
    np.testing.assert_array_equal(ids, [[2, 3], [0, 0]])
    np.testing.assert_allclose(w, [[1 / (1 + np.e), np.e / (1 + np.e)], [0.5, 0.5]])
    with pytest.raises(ValueError, match="k must be in"):
        ref.topk_softmax(x, 5)


def _numeric_gradient(x, ids, g, renormalize, h=1e-6):
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for i in range(x.shape[1]):
            up, down = x.copy(), x.copy()
            up[t, i] += h
            down[t, i] -= h
            wu, _ = ref.topk_softmax(up, None, renormalize, ids=ids)
            wd, _ = ref.topk_softmax(down, None, renormalize, ids=ids)
            out[t, i] = ((wu - wd) * g).sum() / (2 * h)
    return out


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("ids_kind", ["chosen", "repeated", "out of range"])
def test_topk_backward_reference_matches_finite_differences(renormalize, ids_kind):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 7))
    k = 3
    if ids_kind == "chosen":
        _, ids = ref.topk_softmax(x, k)
    elif ids_kind == "repeated":
        ids = np.array([[2, 2, 5], [0, 6, 0], [1, 1, 1]])
    else:
        ids = np.array([[-3, 4, 99], [6, 7, -1], [3, 2, 1]])
    g = rng.standard_normal((3, k))
    got = ref.topk_softmax_backward(x, ids, g, renormalize)
    np.testing.assert_allclose(got, _numeric_gradient(x, ids, g, renormalize), atol=1e-8)
    if renormalize:
        # nothing flows to the experts not chosen
        chosen = np.zeros(x.shape, bool)
        np.put_along_axis(chosen, np.clip(ids, 0, 6), True, axis=1)
        assert (got[~chosen] == 0).all()
    # the weights sum to one when renormalised: the gradient of a constant dweights is 0
    flat = ref.topk_softmax_backward(x, ids, np.ones((3, k)), renormalize)
    if renormalize:
        np.testing.assert_allclose(flat, 0, atol=1e-15)


def test_routing_reference():
    ids = np.array([[2, 0], [0, 2], [5, -1], [2, 9]])
    r = ref.moe_routing(ids, 4)
    # clamped: 5 and 9 -> 3, -1 -> 0; slots in increasing order within an expert
    np.testing.assert_array_equal(r.offsets, [0, 3, 3, 6, 8])
    np.testing.assert_array_equal(r.order, [1, 2, 5, 0, 3, 6, 4, 7])
    np.testing.assert_array_equal(r.order[r.slots], np.arange(8))
    # one expert for all, and experts with none
    r = ref.moe_routing(np.full((5, 3), 2), 6)
    np.testing.assert_array_equal(r.offsets, [0, 0, 0, 15, 15, 15, 15])
    np.testing.assert_array_equal(r.order, np.arange(15))
    r = ref.moe_routing(np.zeros((0, 2), np.int32), 3)
    np.testing.assert_array_equal(r.offsets, [0, 0, 0, 0])
    assert r.order.size == r.slots.size == 0


def test_permutation_references_are_each_others_adjoints():
    rng = np.random.default_rng(4)
    tokens, k, d, e = 6, 3, 5, 4
    r = ref.moe_routing(rng.integers(0, e, (tokens, k)), e)
    x = rng.standard_normal((tokens, d))
    a = rng.standard_normal((tokens * k, d))
    xs = ref.moe_permute(x, r)
    np.testing.assert_array_equal(xs, x[r.order // k])
    # <permute(x), a> = <x, permute_backward(a)>
    np.testing.assert_allclose((xs * a).sum(), (x * ref.moe_permute_backward(a, r, k)).sum())
    w = rng.random((tokens, k))
    y = ref.moe_unpermute(a, r, w)
    np.testing.assert_allclose(y[2], sum(w[2, j] * a[r.slots[2 * k + j]] for j in range(k)))
    dy = rng.standard_normal((tokens, d))
    dys, dw = ref.moe_unpermute_backward(dy, a, r, w)
    # linear in y_sorted: <unpermute(a, w), dy> = <a, dy_sorted>; and in w: the weights'
    # gradient is the directional derivative
    np.testing.assert_allclose((y * dy).sum(), (a * dys).sum())
    step = rng.standard_normal((tokens, k))
    np.testing.assert_allclose(((ref.moe_unpermute(a, r, w + step) - y) * dy).sum(),
                               (dw * step).sum())
    # clamped slots stay in range
    bad = ref.Routing(r.offsets, r.order + 100, r.slots - 100)
    np.testing.assert_array_equal(ref.moe_permute(x, bad), np.repeat(x[-1:], tokens * k, 0))
    np.testing.assert_array_equal(ref.moe_unpermute(a, bad, np.ones((tokens, k))),
                                  np.repeat(a[:1] * k, tokens, 0))


# -- the wrappers, on stand-in arrays -------------------------------------------------------------
class _Scratch(_FakeBuffer):
    """A stand-in buffer that records its release."""

    __slots__ = ("log",)

    def __init__(self, ptr, log):
        super().__init__(ptr)
        self.log = log

    def close(self):
        self.log.append(("free", self._ptr))


@pytest.fixture()
def calls(monkeypatch):
    """Every launch, fill and scratch allocation and release, in order."""
    seen = []

    def launch(device, name, grid, block, args, stream, shared_mem=0):
        _check_launch((device, name, grid, block, args, stream))
        seen.append(("launch", name, grid, block, args, shared_mem))

    def fill(self, value, stream=None):
        seen.append(("fill", self.address, value))
        return self

    def empty(shape, dtype, *, device=None, stream=None):
        arr = fake(shape, dtype, device=device)
        buf = _Scratch(arr.address, seen)
        seen.append(("alloc", arr.address, tuple(shape), np.dtype(dtype)))
        return DeviceArray._view(arr.address, arr.shape, arr.strides, arr._dt, device, buf,
                                 None)

    monkeypatch.setattr(ptxlib, "launch", launch)
    monkeypatch.setattr(DeviceArray, "fill", fill)
    monkeypatch.setattr(moe, "empty", empty)
    return seen


def routing(n, experts, device=DEV0):
    return kernels.MoeRouting(fake((experts + 1,), I32, device), fake((n,), I32, device),
                              fake((n,), I32, device))


@pytest.mark.parametrize("dtype", WIDE, ids=IDS)
def test_topk_softmax_launches(calls, dtype):
    x = fake((20, 64), dtype)
    w, i = fake((20, 2), F32), fake((20, 2), I32)
    assert kernels.topk_softmax(x, 2, weights=w, ids=i) == (w, i)
    # rows contiguous, a row stride of 80 elements (a slice of a wider array)
    wide = fake((20, 80), dtype)
    part = DeviceArray._view(wide.address, (20, 64), wide.strides, wide._dt, DEV0,
                             _FakeBuffer(wide.address), None)
    kernels.topk_softmax(part, 8, renormalize=False, weights=fake((20, 8), F32),
                         ids=fake((20, 8), I32))
    suf = ptxlib.SUFFIX[dtype]
    assert [c[1:5] for c in calls] == [
        (f"topk_softmax_{suf}", (3, 1, 1), (256, 1, 1),
         (x.address, w.address, i.address, 20, 64, 64, 2, 1)),
        (f"topk_softmax_{suf}", (3, 1, 1), (256, 1, 1),
         (part.address, calls[1][4][1], calls[1][4][2], 20, 64, 80, 8, 0))]


@pytest.mark.parametrize("id_dtype", [I32, I64], ids=IDS)
@pytest.mark.parametrize("dtype", WIDE, ids=IDS)
def test_topk_softmax_backward_launches(calls, dtype, id_dtype):
    x, ids, g, out = fake((9, 300), dtype), fake((9, 4), id_dtype), fake((9, 4), F32), \
        fake((9, 300), F32)
    assert kernels.topk_softmax_backward(x, ids, g, out=out, renormalize=False) is out
    suf, isuf = ptxlib.SUFFIX[dtype], {I32: "i32", I64: "i64"}[id_dtype]
    assert [c[1:5] for c in calls] == [
        (f"topk_softmax_backward_{suf}_{isuf}", (2, 1, 1), (256, 1, 1),
         (x.address, ids.address, g.address, out.address, 9, 300, 300, 4, 0))]


def test_route_chunk():
    for n, e in [(1, 1), (16384, 64), (16384, 1024), (3, 1000), (524288, 256), (2**31 - 1, 1024),
                 (2**31 - 1, 1), (70000, 7)]:
        chunk, units = moe._route_chunk(n, e)
        assert chunk % 32 == 0 and chunk >= max(128, e) and units * chunk >= n > (units - 1) * chunk
        assert units * e <= 2**20 or chunk == max(128, -(-e // 32) * 32)
        assert chunk < 2**32 and units < 2**32
    assert moe._route_chunk(16384, 64) == (128, 128)       # the size the layers route


@pytest.mark.parametrize("id_dtype", [I32, I64], ids=IDS)
def test_routing_launches_and_scratch(calls, id_dtype):
    ids = fake((8192, 2), id_dtype)
    out = routing(16384, 64)
    got = kernels.moe_routing(ids, 64, out=out)
    assert got == out and isinstance(got, kernels.MoeRouting) and got.experts == 64
    isuf = {I32: "i32", I64: "i64"}[id_dtype]
    (alloc, count, scan, scatter, free) = calls
    assert alloc[0] == "alloc" and alloc[2:] == ((128 * 64,), I32)
    counts = alloc[1]
    assert count[1:] == (f"moe_route_count_{isuf}", (32, 1, 1), (128, 1, 1),
                         (ids.address, counts, out.slots.address, 16384, 64, 128, 128),
                         4 * 64 * 4)
    assert scan[1:5] == ("moe_route_scan", (1, 1, 1), (1024, 1, 1),
                         (counts, out.offsets.address, 64, 128))
    assert scatter[1] == f"moe_route_scatter_{isuf}" and scatter[3] == (256, 1, 1)
    assert scatter[4] == (ids.address, counts, out.order.address, out.slots.address, 16384, 64,
                          128)
    assert free == ("free", counts)     # after the last launch that reads it


def test_routing_allocates_its_arrays_on_the_call(calls):
    r = kernels.moe_routing(fake((5, 3), I32), 7)
    allocs = [c for c in calls if c[0] == "alloc"]
    assert [a[2:] for a in allocs[:3]] == [((8,), I32), ((15,), I32), ((15,), I32)]
    assert (r.offsets.address, r.order.address, r.slots.address) == tuple(
        a[1] for a in allocs[:3])
    assert repr(r) == "MoeRouting(15 slots to 7 experts on device 0)"


def test_permutation_launches(calls):
    tokens, k, d = 10, 3, 72
    r = routing(tokens * k, 8)
    x, xs = fake((tokens, d), BF16), fake((tokens * k, d), BF16)
    assert kernels.moe_permute(x, r, out=xs) is xs
    dx = fake((tokens, d), F32)
    assert kernels.moe_permute_backward(xs, r, k, out=dx) is dx
    w, y = fake((tokens, k), F32), fake((tokens, d), BF16)
    assert kernels.moe_unpermute(xs, r, w, out=y) is y
    dys, dw = fake((tokens * k, d), BF16), fake((tokens, k), F32)
    assert kernels.moe_unpermute_backward(dx, xs, r, w, dy_sorted=dys, dweights=dw) == (dys, dw)
    assert [c[1:5] for c in calls] == [
        ("moe_permute", (30, 1, 1), (32, 1, 1),
         (x.address, r.order.address, xs.address, 30, 3, 144)),
        ("moe_unpermute_bf16_f32", (10, 1, 1), (32, 1, 1),
         (xs.address, r.slots.address, 0, dx.address, 10, 3, 72)),
        ("moe_unpermute_bf16_bf16", (10, 1, 1), (32, 1, 1),
         (xs.address, r.slots.address, w.address, y.address, 10, 3, 72)),
        ("moe_unpermute_backward_bf16_f32", (10, 1, 1), (32, 1, 1),
         (dx.address, xs.address, r.slots.address, w.address, dys.address, dw.address, 10, 3,
          72))]
    # a wide row: eight warps
    kernels.moe_permute(fake((2, 4096), F16), routing(2, 3), out=fake((2, 4096), F16))
    assert calls[-1][3] == (256, 1, 1) and calls[-1][4][3:] == (2, 1, 8192)


def test_empty_inputs_launch_nothing_but_zero_offsets(calls):
    out = routing(0, 4)
    kernels.moe_routing(fake((0, 2), I32), 4, out=out)
    assert calls == [("fill", out.offsets.address, 0)]
    calls.clear()
    w, i = kernels.topk_softmax(fake((0, 5), F32), 2)
    kernels.topk_softmax_backward(fake((0, 5), F32), fake((0, 2), I32), fake((0, 2), F32),
                                  out=fake((0, 5), F32))
    r = routing(0, 4)
    kernels.moe_permute(fake((0, 8), F32), r)
    kernels.moe_permute(fake((3, 0), F32), routing(6, 4))
    kernels.moe_unpermute(fake((6, 0), F32), routing(6, 4), fake((3, 2), F32))
    kernels.moe_permute_backward(fake((0, 8), F32), r, 2)
    assert [c[0] for c in calls] == ["alloc"] * len(calls)
    # no columns, but dweights are dots of nothing: zeros, written by the kernel
    calls.clear()
    kernels.moe_unpermute_backward(fake((3, 0), F32), fake((6, 0), F32), routing(6, 4),
                                   fake((3, 2), F32))
    assert calls[-1][1] == "moe_unpermute_backward_f32_f32"


def _refused(calls, exc, match, fn, *args, **kwargs):
    with pytest.raises(exc, match=match):
        fn(*args, **kwargs)
    assert calls == []


def test_bad_topk_arguments(calls):
    x = fake((4, 8), F32)
    ts = kernels.topk_softmax
    _refused(calls, TypeError, "topk_softmax: logits has dtype float64", ts,
             fake((4, 8), np.float64), 2)
    _refused(calls, TypeError, "topk_softmax: logits is a host numpy array", ts,
             np.ones((4, 8), np.float32), 2)
    _refused(calls, ValueError, "topk_softmax: logits must have 2 dimensions", ts,
             fake((8,), F32), 2)
    _refused(calls, TypeError, "topk_softmax: k must be an int, not float", ts, x, 2.0)
    _refused(calls, TypeError, "topk_softmax: k must be an int, not bool", ts, x, True)
    _refused(calls, ValueError, r"topk_softmax: k = 33 is outside \[1, 32\]", ts,
             fake((4, 64), F32), 33)
    _refused(calls, ValueError, r"topk_softmax: k = 0 is outside", ts, x, 0)
    _refused(calls, ValueError, "k = 9 is more than the 8 experts of logits", ts, x, 9)
    _refused(calls, ValueError, "topk_softmax: logits has no experts", ts, fake((4, 0), F32), 1)
    _refused(calls, TypeError, "renormalize must be a bool, not int", ts, x, 2, renormalize=1)
    _refused(calls, TypeError, "topk_softmax: weights has dtype float16", ts, x, 2,
             weights=fake((4, 2), F16))
    _refused(calls, TypeError, "topk_softmax: ids has dtype int64", ts, x, 2,
             ids=fake((4, 2), I64))
    _refused(calls, ValueError, r"topk_softmax: ids has shape \(2, 4\), expected \(4, 2\)", ts,
             x, 2, ids=fake((2, 4), I32))
    _refused(calls, ValueError, "logits must have contiguous rows", ts, fake((8, 4), F32).T, 2)
    _refused(calls, ValueError, "topk_softmax: weights overlaps logits", ts, x, 2,
             weights=DeviceArray._view(x.address, (4, 2), (8, 4), x._dt, DEV0, None, None))
    bw = kernels.topk_softmax_backward
    _refused(calls, TypeError, "topk_softmax_backward: ids has dtype float32", bw, x,
             fake((4, 2), F32), fake((4, 2), F32))
    _refused(calls, ValueError, r"ids has shape \(3, 2\); logits has 4 rows", bw, x,
             fake((3, 2), I32), fake((3, 2), F32))
    _refused(calls, ValueError, r"ids has shape \(4, 33\)", bw, x, fake((4, 33), I32),
             fake((4, 33), F32))
    _refused(calls, ValueError, r"dweights has shape \(4, 3\) but ids has \(4, 2\)", bw, x,
             fake((4, 2), I32), fake((4, 3), F32))
    _refused(calls, TypeError, "topk_softmax_backward: dweights has dtype float16", bw, x,
             fake((4, 2), I32), fake((4, 2), F16))
    _refused(calls, TypeError, "topk_softmax_backward: out has dtype float16", bw, x,
             fake((4, 2), I32), fake((4, 2), F32), out=fake((4, 8), F16))
    _refused(calls, ValueError, r"topk_softmax_backward: out has shape \(4, 2\), expected "
             r"\(4, 8\)", bw, x, fake((4, 2), I32), fake((4, 2), F32), out=fake((4, 2), F32))
    _refused(calls, ValueError, "topk_softmax_backward: out overlaps logits", bw, x,
             fake((4, 2), I32), fake((4, 2), F32), out=x)


def test_bad_routing_arguments(calls):
    ids = fake((4, 2), I32)
    mr = kernels.moe_routing
    _refused(calls, TypeError, "moe_routing: ids has dtype float32", mr, fake((4, 2), F32), 4)
    _refused(calls, ValueError, "moe_routing: ids must have 2 dimensions", mr,
             fake((8,), I32), 4)
    _refused(calls, TypeError, "moe_routing: experts must be an int, not str", mr, ids, "4")
    _refused(calls, ValueError, r"moe_routing: experts = 1025 is outside \[1, 1024\]", mr, ids,
             1025)
    _refused(calls, ValueError, r"experts = 0 is outside", mr, ids, 0)
    _refused(calls, TypeError, "moe_routing: out must be a MoeRouting", mr, ids, 4,
             out=fake((5,), I32))
    _refused(calls, TypeError, "moe_routing: out.order has dtype int64", mr, ids, 4,
             out=kernels.MoeRouting(fake((5,), I32), fake((8,), I64), fake((8,), I32)))
    _refused(calls, ValueError, "out holds 4 offsets and 8 slots; the routing of ids "
             r"\(4, 2\) to 4 experts has 5 and 8", mr, ids, 4, out=routing(8, 3))
    _refused(calls, ValueError, "out.order has 8 entries but out.slots has 9", mr, ids, 4,
             out=kernels.MoeRouting(fake((5,), I32), fake((8,), I32), fake((9,), I32)))
    same = fake((8,), I32)
    _refused(calls, ValueError, "moe_routing: out.order overlaps out.slots", mr, ids, 4,
             out=kernels.MoeRouting(fake((5,), I32), same, same))
    _refused(calls, ValueError, "moe_routing: out.slots overlaps ids", mr, ids, 4,
             out=kernels.MoeRouting(fake((5,), I32), fake((8,), I32),
                                    DeviceArray._view(ids.address, (8,), (4,), ids._dt, DEV0,
                                                      None, None)))
    _refused(calls, ValueError, "moe_routing: out.order is on device 1", mr, ids, 4,
             out=kernels.MoeRouting(fake((5,), I32), fake((8,), I32, DEV1), fake((8,), I32)))


def test_bad_permutation_arguments(calls):
    r = routing(12, 4)
    x = fake((4, 16), F32)
    perm, back = kernels.moe_permute, kernels.moe_permute_backward
    un, unb = kernels.moe_unpermute, kernels.moe_unpermute_backward
    _refused(calls, TypeError, "moe_permute: routing must be a MoeRouting", perm, x, (1, 2))
    _refused(calls, TypeError, "moe_permute: routing must be a MoeRouting", perm, x, None)
    _refused(calls, TypeError, "moe_permute: routing.slots has dtype int64", perm, x,
             kernels.MoeRouting(fake((5,), I32), fake((12,), I32), fake((12,), I64)))
    _refused(calls, ValueError, "routing.offsets has 1 entries", perm, x,
             kernels.MoeRouting(fake((1,), I32), fake((12,), I32), fake((12,), I32)))
    _refused(calls, ValueError, "moe_permute: the routing has 12 slots, which is not k tokens' "
             "worth for the 5 tokens of x", perm, fake((5, 16), F32), r)
    _refused(calls, ValueError, "the routing has 99 slots", perm, fake((3, 16), F32),
             routing(99, 4))     # k = 33
    _refused(calls, TypeError, "moe_permute: x has dtype int32", perm, fake((4, 16), I32), r)
    _refused(calls, ValueError, "moe_permute: x must be C-contiguous", perm,
             fake((16, 4), F32).T, r)
    _refused(calls, TypeError, "moe_permute: out has dtype float16", perm, x, r,
             out=fake((12, 16), F16))
    _refused(calls, ValueError, "moe_permute: out overlaps routing.order", perm, x, r,
             out=DeviceArray._view(r.order.address, (12, 16), (64, 4), x._dt, DEV0, None,
                                   None))
    _refused(calls, TypeError, "moe_permute_backward: k must be an int", back,
             fake((12, 16), F32), r, None)
    _refused(calls, ValueError, "moe_permute_backward: dx_sorted has 12 rows, not a multiple "
             "of k = 5", back, fake((12, 16), F32), r, 5)
    _refused(calls, ValueError, "moe_permute_backward: the routing has 12 slots but dx_sorted "
             "has 6 rows", back, fake((6, 16), F32), r, 3)
    _refused(calls, TypeError, "moe_permute_backward: out has dtype float16", back,
             fake((12, 16), BF16), r, 3, out=fake((4, 16), F16))
    w = fake((4, 3), F32)
    _refused(calls, TypeError, "moe_unpermute: weights has dtype float16", un,
             fake((12, 16), F32), r, fake((4, 3), F16))
    _refused(calls, ValueError, r"moe_unpermute: weights has shape \(1, 40\): k = 40", un,
             fake((40, 16), F32), routing(40, 4), fake((1, 40), F32))
    _refused(calls, ValueError, "moe_unpermute: y_sorted has 10 rows and the routing 12 slots, "
             r"but weights \(4, 3\) makes 12", un, fake((10, 16), F32), r, w)
    _refused(calls, ValueError, "moe_unpermute: out overlaps weights", un,
             fake((12, 16), F32), r, w, out=DeviceArray._view(w.address, (4, 16), (64, 4),
                                                              w._dt, DEV0, None, None))
    dy = fake((4, 16), F32)
    _refused(calls, TypeError, "moe_unpermute_backward: dy is float16; with y_sorted of "
             "bfloat16 it must be bfloat16 or float32", unb, fake((4, 16), F16),
             fake((12, 16), BF16), r, w)
    _refused(calls, ValueError, r"dy \(4, 16\), y_sorted \(12, 8\) and weights \(4, 3\) do not "
             "fit", unb, dy, fake((12, 8), F32), r, w)
    _refused(calls, ValueError, "moe_unpermute_backward: the routing has 9 slots", unb, dy,
             fake((12, 16), F32), routing(9, 4), w)
    _refused(calls, TypeError, "moe_unpermute_backward: dy_sorted has dtype float32", unb,
             fake((4, 16), BF16), fake((12, 16), BF16), r, w, dy_sorted=fake((12, 16), F32))
    _refused(calls, ValueError, r"dweights has shape \(3, 4\), expected \(4, 3\)", unb, dy,
             fake((12, 16), F32), r, w, dweights=fake((3, 4), F32))
    both = fake((12, 16), F32)
    _refused(calls, ValueError, "moe_unpermute_backward: dy_sorted overlaps y_sorted", unb, dy,
             both, r, w, dy_sorted=both)
    gone = _FakeBuffer(1 << 46)
    closed = DeviceArray._view(gone._ptr, (4, 3), (12, 4), w._dt, DEV0, gone, None)
    gone._ptr = None
    _refused(calls, ClosedError, "moe_unpermute: weights is closed", un, fake((12, 16), F32), r,
             closed)
