"""Layer norm and RMS norm of the kernel library (ptx/norm.cu, cudalibs.kernels.norm) and their
references, without a GPU.

- The references of cudalibs.testing.ref: the gradients of the backward references (with the
  residual stream's gradient added) against central differences of the forward references,
  in float64; the residual sum rounded once, as torch forms it; the add-and-norm references as
  the plain ones of that sum.
- The launch geometry: every row is covered, row groups are powers of two up to a warp or
  whole warps, blocks fit the kernels' launch bounds, the shared memory fits.
- The wrappers: launch arguments pack into the PTX signatures, the kernel follows the
  alignment and the row length, the parameter gradients take a second launch per parameter,
  empty inputs launch nothing, and bad input is refused before any launch.
"""

from __future__ import annotations

import numpy as np
import pytest

from cudalibs import dtypes, kernels
from cudalibs.driver.array import DeviceArray
from cudalibs.errors import ClosedError
from cudalibs.kernels import norm as N
from cudalibs.runtime import ptxlib
from cudalibs.testing import ref

import test_fp8_kernels
from test_layer_norm import _fd
from test_ptx import DEV0, DEV1, _FakeBuffer, fake

F32, F16, BF16, F64 = np.dtype(np.float32), np.dtype(np.float16), dtypes.bfloat16, np.float64
IDS = lambda d: np.dtype(d).name  # noqa: E731

#: The fp8 tests' record of launches and fills, a fixture of this module too.
recorded = test_fp8_kernels.calls


# -- the references -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["layer", "rms"])
@pytest.mark.parametrize("eps", [1e-5, 0.3])
def test_backward_references_match_finite_differences(mode, eps):
    rng = np.random.default_rng(7)
    rows, d = 3, 7
    x, r = rng.normal(size=(rows, d)) + 0.3, rng.normal(size=(rows, d))
    w, b = rng.uniform(0.5, 1.5, d), rng.normal(size=d)
    dy, ds = rng.normal(size=(rows, d)), rng.normal(size=(rows, d))

    def loss():
        # the fused forward's two outputs, y and s, each met by its gradient from downstream
        if mode == "layer":
            y, s, _, _ = ref.add_layer_norm(x, r, w, b, eps)
        else:
            y, s, _ = ref.add_rms_norm(x, r, w, eps)
        return float((dy * y).sum() + (ds * s).sum())

    s = x + r
    if mode == "layer":
        got = ref.layer_norm_backward(dy, s, w, eps=eps, dresidual=ds)
        wanted = (x, r, w, b)
    else:
        got = ref.rms_norm_backward(dy, s, w, eps=eps, dresidual=ds)
        wanted = (x, r, w)
    fd = [_fd(lambda _: loss(), a) for a in wanted]     # each array perturbed in place
    # dx is the gradient of both x and residual; then dweight (and dbias)
    np.testing.assert_allclose(got[0], fd[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[0], fd[1], rtol=1e-6, atol=1e-7)
    for g, f in zip(got[1:], fd[2:]):
        np.testing.assert_allclose(g, f, rtol=1e-6, atol=1e-7)
    # with the forward's own statistics the result is the same
    if mode == "layer":
        _, m, inv = ref.layer_norm(s, w, b, eps)
        again = ref.layer_norm_backward(dy, s, w, m, inv, dresidual=ds)
    else:
        _, inv = ref.rms_norm(s, w, eps)
        again = ref.rms_norm_backward(dy, s, w, inv, dresidual=ds)
    for a, g in zip(again, got):
        np.testing.assert_allclose(a, g, rtol=1e-12)


def test_dresidual_is_added_to_dx_only():
    rng = np.random.default_rng(1)
    x, dy, dres = rng.normal(size=(4, 5)), rng.normal(size=(4, 5)), rng.normal(size=(4, 5))
    w, b = rng.normal(size=5), rng.normal(size=5)
    plain = ref.layer_norm_backward(dy, x, w)
    fused = ref.layer_norm_backward(dy, x, w, dresidual=dres)
    np.testing.assert_array_equal(fused[0], plain[0] + dres)
    np.testing.assert_array_equal(fused[1], plain[1])
    np.testing.assert_array_equal(fused[2], plain[2])
    plain = ref.rms_norm_backward(dy, x, w)
    fused = ref.rms_norm_backward(dy, x, w, dresidual=dres)
    np.testing.assert_array_equal(fused[0], plain[0] + dres)
    with pytest.raises(ValueError, match="dresidual has shape"):
        ref.rms_norm_backward(dy, x, w, dresidual=dres[:2])
    assert b.shape == (5,)


def test_residual_sum_rounds_once_to_nearest_even():
    one = np.ones(2, BF16)
    # bfloat16 keeps 8 significant bits: 1 + 2**-8 is halfway between 1 and 1 + 2**-7, and
    # goes to the even neighbour 1; 1 + 3 * 2**-8 goes up to 1 + 2**-6
    got = ref.residual_sum(np.array([1.0, 1 + 2**-7], BF16), np.array([2**-8, 2**-8], BF16))
    np.testing.assert_array_equal(got.astype(np.float64), [1.0, 1 + 2**-6])
    assert got.dtype == BF16 and one.dtype == BF16
    # float16: 65504 + 16 is the tie between the largest finite value and the next power of two
    assert np.isinf(ref.residual_sum(np.float16([65504]), np.float16([16]))[0])
    assert ref.residual_sum(np.float16([65504]), np.float16([8]))[0] == 65504
    # float32 adds in float32, float64 in float64
    a, b = np.float32([1.0]), np.float32([2**-30])
    assert ref.residual_sum(a, b)[0] == 1.0 and ref.residual_sum(a, b).dtype == np.float32
    assert ref.residual_sum(a.astype(F64), b.astype(F64))[0] == 1 + 2**-30
    with pytest.raises(ValueError, match="one shape and one dtype"):
        ref.residual_sum(a, b.astype(F64))


def test_add_and_norm_references_normalise_the_rounded_sum():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 16)).astype(BF16)
    r = rng.normal(size=(5, 16)).astype(BF16)
    w, b = rng.normal(size=16), rng.normal(size=16)
    s = ref.residual_sum(x, r)
    y, s2, m, inv = ref.add_layer_norm(x, r, w, b, 1e-3)
    assert s2.dtype == BF16
    np.testing.assert_array_equal(s2.view(np.uint16), s.view(np.uint16))
    for a, e in zip((y, m, inv), ref.layer_norm(s, w, b, 1e-3)):
        np.testing.assert_array_equal(a, e)
    y, s3, inv = ref.add_rms_norm(x, r, w, 1e-3)
    np.testing.assert_array_equal(s3.view(np.uint16), s.view(np.uint16))
    for a, e in zip((y, inv), ref.rms_norm(s, w, 1e-3)):
        np.testing.assert_array_equal(a, e)


# -- launch geometry ----------------------------------------------------------------------------
@pytest.mark.parametrize("direction,itemsize,d,want", [
    ("fwd", 2, 4096, ("v4", 128, 128, 0)),       # a transformer's hidden size: 4 warps a row
    ("fwd", 2, 256, ("v4", 8, 128, 0)),          # 8 threads a row, 16 rows a block
    ("fwd", 2, 1024, ("v4", 32, 128, 0)),
    ("fwd", 2, 768, ("v4", 32, 128, 0)),         # 96 vectors: three per thread of a warp
    ("fwd", 2, 16384, ("v4", 512, 512, 0)),
    ("fwd", 2, 32768, ("v4", 1024, 1024, 0)),
    ("fwd", 4, 16384, ("v4", 1024, 1024, 0)),
    ("fwd", 2, 32776, ("any", 256, 256, 0)),     # beyond the registers of a block
    ("fwd", 2, 8, ("v4", 1, 128, 0)),
    ("bwd", 2, 4096, ("v2", 256, 256, 0)),
    ("bwd", 2, 1024, ("v2", 64, 256, 2 * 1024 * 4)),   # 4 rows a block, summed in shared memory
    ("bwd", 2, 16384, ("v4", 512, 512, 0)),
    ("bwd", 4, 8192, ("v4", 512, 512, 0)),
    ("bwd", 4, 16384, ("any", 256, 256, 0)),
])
def test_geometry_of_common_rows(direction, itemsize, d, want):
    assert tuple(N._geometry(direction, False, itemsize, d, True)) == want
    assert N._geometry(direction, False, itemsize, d, False).kind == "any"


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("itemsize", [2, 4])
def test_geometry_covers_every_row_within_the_launch_bounds(direction, rms, itemsize):
    vec = 16 // itemsize
    bound = {"fwd": 1024, "bwd": 512}[direction]
    for d in list(range(vec, 40 * vec, vec)) + [vec * k for k in (100, 383, 513, 1000, 2047,
                                                                  2048, 4096)]:
        g = N._geometry(direction, rms, itemsize, d, True)
        if g.kind == "any":
            continue
        nv = int(g.kind[1:])
        assert g.tpr * nv * vec >= d, (d, g)                        # every vector has a thread
        assert g.tpr <= d // vec, (d, g)                            # no thread idle throughout
        assert (g.tpr & (g.tpr - 1) == 0 and g.tpr <= 32) or g.tpr % 32 == 0, (d, g)
        assert g.threads % g.tpr == 0 and g.threads <= bound, (d, g)
        if g.threads > g.tpr:
            assert g.shared == (0 if direction == "fwd" else (1 if rms else 2) * d * 4)
        assert g.shared <= 48 * 1024


# -- launches, intercepted ----------------------------------------------------------------------
RESIDENT = 264


@pytest.fixture()
def calls(recorded, monkeypatch):
    """The fp8 tests' record of every launch (its arguments packed into the PTX signature)
    and fill, in order: ``("launch", name, grid, block, args)``, ``("fill", address,
    value)``; outputs are stand-ins over fake addresses, and the device holds RESIDENT blocks
    of any kernel."""
    monkeypatch.setattr(N, "_new", lambda shape, dtype, dev, s: fake(shape, dtype))
    monkeypatch.setattr(N, "_resident_blocks", lambda dev, name, threads, shared, cap=32:
                        min(RESIDENT, cap * 132))
    return recorded


@pytest.fixture()
def shared(calls, monkeypatch):
    """The dynamic shared memory of each launch, in order (beside ``calls``)."""
    sizes = []
    inner = ptxlib.launch

    def launch(*args, **kwargs):
        sizes.append(args[6] if len(args) > 6 else kwargs.get("shared_mem", 0))
        inner(*args, **kwargs)

    monkeypatch.setattr(ptxlib, "launch", launch)
    return sizes


def at(address, shape, dtype, buf=None) -> DeviceArray:
    """A C-contiguous stand-in array at a chosen address."""
    dt = dtypes.lookup(dtype)
    strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * dt.itemsize
                    for i in range(len(shape)))
    return DeviceArray._view(address, tuple(shape), strides, dt, DEV0, buf, None)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=IDS)
def test_forward_launch(calls, dtype):
    x, r, y, ro = (fake((2, 3, 4096), dtype) for _ in range(4))
    w, b = fake((4096,), F32), fake((4096,), dtype)
    res = kernels.layer_norm(x, w, b, eps=1e-3, residual=r, out=y, residual_out=ro)
    assert isinstance(res, kernels.NormResult) and res.y is y and res.residual_out is ro
    assert res.mean.shape == res.rstd.shape == (2, 3, 1)
    assert res.mean.dtype == res.rstd.dtype == F32
    suf = ptxlib.SUFFIX[np.dtype(dtype)]
    tpr = 4096 // (16 // np.dtype(dtype).itemsize) // 4
    (_, name, grid, block, args), = calls
    assert name == f"layer_norm_fwd_{suf}_v4"
    assert block == (max(tpr, 128), 1, 1) and grid == (6 // (block[0] // tpr), 1, 1)
    flags = 1 | (2 if dtype == F32 else 0)           # weight float32 (bias too for float32 x)
    assert args == (x.address, r.address, y.address, ro.address, w.address, b.address,
                    res.mean.address, res.rstd.address, 6, 4096, tpr, flags,
                    pytest.approx(1e-3))


def test_forward_variants(calls):
    x, w = fake((5, 256), BF16), fake((256,), BF16)
    res = kernels.rms_norm(x, w)                     # allocated outputs, no residual
    assert res.residual_out is None and res.mean is None and res.rstd.shape == (5, 1)
    res2 = kernels.rms_norm(x, w, save_stats=False, out=x)    # in place, no statistics
    assert res2.y is x and res2.rstd is None
    kernels.layer_norm(x, w)                         # no bias
    names = [c[1] for c in calls]
    assert names == ["rms_norm_fwd_bf16_v4"] * 2 + ["layer_norm_fwd_bf16_v4"]
    # 8 threads a row, 16 rows a block of 128
    assert {c[3] for c in calls} == {(128, 1, 1)} and {c[2] for c in calls} == {(1, 1, 1)}
    a0, a1, a2 = (c[4] for c in calls)
    assert a0[1] == a0[3] == a0[5] == a0[6] == 0 and a0[7] == res.rstd.address
    assert a1[6] == a1[7] == 0 and a1[2] == x.address
    assert a2[5] == 0 and a2[6] != 0 and a2[10:12] == (8, 0)


def test_forward_takes_the_any_kernel_for_unaligned_rows(calls):
    w = fake((4095,), F16)
    kernels.layer_norm(fake((3, 4095), F16), w)     # D not a whole number of vectors
    buf = _FakeBuffer(1 << 42)
    x = at(buf._ptr + 8, (3, 4096), F16, buf)        # rows off a 16-byte boundary
    kernels.rms_norm(x, fake((4096,), F16))
    kernels.rms_norm(fake((3, 40000), F16), fake((40000,), F16))     # a row too long
    for (_, name, grid, block, _), want in zip(calls, ("layer_norm", "rms_norm", "rms_norm")):
        assert name == f"{want}_fwd_f16_any" and grid == (3, 1, 1) and block == (256, 1, 1)
    assert calls[1][4][0] == x.address


def test_empty_rows_launch_nothing(calls):
    res = kernels.layer_norm(fake((0, 64), F32), fake((64,), F32), residual=fake((0, 64), F32))
    assert res.y.shape == res.residual_out.shape == (0, 64) and res.mean.shape == (0, 1)
    dx, dw, db = kernels.layer_norm_backward(fake((0, 64), F32), fake((0, 64), F32),
                                             fake((64,), F32), fake((0,), F32), fake((0,), F32))
    assert dx.shape == (0, 64)
    # the gradients of the parameters are sums over no rows: zeros
    assert calls == [("fill", dw.address, 0), ("fill", db.address, 0)]


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=IDS)
def test_backward_launches(calls, shared, dtype):
    rows, d = 1000, 1024
    dy, x, dres, dx = (fake((rows, d), dtype) for _ in range(4))
    w = fake((d,), dtype)
    mean, rstd = fake((rows, 1), F32), fake((rows,), F32)
    dw, db = fake((d,), dtype), fake((d,), F32)
    got = kernels.layer_norm_backward(dy, x, w, mean, rstd, dresidual=dres, out=(dx, dw, db))
    assert got == (dx, dw, db)
    suf = ptxlib.SUFFIX[np.dtype(dtype)]
    g = N._geometry("bwd", False, np.dtype(dtype).itemsize, d, True)
    blocks = min(-(-rows // (g.threads // g.tpr)), RESIDENT)
    (_, name, grid, block, args), sw, sb = calls
    assert name == f"layer_norm_bwd_{suf}_{g.kind}" and grid == (blocks, 1, 1)
    assert block == (g.threads, 1, 1) and shared == [g.shared, 0, 0]
    part = args[7]
    assert args == (dy.address, x.address, w.address, mean.address, rstd.address,
                    dres.address, dx.address, part, rows, d, g.tpr, int(dtype == F32))
    # one sum per parameter over the blocks' partial rows: dweight's, then dbias's
    assert sw[1:5] == ("norm_param_grad_" + suf, (32, 1, 1), (256, 1, 1),
                       (part, dw.address, blocks, d))
    assert sb[1:5] == ("norm_param_grad_f32", (32, 1, 1), (256, 1, 1),
                       (part + blocks * d * 4, db.address, blocks, d))


def test_backward_variants(calls):
    x, dy, w = fake((7, 4095), BF16), fake((7, 4095), BF16), fake((4095,), F32)
    dx, dw = kernels.rms_norm_backward(dy, x, w, fake((7, 1), F32))
    assert dx.shape == (7, 4095) and dx.dtype == BF16 and dw.dtype == F32
    # the bias gradient in the bias's dtype, by name or by the array given
    got = kernels.layer_norm_backward(dy, x, w, fake((7,), F32), fake((7,), F32),
                                      bias_dtype=BF16)
    assert got[2].dtype == BF16 and got[1].dtype == F32
    got = kernels.layer_norm_backward(dy, x, w, fake((7,), F32), fake((7,), F32),
                                      out=(dy, None, fake((4095,), BF16)))
    assert got[0] is dy and got[2].dtype == BF16
    names = [c[1] for c in calls]
    assert names == ["rms_norm_bwd_bf16_any", "norm_param_grad_f32",
                     "layer_norm_bwd_bf16_any", "norm_param_grad_f32", "norm_param_grad_bf16",
                     "layer_norm_bwd_bf16_any", "norm_param_grad_f32", "norm_param_grad_bf16"]
    # the any-D kernel: one row a block, every row its own block here (7 < resident)
    assert calls[0][2] == (7, 1, 1) and calls[0][3] == (256, 1, 1)
    assert calls[0][4][3] == 0 and calls[0][4][5] == 0 and calls[0][4][11] == 1


def test_kernel_names_exist():
    from cudalibs import ptx as P

    entries = set(P.ENTRIES["norm"])
    for op in ("layer_norm", "rms_norm"):
        for suf in ("f32", "f16", "bf16"):
            for kind in ("v4", "any"):
                assert f"{op}_fwd_{suf}_{kind}" in entries
            for kind in ("v2", "v4", "any"):
                assert f"{op}_bwd_{suf}_{kind}" in entries
    assert {f"norm_param_grad_{s}" for s in ("f32", "f16", "bf16")} <= entries


# -- bad input ----------------------------------------------------------------------------------
def _refused(calls, exc, match, fn, *args, **kwargs):
    with pytest.raises(exc, match=match):
        fn(*args, **kwargs)
    assert calls == []


def test_bad_dtypes(calls):
    x, w = fake((4, 8), BF16), fake((8,), BF16)
    ln, rms = kernels.layer_norm, kernels.rms_norm
    _refused(calls, TypeError, "layer_norm: x has dtype float64", ln, fake((4, 8), F64), w)
    _refused(calls, TypeError, "layer_norm: weight has dtype float16", ln, x,
             fake((8,), F16))
    _refused(calls, TypeError, "rms_norm: weight has dtype float64", rms, x, fake((8,), F64))
    _refused(calls, TypeError, "layer_norm: bias has dtype float16", ln, x, w, fake((8,), F16))
    _refused(calls, TypeError, "residual is float16 but x is bfloat16", ln, x, w,
             residual=fake((4, 8), F16))
    _refused(calls, TypeError, "out is float32 but x is bfloat16", rms, x, w,
             out=fake((4, 8), F32))
    _refused(calls, TypeError, "eps must be a real number", ln, x, w, eps="1e-5")
    _refused(calls, TypeError, "save_stats must be a bool", rms, x, w, save_stats=1)
    _refused(calls, TypeError, "weight is a host numpy array", ln, x, np.ones(8, np.float32))
    lnb = kernels.layer_norm_backward
    st = fake((4,), F32)
    _refused(calls, TypeError, "dy is float16 but x is bfloat16", lnb, fake((4, 8), F16), x, w,
             st, st)
    _refused(calls, TypeError, "layer_norm_backward: mean has dtype float16", lnb, x, x, w,
             fake((4,), F16), st)
    _refused(calls, TypeError, "dweight has dtype float32, expected bfloat16", lnb, x, x, w,
             st, st, out=(None, fake((8,), F32), None))
    _refused(calls, TypeError, "dbias has dtype float32, expected bfloat16", lnb, x, x, w,
             st, st, out=(None, None, fake((8,), F32)), bias_dtype=BF16)
    _refused(calls, TypeError, "bias_dtype must be float32 or x's dtype", lnb, x, x, w, st, st,
             bias_dtype=np.float16)
    _refused(calls, TypeError, r"out must be a tuple \(dx, dweight, dbias\)", lnb, x, x, w, st,
             st, out=x)
    _refused(calls, TypeError, r"out must be a tuple \(dx, dweight\) .* of 3",
             kernels.rms_norm_backward, x, x, w, st, out=(None, None, None))


def test_bad_shapes_and_values(calls):
    x, w = fake((4, 8), F32), fake((8,), F32)
    ln = kernels.layer_norm
    _refused(calls, ValueError, r"layer_norm: weight must have shape \(8,\), the last dimension "
             r"of x, got \(4,\)", ln, x, fake((4,), F32))
    _refused(calls, ValueError, r"bias must have shape \(8,\)", ln, x, w, fake((1, 8), F32))
    _refused(calls, ValueError, "at least one dimension", ln, fake((), F32), w)
    _refused(calls, ValueError, "must not be empty", ln, fake((4, 0), F32), fake((0,), F32))
    _refused(calls, ValueError, "no broadcasting", ln, x, w, residual=fake((1, 8), F32))
    _refused(calls, ValueError, "residual_out receives x \\+ residual, so it needs residual",
             ln, x, w, residual_out=fake((4, 8), F32))
    _refused(calls, ValueError, "eps must be a finite number >= 0", ln, x, w, eps=-1e-5)
    _refused(calls, ValueError, "eps must be a finite number >= 0", ln, x, w, eps=float("nan"))
    _refused(calls, ValueError, r"eps must be a finite number >= 0 \(a float32\)", ln, x, w,
             eps=1e39)
    _refused(calls, ValueError, "C-contiguous", ln, fake((8, 8), F32).T, w)
    lnb = kernels.layer_norm_backward
    _refused(calls, ValueError, r"rstd must hold one float32 per row of x \(4\), got shape "
             r"\(8,\)", lnb, x, x, w, fake((4,), F32), fake((8,), F32))
    _refused(calls, ValueError, r"dresidual has shape \(4, 4\)", lnb, x, x, w,
             fake((4,), F32), fake((4,), F32), dresidual=fake((4, 4), F32))
    _refused(calls, ValueError, r"dweight must have shape \(8,\)", lnb, x, x, w,
             fake((4,), F32), fake((4,), F32), out=(None, fake((4,), F32), None))


def test_overlaps_devices_and_closed_memory(calls):
    buf = _FakeBuffer(1 << 43)
    big = at(buf._ptr, (8, 8), F32, buf)
    w = fake((8,), F32)
    ln = kernels.layer_norm
    _refused(calls, ValueError, "layer_norm: out overlaps x", ln, big[:4], w, out=big[2:6])
    _refused(calls, ValueError, "out overlaps weight", ln, fake((1, 8), F32), w, out=at(
        w.address, (1, 8), F32))
    _refused(calls, ValueError, "out overlaps residual_out", ln, fake((4, 8), F32), w,
             residual=fake((4, 8), F32), out=big[:4], residual_out=big[:4])
    _refused(calls, ValueError, "rms_norm_backward: dweight overlaps x", kernels.rms_norm_backward,
             fake((8,), F32), big[0], w, fake((1,), F32), out=(None, big[0]))
    _refused(calls, ValueError, "dx overlaps rstd", kernels.rms_norm_backward, big[:1],
             fake((1, 8), F32), w, at(buf._ptr + 4, (1,), F32, buf), out=(big[:1], None))
    _refused(calls, ValueError, "weight is on device 1", ln, fake((4, 8), F32),
             fake((8,), F32, device=DEV1))
    gone = _FakeBuffer(1 << 44)
    closed = at(gone._ptr, (8,), F32, gone)
    gone._ptr = None
    _refused(calls, ClosedError, "layer_norm: bias is closed", ln, fake((4, 8), F32), w, closed)
    # an output may be an input of its own shape itself
    x, r = fake((4, 8), F32), fake((4, 8), F32)
    res = ln(x, w, residual=r, out=x, residual_out=r)
    assert res.y is x and res.residual_out is r
    kernels.rms_norm_backward(x, r, w, fake((4,), F32), dresidual=x, out=(x, None))
    assert [c[1] for c in calls] == ["layer_norm_fwd_f32_v4", "rms_norm_bwd_f32_v2",
                                     "norm_param_grad_f32"]
