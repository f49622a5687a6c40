"""cuBLAS and cuBLASLt: dense linear algebra on the GPU, with numpy (row-major) semantics.

- :func:`gemm`, :func:`gemm_strided_batched`, :func:`gemm_batched`: ``cublasGemmEx`` and its
  batched forms in float64, float32 (``compute="tf32"`` opt-in), float16/bfloat16 (fp32
  accumulation), int8 -> int32 and complex; transposed views become transpose flags.
- :class:`GemmPlan`, :func:`tune_gemm` / ``algo="tuned"`` / :func:`algo_cache`: the fastest
  ``cublasGemmAlgo_t`` per problem, kept in the tuning store; :func:`set_gemm_backend` picks
  the library behind the default GEMM (a cuBLASLt :class:`Matmul` plan, or ``cublasGemmEx``);
  repeated calls relaunch the library's recorded kernels (:mod:`cudalibs.runtime.relaunch`).
- :class:`Matmul` (cuBLASLt plans: heuristics, :meth:`Matmul.autotune`, fused bias/ReLU/GELU
  epilogues, fp8) and :func:`matmul`, its cached one-shot form.
- :func:`gemm_grouped` / :class:`GroupedGemm`: one ``cublasGemmGroupedBatchedEx`` over
  groups of different shapes (mixture-of-experts layers with host-known token counts; for
  counts that live on the device see :func:`cudalibs.kernels.grouped_mm`).
- :func:`axpy`, :func:`scal`, :func:`dot`, :func:`nrm2`, :func:`gemv`.

``_lib`` holds the raw prototype tables of both libraries (``libcublas`` and ``libcublasLt``,
loaded separately and lazily); handles live in :mod:`cudalibs.cublas.handle`, one per
(device, thread), bound to the call's stream and its workspace.  Importing this package
loads nothing.
"""

from ._base import lt_version, lt_version_int, version, version_int
from .blas import axpy, dot, gemv, nrm2, scal
from .batched import algo_cache, clear_algo_cache, gemm_batched, tune_gemm
from .gemm import (GEMM_ALGOS, GEMM_KEY, SUPPORTED, GemmArgs, GemmPlan, gemm, gemm_args,
                   gemm_backend, gemm_strided_batched, set_gemm_backend)
from .grouped import GROUPED_KEY, GROUPED_SUPPORTED, GroupedGemm, gemm_grouped
from .handle import WORKSPACE_BYTES, prepare, release_workspaces
from .lt import Matmul
from .matmul import (MATMUL_KEY, clear_matmul_cache, clear_plan_cache, matmul, matmul_cache,
                     plan_cache)
from .lt_desc import EPILOGUES, Epilogue, MatmulDesc, MatmulPreference, MatrixLayout

__all__ = ["version", "version_int", "lt_version", "lt_version_int",
           "gemm", "gemm_strided_batched", "gemm_batched", "tune_gemm", "algo_cache",
           "clear_algo_cache", "gemm_args", "GemmArgs", "SUPPORTED", "GEMM_ALGOS", "GemmPlan",
           "GEMM_KEY", "set_gemm_backend", "gemm_backend",
           "axpy", "scal", "dot", "nrm2", "gemv",
           "Matmul", "matmul", "MATMUL_KEY", "MatrixLayout", "MatmulDesc", "MatmulPreference",
           "EPILOGUES", "Epilogue", "matmul_cache", "clear_matmul_cache", "plan_cache",
           "clear_plan_cache", "WORKSPACE_BYTES",
           "prepare", "release_workspaces", "gemm_grouped", "GroupedGemm", "GROUPED_KEY",
           "GROUPED_SUPPORTED"]
