"""How large the GPU tier's hypothesis strategies draw, and how many examples, by profile.

Under the default profile (``ci``) the strategies keep their small bounds: many examples of
small problems, each quick.  ``HYPOTHESIS_PROFILE=wide`` (registered in tests/conftest.py)
draws fewer examples of problems large enough to cross the boundaries where kernels change
behaviour -- GEMM tiles and split-K, CUDA blocks of 1024 threads and warps of 32, cuDNN's
many-channel paths -- while every float64 reference on the host stays affordable.

- :func:`bound` gives a strategy's bound in force: the ``ci`` one or the ``wide`` one;
- :func:`fit` shrinks a drawn shape to a budget of elements (or of multiply-adds), so that a
  wide draw of several large dimensions at once cannot make a reference take minutes; under
  ``ci`` no shape reaches the budgets, so it returns every draw unchanged;
- :func:`gemm_sizes` draws ``(m, n, k)`` the way the GEMM tests always did, widened and fitted
  to a budget under ``wide``;
- :func:`examples` and :func:`gpu_settings`: a test module's example count, capped by the
  profile loaded (an explicit ``@settings(max_examples=...)`` overrides any profile, so
  without the cap ``wide``, ``sanitizer`` and ``triage`` would not reduce it).
"""

from __future__ import annotations

import math
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from cudalibs import testing as T

#: The profile tests/conftest.py loads (the same variable, the same default).
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
WIDE = PROFILE == "wide"

#: Multiply-adds one GEMM example may cost under ``wide``: about a second of float64 numpy
#: matmul (the reference and ``|A| @ |B|`` for the element-wise bound) on a few cores.
GEMM_BUDGET = 1 << 30
#: Multiply-adds of one convolution under ``wide``: about a tenth of a second for each
#: float64 reference (numpy, one filter tap at a time, not a BLAS call).
CONV_BUDGET = 1 << 27


def bound(ci, wide):
    """``ci`` under the default profile, ``wide`` under ``HYPOTHESIS_PROFILE=wide`` (sizes,
    or lists of sizes to sample)."""
    return wide if WIDE else ci


def examples(n: int) -> int:
    """A test's own example count, but no more than the loaded profile allows."""
    return min(int(n), settings.default.max_examples)


def gpu_settings(max_examples: int, **kw) -> settings:
    """The settings of a GPU test module: ``max_examples`` (capped by :func:`examples`), no
    deadline (a first call pays for loading, compiling and autotuning), and fixtures that
    live across examples (the device, the ``process_options`` fixture) allowed."""
    return settings(max_examples=examples(max_examples), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow], **kw)


def fit(shape, budget: int, keep=(), per: int = 1) -> tuple[int, ...]:
    """``shape`` with its largest dimensions halved (rounded up) until ``per`` times its
    element count is at most ``budget``; the dimensions at the indices in ``keep`` are left
    alone while any other can still shrink.  Dimensions of 0 or 1 stay as they are."""
    dims = [int(v) for v in shape]
    while math.prod(dims) * per > budget:
        free = [i for i, v in enumerate(dims) if v > 1 and i not in keep]
        if not free:
            free = [i for i, v in enumerate(dims) if v > 1]
            if not free:
                break
        i = max(free, key=lambda j: dims[j])
        dims[i] = (dims[i] + 1) // 2
    return tuple(dims)


def conv_macs(x_shape, w_shape, stride, padding, dilation, groups=1) -> int:
    """Multiply-adds of the convolution of ``x_shape`` with ``w_shape`` (what its float64
    reference costs)."""
    out = T.ref.conv_output_shape(x_shape, w_shape, stride, padding, dilation)
    return math.prod(out) * (x_shape[1] // groups) * math.prod(w_shape[2:])


def fit_spatial(x_shape, w_shape, stride, padding, dilation, groups=1, low=None,
                budget: int = CONV_BUDGET) -> tuple[int, ...]:
    """``x_shape`` with its largest spatial sides cut by a quarter (each no lower than its
    entry of ``low``, default 1) until the convolution fits ``budget`` multiply-adds."""
    x = list(x_shape)
    nsp = len(x) - 2
    low = [1] * nsp if low is None else list(low)
    while conv_macs(x, w_shape, stride, padding, dilation, groups) > budget:
        can = [j for j in range(nsp) if x[2 + j] > low[j]]
        if not can:
            break
        j = max(can, key=lambda i: x[2 + i])
        x[2 + j] = max(low[j], x[2 + j] * 3 // 4)
    return tuple(x)


def gemm_sizes(ci_side: int, wide_mn: int = 2049, wide_k: int = 4099,
               budget: int = GEMM_BUDGET):
    """Strategy: ``(m, n, k)``, each from :func:`cudalibs.testing.matrix_sizes`.

    ``ci``: each side up to ``ci_side``.  ``wide``: ``m`` and ``n`` up to ``wide_mn``, ``k`` up
    to ``wide_k`` -- a small ``m x n`` with a long ``k`` is what makes cuBLAS split the sum
    (split-K) --, then ``k`` reduced so that ``m n k`` fits ``budget``."""
    if not WIDE:
        return st.tuples(*(T.matrix_sizes(ci_side) for _ in range(3)))

    def cap(mnk):
        m, n, k = mnk
        return m, n, max(1, min(k, budget // (m * n)))

    return st.tuples(T.matrix_sizes(wide_mn), T.matrix_sizes(wide_mn),
                     T.matrix_sizes(wide_k)).map(cap)
