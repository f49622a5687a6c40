"""The legacy convolution API: algorithm tables, candidate lists and the call itself.

cuDNN's pre-graph entry points (``cudnnConvolutionForward`` and the two backward ones) take an
algorithm enum.  :func:`candidates` lists the algorithms that may run a problem -- cuDNN's own
ranking (``cudnnGet*Algorithm_v7``), filtered by workspace limit, determinism and math type --
or checks one explicit algorithm; a :class:`~cudalibs.cudnn.conv.ConvPlan` times them
(autotune) or takes the first.  float64, explicit algorithms, ``alpha``/``beta`` other than
``(1, 0)`` and problems no graph engine takes run here.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ...errors import CudaLibsError
from .. import _lib
from .._base import raise_for

__all__ = ["FWD_ALGOS", "BWD_DATA_ALGOS", "BWD_FILTER_ALGOS", "NoAlgorithmError", "OPS",
           "resolve_algo", "candidates"]

#: Forward algorithm names -> cudnnConvolutionFwdAlgo_t.
FWD_ALGOS = {
    "implicit_gemm": 0, "implicit_precomp_gemm": 1, "gemm": 2, "direct": 3, "fft": 4,
    "fft_tiling": 5, "winograd": 6, "winograd_nonfused": 7,
}
#: Backward-data algorithm names -> cudnnConvolutionBwdDataAlgo_t.
BWD_DATA_ALGOS = {
    "algo_0": 0, "algo_1": 1, "fft": 2, "fft_tiling": 3, "winograd": 4, "winograd_nonfused": 5,
}
#: Backward-filter algorithm names -> cudnnConvolutionBwdFilterAlgo_t.
BWD_FILTER_ALGOS = {
    "algo_0": 0, "algo_1": 1, "fft": 2, "algo_3": 3, "winograd": 4, "winograd_nonfused": 5,
    "fft_tiling": 6,
}
# The algorithms cuDNN documents as non-deterministic (atomics), per operation.
_NONDETERMINISTIC = {"backward_data": {0}, "backward_filter": {0, 3}, "forward": set()}
#: The forward algorithm that the fused legacy call runs for every problem.
PRECOMP_GEMM = FWD_ALGOS["implicit_precomp_gemm"]


def not_supported(status: int) -> bool:
    """Whether ``status`` is one of cuDNN 9's "not supported" family (3000..3999)."""
    return _lib.CUDNN_STATUS_NOT_SUPPORTED <= status < _lib.CUDNN_STATUS_NOT_SUPPORTED + 1000


class NoAlgorithmError(CudaLibsError, ValueError):
    """No convolution algorithm satisfies the request (workspace limit, determinism)."""


class _Op:
    """The cuDNN entry points of one convolution operation (forward, backward data/filter).

    The three share one argument pattern: ``(a, b, conv, c)`` descriptors, where ``a`` and
    ``b`` are the inputs and ``c`` the output, in the order each function takes them.
    """

    __slots__ = ("name", "algos", "count", "heuristic", "ws", "run", "perf", "algo_names")

    def __init__(self, name, algos, count, heuristic, ws, run, perf):
        self.name, self.algos = name, algos
        self.count, self.heuristic, self.ws, self.run = count, heuristic, ws, run
        self.perf = perf
        self.algo_names = {v: k for k, v in algos.items()}

    def __repr__(self) -> str:
        return f"<legacy convolution {self.name}: {self.run}>"


OPS = {
    "forward": _Op("forward", FWD_ALGOS, "cudnnGetConvolutionForwardAlgorithmMaxCount",
                   "cudnnGetConvolutionForwardAlgorithm_v7",
                   "cudnnGetConvolutionForwardWorkspaceSize", "cudnnConvolutionForward",
                   _lib.cudnnConvolutionFwdAlgoPerf_t),
    "backward_data": _Op("backward_data", BWD_DATA_ALGOS,
                         "cudnnGetConvolutionBackwardDataAlgorithmMaxCount",
                         "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                         "cudnnGetConvolutionBackwardDataWorkspaceSize",
                         "cudnnConvolutionBackwardData", _lib.cudnnConvolutionBwdDataAlgoPerf_t),
    "backward_filter": _Op("backward_filter", BWD_FILTER_ALGOS,
                           "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount",
                           "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                           "cudnnGetConvolutionBackwardFilterWorkspaceSize",
                           "cudnnConvolutionBackwardFilter",
                           _lib.cudnnConvolutionBwdFilterAlgoPerf_t),
}


def resolve_algo(op: _Op, algo):
    """``"find"``/``"heuristic"`` as is, a name or an int as the algorithm enum value."""
    if isinstance(algo, str):
        if algo in ("find", "heuristic"):
            return algo
        if algo not in op.algos:
            raise ValueError(f"{op.name} algorithm must be 'find', 'heuristic', an int or one "
                             f"of {sorted(op.algos)}, not {algo!r}")
        return op.algos[algo]
    if isinstance(algo, (int, np.integer)) and not isinstance(algo, bool):
        a = int(algo)
        if a not in op.algo_names:
            raise ValueError(f"{op.name} algorithm {algo} is not one of "
                             f"{sorted(op.algo_names)}")
        return a
    raise TypeError(f"algo must be 'find', 'heuristic', an int or a name, not {algo!r}")


def math_ok(requested: int, got: int) -> bool:
    """float32 without TF32 must never run a tensor-op kernel; elsewhere cuDNN's own choice
    (recorded in the perf result) is what the algorithm runs with."""
    if requested == _lib.CUDNN_FMA_MATH:
        return got in (_lib.CUDNN_FMA_MATH, _lib.CUDNN_DEFAULT_MATH)
    return True


def candidates(op: _Op, h, raws, algo, deterministic: bool, limit: int, requested_math: int,
               problem: str) -> list[dict]:
    """The legacy algorithms that may run a problem, cuDNN's ranking first.

    ``raws`` are the ``(a, b, conv, c)`` descriptors.  Each candidate is a dict with
    ``name``, ``id`` (``"legacy:<name>"``), ``algo``, ``workspace``, ``math`` and
    ``deterministic``.  An explicit ``algo`` gives that one alone, checked.

    Raises
    ------
    NoAlgorithmError
        None fits the workspace limit (and determinism); the message lists why each failed.
    """
    L = _lib.get()
    a, b, conv, c = raws
    if not isinstance(algo, str):
        size = ctypes.c_size_t()
        st = getattr(L, op.ws)(h.raw, a, b, conv, c, algo, ctypes.byref(size))
        if st:
            raise_for(st, op.ws, f"{op.name} algorithm {op.algo_names[algo]} on {problem}")
        if deterministic and algo in _NONDETERMINISTIC[op.name]:
            raise NoAlgorithmError(f"{op.name} algorithm {op.algo_names[algo]} is not "
                                   "deterministic; drop deterministic=True or pick another")
        if size.value > limit:
            raise NoAlgorithmError(f"{op.name} algorithm {op.algo_names[algo]} needs "
                                   f"{size.value} bytes of workspace, over the limit of {limit}")
        return [_candidate(op, algo, size.value, requested_math,
                           algo not in _NONDETERMINISTIC[op.name])]
    count = ctypes.c_int()
    st = getattr(L, op.count)(h.raw, ctypes.byref(count))
    if st:
        raise_for(st, op.count)
    n = max(count.value, 1)
    perf = (op.perf * n)()
    got = ctypes.c_int()
    st = getattr(L, op.heuristic)(h.raw, a, b, conv, c, n, ctypes.byref(got), perf)
    if st:
        raise_for(st, op.heuristic, problem)
    out, rejected, seen = [], [], set()
    for p in perf[:got.value]:
        if p.status != 0 or int(p.algo) in seen:
            continue
        why = None
        if p.memory > limit:
            why = f"needs {p.memory} B of workspace"
        elif deterministic and p.determinism != _lib.CUDNN_DETERMINISTIC:
            why = "not deterministic"
        elif not math_ok(requested_math, p.mathType):
            why = f"math type {p.mathType}"
        if why:
            rejected.append(f"{op.algo_names.get(p.algo, p.algo)}: {why}")
            continue
        seen.add(int(p.algo))
        m = requested_math if requested_math == _lib.CUDNN_FMA_MATH else int(p.mathType)
        out.append(_candidate(op, int(p.algo), int(p.memory), m,
                              p.determinism == _lib.CUDNN_DETERMINISTIC))
    if not out:
        raise NoAlgorithmError(
            f"no {op.name} algorithm for {problem} fits workspace_limit={limit}"
            f"{' and deterministic=True' if deterministic else ''}; candidates: "
            f"{'; '.join(rejected) or 'none succeeded'}")
    return out


def _candidate(op: _Op, algo: int, workspace: int, math: int, det: bool) -> dict:
    name = op.algo_names[algo]
    return {"name": name, "id": f"legacy:{name}", "backend": "legacy", "algo": algo,
            "workspace": int(workspace), "math": int(math), "deterministic": bool(det)}
