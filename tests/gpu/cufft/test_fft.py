"""cuFFT against float64 numpy.fft: every one-shot and transform kind, 1/2/3-D and batched,
strided layouts, float32 and float64 (and half precision where cuFFT has it), every norm;
plans under CUDA graph capture and from many threads; the work area and the plan's lifetime.

Outputs given through ``out=`` are poisoned (NaN) first, so an element left unwritten fails.
Each drawn problem is called three times with fresh inputs in the same layout, so the second
and third calls take the cached plan; the bounds are :func:`._util.fft_rtol` (its notes
justify them).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cufft
from cudalibs import testing as T

from .._threads import match_serial
from ._util import (LAYOUTS, complex_of_pairs, fft_rtol, on_device, pairs_of_complex,
                    poisoned, random_input, reference)

GPU = settings(max_examples=40, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])
C64, C128, F32, F64, F16 = (np.dtype(t) for t in (np.complex64, np.complex128, np.float32,
                                                   np.float64, np.float16))
#: Lengths drawn: powers of two, 3/5/7-smooth ones, and primes (Bluestein's algorithm).
LENGTHS = st.sampled_from([1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 30, 31, 64, 97, 100, 128, 210])
CALLS = 3


def _out_dtype(op, dt):
    single = dt in (F32, C64)
    if op.startswith("irfft"):
        return F32 if single else F64
    return C64 if single else C128


def _check(got, want, dt, lengths, msg):
    T.assert_close(got, want, rtol=fft_rtol(dt, lengths), msg=msg)


# -- the one-shots against numpy.fft -------------------------------------------------------------
def _halved_lengths(m: int):
    """Output lengths of a complex-to-real transform of ``m`` points that keep the input a real
    signal's spectrum: odd ones (no Nyquist point), and even ones whose Nyquist point is past
    the input (zero-padding).  Elsewhere numpy and cuFFT may keep different parts of values
    such a spectrum cannot have (the imaginary part of a cut-off Nyquist point)."""
    return st.one_of(st.sampled_from([1, 3, 5, 7, 17, 31, 97]),
                     st.integers(m - 1, m + 40).map(lambda k: 2 * k))


@st.composite
def _problems(draw):
    """``(op, shape, dtype, keyword arguments, norm, layout, give_out, spectrum_of)``: the
    input's ``shape``, or for the complex-to-real ops the real signal whose spectrum (over
    the op's axes) is the input, ``spectrum_of``."""
    op = draw(st.sampled_from(["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2",
                               "irfft2", "fftn", "ifftn", "rfftn", "irfftn"]))
    form = cufft.recipe.OPS[op][2]
    c2r = op.startswith("irfft")
    nd = draw(st.integers(2 if form == 2 else 1, 3))
    shape = [draw(LENGTHS) for _ in range(nd)]
    single = draw(st.booleans())
    if op.startswith("rfft"):
        dt = F32 if single else F64
    elif c2r:
        dt = C64 if single else C128
    else:
        dt = draw(st.sampled_from([C64, F32] if single else [C128, F64]))
    norm = draw(st.sampled_from([None, "backward", "ortho", "forward"]))
    if form == 1:
        axes = draw(st.integers(-nd, nd - 1))
        chosen = (axes,)
    else:
        k = 2 if form == 2 else draw(st.integers(1, nd))
        axes = tuple(draw(st.permutations(range(nd)))[:k])
        if form == 2 and draw(st.booleans()):
            axes = (-2, -1)
        chosen = axes
    spectrum_of = None
    if c2r:
        # the input: the spectrum of a real signal of `shape` (its halved axis even, so that
        # the default output length 2 * (m - 1) is the signal's own)
        last = chosen[-1]
        shape[last] = 2 * max(1, shape[last] // 2)
        spectrum_of = tuple(shape)
        m = shape[last] // 2 + 1
        n_last = draw(st.one_of(st.none(), _halved_lengths(m)), label="halved length")
        shape[last] = m
        if form == 1:
            kw = dict(n=n_last, axis=axes)
        else:
            s = None if n_last is None else tuple(-1 for _ in chosen[:-1]) + (n_last,)
            kw = dict(s=s, axes=axes)
    elif form == 1:
        kw = dict(n=draw(st.one_of(st.none(), LENGTHS)), axis=axes)
    else:
        kw = dict(s=draw(st.one_of(st.none(), st.tuples(*[LENGTHS] * len(chosen)))), axes=axes)
    layout = draw(st.sampled_from(LAYOUTS))
    give_out = draw(st.booleans())
    return op, tuple(shape), dt, kw, norm, layout, give_out, spectrum_of


def _input(shape, dt, rng, spectrum_of, axes):
    if spectrum_of is None:
        return random_input(shape, dt, rng)
    axes = (axes,) if isinstance(axes, int) else axes
    return np.fft.rfftn(random_input(spectrum_of, F64, rng), axes=axes).astype(dt)


@GPU
@given(problem=_problems(), seed=st.integers(0, 2**32 - 1))
def test_one_shots_match_numpy(device, problem, seed):
    op, shape, dt, kw, norm, layout, give_out, spectrum_of = problem
    rng = np.random.default_rng(seed)
    fn = getattr(cufft, op)
    n, axes = kw.get("n", kw.get("s")), kw.get("axis", kw.get("axes"))
    before = None
    for call in range(CALLS):
        x = _input(shape, dt, rng, spectrum_of, axes)
        assert x.shape == shape
        want = reference(op, x, norm=norm, **kw)
        out = poisoned(want.shape, _out_dtype(op, dt)) if give_out else None
        got = fn(on_device(x, layout), norm=norm, out=out, **kw)
        assert got.shape == want.shape and got.dtype == _out_dtype(op, dt)
        if out is not None:
            assert got is out
        lengths = cufft.recipe.recipe(op, x.shape, x.strides, x.dtype, n, axes, norm).lengths
        _check(got, want, dt, lengths, f"{op}{kw} norm={norm} {layout} {shape} call {call}")
        count = cl.plan_cache.kinds().get("cufft", 0)
        if before is not None:
            assert count == before, "a repeated call planned again instead of a cache hit"
        before = count


@pytest.mark.parametrize("dt", [C64, C128])
def test_large_batched_and_2d(device, rng, dt):
    # Sizes from the benchmark's range, where an error grows with log2 N.
    for shape, op, kw in (((4, 1 << 18), "fft", {}), ((256, 256), "fft2", {}),
                          ((64, 64, 64), "fftn", {}), ((3, 1 << 16), "ifft", {"n": 100003})):
        x = random_input(shape, dt, rng)
        got = getattr(cufft, op)(cl.to_device(x), **kw)
        want = reference(op, x, **kw)
        _check(got, want, dt, want.shape[-1:] if op in ("fft", "ifft") else want.shape,
               f"{op} {shape}")


def test_norm_scaling_is_applied_on_the_device(device, rng):
    x = random_input((6, 40), C128, rng)
    dx = cl.to_device(x)
    for norm in (None, "backward", "ortho", "forward"):
        T.assert_close(cufft.fft(dx, norm=norm), np.fft.fft(x, norm=norm), rtol=1e-13)
        T.assert_close(cufft.ifft(dx, norm=norm), np.fft.ifft(x, norm=norm), rtol=1e-13)
    back = cufft.irfft(cufft.rfft(cl.to_device(x.real.copy()), norm="ortho"), n=40,
                       norm="ortho")
    T.assert_close(back, x.real, rtol=1e-13)


def test_more_than_three_axes(device, rng):
    x = random_input((3, 4, 2, 5, 6), C128, rng)
    T.assert_close(cufft.fftn(cl.to_device(x)), np.fft.fftn(x), rtol=1e-12)
    r = random_input((3, 4, 2, 5, 6), F64, rng)
    spec = cufft.rfftn(cl.to_device(r), axes=(4, 0, 1, 3))
    T.assert_close(spec, np.fft.rfftn(r, axes=(4, 0, 1, 3)), rtol=1e-12)
    T.assert_close(cufft.irfftn(spec, s=(6, 3, 4, 5), axes=(4, 0, 1, 3)), r, rtol=1e-12)


def test_input_is_not_modified(device, rng):
    # cuFFT overwrites a complex-to-real transform's input: the one-shot passes a copy.
    z = np.fft.rfft2(random_input((12, 16), F32, rng)).astype(C64)
    dz = cl.to_device(z)
    cufft.irfft2(dz)
    np.testing.assert_array_equal(dz.get(), z)


# -- plans: every kind, precision, rank and layout ---------------------------------------------------
def _padded(shape, dtype, pad=3):
    """An uninitialised device array of ``shape`` whose rows are ``pad`` elements longer."""
    big = cl.empty(shape[:-1] + (shape[-1] + pad,), dtype)
    return big[..., :shape[-1]]


@pytest.mark.parametrize("transform", ["c2c", "r2c", "c2r"])
@pytest.mark.parametrize("single", [True, False], ids=["single", "double"])
@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("layout", ["contiguous", "padded", "inner-batch"])
def test_plan_kinds(device, rng, transform, single, rank, layout):
    real, cplx = (F32, C64) if single else (F64, C128)
    batch = 3
    dims = (24, 10, 6)[:rank]
    halved = dims[:-1] + (dims[-1] // 2 + 1,)
    in_shape = dims if transform != "c2r" else halved
    out_shape = dims if transform != "r2c" else halved
    in_dt = real if transform == "r2c" else cplx
    out_dt = real if transform == "c2r" else cplx
    if layout == "inner-batch":        # the batch axis innermost: element strides of 3
        x_host = random_input(in_shape + (batch,), in_dt, rng)
        axes = tuple(range(rank))
        x = cl.to_device(x_host)
        out = cl.full(out_shape + (batch,), T.poison_value(out_dt), out_dt)
    else:
        x_host = random_input((batch,) + in_shape, in_dt, rng)
        axes = tuple(range(1, rank + 1))
        if layout == "padded":         # inembed / onembed longer than the rows
            x = _padded(x_host.shape, in_dt)
            x.copy_(x_host)
            out = _padded((batch,) + out_shape, out_dt)
            out.fill(T.poison_value(out_dt))
        else:
            x = cl.to_device(x_host)
            out = None
    if transform == "c2r":
        # a Hermitian-consistent input: the spectrum of a real signal
        sig = random_input(x_host.shape[:-1] + (dims[-1],) if layout != "inner-batch" else
                           dims + (batch,), real, rng)
        x_host = np.fft.rfftn(sig, axes=axes).astype(cplx)
        x.copy_(x_host)
    with cufft.FFTPlan(x, out, axes=axes, transform=transform, lengths=dims) as plan:
        assert plan.transform == transform and plan.dims[-1] == dims[-1]
        res = plan.execute(x, out)
        h = x_host.astype(np.complex128 if in_dt.kind == "c" else np.float64)
        if transform == "c2c":
            want = np.fft.fftn(h, axes=axes)
        elif transform == "r2c":
            want = np.fft.rfftn(h, axes=axes)
        else:
            want = np.fft.irfftn(h, s=dims, axes=axes) * np.prod(dims)   # unnormalised
        _check(res, want, in_dt, dims, repr(plan))
        if transform == "c2c":
            x.copy_(want.astype(cplx))
            inv = plan.execute(x, out, direction="inverse")
            _check(inv, h * np.prod(dims), cplx, dims, "inverse " + repr(plan))
        assert "work area" in repr(plan)


def test_plan_in_place(device, rng):
    x = random_input((5, 32, 12), C64, rng)
    dx = cl.to_device(x)
    with cufft.FFTPlan(dx, dx, axes=(1, 2)) as plan:
        assert plan.execute(dx, dx) is dx
        _check(dx, np.fft.fftn(x.astype(C128), axes=(1, 2)), C64, (32, 12), "in place")


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("transform", ["c2c", "r2c", "c2r"])
def test_half_precision(device, rng, half, transform):
    dt = cl.dtypes.lookup(half).numpy
    need = (5, 3) if half == "float16" else (8, 0)
    if device.compute_capability < need:
        pytest.skip(f"{half} FFTs need compute capability {need[0]}.{need[1]}")
    dims, batch = (16, 32), 4
    if transform == "r2c":
        x_host = random_input((batch,) + dims, dt, rng)
        h = x_host.astype(np.float64)
    else:
        shape = (batch,) + (dims if transform == "c2c" else (16, 17))
        z = random_input(shape, np.complex64, rng) if transform == "c2c" else np.fft.rfftn(
            random_input((batch,) + dims, np.float32, rng), axes=(1, 2))
        x_host = pairs_of_complex(z / max(1.0, np.abs(z).max()), dt)
        h = complex_of_pairs(x_host)
    x = cl.to_device(x_host)
    with cufft.FFTPlan(x, axes=(1, 2), transform=transform, lengths=dims) as plan:
        out = plan.execute(x)
        got = out.get()
    if transform != "c2r":
        got = complex_of_pairs(got)
    if transform == "c2c":
        want = np.fft.fftn(h, axes=(1, 2))
    elif transform == "r2c":
        want = np.fft.rfftn(h, axes=(1, 2))
    else:
        want = np.fft.irfftn(h, s=dims, axes=(1, 2)) * np.prod(dims)
    T.assert_close(got, want, rtol=fft_rtol(dt, dims), msg=f"{half} {transform}")


# -- CUDA graphs ---------------------------------------------------------------------------------------
def test_plan_and_one_shots_under_capture(device, rng):
    s = cl.Stream(device)
    x = random_input((8, 60), C64, rng)
    r = random_input((8, 60), F32, rng)
    dx, dr = cl.to_device(x, stream=s), cl.to_device(r, stream=s)
    plan = cufft.FFTPlan(dx, axes=1)
    out_plan = cl.empty((8, 60), C64, stream=s)
    out_fft = cl.empty((8, 128), C64, stream=s)       # zero-padded: a stage inside the graph
    out_irfft = cl.empty((8, 60), F32, stream=s)
    spectrum = cl.empty((8, 31), C64, stream=s)

    def step():
        plan.execute(dx, out_plan, stream=s)
        cufft.fft(dx, n=128, norm="ortho", out=out_fft, stream=s)
        cufft.rfft(dr, out=spectrum, stream=s)
        cufft.irfft(spectrum, n=60, out=out_irfft, stream=s)

    step()                      # plans, modules and work areas exist before the capture
    s.sync()
    with cl.graph.capture(s) as g:
        step()
    exe = g.instantiate()
    for _ in range(2):
        x = random_input((8, 60), C64, rng)
        r = random_input((8, 60), F32, rng)
        dx.copy_(x, s)
        dr.copy_(r, s)
        out_plan.fill(complex("nan"), s)
        exe.replay(s)
        s.sync()
        _check(out_plan, np.fft.fft(x.astype(C128)), C64, (60,), "plan")
        _check(out_fft, np.fft.fft(x.astype(C128), n=128, norm="ortho"), C64, (128,), "fft")
        _check(out_irfft, r, F32, (60,), "irfft(rfft)")
    exe.close()
    g.close()
    plan.close()
    s.close()


def test_planning_inside_a_capture_is_refused(device, rng):
    s = cl.Stream(device)
    x = cl.to_device(random_input((4, 77), C64, rng), stream=s)
    s.sync()
    with pytest.raises(cl.CaptureError, match="planning"):
        with cl.graph.capture(s):
            cufft.fft(x, n=91, stream=s)       # a problem never planned before
    fresh = cufft.FFTPlan(x, axes=1)
    with pytest.raises(cl.CaptureError, match="planning an FFT"):
        with cl.graph.capture(s):
            fresh.execute(x, stream=s)
    fresh.execute(x, stream=s)      # the stream and the plan work as before
    s.sync()
    s.close()


# -- threads -------------------------------------------------------------------------------------------
def test_shared_plan_from_threads_is_bitwise_serial(device, rng):
    xs = [cl.to_device(random_input((16, 384), C64, rng)) for _ in range(8)]
    plan = cufft.FFTPlan(xs[0], axes=1)
    calls = [lambda s, x=x: plan.execute(x, stream=s) for x in xs]
    serial = match_serial(device, calls, repeats=6, pick=lambda t, r: ((t + r) % len(xs),),
                          copy_each=True)
    for x, got in zip(xs, serial):
        _check(got[0][1], np.fft.fft(x.get().astype(C128)), C64, (384,), "serial")
    plan.close()


def test_one_shots_from_threads_are_bitwise_serial(device, rng):
    # One cached plan per problem, shared by every thread: padding (a stage), a scale kernel,
    # a real transform with a work area.
    xs = [cl.to_device(random_input((6, 1000), F32, rng)) for _ in range(8)]
    calls = [lambda s, x=x: (cufft.rfft(x, n=1200, norm="ortho", stream=s),
                             cufft.fftn(x, s=(8, 1024), axes=(0, 1), stream=s))
             for x in xs]
    match_serial(device, calls, repeats=6, pick=lambda t, r: ((t + r) % len(xs),))


# -- work area, lifetime -------------------------------------------------------------------------
def test_work_area_comes_from_the_pool_and_goes_back(device, rng):
    x = cl.to_device(random_input((7, 1 << 16), C64, rng))
    plan = cufft.FFTPlan(x, axes=1).plan()
    pool = device.memory_pool
    s = cl.Stream(device)
    plan.execute(x, stream=s)
    s.sync()
    held = pool.used_bytes - pool.cached_bytes
    for _ in range(5):
        out = plan.execute(x, stream=s)
        out.close()
    s.sync()
    assert pool.used_bytes - pool.cached_bytes <= held, "a work area was not given back"
    assert plan.work_area_bytes == plan.workspace_bytes >= 0
    s.close()
    plan.close()


def test_lifetime(device, rng):
    x = cl.to_device(random_input((4, 50), C64, rng))
    plan = cufft.FFTPlan(x, axes=1)
    plan.execute(x)
    assert "work area" in repr(plan) and "not planned" not in repr(plan)
    plan.close()
    plan.close()
    assert plan.closed and "(closed)" in repr(plan)
    with pytest.raises(cl.ClosedError, match="FFTPlan is closed"):
        plan.execute(x)
    # a one-shot's cached plan closed behind the cache's back is replaced
    cufft.fft(x)
    for entry in cl.plan_cache.entries("cufft"):
        entry.plan.close()
    _check(cufft.fft(x), np.fft.fft(x.get().astype(C128)), C64, (50,), "after close")
    assert cl.plan_cache.clear("cufft") >= 1
