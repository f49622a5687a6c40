"""``cublas.matmul``: the one-shot form of the cuBLASLt :class:`~cudalibs.cublas.Matmul` plan,
its plans found through the one front in the one plan cache under :data:`MATMUL_KEY`."""

from __future__ import annotations

import numpy as np

from .. import _ffi
from ..runtime import front as _front
from ..runtime.cache import KeyKind, cache
from ..runtime.operand import operand
from ..runtime.options import option_context
from ._common import alignment
from .lt import BIAS_ALIGN, Matmul
from .lt_problem import scale_modes

__all__ = ["matmul", "matmul_cache", "clear_matmul_cache", "plan_cache", "clear_plan_cache",
           "MATMUL_KEY"]


# -- one-shot convenience through the one plan cache -----------------------------------------
#: The keys of :func:`matmul`'s plans in :data:`cudalibs.plan_cache`.
MATMUL_KEY = KeyKind("cublaslt_matmul", (
    "a_shape", "a_strides", "a_dtype", "b_shape", "b_strides", "b_dtype", "out_layout",
    "epilogue", "compute", "out_dtype", "device", "a_align", "b_align", "out_align",
    "bias_align", "aux", "scale_mode", "fast_accum", "amax"))


def matmul(a, b, *, bias=None, epilogue=None, out=None, compute=None, out_dtype=None,
           a_scale=None, b_scale=None, aux=None, scale_mode=None, d_scale=None, amax=None,
           fast_accum=False, stream=None, options=None):
    """``epilogue(a @ b + bias)`` through a cached cuBLASLt :class:`Matmul` plan.

    The plan for this problem (shapes, strides, dtypes, epilogue, compute, pointer
    alignment, device, and for fp8 the scale modes, ``fast_accum`` and whether ``amax`` is
    given) is made on the first call and kept in the one plan cache
    (:data:`cudalibs.plan_cache`), so repeated calls pay only for
    :meth:`Matmul.execute`.  Calls from several threads may share a plan.

    Parameters
    ----------
    a, b : DeviceArray or CUDA array-like
        ``(M, K)`` / ``(K, N)``, or stacks ``(batch, M, K)`` / ``(batch, K, N)``.
    bias : DeviceArray, shape (N,), optional
        One entry per output column, in the output dtype.  Given without ``epilogue``, it
        means ``epilogue="bias"``.
    epilogue : str, optional
        See :data:`EPILOGUES` (``"relu"``, ``"gelu"``, ``"bias_relu"``, ``"bias_gelu"``,
        ...).
    out : DeviceArray, optional
    compute, out_dtype
        As for :class:`Matmul`.
    a_scale, b_scale : DeviceArray, optional
        fp8: the float32 scales of ``a`` and ``b`` in the layout of ``scale_mode`` (per
        tensor: one float32 each, default 1; see :class:`Matmul`).
    aux : DeviceArray, optional
        For the epilogues with an auxiliary matrix.
    scale_mode : str or (str, str), optional
        fp8: ``"tensor"`` (default), ``"row"``, ``"block128"`` or ``"block128x128"``, for
        both operands or ``(a's, b's)``; the modes sm_90 runs and their rules: :class:`Matmul`.
    d_scale : DeviceArray, optional
        fp8 output: the float32 scalar the result is multiplied by before rounding to fp8.
    amax : DeviceArray, optional
        fp8 output: a float32 device scalar set to ``max |D|`` (before ``d_scale``).
    fast_accum : bool, default False
        fp8: accumulate over all of K in the tensor cores' reduced precision (faster, an
        error growing with K; see :class:`Matmul`).
    stream : Stream, optional
    options : Options or dict, optional
        :class:`cudalibs.Options` for this call (``{"relaunch": False}``, ...).

    Returns
    -------
    DeviceArray, or ``(out, aux)`` for the forward ``*_aux`` epilogues.
    """
    if options is not None:
        with option_context(options):
            return matmul(a, b, bias=bias, epilogue=epilogue, out=out, compute=compute,
                          out_dtype=out_dtype, a_scale=a_scale, b_scale=b_scale, aux=aux,
                          scale_mode=scale_mode, d_scale=d_scale, amax=amax,
                          fast_accum=fast_accum, stream=stream)
    a = operand(a, "a", "matmul", stream=stream)
    b = operand(b, "b", "matmul", stream=stream)
    if epilogue is None and bias is not None:
        epilogue = "bias"
    if out is not None:
        out = operand(out, "out", "matmul", stream=stream)
    if bias is not None:
        bias = operand(bias, "bias", "matmul", stream=stream)
    if aux is not None:
        aux = operand(aux, "aux", "matmul", stream=stream)
    a_align, b_align = alignment(a.address), alignment(b.address)
    out_align = None if out is None else alignment(out.address)
    aux_align = None if aux is None else alignment(aux.address)
    # Every option that changes the plan is in the key, so that two calls differing only in
    # it never share one (a scale mode, fast accumulation, an amax to reduce).
    modes = scale_modes(scale_mode)
    key = (MATMUL_KEY, a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype,
           None if out is None else (out.shape, out.strides, out.dtype), epilogue, compute,
           None if out_dtype is None else np.dtype(out_dtype), a.device, a_align, b_align,
           out_align, None if bias is None else min(alignment(bias.address), BIAS_ALIGN),
           None if aux is None else (aux.shape, aux_align), modes, bool(fast_accum),
           amax is not None)
    plan = _front.lookup(key)
    if plan is None:
        aux_ld = None
        if aux is not None:
            aux_ld = aux.shape[-1] * (8 if aux.dtype == np.uint8 else 1)
        # The bias is staged at BIAS_ALIGN when less aligned, so it does not lower the
        # plan's alignment; the aux matrix does.
        align = min(x for x in (a_align, b_align, out_align, aux_align) if x is not None)
        plan = _front.insert(key, Matmul(a, b, out=out, out_dtype=out_dtype, compute=compute,
                                         epilogue=epilogue, aux_ld=aux_ld,
                                         min_alignment=align, scale_mode=modes,
                                         fast_accum=fast_accum, amax=amax is not None))
    return plan.execute(a, b, out=out, bias=bias, aux=aux, a_scale=a_scale, b_scale=b_scale,
                        d_scale=d_scale, amax=amax, stream=stream)


def matmul_cache() -> dict:
    """The plans :func:`matmul` holds in the one plan cache, by raw key (a copy; read keys
    by name through ``cudalibs.plan_cache().entries("cublaslt_matmul")``), like
    :func:`~cudalibs.cublas.algo_cache` for the GEMMs and ``cudnn.algo_cache()`` for the
    convolutions."""
    return {e.raw_key: e.plan for e in cache.entries(MATMUL_KEY.name)}


def clear_matmul_cache() -> None:
    """Drop every cached :func:`matmul` plan (each is freed once no caller holds it)."""
    cache.clear(MATMUL_KEY.name)


# The former names: ``plan_cache`` read as the one plan cache (``cudalibs.plan_cache()``),
# which these are one library's part of.
plan_cache = _ffi.renamed(matmul_cache, "cublas.plan_cache()", "cublas.matmul_cache()")
clear_plan_cache = _ffi.renamed(clear_matmul_cache, "cublas.clear_plan_cache()",
                                "cublas.clear_matmul_cache()")
