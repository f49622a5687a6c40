"""Pointer-array batched GEMMs and the tuning of :func:`~cudalibs.cublas.gemm`'s algorithm.

- :func:`gemm_batched`: one ``cublasGemmBatchedEx`` over lists of matrices anywhere on the
  device;
- :func:`tune_gemm`: the one timer over every ``cublasGemmAlgo_t`` of a problem, the choice
  kept in the tuning store and used by ``gemm(..., algo="tuned")``;
- :func:`algo_cache` / :func:`clear_algo_cache`: the GEMM plans in the one plan cache.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..driver import _lib as _drv
from ..driver.args import sequence
from ..driver.array import byte_extent, empty, spans_overlap
from ..driver.stream import as_stream
from ..runtime.cache import cache
from ..runtime.operand import operand
from . import _lib
from ._base import raise_for
from ._common import alignment, scalar
from .gemm import GEMM_KEY, GemmPlan, check_algo, gemm_operands, plan_for
from .handle import cublas_handle

__all__ = ["gemm_batched", "tune_gemm", "algo_cache", "clear_algo_cache"]


# -- pointer-array batches -------------------------------------------------------------------
def _arrays(seq, name):
    """Each array of a ``<name>_list`` argument of :func:`gemm_batched` through the one
    operand path."""
    seq = sequence(seq, f"gemm_batched: {name}_list", "arrays")
    return [operand(x, name, "gemm_batched") for x in seq]


def gemm_batched(a_list, b_list, out_list=None, *, alpha=1, beta=0, compute=None, algo=None,
                 stream=None):
    """Products of lists of matrices, ``out[i] = alpha * a[i] @ b[i] + beta * out[i]``.

    One ``cublasGemmBatchedEx`` call over device arrays of pointers, which are uploaded on
    ``stream`` for each call (the matrices may live anywhere on the device).  Every ``a[i]``
    must share one shape and layout, and likewise every ``b[i]`` and ``out[i]``.

    Parameters
    ----------
    a_list, b_list : sequence of DeviceArray
        The same, non-zero length.
    out_list : sequence of DeviceArray, optional
        Default: new C-contiguous arrays.
    alpha, beta, compute, algo, stream
        As for :func:`gemm` (``algo="tuned"`` is not supported here).

    Returns
    -------
    list of DeviceArray
    """
    a_list = _arrays(a_list, "a")
    b_list = _arrays(b_list, "b")
    if not a_list or len(a_list) != len(b_list):
        raise ValueError(f"gemm_batched needs equally long, non-empty lists; got {len(a_list)} "
                         f"and {len(b_list)}")
    n = len(a_list)
    if out_list is not None:
        out_list = _arrays(out_list, "out")
        if len(out_list) != n:
            raise ValueError(f"out_list has {len(out_list)} entries; expected {n}")
    if algo == "tuned":
        raise ValueError("algo='tuned' is not supported by gemm_batched")
    a0, b0 = a_list[0], b_list[0]
    dev = a0.device
    for what, lst, ref in (("a", a_list, a0), ("b", b_list, b0)) + (
            (("out", out_list, out_list[0]),) if out_list is not None else ()):
        for x in lst:
            if x.device is not dev:
                raise ValueError(f"every matrix must be on device {dev.ordinal}; a {what} "
                                 f"matrix is on {x.device.ordinal}")
            if x.shape != ref.shape or x.strides != ref.strides or x.dtype != ref.dtype:
                raise ValueError(f"every {what} matrix must have the shape, strides and dtype "
                                 f"of the first ({ref.shape}, {ref.strides}, {ref.dtype})")
    if algo is not None and algo != "tuned":
        check_algo(algo)
    p = GemmPlan(a0, b0, None if out_list is None else out_list[0], compute=compute,
                 algo=algo, batched=False)
    if p.args.copy_a or p.args.copy_b:
        if a0.dtype.kind == "i":
            raise ValueError("an int8 gemm_batched needs row-major a matrices and "
                             "column-major b matrices (b = w.T of a row-major w)")
        raise ValueError("gemm_batched needs matrices with a unit stride in one dimension "
                         "(copy them first)")
    s = as_stream(stream, dev)
    alpha_c = scalar(alpha, p.combo.scale, "alpha")
    beta_c = scalar(beta, p.combo.scale, "beta")
    if out_list is None:
        if beta != 0:
            raise ValueError("beta != 0 accumulates into out_list, so it must be given")
        out_list = [empty(p.out_shape, p.out_dtype, device=dev, stream=s) for _ in range(n)]
    else:
        for o in out_list:
            for x in a_list + b_list:
                if spans_overlap(o.address, p.c_ext, x.address, byte_extent(x.shape, x.strides,
                                                               x.itemsize)):
                    raise ValueError("an out matrix overlaps an input")
    host = np.array([[x.address for x in b_list], [x.address for x in a_list],
                     [x.address for x in out_list]], dtype=np.uint64)
    ptrs = empty(host.shape, np.uint64, device=dev, stream=s)
    ptrs.copy_(host, s)
    base = ptrs.address
    _drv.get().cuCtxSetCurrent(dev.raw_context)
    h = cublas_handle(dev, s.raw_handle)
    x = p.args
    st = _lib.get().cublasGemmBatchedEx(
        h, x.transa, x.transb, x.m, x.n, x.k, ctypes.addressof(alpha_c), base, p.abtype, x.lda,
        base + 8 * n, p.abtype, x.ldb, ctypes.addressof(beta_c), base + 16 * n, p.ctype, x.ldc,
        n, p.combo.compute, p.algo_default)
    if st:
        raise_for(st, "cublasGemmBatchedEx", repr(p))
    # The pointer array is freed on the stream after the call has read it.
    ptrs.close()
    p.close()
    return out_list


# -- algorithm tuning ------------------------------------------------------------------------
def tune_gemm(a, b, out=None, *, compute=None, iterations: int = 10, stream=None) -> dict:
    """Time every GEMM algorithm on this problem and remember the fastest.

    The problem's :class:`GemmPlan` (the one ``gemm(..., algo="tuned")`` finds) is autotuned
    with the one timer (:func:`cudalibs.runtime.plan.time_candidates`: medians of loops on
    fresh random inputs, L2 flushed), ``iterations`` rounds; algorithms returning an error
    are skipped.  The choice is kept in the tuning store under the problem (shapes, dtypes,
    transposes, leading dimensions, pointer alignment), the device architecture and the
    cuBLAS version.  The caller's ``out`` is not written.  This synchronises the stream, so
    it cannot run inside a graph capture.

    Parameters
    ----------
    a, b, out, compute, stream
        As for :func:`gemm` (2-D) or :func:`gemm_strided_batched` (3-D).
    iterations : int, default 10

    Returns
    -------
    dict
        ``{"algo": best, "ms": its time per call, "times": {algo: ms}, "unsupported":
        [algo, ...]}``.
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    a, b, out, dev = gemm_operands("tune_gemm", a, b, out)
    batched = len(a.shape) != 2 or len(b.shape) != 2
    align = None if out is None else (alignment(a.address), alignment(b.address),
                                      alignment(out.address))
    p = plan_for("tune_gemm", a, b, out, compute, "tuned", batched, align)
    p.autotune(stream=as_stream(stream, dev), rounds=int(iterations), force=True)
    return p.tuning


def algo_cache() -> dict:
    """The tuned GEMM plans in the one plan cache: ``{raw key: {"algo", "ms", "times",
    "unsupported"}}``; read a key's fields by name with ``GEMM_KEY.named(key)``."""
    return {e.raw_key: e.plan.tuning for e in cache.entries(GEMM_KEY.name) if e.plan.tuned}


def clear_algo_cache() -> None:
    """Drop every cached GEMM plan (tuned or not) from the one plan cache; choices kept in
    the tuning store stay there."""
    cache.clear(GEMM_KEY.name)
