"""cuFFT bindings without a GPU.

* the one-shots' recipes and the plans' advanced data layouts, checked by running the cuFFT
  passes they describe -- the layout formula of the cuFFT documentation, each batch through
  ``numpy.fft`` -- on host memory laid out as the arrays are, against ``numpy.fft`` itself,
  over hypothesis-drawn shapes, strides, axes, lengths, norms and outputs;
* the layout reader (:func:`cudalibs.cufft.layout.describe`) on layouts cuFFT can and cannot
  express, and the reasons it gives;
* argument validation before any C call, with messages naming the operation and the
  parameter, on arrays that point at no memory and a device that has no context;
* the plan-cache keys of the one-shots and their hit path;
* the loader entry, the wheels and extras, the status table and the library version (the
  prototype table itself is checked against cufft.h / cufftXt.h by test_headers.py).
"""

from __future__ import annotations

import importlib
import math
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import cudalibs as cl
from cudalibs import _loader, dtypes
from cudalibs.cufft import _base, _lib, layout
from cudalibs.cufft import recipe as recipe_mod
from cudalibs.cufft.layout import Layout, LayoutError, Side, describe, plan_layouts
from cudalibs.driver.array import DeviceArray
from cudalibs.errors import ClosedError, CufftError

plan_mod = importlib.import_module("cudalibs.cufft.plan")
oneshot = importlib.import_module("cudalibs.cufft.oneshot")
ROOT = Path(__file__).resolve().parents[2]
C64, C128, F32, F64, F16 = (np.dtype(t) for t in (np.complex64, np.complex128, np.float32,
                                                   np.float64, np.float16))


# -- a device with no context, arrays over no memory -------------------------------------------
class _Dev:
    """A stand-in device: what plan construction reads, and nothing a C call could use."""

    compute_capability = (9, 0)
    raw_context = None

    def __init__(self, ordinal=0):
        self.ordinal = ordinal

    def __getattr__(self, name):
        raise AssertionError(f"a C call or device query (device.{name}) before the checks")

    def __repr__(self):
        return f"<stand-in device {self.ordinal}>"


DEV, DEV1 = _Dev(0), _Dev(1)
_NEXT = [1 << 32]


def fake(shape, dtype=C64, strides=None, device=DEV, address=None):
    """A DeviceArray over no memory (C-contiguous unless ``strides``)."""
    dt = dtypes.lookup(dtype)
    if strides is None:
        strides = layout.c_strides(shape, dt.itemsize)
    if address is None:
        _NEXT[0] += 1 << 20     # each its own addresses: no two arrays overlap
        address = _NEXT[0]
    return DeviceArray._view(address, tuple(shape), tuple(strides), dt, device, None, None)


@pytest.fixture(autouse=True)
def _stand_in(monkeypatch):
    """Plans made with ``device=`` a stand-in keep it; every library load fails loudly."""
    real = plan_mod.as_device
    monkeypatch.setattr(plan_mod, "as_device", lambda d: d if isinstance(d, _Dev) else real(d))

    def refuse(self):
        raise AssertionError(f"load of {self.name} before the checks")

    monkeypatch.setattr(cl._ffi.LazyLibrary, "__call__", refuse)
    yield
    cl.plan_cache.clear("cufft")


# -- cuFFT's advanced layout, run on host memory --------------------------------------------------
def _offsets(lay: Layout, shape) -> np.ndarray:
    """Element offsets of every index of one batch (the cuFFT documentation's formula)."""
    r = len(shape)
    steps = [lay.stride * math.prod(lay.embed[k + 1:]) for k in range(r)]
    grid = np.indices(shape)
    return sum(grid[k] * steps[k] for k in range(r))


def _exec(plan, src, dst, direction):
    """One cuFFT execution of ``plan`` from ``src`` to ``dst`` (``(flat array, base)``): every
    batch read first (an in-place pass reads before it writes), each written once."""
    dims = plan.dims
    in_dims, out_dims = list(dims), list(dims)
    if plan.transform == "r2c":
        out_dims[-1] = dims[-1] // 2 + 1
    if plan.transform == "c2r":
        in_dims[-1] = dims[-1] // 2 + 1
    oi, oo = _offsets(plan.in_layout, in_dims), _offsets(plan.out_layout, out_dims)
    if plan.basic_layout:
        # planned with NULL embeds: cuFFT reads and writes its basic layout, which must be
        # where the layouts read from the strides put every element
        for lay, d, o in ((plan.in_layout, in_dims, oi), (plan.out_layout, out_dims, oo)):
            np.testing.assert_array_equal(o, _offsets(Layout(tuple(d), 1, math.prod(d)), d))
            assert plan.batch <= 1 or lay.dist == math.prod(d)
    (s, bs), (d, bd) = src, dst
    n = math.prod(dims)
    ys = []
    for k in range(plan.batch):
        x = s[bs + k * plan.in_layout.dist + oi].astype(np.complex128 if plan.transform != "r2c"
                                                        else np.float64)
        if plan.transform == "c2c":
            y = np.fft.fftn(x) if direction == _lib.CUFFT_FORWARD else np.fft.ifftn(x) * n
        elif plan.transform == "r2c":
            y = np.fft.rfftn(x)
        else:
            y = np.fft.irfftn(x, s=dims, axes=tuple(range(len(dims)))) * n
        ys.append(y)
    seen = set()
    for k, y in enumerate(ys):
        idx = bd + k * plan.out_layout.dist + oo
        flat = set(idx.ravel().tolist())
        assert len(flat) == idx.size and not flat & seen, "two outputs at one address"
        assert min(flat) >= 0 and max(flat) < d.size, "an output outside its buffer"
        seen |= flat
        d[idx] = y


def _flat(arr: np.ndarray):
    """``(flat element array, element offset of arr[0, ...])`` of the memory under ``arr``."""
    base = arr
    while isinstance(base.base, np.ndarray):
        base = base.base
    flat = base.reshape(-1).view(np.uint8).view(arr.dtype)
    off = arr.__array_interface__["data"][0] - flat.__array_interface__["data"][0]
    assert off % arr.itemsize == 0
    return flat, off // arr.itemsize


def emulate(call, x: np.ndarray, out: np.ndarray | None):
    """What ``call.run`` computes, on host memory: the recipe's staging and passes, cuFFT's
    executions emulated, the norm scale, the copy into ``out``."""
    r = call.recipe
    bufs = {"x": _flat(x)}
    if r.stage is not None:
        stage = np.zeros(r.stage_nbytes // r.stage[2].itemsize, r.stage[2])
        target = as_strided(stage.view(np.uint8).view(x.dtype), r.x[0], r.stage[1])
        target[...] = x if r.trunc is None else x[r.trunc]
        bufs["stage"] = (stage, 0)
    if out is not None and r.out_direct:
        res = out
        bufs["res"] = _flat(out)
    else:
        flat = np.full(r.res_nbytes // r.res[2].itemsize, np.nan, r.res[2])
        res = as_strided(flat, r.res[0], r.res[1])
        bufs["res"] = (flat, 0)
    for plan, src, dst, direction in call._steps:
        _exec(plan, bufs[src], bufs[dst], direction)
    if r.scale != 1.0:
        flat, base = bufs["res"]
        count = r.scale_count // (2 if r.res[2].kind == "c" else 1)
        flat[base:base + count] *= r.scale
    if out is not None and res is not out:
        out[...] = res
        return out
    return res


def _numpy(op, x, n, axes, norm):
    fn = getattr(np.fft, op)
    form = recipe_mod.OPS[op][2]
    x = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    if form == 1:
        return fn(x, n=n, axis=axes, norm=norm)
    return fn(x, s=n, axes=axes, norm=norm)


# -- drawing problems -------------------------------------------------------------------------------
@st.composite
def _layouts(draw, shape, dtype):
    """A host array of ``shape`` and ``dtype`` with drawn strides: a storage order, padding,
    every other element, or a reversed axis."""
    nd = len(shape)
    order = draw(st.permutations(range(nd)))
    pad = [draw(st.integers(0, 2)) for _ in range(nd)]
    step = [draw(st.sampled_from((1, 1, 1, 2))) for _ in range(nd)]
    flip = draw(st.sampled_from([None] + list(range(nd))))
    store = [shape[a] * step[a] + pad[a] for a in order]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    base = rng.standard_normal(store)
    if dtype.kind == "c":
        base = base + 1j * rng.standard_normal(store)
    base = base.astype(dtype)
    inv = np.argsort(order)
    view = base.transpose(inv)[tuple(slice(0, shape[a] * step[a], step[a]) for a in range(nd))]
    if flip is not None:
        view = np.flip(view, axis=flip)
    assert view.shape == tuple(shape)
    return view


@st.composite
def problems(draw):
    nd = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(nd))
    op = draw(st.sampled_from(sorted(recipe_mod.OPS)))
    transform, _, form = recipe_mod.OPS[op]
    if form == 2 and nd < 2:
        nd, shape = 2, shape + (3,)
    dt = draw(st.sampled_from([C128, F64, C64, F32] if transform != "r2c" else [F64, F32]))
    if form == 1:
        axes = draw(st.integers(-nd, nd - 1))
        n = draw(st.one_of(st.none(), st.integers(1, 7)))
    else:
        k = 2 if form == 2 else draw(st.integers(1, nd))
        axes = tuple(draw(st.permutations(range(nd)))[:k])
        if form == 2 and draw(st.booleans()):
            axes = (-2, -1)
        n = draw(st.one_of(st.none(), st.tuples(*[st.sampled_from((-1, 1, 2, 3, 6))] * k)))
    norm = draw(st.sampled_from([None, "backward", "ortho", "forward"]))
    x = draw(_layouts(shape, dt))
    return op, x, n, axes, norm


def _call(op, x, n, axes, norm, out=None):
    o = None if out is None else (out.shape, out.strides, out.dtype)
    r = recipe_mod.recipe(op, x.shape, x.strides, x.dtype, n, axes, norm, o)
    return oneshot.FFTCall(r, DEV)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.data())
def test_recipes_compute_numpy_fft(problem, data):
    op, x, n, axes, norm = problem
    try:
        want = _numpy(op, x, n, axes, norm)
    except ValueError:
        with pytest.raises(ValueError, match=op):
            _call(op, x, n, axes, norm)
        return
    out = None
    if data.draw(st.booleans(), label="with out"):
        dt = np.dtype(np.float32 if x.dtype in (F32, C64) else np.float64)
        if want.dtype.kind == "c":
            dt = np.result_type(dt, np.complex64)
        out = data.draw(_layouts(want.shape, dt), label="out")
    call = _call(op, x, n, axes, norm, out)
    got = emulate(call, x, out)
    assert got.shape == want.shape and got.dtype.kind == want.dtype.kind
    tol = 1e-4 if got.dtype in (F32, C64) else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()),
                               err_msg=repr(call))
    # A C-contiguous input over trailing axes is read in place, into a C-contiguous result.
    r = call.recipe
    if out is None and r.stage is None and x.flags.c_contiguous:
        # (an axis of length 1 may have any stride: it is never stepped along)
        c_order = all(got_s == want_s for got_s, want_s, n in zip(
            r.res[1], layout.c_strides(r.res[0], r.res[2].itemsize), r.res[0]) if n > 1)
        assert c_order or not set(range(x.ndim - len(r.axes), x.ndim)) == set(r.axes), \
            repr(call)


@pytest.mark.parametrize("op, kw, stage, contiguous", [
    ("fft", dict(axis=-1), False, True),                     # the common case: no copy
    ("fft", dict(axis=0), False, True),                      # batch inside: still no copy
    ("rfft", dict(axis=-1), False, True),
    ("fftn", dict(axes=(1, 2)), False, True),
    ("fft", dict(axis=1), True, False),                      # batch axes both sides of axis 1
    ("irfft", dict(axis=-1), True, True),                    # cuFFT overwrites c2r input
    ("fft", dict(axis=-1, n=12), True, True),                # zero-padding
    ("fft", dict(axis=-1, n=3), False, True),                # truncation is a view
])
def test_what_is_copied(op, kw, stage, contiguous):
    dt = F32 if op == "rfft" else C64
    shape = (4, 6, 8)
    n = kw.pop("n", None)
    axes = kw.pop("axis", kw.pop("axes", None))
    r = recipe_mod.recipe(op, shape, layout.c_strides(shape, dt.itemsize), dt, n, axes)
    assert (r.stage is not None) == stage
    assert (r.res[1] == layout.c_strides(r.res[0], r.res[2].itemsize)) == contiguous


def test_four_to_six_axes_take_two_passes():
    x = np.random.default_rng(1).standard_normal((2, 3, 2, 4, 3)).astype(F64)
    for op, axes in (("fftn", (0, 1, 2, 3, 4)), ("rfftn", (4, 0, 2, 1)), ("irfftn", (0, 1, 2, 3))):
        call = _call(op, x, None, axes, "ortho")
        assert len(call.plans) == 2
        np.testing.assert_allclose(emulate(call, x, None), _numpy(op, x, None, axes, "ortho"),
                                   rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match=r"fftn: axes names 7 axes; one call transforms at "
                                         r"most 6"):
        recipe_mod.recipe("fftn", (1,) * 7, (8,) * 7, C64)


def test_s_without_axes_is_the_last_axes():
    x = np.ones((3, 4, 5), C128)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        want = np.fft.fftn(x, s=(6, 2))
    call = _call("fftn", x, (6, 2), None, None)
    np.testing.assert_allclose(emulate(call, x, None), want, atol=1e-12)


# -- the layout reader -----------------------------------------------------------------------------
def _side(shape, strides, elem=8, complex_=True):
    return Side(tuple(shape), tuple(strides), complex_, elem)


@pytest.mark.parametrize("shape, strides, t, b, want", [
    ((8, 64), (512, 8), (1,), (0,), Layout((64,), 1, 64)),            # rows
    ((8, 64), (512, 8), (0,), (1,), Layout((8,), 64, 1)),             # columns
    ((4, 8, 16), (1024, 128, 8), (1, 2), (0,), Layout((8, 16), 1, 128)),
    ((4, 8, 16), (2048, 256, 8), (1, 2), (0,), Layout((8, 32), 1, 256)),   # padded rows
    ((4, 8, 16), (2048, 256, 16), (1, 2), (0,), Layout((8, 16), 2, 256)),  # every other
    ((3, 5, 7), (560, 8, 80), (1,), (0, 2), Layout((5,), 1, 10)),     # batch axes merged
    ((1, 6), (999, 8), (1,), (0,), Layout((6,), 1, 6)),               # length 1: any stride
    ((6, 1), (8, 4), (0, 1), (), Layout((6, 1), 1, 6)),
])
def test_describe(shape, strides, t, b, want):
    assert describe(_side(shape, strides), t, b) == want


@pytest.mark.parametrize("shape, strides, t, b, why", [
    ((8, 64), (512, -8), (1,), (0,), "positive strides"),
    ((8, 64), (0, 8), (1,), (0,), "positive strides"),
    ((8, 64), (512, 12), (1,), (0,), "not a whole number of 8-byte elements"),
    ((4, 8, 16), (1024, 8, 64), (1, 2), (0,), "whole rows of the next"),
    ((4, 8, 16), (1024, 128, 8), (1,), (0, 2), "do not merge into one batch dimension"),
])
def test_describe_refuses_with_the_reason(shape, strides, t, b, why):
    with pytest.raises(LayoutError, match=why):
        describe(_side(shape, strides), t, b)


def test_plan_layouts_needs_one_order_for_both_arrays():
    c = _side((4, 6), (48, 8))
    f = _side((4, 6), (8, 32))
    assert plan_layouts(c, c, (0, 1), False)[:2] == ((0, 1), ())
    assert plan_layouts(f, f, (0, 1), False)[:2] == ((1, 0), ())
    assert plan_layouts(c, f, (1,), False)[2:] == (Layout((6,), 1, 6), Layout((6,), 4, 1))
    with pytest.raises(LayoutError):
        plan_layouts(c, f, (0, 1), False)      # no order suits both transposes
    # a real transform keeps its halved axis innermost
    r = _side((4, 6), (8, 32), elem=4, complex_=False)
    with pytest.raises(LayoutError):
        plan_layouts(r, _side((4, 4), (8, 32)), (0, 1), True)


@pytest.mark.parametrize("axes, why", [
    ((0, 0), "names an axis twice"), ((2,), "out of range"), ((-3,), "out of range"),
    ((), "names no axis"), ("01", "must be an int or a sequence"), ((0.5,), "must hold ints"),
    ((True,), "must hold ints"),
])
def test_check_axes(axes, why):
    with pytest.raises((TypeError, ValueError), match=why):
        layout.check_axes(axes, 2, "op: axes")


def test_dense_and_permuted_strides():
    assert layout.permuted_strides((2, 3, 4), 8, (1, 0, 2)) == (32, 64, 8)
    assert layout.dense((2, 3, 4), (32, 64, 8), 8)
    assert not layout.dense((2, 3, 4), (32, 64, 16), 8)
    assert layout.dense((2, 1, 4), (32, 999, 8), 8)


# -- FFTPlan: construction and its checks -------------------------------------------------------
def test_plan_reads_the_layout_without_a_call():
    x = fake((64, 16), C64)
    p = cl.cufft.FFTPlan(x, axes=(0,))
    assert (p.transform, p.dims, p.batch, p.lengths) == ("c2c", (64,), 16, (64,))
    assert p.in_layout == Layout((64,), 16, 1) and p.out_layout == p.in_layout
    text = repr(p)
    assert "c2c float32 lengths (64,) x batch 16" in text and "stride 16" in text
    assert "not planned" in text
    r2c = cl.cufft.FFTPlan(fake((4, 10), F32))
    assert r2c.transform == "r2c" and r2c.out_desc[0] == (4, 6)
    c2r = cl.cufft.FFTPlan(fake((4, 6), C128), fake((4, 11), F64))
    assert c2r.transform == "c2r" and c2r.lengths == (4, 11)
    assert cl.cufft.FFTPlan(fake((6,), C64), transform="c2r", lengths=(11,)).out_desc[0] == (11,)


def test_plan_half_precision():
    half = cl.cufft.FFTPlan(fake((4, 16), F16), transform="r2c")
    assert half.out_desc == ((4, 9, 2), (36, 4, 2), F16)
    assert half.precision.name == "float16" and half.out_elem == 4
    c2c = cl.cufft.FFTPlan(fake((4, 16, 2), F16), transform="c2c", axes=1)
    assert c2c.dims == (16,) and c2c.batch == 4
    with pytest.raises(ValueError, match="FFTPlan: transform is required for float16"):
        cl.cufft.FFTPlan(fake((4, 16), F16))
    with pytest.raises(ValueError, match="power-of-2 lengths only"):
        cl.cufft.FFTPlan(fake((4, 12), F16), transform="r2c")
    with pytest.raises(ValueError, match=r"\(\.\.\., 2\) pairs"):
        cl.cufft.FFTPlan(fake((4, 16), F16), transform="c2c")
    with pytest.raises(ValueError, match="real side's transforms contiguous"):
        cl.cufft.FFTPlan(fake((4, 16), F16, strides=(64, 4)), transform="r2c")


# -- the basic layout: NULL inembed / onembed where the arrays allow ----------------------------
# cuFFT may run an advanced-layout plan with other kernels even when its numbers describe the
# basic layout (batched 1-D R2C of 2^18..2^22 points ran ~20% slower than CuPy's NULL-embed
# plans on an H100), so contiguous problems must plan with NULL and the rest keep theirs.
@pytest.mark.parametrize("transform, dims, batch, lin, lout, want", [
    ("c2c", (1024,), 16384, Layout((1024,), 1, 1024), Layout((1024,), 1, 1024), True),
    ("r2c", (262144,), 64, Layout((262144,), 1, 262144), Layout((131073,), 1, 131073), True),
    ("c2r", (10,), 4, Layout((6,), 1, 6), Layout((10,), 1, 10), True),
    ("r2c", (6, 10), 3, Layout((6, 10), 1, 60), Layout((6, 6), 1, 36), True),
    ("c2c", (4, 6, 8), 2, Layout((4, 6, 8), 1, 192), Layout((4, 6, 8), 1, 192), True),
    ("r2c", (16,), 1, Layout((16,), 1, 999), Layout((9,), 1, 9), True),   # one: no dist read
    ("r2c", (8,), 4, Layout((8,), 1, 8), Layout((5,), 1, 8), False),      # padded out rows
    ("r2c", (8,), 4, Layout((8,), 1, 8), Layout((8,), 1, 8), False),      # out not halved
    ("c2r", (8,), 4, Layout((5,), 1, 5), Layout((8,), 1, 10), False),     # padded out rows
    ("r2c", (6, 10), 3, Layout((6, 10), 1, 60), Layout((6, 7), 1, 42), False),  # padded embed
    ("c2c", (24,), 3, Layout((24,), 3, 1), Layout((24,), 3, 1), False),   # inner batch axis
    ("c2c", (8,), 4, Layout((8,), 1, 8), Layout((8,), 2, 16), False),     # every other element
])
def test_is_basic(transform, dims, batch, lin, lout, want):
    assert layout.is_basic(transform, dims, batch, lin, lout) is want


@pytest.mark.parametrize("make, basic", [
    (lambda: cl.cufft.FFTPlan(fake((64, 262144), F32), axes=-1), True),        # rfft 64x2^18
    (lambda: cl.cufft.FFTPlan(fake((16384, 1024), C64), axes=-1), True),
    (lambda: cl.cufft.FFTPlan(fake((1, 1 << 24), F32), axes=-1), True),
    (lambda: cl.cufft.FFTPlan(fake((4, 8, 10), F64), axes=(1, 2)), True),
    (lambda: cl.cufft.FFTPlan(fake((4, 6), C64), fake((4, 10), F32)), True),    # c2r
    (lambda: cl.cufft.FFTPlan(fake((4, 16), F16), transform="r2c"), True),
    (lambda: cl.cufft.FFTPlan(fake((64, 16), C64), axes=(0,)), False),          # columns
    (lambda: cl.cufft.FFTPlan(fake((4, 8), F32), fake((4, 5), C64, strides=(64, 8)),
                              axes=-1), False),                                   # padded out
    (lambda: cl.cufft.FFTPlan(fake((4, 8), F32, strides=(64, 4)), axes=-1), False),  # padded in
])
def test_contiguous_problems_plan_the_basic_layout(make, basic):
    p = make()
    assert p.basic_layout is basic
    assert ("basic layout" in repr(p)) is basic


class _FakeCufft:
    """Records cufftXtMakePlanMany's arguments: what a plan hands cuFFT."""

    def __init__(self):
        self.made = []
        self.destroyed = []

    def cufftCreate(self, ref):
        ref._obj.value = 7
        return 0

    def cufftSetAutoAllocation(self, h, on):
        return 0

    def cufftXtMakePlanMany(self, h, rank, n, inembed, istride, idist, itype, onembed,
                            ostride, odist, otype, batch, ws, etype):
        embed = lambda e: None if e is None else tuple(e)       # noqa: E731
        self.made.append(dict(rank=rank, n=tuple(n), inembed=embed(inembed), istride=istride,
                              idist=idist, onembed=embed(onembed), ostride=ostride,
                              odist=odist, batch=batch))
        ws._obj.value = 4096
        return 0

    def cufftDestroy(self, h):
        self.destroyed.append(h)
        return 0


class _FakeDriver:
    def cuCtxSetCurrent(self, ctx):
        return 0


def test_planning_passes_null_embeds_for_the_basic_layout(monkeypatch):
    lib = _FakeCufft()
    monkeypatch.setattr(plan_mod._lib, "get", lambda: lib)
    monkeypatch.setattr(plan_mod._drv, "get", lambda: _FakeDriver())
    # the benchmark's slow row, through the one-shot's recipe: x read in place, one r2c pass
    r = recipe_mod.recipe("rfft", (64, 262144), (262144 * 4, 4), F32)
    call = oneshot.FFTCall(r, DEV).plan()
    assert [p.basic_layout for p in call.plans] == [True]
    assert lib.made[-1] == dict(rank=1, n=(262144,), inembed=None, istride=1, idist=262144,
                                onembed=None, ostride=1, odist=131073, batch=64)
    assert call.work_area_bytes == 4096 and "basic layout" in repr(call)
    call.close()
    # an advanced layout keeps its embeds: the rows of out padded to 8 complex elements
    p = cl.cufft.FFTPlan(fake((4, 8), F32), fake((4, 5), C64, strides=(64, 8)),
                         axes=-1).plan()
    assert lib.made[-1] == dict(rank=1, n=(8,), inembed=(8,), istride=1, idist=8,
                                onembed=(5,), ostride=1, odist=8, batch=4)
    p.close()
    assert lib.destroyed == [7, 7]


@pytest.mark.parametrize("args, kw, err, match", [
    ((None,), {}, TypeError, r"FFTPlan: x is required \(got None\)"),
    ((fake((8,), np.int32),), {}, TypeError, "FFTPlan: x has dtype int32; cuFFT transforms"),
    ((fake((8,), F32),), dict(transform="c2r"), TypeError, "x has dtype float32, but a c2r"),
    ((fake((8,), C64), fake((8,), F64)), dict(transform="c2r"), TypeError,
     "out has dtype float64"),
    ((fake((8,), C64),), dict(transform="dft"), ValueError, "transform must be one of"),
    ((fake((8,), C64),), dict(transform=3), TypeError, "transform must be one of"),
    ((fake((8,), C64),), dict(axes=(0, 0)), ValueError, "FFTPlan: axes names an axis twice"),
    ((fake((8,), C64),), dict(axes=1), ValueError, "FFTPlan: axes: axis 1 is out of range"),
    ((fake((2, 2, 2, 2), C64),), {}, ValueError, "axes is required for a 4-d x"),
    ((fake((2, 2, 2, 2), C64),), dict(axes=(0, 1, 2, 3)), ValueError, "at most 3"),
    ((fake((0, 4), C64),), {}, ValueError, "FFT lengths must be positive"),
    ((fake((4, 6), C64),), dict(lengths=(4, 7)), ValueError, "lengths .* do not match"),
    ((fake((4, 6), C64), fake((4, 5), F32)), {}, ValueError, "c2r transform of real length 5"),
    ((fake((4, 6), C64), fake((4, 7), C64)), {}, ValueError, "out has shape"),
    ((fake((8, 4), C64, strides=(8, 64)), fake((8, 4), C64)), {}, ValueError,
     "cuFFT cannot read x .* as one batched transform"),
    ((fake((8, 4), C64, strides=(32, -8)),), {}, ValueError, "positive strides"),
    ((fake((8,), C64), fake((8,), C64, device=DEV1)), {}, ValueError,
     "FFTPlan: out is on device 1"),
    (((8, "f4x"),), {}, TypeError, "FFTPlan: x dtype"),
    (((8, C64, (8, 8)),), {}, ValueError, "strides .* do not match its shape"),
])
def test_plan_refuses_bad_problems(args, kw, err, match):
    with pytest.raises(err, match=match):
        cl.cufft.FFTPlan(*args, **kw)


def test_plan_execute_checks_before_any_call():
    x = fake((8, 16), C64)
    p = cl.cufft.FFTPlan(x, axes=1)
    with pytest.raises(ValueError, match=r"FFTPlan.execute: x has shape \(8, 17\)"):
        p.execute(fake((8, 17), C64))
    with pytest.raises(ValueError, match="FFTPlan.execute: x is on device 1"):
        p.execute(fake((8, 16), C64, device=DEV1))
    with pytest.raises(ValueError, match="FFTPlan.execute: out has shape"):
        p.execute(x, fake((8, 16, 1), C64))
    with pytest.raises(ValueError, match="direction must be 'forward' or 'inverse'"):
        p.execute(x, direction="sideways")
    with pytest.raises(ValueError, match="not aligned to its 8-byte elements"):
        p.execute(fake((8, 16), C64, address=(1 << 40) + 4), fake((8, 16), C64))
    y = fake((8, 16), C64)
    half = fake((8, 16), C64, address=y.address + 64)
    with pytest.raises(ValueError, match="out overlaps x"):
        p.execute(y, half)
    r2c = cl.cufft.FFTPlan(fake((8,), F32))
    with pytest.raises(ValueError, match="r2c transform is always forward"):
        r2c.direction("inverse")
    assert p.direction("inverse") == _lib.CUFFT_INVERSE == p.direction(1)
    p.close()
    p.close()
    with pytest.raises(ClosedError, match="FFTPlan is closed"):
        p.execute(x)
    assert "(closed)" in repr(p)


# -- the one-shots: argument checks, keys, the hit path ------------------------------------------
@pytest.mark.parametrize("call, err, match", [
    (lambda: cl.cufft.fft(None), TypeError, r"fft: a is required \(got None\)"),
    (lambda: cl.cufft.fft(np.ones(4)), TypeError, "fft: a is a host numpy array"),
    (lambda: cl.cufft.fft(fake((4,), np.int32)), TypeError,
     "fft: a has dtype int32; supported: .* convert it to a floating type"),
    (lambda: cl.cufft.fft(fake((4,), F16)), TypeError, "half precision transforms through "
                                                       "cufft.FFTPlan"),
    (lambda: cl.cufft.rfft(fake((4,), C64)), TypeError, "rfft: a has dtype complex64: rfft "
                                                        "transforms real input"),
    (lambda: cl.cufft.fft(fake((4,)), n=0), ValueError, "fft: n must be a positive number"),
    (lambda: cl.cufft.fft(fake((4,)), n=-3), ValueError, "fft: n must be a positive number"),
    (lambda: cl.cufft.fft(fake((4,)), n=2.5), TypeError, "fft: n must be an int"),
    (lambda: cl.cufft.fft(fake((4,)), n=True), TypeError, "fft: n must be an int"),
    (lambda: cl.cufft.fft(fake((4,)), axis=1), ValueError, "fft: axis: axis 1 is out of range"),
    (lambda: cl.cufft.fft(fake((4,)), axis=(0,)), TypeError, "fft: axis must be an int"),
    (lambda: cl.cufft.fftn(fake((4, 4)), axes=(1, -1)), ValueError,
     "fftn: axes names an axis twice"),
    (lambda: cl.cufft.fftn(fake((4, 4)), axes=[0, 1], s=[4]), ValueError,
     "fftn: s .* and axes .* differ in length"),
    (lambda: cl.cufft.fftn(fake((4, 4)), s=(4, 0)), ValueError, r"fftn: s\[1\] must be a "
                                                                r"positive number"),
    (lambda: cl.cufft.fftn(fake((0, 4))), ValueError, "FFT lengths must be positive"),
    (lambda: cl.cufft.irfft(fake((1,))), ValueError, "irfft: the transform length along axis "
                                                     "0 is 0"),
    (lambda: cl.cufft.fft(fake(())), ValueError, "fft: a must have at least one dimension"),
    (lambda: cl.cufft.fft(fake((4,)), norm="unitary"), ValueError, "fft: norm must be None"),
    (lambda: cl.cufft.fft(fake((4,)), norm=["ortho"]), ValueError, "fft: norm must be None"),
    (lambda: cl.cufft.fft(fake((4,)), out=fake((5,))), ValueError, r"fft: out has shape \(5,\)"),
    (lambda: cl.cufft.fft(fake((4,)), out=fake((4,), C128)), TypeError,
     "fft: out has dtype complex128; fft of complex64 writes complex64"),
    (lambda: cl.cufft.fft(fake((4,)), out=fake((4,), device=DEV1)), ValueError,
     "fft: out is on device 1"),
    (lambda: cl.cufft.ifft(fake((8,), address=1 << 44), out=fake((8,), address=(1 << 44) + 8)),
     ValueError, "ifft: out overlaps a"),
])
def test_one_shots_refuse_bad_input_before_any_call(call, err, match):
    with pytest.raises(err, match=match):
        call()


class _Cached:
    """What the front caches in place of an FFTCall, counting its runs."""

    def __init__(self):
        self.runs = 0

    def usable(self):
        return True

    def close(self):
        pass

    def run(self, a, out, s):
        self.runs += 1
        return "result"


def test_a_repeated_call_is_a_cache_hit(monkeypatch):
    built = []

    def build(key, op, a, n, axes, norm, out, stream):
        oneshot.FFT_KEY.check(key)
        built.append(oneshot.FFT_KEY.named(key))
        return cl.runtime.front.insert(key, _Cached(), None)

    monkeypatch.setattr(oneshot, "_build", build)
    x = fake((4, 8), C64)
    assert cl.cufft.fftn(x, axes=[0, 1]) == "result"
    assert cl.cufft.fftn(x, axes=(0, 1)) == "result"        # a list and a tuple: one key
    cl.cufft.fftn(x, axes=(0, 1), norm="ortho")
    cl.cufft.fft(x)
    assert [b["op"] for b in built] == ["fftn", "fftn", "fft"]
    assert built[0] == {"op": "fftn", "shape": (4, 8), "strides": (64, 8), "dtype": C64,
                        "n": None, "axes": (0, 1), "norm": None, "out": None, "device": DEV}
    assert cl.plan_cache.kinds()["cufft"] == 3
    hit = cl.plan_cache.entries("cufft")[0].plan
    assert hit.runs == 2


def test_fftcall_on_a_stand_in_device():
    x = np.zeros((4, 6, 8), C64)
    call = _call("fft", x, 10, 1, "ortho")
    assert len(call.plans) == 1 and call.usable()
    text = repr(call)
    assert "FFTCall fft of complex64 (4, 6, 8) over axes (1,)" in text
    assert "input staged" in text and "scaled by" in text
    call.close()
    assert not call.usable() and all(p.closed for p in call.plans)


# -- the library itself ------------------------------------------------------------------------
def test_loader_entry_and_wheels():
    spec = _loader.LIBRARIES["cufft"]
    assert spec.pathfinder == "cufft" and spec.sonames == ("libcufft.so.12", "libcufft.so.11")
    assert _loader.WHEELS["cufft"] == ("nvidia-cufft", "nvidia-cufft-cu12")


def test_extras_install_the_wheels():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(r.startswith("nvidia-cufft>=") for r in extras["cu13"])
    assert any(r.startswith("nvidia-cufft-cu12>=") for r in extras["cu12"])


def test_importing_cufft_loads_no_library():
    code = ("import cudalibs, cudalibs.cufft as f; from cudalibs import _loader; "
            "assert not _loader.loaded(), _loader.loaded(); assert f._lib.get._bound is None")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_status_table_and_errors():
    names = CufftError.status_names()
    assert names[8] == "CUFFT_INVALID_SIZE" and names[19] == "CUFFT_NVJITLINK_FAILURE"
    assert set(_base.MESSAGES) <= set(names)
    with pytest.raises(CufftError) as info:
        _base.raise_for(9, "cufftXtExec", "<FFTPlan ...>")
    exc = info.value
    assert (exc.library, exc.name, exc.function) == ("cufft", "CUFFT_UNALIGNED_DATA",
                                                     "cufftXtExec")
    assert "not aligned" in str(exc) and "<FFTPlan ...>" in str(exc)
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is CufftError and str(again) == str(exc)
    assert "unknown cufft status 99" in str(CufftError(99))


def test_version_needs_no_gpu(monkeypatch):
    monkeypatch.undo()          # the real library this time
    try:
        major, minor, patch = cl.cufft.version()
    except cl.LibraryNotFoundError as exc:
        pytest.skip(f"cuFFT is not installed: {exc}")
    assert major in (11, 12) and cl.cufft.version_int() == major * 1000 + minor * 100 + patch
    lib = _lib.get()
    assert not lib.missing, lib.missing
