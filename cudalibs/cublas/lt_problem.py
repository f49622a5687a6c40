"""The validation of a cuBLASLt matmul problem: everything :class:`~cudalibs.cublas.Matmul`
derives from its arguments before any descriptor exists (types, shapes, batching, layouts,
alignment, the epilogue's auxiliary matrix)."""

from __future__ import annotations

import numpy as np

from .. import dtypes as _dtypes
from ._common import OP_N, OP_T, combo, elem_strides, op_ld, scalar, split_batch
from .handle import WORKSPACE_BYTES
from .lt_desc import epilogue, round_up

__all__ = ["Problem", "validate", "FP8"]

FP8 = tuple(t for t in (_dtypes.float8_e4m3fn, _dtypes.float8_e5m2) if t is not None)


class Problem:
    """The validated problem of a :class:`Matmul`: everything derived from the arguments
    before any descriptor exists."""

    __slots__ = ("specs", "out_shape", "od", "compute_type", "scale_np", "epi", "fp8", "batch",
                 "mnk", "opa", "opb", "ldo", "bso", "bsa", "bsb", "align", "aux_shape",
                 "aux_dtype", "ld_aux", "alpha", "beta", "fast_accum", "max_candidates",
                 "workspace", "compute")


def _types(p, ab, bb, so, dev, out_dtype, compute) -> None:
    """Output, compute and scale types (fp8 or one floating input type)."""
    epi = p.epi
    if p.fp8:
        if ab not in FP8 or bb not in FP8:
            raise ValueError(f"fp8 matmul needs both inputs in fp8, got {ab} and {bb}")
        if ab == bb == _dtypes.float8_e5m2:
            raise ValueError("cuBLASLt has no e5m2 x e5m2 matmul; use e4m3 for one input")
        cc = dev.compute_capability
        if cc < (8, 9):
            raise ValueError(f"fp8 matmul needs compute capability >= 8.9 (Ada/Hopper); "
                             f"device {dev.ordinal} is {cc[0]}.{cc[1]}")
        od = np.dtype(_dtypes.bfloat16) if out_dtype is None else _dtypes.lookup(
            out_dtype).numpy
        if so is not None:
            od = so[2]
        if od not in (_dtypes.bfloat16, np.dtype(np.float16), np.dtype(np.float32)):
            raise ValueError(f"fp8 matmul writes bfloat16, float16 or float32, not {od}")
        if compute not in (None, "f32"):
            raise ValueError("fp8 matmul computes in fp32 (compute=None)")
        if epi.bias is not None and od == np.float32:
            raise ValueError("an fp8 matmul with a bias needs a bfloat16 or float16 output")
        p.od, p.compute_type, p.scale_np = (od, _dtypes.COMPUTE["COMPUTE_32F"],
                                            np.dtype(np.float32))
        return
    if ab != bb:
        raise ValueError(f"Matmul: a is {ab} but b is {bb}; cuBLASLt needs one input type "
                         "(or two fp8 types)")
    if ab.kind not in "f" and ab != _dtypes.bfloat16:
        raise ValueError(f"cudalibs' cuBLASLt plans take float64, float32, float16, "
                         f"bfloat16 or fp8 inputs, not {ab}; use cublas.gemm")
    want = so[2] if so is not None else (None if out_dtype is None
                                         else _dtypes.lookup(out_dtype).numpy)
    row = combo(ab, want, compute)
    p.od, p.compute_type, p.scale_np = row.c, row.compute, row.scale

def _out_ld(p, spec, what):
    """(leading dimension, batch stride) in elements of ``out``/``c``, checked."""
    M, N, _ = p.mnk
    bo, bso, oshape, ostr = split_batch(spec[0], spec[1], what)
    if spec[0] != p.out_shape:
        raise ValueError(f"{what} has shape {spec[0]}; the product is {p.out_shape}")
    if spec[2] != p.od:
        raise ValueError(f"{what} is {spec[2]}; this matmul writes {p.od}")
    io = p.od.itemsize
    eo = elem_strides(ostr, io)
    if eo is None or not (N == 1 or eo[1] == 1):
        raise ValueError(f"{what} must have unit stride in its last dimension")
    ld = eo[0] if M > 1 else N
    if ld < N:
        raise ValueError(f"{what}'s row stride is shorter than a row")
    if p.batch > 1 and (bso <= 0 or bso % io):
        raise ValueError(f"{what} needs a positive batch stride")
    return ld, (bso // io if p.batch > 1 else 0)

def validate(specs, dev, out_dtype, compute, epilogue_name, alpha, beta, aux_ld,
              fast_accum, min_alignment, max_candidates, workspace_bytes) -> Problem:
    sa, sb, sc, so = specs
    p = Problem()
    p.specs = ((sa[0], sa[1], sa[2]), (sb[0], sb[1], sb[2]))
    ab, bb = sa[2], sb[2]
    p.fp8 = ab in FP8 or bb in FP8
    p.epi = epilogue(epilogue_name)
    p.compute = compute
    _types(p, ab, bb, so, dev, out_dtype, compute)
    # Shapes and batching.
    ba, p.bsa, ashape, astr = split_batch(sa[0], sa[1], "a")
    bbt, p.bsb, bshape, bstr = split_batch(sb[0], sb[1], "b")
    if ba != bbt and 1 not in (ba, bbt):
        raise ValueError(f"batch sizes {ba} and {bbt} do not broadcast")
    p.batch = max(ba, bbt)
    (M, K), (K2, N) = ashape, bshape
    if K != K2:
        raise ValueError(f"Matmul: inner dimensions differ: a is {sa[0]}, b is {sb[0]}")
    if min(M, N, K) < 1:
        raise ValueError(f"cuBLASLt needs non-empty matrices, got M={M}, N={N}, K={K}")
    p.mnk = (M, N, K)
    p.out_shape = (M, N) if len(sa[0]) == 2 and len(sb[0]) == 2 else (p.batch, M, N)
    ea = elem_strides(astr, ab.itemsize)
    eb = elem_strides(bstr, bb.itemsize)
    # cuBLASLt's A is our b (N×K after op), its B is our a (K×M after op).
    p.opa = None if ea is None else op_ld(M, K, ea[0], ea[1], prefer_t=False)
    p.opb = None if eb is None else op_ld(K, N, eb[0], eb[1], prefer_t=p.fp8)
    if p.opa is None or p.opb is None:
        raise ValueError("each matrix needs a unit stride in one dimension and a leading "
                         "dimension at least as long as that dimension; call .copy() "
                         f"first (a strides {sa[1]}, b strides {sb[1]})")
    if p.fp8:
        if p.opb[0] != OP_T or p.opa[0] != OP_N:
            raise ValueError("fp8 matmul needs a row-major a (unit stride in its last "
                             "dimension) and a column-major b (b = w.T of a row-major "
                             "(N, K) w): cuBLASLt's fp8 kernels take only the 'TN' layout")
        if K % 16 or p.opa[1] % 16 or p.opb[1] % 16:
            raise ValueError(f"fp8 matmul needs K and the leading dimensions to be "
                             f"multiples of 16 (K={K}, lda={p.opb[1]}, ldb={p.opa[1]})")
    # C and D share one layout: the output's (cudalibs does not convert between them).
    if so is not None:
        p.ldo, p.bso = _out_ld(p, so, "out")
        if sc is not None and _out_ld(p, sc, "c") != (p.ldo, p.bso):
            raise ValueError("c must have the strides of out")
    else:
        p.ldo, p.bso = N, (M * N if p.batch > 1 else 0)
        if sc is not None and _out_ld(p, sc, "c") != (p.ldo, p.bso):
            raise ValueError("c must be C-contiguous when out is not described (or "
                             "describe out with c's strides)")
    for name, s, item in (("a", p.bsa, ab.itemsize), ("b", p.bsb, bb.itemsize)):
        if s % item or s < 0:
            raise ValueError(f"{name}'s batch stride must be a non-negative multiple of "
                             "its item size")
    p.alpha = scalar(alpha, p.scale_np, "alpha")
    p.beta = scalar(beta, p.scale_np, "beta")
    if beta != 0 and sc is None and so is None:
        raise ValueError("beta != 0 needs c (or out) to describe the addend")
    p.align = int(min_alignment)
    if p.align < 1 or p.align & (p.align - 1):
        raise ValueError(f"min_alignment must be a power of two, not {p.align}")
    _validate_aux(p, aux_ld)
    p.fast_accum = bool(fast_accum)
    p.max_candidates = int(max_candidates)
    if p.max_candidates < 1:
        raise ValueError(f"max_candidates must be >= 1, got {max_candidates}")
    p.workspace = min(int(workspace_bytes), WORKSPACE_BYTES)
    return p

def _validate_aux(p, aux_ld) -> None:
    M, N, _ = p.mnk
    epi = p.epi
    p.aux_shape = p.aux_dtype = p.ld_aux = None
    if not epi.aux:
        if aux_ld is not None:
            raise ValueError(f"aux_ld given, but epilogue {epi.name!r} has no aux matrix")
        return
    if epi.aux_kind == "gelu":
        ld_aux = round_up(N, 8) if aux_ld is None else int(aux_ld)
        if ld_aux < N or ld_aux % 8:
            raise ValueError(f"aux_ld={ld_aux} must be >= N={N} and a multiple of 8")
        p.aux_dtype, cols = p.od, ld_aux
    else:
        ld_aux = round_up(N, 128) if aux_ld is None else int(aux_ld)
        if ld_aux < N or ld_aux % 128:
            raise ValueError(f"aux_ld={ld_aux} (bits) must be >= N={N} and a "
                             "multiple of 128")
        p.aux_dtype, cols = np.dtype(np.uint8), ld_aux // 8
    p.ld_aux = ld_aux
    p.aux_shape = (M, cols) if len(p.out_shape) == 2 else (p.batch, M, cols)

