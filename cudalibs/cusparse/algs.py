"""Which cuSPARSE algorithms a sparse product may run: the tables and the choice.

Pure Python, no library call: the plans (:mod:`.plan`) ask these functions which algorithm
names to offer for a problem, then ask cuSPARSE for each one's buffer size.

- :data:`SPMV_ALGS`, :data:`SPMM_ALGS`: per format, cuSPARSE's default first, then the
  format's own algorithms in cuSPARSE's order.  Without an autotune a plan runs the first
  one cuSPARSE takes, so an untuned plan runs what cuSPARSE recommends (``ALG_DEFAULT``,
  which is ``CSR_ALG1`` for a CSR SpMV, not the slower deterministic ``CSR_ALG2``).
- :data:`DETERMINISTIC`: the algorithms cuSPARSE documents as giving bitwise-identical
  results from run to run, all for ``op(A) = A`` only (:func:`deterministic_algorithms`).
- :func:`algorithms`: the candidates of one plan, from ``alg=`` and ``deterministic=``:
  every algorithm offered by default (the fastest wins an autotune); with
  ``deterministic=True`` only the documented-deterministic ones, and a problem that has none
  refused, saying why and what to do instead.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as _dtypes
from . import _lib

__all__ = ["OPS", "SPMV_ALGS", "SPMM_ALGS", "DETERMINISTIC", "deterministic_algorithms",
           "algorithms", "check_op_a", "check_blocked_ell_spmm", "op_code", "compute_dtype"]

#: ``op=`` values and the cuSPARSE operation each means.
OPS = {"N": _lib.CUSPARSE_OPERATION_NON_TRANSPOSE, "T": _lib.CUSPARSE_OPERATION_TRANSPOSE,
       "H": _lib.CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE}
#: SpMV algorithms offered per format, cuSPARSE's default first.  Blocked-ELL has none:
#: cuSPARSE's SpMV does not take it.
SPMV_ALGS = {
    "csr": ("CUSPARSE_SPMV_ALG_DEFAULT", "CUSPARSE_SPMV_CSR_ALG1", "CUSPARSE_SPMV_CSR_ALG2"),
    "csc": ("CUSPARSE_SPMV_ALG_DEFAULT", "CUSPARSE_SPMV_CSR_ALG1", "CUSPARSE_SPMV_CSR_ALG2"),
    "coo": ("CUSPARSE_SPMV_ALG_DEFAULT", "CUSPARSE_SPMV_COO_ALG1", "CUSPARSE_SPMV_COO_ALG2"),
    "bsr": ("CUSPARSE_SPMV_ALG_DEFAULT", "CUSPARSE_SPMV_BSR_ALG1"),
}
#: SpMM algorithms offered per format, cuSPARSE's default first.
SPMM_ALGS = {
    "csr": ("CUSPARSE_SPMM_ALG_DEFAULT", "CUSPARSE_SPMM_CSR_ALG1", "CUSPARSE_SPMM_CSR_ALG2",
            "CUSPARSE_SPMM_CSR_ALG3"),
    "csc": ("CUSPARSE_SPMM_ALG_DEFAULT", "CUSPARSE_SPMM_CSR_ALG1"),
    "coo": ("CUSPARSE_SPMM_ALG_DEFAULT", "CUSPARSE_SPMM_COO_ALG1", "CUSPARSE_SPMM_COO_ALG2",
            "CUSPARSE_SPMM_COO_ALG3", "CUSPARSE_SPMM_COO_ALG4"),
    "bsr": ("CUSPARSE_SPMM_ALG_DEFAULT", "CUSPARSE_SPMM_BSR_ALG1"),
    "blocked_ell": ("CUSPARSE_SPMM_ALG_DEFAULT", "CUSPARSE_SPMM_BLOCKED_ELL_ALG1"),
}
#: The algorithms cuSPARSE documents as giving bitwise-identical results for each run, by
#: operation and format, all for ``op(A) = A`` only (see :func:`deterministic_algorithms`):
#: SpMV ``CSR_ALG2``, ``COO_ALG2``, ``BSR_ALG1``; SpMM ``CSR_ALG3`` (CSR only, not with
#: ``op_b="H"``), ``COO_ALG2``, ``BSR_ALG1``; SDDMM's one algorithm.  ``ALG_DEFAULT`` carries
#: no such promise, nor does any CSC or Blocked-ELL algorithm.
DETERMINISTIC = {
    "SpMV": {"csr": ("CUSPARSE_SPMV_CSR_ALG2",), "coo": ("CUSPARSE_SPMV_COO_ALG2",),
             "bsr": ("CUSPARSE_SPMV_BSR_ALG1",)},
    "SpMM": {"csr": ("CUSPARSE_SPMM_CSR_ALG3",), "coo": ("CUSPARSE_SPMM_COO_ALG2",),
             "bsr": ("CUSPARSE_SPMM_BSR_ALG1",)},
    "SDDMM": {"csr": ("CUSPARSE_SDDMM_ALG_DEFAULT",), "bsr": ("CUSPARSE_SDDMM_ALG_DEFAULT",)},
}
_N = _lib.CUSPARSE_OPERATION_NON_TRANSPOSE
_H = _lib.CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE
#: The compute type of a value type where they differ: cuSPARSE computes 16-bit floats in
#: float32 (for float16 it also takes float16, which rounds every partial sum).
_COMPUTE = {np.dtype(t): np.dtype(np.float32) for t in (np.float16, _dtypes.bfloat16)
            if t is not None}
#: The compute capability cuSPARSE's Blocked-ELL SpMM needs (tensor cores), by value type.
_ELL_ARCH = {np.dtype(np.float16): (7, 0)}
_ELL_ARCH_DEFAULT = (8, 0)


def compute_dtype(dtype) -> np.dtype:
    """The compute type (and the type of ``alpha`` and ``beta``) of a value type."""
    dt = np.dtype(dtype)
    return _COMPUTE.get(dt, dt)


def deterministic_algorithms(kind: str, fmt: str, op_a: int, op_b: int = _N) -> tuple:
    """The algorithms cuSPARSE documents as bitwise reproducible for operation ``kind``
    ("SpMV", "SpMM", "SDDMM") on format ``fmt`` with operations ``op_a`` (on the sparse
    matrix; SDDMM: the first dense factor) and ``op_b``; empty where it documents none."""
    if kind == "SDDMM":
        return DETERMINISTIC[kind].get(fmt, ())
    if op_a != _N or (kind == "SpMM" and fmt == "csr" and op_b == _H):
        return ()
    return DETERMINISTIC[kind].get(fmt, ())


def _why_none(kind: str, fmt: str, op_a: int) -> tuple[str, str]:
    """Why cuSPARSE has no deterministic ``kind`` algorithm for this problem, and the way
    to a problem that has one."""
    if op_a != _N:
        return (f"with a transposed A every cuSPARSE {kind} algorithm adds into an output "
                "element from several threads at once (atomics)",
                "give the transposed matrix as a CSR matrix of its own (scipy: A.T.tocsr())")
    if fmt == "csc":
        return ("cuSPARSE documents no algorithm on CSC as deterministic",
                "give the matrix as CSR (scipy: A.tocsr())")
    if fmt == "blocked_ell":
        return ("cuSPARSE documents no Blocked-ELL SpMM algorithm as deterministic",
                "give the matrix as BSR (BlockedELL.to_scipy() is one) or CSR")
    return ("CUSPARSE_SPMM_CSR_ALG3, the deterministic one on CSR, does not take op_b='H'",
            "give B's conjugate transpose as an array of its own")


def algorithms(kind: str, fmt: str, offered: tuple, alg, deterministic, op_a: int,
               op_b: int, problem: str) -> tuple[tuple, tuple, bool]:
    """Check ``alg`` and ``deterministic`` for a plan of ``kind`` and give ``(algorithms,
    the deterministic ones, the mode)``: the algorithms to ask cuSPARSE about, in order.

    ``deterministic=False`` offers every algorithm (``alg``: that one); True only those
    cuSPARSE documents as deterministic for the problem.

    Raises
    ------
    TypeError
        ``deterministic`` is not True or False.
    ValueError
        ``alg`` is not offered for the format, or ``deterministic=True`` asks for what
        cuSPARSE does not document (no deterministic algorithm for the problem, or ``alg``
        not one).
    """
    if not isinstance(deterministic, (bool, np.bool_)):
        raise TypeError(f"{kind}: deterministic must be True or False, not {deterministic!r}")
    mode = bool(deterministic)
    det = deterministic_algorithms(kind, fmt, op_a, op_b)
    if alg is not None:
        if alg not in offered:
            raise ValueError(f"{kind}: alg {alg!r} is not offered for {fmt}: "
                             f"{', '.join(offered)}")
        if mode and alg not in det:
            raise ValueError(f"{kind}: alg {alg!r} is not deterministic for {problem} (cuSPARSE "
                             f"documents {', '.join(det) or 'none'} as deterministic there); "
                             "drop deterministic=True or pick another")
        offered = (alg,)
    if mode and not det:
        why, instead = _why_none(kind, fmt, op_a)
        raise ValueError(f"{kind}: no deterministic algorithm for {problem}: {why}; pass "
                         "deterministic=False to accept results whose last bits may differ "
                         f"from run to run, or {instead}")
    return offered, det, mode


def check_op_a(kind: str, fmt: str, op_a: int, name: str) -> None:
    """cuSPARSE's BSR SpMV and SpMM (``BSR_ALG1``, which their default runs on BSR) and its
    Blocked-ELL SpMM take ``op(A) = A`` only: refused here, before it asks for every
    algorithm's buffer size in vain."""
    if fmt in ("bsr", "blocked_ell") and op_a != _N:
        what = "BSR" if fmt == "bsr" else "Blocked-ELL"
        scipy = "A.T.tobsr()" if fmt == "bsr" else "A.to_scipy().T"
        raise ValueError(f"{kind}: cuSPARSE's {what} {kind} takes {name}='N' only; give the "
                         f"transposed matrix as one of its own (scipy: {scipy})")


def check_blocked_ell_spmm(A, op_b: int) -> None:
    """What cuSPARSE's Blocked-ELL SpMM takes beyond ``op_a="N"`` (:func:`check_op_a`):
    ``op_b`` "N" or "T", and tensor cores of the compute capability its value type needs
    (float16: 7.0; bfloat16, float32, float64: 8.0).  Refused here, before any library
    call."""
    if A.format != "blocked_ell":
        return
    if op_b == _H:
        raise ValueError("SpMM: cuSPARSE's Blocked-ELL SpMM does not take op_b='H'; its values "
                         "are real, so op_b='T' is the same product")
    need = _ELL_ARCH.get(A.dtype, _ELL_ARCH_DEFAULT)
    have = tuple(A.device.compute_capability)
    if have < need:
        raise ValueError(f"SpMM: cuSPARSE's Blocked-ELL SpMM of {A.dtype} runs on tensor cores "
                         f"of compute capability {need[0]}.{need[1]} or later; device "
                         f"{A.device.ordinal} has {have[0]}.{have[1]} (give A as BSR or CSR)")


def op_code(op, what: str) -> int:
    """The cuSPARSE operation of ``op`` ("N", "T", "H", case-insensitive)."""
    code = OPS.get(op.upper()) if isinstance(op, str) else None
    if code is None:
        raise ValueError(f"{what} must be 'N', 'T' or 'H', not {op!r}")
    return code
