"""cuFFT: fast Fourier transforms on the GPU, as plans on the one front, with numpy.fft's
semantics.

- :func:`fft`, :func:`ifft`, :func:`rfft`, :func:`irfft`, :func:`fft2`, :func:`ifft2`,
  :func:`rfft2`, :func:`irfft2`, :func:`fftn`, :func:`ifftn`, :func:`rfftn`, :func:`irfftn`:
  numpy's arguments (``n``/``s``, ``axis``/``axes``, ``norm``, ``out``) plus ``stream``, in
  float32/complex64 and float64/complex128; their plans are found in the one plan cache
  (:data:`FFT_KEY`, kind ``"cufft"``), so a repeated call only queues work.
- :class:`FFTPlan`: one cuFFT plan (``cufftXtMakePlanMany``) of a batch of 1-, 2- or 3-D
  transforms over arrays of one layout, read from their strides without a copy; also in
  float16 and bfloat16 (power-of-2 lengths, complex values as (..., 2) pairs).  Its work area
  comes from the stream-ordered pool on each call's stream, so executions are safe under
  CUDA graph capture and from several threads at once.
- :func:`version`, :func:`version_int`.

``_lib`` holds the raw prototype table of ``libcufft``, loaded on first use; importing this
package loads nothing.

>>> import numpy as np, cudalibs as cl
>>> x = cl.to_device(np.random.rand(8, 1024).astype(np.float32))     # doctest: +SKIP
>>> spectrum = cl.cufft.rfft(x, norm="ortho")                          # doctest: +SKIP
>>> back = cl.cufft.irfft(spectrum, n=1024, norm="ortho")              # doctest: +SKIP
"""

from ._base import version, version_int
from .oneshot import (FFT_KEY, fft, fft2, fftn, ifft, ifft2, ifftn, irfft, irfft2, irfftn,
                      rfft, rfft2, rfftn)
from .plan import FFTPlan

__all__ = ["version", "version_int", "FFTPlan", "FFT_KEY", "fft", "ifft", "rfft", "irfft",
           "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn"]
