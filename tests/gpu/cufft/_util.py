"""Shared helpers of the cuFFT GPU tests: the error bound of an FFT, references, layouts.

The bound (:func:`fft_rtol`)
----------------------------
An FFT's error is norm-wise: ``‖ŷ − y‖₂ / ‖y‖₂``.  For a radix-2 Cooley-Tukey FFT of length
``N = 2^L`` whose twiddle factors are accurate to ``μ``, Higham (*Accuracy and Stability of
Numerical Algorithms*, 2nd ed., Theorem 24.2) bounds it by ``L·η / (1 − L·η)`` with
``η = μ + γ₄(√2 + μ)``, ``γ₄ = 4u / (1 − 4u)``: with twiddles correct to about one rounding
(``μ ≈ u``), ``η ≈ (1 + 4√2) u ≈ 6.7 u``.  The mixed-radix kernels cuFFT uses for factors 3, 5
and 7 have constants of the same order per level, and a multi-dimensional transform is the
product of the one-dimensional ones (their ``L`` add up to ``log2`` of the total length).
So the bound used is ``C · u · max(log2 N, 1)`` with ``C = 8``: the 6.7 of the theorem, plus
one rounding of the result to the output type and one of the ``norm`` scale.  Lengths with a
prime factor above 7 go through Bluestein's algorithm (cuFFT's choice for large primes): three
FFTs of a power of two ``M < 4N`` and two pointwise products with chirps, so ``C = 24`` over
``log2(4N)`` there.  A wrong element, a missed write, a wrong stride or a wrong scale all give
errors of order 1, far above these bounds (float32 at ``N = 2^24``: 1.1e-5; float64:
about 2e-14).

The reference is ``numpy.fft`` in float64 / complex128 on the very values the GPU got (half
precision inputs rounded first), so only the GPU's arithmetic is measured.
"""

import math

import numpy as np

import cudalibs as cl
from cudalibs import testing as T

#: The constants of :func:`fft_rtol` (see the module notes).
C_SMOOTH, C_BLUESTEIN = 8.0, 24.0


def _largest_prime_factor(n: int) -> int:
    p, big = 2, 1
    while p * p <= n:
        while n % p == 0:
            big, n = p, n // p
        p += 1
    return max(big, n)


def fft_rtol(dtype, lengths) -> float:
    """The norm-wise relative error bound of an FFT of ``lengths`` computed in the precision of
    ``dtype`` (see the module notes)."""
    dt = np.dtype(dtype)
    real = dt if dt.kind != "c" else np.dtype(np.float32 if dt.itemsize == 8 else np.float64)
    u = T.unit_roundoff(real)
    n = max(math.prod(lengths), 1)
    if all(_largest_prime_factor(m) <= 7 for m in lengths if m > 1):
        return C_SMOOTH * u * max(math.log2(n), 1.0)
    return C_BLUESTEIN * u * math.log2(4 * n)


def reference(op: str, x: np.ndarray, *args, **kwargs) -> np.ndarray:
    """``numpy.fft.<op>`` in float64 / complex128."""
    x = np.asarray(x)
    x = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    return getattr(np.fft, op)(x, *args, **kwargs)


def random_input(shape, dtype, rng) -> np.ndarray:
    """Random values of ``dtype`` (complex ones with both parts drawn), no exact zeros."""
    return T.random_array(shape, dtype, rng=rng)


#: Layouts an input is drawn in.
LAYOUTS = ("C", "F", "padded", "strided")


def on_device(host: np.ndarray, layout: str, stream=None) -> cl.DeviceArray:
    """A device array equal to ``host`` in ``layout``: C-contiguous, its axes reversed in
    memory (F), every row padded, or every other element of a larger array."""
    if layout == "C" or host.ndim == 0:
        return cl.to_device(np.ascontiguousarray(host), stream=stream)
    if layout == "F":
        rev = tuple(range(host.ndim))[::-1]
        return cl.to_device(np.ascontiguousarray(host.transpose(rev)),
                            stream=stream).transpose(rev)
    if layout == "padded":
        pad = np.zeros(host.shape[:-1] + (host.shape[-1] + 3,), host.dtype)
        pad[..., :host.shape[-1]] = host
        return cl.to_device(pad, stream=stream)[..., :host.shape[-1]]
    if layout == "strided":
        big = np.zeros(tuple(2 * n for n in host.shape), host.dtype)
        big[tuple(slice(None, None, 2) for _ in host.shape)] = host
        return cl.to_device(big, stream=stream)[tuple(slice(None, None, 2) for _ in host.shape)]
    raise AssertionError(layout)


def poisoned(shape, dtype, stream=None) -> cl.DeviceArray:
    """A new device array filled with :func:`cudalibs.testing.poison_value`: an element the
    transform forgets to write stays NaN."""
    return cl.full(shape, T.poison_value(dtype), dtype, stream=stream)


def complex_of_pairs(a: np.ndarray) -> np.ndarray:
    """complex128 of a (..., 2) array of (real, imaginary) pairs (half precision)."""
    a = np.asarray(a, np.float64)
    return a[..., 0] + 1j * a[..., 1]


def pairs_of_complex(z: np.ndarray, dtype) -> np.ndarray:
    """The (..., 2) pairs of ``z`` in ``dtype``."""
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)
