"""cuFFT's public names on a GPU, against numpy.fft in float64: every one-shot transform
(``fft`` ... ``irfftn``) with its lengths, axes and ``norm``, in single and double precision;
an ``FFTPlan`` executed forward and inverse (unnormalised); the one-shots' plans under
``FFT_KEY``.

The inverse real transforms read the spectrum of a real signal (``numpy.fft.rfftn`` of one):
on any other input numpy and cuFFT may keep different parts of the values a real signal's
spectrum cannot have (the imaginary parts of its self-conjugate points)."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import testing as T

from .._plans import cached

COMPLEX = {"float32": "complex64", "float64": "complex128"}
NORMS = [None, "ortho", "forward"]


def _signal(shape, dtype, rng, kind, axes=None):
    """Host input of ``shape``: ``"real"`` or ``"complex"`` random values, or ``"spectrum"``:
    the spectrum over ``axes`` of a real signal whose halved axis is ``2 * (m - 1)`` long."""
    if kind == "real":
        return T.random_array(shape, dtype, rng=rng)
    if kind == "complex":
        return T.random_array(shape, COMPLEX[dtype], rng=rng)
    real = list(shape)
    real[axes[-1]] = 2 * (shape[axes[-1]] - 1)
    return np.fft.rfftn(T.random_array(real, np.float64, rng=rng), axes=axes).astype(
        COMPLEX[dtype])


def _check(got, want, dtype, what):
    assert got.shape == want.shape, (what, got.shape, want.shape)
    T.assert_close(got, want, dtype, msg=what)


#: One-dimensional transforms: name -> (cudalibs, numpy, input, lengths to cut and pad to).
#: A half spectrum is padded to an odd or a doubled length only: its last point stays one a
#: real signal's spectrum can have.
ONE_D = {"fft": (cl.cufft.fft, np.fft.fft, "complex", (None, 77, 128)),
         "ifft": (cl.cufft.ifft, np.fft.ifft, "complex", (None, 77, 128)),
         "rfft": (cl.cufft.rfft, np.fft.rfft, "real", (None, 77, 128)),
         "irfft": (cl.cufft.irfft, np.fft.irfft, "spectrum", (None, 77, 256))}


@pytest.mark.parametrize("norm", NORMS, ids=str)
@pytest.mark.parametrize("dtype", list(COMPLEX))
@pytest.mark.parametrize("name", list(ONE_D))
def test_one_dimensional_transforms(device, rng, name, dtype, norm):
    ours, numpys, kind, lengths = ONE_D[name]
    for axis, shape in ((-1, (6, 100)), (0, (100, 6))):
        x = _signal(shape, dtype, rng, kind, (axis,))
        wide = x.astype(np.float64 if kind == "real" else np.complex128)
        dx = cl.to_device(x)
        for n in lengths:
            _check(ours(dx, n=n, axis=axis, norm=norm), numpys(wide, n=n, axis=axis, norm=norm),
                   dtype, f"{name} n={n} axis={axis} norm={norm}")


#: Transforms over several axes: name -> (cudalibs, numpy, input, default axes).
MANY_D = {"fft2": (cl.cufft.fft2, np.fft.fft2, "complex", (-2, -1)),
          "ifft2": (cl.cufft.ifft2, np.fft.ifft2, "complex", (-2, -1)),
          "rfft2": (cl.cufft.rfft2, np.fft.rfft2, "real", (-2, -1)),
          "irfft2": (cl.cufft.irfft2, np.fft.irfft2, "spectrum", (-2, -1)),
          "fftn": (cl.cufft.fftn, np.fft.fftn, "complex", (0, 1, 2)),
          "ifftn": (cl.cufft.ifftn, np.fft.ifftn, "complex", (0, 1, 2)),
          "rfftn": (cl.cufft.rfftn, np.fft.rfftn, "real", (0, 1, 2)),
          "irfftn": (cl.cufft.irfftn, np.fft.irfftn, "spectrum", (0, 1, 2))}


@pytest.mark.parametrize("dtype", list(COMPLEX))
@pytest.mark.parametrize("name", list(MANY_D))
def test_transforms_over_several_axes(device, rng, name, dtype):
    ours, numpys, kind, axes = MANY_D[name]
    shape = (3, 20, 18)
    x = _signal(shape, dtype, rng, kind, axes)
    wide = x.astype(np.float64 if kind == "real" else np.complex128)
    dx = cl.to_device(x)
    _check(ours(dx, norm="ortho"), numpys(wide, norm="ortho"), dtype, f"{name} ortho")
    if kind != "spectrum":
        s = (16, 21)                    # cut one axis, pad the other
        _check(ours(dx, s=s, axes=(0, 1)), numpys(wide, s=s, axes=(0, 1)), dtype,
               f"{name} s={s} axes=(0, 1)")
    else:
        y = _signal(shape, dtype, rng, kind, (0, 1))
        _check(ours(cl.to_device(y), axes=(0, 1)), numpys(y.astype(np.complex128), axes=(0, 1)),
               dtype, f"{name} axes=(0, 1)")


def test_an_fft_plan_forward_and_inverse(device, rng):
    x = _signal((8, 64), "float32", rng, "complex")
    dx = cl.to_device(x)
    plan = cl.cufft.FFTPlan(dx, axes=-1)
    assert isinstance(plan, cl.cufft.FFTPlan) and plan.transform == "c2c"
    spectrum = plan.execute(dx)
    _check(spectrum, np.fft.fft(x.astype(np.complex128), axis=-1), "float32", "forward")
    back = plan.execute(spectrum, direction="inverse")
    # unnormalised, as cuFFT is: the inverse of the forward is 64 times the input
    _check(back, 64 * x.astype(np.complex128), "float32", "inverse")
    plan.close()
    with pytest.raises(cl.ClosedError):
        plan.execute(dx)


def test_the_one_shots_plans_live_under_their_key(device, rng):
    x = _signal((5, 48), "float64", rng, "real")
    dx = cl.to_device(x)
    for _ in range(2):
        _check(cl.cufft.rfft(dx), np.fft.rfft(x), "float64", "rfft")
    (entry,) = cached(cl.cufft.FFT_KEY, op="rfft", shape=dx.shape, dtype=dx.dtype)
    assert entry.key["norm"] is None and entry.plan.usable()
